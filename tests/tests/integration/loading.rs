//! A backend restarted with a dataset to load: Redis answers `-LOADING …` to nearly every
//! command until it is done. Respite holds its new connection back (PING until the reply is
//! not `-LOADING`) so clients wait for the real reply within `op_timeout`; past it they get the
//! server's own `-LOADING …` line, byte for byte. The load is made slow with Redis's
//! `key-load-delay` (microseconds per key) on a small RDB.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, free_port};

/// Keys in the RDB: at [`DELAY_US`] each (a `usleep`, longer on a busy machine) the load
/// takes 3-8 s.
const KEYS: u32 = 30_000;
const DELAY_US: u32 = 100;

/// A redis-server on a fixed port and directory, so it can be killed and started again on the
/// RDB it saved.
struct Backend {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Backend {
    /// Starts it with `KEYS` keys (`key:N` = `value:N`) saved to its RDB.
    fn with_dataset() -> Backend {
        let mut b = Backend {
            port: free_port(),
            dir: tempfile::Builder::new()
                .prefix("respite-loading-")
                .tempdir()
                .expect("tempdir"),
            child: None,
        };
        b.spawn();
        assert!(
            wait_until(Duration::from_secs(10), || b.direct(&[b"PING"])
                == b"+PONG\r\n"),
            "backend did not start"
        );
        let mut c = b.raw();
        assert_eq!(
            c.cmd(&[b"DEBUG", b"POPULATE", KEYS.to_string().as_bytes()]),
            OK
        );
        assert_eq!(c.cmd(&[b"SAVE"]), OK);
        b
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn raw(&self) -> RawClient {
        RawClient::connect(&self.addr())
    }

    /// One command on a new direct connection (the reply, or empty if it could not connect).
    fn direct(&self, cmd: &[&[u8]]) -> Vec<u8> {
        match RawClient::try_connect(&self.addr()) {
            Ok(mut c) => c.try_cmd(cmd).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Starts redis-server; it loads `dump.rdb` from its directory, slowly.
    fn spawn(&mut self) {
        let dir: &Path = self.dir.path();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "yes"])
            .args(["--key-load-delay", &DELAY_US.to_string()])
            // Answer clients (with -LOADING) every KiB loaded, not every 2 MiB.
            .args(["--loading-process-events-interval-bytes", "1024"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
    }

    /// SIGKILLs it and starts it again on the same port and RDB; returns once it answers
    /// `-LOADING` directly.
    fn restart_loading(&mut self) -> Vec<u8> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn();
        let mut loading = Vec::new();
        assert!(
            wait_until(Duration::from_secs(10), || {
                loading = self.direct(&[b"GET", b"key:1"]);
                loading.starts_with(b"-LOADING")
            }),
            "the restarted backend is not loading: {}",
            show(&loading)
        );
        loading
    }

    fn loading(&self) -> bool {
        self.direct(&[b"PING"]).starts_with(b"-LOADING")
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn respite_over(backend: &Backend, op_timeout: &str) -> Respite {
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &[backend.addr()], 1, "").replace(
        "op_timeout = \"1s\"",
        &format!("op_timeout = \"{op_timeout}\""),
    );
    Respite::start(&cfg, port, admin)
}

const CX_LOADING: &str = "cluster.cache.upstream_cx_loading";
const RQ_LOADING: &str = "cluster.cache.upstream_rq_loading";

/// With `op_timeout` longer than the load: clients that send while the backend loads get the
/// real values once it is done, and none of them sees `-LOADING`.
#[test]
fn clients_wait_for_a_loading_backend() {
    let mut backend = Backend::with_dataset();
    let respite = respite_over(&backend, "30s");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"key:1"]), bulk(b"value:1"));

    let t0 = Instant::now();
    backend.restart_loading();
    // Respite reconnects (after its reconnect backoff) and finds the host loading.
    assert!(
        wait_until(Duration::from_secs(10), || respite.stat(CX_LOADING) >= 1),
        "respite's connection never saw the host loading; log:\n{}",
        respite.log()
    );
    // Four clients pipeline 100 GETs each while it loads.
    let senders: Vec<_> = (0..4u32)
        .map(|t| {
            let addr = respite.addr();
            std::thread::spawn(move || {
                let mut c = RawClient::connect(&addr);
                // The replies come when the load ends, seconds from now.
                c.stream()
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("read timeout");
                let keys: Vec<String> = (0..100u32)
                    .map(|i| format!("key:{}", t * 1000 + i))
                    .collect();
                let cmds: Vec<Vec<Vec<u8>>> = keys
                    .iter()
                    .map(|k| vec![b"GET".to_vec(), k.clone().into_bytes()])
                    .collect();
                let replies = c.pipeline(&cmds);
                keys.into_iter().zip(replies).collect::<Vec<_>>()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        backend.loading(),
        "the backend finished loading before the test could send during it"
    );
    let mut loading_replies = 0;
    for s in senders {
        for (k, r) in s.join().expect("sender") {
            if r.starts_with(b"-LOADING") {
                loading_replies += 1;
                continue;
            }
            let want = bulk(k.replace("key:", "value:").as_bytes());
            assert_eq!(show(&r), show(&want), "{k}");
        }
    }
    eprintln!(
        "400 GETs sent during the load answered after {:?} from the restart; {} LOADING",
        t0.elapsed(),
        loading_replies
    );
    assert_eq!(loading_replies, 0);
    assert_eq!(respite.stat(RQ_LOADING), 0);
    assert!(!respite.log().contains("ERROR"), "{}", respite.log());
}

/// With `op_timeout` shorter than the load: a request sent once the backend has been loading
/// for longer than `op_timeout` gets the server's own `-LOADING …` line, byte for byte, within
/// a poll (100 ms); once the load ends, requests succeed again.
#[test]
fn past_op_timeout_clients_get_the_servers_loading_error() {
    let mut backend = Backend::with_dataset();
    let respite = respite_over(&backend, "300ms");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"key:1"]), bulk(b"value:1"));

    let direct = backend.restart_loading();
    assert!(
        wait_until(Duration::from_secs(10), || respite.stat(CX_LOADING) >= 1),
        "respite's connection never saw the host loading"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(backend.loading(), "the load ended too soon for this test");
    let t = Instant::now();
    let r = c.cmd(&[b"GET", b"key:2"]);
    let took = t.elapsed();
    assert_eq!(show(&r), show(&direct), "the server's own LOADING line");
    assert_eq!(
        direct,
        b"-LOADING Redis is loading the dataset in memory\r\n".to_vec()
    );
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    assert!(respite.stat(RQ_LOADING) >= 1);

    let mut last = Vec::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            last = c.cmd(&[b"GET", b"key:3"]);
            last == bulk(b"value:3")
        }),
        "after the load: {}",
        show(&last)
    );
}

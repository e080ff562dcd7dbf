//! A listener or admin address another process listens on is refused: at start (the process
//! exits 1 naming the address) and at a reload (rejected, the running config stays), because the
//! workers' `SO_REUSEPORT` bind would otherwise join the other process's listeners and take part
//! of its connections. A hot restart (`respite --hot-restart`) is the one exception, until the
//! process it replaces begins to drain (docs/hot-restart.md).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, admin_get, simple_config};
use respite_tests::{RawClient, free_port, respite_bin};

/// Runs `respite <args>` until it exits (at most 10 s: a process that starts and serves instead
/// fails the test).
fn run_to_exit(args: &[&str]) -> Output {
    let mut child = Command::new(respite_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn respite");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "respite {args:?} started instead of exiting; log:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// What `respite --config <config>` printed on stderr as it failed to start.
fn start_error(config: &Path) -> String {
    let out = run_to_exit(&["--config", config.to_str().expect("utf-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    stderr
}

/// A second `[[listeners]]` table named `name` on `port`.
fn listener(name: &str, port: u16) -> String {
    format!(
        "[[listeners]]\nname = \"{name}\"\naddress = \"127.0.0.1:{port}\"\n\
         stat_prefix = \"{name}\"\nop_timeout = \"1s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n"
    )
}

const IN_USE: &str = "another process is listening on it (is a respite already running on this \
                      address? to replace a running respite, start the new one with \
                      --hot-restart: docs/hot-restart.md)";

/// `n` connections to `port`, each answered `+PONG`.
fn pings(port: u16, n: usize) {
    for _ in 0..n {
        let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
        assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
    }
}

/// Waits until `stat` of `r` reaches `want` (connections are counted as their worker accepts
/// them), then asserts it is exactly that.
fn assert_stat(r: &Respite, stat: &str, want: i64) {
    wait_until(Duration::from_secs(5), || r.stat(stat) >= want);
    assert_eq!(r.stat(stat), want, "{stat}");
}

/// A second respite on the same config, and one with another config but the same listener
/// port, both exit 1 naming the listener and the address; the first serves every connection
/// afterwards (200 of 200 counted in its stats: nothing went to a second process).
#[test]
fn a_second_respite_on_a_taken_listener_address_exits_and_the_first_keeps_every_connection() {
    let backends = servers(1);
    let a = Respite::over(&addrs(&backends), 2);
    let before = a.stat("redis.main.downstream_cx_total");

    let err = start_error(&a.config_path());
    assert_eq!(
        err.trim_end(),
        format!(
            "respite: listener main: bind 127.0.0.1:{}: {IN_USE}",
            a.port
        )
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("other.toml");
    let text = simple_config(a.port, free_port(), &addrs(&backends), 1, "")
        .replace("name = \"main\"", "name = \"other\"");
    fs::write(&other, text).expect("write config");
    let err = start_error(&other);
    assert_eq!(
        err.trim_end(),
        format!(
            "respite: listener other: bind 127.0.0.1:{}: {IN_USE}",
            a.port
        )
    );

    pings(a.port, 200);
    assert_stat(&a, "redis.main.downstream_cx_total", before + 200);
}

/// A respite killed a moment ago still listens until the kernel has torn down its io_uring (tens
/// of ms after it was reaped): a supervisor's restart right then must take the address, not be
/// refused as a second respite.
#[test]
fn a_respite_started_right_after_a_killed_one_takes_over_its_address() {
    let backends = servers(1);
    let mut previous = Respite::over(&addrs(&backends), 2);
    let (port, admin) = (previous.port, previous.admin_port);
    let config = fs::read_to_string(previous.config_path()).expect("read config");
    for _ in 0..3 {
        pings(port, 5);
        // Kills (SIGKILL) and reaps it, then starts the next one at once.
        drop(previous);
        previous = Respite::start(&config, port, admin);
        pings(port, 5);
    }
}

/// An admin address another process listens on makes start fail (exit 1, the address named),
/// not a warning followed by a process without an admin endpoint.
#[test]
fn a_busy_admin_address_makes_start_fail() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let admin_port = busy.local_addr().expect("addr").port();
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("respite.toml");
    fs::write(
        &config,
        simple_config(port, admin_port, &["127.0.0.1:1".into()], 1, ""),
    )
    .expect("write config");
    let err = start_error(&config);
    assert_eq!(
        err.trim_end(),
        format!("respite: admin: bind 127.0.0.1:{admin_port}: {IN_USE}")
    );
    // Nothing was left listening.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

/// A reload adding a listener on an address another respite listens on is rejected with the
/// reason; the running config stays, and every connection to that address reaches the other
/// process.
#[test]
fn a_reload_onto_an_address_another_respite_listens_on_is_rejected() {
    let backends = servers(1);
    let addrs = addrs(&backends);
    let a = Respite::over(&addrs, 2);
    let b = Respite::over(&addrs, 1);
    let b_before = b.stat("redis.main.downstream_cx_total");
    let text = simple_config(a.port, a.admin_port, &addrs, 2, "") + &listener("second", b.port);
    a.reload(&text);
    assert!(
        wait_until(Duration::from_secs(5), || a
            .log()
            .contains("config reload rejected")),
        "{}",
        a.log()
    );
    let want = format!("listener second: bind 127.0.0.1:{}: {IN_USE}", b.port);
    assert!(a.log().contains(&want), "{}", a.log());
    let (_, dump) = a.admin_get("/config_dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(
        dump["listeners"].as_array().map(Vec::len),
        Some(1),
        "{dump}"
    );

    pings(b.port, 20);
    assert_stat(&b, "redis.main.downstream_cx_total", b_before + 20);
    assert_eq!(a.stat("redis.second.downstream_cx_total"), 0);
}

/// A `respite --hot-restart` process with its log in a temp dir; killed on drop.
struct Successor {
    child: Option<Child>,
    config: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Successor {
    /// Starts `respite --hot-restart --config <file holding config>` and waits until it serves.
    fn start(config: &str) -> Successor {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, log) = (dir.path().join("b.toml"), dir.path().join("b.log"));
        fs::write(&path, config).expect("write config");
        let file = fs::File::create(&log).expect("log file");
        let child = Command::new(respite_bin())
            .arg("--hot-restart")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn respite");
        let s = Successor {
            child: Some(child),
            config: path,
            log,
            _dir: dir,
        };
        assert!(
            wait_until(Duration::from_secs(10), || s
                .log()
                .contains("respite started")),
            "the successor did not start; log:\n{}",
            s.log()
        );
        s
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Rewrites the config, sends SIGHUP and waits for the outcome: `Ok` when reloaded, `Err`
    /// with the log otherwise.
    fn reload(&self, config: &str) -> Result<(), String> {
        let seen = |s: &str| self.log().matches(s).count();
        let (ok, rejected) = (seen("config reloaded"), seen("config reload rejected"));
        fs::write(&self.config, config).expect("write config");
        let pid = self.child.as_ref().map(Child::id).expect("running");
        common::kill_sig("HUP", pid);
        let done = wait_until(Duration::from_secs(5), || {
            seen("config reloaded") > ok || seen("config reload rejected") > rejected
        });
        assert!(done, "no reload outcome; log:\n{}", self.log());
        if seen("config reloaded") > ok {
            Ok(())
        } else {
            Err(self.log())
        }
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A hot restart shares the old process's listeners, at start and in a reload, while the old
/// process has not begun to drain (it still holds the admin address); once it has drained, the
/// new process serves them alone, and an address a third process listens on is refused again.
#[test]
fn a_hot_restart_shares_listeners_until_the_old_process_drains() {
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (port, second, admin_port) = (free_port(), free_port(), free_port());
    let base = simple_config(port, admin_port, &addrs, 1, "");
    let with_second = base.clone() + &listener("second", second);
    let mut a = Respite::start(&with_second, port, admin_port);

    let b = Successor::start(&base);
    let log = b.log();
    assert!(log.contains("admin address in use"), "{log}");
    assert!(
        log.contains("hot restart: sharing the listener address"),
        "{log}"
    );
    b.reload(&with_second)
        .expect("a listener the old process holds is shared during the hand-over");

    a.signal("TERM");
    let status = a.wait_exit(Duration::from_secs(10)).expect("A exits");
    assert!(status.success(), "{status:?}");
    assert!(
        wait_until(Duration::from_secs(5), || admin_get_ok(admin_port)),
        "B did not take the admin address; log:\n{}",
        b.log()
    );
    pings(second, 10);
    let stats = |name: &str| -> i64 {
        let (_, body) = admin_get(admin_port, "/stats");
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    wait_until(Duration::from_secs(5), || {
        stats("redis.second.downstream_cx_total") >= 10
    });
    assert_eq!(stats("redis.second.downstream_cx_total"), 10);

    // The hand-over is over: another process's address is refused again.
    let c = Respite::over(&addrs, 1);
    let log = b
        .reload(&(with_second + &listener("third", c.port)))
        .expect_err("a listener on another process's address was applied");
    let want = format!("listener third: bind 127.0.0.1:{}: {IN_USE}", c.port);
    assert!(log.contains(&want), "{log}");
}

/// True once the admin endpoint on `port` answers `/ready` with 200.
fn admin_get_ok(port: u16) -> bool {
    respite_tests::admin::try_request(port, "GET", "/ready").is_ok_and(|(s, _)| s == 200)
}

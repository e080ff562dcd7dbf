//! xDS end to end: real redis-servers, `respite --control-socket SOCK` started
//! with no config, `respite-control --bootstrap --dataplane SOCK`, and the scripted management
//! server. Under a client load, the server adds a cluster and a route, swaps endpoints via EDS,
//! sends an invalid listener and drops the stream: traffic follows each valid change with zero
//! client errors; the invalid one is NACKed and traffic stays on the last good config.
//!
//! Needs `cargo build --release --bin respite --bin respite-control` first.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use respite_tests::xds::*;
use respite_tests::xds_resources::*;
use respite_tests::{RawClient, RedisServer, free_port, respite_bin, wait_for_port};
use serde_json::json;

const T: Duration = Duration::from_secs(10);

/// `respite --control-socket SOCK` with no config, killed on drop.
struct DataPlane {
    child: Child,
    dir: tempfile::TempDir,
}

impl DataPlane {
    fn start(sock: &Path) -> DataPlane {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = std::fs::File::create(dir.path().join("respite.log")).expect("log");
        let child = Command::new(respite_bin())
            .arg("--control-socket")
            .arg(sock)
            .args(["--admin", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn respite");
        let ok = wait_for(T, || sock.exists().then_some(()));
        let dp = DataPlane { child, dir };
        assert!(ok.is_some(), "no control socket: {}", dp.log());
        dp
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("respite.log")).unwrap_or_default()
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- respite log ----\n{}\n----", self.log());
        }
    }
}

fn ack(server: &XdsServer, type_url: &str, version: &str, nonce: &str) -> DiscoveryRequest {
    let r = server.expect_type(type_url, T, "reply").sotw().clone();
    assert_eq!(r.response_nonce, nonce, "{r:?}");
    assert!(r.error_detail.is_none(), "expected an ACK: {r:?}");
    assert_eq!(r.version_info, version);
    r
}

/// SETs fresh keys `prefix-N` through the proxy until one shows up on `backend`.
fn lands_on(proxy: SocketAddr, prefix: &str, backend: &RedisServer) -> bool {
    let mut c = RawClient::connect(&proxy.to_string());
    let mut direct = backend.raw();
    let deadline = Instant::now() + T;
    let mut i = 0;
    while Instant::now() < deadline {
        i += 1;
        let key = format!("{prefix}-{i}");
        let r = c.cmd(&[b"SET", key.as_bytes(), b"v"]);
        assert_eq!(r, b"+OK\r\n", "SET {key}: {}", String::from_utf8_lossy(&r));
        if direct.cmd(&[b"GET", key.as_bytes()]) == b"$1\r\nv\r\n" {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn traffic_follows_xds_changes_with_zero_errors() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let sock = sock_dir.path().join("control.sock");
    let _dp = DataPlane::start(&sock);
    let server = XdsServer::start();
    let ctl = ControlProcess::start(&bootstrap(server.addr(), false, json!({})), Some(&sock));
    let addr = |s: &RedisServer| -> SocketAddr { s.addr().parse().expect("addr") };
    let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));

    server.expect_type(LISTENER, T, "LDS");
    server.expect_type(CLUSTER, T, "CDS");
    server.send(sotw(
        CLUSTER,
        "c1",
        "nc1",
        vec![any(static_cluster("ca", &[addr(&a)]))],
    ));
    ack(&server, CLUSTER, "c1", "nc1");
    server.send(sotw(
        LISTENER,
        "l1",
        "nl1",
        vec![any(listener("l1", proxy, "ca"))],
    ));
    ack(&server, LISTENER, "l1", "nl1");
    assert!(
        wait_for_port(proxy.port(), T),
        "proxy never listened: {}",
        ctl.log()
    );

    // The load: catch-all keys (always on `a`), SET then GET on one connection.
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, errors, done) = (stop.clone(), errors.clone(), done.clone());
        std::thread::spawn(move || {
            let mut client = RawClient::connect(&proxy.to_string());
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("load-{i}");
                let val = format!("v{i}");
                let set = client.try_cmd(&[b"SET", key.as_bytes(), val.as_bytes()]);
                let get = client.try_cmd(&[b"GET", key.as_bytes()]);
                let want = format!("${}\r\n{val}\r\n", val.len()).into_bytes();
                if set.ok().as_deref() != Some(b"+OK\r\n") || get.ok() != Some(want) {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    // Add an EDS cluster and a route to it.
    let cs = vec![
        any(static_cluster("ca", &[addr(&a)])),
        any(eds_cluster("cb")),
    ];
    server.send(sotw(CLUSTER, "c2", "nc2", cs.clone()));
    ack(&server, CLUSTER, "c2", "nc2");
    server.expect_type(ENDPOINT, T, "EDS cb");
    server.send(sotw(
        ENDPOINT,
        "e1",
        "ne1",
        vec![any(cla("cb", &[addr(&b)]))],
    ));
    ack(&server, ENDPOINT, "e1", "ne1");
    let routed = listener_routes("l1", proxy, &[("b:", "cb")], Some("ca"));
    server.send(sotw(LISTENER, "l2", "nl2", vec![any(routed)]));
    ack(&server, LISTENER, "l2", "nl2");
    assert!(
        lands_on(proxy, "b:route", &b),
        "route b: → cb (b) not applied"
    );
    assert!(lands_on(proxy, "other", &a));

    // Swap cb's endpoints via EDS.
    server.send(sotw(
        ENDPOINT,
        "e2",
        "ne2",
        vec![any(cla("cb", &[addr(&c)]))],
    ));
    ack(&server, ENDPOINT, "e2", "ne2");
    assert!(lands_on(proxy, "b:swap", &c), "EDS swap to c not applied");

    // An invalid listener: NACKed, traffic stays on the last good config.
    server.send(sotw(
        LISTENER,
        "l3",
        "nl3",
        vec![any(bad_listener_over("l1", proxy, "ca"))],
    ));
    let nack = server.expect_type(LISTENER, T, "NACK").sotw().clone();
    assert_eq!(nack.response_nonce, "nl3");
    assert_eq!(nack.version_info, "l2");
    assert!(nack.error_detail.is_some(), "{nack:?}");
    assert!(lands_on(proxy, "b:after-nack", &c));

    // Drop and restore the stream: nothing changes, versions are re-sent.
    server.close_stream(tonic::Status::unavailable("restart"));
    let l = server.expect_type(LISTENER, Duration::from_secs(15), "LDS after reconnect");
    assert_eq!(l.stream, 2);
    assert_eq!(l.sotw().version_info, "l2");
    assert!(lands_on(proxy, "b:after-reconnect", &c));
    assert!(lands_on(proxy, "other-after", &a));

    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");
    let (n, e) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
    println!("load: {n} SET+GET pairs, {e} errors");
    assert!(n > 100, "the load ran: {n}");
    assert_eq!(e, 0, "client errors under config changes");
}

//! `respite-control` with file sources and the data plane's lifecycle: a data plane that restarts
//! (and so starts empty) gets the config again; SIGHUP re-reads a file, and in xDS mode only
//! re-pushes (it never kills the process).

use std::time::Duration;

use respite_tests::respite::Respite;
use respite_tests::xds::{ControlProcess, bootstrap, wait_for};
use respite_tests::{RawClient, RedisServer, free_port};

const T: Duration = Duration::from_secs(15);

fn config(port: u16, backend: &str) -> String {
    format!(
        "[[listeners]]\nname = \"main\"\naddress = \"127.0.0.1:{port}\"\nop_timeout = \"1s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n\
         [[clusters]]\nname = \"cache\"\nhosts = [\"{backend}\"]\n"
    )
}

/// SET then GET `key` through the proxy on `port`; None while it does not answer right.
fn round_trip(port: u16, key: &str) -> Option<()> {
    let addr = format!("127.0.0.1:{port}");
    std::net::TcpStream::connect(&addr).ok()?;
    let mut c = RawClient::connect(&addr);
    let set = c.try_cmd(&[b"SET", key.as_bytes(), b"v"]).ok()?;
    (set == b"+OK\r\n").then_some(())
}

#[test]
fn a_restarted_data_plane_gets_the_config_again_and_sighup_rereads_the_file() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("control.sock");
    let port = free_port();
    let mut dp = Respite::start_empty(&sock);
    let (ctl, file) = ControlProcess::start_file("--config", &config(port, &a.addr()), Some(&sock));
    wait_for(T, || round_trip(port, "k1")).unwrap_or_else(|| panic!("no traffic: {}", ctl.log()));
    assert_eq!(a.raw().cmd(&[b"GET", b"k1"]), b"$1\r\nv\r\n".to_vec());

    // The data plane dies and comes back empty on the same socket path: the config follows.
    dp.signal("KILL");
    dp.wait_exit(T);
    drop(dp);
    let _dp2 = Respite::start_empty(&sock);
    let back = wait_for(T, || round_trip(port, "k2"));
    assert!(
        back.is_some(),
        "not re-pushed to the new data plane: {}",
        ctl.log()
    );
    assert!(
        ctl.log().contains("the data plane restarted"),
        "{}",
        ctl.log()
    );

    // SIGHUP re-reads the file: the catch-all moves to b.
    std::fs::write(&file, config(port, &b.addr())).expect("rewrite");
    ctl.signal("HUP");
    let moved = wait_for(T, || {
        round_trip(port, "k3")?;
        (b.raw().cmd(&[b"GET", b"k3"]) == b"$1\r\nv\r\n".to_vec()).then_some(())
    });
    assert!(moved.is_some(), "SIGHUP did not re-apply: {}", ctl.log());
}

#[test]
fn sighup_in_xds_mode_does_not_kill_the_process() {
    // A management server address where nothing listens: the client backs off meanwhile.
    let nowhere = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut ctl = ControlProcess::start(&bootstrap(nowhere, false, serde_json::json!({})), None);
    for _ in 0..3 {
        ctl.signal("HUP");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(ctl.alive(), "SIGHUP killed respite-control: {}", ctl.log());
    let xds = ctl.xds_status();
    assert_eq!(xds["stream"]["connected"], false, "{xds}");
    assert!(xds["stream"]["last_error"].is_string(), "{xds}");
}

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

/// An Envoy bootstrap whose clusters live in a CDS file (`dynamic_resources.cds_config.path`,
/// Envoy's filesystem subscription, as in Envoy's `examples/redis`): served, and when the file
/// is replaced (written aside, then moved into place, as Envoy expects) the new cluster applies
/// without a signal.
#[test]
fn an_envoy_cds_file_is_followed_when_it_changes() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("control.sock");
    let cds = dir.path().join("cds.yaml");
    let cds_of = |backend: &RedisServer| {
        format!(
            "version_info: \"{port}\"\nresources:\n- \"@type\": \
             type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: cache\n  \
             connect_timeout: 1s\n  type: STATIC\n  load_assignment:\n    cluster_name: cache\n    \
             endpoints:\n    - lb_endpoints:\n      - endpoint:\n          address:\n            \
             socket_address: {{address: 127.0.0.1, port_value: {port}}}\n",
            port = backend.port
        )
    };
    std::fs::write(&cds, cds_of(&a)).expect("write cds");
    let port = free_port();
    let bootstrap = format!(
        "node: {{id: walk, cluster: test}}\ndynamic_resources:\n  cds_config:\n    path: \"{}\"\n\
         static_resources:\n  listeners:\n  - name: main\n    address:\n      socket_address: \
         {{address: 127.0.0.1, port_value: {port}}}\n    filter_chains:\n    - filters:\n      \
         - name: envoy.filters.network.redis_proxy\n        typed_config:\n          \"@type\": \
         type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy\n          \
         stat_prefix: main\n          settings: {{op_timeout: 1s}}\n          prefix_routes: \
         {{catch_all_route: {{cluster: cache}}}}\n",
        cds.display()
    );
    let _dp = Respite::start_empty(&sock);
    let (ctl, _file) = ControlProcess::start_file("--envoy-config", &bootstrap, Some(&sock));
    wait_for(T, || round_trip(port, "f1")).unwrap_or_else(|| panic!("no traffic: {}", ctl.log()));
    assert_eq!(a.raw().cmd(&[b"GET", b"f1"]), b"$1\r\nv\r\n".to_vec());

    let aside = dir.path().join("cds.yaml.new");
    std::fs::write(&aside, cds_of(&b)).expect("write cds aside");
    std::fs::rename(&aside, &cds).expect("move cds into place");
    let moved = wait_for(T, || {
        round_trip(port, "f2")?;
        (b.raw().cmd(&[b"GET", b"f2"]) == b"$1\r\nv\r\n".to_vec()).then_some(())
    });
    assert!(
        moved.is_some(),
        "the CDS file change did not apply: {}",
        ctl.log()
    );
    assert!(
        ctl.log().contains("a dynamic_resources file changed"),
        "{}",
        ctl.log()
    );
}

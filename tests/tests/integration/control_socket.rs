//! `respite --control-socket`: configs pushed over the Unix socket (`POST /config`) with the
//! control process's own client, against real redis-servers.

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{OK, Stopped, bulk, cmd, listening, servers, show, wait_until};
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port, respite_bin};

/// A socket path in a fresh temp dir (the dir must outlive the process).
fn socket_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("control.sock");
    (dir, path)
}

/// One listener on `port` whose catch-all goes to `catch_all`, and one static cluster per
/// `(name, backend)`.
fn config(port: u16, catch_all: &str, clusters: &[(&str, &str)]) -> String {
    let mut out = format!(
        r#"[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "{catch_all}"
"#
    );
    out.push_str(&clusters_toml(clusters));
    out
}

fn clusters_toml(clusters: &[(&str, &str)]) -> String {
    clusters
        .iter()
        .map(|(name, addr)| {
            format!(
                "[[clusters]]\nname = \"{name}\"\ntype = \"static\"\nconnect_timeout = \"250ms\"\n\
                 hosts = [\"{addr}\"]\n"
            )
        })
        .collect()
}

fn dbsize(server: &RedisServer) -> i64 {
    let reply = server.raw().cmd(&[b"DBSIZE"]);
    String::from_utf8_lossy(&reply)
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("DBSIZE answered {}", show(&reply)))
}

#[test]
fn started_empty_then_a_push_serves_traffic() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    assert_eq!(r.stat("control_socket.push_accepted"), 0);
    let (status, dump) = r.admin_get("/config_dump");
    assert_eq!(status, 200, "{dump}");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(dump["listeners"], serde_json::json!([]), "{dump}");
    assert_eq!(dump["clusters"], serde_json::json!([]), "{dump}");

    let port = free_port();
    assert!(!listening(port));
    r.push(&config(port, "cache", &[("cache", &backend.addr())]))
        .expect("push");
    assert!(listening(port), "the pushed listener is not open");
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v1"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v1"));
    assert_eq!(backend.raw().cmd(&[b"GET", b"k"]), bulk(b"v1"));
    assert_eq!(r.stat("control_socket.push_accepted"), 1);
    assert_eq!(r.stat("control_socket.push_rejected"), 0);
    let (_, dump) = r.admin_get("/config_dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(dump["listeners"][0]["name"], "main", "{dump}");
    // The running [admin] stays (as started: `--admin 127.0.0.1:0`), whatever the push said.
    assert_eq!(dump["admin"]["address"], "127.0.0.1:0", "{dump}");

    // SIGHUP without a config file changes nothing.
    r.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(5), || r
            .log()
            .contains("no config file to reload")),
        "log:\n{}",
        r.log()
    );
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v1"));
    // GET on /config is not a push.
    let (status, body) = r.control_request("GET", "/config");
    assert_eq!(status, 405, "{body}");
}

#[test]
fn an_invalid_push_is_refused_naming_key_and_line_and_the_old_config_stays() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    let port = free_port();
    r.push(&config(port, "cache", &[("cache", &backend.addr())]))
        .expect("push");
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"old"]), OK);

    // Line 11 is the lb_policy line: the listener takes lines 1-7, the cluster starts at 8.
    let bad = format!(
        "{}[[clusters]]\nname = \"cache\"\ntype = \"static\"\nlb_policy = \"nope\"\nhosts = [\"{}\"]\n",
        config(port, "cache", &[]),
        backend.addr()
    );
    assert_eq!(bad.lines().nth(10), Some("lb_policy = \"nope\""), "{bad}");
    let err = r.push(&bad).expect_err("an invalid config was applied");
    println!("rejected: {err}");
    assert!(err.starts_with("control socket:11:"), "{err}");
    assert!(err.contains("clusters[0].lb_policy"), "{err}");
    assert_eq!(r.stat("control_socket.push_rejected"), 1);
    assert_eq!(r.stat("control_socket.push_accepted"), 1);
    // The same connection and a new one both still work on the old config.
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"old"));
    let mut c2 = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c2.cmd(&[b"GET", b"k"]), bulk(b"old"));

    // Valid but not applicable: a second listener on an address something else holds.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let mut conflicting = config(port, "cache", &[("cache", &backend.addr())]);
    conflicting.push_str(&format!(
        "[[listeners]]\nname = \"second\"\naddress = \"127.0.0.1:{taken_port}\"\n\
         stat_prefix = \"second\"\nop_timeout = \"1s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n"
    ));
    let err = r
        .push(&conflicting)
        .expect_err("a listener on a taken port was applied");
    println!("not applied: {err}");
    assert!(err.contains("listener second: bind"), "{err}");
    assert_eq!(r.stat("control_socket.push_rejected"), 2);
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"old"));
    let (_, dump) = r.admin_get("/config_dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(
        dump["listeners"].as_array().map(Vec::len),
        Some(1),
        "{dump}"
    );
}

#[test]
fn a_client_pipelining_through_five_pushes_sees_no_error() {
    let backends = servers(2);
    let (a, b) = (backends[0].addr(), backends[1].addr());
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    let port = free_port();
    let clusters = [("a", a.as_str()), ("b", b.as_str())];
    r.push(&config(port, "a", &clusters)).expect("push");

    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let client = {
        let (stop, errors) = (stop.clone(), errors.clone());
        let addr = format!("127.0.0.1:{port}");
        std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<Vec<Vec<u8>>> = (0..50)
                    .map(|i| {
                        let k = format!("k{}", sent + i);
                        cmd(&[b"SET", k.as_bytes(), b"v"])
                    })
                    .collect();
                sent += 50;
                for reply in c.pipeline(&batch) {
                    if reply != OK {
                        errors.lock().unwrap().push(show(&reply));
                    }
                }
            }
            sent
        })
    };
    // The client's connection is open and counted before the baseline.
    assert!(wait_until(Duration::from_secs(5), || r
        .stat("redis.main.downstream_cx_total")
        == 1));
    let cx_before = r.stat("redis.main.downstream_cx_total");
    for i in 0..5 {
        std::thread::sleep(Duration::from_millis(150));
        let to = if i % 2 == 0 { "b" } else { "a" };
        let started = Instant::now();
        r.push(&config(port, to, &clusters)).expect("push");
        println!("push {i} (catch-all -> {to}) took {:?}", started.elapsed());
    }
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::Relaxed);
    let sent = client.join().expect("client thread");
    let errors = errors.lock().unwrap();
    println!(
        "{sent} SETs, {} errors, a holds {}, b holds {}",
        errors.len(),
        dbsize(&backends[0]),
        dbsize(&backends[1])
    );
    assert!(
        errors.is_empty(),
        "errors: {:?}",
        &errors[..errors.len().min(5)]
    );
    assert_eq!(r.stat("redis.main.downstream_cx_total"), cx_before);
    assert_eq!(r.stat("control_socket.push_accepted"), 6);
    // Traffic followed the switches: both backends got keys, and all of them together.
    let (da, db) = (dbsize(&backends[0]), dbsize(&backends[1]));
    assert!(da > 0 && db > 0, "a {da}, b {db}");
    assert_eq!((da + db) as u64, sent);
}

#[test]
fn removing_a_cluster_with_a_request_in_flight_answers_it_and_keeps_serving() {
    let backends = servers(2);
    let (slow, fast) = (backends[0].addr(), backends[1].addr());
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    let port = free_port();
    r.push(&config(port, "slow", &[("slow", &slow), ("fast", &fast)]))
        .expect("push");
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"slow"]), OK);
    backends[1].raw().cmd(&[b"SET", b"k", b"fast"]);

    let stopped = Stopped::new(backends[0].pid());
    c.send(&[b"GET", b"k"]);
    std::thread::sleep(Duration::from_millis(200));
    // The "slow" cluster goes away while its request waits.
    r.push(&config(port, "fast", &[("fast", &fast)]))
        .expect("push removing the cluster");
    let started = Instant::now();
    let reply = c.read_reply();
    println!(
        "in-flight reply after {:?}: {}",
        started.elapsed(),
        show(&reply)
    );
    assert!(
        reply.starts_with(b"-") || reply == bulk(b"slow"),
        "{}",
        show(&reply)
    );
    drop(stopped);
    // The same connection now goes to "fast"; the process still serves new connections.
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"fast"));
    let mut c2 = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c2.cmd(&[b"GET", b"k"]), bulk(b"fast"));
    assert_eq!(r.stat("redis.main.downstream_cx_total"), 2);
}

#[test]
fn an_eds_cluster_without_hosts_answers_no_upstream_host() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    let port = free_port();
    let eds = |hosts: &str| {
        format!(
            "{}[[clusters]]\nname = \"cache\"\ntype = \"eds\"\nhosts = [{hosts}]\n",
            config(port, "cache", &[])
        )
    };
    r.push(&eds("")).expect("push eds with no hosts");
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"GET", b"k"]), b"-no upstream host\r\n");
    // The endpoints arrive: the same connection is served.
    r.push(&eds(&format!("\"{}\"", backend.addr())))
        .expect("push eds with a host");
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(backend.raw().cmd(&[b"GET", b"k"]), bulk(b"v"));
}

#[test]
fn pushing_zero_listeners_closes_the_listener_and_pushing_it_back_reopens_it() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let r = Respite::start_empty(&sock);
    let port = free_port();
    let clusters = [("cache", backend.addr())];
    let clusters: Vec<(&str, &str)> = clusters.iter().map(|(n, a)| (*n, a.as_str())).collect();
    r.push(&config(port, "cache", &clusters)).expect("push");
    assert!(listening(port));

    r.push(&clusters_toml(&clusters))
        .expect("push zero listeners");
    assert!(
        wait_until(Duration::from_secs(5), || !listening(port)),
        "the listener still accepts"
    );
    let (_, dump) = r.admin_get("/config_dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(dump["listeners"], serde_json::json!([]), "{dump}");

    r.push(&config(port, "cache", &clusters))
        .expect("push it back");
    assert!(listening(port), "the listener did not reopen");
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
}

/// Starts a second `respite --control-socket path` and waits for it to exit: (success, log).
fn second_respite(path: &Path) -> (bool, String) {
    let out = tempfile::NamedTempFile::new().expect("log file");
    let mut child = Command::new(respite_bin())
        .arg("--control-socket")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(out.reopen().expect("log"))
        .stderr(out.reopen().expect("log"))
        .spawn()
        .expect("spawn respite");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the second respite did not exit: {}",
                std::fs::read_to_string(out.path()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(out.path()).unwrap_or_default();
    (status.success(), log)
}

#[test]
fn the_socket_is_owner_only_unique_replaced_when_stale_and_removed_on_exit() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let mut r = Respite::start_empty(&sock);
    let mode = std::fs::metadata(&sock)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // A second process on the live path refuses to start and leaves the first one alone.
    let (ok, log) = second_respite(&sock);
    println!("second respite: {log}");
    assert!(!ok, "the second respite started: {log}");
    assert!(log.contains("another process is listening"), "{log}");
    let port = free_port();
    r.push(&config(port, "cache", &[("cache", &backend.addr())]))
        .expect("the first respite still takes pushes");

    // SIGKILL leaves the file behind: the next process replaces it.
    let pid = r.pid();
    common::kill_sig("KILL", pid);
    assert!(r.wait_exit(Duration::from_secs(10)).is_some());
    assert!(sock.exists(), "a killed process cannot remove its socket");
    let mut r2 = Respite::start_empty(&sock);
    assert!(
        r2.log().contains("replacing a stale control socket"),
        "{}",
        r2.log()
    );
    r2.push(&config(port, "cache", &[("cache", &backend.addr())]))
        .expect("push to the replacement");

    // SIGTERM: the process drains, exits 0 and removes the socket file.
    r2.signal("TERM");
    let status = r2.wait_exit(Duration::from_secs(15)).expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "the socket file was left behind");
    drop(r);
}

/// respite-control's sockmap totals pushed over the real socket
/// (`POST /stats/external` with its own client) show in the admin endpoint's `/stats`, JSON and
/// Prometheus renders; a bad line is refused naming it, and nothing of that push is applied.
/// The `[sockmap]` table of the file is accepted, dumped and logged as ignored.
#[test]
fn external_stats_pushed_over_the_socket_show_in_admin_stats() {
    let backend = RedisServer::start();
    let (_dir, sock) = socket_path();
    let (port, admin_port) = (free_port(), free_port());
    let cfg = respite_tests::respite::simple_config(port, admin_port, &[backend.addr()], 1, "")
        + "[sockmap]\nenabled = true\nports = [6379, \"7000-7005\"]\n";
    let r = Respite::start_with_socket(&cfg, port, admin_port, &sock);
    let push = |body: &str| respite_control::push::push_stats(&sock, body);

    push("counter sockmap.redirect_total 40\ngauge sockmap.sockets 3\n").expect("first push");
    // Totals: the next push replaces them.
    push(
        "counter sockmap.redirect_total 41\ncounter sockmap.redirect_fail 2\n\n\
         gauge sockmap.sockets 5\ngauge sockmap.enabled 1\n",
    )
    .expect("second push");

    // The admin TCP endpoint, not the socket.
    let (status, text) = respite_tests::admin::request(admin_port, "GET", "/stats");
    assert_eq!(status, 200, "{text}");
    for line in [
        "sockmap.enabled: 1",
        "sockmap.redirect_fail: 2",
        "sockmap.redirect_total: 41",
        "sockmap.sockets: 5",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    let (status, json) = respite_tests::admin::request(admin_port, "GET", "/stats?format=json");
    assert_eq!(status, 200, "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("stats JSON");
    let stats = json["stats"].as_array().expect("stats array");
    assert!(
        stats.contains(&serde_json::json!({"name": "sockmap.redirect_total", "value": 41})),
        "{json}"
    );
    assert!(
        stats.contains(&serde_json::json!({"name": "sockmap.sockets", "value": 5})),
        "{json}"
    );
    let (status, prom) = respite_tests::admin::request(admin_port, "GET", "/stats/prometheus");
    assert_eq!(status, 200, "{prom}");
    for want in [
        "# TYPE envoy_sockmap_redirect_total counter\nenvoy_sockmap_redirect_total 41\n",
        "# TYPE envoy_sockmap_sockets gauge\nenvoy_sockmap_sockets 5\n",
    ] {
        assert!(prom.contains(want), "no {want:?} in\n{prom}");
    }

    // A bad second line: 400 naming it; the good first line is not applied either.
    let err = push("counter sockmap.redirect_total 99\ngauge sockmap.Sockets 9\n").unwrap_err();
    assert!(
        matches!(err, respite_control::push::PushError::Rejected(_)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "line 2: \"gauge sockmap.Sockets 9\": a name is [a-z0-9_] segments joined by single \
         dots; nothing applied"
    );
    let err = push("counter redis.main.downstream_cx_total 0\n").unwrap_err();
    assert!(
        err.to_string().contains("must start with \"sockmap.\""),
        "{err}"
    );
    assert_eq!(r.stat("sockmap.redirect_total"), 41);
    assert_eq!(r.stat("sockmap.sockets"), 5);
    assert!(!r.stats().contains_key("sockmap.Sockets"));

    // `[sockmap]` is in the dump and logged once as ignored; traffic is unaffected.
    let (_, dump) = r.admin_get("/config_dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("config_dump JSON");
    assert_eq!(
        dump["sockmap"],
        serde_json::json!({"enabled": true, "cgroup": null, "ports": [[6379, 6379], [7000, 7005]],
                           "upstreams": false, "bpffs": null}),
        "{dump}"
    );
    let log = r.log();
    assert_eq!(
        log.matches("[sockmap] is read by respite-control; the data plane ignores it")
            .count(),
        1,
        "{log}"
    );
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
}

/// The local ports of the TCP sockets process `pid` listens on, each once (a listener has a
/// socket per worker) (`/proc/<pid>/fd` against `/proc/net/tcp{,6}`).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                ports.extend(port);
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// `[admin] control_socket_only = true`: the process opens no TCP admin endpoint (it listens on
/// its listener's port alone) and the admin API answers on the control socket; without
/// `--control-socket`, or with `--hot-restart` (which hands over through the admin address),
/// it refuses to start, saying why.
#[test]
fn the_admin_api_can_be_served_on_the_control_socket_only() {
    let backend = RedisServer::start();
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("respite.toml");
    let text = config(port, "cache", &[("cache", &backend.addr())])
        + "[admin]\ncontrol_socket_only = true\n";
    std::fs::write(&file, text).expect("write config");

    // Refused at start, saying why, before its listener opens.
    let refused = |extra: &[&std::ffi::OsStr], why: &str| {
        let out = Command::new(respite_bin())
            .arg("--config")
            .arg(&file)
            .args(extra)
            .output()
            .expect("run respite");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started with {extra:?}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(!listening(port), "the refused process opened its listener");
    };
    refused(
        &[],
        "admin.control_socket_only = true needs --control-socket",
    );
    let (_sock_dir, sock) = socket_path();
    refused(
        &[
            "--control-socket".as_ref(),
            sock.as_os_str(),
            "--hot-restart".as_ref(),
        ],
        "--hot-restart hands over through the admin address",
    );

    let mut child = Command::new(respite_bin())
        .arg("--config")
        .arg(&file)
        .arg("--control-socket")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn respite");
    assert!(
        wait_until(Duration::from_secs(10), || listening(port)),
        "no listener on {port}"
    );
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let (status, stats) = respite_tests::admin::control_request(&sock, "GET", "/stats");
    assert_eq!(status, 200, "{stats}");
    assert!(
        stats.contains("redis.main.downstream_cx_total: "),
        "{stats}"
    );
    assert_eq!(listening_ports(child.id()), vec![port]);
    let _ = child.kill();
    let _ = child.wait();
}

//! The admin endpoints against the release binary and real redis-servers: `/clusters`
//! follows a backend killed and restarted; `/healthcheck/fail|ok` drive `/ready`;
//! `/config_dump` never shows a password; `/logging` changes the live log filter; `/stats`
//! filters by regex and answers JSON; requests a browser page may have sent change nothing.

use crate::common;

use std::time::Duration;

use common::*;
use respite_tests::admin::{clusters, post, request};
use respite_tests::respite::simple_config;
use respite_tests::{RawClient, RedisServer, Respite, free_port};
use serde_json::Value;

/// Active checks every 200ms, 2 failures to fail, 2 passes to recover.
const HEALTH_CHECK: &str = "[[clusters.health_checks]]\ninterval = \"200ms\"\n\
     interval_jitter = \"20ms\"\ntimeout = \"100ms\"\nunhealthy_threshold = 2\n\
     healthy_threshold = 2\nno_traffic_interval = \"200ms\"\n";

fn json(respite: &Respite, path: &str) -> Value {
    let (status, body) = respite.admin_get(path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The host entry of `addr` in `/clusters?format=json`.
fn json_host(respite: &Respite, addr: &str) -> Value {
    let v = json(respite, "/clusters?format=json");
    let (ip, port) = addr.split_once(':').unwrap();
    v["cluster_statuses"][0]["host_statuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| {
            h["address"]["socket_address"]["address"] == ip
                && h["address"]["socket_address"]["port_value"] == port.parse::<u64>().unwrap()
        })
        .cloned()
        .unwrap_or_else(|| panic!("{addr} not in /clusters json: {v}"))
}

fn host_stat_json(host: &Value, name: &str) -> u64 {
    host["stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .and_then(|s| s["value"].as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {host}"))
}

#[test]
fn clusters_follow_a_backend_killed_and_restarted() {
    let mut backends = servers(2);
    let addrs = addrs(&backends);
    let placement = Placement::new(&addrs);
    let (port, admin) = (free_port(), free_port());
    let mut cfg = simple_config(port, admin, &addrs, 1, "");
    cfg.push_str(HEALTH_CHECK);
    let respite = Respite::start(&cfg, port, admin);
    let (dead, alive) = (addrs[0].clone(), addrs[1].clone());
    let fact = |host: &str, k: &str| -> String {
        clusters(admin)
            .get(&("cache".into(), host.into(), k.into()))
            .cloned()
            .unwrap_or_else(|| panic!("no cache::{host}::{k} in /clusters"))
    };

    // Traffic to both hosts.
    let key = placement.key_on(0, "k");
    let mut c = respite.raw();
    for _ in 0..10 {
        assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"v"]), OK);
    }
    assert_eq!(fact(&dead, "health_flags"), "healthy");
    assert_eq!(fact(&alive, "health_flags"), "healthy");
    assert_eq!(fact(&dead, "weight"), "1");
    assert_eq!(fact(&dead, "hostname"), "");
    let rq_before: u64 = fact(&dead, "rq_total").parse().unwrap();
    assert!(rq_before >= 10, "rq_total {rq_before}");
    assert_eq!(
        host_stat_json(&json_host(&respite, &dead), "rq_total"),
        rq_before
    );
    let has_host_cx_active = respite
        .stats()
        .contains_key(&format!("cluster.cache.host.{dead}.cx_active"));
    if has_host_cx_active {
        assert_eq!(fact(&dead, "cx_active"), "1");
    } else {
        println!("note: no per-host cx_active stat in this build; /clusters shows 0");
    }
    let err_before: u64 = fact(&dead, "rq_error").parse().unwrap();

    // Kill it with a request in flight (written while the server was stopped): that request
    // fails and counts in rq_error; later ones fail fast (`no upstream host`) without reaching
    // the host. Then the health check fails it.
    let stopped = Stopped::new(backends[0].pid());
    c.send(&[b"GET", key.as_bytes()]);
    std::thread::sleep(Duration::from_millis(100));
    backends[0].kill();
    std::mem::forget(stopped); // nothing left to SIGCONT
    let r = c.read_reply();
    assert_eq!(r, b"-upstream failure\r\n", "{}", show(&r));
    let detected = wait_until(Duration::from_secs(10), || {
        fact(&dead, "health_flags") == "/failed_active_hc"
    });
    assert!(
        detected,
        "never failed: {}",
        respite.admin_get("/clusters").1
    );
    let err_after: u64 = fact(&dead, "rq_error").parse().unwrap();
    println!("killed: rq_error {err_before} -> {err_after}");
    assert!(
        err_after > err_before,
        "rq_error {err_before} -> {err_after}"
    );
    assert_eq!(fact(&alive, "health_flags"), "healthy");
    if has_host_cx_active {
        assert_eq!(fact(&dead, "cx_active"), "0");
    }
    let h = json_host(&respite, &dead);
    assert_eq!(
        h["health_status"]["failed_active_health_check"], true,
        "{h}"
    );
    assert_eq!(h["health_status"]["failed_outlier_check"], false, "{h}");
    assert_eq!(host_stat_json(&h, "rq_error"), err_after);
    assert_eq!(
        json_host(&respite, &alive)["health_status"]["failed_active_health_check"],
        false
    );

    // Restart it: healthy again.
    backends[0].restart();
    let back = wait_until(Duration::from_secs(10), || {
        fact(&dead, "health_flags") == "healthy"
    });
    assert!(
        back,
        "never healthy again: {}",
        respite.admin_get("/clusters").1
    );
    assert_eq!(
        json_host(&respite, &dead)["health_status"]["failed_active_health_check"],
        false
    );
    assert!(wait_until(Duration::from_secs(5), || {
        RawClient::connect(&respite.addr()).cmd(&[b"SET", key.as_bytes(), b"v"]) == OK
    }));
}

#[test]
fn healthcheck_fail_makes_ready_503_and_ok_undoes_it() {
    let backend = RedisServer::start();
    let respite = Respite::over(&[backend.addr()], 1);
    let admin = respite.admin_port;
    assert_eq!(respite.admin_get("/ready"), (200, "LIVE\n".into()));
    assert_eq!(respite.admin_get("/healthcheck/fail").0, 405);
    assert_eq!(
        respite.admin_get("/ready").0,
        200,
        "GET must not change state"
    );
    assert_eq!(post(admin, "/healthcheck/fail"), (200, "OK\n".into()));
    assert_eq!(respite.admin_get("/ready"), (503, "DRAINING\n".into()));
    // Traffic still flows: only the readiness signal changed.
    assert_eq!(respite.raw().cmd(&[b"PING"]), b"+PONG\r\n");
    assert_eq!(post(admin, "/healthcheck/ok"), (200, "OK\n".into()));
    assert_eq!(respite.admin_get("/ready"), (200, "LIVE\n".into()));
    assert_eq!(request(admin, "POST", "/ready").0, 405);
    assert_eq!(respite.admin_get("/no/such/endpoint").0, 404);
    let (status, help) = respite.admin_get("/help");
    assert_eq!(status, 200);
    for p in [
        "/stats",
        "/stats/prometheus",
        "/clusters",
        "/config_dump",
        "/ready",
        "/healthcheck/fail",
        "/healthcheck/ok",
        "/logging",
        "/hot_keys",
        "/drain_listeners",
    ] {
        assert!(
            help.contains(&format!("  {p}")),
            "{p} not in /help:\n{help}"
        );
    }
}

/// Sends `head` (request line and headers, without the blank line) over a fresh TCP connection
/// to the admin port, as a browser or curl would; returns (status, body).
fn raw_http(port: u16, head: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{head}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (top, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = top.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// A request that changes state and that a browser page may have sent (an `Origin` header, or a
/// `Host` that is not local: DNS rebinding) is refused with 403 and changes nothing; the same
/// requests from a local tool, and every read, still work.
#[test]
fn browser_requests_cannot_change_state() {
    let backend = RedisServer::start();
    let respite = Respite::over(&[backend.addr()], 1);
    let admin = respite.admin_port;
    let local = format!("Host: 127.0.0.1:{admin}");
    let evil_origin = "Origin: https://evil.example";
    let rebound = format!("Host: evil.example:{admin}");
    let refused = |head: &str, why: &str| {
        let (status, body) = raw_http(admin, head);
        assert_eq!(status, 403, "{head}: {body}");
        assert!(
            body.starts_with("forbidden: ") && body.contains(why),
            "{head}: {body}"
        );
    };
    for path in [
        "/healthcheck/fail",
        "/healthcheck/ok",
        "/logging?level=debug",
        "/drain_listeners",
    ] {
        refused(
            &format!("POST {path} HTTP/1.1\r\n{local}\r\n{evil_origin}"),
            "Origin",
        );
        refused(
            &format!("POST {path} HTTP/1.1\r\n{local}\r\nOrigin: null"),
            "Origin",
        );
        refused(&format!("POST {path} HTTP/1.1\r\n{rebound}"), "Host");
    }
    // Other methods are checked before the 405.
    refused(
        &format!("PUT /ready HTTP/1.1\r\n{local}\r\n{evil_origin}"),
        "Origin",
    );
    assert_eq!(
        raw_http(admin, &format!("PUT /ready HTTP/1.1\r\n{local}")).0,
        405
    );
    // Nothing changed: still ready, same log filter, still serving.
    assert_eq!(respite.admin_get("/ready"), (200, "LIVE\n".into()));
    let (_, filter) = respite.admin_get("/logging");
    assert!(!filter.contains("debug"), "{filter}");
    assert_eq!(respite.raw().cmd(&[b"PING"]), b"+PONG\r\n");

    // Reads are not checked.
    let (status, body) = raw_http(
        admin,
        &format!("GET /stats?filter=downstream_cx_total HTTP/1.1\r\n{rebound}\r\n{evil_origin}"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("redis.main.downstream_cx_total: "), "{body}");

    // Local requests change state: by IP, as localhost, as [::1], and without Host (HTTP/1.0).
    assert_eq!(
        raw_http(
            admin,
            &format!("POST /healthcheck/fail HTTP/1.1\r\n{local}")
        ),
        (200, "OK\n".into())
    );
    assert_eq!(respite.admin_get("/ready").0, 503);
    assert_eq!(
        raw_http(
            admin,
            &format!("POST /healthcheck/ok HTTP/1.1\r\nHost: localhost:{admin}")
        ),
        (200, "OK\n".into())
    );
    assert_eq!(respite.admin_get("/ready").0, 200);
    assert_eq!(
        raw_http(
            admin,
            &format!("POST /healthcheck/fail HTTP/1.1\r\nHost: [::1]:{admin}")
        )
        .0,
        200
    );
    assert_eq!(raw_http(admin, "POST /healthcheck/ok HTTP/1.0").0, 200);
    assert_eq!(respite.admin_get("/ready").0, 200);
    // curl (installed by .ci/run), as an operator would run it, and as a page would send it.
    let curl = |extra: &[&str], path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
            .args(extra)
            .arg(format!("http://127.0.0.1:{admin}{path}"))
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(&[], "/healthcheck/fail"), "200");
    assert_eq!(respite.admin_get("/ready").0, 503);
    assert_eq!(
        curl(&["-H", "Origin: https://evil.example"], "/healthcheck/ok"),
        "403"
    );
    assert_eq!(respite.admin_get("/ready").0, 503);
    assert_eq!(curl(&[], "/healthcheck/ok"), "200");
    assert_eq!(respite.admin_get("/ready").0, 200);
}

#[test]
fn config_dump_never_contains_a_password() {
    const UP: &str = "upstream-Secret-7f3a";
    const DOWN1: &str = "downstream-Secret-91c2";
    const DOWN2: &str = "downstream-Secret-55e0";
    // requirepass set after start: the harness's readiness PING does not authenticate.
    let backend = RedisServer::start();
    assert_eq!(
        backend
            .raw()
            .cmd(&[b"CONFIG", b"SET", b"requirepass", UP.as_bytes()]),
        OK
    );
    let (port, admin) = (free_port(), free_port());
    let cfg = |op_timeout: &str, down: &str| {
        format!(
            r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 1
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
op_timeout = "{op_timeout}"
downstream_auth_passwords = ["{DOWN1}", "{down}"]
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
auth_password = "{UP}"
connect_timeout = "250ms"
hosts = ["{}"]
"#,
            backend.addr()
        )
    };
    let respite = Respite::start(&cfg("750ms", DOWN2), port, admin);
    // The passwords are real: a client must AUTH, and the upstream AUTH works.
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"GET", b"k"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.cmd(&[b"AUTH", DOWN2.as_bytes()]), OK);
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);

    let check = |want_op: &str| {
        let (status, body) = respite.admin_get("/config_dump");
        assert_eq!(status, 200, "{body}");
        for secret in [UP, DOWN1, DOWN2] {
            assert!(!body.contains(secret), "{secret} in /config_dump:\n{body}");
        }
        let v: Value = serde_json::from_str(&body).expect("json");
        let l = &v["listeners"][0];
        assert_eq!(l["op_timeout"], want_op, "{body}");
        assert_eq!(
            l["downstream_auth_passwords"],
            serde_json::json!(["[redacted]", "[redacted]"])
        );
        assert_eq!(l["address"], format!("127.0.0.1:{port}"));
        assert_eq!(l["stat_prefix"], "main");
        let cl = &v["clusters"][0];
        assert_eq!(cl["auth_password"], "[redacted]");
        assert_eq!(cl["connect_timeout"], "250ms");
        assert_eq!(cl["hosts"][0]["address"], backend.addr());
        assert_eq!(cl["type"], "static");
        assert_eq!(v["admin"]["address"], format!("127.0.0.1:{admin}"));
        assert_eq!(v["runtime"]["workers"], 1);
    };
    check("750ms");
    // After a reload the dump is the new config, still without secrets.
    respite.reload(&cfg("2s", "downstream-Secret-0bd4"));
    assert!(
        wait_until(Duration::from_secs(5), || {
            let (_, body) = respite.admin_get("/config_dump");
            body.contains("\"2s\"")
        }),
        "reload not shown: {}",
        respite.log()
    );
    check("2s");
    assert!(!respite.admin_get("/config_dump").1.contains("0bd4"));
}

#[test]
fn logging_level_changes_the_live_filter() {
    let backend = RedisServer::start();
    let respite = Respite::over(&[backend.addr()], 1);
    let admin = respite.admin_port;
    let initial = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    assert_eq!(
        respite.admin_get("/logging"),
        (200, format!("log filter: {initial}\n"))
    );
    // A debug event: the backend closes Respite's upstream connection.
    let close_upstream = || {
        // (Right after a kill the upstream connection is in reconnect backoff: retry.)
        assert!(wait_until(Duration::from_secs(5), || {
            respite.raw().cmd(&[b"SET", b"k", b"v"]) == OK
        }));
        let mut direct = backend.raw();
        let killed = direct.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
        assert!(killed.starts_with(b":"), "{}", show(&killed));
    };
    let debug_lines = || respite.log().matches("upstream connection closed").count();
    if initial == "info" {
        close_upstream();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(debug_lines(), 0, "debug line at info:\n{}", respite.log());
    }

    // GET cannot change it; a bad directive is refused and the filter stays.
    assert_eq!(respite.admin_get("/logging?level=debug").0, 405);
    let (status, body) = post(admin, "/logging?level=respite%3Dnot_a_level");
    println!("bad level: {status} {body}");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid level"), "{body}");
    assert_eq!(
        respite.admin_get("/logging").1,
        format!("log filter: {initial}\n")
    );

    assert_eq!(
        post(admin, "/logging?level=debug"),
        (200, "log filter: debug\n".into())
    );
    assert_eq!(respite.admin_get("/logging").1, "log filter: debug\n");
    let before = debug_lines();
    close_upstream();
    assert!(
        wait_until(Duration::from_secs(5), || debug_lines() > before),
        "no debug line after /logging?level=debug:\n{}",
        respite.log()
    );
    // And back: debug events stop.
    assert_eq!(post(admin, "/logging?level=info").0, 200);
    let before = debug_lines();
    close_upstream();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(debug_lines(), before);
}

#[test]
fn json_log_format_writes_one_object_per_line() {
    let backend = RedisServer::start();
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &[backend.addr()], 1, "")
        .replace("[runtime]\n", "[runtime]\nlog_format = \"json\"\n");
    let respite = Respite::start(&cfg, port, admin);
    let log = respite.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{l}");
    }
    assert!(log.contains("respite started"), "{log}");
}

#[test]
fn stats_filter_regex_and_json() {
    let backend = RedisServer::start();
    let respite = Respite::over(&[backend.addr()], 2);
    let mut c = respite.raw();
    for i in 0..7 {
        assert_eq!(c.cmd(&[b"SET", format!("k{i}").as_bytes(), b"v"]), OK);
    }
    for i in 0..3 {
        assert_eq!(c.cmd(&[b"GET", format!("k{i}").as_bytes()]), bulk(b"v"));
    }
    let (status, body) =
        respite.admin_get("/stats?filter=%5Eredis%5C.main%5C.command%5C.(get%7Cset)%5C.total%24");
    assert_eq!(status, 200);
    assert_eq!(
        body,
        "redis.main.command.get.total: 3\nredis.main.command.set.total: 7\n"
    );
    let (status, body) = respite.admin_get("/stats?filter=(get");
    assert_eq!(status, 400);
    assert!(body.contains("invalid regex"), "{body}");
    let (status, body) = respite.admin_get("/stats/prometheus?filter=command%5C.set%5C.total%24");
    assert_eq!(status, 200);
    assert_eq!(
        body,
        "# TYPE envoy_redis_command_set_total counter\n\
         envoy_redis_command_set_total{envoy_redis_prefix=\"main\"} 7\n\
         # TYPE envoy_redis_command_total counter\n\
         envoy_redis_command_total{envoy_redis_prefix=\"main\",envoy_redis_command=\"set\"} 7\n"
    );
    assert_eq!(
        respite
            .admin_get("/stats?format=prometheus&filter=command%5C.set%5C.total%24")
            .1,
        body
    );

    // JSON carries the same values as the text.
    let v = json(&respite, "/stats?format=json");
    let text = respite.stats();
    let mut seen = 0;
    for s in v["stats"].as_array().unwrap() {
        if let Some(name) = s["name"].as_str() {
            assert_eq!(
                Some(s["value"].as_i64().unwrap()),
                text.get(name).copied(),
                "{name}"
            );
            seen += 1;
        } else {
            assert!(s["histograms"].is_object(), "{s}");
        }
    }
    assert_eq!(seen, text.len());
    let v = json(
        &respite,
        "/stats?format=json&filter=command%5C.get%5C.success",
    );
    assert_eq!(
        v,
        serde_json::json!({"stats": [{"name": "redis.main.command.get.success", "value": 3}]})
    );
}

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::stats::hotkeys::{BigValue, HotKeysReport};

const CONFIG: &str = "[[listeners]]\nname = \"m\"\naddress = \"127.0.0.1:0\"\nop_timeout = \"1s\"\n\
     [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
     [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n";

fn ctx_with(stats: Arc<Store>, config: &str, log: Option<LogControl>) -> Arc<AdminContext> {
    let config = crate::config::parse(config, "t.toml").unwrap();
    AdminContext::new(stats, Arc::new(config), Arc::default(), log)
}

fn ctx(stats: Arc<Store>) -> Arc<AdminContext> {
    ctx_with(stats, CONFIG, None)
}

fn store() -> Arc<Store> {
    let s = Store::new();
    s.counter("redis.egress.downstream_cx_total", 0).add(5);
    s.counter("redis.egress.downstream_cx_total", 1).add(2);
    s.gauge("redis.egress.downstream_cx_active", 1).inc();
    s.counter("cluster.cache.upstream_internal_redirect_failed_total", 0)
        .add(3);
    s
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Sends `method path` over a real TCP connection; returns (status, headers, body).
fn get(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn body_json(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, JSON_CONTENT_TYPE);
    serde_json::from_str(&r.body).unwrap()
}

#[test]
fn serves_stats_endpoints_over_http() {
    let admin = spawn(local(), ctx(store())).unwrap();
    let addr = admin.local_addr;
    assert_ne!(addr.port(), 0);

    let (st, head, body) = get(addr, "GET", "/stats");
    assert_eq!(st, 200);
    assert!(
        head.contains("content-type: text/plain; charset=utf-8"),
        "{head}"
    );
    assert_eq!(
        body,
        "cluster.cache.upstream_internal_redirect_failed_total: 3\n\
         redis.egress.downstream_cx_active: 1\n\
         redis.egress.downstream_cx_total: 7\n"
    );

    let (st, _, body) = get(addr, "GET", "/stats?filter=cx_total");
    assert_eq!(st, 200);
    assert_eq!(body, "redis.egress.downstream_cx_total: 7\n");
    let (_, _, body) = get(addr, "GET", "/stats?usedonly&filter=%5E%63luster%5C.");
    assert_eq!(
        body,
        "cluster.cache.upstream_internal_redirect_failed_total: 3\n"
    );
    let (_, _, body) = get(addr, "GET", "/stats?filter=");
    assert_eq!(body.lines().count(), 3);
    let (_, _, body) = get(addr, "GET", "/stats?filter=nomatch");
    assert_eq!(body, "");

    let (st, head, body) = get(addr, "GET", "/stats/prometheus");
    assert_eq!(st, 200);
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(
        body,
        "# TYPE envoy_cluster_upstream_internal_redirect_failed_total counter\n\
         envoy_cluster_upstream_internal_redirect_failed_total{envoy_cluster_name=\"cache\"} 3\n\
         # TYPE envoy_redis_downstream_cx_active gauge\n\
         envoy_redis_downstream_cx_active{envoy_redis_prefix=\"egress\"} 1\n\
         # TYPE envoy_redis_downstream_cx_total counter\n\
         envoy_redis_downstream_cx_total{envoy_redis_prefix=\"egress\"} 7\n"
    );
    crate::stats::tests_support::check_exposition(&body);

    let (st, head, body) = get(addr, "GET", "/stats?format=json");
    assert_eq!(st, 200);
    assert!(head.contains("content-type: application/json"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stats"].as_array().unwrap().len(), 3);

    let (st, _, body) = get(addr, "GET", "/ready");
    assert_eq!((st, body.as_str()), (200, "LIVE\n"));
    let (st, _, body) = get(addr, "GET", "/help");
    assert_eq!(st, 200);
    assert!(body.contains("/stats/prometheus"), "{body}");

    let (st, _, _) = get(addr, "GET", "/nope");
    assert_eq!(st, 404);
    let (st, _, _) = get(addr, "POST", "/stats");
    assert_eq!(st, 405);
    let (st, _, body) = get(addr, "POST", "/healthcheck/fail");
    assert_eq!((st, body.as_str()), (200, "OK\n"));
    let (st, _, body) = get(addr, "GET", "/ready");
    assert_eq!((st, body.as_str()), (503, "DRAINING\n"));
}

#[test]
fn stats_are_read_live() {
    let s = Store::new();
    let c = s.counter("redis.p.downstream_rq_total", 0);
    let admin = spawn(local(), ctx(Arc::clone(&s))).unwrap();
    assert_eq!(
        get(admin.local_addr, "GET", "/stats").2,
        "redis.p.downstream_rq_total: 0\n"
    );
    c.add(41);
    c.inc();
    assert_eq!(
        get(admin.local_addr, "GET", "/stats").2,
        "redis.p.downstream_rq_total: 42\n"
    );
}

#[test]
fn port_in_use_is_an_error() {
    let taken = TcpListener::bind(local()).unwrap();
    let err = spawn(taken.local_addr().unwrap(), ctx(Store::new())).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);

    let admin = spawn(local(), ctx(Store::new())).unwrap();
    let err = spawn(admin.local_addr, ctx(Store::new())).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
}

#[test]
fn drop_stops_the_server_and_frees_the_port() {
    let admin = spawn(local(), ctx(Store::new())).unwrap();
    let addr = admin.local_addr;
    assert_eq!(get(addr, "GET", "/ready").0, 200);
    drop(admin); // joins the serving thread
    // tiny_http's accept thread closes the listener asynchronously; the port frees up shortly.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("port still bound after drop: {e}"),
        }
    }
}

#[test]
fn routes_methods_and_query_decoding() {
    let s = ctx(store());
    assert_eq!(route(true, "/", &s).body, help_text());
    assert_eq!(route(true, "/stats/", &s).status, 404);
    assert_eq!(route(false, "/ready", &s).status, 405);
    assert_eq!(route(true, "/drain_listeners", &s).status, 405);
    assert_eq!(
        route(false, "/drain_listeners", &s).body,
        format!("OK draining pid={}\n", std::process::id())
    );
    for p in ["/healthcheck/fail", "/healthcheck/ok"] {
        assert_eq!(route(true, p, &s).status, 405, "{p}");
    }
    for p in [
        "/stats",
        "/stats/prometheus",
        "/clusters",
        "/config_dump",
        "/hot_keys",
        "/help",
    ] {
        assert_eq!(route(false, p, &s).status, 405, "{p}");
        assert_eq!(route(true, p, &s).status, 200, "{p}");
    }
    // Every endpoint is in /help.
    let help = help_text();
    for e in ENDPOINTS {
        assert!(help.contains(&format!("  {}", e.path)), "{}", e.path);
    }

    let q = Query::parse("a=1&filter=x%20y+z&flag&bad=%zz%4");
    assert_eq!(q.get("filter"), Some("x y z"));
    assert_eq!(q.get("bad"), Some("%zz%4"));
    assert_eq!(q.get("flag"), Some(""));
    assert!(q.has("flag") && !q.has("nope"));
    assert_eq!(
        route(true, "/stats?filter=active", &s).body,
        "redis.egress.downstream_cx_active: 1\n"
    );
    assert_eq!(route(true, "/stats?format=xml", &s).status, 400);
    assert_eq!(route(true, "/clusters?format=xml", &s).status, 400);
}

#[test]
fn stats_filter_is_a_regex_and_a_bad_one_is_400() {
    let s = ctx(store());
    assert_eq!(
        route(true, "/stats?filter=%5Eredis%5C..*_(active|nope)%24", &s).body,
        "redis.egress.downstream_cx_active: 1\n"
    );
    // Unanchored search, as Envoy's std::regex_search.
    assert_eq!(
        route(true, "/stats?filter=cx_t", &s).body,
        "redis.egress.downstream_cx_total: 7\n"
    );
    let bad = route(true, "/stats?filter=(unclosed", &s);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("invalid regex"), "{}", bad.body);
    assert!(bad.body.contains("unclosed group"), "{}", bad.body);
    assert_eq!(route(true, "/stats/prometheus?filter=%5B", &s).status, 400);
    let p = route(true, "/stats/prometheus?filter=downstream_cx_t.tal", &s);
    assert_eq!(p.content_type, PROMETHEUS_CONTENT_TYPE);
    assert_eq!(
        p.body,
        "# TYPE envoy_redis_downstream_cx_total counter\n\
         envoy_redis_downstream_cx_total{envoy_redis_prefix=\"egress\"} 7\n"
    );
    // ?format=prometheus is /stats/prometheus.
    assert_eq!(
        route(
            true,
            "/stats?format=prometheus&filter=downstream_cx_t.tal",
            &s
        ),
        p
    );
}

#[test]
fn stats_json_has_envoys_shape() {
    let st = store();
    let h = st.histogram("redis.egress.command.get.latency", 0);
    h.record(7);
    h.record(7);
    st.histogram("redis.egress.command.set.latency", 1);
    let s = ctx(st);
    let q: Vec<Value> = crate::stats::histogram::TEXT_QUANTILES
        .iter()
        .map(|_| json!({"interval": null, "cumulative": 7.0}))
        .collect();
    let none: Vec<Value> = crate::stats::histogram::TEXT_QUANTILES
        .iter()
        .map(|_| json!({"interval": null, "cumulative": null}))
        .collect();
    assert_eq!(
        body_json(&route(true, "/stats?format=json", &s)),
        json!({"stats": [
            {"name": "cluster.cache.upstream_internal_redirect_failed_total", "value": 3},
            {"name": "redis.egress.downstream_cx_active", "value": 1},
            {"name": "redis.egress.downstream_cx_total", "value": 7},
            {"histograms": {
                "supported_quantiles": [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0],
                "computed_quantiles": [
                    {"name": "redis.egress.command.get.latency", "values": q},
                    {"name": "redis.egress.command.set.latency", "values": none},
                ]
            }}
        ]})
    );
    assert_eq!(
        body_json(&route(
            true,
            "/stats?format=json&histogram_buckets=detailed&filter=get%7Ccx_total",
            &s
        )),
        json!({"stats": [
            {"name": "redis.egress.downstream_cx_total", "value": 7},
            {"histograms": {"details": [
                {"name": "redis.egress.command.get.latency",
                 "totals": [{"lower_bound": 7, "width": 1, "count": 2}],
                 "intervals": []}
            ]}}
        ]})
    );
    // No histogram passes the filter: no histograms element.
    assert_eq!(
        body_json(&route(true, "/stats?format=json&filter=active", &s)),
        json!({"stats": [{"name": "redis.egress.downstream_cx_active", "value": 1}]})
    );
    let pretty = route(true, "/stats?format=json&pretty&filter=active", &s);
    assert!(pretty.body.contains("\n  "), "{}", pretty.body);
    assert_eq!(
        route(true, "/stats?format=json&histogram_buckets=bogus", &s).status,
        400
    );
}

const TWO_CLUSTERS: &str = "[[listeners]]\nname = \"m\"\naddress = \"127.0.0.1:0\"\n\
     op_timeout = \"1s\"\n[listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
     [[clusters]]\nname = \"c\"\n\
     hosts = [\"127.0.0.1:7001\", { address = \"localhost:7002\", weight = 3 }]\n\
     [[clusters]]\nname = \"rc\"\ntype = \"redis_cluster\"\nhosts = [\"127.0.0.1:7100\"]\n";

/// A context over [`TWO_CLUSTERS`] whose registry knows 7001 (failing its check and ejected)
/// and two Redis Cluster nodes (7102 failing its check), with a few per-host stats.
fn clusters_ctx() -> Arc<AdminContext> {
    let st = Store::new();
    st.counter("cluster.c.host.127.0.0.1:7001.rq_total", 0)
        .add(10);
    st.counter("cluster.c.host.127.0.0.1:7001.rq_total", 1)
        .add(5);
    st.counter("cluster.c.host.127.0.0.1:7001.rq_error", 0)
        .add(2);
    st.counter("cluster.c.host.127.0.0.1:7001.flush_total", 0)
        .add(4);
    st.gauge("cluster.c.host.127.0.0.1:7001.cx_active", 0)
        .add(2);
    st.counter("cluster.c.host.127.0.0.1:70011.rq_total", 0)
        .add(99);
    st.counter("cluster.rc.host.127.0.0.1:7101.cx_total", 0)
        .add(1);
    let ctx = ctx_with(st, TWO_CLUSTERS, None);
    let cfg = ctx.config();
    let (c, rc) = (&cfg.clusters[0], &cfg.clusters[1]);
    let h = ctx.hosts.host(c, "127.0.0.1:7001".parse().unwrap());
    h.health.set_check_failing(0, true);
    h.health.set_ejected(true);
    ctx.hosts.host(rc, "127.0.0.1:7102".parse().unwrap());
    ctx.hosts
        .host(rc, "127.0.0.1:7102".parse().unwrap())
        .health
        .set_check_failing(1, true);
    ctx.hosts.host(rc, "127.0.0.1:7101".parse().unwrap());
    ctx
}

#[test]
fn clusters_text_is_envoys() {
    let ctx = clusters_ctx();
    let r = route(true, "/clusters", &ctx);
    assert_eq!(r.status, 200);
    let host = |c: &str, a: &str, cx: i64, tot: u64, err: u64, rq: u64, hn: &str, f: &str, w| {
        format!(
            "{c}::{a}::cx_active::{cx}\n{c}::{a}::cx_connect_fail::0\n{c}::{a}::cx_total::{tot}\n\
             {c}::{a}::rq_error::{err}\n{c}::{a}::rq_timeout::0\n{c}::{a}::rq_total::{rq}\n\
             {c}::{a}::hostname::{hn}\n{c}::{a}::health_flags::{f}\n{c}::{a}::weight::{w}\n"
        )
    };
    let first = host(
        "c",
        "127.0.0.1:7001",
        2,
        0,
        2,
        15,
        "",
        "/failed_active_hc/failed_outlier_check",
        1,
    )
    .replace(
        "c::127.0.0.1:7001::rq_error",
        "c::127.0.0.1:7001::flush_total::4\nc::127.0.0.1:7001::rq_error",
    );
    // flush_total sorts before rq_error but after cx_total.
    let expected = format!(
        "{first}{}{}{}",
        host("c", "127.0.0.1:7002", 0, 0, 0, 0, "localhost", "healthy", 3),
        host("rc", "127.0.0.1:7101", 0, 1, 0, 0, "", "healthy", 1),
        host(
            "rc",
            "127.0.0.1:7102",
            0,
            0,
            0,
            0,
            "",
            "/failed_active_hc",
            1
        ),
    );
    assert_eq!(r.body, expected);
}

#[test]
fn clusters_json_is_envoys_cluster_statuses() {
    let ctx = clusters_ctx();
    let v = body_json(&route(true, "/clusters?format=json", &ctx));
    let statuses = v["cluster_statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses[0]["name"], "c");
    assert_eq!(statuses[0]["added_via_api"], false);
    let h = &statuses[0]["host_statuses"][0];
    assert_eq!(
        h["address"],
        json!({"socket_address": {"address": "127.0.0.1", "port_value": 7001}})
    );
    assert_eq!(
        h["health_status"],
        json!({"eds_health_status": "HEALTHY", "failed_active_health_check": true,
               "failed_outlier_check": true})
    );
    assert_eq!(
        h["stats"],
        json!([
            {"name": "cx_active", "value": "2", "type": "GAUGE"},
            {"name": "cx_connect_fail", "value": "0", "type": "COUNTER"},
            {"name": "cx_total", "value": "0", "type": "COUNTER"},
            {"name": "flush_total", "value": "4", "type": "COUNTER"},
            {"name": "rq_error", "value": "2", "type": "COUNTER"},
            {"name": "rq_timeout", "value": "0", "type": "COUNTER"},
            {"name": "rq_total", "value": "15", "type": "COUNTER"},
        ])
    );
    assert_eq!(
        (h["weight"].clone(), h["hostname"].clone()),
        (json!(1), json!(""))
    );
    let h2 = &statuses[0]["host_statuses"][1];
    assert_eq!(
        (h2["weight"].clone(), h2["hostname"].clone()),
        (json!(3), json!("localhost"))
    );
    assert_eq!(h2["health_status"]["failed_active_health_check"], false);
    let rc: Vec<&Value> = statuses[1]["host_statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["address"]["socket_address"]["port_value"])
        .collect();
    assert_eq!(rc, [&json!(7101), &json!(7102)]);
}

#[test]
fn config_dump_redacts_secrets_and_keeps_values() {
    let cfg = "[[listeners]]\nname = \"m\"\naddress = \"127.0.0.1:0\"\nop_timeout = \"1500ms\"\n\
         downstream_auth_passwords = [\"down-secret-1\", \"down-secret-2\"]\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
         [[clusters]]\nname = \"c\"\nauth_password = \"up-secret\"\nconnect_timeout = \"250ms\"\n\
         hosts = [\"127.0.0.1:7001\"]\n\
         [[clusters]]\nname = \"open\"\nhosts = [\"127.0.0.1:7002\"]\n";
    let ctx = ctx_with(Store::new(), cfg, None);
    let r = route(true, "/config_dump", &ctx);
    for secret in ["down-secret", "up-secret"] {
        assert!(!r.body.contains(secret), "{}", r.body);
    }
    let v = body_json(&r);
    let l = &v["listeners"][0];
    assert_eq!(
        l["downstream_auth_passwords"],
        json!([crate::config::REDACTED, crate::config::REDACTED])
    );
    assert_eq!(l["op_timeout"], "1s 500ms");
    assert_eq!(l["address"], "127.0.0.1:0");
    assert_eq!(v["clusters"][0]["auth_password"], "[redacted]");
    assert_eq!(v["clusters"][1]["auth_password"], Value::Null);
    assert_eq!(v["clusters"][0]["connect_timeout"], "250ms");
    assert_eq!(v["clusters"][0]["type"], "static");
    assert_eq!(v["clusters"][0]["hosts"][0]["address"], "127.0.0.1:7001");
    assert_eq!(v["clusters"][0]["cluster_refresh_rate"], "5s");
    assert_eq!(v["admin"]["address"], "127.0.0.1:9901");
    // Durations read back as what the config holds.
    let live = ctx.config();
    let op = humantime::parse_duration(l["op_timeout"].as_str().unwrap()).unwrap();
    assert_eq!(op, live.listeners[0].op_timeout);
    // A reload shows at once.
    ctx.set_config(Arc::new(crate::config::parse(CONFIG, "t.toml").unwrap()));
    let v = body_json(&route(true, "/config_dump", &ctx));
    assert_eq!(v["listeners"][0]["op_timeout"], "1s");
}

#[test]
fn ready_follows_healthcheck_fail_and_ok() {
    let ctx = ctx(Store::new());
    assert_eq!(route(true, "/ready", &ctx), text(200, "LIVE\n"));
    assert_eq!(route(false, "/healthcheck/fail", &ctx), text(200, "OK\n"));
    assert_eq!(route(true, "/ready", &ctx), text(503, "DRAINING\n"));
    assert_eq!(route(false, "/healthcheck/ok", &ctx), text(200, "OK\n"));
    assert_eq!(route(true, "/ready", &ctx).status, 200);
}

#[test]
fn logging_reads_and_sets_through_the_control() {
    let none = ctx(Store::new());
    assert_eq!(route(true, "/logging", &none).status, 501);

    let level = Arc::new(Mutex::new("info".to_owned()));
    let (w, r) = (level.clone(), level.clone());
    let control = LogControl::new(
        move |d| {
            if d.contains('!') {
                return Err(format!("bad directive {d}"));
            }
            *w.lock().unwrap() = d.to_owned();
            Ok(())
        },
        move || r.lock().unwrap().clone(),
    );
    let ctx = ctx_with(Store::new(), CONFIG, Some(control));
    assert_eq!(
        route(true, "/logging", &ctx),
        text(200, "log filter: info\n")
    );
    assert_eq!(route(true, "/logging?level=debug", &ctx).status, 405);
    assert_eq!(*level.lock().unwrap(), "info");
    assert_eq!(
        route(false, "/logging?level=debug,respite=trace", &ctx),
        text(200, "log filter: debug,respite=trace\n")
    );
    let bad = route(false, "/logging?level=what!", &ctx);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("not a level"), "{}", bad.body);
    assert!(
        bad.body.contains("stays debug,respite=trace"),
        "{}",
        bad.body
    );
    assert_eq!(route(false, "/logging?level=", &ctx).status, 400);
    assert_eq!(*level.lock().unwrap(), "debug,respite=trace");
    // Envoy's level names: `warning` is `warn`, not a target called "warning".
    assert_eq!(
        route(false, "/logging?level=warning", &ctx),
        text(200, "log filter: warn\n")
    );
}

fn reports() -> Vec<HotKeysReport> {
    vec![
        HotKeysReport {
            stat_prefix: "main".into(),
            window: Duration::from_secs(60),
            top: vec![
                (b"user:1".to_vec(), 120),
                (b"bin\x00\"k\\\n\xff".to_vec(), 7),
            ],
            big_values: vec![BigValue {
                key: b"blob".to_vec(),
                command: "set".into(),
                bytes: 1_048_576,
                direction: "request",
                unix_ms: 1_700_000_000_123,
            }],
        },
        HotKeysReport {
            stat_prefix: "other".into(),
            window: Duration::ZERO,
            top: Vec::new(),
            big_values: Vec::new(),
        },
    ]
}

#[test]
fn hot_keys_render_text_and_json() {
    assert_eq!(
        hot_keys::render_text(&reports()),
        "redis.main: top 2 keys over 1m\n  \"user:1\" 120\n  \"bin\\x00\\\"k\\\\\\n\\xff\" 7\n\
         redis.main: 1 big values (newest first)\n  \
         1700000000123 request set \"blob\" 1048576 bytes\n\
         redis.other: hot keys off\n"
    );
    assert_eq!(
        hot_keys::render_json(&reports()),
        json!({"listeners": [
            {"stat_prefix": "main", "window": "1m",
             "top": [{"key": "user:1", "count": 120},
                     {"key": "bin\\x00\\\"k\\\\\\n\\xff", "key_escaped": true, "count": 7}],
             "big_values": [{"key": "blob", "command": "set", "bytes": 1_048_576,
                             "direction": "request", "unix_ms": 1_700_000_000_123u64}]},
            {"stat_prefix": "other", "window": "0s", "top": [], "big_values": []}
        ]})
    );
    assert_eq!(
        hot_keys::redis_cli_repr(b"\x07\x08\t\r~ "),
        "\"\\a\\b\\t\\r~ \""
    );
    // The endpoint over the (empty until implemented) store.
    let ctx = ctx(Store::new());
    assert_eq!(route(true, "/hot_keys", &ctx).body, "");
    assert_eq!(
        body_json(&route(true, "/hot_keys?format=json", &ctx)),
        json!({"listeners": []})
    );
}

/// The admin thread runs at a lower priority than the workers, so a client reading `/stats` in
/// a tight loop takes little CPU from them on a busy machine.
#[test]
fn admin_thread_yields_to_workers() {
    let admin = spawn(local(), ctx(store())).unwrap();
    let _ = get(admin.local_addr, "GET", "/ready");
    let mut seen = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "respite-admin" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the parenthesised comm: state is field 3, nice is field 19.
        let after = stat.rsplit_once(") ").unwrap().1;
        let nice: i32 = after.split(' ').nth(16).unwrap().parse().unwrap();
        assert_eq!(nice, 10, "{stat}");
        seen += 1;
    }
    assert!(seen >= 1, "no respite-admin thread found");
}

/// Only POST changes state: HEAD is a GET without a body, other methods are refused. A HEAD
/// probe of `/drain_listeners` once drained the process.
#[test]
fn only_post_changes_state() {
    let c = ctx(store());
    let admin = spawn(local(), c.clone()).unwrap();
    for method in ["HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let (status, _, _) = get(admin.local_addr, method, "/healthcheck/fail");
        assert_eq!(status, 405, "{method} /healthcheck/fail");
        assert!(
            !c.health_fail.load(Ordering::Relaxed),
            "{method} changed state"
        );
        let (status, _, _) = get(admin.local_addr, method, DRAIN_PATH);
        assert_eq!(status, 405, "{method} {DRAIN_PATH}");
    }
    let (status, head, body) = get(admin.local_addr, "HEAD", "/stats");
    assert_eq!((status, body.as_str()), (200, ""), "{head}");
    assert_eq!(get(admin.local_addr, "POST", "/healthcheck/fail").0, 200);
    assert!(c.health_fail.load(Ordering::Relaxed));
}

/// A client that never reads its responses does not hold up other clients.
#[test]
fn a_client_that_does_not_read_does_not_block_others() {
    let s = store();
    for i in 0..3000 {
        s.counter(&format!("cluster.c.host.10.0.0.{i}:6379.rq_total"), 0)
            .inc();
    }
    let admin = spawn(local(), ctx(s)).unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&admin.local_addr.into()).unwrap();
    let mut stalled: TcpStream = sock.into();
    for _ in 0..50 {
        write!(stalled, "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (status, _, body) = get(admin.local_addr, "GET", "/ready");
    assert_eq!((status, body.as_str()), (200, "LIVE\n"));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(stalled);
}

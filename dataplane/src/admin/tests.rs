use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

fn ctx(stats: Arc<Store>) -> Arc<AdminContext> {
    let config = crate::config::parse(
        "[[listeners]]\nname = \"m\"\naddress = \"127.0.0.1:0\"\nop_timeout = \"1s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
         [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n",
        "t.toml",
    )
    .unwrap();
    AdminContext::new(stats, Arc::new(config), Arc::default(), None)
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

/// Sends `GET path` over a real TCP connection; returns (status, headers, body).
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
    let (_, _, body) = get(addr, "GET", "/stats?usedonly&filter=%63luster%2E");
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

    let (st, _, body) = get(addr, "GET", "/ready");
    assert_eq!((st, body.as_str()), (200, "LIVE\n"));
    let (st, _, body) = get(addr, "GET", "/help");
    assert_eq!(st, 200);
    assert!(body.contains("/stats/prometheus"), "{body}");

    let (st, _, _) = get(addr, "GET", "/nope");
    assert_eq!(st, 404);
    let (st, _, _) = get(addr, "POST", "/stats");
    assert_eq!(st, 405);
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
fn route_and_query_decoding() {
    let s = ctx(store());
    assert_eq!(route(true, "/", &s).status, 200);
    assert_eq!(route(true, "/stats/", &s).status, 404);
    assert_eq!(route(false, "/ready", &s).status, 405);
    assert_eq!(route(true, "/drain_listeners", &s).status, 405);
    assert_eq!(
        route(false, "/drain_listeners", &s).body,
        format!("OK draining pid={}\n", std::process::id())
    );
    assert_eq!(
        query_param("a=1&filter=x%20y+z", "filter").as_deref(),
        Some("x y z")
    );
    assert_eq!(
        query_param("filter=%zz%4", "filter").as_deref(),
        Some("%zz%4")
    );
    assert_eq!(query_param("usedonly", "filter"), None);
    assert_eq!(
        route(true, "/stats?filter=active", &s).body,
        "redis.egress.downstream_cx_active: 1\n"
    );
}

//! Hot-path stats against real redis-servers: per-command latency histograms checked against a
//! client-side reference through a backend behind a fixed added delay, upstream request times,
//! per-command upstream counters, per-host stats, buffered-bytes gauges and the once-per-event
//! request counters.
//!
//! Histograms are published by each worker every 100 ms, so every read polls until the count
//! matches.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use respite_tests::{RedisServer, Respite, free_port, respite::simple_config};

/// The delay the forwarder adds to every chunk redis sends back.
const DELAY: Duration = Duration::from_millis(20);

/// A TCP forwarder in front of `upstream` that delays the upstream→client direction by `delay`
/// (each chunk is written `delay` after it was read; the client→upstream direction is copied
/// at once). Runs until the test process exits. Returns its `127.0.0.1:port`.
fn delayed_forwarder(upstream: String, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind forwarder");
    let addr = listener.local_addr().expect("local addr").to_string();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            forward(client, server, delay);
        }
    });
    addr
}

fn forward(client: TcpStream, server: TcpStream, delay: Duration) {
    let (mut c_read, mut s_write) = (
        client.try_clone().expect("clone"),
        server.try_clone().expect("clone"),
    );
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = c_read.read(&mut buf) {
            if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = s_write.shutdown(Shutdown::Write);
    });
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut s_read = server;
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = s_read.read(&mut buf) {
            if n == 0
                || tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
            {
                break;
            }
        }
    });
    let mut c_write = client;
    thread::spawn(move || {
        for (due, bytes) in rx {
            let wait = due.saturating_duration_since(Instant::now());
            thread::sleep(wait);
            if c_write.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = c_write.shutdown(Shutdown::Both);
    });
}

/// The `P<q>(nan,v)` values of histogram `name` from `/stats?filter=`: quantile → value.
fn quantiles(r: &Respite, name: &str) -> BTreeMap<String, f64> {
    let (_, body) = r.admin_get(&format!("/stats?filter={name}"));
    let line = body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no histogram {name} in:\n{body}"))
        .to_string();
    line.split_whitespace()
        .filter_map(|t| {
            let (q, rest) = t.split_once("(nan,")?;
            Some((q.to_string(), rest.trim_end_matches(')').parse().ok()?))
        })
        .collect()
}

/// The sample count of histogram `name`, from `/stats/prometheus?filter=` (`<metric>_count`).
fn hist_count(r: &Respite, name: &str) -> u64 {
    let (_, body) = r.admin_get(&format!("/stats/prometheus?filter={name}"));
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split(['{', ' '])
                .next()
                .is_some_and(|m| m.ends_with("_count"))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Polls until histogram `name` holds `n` samples (published within 100 ms; 5 s allowed).
fn wait_count(r: &Respite, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = hist_count(r, name);
        if c == n {
            return;
        }
        assert!(Instant::now() < deadline, "{name}: count {c}, want {n}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The client-side quantile at `pct` (same rank rule as HdrHistogram: the value at rank
/// ceil(pct/100 · n)).
fn client_q(sorted: &[Duration], pct: f64) -> Duration {
    let n = sorted.len();
    let rank = ((pct / 100.0) * n as f64).ceil().max(1.0) as usize;
    sorted[rank.min(n) - 1]
}

/// `n` sequential GETs through `r`, each timed from the client: sorted round-trip times.
fn timed_gets(r: &Respite, n: usize) -> Vec<Duration> {
    let mut c = r.raw();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("lat:{i}");
        let t = Instant::now();
        let reply = c.cmd(&[b"GET", key.as_bytes()]);
        times.push(t.elapsed());
        assert_eq!(reply, b"$-1\r\n");
    }
    times.sort();
    times
}

/// Slack allowed below the client's figure: the time a request spends outside the proxy's
/// window (client → proxy read, output buffer → client read, the test's own scheduling). On
/// loopback it is ~0.1 ms; 3 ms covers two shared, noisy cores.
const OUTSIDE: f64 = 3.0;

/// Checks a proxy quantile (in ms) against the client's: the proxy measures a sub-interval of
/// each round trip, so it can only be smaller, by at most [`OUTSIDE`] ms, and HdrHistogram
/// reports it up to 1% high. `truncated`: the proxy's values are whole ms (Envoy truncates),
/// so it may read up to 1 ms lower still.
///
/// The maximum (`P100`) has no lower bound: the slowest round trip the client saw may have
/// been slow outside the proxy (one scheduling stall of the test's thread), and then the
/// proxy's own slowest request is another, faster one.
fn check(name: &str, q: &str, proxy_ms: f64, client_ms: f64, truncated: bool) {
    let low = if q == "P100" {
        0.0
    } else {
        client_ms - OUTSIDE - if truncated { 1.0 } else { 0.0 }
    };
    let high = client_ms * 1.01;
    println!(
        "{name} {q}: proxy {proxy_ms:.3} ms, client {client_ms:.3} ms, bound [{low:.3}, {high:.3}]"
    );
    assert!(
        proxy_ms >= low && proxy_ms <= high,
        "{name} {q}: proxy {proxy_ms} ms outside [{low}, {high}] (client {client_ms} ms)"
    );
}

fn start(fwd: &str, extra: &str) -> Respite {
    let port = free_port();
    let admin = free_port();
    Respite::start(
        &simple_config(port, admin, &[fwd.to_string()], 1, extra),
        port,
        admin,
    )
}

fn latency_through_delay(micros: bool) {
    let redis = RedisServer::start();
    let fwd = delayed_forwarder(redis.addr(), DELAY);
    let extra = format!("latency_in_micros = {micros}\nenable_command_stats = true");
    let r = start(&fwd, &extra);
    const N: usize = 200;
    let times = timed_gets(&r, N);
    let lat = "redis.main.command.get.latency";
    wait_count(&r, lat, N as u64);
    let qs = quantiles(&r, lat);
    let unit = if micros { 1000.0 } else { 1.0 };
    for (q, pct) in [("P50", 50.0), ("P90", 90.0), ("P99", 99.0), ("P100", 100.0)] {
        let client_ms = client_q(&times, pct).as_secs_f64() * 1000.0;
        check(lat, q, qs[q] / unit, client_ms, !micros);
    }
    // At least the injected delay: the histogram is of the real round trip upstream.
    assert!(
        qs["P0"] / unit >= 20.0,
        "P0 {} below the 20 ms delay",
        qs["P0"]
    );
    let p50 = client_q(&times, 50.0).as_secs_f64() * 1000.0;

    // Upstream: the cluster's request time (ms, Envoy) and the host's (µs).
    let up = "cluster.cache.redis_cluster.upstream_commands.upstream_rq_time";
    wait_count(&r, up, N as u64);
    let up_p50 = quantiles(&r, up)["P50"];
    check(up, "P50", up_p50, p50, true);
    let host = format!("cluster.cache.host.{fwd}.rq_time");
    wait_count(&r, &host, N as u64);
    let host_p50 = quantiles(&r, &host)["P50"] / 1000.0;
    check(&host, "P50", host_p50, p50, false);
    assert!(
        host_p50 >= 20.0,
        "host rq_time P50 {host_p50} ms below the delay"
    );

    // enable_command_stats: one upstream GET per client GET, every one a success.
    let s = r.stats();
    let cmd = "cluster.cache.redis_cluster.upstream_commands.get";
    println!(
        "{cmd}: {:?}",
        [".total", ".success", ".failure"].map(|x| s.get(&format!("{cmd}{x}")))
    );
    assert_eq!(s.get(&format!("{cmd}.total")), Some(&(N as i64)));
    assert_eq!(s.get(&format!("{cmd}.success")), Some(&(N as i64)));
    assert_eq!(s.get(&format!("{cmd}.failure")), Some(&0));
    wait_count(&r, &format!("{cmd}.latency"), N as u64);
    let cmd_p50 = quantiles(&r, &format!("{cmd}.latency"))["P50"] / 1000.0;
    check(&format!("{cmd}.latency"), "P50", cmd_p50, p50, false);

    // Per-host stats, for /clusters.
    let h = |n: &str| s.get(&format!("cluster.cache.host.{fwd}.{n}")).copied();
    assert_eq!(h("rq_total"), Some(N as i64));
    assert_eq!(h("cx_total"), Some(1));
    assert_eq!(h("cx_active"), Some(1));
    assert_eq!(h("cx_connect_fail"), Some(0));
    assert_eq!(h("rq_timeout"), Some(0));
    assert_eq!(h("rq_error"), Some(0));
    assert_eq!(s.get("cluster.cache.upstream_rq_total"), Some(&(N as i64)));
}

#[test]
fn command_latency_in_micros_matches_the_client() {
    latency_through_delay(true);
}

#[test]
fn command_latency_in_millis_matches_the_client() {
    latency_through_delay(false);
}

#[test]
fn per_host_stats_exist_before_any_request() {
    let redis = RedisServer::start();
    let dead = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    let admin = free_port();
    let r = Respite::start(
        &simple_config(port, admin, &[redis.addr(), dead.clone()], 1, ""),
        port,
        admin,
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = r.stats();
        let get = |host: &str, n: &str| s.get(&format!("cluster.cache.host.{host}.{n}")).copied();
        let live = get(&redis.addr(), "cx_active") == Some(1);
        let failed = get(&dead, "cx_connect_fail").unwrap_or(0) >= 1;
        if live && failed {
            for host in [&redis.addr(), &dead] {
                for n in [
                    "cx_total",
                    "cx_connect_fail",
                    "rq_total",
                    "rq_error",
                    "rq_timeout",
                    "flush_total",
                    "cx_active",
                ] {
                    assert!(get(host, n).is_some(), "{host} {n} not registered");
                }
            }
            assert_eq!(get(&redis.addr(), "cx_total"), Some(1));
            assert_eq!(get(&dead, "cx_total"), Some(0));
            assert_eq!(get(&dead, "cx_active"), Some(0));
            let cluster_fail = s["cluster.cache.upstream_cx_connect_fail"];
            assert_eq!(cluster_fail, get(&dead, "cx_connect_fail").unwrap_or(-1));
            break;
        }
        assert!(Instant::now() < deadline, "per-host stats: {s:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_timeout_counts_once_everywhere() {
    let redis = RedisServer::start();
    let fwd = delayed_forwarder(redis.addr(), Duration::from_millis(400));
    let port = free_port();
    let admin = free_port();
    let cfg = simple_config(
        port,
        admin,
        std::slice::from_ref(&fwd),
        1,
        "enable_command_stats = true",
    )
    .replace("op_timeout = \"1s\"", "op_timeout = \"100ms\"")
    // The handshake's PING (is the host loading?) crosses the 400 ms forwarder both ways, and
    // connect_timeout bounds connect plus handshake.
    .replace("connect_timeout = \"250ms\"", "connect_timeout = \"2s\"");
    let r = Respite::start(&cfg, port, admin);
    let mut c = r.raw();
    // The connection is up before the request (a connect in progress would queue it).
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.stat(&format!("cluster.cache.host.{fwd}.cx_active")) != 1 {
        assert!(Instant::now() < deadline, "no upstream connection");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.cmd(&[b"GET", b"slow"]), b"-upstream failure\r\n");
    // The late reply comes and is discarded; nothing counts twice.
    thread::sleep(Duration::from_millis(600));
    let s = r.stats();
    let v = |n: &str| s.get(n).copied().unwrap_or(-1);
    println!("timeouts: {s:?}");
    assert_eq!(v("cluster.cache.upstream_rq_timeout"), 1);
    assert_eq!(v(&format!("cluster.cache.host.{fwd}.rq_timeout")), 1);
    assert_eq!(
        v("cluster.cache.redis_cluster.upstream_commands.get.failure"),
        1
    );
    assert_eq!(
        v("cluster.cache.redis_cluster.upstream_commands.get.total"),
        1
    );
    assert_eq!(v("redis.main.command.get.error"), 1);
    assert_eq!(v("redis.main.command.get.total"), 1);
    wait_count(
        &r,
        "cluster.cache.redis_cluster.upstream_commands.upstream_rq_time",
        1,
    );
    let t = quantiles(
        &r,
        "cluster.cache.redis_cluster.upstream_commands.upstream_rq_time",
    )["P100"];
    assert!((100.0..400.0).contains(&t), "timed-out request time {t} ms");
}

#[test]
fn request_counters_count_each_event_once() {
    let redis = RedisServer::start();
    let r = Respite::over(&[redis.addr()], 1);
    let mut c = r.raw();
    for _ in 0..3 {
        assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), b"+OK\r\n");
    }
    for _ in 0..5 {
        let reply = c.cmd(&[b"NOSUCHCMD", b"x"]);
        assert!(reply.starts_with(b"-ERR unknown command"), "{reply:?}");
    }
    for _ in 0..2 {
        let reply = c.cmd(&[b"GET"]);
        assert!(reply.starts_with(b"-ERR wrong number"), "{reply:?}");
    }
    for _ in 0..2 {
        let mut p = r.raw();
        p.send_raw(b"*1\r\n$x\r\n");
        let reply = p.read_reply();
        assert!(reply.starts_with(b"-ERR Protocol error"), "{reply:?}");
        assert!(p.is_closed(Duration::from_secs(2)));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let s = loop {
        let s = r.stats();
        if s.get("redis.main.downstream_cx_active") == Some(&1) || Instant::now() > deadline {
            break s;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let v = |n: &str| s.get(&format!("redis.main.{n}")).copied().unwrap_or(-1);
    println!("{s:?}");
    assert_eq!(v("downstream_rq_total"), 3 + 5 + 2);
    assert_eq!(v("splitter.unsupported_command"), 5);
    assert_eq!(v("splitter.invalid_request"), 2);
    assert_eq!(v("downstream_cx_protocol_error"), 2);
    assert_eq!(v("command.set.total"), 3);
    assert_eq!(v("command.set.success"), 3);
    assert_eq!(v("command.get.total"), 2);
    assert_eq!(v("command.get.error"), 2);
    assert_eq!(v("command.get.success"), 0);
    assert_eq!(v("downstream_rq_active"), 0);
}

#[test]
fn buffered_bytes_gauges_follow_partial_requests_and_unread_replies() {
    let redis = RedisServer::start();
    let r = Respite::over(&[redis.addr()], 1);
    let rx = "redis.main.downstream_cx_rx_bytes_buffered";
    let tx = "redis.main.downstream_cx_tx_bytes_buffered";
    let wait_for = |name: &str, ok: &dyn Fn(i64) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let v = r.stat(name);
            if ok(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{name} = {v}");
            thread::sleep(Duration::from_millis(20));
        }
    };
    // A partial request is held in the read buffer until the rest arrives.
    let mut c = r.raw();
    let partial = b"*2\r\n$3\r\nGET\r\n$4\r\nke";
    c.send_raw(partial);
    let held = wait_for(rx, &|v| v == partial.len() as i64);
    println!("{rx} with a partial request: {held}");
    c.send_raw(b"yz\r\n");
    assert_eq!(c.read_reply(), b"$-1\r\n");
    wait_for(rx, &|v| v == 0);

    // Replies a client does not read pile up in the proxy once the socket buffers are full.
    let value = vec![b'v'; 1 << 20];
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), b"+OK\r\n");
    let mut slow = r.raw();
    const GETS: usize = 16;
    for _ in 0..GETS {
        slow.send(&[b"GET", b"big"]);
    }
    let piled = wait_for(tx, &|v| v >= 1 << 20);
    println!("{tx} with {GETS} MiB of unread replies: {piled}");
    for _ in 0..GETS {
        assert_eq!(slow.read_reply().len(), (1 << 20) + 12);
    }
    wait_for(tx, &|v| v == 0);
    // A client gone with replies unread gives its bytes back.
    let mut gone = r.raw();
    for _ in 0..GETS {
        gone.send(&[b"GET", b"big"]);
    }
    wait_for(tx, &|v| v > 0);
    drop(gone);
    wait_for(tx, &|v| v == 0);
    wait_for(rx, &|v| v == 0);
}

//! Hostile clients: no client, however broken or malicious, may take Respite down, make it grow
//! without bound, or disturb other clients. Every class is tested with several members, against
//! real redis-servers, and where Redis itself answers the same bytes, Respite's answer is compared
//! with Redis's byte for byte.
//!
//! The tests of this file take a process-wide lock and run one at a time: they measure memory
//! and latency, which parallel neighbours would disturb.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, RedisServer, free_port};

/// One hostile test at a time (memory and latency are measured).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Respite over `backends` with `op_timeout` instead of the harness's 1 s (big values need
/// longer) and `extra` listener lines.
fn respite_with(backends: &[String], workers: usize, op_timeout: &str, extra: &str) -> Respite {
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, backends, workers, extra).replace(
        "op_timeout = \"1s\"",
        &format!("op_timeout = \"{op_timeout}\""),
    );
    Respite::start(&cfg, port, admin)
}

/// A one-worker config over `addrs` with `runtime.maxmemory_clients = budget` (bytes), and its
/// listener and admin ports.
fn budget_config(addrs: &[String], budget: u64) -> (String, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, addrs, 1, "").replace(
        "drain_timeout = \"5s\"",
        &format!("drain_timeout = \"5s\"\nmaxmemory_clients = {budget}"),
    );
    (cfg, port, admin)
}

/// The undisturbed client's p99 GET latency must stay under this. The machine is shared (other
/// builds run on the same 2 cores), so single GETs are only required to finish within
/// [`GET_MAX`]: a client that blocked a worker would show up as seconds, not milliseconds.
const GET_P99: Duration = Duration::from_millis(50);
const GET_MAX: Duration = Duration::from_secs(1);

fn assert_undisturbed(what: &str, s: LatencySummary) {
    eprintln!(
        "{what}: other client's GETs: n={} p50={:?} p99={:?} max={:?}",
        s.count, s.p50, s.p99, s.max
    );
    assert!(
        s.p99 < GET_P99 && s.max < GET_MAX,
        "{what}: another client's GETs were slow: p99 {:?} (limit {GET_P99:?}), max {:?} (limit \
         {GET_MAX:?}), p50 {:?}, n {}",
        s.p99,
        s.max,
        s.p50,
        s.count
    );
}

fn protocol_error(text: &str) -> Vec<u8> {
    format!("-ERR Protocol error: {text}\r\n").into_bytes()
}

/// `redis.main.downstream_cx_protocol_error`.
const PROTO_ERRORS: &str = "redis.main.downstream_cx_protocol_error";

/// (1) Malformed RESP of every kind gets exactly Redis's error reply, then the connection
/// closes; nothing reaches a backend; respite keeps serving a client connected all along.
#[test]
fn malformed_resp_gets_redis_error_then_close_and_nothing_is_forwarded() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut bystander = respite.raw();
    assert_eq!(bystander.cmd(&[b"SET", b"bystander", b"still here"]), OK);

    let get_k = RawClient::encode(&[b"GET", b"k"]);
    let with_get = |head: &[u8]| [head, &get_k].concat();
    // (name, bytes, half-close after sending, Redis 7.0 error text or None for a silent close)
    let cases: Vec<(&str, Vec<u8>, bool, Option<&str>)> = vec![
        (
            "multibulk count not a number",
            b"*abc\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk count 2^31",
            b"*2147483648\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk count absurd",
            b"*99999999999\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk count overflows i64",
            b"*99999999999999999999999\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk count with sign",
            b"*+1\r\n$4\r\nPING\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk count with space",
            b"* 1\r\n$4\r\nPING\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "multibulk header missing CR",
            b"*1\n$4\r\nPING\r\n".to_vec(),
            false,
            Some("invalid multibulk length"),
        ),
        (
            "bulk length -1",
            b"*1\r\n$-1\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk length -5",
            b"*1\r\n$-5\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk length not a number",
            b"*1\r\n$x\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk length with sign",
            b"*1\r\n$+4\r\nPING\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk length absurd",
            b"*1\r\n$99999999999\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk length 512 MiB + 1",
            b"*1\r\n$536870913\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "bulk header missing CR",
            b"*1\r\n$4\nPING\r\n".to_vec(),
            false,
            Some("invalid bulk length"),
        ),
        (
            "integer instead of bulk",
            b"*1\r\n:1\r\n".to_vec(),
            false,
            Some("expected '$', got ':'"),
        ),
        (
            "simple string instead of bulk",
            b"*2\r\n$3\r\nGET\r\n+a\r\n".to_vec(),
            false,
            Some("expected '$', got '+'"),
        ),
        (
            "nested array",
            b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nk\r\n".to_vec(),
            false,
            Some("expected '$', got '*'"),
        ),
        (
            "bytes after a protocol error",
            with_get(b"*1\r\n:1\r\n"),
            false,
            Some("expected '$', got ':'"),
        ),
        (
            "bytes after a bad bulk length",
            with_get(b"*2\r\n$3\r\nGET\r\n$-7\r\n"),
            false,
            Some("invalid bulk length"),
        ),
        (
            "unbalanced double quote",
            b"SET \"a b\r\n".to_vec(),
            false,
            Some("unbalanced quotes in request"),
        ),
        (
            "unbalanced single quote",
            b"SET 'a\r\n".to_vec(),
            false,
            Some("unbalanced quotes in request"),
        ),
        (
            "closing quote followed by a char",
            b"SET \"a\"b c\r\n".to_vec(),
            false,
            Some("unbalanced quotes in request"),
        ),
        (
            "inline line over 64 KiB",
            vec![b'A'; 70_000],
            false,
            Some("too big inline request"),
        ),
        (
            "multibulk count line over 64 KiB",
            [b"*".as_slice(), &[b'1'; 70_000]].concat(),
            false,
            Some("too big mbulk count string"),
        ),
        (
            "bulk count line over 64 KiB",
            [b"*1\r\n$".as_slice(), &[b'1'; 70_000]].concat(),
            false,
            Some("too big bulk count string"),
        ),
        // No error to send: the client half-closed mid-request. Both close silently.
        (
            "array header, no elements, EOF",
            b"*3\r\n".to_vec(),
            true,
            None,
        ),
        (
            "array with some elements, EOF",
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n".to_vec(),
            true,
            None,
        ),
        (
            "bulk cut short, EOF",
            b"*2\r\n$3\r\nGET\r\n$10\r\nabc".to_vec(),
            true,
            None,
        ),
    ];

    let stats_before: Vec<_> = backends.iter().map(commandstats).collect();
    let errors_before = respite.stat(PROTO_ERRORS);
    let quiet = Duration::from_secs(3);
    let mut expected_errors = 0;
    for (name, bytes, half_close, text) in &cases {
        let (want, want_closed) = exchange(&reference.addr(), bytes, *half_close, quiet);
        let (got, got_closed) = exchange(&respite.addr(), bytes, *half_close, quiet);
        // The case is what it claims to be: Redis itself answers this and closes.
        let redis_expected = text.map(protocol_error).unwrap_or_default();
        assert_eq!(
            (show(&want), want_closed),
            (show(&redis_expected), true),
            "{name}: redis-server's own answer changed"
        );
        assert_eq!(
            (show(&got), got_closed),
            (show(&want), want_closed),
            "{name}: respite (left) vs redis-server (right) for {}",
            show(bytes)
        );
        if text.is_some() {
            expected_errors += 1;
        }
        assert_eq!(
            bystander.cmd(&[b"GET", b"bystander"]),
            bulk(b"still here"),
            "{name}: another client was disturbed"
        );
    }
    assert!(
        wait_until(Duration::from_secs(2), || respite.stat(PROTO_ERRORS)
            - errors_before
            == expected_errors),
        "{PROTO_ERRORS}: {} new, want {expected_errors}",
        respite.stat(PROTO_ERRORS) - errors_before
    );
    // The bystander's GETs and the first SET are the only commands the backends saw.
    let stats_after: Vec<_> = backends.iter().map(commandstats).collect();
    let calls = |s: &[std::collections::BTreeMap<String, u64>], c: &str| -> u64 {
        s.iter().map(|m| m.get(c).copied().unwrap_or(0)).sum()
    };
    assert_eq!(
        calls(&stats_after, "get") - calls(&stats_before, "get"),
        cases.len() as u64,
        "GETs reaching the backends: only the bystander's ({})",
        cases.len()
    );
    let others = |s: &[std::collections::BTreeMap<String, u64>]| -> Vec<(String, u64)> {
        let mut all: std::collections::BTreeMap<String, u64> = Default::default();
        for m in s {
            for (k, v) in m {
                if k != "get" {
                    *all.entry(k.clone()).or_default() += v;
                }
            }
        }
        all.into_iter().collect()
    };
    assert_eq!(
        others(&stats_after),
        others(&stats_before),
        "commands other than the bystander's GETs reached a backend"
    );
    // Alive and serving new clients.
    let mut fresh = respite.raw();
    assert_eq!(fresh.cmd(&[b"SET", b"after", b"1"]), OK);
    assert_eq!(fresh.cmd(&[b"GET", b"after"]), bulk(b"1"));
}

/// (1) Odd bytes Redis 7.0 accepts leniently (`resp::RequestParser` follows it): a multibulk
/// count <= 0 is an empty request, the two bytes after bulk data and the byte after a count's CR
/// are skipped unchecked, a huge announced count just waits for its elements, and an inline line
/// with a NUL waits for more. Respite answers the same bytes as Redis, keeps the connection open,
/// and forwards nothing but the real commands.
#[test]
fn lenient_resp_is_read_as_redis_reads_it() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    assert_eq!(reference.raw().cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(respite.raw().cmd(&[b"SET", b"k", b"v"]), OK);
    let get_k = RawClient::encode(&[b"GET", b"k"]);
    let then_get = |head: &[u8]| [head, &get_k].concat();
    // (name, bytes, Redis 7.0's answer; the connection stays open in every case)
    type Case<'a> = (&'a str, Vec<u8>, &'a [u8]);
    let cases: Vec<Case> = vec![
        ("multibulk count -5", then_get(b"*-5\r\n"), b"$1\r\nv\r\n"),
        (
            "multibulk count 0 and -1",
            then_get(b"*0\r\n*-1\r\n"),
            b"$1\r\nv\r\n",
        ),
        (
            "bulk data followed by 'xx'",
            then_get(b"*1\r\n$4\r\nPINGxx"),
            b"+PONG\r\n$1\r\nv\r\n",
        ),
        (
            "multibulk count CR without LF",
            then_get(b"*1\rX$4\r\nPING\r\n"),
            b"+PONG\r\n$1\r\nv\r\n",
        ),
        (
            "bulk count CR without LF",
            then_get(b"*1\r\n$4\rXPING\r\n"),
            b"+PONG\r\n$1\r\nv\r\n",
        ),
        (
            "multibulk count 1024*1024+1, waiting",
            b"*1048577\r\n".to_vec(),
            b"",
        ),
        (
            "multibulk count 2^31-1, waiting",
            b"*2147483647\r\n$1\r\na\r\n".to_vec(),
            b"",
        ),
        (
            "inline line with a NUL, waiting",
            b"GET \0k\r\n".to_vec(),
            b"",
        ),
    ];
    let before: Vec<_> = backends.iter().map(commandstats).collect();
    let mut gets = 0;
    for (name, bytes, redis_answer) in &cases {
        let (want, want_closed) =
            exchange(&reference.addr(), bytes, false, Duration::from_millis(400));
        assert_eq!(
            (show(&want), want_closed),
            (show(redis_answer), false),
            "{name}: redis-server's own answer changed"
        );
        let (got, got_closed) = exchange(&respite.addr(), bytes, false, Duration::from_millis(400));
        assert_eq!(
            (show(&got), got_closed),
            (show(&want), want_closed),
            "{name}: respite (left) vs redis-server (right) for {}",
            show(bytes)
        );
        if redis_answer.ends_with(b"v\r\n") {
            gets += 1;
        }
    }
    let after: Vec<_> = backends.iter().map(commandstats).collect();
    let sum = |s: &[std::collections::BTreeMap<String, u64>], c: &str| -> u64 {
        s.iter().map(|m| m.get(c).copied().unwrap_or(0)).sum()
    };
    assert_eq!(
        sum(&after, "get") - sum(&before, "get"),
        gets,
        "GETs forwarded"
    );
    assert_eq!(sum(&after, "set"), sum(&before, "set"), "SETs forwarded");
    assert_eq!(respite.raw().cmd(&[b"GET", b"k"]), bulk(b"v"));
}

/// (2) Clients that announce huge requests and then stall: 100 connections each announcing a
/// 512 MiB bulk (the default limit) and 100 announcing 2^31-1 arguments, each sending a little
/// and stopping. Respite must not reserve what they announce: its RSS stays small, other clients
/// are served, and closing them gives the memory back.
#[test]
fn announced_but_never_sent_huge_requests_cost_nothing() {
    let _g = serial();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let pid = respite.pid();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"probe", b"p"]), OK);
    std::thread::sleep(Duration::from_millis(200));
    let base = rss_kib(pid);
    let prober = Prober::start(&respite.addr(), b"probe", b"p");
    let mut liars = Vec::new();
    for i in 0..200 {
        let mut s = respite.raw();
        if i % 2 == 0 {
            let mut b = b"*2\r\n$3\r\nSET\r\n$536870912\r\n".to_vec();
            b.extend(std::iter::repeat_n(b'x', 4096));
            s.send_raw(&b);
        } else {
            let mut b = b"*2147483647\r\n".to_vec();
            for _ in 0..100 {
                b.extend_from_slice(b"$1\r\na\r\n");
            }
            s.send_raw(&b);
        }
        liars.push(s);
    }
    std::thread::sleep(Duration::from_secs(1));
    let loaded = rss_kib(pid);
    assert_eq!(c.cmd(&[b"GET", b"probe"]), bulk(b"p"));
    drop(liars);
    std::thread::sleep(Duration::from_secs(1));
    let closed = rss_kib(pid);
    let lat = prober.finish();
    eprintln!(
        "200 stalled huge announcements: respite RSS {base} KiB → {loaded} KiB, after closing \
         {closed} KiB"
    );
    assert!(
        loaded < base + 100 * 1024,
        "respite RSS grew from {base} KiB to {loaded} KiB for 200 stalled announcements"
    );
    assert_undisturbed("huge announcements", lat);
    assert_eq!(respite.raw().cmd(&[b"GET", b"probe"]), bulk(b"p"));
}

/// (1) Requests before a protocol error in the same packet are answered, in order, before the
/// error; whatever follows the error is dropped. Same bytes as Redis.
#[test]
fn requests_before_a_protocol_error_are_answered_first() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut bytes = Vec::new();
    RawClient::encode_into(&mut bytes, &[b"SET", b"p1", b"one"]);
    RawClient::encode_into(&mut bytes, &[b"MSET", b"p2", b"two", b"p3", b"three"]);
    RawClient::encode_into(&mut bytes, &[b"MGET", b"p1", b"p2", b"p3"]);
    bytes.extend_from_slice(b"PING\r\n");
    bytes.extend_from_slice(b"*2\r\n$3\r\nGET\r\n:5\r\n");
    RawClient::encode_into(&mut bytes, &[b"SET", b"p4", b"never"]);
    let (want, want_closed) = exchange(&reference.addr(), &bytes, false, Duration::from_secs(3));
    let (got, got_closed) = exchange(&respite.addr(), &bytes, false, Duration::from_secs(3));
    assert_eq!(
        show(&want),
        show(b"+OK\r\n+OK\r\n*3\r\n$3\r\none\r\n$3\r\ntwo\r\n$5\r\nthree\r\n+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n")
    );
    assert!(want_closed);
    assert_eq!((show(&got), got_closed), (show(&want), want_closed));
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"EXISTS", b"p4"]),
        int(0),
        "a command after the error ran"
    );
    assert_eq!(c.cmd(&[b"GET", b"p3"]), bulk(b"three"));
}

/// (2) A 100 MB bulk string (under the 512 MiB default limit) goes through byte-exact both ways,
/// twice; what Respite keeps meanwhile is bounded, and given back once the client leaves.
#[test]
fn huge_100mb_value_roundtrips_byte_exact() {
    let _g = serial();
    let backends = servers(2);
    let respite = respite_with(&addrs(&backends), 2, "20s", "");
    let pid = respite.pid();
    let base = rss_kib(pid);
    const N: usize = 100 * 1000 * 1000;
    let value: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
    let mut c = respite.raw();
    c.stream()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    c.stream()
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Two rounds, on a fresh connection each: the second shows whether what respite keeps after
    // the first is reused (bounded) or grows again.
    let mut after = Vec::new();
    for round in 0..2 {
        if round > 0 {
            c = respite.raw();
            c.stream()
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
        }
        let t = Instant::now();
        assert_eq!(show(&c.cmd(&[b"SET", b"huge", &value])), show(OK));
        let set_time = t.elapsed();
        let after_set = rss_kib(pid);
        assert_eq!(c.cmd(&[b"STRLEN", b"huge"]), int(N as i64));
        let t = Instant::now();
        let reply = c.cmd(&[b"GET", b"huge"]);
        let get_time = t.elapsed();
        let header = format!("${N}\r\n");
        assert_eq!(
            show(&reply[..header.len()]),
            show(header.as_bytes()),
            "GET huge header"
        );
        assert_eq!(reply.len(), header.len() + N + 2, "GET huge length");
        let body = &reply[header.len()..header.len() + N];
        if let Some(i) = (0..N).find(|&i| body[i] != value[i]) {
            panic!("GET huge differs at byte {i}: {} vs {}", body[i], value[i]);
        }
        assert!(reply.ends_with(b"\r\n"));
        drop(reply);
        // The owning backend holds the same value.
        let lens: Vec<Vec<u8>> = backends
            .iter()
            .map(|b| b.raw().cmd(&[b"STRLEN", b"huge"]))
            .collect();
        assert!(lens.contains(&int(N as i64)), "{lens:?}");
        assert_eq!(c.cmd(&[b"DEL", b"huge"]), int(1));
        std::thread::sleep(Duration::from_millis(500));
        let rss = rss_kib(pid);
        eprintln!(
            "100 MB round {round}: SET {set_time:?}, GET {get_time:?}; respite RSS base {base} \
             KiB, after SET {after_set} KiB, after GET+DEL {rss} KiB"
        );
        after.push(rss);
    }
    drop(c);
    let mut left = rss_kib(pid);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) && left > base + 16 * 1024 {
        std::thread::sleep(Duration::from_millis(250));
        left = rss_kib(pid);
    }
    eprintln!("100 MB: respite RSS after the client left: {left} KiB");
    assert_eq!(respite.raw().cmd(&[b"PING"]), b"+PONG\r\n");
    // While the client stays, a round may keep up to about two copies of the value (measured
    // 18-279 MiB, by timing: whether the worker's trim ran yet); bounded, and given back
    // once the client leaves (measured within 1 MiB of the base).
    let kept = 320 * 1024;
    assert!(
        after.iter().all(|&a| a <= base + kept),
        "respite RSS kept more than {kept} KiB over its base {base} KiB after a 100 MB value: \
         {after:?} KiB"
    );
    assert!(
        left <= base + 16 * 1024,
        "respite RSS {left} KiB 5 s after the client left, base {base} KiB"
    );
}

/// (2) `max_request_bytes` bounds one bulk argument: at the limit works, one byte over is
/// `invalid bulk length` (as Redis with the same `proto-max-bulk-len`), then close, nothing
/// forwarded.
#[test]
fn max_request_bytes_bounds_one_bulk_argument() {
    let _g = serial();
    const LIMIT: usize = 1_048_576;
    let reference = RedisServer::start_with(&["--proto-max-bulk-len", "1048576"]);
    let backends = servers(2);
    let respite = respite_with(
        &addrs(&backends),
        2,
        "5s",
        &format!("max_request_bytes = {LIMIT}"),
    );
    let at_limit: Vec<u8> = (0..LIMIT).map(|i| (i % 253) as u8).collect();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"atlimit", &at_limit]), OK);
    assert_eq!(c.cmd(&[b"GET", b"atlimit"]), bulk(&at_limit));
    let before: Vec<_> = backends.iter().map(commandstats).collect();

    // Just the header of a one-byte-too-long argument, and a whole 2 MB SET.
    let header = format!("*3\r\n$3\r\nSET\r\n$4\r\nover\r\n${}\r\n", LIMIT + 1).into_bytes();
    let two_mb = RawClient::encode(&[b"SET", b"over", &vec![b'x'; 2 * 1000 * 1000]]);
    let want = protocol_error("invalid bulk length");
    for (name, bytes) in [("limit+1 header", &header), ("2 MB SET", &two_mb)] {
        let (r, r_closed) = exchange(&reference.addr(), bytes, false, Duration::from_secs(3));
        let (got, closed) = exchange(&respite.addr(), bytes, false, Duration::from_secs(3));
        assert_eq!((show(&r), r_closed), (show(&want), true), "{name}: redis");
        assert_eq!((show(&got), closed), (show(&want), true), "{name}: respite");
    }
    let after: Vec<_> = backends.iter().map(commandstats).collect();
    assert_eq!(after, before, "an over-limit request reached a backend");
    assert_eq!(c.cmd(&[b"EXISTS", b"over"]), int(0));
    assert_eq!(c.cmd(&[b"STRLEN", b"atlimit"]), int(LIMIT as i64));
}

/// (2) MGET of 1 000 000 keys answers 1 000 000 elements, the set ones in their places, byte
/// for byte what one redis-server answers.
#[test]
fn mget_of_a_million_keys() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(3);
    let respite = respite_with(&addrs(&backends), 2, "20s", "");
    const N: usize = 1_000_000;
    let keys: Vec<Vec<u8>> = (0..N).map(|i| format!("mk:{i}").into_bytes()).collect();
    let set_at = [0usize, 1, 4_242, 500_000, 999_998, 999_999];
    let mut c = respite.raw();
    let mut r = reference.raw();
    for &i in &set_at {
        let v = format!("value-{i}").into_bytes();
        assert_eq!(c.cmd(&[b"SET", &keys[i], &v]), OK);
        assert_eq!(r.cmd(&[b"SET", &keys[i], &v]), OK);
    }
    let mut args: Vec<&[u8]> = Vec::with_capacity(N + 1);
    args.push(b"MGET");
    args.extend(keys.iter().map(|k| k.as_slice()));
    let request = RawClient::encode(&args);
    let mut expected = format!("*{N}\r\n").into_bytes();
    for (i, _) in keys.iter().enumerate() {
        if set_at.contains(&i) {
            expected.extend_from_slice(&bulk(format!("value-{i}").as_bytes()));
        } else {
            expected.extend_from_slice(NIL);
        }
    }
    for client in [&mut r, &mut c] {
        client
            .stream()
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
    }
    let t = Instant::now();
    c.send_raw(&request);
    let got = c.read_reply();
    let took = t.elapsed();
    r.send_raw(&request);
    let want = r.read_reply();
    assert_eq!(want.len(), expected.len(), "redis-server's answer");
    assert!(
        want == expected,
        "redis-server's answer differs from the expected bytes"
    );
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        panic!(
            "respite's MGET of {N} keys differs from Redis's: len {} vs {}, first difference at \
             byte {at:?}",
            got.len(),
            want.len()
        );
    }
    eprintln!("MGET {N} keys through respite: {took:?}");
    assert_eq!(c.cmd(&[b"GET", b"mk:500000"]), bulk(b"value-500000"));
}

/// (2) An inline line of 1 MB: Redis's limit is 64 KiB (`PROTO_INLINE_MAX_SIZE`) whether or not
/// the newline comes; respite answers the same and closes. A line just under the limit works in
/// both.
#[test]
fn inline_line_of_1mb_is_refused_like_redis() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut with_newline = b"SET inl ".to_vec();
    with_newline.extend(std::iter::repeat_n(b'v', 1 << 20));
    with_newline.extend_from_slice(b"\r\n");
    let without_newline = vec![b'A'; 1 << 20];
    let want = protocol_error("too big inline request");
    for (name, bytes) in [
        ("1 MB inline SET", &with_newline),
        ("1 MB without newline", &without_newline),
    ] {
        let (r, r_closed) = exchange(&reference.addr(), bytes, false, Duration::from_secs(3));
        let (got, closed) = exchange(&respite.addr(), bytes, false, Duration::from_secs(3));
        assert_eq!((show(&r), r_closed), (show(&want), true), "{name}: redis");
        assert_eq!((show(&got), closed), (show(&want), true), "{name}: respite");
    }
    let mut under = b"SET inl ".to_vec();
    under.extend(std::iter::repeat_n(b'w', 60_000));
    under.extend_from_slice(b"\r\nSTRLEN inl\r\n");
    let (r, _) = exchange(&reference.addr(), &under, false, Duration::from_millis(500));
    let (got, closed) = exchange(&respite.addr(), &under, false, Duration::from_millis(500));
    assert_eq!(show(&r), show(b"+OK\r\n:60000\r\n"));
    assert_eq!((show(&got), closed), (show(&r), false));
    assert_eq!(respite.raw().cmd(&[b"EXISTS", b"inl"]), int(1));
}

/// (2) 10 000 idle connections: small RSS per connection, given back when they close, and
/// another client's GETs stay fast throughout.
#[test]
fn ten_thousand_idle_connections_cost_little_and_are_given_back() {
    let _g = serial();
    const CONNS: usize = 10_000;
    let me = std::process::id();
    let mine = raise_nofile(me, 2 * CONNS as u64 + 1000);
    assert!(
        mine >= CONNS as u64 + 200,
        "the test process may open only {mine} files (hard limit); need {CONNS}+"
    );
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let pid = respite.pid();
    let theirs = raise_nofile(pid, 2 * CONNS as u64 + 1000);
    eprintln!(
        "nofile soft limits: test process {mine}, respite {theirs} (hard {})",
        nofile_limits(pid).1
    );
    assert!(
        theirs >= CONNS as u64 + 200,
        "respite may open only {theirs} files; need {CONNS}+"
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"probe", b"p"]), OK);
    let prober = Prober::start(&respite.addr(), b"probe", b"p");
    // Warm up (sessions, rings, allocator) with a few connections before the baseline.
    for _ in 0..3 {
        let warm: Vec<RawClient> = (0..200).map(|_| respite.raw()).collect();
        for mut w in warm {
            assert_eq!(w.cmd(&[b"PING"]), b"+PONG\r\n");
        }
    }
    let active = "redis.main.downstream_cx_active";
    assert!(wait_until(Duration::from_secs(5), || respite.stat(active) == 2));
    std::thread::sleep(Duration::from_millis(300));
    let base = rss_kib(pid);

    // Two rounds: the second shows whether memory kept after the first is reused (bounded) or
    // leaked.
    let mut rounds: Vec<(u64, u64, Duration)> = Vec::new();
    for _ in 0..2 {
        let t = Instant::now();
        let mut conns: Vec<TcpStream> = Vec::with_capacity(CONNS);
        for i in 0..CONNS {
            let s = TcpStream::connect(respite.addr())
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            conns.push(s);
        }
        // Each connection is used once, then stays idle.
        for s in &mut conns {
            s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        }
        for s in &mut conns {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 7];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"+PONG\r\n");
        }
        let opened_in = t.elapsed();
        assert!(
            wait_until(Duration::from_secs(10), || respite.stat(active)
                == CONNS as i64 + 2),
            "{active} = {}",
            respite.stat(active)
        );
        std::thread::sleep(Duration::from_millis(500));
        let loaded = rss_kib(pid);
        // Still serving new clients with all of them open.
        assert_eq!(respite.raw().cmd(&[b"GET", b"probe"]), bulk(b"p"));
        drop(conns);
        assert!(
            wait_until(Duration::from_secs(10), || respite.stat(active) == 2),
            "{active} = {} after closing",
            respite.stat(active)
        );
        std::thread::sleep(Duration::from_secs(1));
        rounds.push((loaded, rss_kib(pid), opened_in));
    }
    let lat = prober.finish();
    let (loaded, closed, opened_in) = rounds[0];
    let (loaded2, closed2, _) = rounds[1];
    let per_conn = (loaded.saturating_sub(base)) as f64 * 1024.0 / CONNS as f64;
    eprintln!(
        "{CONNS} idle connections (opened and used in {opened_in:?}): respite RSS {base} KiB → \
         {loaded} KiB = {per_conn:.0} bytes per connection; after closing: {closed} KiB; second \
         round: {loaded2} KiB open, {closed2} KiB closed"
    );
    assert!(
        per_conn < 32.0 * 1024.0,
        "respite grows {per_conn:.0} bytes per idle connection (limit 32 KiB)"
    );
    assert!(
        loaded2 <= loaded + 4 * 1024 && closed2 <= closed + 4 * 1024,
        "memory leaks per connection: round 1 {loaded}/{closed} KiB, round 2 {loaded2}/{closed2} KiB"
    );
    assert_undisturbed("10k idle connections", lat);
    assert_eq!(c.cmd(&[b"GET", b"probe"]), bulk(b"p"));
    let growth = loaded.saturating_sub(base);
    assert!(
        closed2 <= base + growth / 2 + 4 * 1024,
        "RSS not given back: base {base} KiB, with {CONNS} connections {loaded} KiB, after \
         closing them {closed} KiB (second round {closed2} KiB). Measured 2026-11-29: the memory \
         is free inside glibc malloc's per-worker arenas (`gdb -p PID -batch -ex 'call \
         (int)malloc_trim(0)'` brings RSS back to ~7 MB), so respite frees it but the allocator \
         keeps it"
    );
}

/// (3) Slow clients: a request sent one byte every 100 ms (RESP and inline) is answered only
/// when complete; 200 connections stalled mid-request do not hold anyone up and finish later;
/// another client's GETs stay fast meanwhile.
#[test]
fn byte_by_byte_and_stalled_clients_do_not_disturb_others() {
    let _g = serial();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"slow", b"ok"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"probe", b"p"]), OK);
    let prober = Prober::start(&respite.addr(), b"probe", b"p");

    // 200 connections each stall in a different place of a SET.
    let full = RawClient::encode(&[b"SET", b"stalled", b"done"]);
    let mut stalled: Vec<RawClient> = (0..200)
        .map(|i| {
            let mut s = respite.raw();
            s.send_raw(&full[..1 + i % (full.len() - 1)]);
            s
        })
        .collect();

    let byte_by_byte = |bytes: &[u8], want: &[u8]| {
        let mut s = respite.raw();
        for (i, b) in bytes.iter().enumerate() {
            std::thread::sleep(Duration::from_millis(100));
            if i + 1 == bytes.len() {
                s.stream()
                    .set_read_timeout(Some(Duration::from_millis(10)))
                    .unwrap();
                let mut peek = [0u8; 1];
                let early = s.stream().peek(&mut peek);
                assert!(
                    early.is_err(),
                    "a reply came before the request was complete: {early:?}"
                );
                s.stream()
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
            }
            s.send_raw(&[*b]);
        }
        let t = Instant::now();
        assert_eq!(show(&s.read_reply()), show(want));
        t.elapsed()
    };
    let resp_wait = byte_by_byte(&RawClient::encode(&[b"GET", b"slow"]), &bulk(b"ok"));
    let inline_wait = byte_by_byte(b"GET slow\r\n", &bulk(b"ok"));
    assert!(resp_wait < Duration::from_secs(1) && inline_wait < Duration::from_secs(1));

    // The stalled ones complete their SET now and get +OK.
    for (i, s) in stalled.iter_mut().enumerate() {
        s.send_raw(&full[1 + i % (full.len() - 1)..]);
    }
    for s in &mut stalled {
        assert_eq!(s.read_reply(), OK);
    }
    assert_undisturbed("slow clients", prober.finish());
    assert_eq!(c.cmd(&[b"GET", b"stalled"]), bulk(b"done"));
}

/// (3) A client that pipelines 200 000 GETs of a 4 KiB value (800 MB of replies) and never reads:
/// respite stops reading from it, its RSS stays bounded, other clients are served promptly; once
/// it goes away everything is normal.
#[test]
fn client_that_never_reads_is_bounded() {
    let _g = serial();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let pid = respite.pid();
    let mut c = respite.raw();
    let fat = vec![b'f'; 4096];
    assert_eq!(c.cmd(&[b"SET", b"fat", &fat]), OK);
    assert_eq!(c.cmd(&[b"SET", b"probe", b"p"]), OK);
    std::thread::sleep(Duration::from_millis(200));
    let base = rss_kib(pid);
    let prober = Prober::start(&respite.addr(), b"probe", b"p");

    const N: usize = 200_000;
    let mut pipeline = Vec::with_capacity(N * 24);
    for _ in 0..N {
        RawClient::encode_into(&mut pipeline, &[b"GET", b"fat"]);
    }
    let stuck = TcpStream::connect(respite.addr()).unwrap();
    stuck
        .set_write_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let mut w = stuck.try_clone().unwrap();
        let written = written.clone();
        std::thread::spawn(move || {
            for chunk in pipeline.chunks(64 * 1024) {
                if w.write_all(chunk).is_err() {
                    break;
                }
                written.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        })
    };
    // Watch respite's RSS for 5 s while the stuck client's replies pile up (or do not).
    let mut peak = base;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    writer.join().unwrap();
    let growth_mib = peak.saturating_sub(base) as f64 / 1024.0;
    let sent = written.load(Ordering::Relaxed);
    let lat = prober.finish();
    eprintln!(
        "never-reading client: wrote {sent} of {} request bytes; respite RSS {base} KiB → peak \
         {peak} KiB (+{growth_mib:.1} MiB)",
        N * 22
    );
    assert!(
        growth_mib < 200.0,
        "respite grew {growth_mib:.1} MiB for a client that never reads"
    );
    assert_undisturbed("never-reading client", lat);
    // Rid of it: the server side closes, and things are as before.
    drop(stuck);
    let active = "redis.main.downstream_cx_active";
    assert!(
        wait_until(Duration::from_secs(10), || respite.stat(active) == 1),
        "{active} = {}",
        respite.stat(active)
    );
    assert_eq!(c.cmd(&[b"GET", b"fat"]), bulk(&fat));
    std::thread::sleep(Duration::from_millis(500));
    eprintln!("after it closed: respite RSS {} KiB", rss_kib(pid));
}

/// (3) Clients that disconnect with 10 000 requests in flight (also while a backend is stopped,
/// so the replies certainly arrive after the client is gone): the upstream connections are kept
/// (`upstream_cx_total` unchanged, no connect failure), replies are never misdelivered to other
/// clients, and later requests succeed.
#[test]
fn disconnect_with_ten_thousand_in_flight_keeps_upstreams_healthy() {
    let _g = serial();
    let backends = servers(3);
    let addrs = addrs(&backends);
    let respite = Respite::over(&addrs, 2);
    // Every worker connects to every backend before the baseline.
    for _ in 0..32 {
        let mut w = respite.raw();
        for i in 0..30 {
            let k = format!("warm:{i}").into_bytes();
            assert_eq!(w.cmd(&[b"SET", &k, &k]), OK);
        }
    }
    let cx_total = "cluster.cache.upstream_cx_total";
    let cx_fail = "cluster.cache.upstream_cx_connect_fail";
    let timeouts = "cluster.cache.upstream_rq_timeout";
    let base = (
        respite.stat(cx_total),
        respite.stat(cx_fail),
        respite.stat(timeouts),
    );
    assert!(base.0 >= 3, "{cx_total} = {}", base.0);

    // Checkers: each owns keys on every backend and verifies every reply it gets.
    let stop = Arc::new(AtomicBool::new(false));
    let checkers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, stop) = (respite.addr(), stop.clone());
            std::thread::spawn(move || {
                let mut c = RawClient::connect(&addr);
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let k = format!("chk:{w}:{}", n % 64).into_bytes();
                    let v = format!("{w}/{n}").into_bytes();
                    let r = c.pipeline(&[
                        cmd(&[b"SET", &k, &v]),
                        cmd(&[b"GET", &k]),
                        cmd(&[b"MGET", &k, b"warm:1", b"warm:2"]),
                    ]);
                    assert_eq!(r[0], OK, "checker {w} SET");
                    assert_eq!(r[1], bulk(&v), "checker {w} GET {}", show(&k));
                    let mut m = b"*3\r\n".to_vec();
                    m.extend(bulk(&v));
                    m.extend(bulk(b"warm:1"));
                    m.extend(bulk(b"warm:2"));
                    assert_eq!(show(&r[2]), show(&m), "checker {w} MGET");
                    n += 1;
                }
                n
            })
        })
        .collect();

    let mut burst = Vec::new();
    for i in 0..10_000 {
        let k = format!("warm:{}", i % 30).into_bytes();
        match i % 4 {
            0 => RawClient::encode_into(&mut burst, &[b"GET", &k]),
            1 => RawClient::encode_into(&mut burst, &[b"MGET", &k, b"warm:3", b"nope"]),
            2 => RawClient::encode_into(&mut burst, &[b"INCR", b"burst:counter"]),
            _ => RawClient::encode_into(&mut burst, &[b"EXISTS", &k, b"warm:7"]),
        }
    }
    for round in 0..6 {
        let mut s = TcpStream::connect(respite.addr()).unwrap();
        if round % 2 == 1 {
            // One backend stopped: its share of the burst waits upstream while the client goes.
            let victim = Stopped::new(backends[round % 3].pid());
            s.write_all(&burst).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(s);
            std::thread::sleep(Duration::from_millis(200));
            drop(victim);
        } else {
            s.write_all(&burst).unwrap();
            drop(s);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let rounds: Vec<usize> = checkers
        .into_iter()
        .map(|h| h.join().expect("checker panicked"))
        .collect();
    assert!(rounds.iter().all(|&n| n > 10), "checker rounds {rounds:?}");
    let now = (
        respite.stat(cx_total),
        respite.stat(cx_fail),
        respite.stat(timeouts),
    );
    assert_eq!(
        now, base,
        "({cx_total}, {cx_fail}, {timeouts}) changed after clients left with requests in flight"
    );
    // Nothing of the abandoned sessions is left: no connection, no request still counted.
    let (cx, rq) = (
        "redis.main.downstream_cx_active",
        "redis.main.downstream_rq_active",
    );
    assert!(
        wait_until(Duration::from_secs(5), || respite.stat(cx) == 0
            && respite.stat(rq) == 0),
        "{cx} = {}, {rq} = {} after every client left",
        respite.stat(cx),
        respite.stat(rq)
    );
    let mut c = respite.raw();
    for i in 0..30 {
        let k = format!("warm:{i}").into_bytes();
        assert_eq!(c.cmd(&[b"GET", &k]), bulk(&k));
    }
    let counter = c.cmd(&[b"GET", b"burst:counter"]);
    eprintln!(
        "checker rounds {rounds:?}; INCRs of abandoned bursts that ran: {}",
        show(&counter)
    );
}

/// (4) Empty keys and values, binary keys with CR, LF and NUL, and braces in every position:
/// respite's replies equal one redis-server's, byte for byte.
#[test]
fn empty_binary_and_brace_keys_match_redis() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let keys: Vec<&[u8]> = vec![
        b"",
        b"\r\n",
        b"a\r\nb",
        b"\r",
        b"\n",
        b"\0",
        b"a\0b",
        b"\0\r\n\0",
        b"\xff\xfe",
        b" ",
        b"{",
        b"}",
        b"{}",
        b"{}a",
        b"a{}",
        b"a{}b",
        b"{a}",
        b"{a}b",
        b"b{a}",
        b"x{a}y",
        b"{a}{b}",
        b"}{",
        b"}a{",
        b"{{a}}",
        b"{a{b}}",
        b"{}{a}",
        b"a{",
        b"a}",
        b"{a",
        b"a}b{c}",
        b"{\r\n}",
        b"{\0}x",
        b"{ }",
        b"{}}",
        b"{{}",
    ];
    let mut stream: Vec<Vec<Vec<u8>>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let v: Vec<u8> = if i % 3 == 0 {
            Vec::new()
        } else {
            [*k, b"=", format!("{i}").as_bytes()].concat()
        };
        stream.push(cmd(&[b"SET", k, &v]));
        stream.push(cmd(&[b"GET", k]));
        stream.push(cmd(&[b"STRLEN", k]));
        stream.push(cmd(&[b"APPEND", k, b""]));
        stream.push(cmd(&[b"APPEND", k, b"\r\n"]));
        stream.push(cmd(&[b"GET", k]));
        stream.push(cmd(&[b"EXISTS", k, k]));
    }
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().copied());
    mget.push(b"missing");
    stream.push(cmd(&mget));
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for k in &keys {
        mset.push(k);
        mset.push(b"");
    }
    stream.push(cmd(&mset));
    stream.push(cmd(&mget));
    let mut exists: Vec<&[u8]> = vec![b"EXISTS"];
    exists.extend(keys.iter().copied());
    stream.push(cmd(&exists));
    stream.push(cmd(&[b"HSET", b"", b"", b""]));
    stream.push(cmd(&[b"HSET", b"{}", b"\r\n", b"\0"]));
    stream.push(cmd(&[b"HGETALL", b""]));
    stream.push(cmd(&[b"HGETALL", b"{}"]));
    stream.push(cmd(&[b"RPUSH", b"{list}", b"", b"\r\n", b""]));
    stream.push(cmd(&[b"LRANGE", b"{list}", b"0", b"-1"]));
    stream.push(cmd(&[b"SET", b"", b"", b"GET"]));
    stream.push(cmd(&[b"GETDEL", b"\0"]));
    stream.push(cmd(&[b"GET", b"\0"]));
    let mut del: Vec<&[u8]> = vec![b"DEL"];
    del.extend(keys.iter().copied());
    del.push(b"{list}");
    stream.push(cmd(&del));
    stream.push(cmd(&mget));
    stream.push(cmd(&[b"GET"]));
    stream.push(cmd(&[b"SET", b""]));

    let mut r = reference.raw();
    let mut c = respite.raw();
    let want = pipelined(&mut r, &stream, 50);
    let got = pipelined(&mut c, &stream, 50);
    for ((command, w), g) in stream.iter().zip(&want).zip(&got) {
        let shown: Vec<String> = command.iter().map(|a| show(a)).collect();
        assert_eq!(
            show(g),
            show(w),
            "{shown:?}: respite (left) vs redis (right)"
        );
    }
    // The keys really are spread over backends (with braces, by their tag), so the split
    // commands above were split. Which backends depends on the ports of this run: ketama may
    // leave one of three without any of these keys, never all on one in practice.
    let placement = Placement::new(&addrs(&backends));
    let owners: std::collections::BTreeSet<usize> =
        keys.iter().map(|k| placement.owner(k)).collect();
    assert!(
        owners.len() >= 2,
        "edge keys all on one backend: {owners:?}"
    );
}

/// (4) Empty inline lines (CRLF, LF, blanks, tabs), `*0` and `*-1` are skipped silently, as Redis
/// does; an empty quoted inline argument is an unknown command '' in both.
#[test]
fn empty_inline_lines_are_skipped_like_redis() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let streams: Vec<&[u8]> = vec![
        b"\r\n\r\n\n",
        b"\r\n\n   \r\n\t\r\nPING\r\n\r\n",
        b"*0\r\n*-1\r\nPING\r\n*0\r\n",
        b"\nSET e 1\r\n\n\nGET e\r\n  \r\nDEL e\r\n",
        b"\"\"\r\nPING\r\n",
        b"  GET   e  \r\n",
        b"SET \"a\\x00b\" \"\\r\\n\"\r\nGET \"a\\x00b\"\r\nDEL \"a\\x00b\"\r\n",
    ];
    for bytes in streams {
        let (want, want_closed) =
            exchange(&reference.addr(), bytes, false, Duration::from_millis(400));
        let (got, got_closed) = exchange(&respite.addr(), bytes, false, Duration::from_millis(400));
        assert!(!want_closed, "redis closed on {}", show(bytes));
        assert_eq!(
            (show(&got), got_closed),
            (show(&want), want_closed),
            "{}: respite (left) vs redis (right)",
            show(bytes)
        );
    }
}

/// (5) `redis-cli --pipe` with 100 000 RESP-encoded SETs: no errors, 100 000 replies, every key
/// readable through respite afterwards.
#[test]
fn redis_cli_pipe_100k_sets() {
    let _g = serial();
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    const N: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sets.resp");
    let mut data = Vec::with_capacity(N * 48);
    for i in 0..N {
        RawClient::encode_into(
            &mut data,
            &[
                b"SET",
                format!("pipe:{i}").as_bytes(),
                format!("v{i}").as_bytes(),
            ],
        );
    }
    std::fs::write(&file, &data).unwrap();
    let out = std::process::Command::new("timeout")
        .args(["50", "redis-cli", "-h", "127.0.0.1", "-p"])
        .arg(respite.port.to_string())
        .arg("--pipe")
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("run redis-cli --pipe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("redis-cli --pipe: {}", stdout.trim());
    assert!(
        out.status.success(),
        "redis-cli --pipe failed ({}): {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("errors: 0, replies: {N}")),
        "redis-cli --pipe said: {stdout}"
    );
    let mut c = respite.raw();
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let keys: Vec<Vec<u8>> = chunk
            .iter()
            .map(|i| format!("pipe:{i}").into_bytes())
            .collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(|k| k.as_slice()));
        let reply = c.cmd(&args);
        let mut want = format!("*{}\r\n", chunk.len()).into_bytes();
        for i in chunk {
            want.extend(bulk(format!("v{i}").as_bytes()));
        }
        assert!(
            reply == want,
            "MGET pipe:{}..: {}",
            chunk[0],
            show(&reply[..reply.len().min(200)])
        );
    }
    let total: i64 = backends
        .iter()
        .map(|b| {
            let r = b.raw().cmd(&[b"DBSIZE"]);
            String::from_utf8_lossy(&r[1..r.len() - 2])
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, N as i64, "keys over all backends");
}

/// A backend's `errorstat_ERR` count (errors it replied), 0 when none yet.
fn err_replies(server: &RedisServer) -> u64 {
    let r = server.raw().cmd(&[b"INFO", b"errorstats"]);
    String::from_utf8_lossy(&r)
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_ERR:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Commands respite will not run (pub/sub, blocking, MONITOR, CONFIG, ...) and
/// unknown commands, pipelined by a client in bulk: each gets its error (unknown ones in Redis's
/// words), the connection stays open and in order, and nothing reaches a backend. A listener
/// `custom_commands` entry is routed by its key to the one backend that owns it.
#[test]
fn refused_and_unknown_commands_keep_the_connection_and_reach_no_backend() {
    let _g = serial();
    let reference = RedisServer::start();
    let backends = servers(3);
    let addrs = addrs(&backends);
    let respite = respite_with(&addrs, 2, "1s", "custom_commands = [\"foo.bar\"]");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let before: Vec<_> = backends.iter().map(commandstats).collect();
    let refused: Vec<(Vec<Vec<u8>>, &str)> = vec![
        (cmd(&[b"CLIENT", b"LIST"]), "client|list"),
        (cmd(&[b"SWAPDB", b"0", b"1"]), "swapdb"),
        (cmd(&[b"MONITOR"]), "monitor"),
        (cmd(&[b"CONFIG", b"GET", b"*"]), "config|get"),
        (cmd(&[b"DEBUG", b"SLEEP", b"10"]), "debug"),
        (cmd(&[b"SHUTDOWN"]), "shutdown"),
    ];
    let unknown: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"NOSUCH", b"x", b"y"]),
        cmd(&[b"foo.bar"]),
        cmd(&[b"\r\n\0", b"\0"]),
        cmd(&[b""]),
    ];
    let mut stream: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..50 {
        stream.extend(refused.iter().map(|(c, _)| c.clone()));
        stream.extend(unknown.iter().cloned());
        stream.push(cmd(&[b"GET", b"k"]));
    }
    let replies = pipelined(&mut c, &stream, stream.len());
    let mut direct = reference.raw();
    let per_round = refused.len() + unknown.len() + 1;
    for (round, chunk) in replies.chunks(per_round).enumerate() {
        for ((_, name), r) in refused.iter().zip(chunk) {
            let prefix = format!("-ERR '{name}' is not supported by respite: ");
            assert!(
                r.starts_with(prefix.as_bytes()) && r.ends_with(b"\r\n"),
                "round {round}: {name}: {}",
                show(r)
            );
        }
        for (u, r) in unknown.iter().zip(&chunk[refused.len()..]) {
            let args: Vec<&[u8]> = u.iter().map(|a| a.as_slice()).collect();
            let want = direct.cmd(&args);
            assert_eq!(show(r), show(&want), "round {round}: {:?}", show(&u[0]));
        }
        assert_eq!(chunk[per_round - 1], bulk(b"v"), "round {round}: GET k");
    }
    let after: Vec<_> = backends.iter().map(commandstats).collect();
    let gets = |s: &[std::collections::BTreeMap<String, u64>]| -> u64 {
        s.iter().map(|m| m.get("get").copied().unwrap_or(0)).sum()
    };
    assert_eq!(gets(&after) - gets(&before), 50, "GETs on the backends");
    for (b, a) in before.iter().zip(&after) {
        let strip = |m: &std::collections::BTreeMap<String, u64>| {
            let mut m = m.clone();
            m.remove("get");
            m
        };
        assert_eq!(
            strip(a),
            strip(b),
            "a refused or unknown command reached a backend"
        );
    }

    // With `custom_commands = ["foo.bar"]`, `foo.bar key ...` goes to the owner of `key` (these
    // redis-servers have no such module, so the owner answers its own unknown-command error).
    let placement = Placement::new(&addrs);
    let errs: Vec<u64> = backends.iter().map(err_replies).collect();
    let key = b"custom:key";
    let r = c.cmd(&[b"foo.bar", key, b"arg"]);
    assert_eq!(
        show(&r),
        show(b"-ERR unknown command 'foo.bar', with args beginning with: 'custom:key' 'arg' \r\n"),
        "foo.bar through respite"
    );
    let now: Vec<u64> = backends.iter().map(err_replies).collect();
    let owner = placement.owner(key);
    for (i, (b, a)) in errs.iter().zip(&now).enumerate() {
        assert_eq!(
            a - b,
            u64::from(i == owner),
            "backend {i} errors (owner of {} is {owner})",
            show(key)
        );
    }
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v"));
}

/// `used_memory` of a redis-server, in bytes (INFO memory).
fn used_memory(server: &RedisServer) -> u64 {
    let info = server.raw().cmd(&[b"INFO", b"memory"]);
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in {}", show(&info)))
}

/// Opens `n` connections that each pipeline `requests` copies of `request` and never read a
/// byte. Returns them (still open) and the writer threads (done when Respite stops reading or
/// closes the connection).
fn never_reading(
    addr: &str,
    n: usize,
    request: &[u8],
    requests: usize,
) -> (Vec<TcpStream>, Vec<std::thread::JoinHandle<()>>) {
    let pipeline: Arc<Vec<u8>> = Arc::new(request.repeat(requests));
    let mut conns = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..n {
        let s = TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut w = s.try_clone().unwrap();
        let p = pipeline.clone();
        writers.push(std::thread::spawn(move || {
            for chunk in p.chunks(64 * 1024) {
                if w.write_all(chunk).is_err() {
                    break;
                }
            }
        }));
        conns.push(s);
    }
    (conns, writers)
}

/// (3) 200 connections each pipelining 10 000 `GET` of a 64 KiB value (125 GB of replies asked
/// for) and never reading, against `maxmemory_clients = 32 MiB`: Respite's RSS stays within the
/// budget plus a margin, so does the backend's memory (Respite asks Redis for no more than it
/// may hold; a fresh worker's first guess of reply sizes is 16 KiB, so up to four times the
/// budget at first), well-behaved clients of the same and of the other backend are answered
/// within op_timeout, attackers are evicted and counted while they keep the budget full (each
/// one left holds at most a few MiB), and once they are gone Respite's RSS is back near its
/// idle baseline.
#[test]
fn clients_that_ask_and_never_read_are_held_to_the_budget_and_evicted() {
    let _g = serial();
    const ATTACKERS: usize = 200;
    const BUDGET_MIB: u64 = 32;
    let backends = servers(2);
    let addrs = addrs(&backends);
    let placement = Placement::new(&addrs);
    let (big, near, far) = (
        placement.key_on(0, "big"),
        placement.key_on(0, "near"),
        placement.key_on(1, "far"),
    );
    let (cfg, port, admin) = budget_config(&addrs, BUDGET_MIB << 20);
    let respite = Respite::start(&cfg, port, admin);
    let pid = respite.pid();
    let mut c = respite.raw();
    let value = vec![b'v'; 64 * 1024];
    assert_eq!(c.cmd(&[b"SET", big.as_bytes(), &value]), OK);
    assert_eq!(c.cmd(&[b"SET", near.as_bytes(), b"n"]), OK);
    assert_eq!(c.cmd(&[b"SET", far.as_bytes(), b"f"]), OK);
    std::thread::sleep(Duration::from_millis(300));
    let (base_rss, base_used) = (rss_kib(pid), used_memory(&backends[0]));
    let probers = [
        Prober::start(&respite.addr(), near.as_bytes(), b"n"),
        Prober::start(&respite.addr(), far.as_bytes(), b"f"),
    ];

    let request = RawClient::encode(&[b"GET", big.as_bytes()]);
    let (conns, writers) = never_reading(&respite.addr(), ATTACKERS, &request, 10_000);
    let (mut peak_rss, mut peak_used) = (base_rss, base_used);
    let evicted = "redis.main.evicted_clients";
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        peak_rss = peak_rss.max(rss_kib(pid));
        peak_used = peak_used.max(used_memory(&backends[0]));
        if t.elapsed() > Duration::from_secs(6) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let lat: Vec<LatencySummary> = probers.into_iter().map(Prober::finish).collect();
    let rss_growth_mib = peak_rss.saturating_sub(base_rss) / 1024;
    let used_growth_mib = peak_used.saturating_sub(base_used) >> 20;
    eprintln!(
        "{ATTACKERS} never-reading clients: respite RSS {base_rss} KiB -> peak {peak_rss} KiB \
         (+{rss_growth_mib} MiB), backend used_memory +{used_growth_mib} MiB, evicted {}, \
         probers {lat:?}",
        respite.stat(evicted)
    );
    // Every attacker is either evicted or still connected (the probers' connections closed).
    let accounted = || {
        let s = respite.stats();
        let (evicted, active) = (s[evicted], s["redis.main.downstream_cx_active"]);
        evicted + active - 1 == ATTACKERS as i64
    };
    assert!(
        wait_until(Duration::from_secs(3), accounted),
        "{:?}",
        respite.stats()
    );
    assert!(
        respite.stat(evicted) >= 1,
        "evicted {}",
        respite.stat(evicted)
    );
    // The budget and its quarter's reserve (40 MiB), the 200 attackers' pipelines read and not
    // yet parsed (up to 300 KB each: 60 MiB) and allocator slack: measured 96-128 MiB on the
    // shared 2-core machine. One such client pinned 440 MB before the budget.
    assert!(
        rss_growth_mib < BUDGET_MIB + 160,
        "respite grew {rss_growth_mib} MiB with a {BUDGET_MIB} MiB budget"
    );
    assert!(
        used_growth_mib < 4 * BUDGET_MIB + 64,
        "the backend grew {used_growth_mib} MiB holding replies for respite"
    );
    // Every GET was answered with its value (the prober checks); on a quiet machine p99 is
    // tens of ms, but with other test binaries on the 2 cores the one worker serving 200
    // attackers has been seen at 2.4 s, so only a stall is refused here.
    for (what, s) in ["same backend", "other backend"].iter().zip(&lat) {
        assert!(
            s.max < Duration::from_secs(10),
            "{what}: max {:?} ({s:?})",
            s.max
        );
    }
    // The evicted attackers find their connections closed; the others go.
    drop(conns);
    for w in writers {
        w.join().unwrap();
    }
    let active = "redis.main.downstream_cx_active";
    assert!(
        wait_until(Duration::from_secs(10), || respite.stat(active) == 1),
        "{active} = {}",
        respite.stat(active)
    );
    // Memory goes back: within a few MiB of the idle baseline a few seconds later.
    let back = wait_until(Duration::from_secs(5), || {
        rss_kib(pid) < base_rss + 12 * 1024
    });
    let after = rss_kib(pid);
    eprintln!("after the attackers left: respite RSS {after} KiB (baseline {base_rss} KiB)");
    assert!(back, "RSS {after} KiB, baseline {base_rss} KiB");
    assert_eq!(c.cmd(&[b"GET", near.as_bytes()]), bulk(b"n"));
}

/// (3) A client whose replies not read pass its `client_output_buffer_limit` hard limit is
/// disconnected and counted; the replies still coming for it are dropped and another client of
/// the same connection pool is answered throughout.
#[test]
fn a_client_past_its_output_buffer_limit_is_disconnected() {
    let _g = serial();
    let backends = servers(1);
    let respite = respite_with(
        &addrs(&backends),
        1,
        "1s",
        "[listeners.client_output_buffer_limit]\nhard_limit = 1048576\nsoft_limit = 0\n",
    );
    let mut c = respite.raw();
    let value = vec![b'v'; 64 * 1024];
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), OK);
    let request = RawClient::encode(&[b"GET", b"big"]);
    let (mut conns, writers) = never_reading(&respite.addr(), 1, &request, 1000);
    let closed = "redis.main.client_output_buffer_limit_disconnections";
    assert!(
        wait_until(Duration::from_secs(10), || respite.stat(closed) == 1),
        "{closed} = {}",
        respite.stat(closed)
    );
    let mut s = conns.remove(0);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.len() < 1000 * value.len(), "{} bytes", got.len());
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(respite.stat("redis.main.evicted_clients"), 0);
    for _ in 0..100 {
        assert_eq!(c.cmd(&[b"GET", b"big"]), bulk(&value));
    }
    assert_eq!(respite.stat(closed), 1);
}

/// The largest `omem` (reply bytes Redis holds for a client, `CLIENT LIST`) among `server`'s
/// clients, in bytes.
fn largest_omem(server: &RedisServer) -> u64 {
    let list = server.raw().cmd(&[b"CLIENT", b"LIST"]);
    String::from_utf8_lossy(&list)
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("omem="))
        .filter_map(|v| v.parse().ok())
        .max()
        .unwrap_or(0)
}

/// (3) Upstream: 50 connections pipelining 10 000 `GET` of a 64 KiB value each and never
/// reading (31 GB of replies asked for) make Respite's connection to the backend carry no more
/// than `max_reply_bytes_in_flight` of replies: the backend's output buffer for Respite (its
/// `omem`) and its `used_memory` stay within a small multiple of the window (at full scale,
/// before the window, Redis grew until it was OOM-killed), the window's back-pressure is
/// counted, and a well-behaved client of the same backend is answered throughout.
#[test]
fn a_backend_holds_no_more_replies_for_respite_than_its_window() {
    let _g = serial();
    const WINDOW: u64 = 4 << 20;
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (cfg, port, admin) = budget_config(&addrs, 64 << 20);
    let cfg = cfg + &format!("max_reply_bytes_in_flight = {WINDOW}\n");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    let value = vec![b'v'; 64 * 1024];
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), OK);
    assert_eq!(c.cmd(&[b"SET", b"small", b"s"]), OK);
    let base_used = used_memory(&backends[0]);
    let prober = Prober::start(&respite.addr(), b"small", b"s");
    let request = RawClient::encode(&[b"GET", b"big"]);
    let (conns, writers) = never_reading(&respite.addr(), 50, &request, 10_000);
    let (mut peak_omem, mut peak_used, mut samples) = (0, base_used, 0);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        peak_omem = peak_omem.max(largest_omem(&backends[0]));
        peak_used = peak_used.max(used_memory(&backends[0]));
        samples += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let lat = prober.finish();
    let backed_up = respite.stat("cluster.cache.upstream_flow_control_backed_up_total");
    let used_growth = peak_used.saturating_sub(base_used);
    eprintln!(
        "window {WINDOW} B: backend omem peak {peak_omem} B, used_memory +{} KiB over {samples} \
         samples, backed up {backed_up} times, prober {lat:?}",
        used_growth >> 10
    );
    assert!(backed_up > 0, "the window never held requests back");
    // The window bounds the reply bytes asked; Redis keeps them in reply blocks allocated
    // larger than what they hold when small replies (the prober's) come between large ones:
    // measured up to about 4.1 times the bytes (CI). With the largest window (1 GiB) the
    // backend held 53 MiB here.
    assert!(
        peak_omem <= 5 * WINDOW,
        "the backend held {peak_omem} B of replies for respite (window {WINDOW} B)"
    );
    assert!(
        used_growth <= 5 * WINDOW + (8 << 20),
        "the backend's used_memory grew {used_growth} B (window {WINDOW} B)"
    );
    assert!(
        lat.count > 0 && lat.max < Duration::from_secs(10),
        "{lat:?}"
    );
    drop(conns);
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(c.cmd(&[b"GET", b"small"]), bulk(b"s"));
}

/// (3) The window holds for a burst that nothing announced: after a run of small requests one
/// at a time (the reply estimate at its floor, where a 4 MiB window alone would let 1 024
/// requests out), one client pipelining 1 000 `GET` of a 64 KiB value makes the host buffer at
/// most 64 of them at once (the connection's depth): 4 MiB, not 64 MiB. The backend is told to
/// close any client whose output buffer passes 8 MiB (`client-output-buffer-limit normal 8mb 0
/// 0`): the depth keeps Respite's connection under it, so every reply arrives; before it, the
/// burst passed 8 MiB at once and all 1 000 replies were `-upstream failure`.
#[test]
fn a_burst_after_small_requests_asks_the_host_for_no_more_than_the_depth() {
    let _g = serial();
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &addrs, 1, "") + "max_reply_bytes_in_flight = 4194304\n";
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    let value = vec![b'v'; 64 * 1024];
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), OK);
    assert_eq!(c.cmd(&[b"SET", b"small", b"s"]), OK);
    assert_eq!(
        backends[0].raw().cmd(&[
            b"CONFIG",
            b"SET",
            b"client-output-buffer-limit",
            b"normal 8mb 0 0"
        ]),
        OK
    );
    for _ in 0..2_000 {
        assert_eq!(c.cmd(&[b"GET", b"small"]), bulk(b"s"));
    }
    let mut burst = Vec::new();
    for _ in 0..1_000 {
        RawClient::encode_into(&mut burst, &[b"GET", b"big"]);
    }
    c.send_raw(&burst);
    let want = bulk(&value);
    let wrong: Vec<Vec<u8>> = (0..1_000)
        .map(|_| c.read_reply())
        .filter(|r| *r != want)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of 1 000 replies of the burst lost to the host's output-buffer limit, the first {:?}",
        wrong.len(),
        wrong
            .first()
            .map(|r| String::from_utf8_lossy(r.get(..80).unwrap_or(r)))
    );
    assert_eq!(c.cmd(&[b"GET", b"small"]), bulk(b"s"));
}

/// (3) Fairness on a shared upstream connection: 50 clients each pipelining 1 000 `GET` of a
/// 1 MiB value and never reading, on the host a well-behaved client also uses, one worker,
/// default limits. Requests past the reply window wait in the connection's waiting room and
/// leave in turns, one per client, so the prober waits behind at most one request of each
/// attacker instead of all of them: with one first-in first-out queue it got 2 answers in 5 s
/// (one took 15 s); in turns it keeps being answered. Being light (small replies, little held)
/// it takes a first turn each time, ahead of the attackers' turns: p99 15-16 ms and max
/// 39-43 ms, about 1 950 answers, in three runs on a quiet machine, against 59-170 ms and
/// 0.6-1.0 s (op_timeout, which failed a CI run) in two runs with ordinary turns only.
/// Requests of the attackers cut off for the budget are dropped before they are written. With
/// transparent huge pages on, see the test above. Whatever the turns, each `GET` still waits
/// behind the replies already asked on the connection (up to the 64 MiB window of 1 MiB
/// values), which takes longer the less CPU the machine gives: 1 533-1 642 answers (p99 23-27
/// ms) quiet, 896-1 684 with two busy loops on the two cores, 40 (p50 68 ms, max 0.48 s) in a
/// CI run with a release build alongside. So the bound is 25 answers and p99 under 1 s, which
/// the first-in first-out queue (2 answers, 15 s) is far from.
#[test]
fn a_client_waits_behind_one_request_of_each_flooding_client_not_all_of_them() {
    let _g = serial();
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (port, admin) = (free_port(), free_port());
    let respite = Respite::start(&simple_config(port, admin, &addrs, 1, ""), port, admin);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"big", &vec![b'v'; 1 << 20]]), OK);
    assert_eq!(c.cmd(&[b"SET", b"small", b"s"]), OK);
    let prober = Prober::start(&respite.addr(), b"small", b"s");
    let request = RawClient::encode(&[b"GET", b"big"]);
    let (conns, writers) = never_reading(&respite.addr(), 50, &request, 1_000);
    std::thread::sleep(Duration::from_secs(5));
    let lat = prober.finish();
    let cancelled = respite.stat("cluster.cache.upstream_rq_cancelled");
    let evicted = respite.stat("redis.main.evicted_clients");
    eprintln!("prober {lat:?}, evicted {evicted}, cancelled {cancelled}");
    assert!(
        lat.count >= 25 && lat.p99 < GET_MAX,
        "the prober starved behind the flood: {lat:?}"
    );
    assert!(
        evicted == 0 || cancelled > 0,
        "{evicted} clients evicted, none of their waiting requests dropped"
    );
    drop(conns);
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(c.cmd(&[b"GET", b"small"]), bulk(b"s"));
}

/// (3) Transparent huge pages are off in the respite process (as Redis's `disable-thp yes`).
/// With them on, mimalloc's arenas are huge-page backed, and after clients were evicted each
/// new 64 KiB output chunk faulted a fresh 2 MiB page: the worker spent 94% of its time in the
/// kernel's page clearing and the flooding test above got 21-23 answers in 5 s (each `GET`
/// about 0.5 s) in two of three runs, and in a CI run.
#[test]
fn transparent_huge_pages_are_off_in_the_process() {
    let _g = serial();
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let status = std::fs::read_to_string(format!("/proc/{}/status", respite.pid()))
        .expect("read /proc/<pid>/status");
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(thp, Some("0"), "{status}");
}

/// The unsent bytes (`tx_queue`, `/proc/net/tcp`) of the local TCP socket from `local_port`
/// to `remote_port`, when there is one.
fn send_queue(local_port: u16, remote_port: u16) -> Option<u64> {
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|path| {
        let table = std::fs::read_to_string(path).ok()?;
        table.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 || port(f[1])? != local_port || port(f[2])? != remote_port {
                return None;
            }
            u64::from_str_radix(f[4].split(':').next()?, 16).ok()
        })
    })
}

/// (3) Replies a client has not read wait in Respite, where its output-buffer limit and the
/// worker's budget count them, not in the kernel's send queue: the socket to a client that
/// pipelines 32 `GET`s of a 1 MiB value and does not read holds at most `TCP_NOTSENT_LOWAT`
/// (256 KiB) unsent, where it held `tcp_wmem`'s 4 MiB before (measured 4 029 952 bytes). Two
/// thousand such clients put the host's TCP memory under pressure, and every connection of
/// the host, Respite's upstream ones included, then stalled on retransmits. Once the client
/// reads, every reply arrives whole and in order.
#[test]
fn replies_a_client_has_not_read_wait_in_respite_not_in_the_kernel() {
    let _g = serial();
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let value: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), OK);
    const N: usize = 32;
    let mut slow = respite.raw();
    let client_port = slow.stream().local_addr().unwrap().port();
    let mut burst = Vec::new();
    for _ in 0..N {
        RawClient::encode_into(&mut burst, &[b"GET", b"big"]);
    }
    slow.send_raw(&burst);
    // Until the client's receive buffer is full and the send queue stops changing.
    let mut queued = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(250));
        queued.push(send_queue(respite.port, client_port).unwrap_or(0));
        if let [.., a, b] = queued[..]
            && a == b
            && a > 0
        {
            break;
        }
    }
    let last = queued.last().copied().unwrap_or(0);
    eprintln!("unsent bytes to the client, every 250 ms: {queued:?}");
    assert!(
        last > 0 && last <= 512 * 1024,
        "the kernel holds {last} unsent bytes for a client that does not read (samples {queued:?})"
    );
    let want = bulk(&value);
    for i in 0..N {
        assert!(
            slow.read_reply() == want,
            "reply {i} of {N} is not the value"
        );
    }
    assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
}

/// (3) Memory returns after large replies stop: a client reading 64 `GET`s of a 1 MiB value,
/// pipelined 16 at a time, grows the upstream connection's read buffer (kept while large
/// replies flow); a moment after the load ends Respite's RSS is back within 3 MiB of where it
/// was before it. The buffer used to stay for the connection's life (up to 8 MiB each).
#[test]
fn memory_grown_by_large_replies_is_given_back_once_they_stop() {
    let _g = serial();
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let pid = respite.pid();
    let mut c = respite.raw();
    let value = vec![b'v'; 1 << 20];
    assert_eq!(c.cmd(&[b"SET", b"big", &value]), OK);
    assert_eq!(c.cmd(&[b"GET", b"missing"]), b"$-1\r\n");
    std::thread::sleep(Duration::from_millis(1500));
    let before = rss_kib(pid);
    let mut reader = respite.raw();
    let mut batch = Vec::new();
    for _ in 0..16 {
        RawClient::encode_into(&mut batch, &[b"GET", b"big"]);
    }
    let want = bulk(&value);
    let mut peak = before;
    for _ in 0..4 {
        reader.send_raw(&batch);
        for _ in 0..16 {
            assert!(reader.read_reply() == want);
        }
        peak = peak.max(rss_kib(pid));
    }
    drop(reader);
    let mut after = rss_kib(pid);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) && after > before + 3 * 1024 {
        std::thread::sleep(Duration::from_millis(250));
        after = rss_kib(pid);
    }
    eprintln!(
        "respite RSS before {before} KiB, peak {peak} KiB, {after} KiB {:?} after the load",
        t.elapsed()
    );
    assert!(
        after <= before + 3 * 1024,
        "respite kept {} KiB of {} KiB grown for large replies (before {before} KiB)",
        after.saturating_sub(before),
        peak.saturating_sub(before)
    );
    assert_eq!(c.cmd(&[b"GET", b"missing"]), b"$-1\r\n");
}

/// (3) Requests count in the budget: four clients sending a 48 MiB `SET` each at once, with
/// `maxmemory_clients = 32 MiB`, are received one after another past the budget (one at a time
/// always goes on, so none waits for ever): every value is stored byte for byte, Respite holds
/// each request once (its RSS grows by at most the budget and one request), and another client
/// is answered throughout.
#[test]
fn large_requests_at_once_are_received_within_the_budget() {
    let _g = serial();
    const CLIENTS: usize = 4;
    const VALUE_MIB: usize = 48;
    const BUDGET_MIB: u64 = 32;
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (cfg, port, admin) = budget_config(&addrs, BUDGET_MIB << 20);
    let cfg = cfg.replace("op_timeout = \"1s\"", "op_timeout = \"30s\"");
    let respite = Respite::start(&cfg, port, admin);
    let pid = respite.pid();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"small", b"s"]), OK);
    std::thread::sleep(Duration::from_millis(300));
    let base_rss = rss_kib(pid);
    let prober = Prober::start(&respite.addr(), b"small", b"s");
    let done = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, done) = (respite.addr(), done.clone());
            std::thread::spawn(move || {
                let value = vec![b'a' + i as u8; VALUE_MIB << 20];
                let key = format!("large:{i}");
                let mut c = RawClient::connect(&addr);
                let reply = c.cmd(&[b"SET", key.as_bytes(), &value]);
                done.fetch_add(1, Ordering::SeqCst);
                reply
            })
        })
        .collect();
    let mut peak = base_rss;
    while done.load(Ordering::SeqCst) < CLIENTS {
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(10));
    }
    for s in senders {
        assert_eq!(s.join().unwrap(), OK);
    }
    let lat = prober.finish();
    let growth_mib = peak.saturating_sub(base_rss) / 1024;
    eprintln!(
        "{CLIENTS} x {VALUE_MIB} MiB SETs at once, budget {BUDGET_MIB} MiB: respite RSS +{growth_mib} \
         MiB at peak, prober {lat:?}"
    );
    let mut direct = backends[0].raw();
    for i in 0..CLIENTS {
        let key = format!("large:{i}");
        assert_eq!(
            direct.cmd(&[b"STRLEN", key.as_bytes()]),
            format!(":{}\r\n", VALUE_MIB << 20).into_bytes()
        );
        let tail = direct.cmd(&[b"GETRANGE", key.as_bytes(), b"-3", b"-1"]);
        assert_eq!(tail, bulk(&[b'a' + i as u8; 3]), "{key}");
    }
    // Each request is held once: received into its session's buffer (within the budget, one
    // turn past it) and written from there on a leased connection. Measured +50 MiB; +150 MiB
    // when a received request was copied into a shared connection's output.
    let bound = BUDGET_MIB + VALUE_MIB as u64 + 32;
    assert!(
        growth_mib < bound,
        "respite grew {growth_mib} MiB for {CLIENTS} x {VALUE_MIB} MiB SETs (bound {bound} MiB)"
    );
    assert!(
        lat.count > 0 && lat.max < Duration::from_secs(10),
        "{lat:?}"
    );
}

/// (1) The frames open transactions hold count in the worker's budget, as Redis counts a
/// client's MULTI state in `maxmemory-clients`: four clients each queue two 24 MiB `SET`s
/// inside MULTI, one after another, against `maxmemory_clients = 64 MiB`. The largest holders
/// are evicted as the budget is passed (and counted); nothing of an evicted client's
/// transaction runs, a transaction left runs whole at EXEC, and Respite's peak RSS grows by at
/// most the budget, one request and a margin. Before, the frames were outside the budget: all
/// four transactions stayed open, 192 MiB of frames held.
#[test]
fn frames_held_by_open_transactions_count_in_the_budget() {
    let _g = serial();
    const CLIENTS: usize = 4;
    const VALUE_MIB: usize = 24;
    const BUDGET_MIB: u64 = 64;
    let backends = servers(1);
    let (cfg, port, admin) = budget_config(&addrs(&backends), BUDGET_MIB << 20);
    let cfg = cfg.replace("op_timeout = \"1s\"", "op_timeout = \"30s\"");
    let respite = Respite::start(&cfg, port, admin);
    let pid = respite.pid();
    let mut small = respite.raw();
    assert_eq!(small.cmd(&[b"SET", b"small", b"s"]), OK);
    std::thread::sleep(Duration::from_millis(300));
    let base = peak_rss_kib(pid);
    let mut clients: Vec<Option<RawClient>> = (0..CLIENTS).map(|_| Some(respite.raw())).collect();
    for c in clients.iter_mut().flatten() {
        assert_eq!(c.cmd(&[b"MULTI"]), OK);
    }
    // A client evicted while it waits finds out at its next command: its write or read fails.
    for round in 0..2 {
        for (i, slot) in clients.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            let key = format!("tx:{i}:{round}");
            let value = vec![b'a' + i as u8; VALUE_MIB << 20];
            match c.try_cmd(&[b"SET", key.as_bytes(), &value]) {
                Ok(r) => assert_eq!(r, b"+QUEUED\r\n", "{key}"),
                Err(_) => *slot = None,
            }
        }
    }
    let mut ran = vec![false; CLIENTS];
    for (i, slot) in clients.iter_mut().enumerate() {
        let Some(c) = slot else { continue };
        match c.try_cmd(&[b"EXEC"]) {
            Ok(r) => {
                assert_eq!(r, b"*2\r\n+OK\r\n+OK\r\n", "client {i}'s EXEC");
                ran[i] = true;
            }
            Err(_) => *slot = None,
        }
    }
    let grew = peak_rss_kib(pid).saturating_sub(base) / 1024;
    let evicted = respite.stat("redis.main.evicted_clients");
    eprintln!("transactions that ran: {ran:?}; evicted {evicted}; peak RSS +{grew} MiB");
    let mut direct = backends[0].raw();
    for (i, ran) in ran.iter().enumerate() {
        let (a, b) = (format!("tx:{i}:0"), format!("tx:{i}:1"));
        let want = if *ran { 2 } else { 0 };
        assert_eq!(
            direct.cmd(&[b"EXISTS", a.as_bytes(), b.as_bytes()]),
            int(want),
            "client {i}: all of its transaction or nothing"
        );
        if *ran {
            let len = format!(":{}\r\n", VALUE_MIB << 20).into_bytes();
            assert_eq!(direct.cmd(&[b"STRLEN", b.as_bytes()]), len);
        }
    }
    assert!(
        ran.iter().any(|r| *r),
        "a transaction within the budget runs"
    );
    assert!(
        evicted >= 1,
        "transactions past the budget are evicted and counted"
    );
    let bound = BUDGET_MIB + VALUE_MIB as u64 + 40;
    assert!(
        grew < bound,
        "respite grew {grew} MiB holding transactions' frames (bound {bound} MiB)"
    );
    assert_eq!(small.cmd(&[b"GET", b"small"]), bulk(b"s"));
}

/// (1) A transaction is refused at queue time when its commands cannot fit in the worker's
/// share of `maxmemory_clients` (`-ERR transaction too large…`, then EXECABORT; the client
/// stays connected and nothing runs), where the same command outside MULTI is served. And a
/// client whose EXEC is on its way is not the one evicted when another transaction passes the
/// budget: its transaction runs whatever happens, so evicting it would free nothing and leave
/// its client without the reply (its host is stopped meanwhile, so the EXEC is still out).
#[test]
fn transactions_past_the_budget_are_refused_or_evicted_before_their_exec() {
    let _g = serial();
    const MIB: usize = 1 << 20;
    let backends = servers(1);
    let (cfg, port, admin) = budget_config(&addrs(&backends), 64 << 20);
    let cfg = cfg.replace("op_timeout = \"1s\"", "op_timeout = \"30s\"");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    let big = vec![b'b'; 80 * MIB];
    assert_eq!(c.cmd(&[b"SET", b"alone", &big]), OK);
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    let refused = c.cmd(&[b"SET", b"inside", &big]);
    assert!(
        refused.starts_with(b"-ERR transaction too large"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    assert_eq!(c.cmd(&[b"EXEC"]), EXECABORT);
    assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
    drop(big);

    let value = vec![b'v'; 16 * MIB];
    let mut a = respite.raw();
    assert_eq!(a.cmd(&[b"MULTI"]), OK);
    for k in ["a1", "a2", "a3"] {
        assert_eq!(a.cmd(&[b"SET", k.as_bytes(), &value]), b"+QUEUED\r\n");
    }
    let pid = backends[0].pid();
    let signal = |sig: &str| respite_tests::cluster::signal(pid, sig);
    signal("STOP");
    a.send(&[b"EXEC"]);
    std::thread::sleep(Duration::from_millis(200));
    let mut b = respite.raw();
    assert_eq!(b.cmd(&[b"MULTI"]), OK);
    let mut b_open = true;
    for k in ["b1", "b2"] {
        match b.try_cmd(&[b"SET", k.as_bytes(), &value]) {
            Ok(r) => assert_eq!(r, b"+QUEUED\r\n"),
            Err(_) => b_open = false,
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    signal("CONT");
    let exec = a.try_read_reply().map_err(|e| e.to_string());
    assert_eq!(
        exec,
        Ok(b"*3\r\n+OK\r\n+OK\r\n+OK\r\n".to_vec()),
        "the client whose EXEC was out gets its reply"
    );
    if b_open {
        b_open = b.try_cmd(&[b"EXEC"]).is_ok();
    }
    assert!(
        !b_open,
        "the transaction that passed the budget was evicted"
    );
    assert!(respite.stat("redis.main.evicted_clients") >= 1);
    let mut direct = backends[0].raw();
    assert_eq!(direct.cmd(&[b"EXISTS", b"a1", b"a2", b"a3"]), int(3));
    assert_eq!(direct.cmd(&[b"EXISTS", b"b1", b"b2", b"inside"]), int(0));
}

/// (3) A connection's waiting room at its bound (`max_pending_requests = 64`, filled by one
/// client pipelining 500 `GET`s while the backend is stopped) does not refuse a client that
/// waits for nothing: its `GET` takes the place of the flooder's newest, which is refused
/// instead (`-upstream overflow`), and is answered once the backend runs again. Before, the
/// newcomer was the one refused, so a flood of one client locked every other client out.
#[test]
fn a_full_waiting_room_refuses_the_flooder_not_the_newcomer() {
    let _g = serial();
    let backends = servers(1);
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &addrs(&backends), 1, "").replace(
        "connect_timeout = \"250ms\"",
        "connect_timeout = \"250ms\"\nmax_pending_requests = 64",
    );
    let cfg = cfg.replace("op_timeout = \"1s\"", "op_timeout = \"10s\"");
    let respite = Respite::start(&cfg, port, admin);
    let mut light = respite.raw();
    assert_eq!(light.cmd(&[b"SET", b"k", b"v"]), OK);
    let overflow =
        b"-upstream overflow: too many requests queued for this host (max_pending_requests)\r\n";
    let stopped = Stopped::new(backends[0].pid());
    let mut flooder = respite.raw();
    let get = RawClient::encode(&[b"GET", b"k"]);
    flooder.send_raw(&get.repeat(500));
    assert!(
        wait_until(Duration::from_secs(5), || {
            respite.stat("cluster.cache.upstream_rq_pending_overflow") >= 150
        }),
        "the premise: the flooder filled the room: {:?}",
        respite.stats()
    );
    let refused = respite.stat("cluster.cache.upstream_rq_pending_overflow");
    light.send(&[b"GET", b"k"]);
    assert!(
        wait_until(Duration::from_secs(5), || {
            respite.stat("cluster.cache.upstream_rq_pending_overflow") > refused
        }),
        "nobody refused for the newcomer"
    );
    drop(stopped);
    assert_eq!(light.read_reply(), bulk(b"v"), "the newcomer is answered");
    // The flooder's replies in order: the first ones answered, one of its queued ones refused.
    let replies: Vec<Vec<u8>> = (0..500).map(|_| flooder.read_reply()).collect();
    let refused_in_room = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| r.as_slice() == overflow)
        .map(|(i, _)| i)
        .collect::<Vec<_>>();
    assert!(
        replies
            .iter()
            .all(|r| r.as_slice() == overflow || *r == bulk(b"v"))
    );
    assert_eq!(replies[0], bulk(b"v"));
    assert_eq!(
        refused_in_room.len() as i64,
        respite.stat("cluster.cache.upstream_rq_pending_overflow"),
        "every refusal was the flooder's"
    );
}

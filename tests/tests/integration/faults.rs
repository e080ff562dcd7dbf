//! Fault injection (Envoy `faults`, docs/faults.md) through Respite to a real redis-server:
//! ERROR faults answer Envoy's `Fault Injected: Error` without forwarding, DELAY faults hold the
//! reply back (and every later reply of the connection, to keep request order), AUTH/PING and
//! other local commands are never faulted, and `command.<cmd>.error_fault|delay_fault` count
//! what happened.

use crate::common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::*;
use respite_tests::RedisServer;
use respite_tests::respite::{Respite, simple_config};

/// Envoy's error reply for an ERROR fault (`FaultMessages::get().Error`).
const FAULT_ERROR: &[u8] = b"-Fault Injected: Error\r\n";

fn over(backend: &RedisServer, faults: &str) -> Respite {
    Respite::over_with(&[backend.addr()], 2, faults)
}

/// `cmdstat_<cmd>` calls on one redis-server (0 if it never ran the command).
fn calls(server: &RedisServer, cmd: &str) -> u64 {
    let info = server.raw().cmd(&[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&info).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The test: a 50% ERROR fault on GET. Of 10 000 GETs, 40–60% get the fault error
/// (exact text) and the rest the stored value; the counters agree with what the client saw;
/// faulted GETs never reach Redis; SET is not affected.
#[test]
fn error_fault_hits_half_of_gets_and_counts_them() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"error\"\nfault_enabled = 50.0\ncommands = [\"GET\"]\n",
    );
    let mut c = respite.raw();
    let sets: Vec<Vec<Vec<u8>>> = (0..1_000)
        .map(|i| cmd(&[b"SET", format!("k{i}").as_bytes(), b"value"]))
        .collect();
    for r in pipelined(&mut c, &sets, 100) {
        assert_eq!(r, OK, "SET must never be faulted: {}", show(&r));
    }
    let gets: Vec<Vec<Vec<u8>>> = (0..10_000)
        .map(|i| cmd(&[b"GET", format!("k{}", i % 1_000).as_bytes()]))
        .collect();
    let replies = pipelined(&mut c, &gets, 100);
    let faulted = replies
        .iter()
        .filter(|r| r.as_slice() == FAULT_ERROR)
        .count() as i64;
    let right = replies
        .iter()
        .filter(|r| r.as_slice() == bulk(b"value"))
        .count() as i64;
    println!("10000 GETs: {faulted} fault errors, {right} values");
    assert_eq!(
        faulted + right,
        10_000,
        "every reply is the fault or the value"
    );
    assert!(
        (4_000..=6_000).contains(&faulted),
        "fault errors {faulted} not within 40-60% of 10000"
    );
    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("redis.main.command.get.error_fault"), faulted);
    assert_eq!(stat("redis.main.command.get.total"), 10_000);
    assert_eq!(stat("redis.main.command.get.error"), faulted);
    assert_eq!(stat("redis.main.command.get.success"), right);
    assert_eq!(stat("redis.main.command.get.delay_fault"), 0);
    assert_eq!(stat("redis.main.command.set.total"), 1_000);
    assert_eq!(stat("redis.main.command.set.success"), 1_000);
    assert_eq!(stat("redis.main.command.set.error_fault"), 0);
    // An ERROR fault answers instead of forwarding.
    assert_eq!(calls(&backend, "get"), right as u64);
}

/// AUTH and PING never get a fault, even from a 100% ERROR fault on every command; neither do
/// other commands answered locally (ECHO, SELECT). Commands that go upstream all get it.
#[test]
fn auth_and_ping_are_never_faulted() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "downstream_auth_passwords = [\"sesame\"]\n\
         [[listeners.faults]]\nfault_type = \"error\"\nfault_enabled = 100.0\n",
    );
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"GET", b"k"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    for _ in 0..100 {
        assert_eq!(c.cmd(&[b"AUTH", b"sesame"]), OK);
        assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
    }
    assert_eq!(c.cmd(&[b"ECHO", b"hi"]), bulk(b"hi"));
    assert_eq!(c.cmd(&[b"SELECT", b"0"]), OK);
    for args in [
        &[&b"GET"[..], b"k"][..],
        &[b"SET", b"k", b"v"],
        &[b"MGET", b"a", b"b"],
        &[b"DBSIZE"],
    ] {
        assert_eq!(c.cmd(args), FAULT_ERROR, "{:?}", show(args[0]));
    }
    assert_eq!(calls(&backend, "set"), 0);
    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("redis.main.command.auth.total"), 100);
    assert_eq!(stat("redis.main.command.auth.error_fault"), 0);
    assert_eq!(stat("redis.main.command.ping.success"), 100);
    assert_eq!(stat("redis.main.command.ping.error_fault"), 0);
    assert_eq!(stat("redis.main.command.get.error_fault"), 1);
    assert_eq!(stat("redis.main.command.dbsize.error_fault"), 1);
}

/// A 100% DELAY of 200 ms on GET adds at least 200 ms to a GET, whose value is still right;
/// `delay_fault` counts each delayed GET; SET is not delayed.
#[test]
fn delay_fault_adds_the_delay() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"delay\"\nfault_enabled = 100.0\ndelay = \"200ms\"\n\
         commands = [\"get\"]\n",
    );
    let mut c = respite.raw();
    let t = Instant::now();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    println!("SET took {:?}", t.elapsed());
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v"));
        let took = t.elapsed();
        println!("delayed GET took {took:?}");
        assert!(took >= Duration::from_millis(200), "GET took {took:?}");
    }
    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("redis.main.command.get.delay_fault"), 3);
    assert_eq!(stat("redis.main.command.get.success"), 3);
    assert_eq!(stat("redis.main.command.get.error_fault"), 0);
    assert_eq!(stat("redis.main.command.set.delay_fault"), 0);
}

/// A delayed reply holds back the replies pipelined after it (replies stay in request order),
/// while the requests themselves are forwarded at once: the SET behind a delayed GET is already
/// in Redis while the client still has no reply.
#[test]
fn delayed_reply_holds_back_later_replies_in_order() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"delay\"\nfault_enabled = 100.0\ndelay = \"1s\"\n\
         commands = [\"get\"]\n",
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let mut pipeline = Vec::new();
    respite_tests::RawClient::encode_into(&mut pipeline, &[b"GET", b"k"]);
    respite_tests::RawClient::encode_into(&mut pipeline, &[b"SET", b"later", b"x"]);
    respite_tests::RawClient::encode_into(&mut pipeline, &[b"PING"]);
    let t = Instant::now();
    c.send_raw(&pipeline);
    let mut direct = backend.raw();
    let forwarded = wait_until(Duration::from_millis(900), || {
        direct.cmd(&[b"GET", b"later"]) == bulk(b"x")
    });
    let seen_at = t.elapsed();
    assert!(
        forwarded,
        "the SET behind the delayed GET was not forwarded"
    );
    // Nothing may have arrived yet: the GET's reply is held, and the rest wait behind it.
    if seen_at < Duration::from_millis(950) {
        c.stream().set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let peek = c.stream().peek(&mut b);
        c.stream().set_nonblocking(false).unwrap();
        assert!(
            matches!(&peek, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "a reply arrived before the delay ended ({seen_at:?}): {peek:?}"
        );
    }
    let replies: Vec<Vec<u8>> = (0..3).map(|_| c.read_reply()).collect();
    let took = t.elapsed();
    println!("SET forwarded after {seen_at:?}; all 3 replies after {took:?}");
    assert!(took >= Duration::from_secs(1), "replies after {took:?}");
    assert_eq!(
        replies,
        vec![bulk(b"v"), OK.to_vec(), b"+PONG\r\n".to_vec()],
        "replies in request order"
    );
}

/// An ERROR fault with a delay: the error arrives after the delay, and counts as both an error
/// fault and a delay fault (Envoy's DelayFaultRequest wraps its ErrorFaultRequest).
#[test]
fn error_with_delay_arrives_after_the_delay() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"error\"\nfault_enabled = 100.0\ndelay = \"300ms\"\n\
         commands = [\"incr\"]\n",
    );
    let mut c = respite.raw();
    let t = Instant::now();
    assert_eq!(c.cmd(&[b"INCR", b"n"]), FAULT_ERROR);
    let took = t.elapsed();
    println!("delayed fault error after {took:?}");
    assert!(took >= Duration::from_millis(300), "error after {took:?}");
    assert_eq!(calls(&backend, "incr"), 0, "a faulted INCR was forwarded");
    assert_eq!(backend.raw().cmd(&[b"EXISTS", b"n"]), int(0));
    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("redis.main.command.incr.error_fault"), 1);
    assert_eq!(stat("redis.main.command.incr.delay_fault"), 1);
    assert_eq!(stat("redis.main.command.incr.error"), 1);
    assert_eq!(stat("redis.main.command.incr.total"), 1);
}

/// A client that closes while its reply is held: respite stays healthy, the connection and its
/// request stop counting as active, and a new client is served.
#[test]
fn client_closing_during_a_delay_leaves_respite_healthy() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"delay\"\nfault_enabled = 100.0\ndelay = \"500ms\"\n\
         commands = [\"get\"]\n",
    );
    for _ in 0..5 {
        let mut c = respite.raw();
        c.send(&[b"GET", b"k"]);
        c.send(&[b"GET", b"k"]);
        std::thread::sleep(Duration::from_millis(50));
        drop(c);
    }
    let settled = wait_until(Duration::from_secs(5), || {
        let s = respite.stats();
        s.get("redis.main.downstream_cx_active") == Some(&0)
            && s.get("redis.main.downstream_rq_active") == Some(&0)
    });
    let s = respite.stats();
    assert!(
        settled,
        "cx_active {:?}, rq_active {:?}",
        s.get("redis.main.downstream_cx_active"),
        s.get("redis.main.downstream_rq_active")
    );
    assert_eq!(s.get("redis.main.command.get.delay_fault"), Some(&10));
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v"));
    assert!(
        !respite.log().contains("panicked"),
        "log:\n{}",
        respite.log()
    );
}

/// Faults added by a SIGHUP reload apply to the connections already open.
#[test]
fn faults_follow_a_reload() {
    let backend = RedisServer::start();
    let port = respite_tests::free_port();
    let admin = respite_tests::free_port();
    let addrs = [backend.addr()];
    let respite = Respite::start(&simple_config(port, admin, &addrs, 1, ""), port, admin);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    respite.reload(&simple_config(
        port,
        admin,
        &addrs,
        1,
        "[[listeners.faults]]\nfault_type = \"error\"\nfault_enabled = 100.0\n",
    ));
    let faulted = wait_until(Duration::from_secs(5), || {
        c.cmd(&[b"GET", b"k"]) == FAULT_ERROR
    });
    assert!(faulted, "the reloaded fault never applied");
    respite.reload(&simple_config(port, admin, &addrs, 1, ""));
    let healed = wait_until(Duration::from_secs(5), || {
        c.cmd(&[b"GET", b"k"]) == bulk(b"v")
    });
    assert!(healed, "the fault stayed after it was removed");
}

/// Held replies of a connection whose writes fail are released, not leaked: three GETs held 1 s
/// each, sent 300 ms apart, then the client closes. The first reply's write reaches a closed
/// socket (the peer answers RST), the second's fails, and the third, still held then, must stop
/// counting as an active request at once (it would otherwise hold `downstream_rq_active` and
/// a drain forever).
#[test]
fn held_replies_of_a_failed_connection_are_released() {
    let backend = RedisServer::start();
    let respite = over(
        &backend,
        "[[listeners.faults]]\nfault_type = \"delay\"\nfault_enabled = 100.0\ndelay = \"1s\"\n\
         commands = [\"get\"]\n",
    );
    let mut c = respite.raw();
    for i in 0..3 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        c.send(&[b"GET", b"k"]);
    }
    std::thread::sleep(Duration::from_millis(50));
    drop(c);
    let settled = wait_until(Duration::from_secs(5), || {
        let s = respite.stats();
        s.get("redis.main.downstream_cx_active") == Some(&0)
            && s.get("redis.main.downstream_rq_active") == Some(&0)
    });
    let s = respite.stats();
    assert!(
        settled,
        "cx_active {:?}, rq_active {:?}",
        s.get("redis.main.downstream_cx_active"),
        s.get("redis.main.downstream_rq_active")
    );
    assert_eq!(s.get("redis.main.command.get.delay_fault"), Some(&3));
    assert_eq!(respite.raw().cmd(&[b"PING"]), b"+PONG\r\n");
}

/// A fault on EXEC draws once for the whole transaction: an ERROR fault answers EXEC with the
/// fault error and nothing of the transaction runs (the backend never sees MULTI); MULTI and
/// the queued commands are answered as usual, and commands outside a transaction are not
/// faulted.
#[test]
fn error_fault_on_exec_runs_nothing_of_the_transaction() {
    let redis = RedisServer::start();
    let respite = over(
        &redis,
        "[[listeners.faults]]\nfault_type = \"error\"\nfault_enabled = 100.0\ncommands = [\"EXEC\"]\n",
    );
    let mut c = respite.raw();
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"tx", b"1"]),
        cmd(&[b"INCR", b"tx"]),
        cmd(&[b"EXEC"]),
        cmd(&[b"GET", b"tx"]),
        cmd(&[b"SET", b"plain", b"1"]),
    ]);
    let want: [&[u8]; 6] = [
        OK,
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        FAULT_ERROR,
        b"$-1\r\n",
        OK,
    ];
    for (got, want) in replies.iter().zip(want) {
        assert_eq!(show(got), show(want));
    }
    assert_eq!(calls(&redis, "multi"), 0);
    assert_eq!(calls(&redis, "exec"), 0);
    assert!(!exists_on(&mut redis.raw(), b"tx"));
    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("redis.main.command.exec.error_fault"), 1);
    assert_eq!(stat("redis.main.tx_aborted"), 1);
}

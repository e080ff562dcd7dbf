//! Long scripts through Respite against real redis-servers: SCRIPT KILL and FUNCTION KILL reach
//! the busy backend over a connection of their own (even when every leased connection is taken)
//! and answer as Redis does; the busy backend is busy, not dead: its shared connections stay
//! open and it is not ejected.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RedisServer, free_port};

const NOTBUSY: &[u8] = b"-NOTBUSY No scripts in execution right now.\r\n";

/// Respite over `backends` with `op_timeout` 3 s and one leased connection per host.
fn respite_over(backends: &[RedisServer]) -> Respite {
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &addrs(backends), 1, "")
        .replace("op_timeout = \"1s\"", "op_timeout = \"3s\"")
        .replace(
            "type = \"static\"",
            "type = \"static\"\nmax_leased_connections = 1",
        );
    Respite::start(&cfg, port, admin)
}

/// `busy-reply-threshold` 200 ms on each of `servers`: a spinning script makes them answer
/// `-BUSY` (and read SCRIPT KILL) after 200 ms instead of 5 s.
fn busy_after_200ms(servers: &[RedisServer]) {
    for s in servers {
        assert_eq!(
            s.raw()
                .cmd(&[b"CONFIG", b"SET", b"busy-reply-threshold", b"200"]),
            b"+OK\r\n"
        );
    }
}

/// With no script running, SCRIPT KILL and FUNCTION KILL answer Redis's NOTBUSY. A script
/// busy on one of three backends, with that backend's only leased connection held by a
/// blocked client, is killed through Respite: SCRIPT KILL `+OK`, the script's client gets
/// Redis's own error, and meanwhile no upstream connection was closed or host ejected.
#[test]
fn script_kill_reaches_the_busy_backend() {
    let reference = RedisServer::start();
    let backends = servers(3);
    busy_after_200ms(&backends);
    let respite = respite_over(&backends);
    let mut c = respite.raw();
    for cmd in [&[&b"SCRIPT"[..], b"KILL"][..], &[b"FUNCTION", b"KILL"]] {
        assert_eq!(show(&c.cmd(cmd)), show(&reference.raw().cmd(cmd)));
        assert_eq!(c.cmd(cmd), NOTBUSY);
    }
    // Keys on the backend that will run the script: a blocked client holds its leased
    // connection (max_leased_connections = 1).
    let place = Placement::new(&addrs(&backends));
    let key = place.key_on(1, "busy");
    let list = place.key_on(1, "busyl");
    let mut blocked = respite.raw();
    blocked.send(&[b"BLPOP", list.as_bytes(), b"0"]);
    assert!(wait_until(Duration::from_secs(5), || {
        respite.stat("redis.main.blocked_clients") == 1
    }));
    let cx_before = respite.stat("cluster.cache.upstream_cx_total");
    let mut script = respite.raw();
    script.send(&[
        b"EVAL",
        b"local i = 0 while true do i = i + 1 end",
        b"1",
        key.as_bytes(),
    ]);
    // Busy past its threshold: the backend answers -BUSY to everyone else.
    let mut direct = backends[1].raw();
    assert!(wait_until(Duration::from_secs(5), || {
        direct.cmd(&[b"PING"]).starts_with(b"-BUSY")
    }));
    let started = Instant::now();
    assert_eq!(c.cmd(&[b"SCRIPT", b"KILL"]), b"+OK\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let killed = script.read_reply();
    assert!(
        killed.starts_with(b"-ERR") && show(&killed).contains("Script killed by user"),
        "{}",
        show(&killed)
    );
    // The backend serves again, on the same shared connections, and the blocked client too.
    assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n");
    assert_eq!(c.cmd(&[b"RPUSH", list.as_bytes(), b"e"]), int(1));
    assert!(blocked.read_reply().starts_with(b"*2\r\n"));
    assert_eq!(respite.stat("cluster.cache.upstream_cx_total"), cx_before);
    assert_eq!(c.cmd(&[b"SCRIPT", b"KILL"]), NOTBUSY);
}

/// SCRIPT KILL sent while a script has not yet run for `busy-reply-threshold` (the backend reads
/// nothing until then, so a new connection's handshake waits) and no leased connection to that
/// backend is open yet: it waits for the threshold, as at Redis, then kills the script (`+OK`)
/// instead of failing the connect after `connect_timeout`.
#[test]
fn script_kill_before_the_busy_threshold_waits_for_it() {
    let backends = servers(1);
    assert_eq!(
        backends[0]
            .raw()
            .cmd(&[b"CONFIG", b"SET", b"busy-reply-threshold", b"1500"]),
        b"+OK\r\n"
    );
    let respite = respite_over(&backends);
    let mut script = respite.raw();
    script.send(&[b"EVAL", b"while true do end", b"0"]);
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let mut c = respite.raw();
    assert_eq!(show(&c.cmd(&[b"SCRIPT", b"KILL"])), show(b"+OK\r\n"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let killed = script.read_reply();
    assert!(
        show(&killed).contains("Script killed by user"),
        "{}",
        show(&killed)
    );
    assert_eq!(c.cmd(&[b"SCRIPT", b"KILL"]), NOTBUSY);
}

/// FUNCTION STATS answers as one server would, idle and busy: byte for byte a redis-server's
/// reply with the same library loaded (FUNCTION LOAD reached every backend); while a function
/// spins on one of three backends, that backend's reply (the running function named), over a
/// leased connection, not behind the function; after FUNCTION KILL, idle again.
#[test]
fn function_stats_show_the_running_function() {
    let reference = RedisServer::start();
    let backends = servers(3);
    busy_after_200ms(&backends);
    busy_after_200ms(std::slice::from_ref(&reference));
    let respite = respite_over(&backends);
    let mut c = respite.raw();
    let library: &[u8] = b"#!lua name=spinlib\nredis.register_function('spin', function(keys, args) local i = 0 while true do i = i + 1 end end)";
    for args in [
        &[&b"FUNCTION"[..], b"LOAD", library][..],
        &[b"FUNCTION", b"STATS"],
    ] {
        assert_eq!(show(&c.cmd(args)), show(&reference.raw().cmd(args)));
    }
    let place = Placement::new(&addrs(&backends));
    let key = place.key_on(2, "spin");
    let mut spinning = respite.raw();
    spinning.send(&[b"FCALL", b"spin", b"1", key.as_bytes()]);
    let mut direct = backends[2].raw();
    assert!(wait_until(Duration::from_secs(5), || {
        direct.cmd(&[b"PING"]).starts_with(b"-BUSY")
    }));
    let started = Instant::now();
    let busy = c.cmd(&[b"FUNCTION", b"STATS"]);
    let command = [
        &b"*4\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n1\r\n$"[..],
        format!("{}\r\n{key}\r\n", key.len()).as_bytes(),
    ]
    .concat();
    assert!(
        busy.starts_with(b"*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n")
            && busy.windows(command.len()).any(|w| w == command.as_slice()),
        "{}",
        show(&busy)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(c.cmd(&[b"FUNCTION", b"KILL"]), b"+OK\r\n");
    let killed = show(&spinning.read_reply());
    assert!(killed.contains("killed"), "{killed}");
    let idle: &[&[u8]] = &[b"FUNCTION", b"STATS"];
    assert_eq!(show(&c.cmd(idle)), show(&reference.raw().cmd(idle)));
}

/// A script outlives `op_timeout` on the shared path and its client still gets the script's
/// own reply, as from one redis-server, never `upstream failure` about a script that went on to
/// run: one that returns after 1.2 s (op_timeout 300 ms) answers its value; one killed by
/// SCRIPT KILL answers Redis's "killed by user" error, byte for byte; the shared connection
/// stays open throughout and serves the next request.
#[test]
fn a_script_longer_than_op_timeout_answers_its_own_reply() {
    let reference = RedisServer::start();
    let backends = servers(1);
    busy_after_200ms(&backends);
    busy_after_200ms(std::slice::from_ref(&reference));
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &addrs(&backends), 1, "")
        .replace("op_timeout = \"1s\"", "op_timeout = \"300ms\"");
    let respite = Respite::start(&cfg, port, admin);
    let slow: &[&[u8]] = &[
        b"EVAL",
        b"local t0 = redis.call('TIME') \
          while true do \
            local t = redis.call('TIME') \
            if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 1200000 then break end \
          end \
          redis.call('SET', KEYS[1], 'ran') return 'done'",
        b"1",
        b"slow",
    ];
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"warm", b"1"]), b"+OK\r\n");
    let cx_before = respite.stat("cluster.cache.upstream_cx_total");
    let started = Instant::now();
    let through = c.cmd(slow);
    assert!(started.elapsed() >= Duration::from_millis(1200));
    assert_eq!(show(&through), show(&reference.raw().cmd(slow)));
    assert_eq!(show(&through), show(b"$4\r\ndone\r\n"));
    assert_eq!(c.cmd(&[b"GET", b"slow"]), b"$3\r\nran\r\n");

    // Killed after op_timeout: the client reads what a direct client reads.
    let endless: &[&[u8]] = &[b"EVAL", b"while true do end", b"1", b"spin"];
    let killed = |target: &mut respite_tests::RawClient, killer: &mut respite_tests::RawClient| {
        target.send(endless);
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(killer.cmd(&[b"SCRIPT", b"KILL"]), b"+OK\r\n");
        target.read_reply()
    };
    let through = killed(&mut respite.raw(), &mut respite.raw());
    let direct = killed(&mut reference.raw(), &mut reference.raw());
    assert_eq!(show(&through), show(&direct));
    assert!(
        show(&through).contains("Script killed by user"),
        "{}",
        show(&through)
    );
    assert_eq!(c.cmd(&[b"GET", b"slow"]), b"$3\r\nran\r\n");
    assert_eq!(respite.stat("cluster.cache.upstream_cx_total"), cx_before);
    assert_eq!(respite.stat("cluster.cache.upstream_rq_timeout"), 0);
}

//! Blocking commands through Respite (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP, XREAD/XREADGROUP with BLOCK) against real redis-servers: they run on a leased
//! upstream connection to their keys' backend for their own timeout (the listener's `op_timeout`
//! does not cut them), answer byte for byte as one redis-server does (data already there, data
//! that arrives later, timeout, bad arguments, inside MULTI), refuse keys on two backends with
//! nothing run, keep pipelined requests behind them in order, free the upstream when their client
//! leaves, and move the blocked-client, lease and transaction stats.

use crate::common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{IO_TIMEOUT, RawClient, RedisServer};

const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
const QUEUED: &[u8] = b"+QUEUED\r\n";

/// `blocked_clients` of a redis-server's `INFO clients`.
pub(crate) fn blocked(server: &RedisServer) -> i64 {
    let info = server.raw().cmd(&[b"INFO", b"clients"]);
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no blocked_clients in INFO clients: {}", show(&info)))
}

/// `blocked_clients` summed over `servers`.
fn blocked_on(servers: &[RedisServer]) -> i64 {
    servers.iter().map(blocked).sum()
}

/// Writes `command` without reading its reply.
fn send(c: &mut RawClient, command: &[Vec<u8>]) {
    let args: Vec<&[u8]> = command.iter().map(|a| a.as_slice()).collect();
    c.send(&args);
}

/// One command's reply.
fn call(c: &mut RawClient, command: &[Vec<u8>]) -> Vec<u8> {
    send(c, command);
    c.read_reply()
}

/// A command as text, for assertion messages.
fn shown(command: &[Vec<u8>]) -> String {
    command
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `commands` in one write and reads their replies.
fn pipe(c: &mut RawClient, commands: &[&[&[u8]]]) -> Vec<Vec<u8>> {
    let commands: Vec<Vec<Vec<u8>>> = commands.iter().map(|a| cmd(a)).collect();
    c.pipeline(&commands)
}

/// Asserts that nothing is readable on `c` for `quiet` (no reply came early).
fn assert_nothing_to_read(c: &RawClient, quiet: Duration, what: &str) {
    c.stream().set_read_timeout(Some(quiet)).unwrap();
    let mut b = [0u8; 64];
    match c.stream().peek(&mut b) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        Ok(0) => panic!("{what}: the connection was closed"),
        Ok(n) => panic!("{what}: a reply came early: {}", show(&b[..n])),
        Err(e) => panic!("{what}: {e}"),
    }
    c.stream().set_read_timeout(Some(IO_TIMEOUT)).unwrap();
}

/// Three backends, Respite (2 workers) over them, and a reference redis-server.
fn setup() -> (Vec<RedisServer>, Respite, RedisServer) {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    (backends, respite, RedisServer::start())
}

/// Sends `HELLO 3` when `resp3`; checks it was accepted.
fn hello(c: &mut RawClient, resp3: bool) {
    if resp3 {
        let reply = c.cmd(&[b"HELLO", b"3"]);
        assert!(reply.starts_with(b"%"), "HELLO 3 answered {}", show(&reply));
    }
}

/// Blocking commands over keys that already hold data (so none of them waits), in both
/// protocols, with the keys' state read back after: every reply equals one redis-server's byte
/// for byte.
#[test]
fn blocking_commands_with_data_there_answer_as_redis_does() {
    let (_backends, respite, reference) = setup();
    for resp3 in [false, true] {
        let t = if resp3 { "{b3}" } else { "{b2}" };
        let k = |name: &str| format!("{t}{name}").into_bytes();
        let script: Vec<Vec<Vec<u8>>> = vec![
            cmd(&[b"RPUSH", &k("l1"), b"a", b"b", b"c"]),
            cmd(&[b"RPUSH", &k("l2"), b"d"]),
            cmd(&[b"RPUSH", &k("src"), b"s1", b"s2", b"s3"]),
            cmd(&[
                b"ZADD",
                &k("z"),
                b"1",
                b"m1",
                b"2",
                b"m2",
                b"3.5",
                b"m3",
                b"4",
                b"m4",
            ]),
            cmd(&[b"XADD", &k("s"), b"1-1", b"f", b"v1"]),
            cmd(&[b"XADD", &k("s"), b"2-1", b"f", b"v2", b"g", b"w2"]),
            cmd(&[b"XGROUP", b"CREATE", &k("s"), b"grp", b"0"]),
            cmd(&[b"BLPOP", &k("none"), &k("l1"), b"0"]),
            cmd(&[b"BRPOP", &k("l1"), &k("l2"), b"0"]),
            cmd(&[b"BRPOPLPUSH", &k("src"), &k("dst"), b"0"]),
            cmd(&[b"BLMOVE", &k("src"), &k("dst"), b"LEFT", b"RIGHT", b"0"]),
            cmd(&[
                b"BLMPOP",
                b"0",
                b"2",
                &k("none"),
                &k("l2"),
                b"LEFT",
                b"COUNT",
                b"5",
            ]),
            cmd(&[b"RPUSH", &k("l2"), b"e", b"f", b"g"]),
            cmd(&[b"BLMPOP", b"1", b"1", &k("l2"), b"RIGHT", b"COUNT", b"2"]),
            cmd(&[b"BZPOPMIN", &k("z"), b"0"]),
            cmd(&[b"BZPOPMAX", &k("none"), &k("z"), b"0.5"]),
            cmd(&[b"BZMPOP", b"0", b"1", &k("z"), b"MIN", b"COUNT", b"5"]),
            cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", &k("s"), b"0-0"]),
            cmd(&[
                b"XREAD",
                b"COUNT",
                b"1",
                b"BLOCK",
                b"10",
                b"STREAMS",
                &k("s"),
                b"1-1",
            ]),
            cmd(&[
                b"XREADGROUP",
                b"GROUP",
                b"grp",
                b"c1",
                b"BLOCK",
                b"0",
                b"STREAMS",
                &k("s"),
                b">",
            ]),
            cmd(&[
                b"XREADGROUP",
                b"GROUP",
                b"grp",
                b"c1",
                b"BLOCK",
                b"0",
                b"STREAMS",
                &k("s"),
                b"0",
            ]),
            cmd(&[b"XPENDING", &k("s"), b"grp"]),
            cmd(&[b"LRANGE", &k("l1"), b"0", b"-1"]),
            cmd(&[b"LRANGE", &k("l2"), b"0", b"-1"]),
            cmd(&[b"LRANGE", &k("src"), b"0", b"-1"]),
            cmd(&[b"LRANGE", &k("dst"), b"0", b"-1"]),
            cmd(&[b"ZRANGE", &k("z"), b"0", b"-1", b"WITHSCORES"]),
        ];
        let mut r = reference.raw();
        let mut p = respite.raw();
        hello(&mut r, resp3);
        hello(&mut p, resp3);
        for command in &script {
            let started = Instant::now();
            let want = call(&mut r, command);
            let got = call(&mut p, command);
            assert_eq!(
                show(&got),
                show(&want),
                "RESP{} {}: respite (left) vs redis (right)",
                if resp3 { 3 } else { 2 },
                shown(command)
            );
            assert!(
                started.elapsed() < Duration::from_millis(900),
                "{} waited {:?} though its keys held data",
                shown(command),
                started.elapsed()
            );
        }
    }
}

/// A blocking command, the writes that serve it (sent from another client once the command is
/// blocked at the server) and the reads that show the keys' state after.
struct Later {
    setup: Vec<Vec<Vec<u8>>>,
    blocking: Vec<Vec<u8>>,
    feed: Vec<Vec<Vec<u8>>>,
    after: Vec<Vec<Vec<u8>>>,
}

/// Runs `case` against `addr` (a redis-server or Respite) and returns every reply in order:
/// setup, the blocking command's, feed, after. `blocked` counts the clients blocked at the
/// server(s) behind `addr`; the feed is sent only once it has grown by one.
fn run_later(addr: &str, blocked: &dyn Fn() -> i64, case: &Later, resp3: bool) -> Vec<Vec<u8>> {
    let mut waiter = RawClient::connect(addr);
    let mut feeder = RawClient::connect(addr);
    hello(&mut waiter, resp3);
    hello(&mut feeder, resp3);
    let mut replies: Vec<Vec<u8>> = case.setup.iter().map(|c| call(&mut feeder, c)).collect();
    let before = blocked();
    send(&mut waiter, &case.blocking);
    assert!(
        wait_until(Duration::from_secs(5), || blocked() == before + 1),
        "{addr}: {} never blocked at the server",
        shown(&case.blocking)
    );
    assert_nothing_to_read(&waiter, Duration::from_millis(50), &shown(&case.blocking));
    let fed: Vec<Vec<u8>> = case.feed.iter().map(|c| call(&mut feeder, c)).collect();
    replies.push(waiter.read_reply());
    replies.extend(fed);
    replies.extend(case.after.iter().map(|c| call(&mut feeder, c)));
    assert!(
        wait_until(Duration::from_secs(5), || blocked() == before),
        "{addr}: a client is still blocked after {}",
        shown(&case.blocking)
    );
    replies
}

/// Each blocking command, blocked at the server first and then served by a write from another
/// client, answers as one redis-server does byte for byte (RESP2 and RESP3), and the keys hold
/// the same data after.
#[test]
fn blocking_commands_served_later_answer_as_redis_does() {
    let (backends, respite, reference) = setup();
    for resp3 in [false, true] {
        let t = if resp3 { "{l3}" } else { "{l2}" };
        let k = |name: &str| format!("{t}{name}").into_bytes();
        let cases = vec![
            Later {
                setup: vec![],
                blocking: cmd(&[b"BLPOP", &k("a"), &k("b"), b"0"]),
                feed: vec![cmd(&[b"RPUSH", &k("b"), b"x", b"y"])],
                after: vec![cmd(&[b"LRANGE", &k("b"), b"0", b"-1"])],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BRPOP", &k("c"), b"0"]),
                feed: vec![cmd(&[b"RPUSH", &k("c"), b"x", b"y"])],
                after: vec![cmd(&[b"LRANGE", &k("c"), b"0", b"-1"])],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BRPOPLPUSH", &k("src"), &k("dst"), b"0"]),
                feed: vec![cmd(&[b"RPUSH", &k("src"), b"p", b"q"])],
                after: vec![
                    cmd(&[b"LRANGE", &k("src"), b"0", b"-1"]),
                    cmd(&[b"LRANGE", &k("dst"), b"0", b"-1"]),
                ],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BLMOVE", &k("src2"), &k("dst"), b"LEFT", b"LEFT", b"0"]),
                feed: vec![cmd(&[b"RPUSH", &k("src2"), b"r", b"s"])],
                after: vec![
                    cmd(&[b"LRANGE", &k("src2"), b"0", b"-1"]),
                    cmd(&[b"LRANGE", &k("dst"), b"0", b"-1"]),
                ],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[
                    b"BLMPOP",
                    b"0",
                    b"2",
                    &k("m1"),
                    &k("m2"),
                    b"RIGHT",
                    b"COUNT",
                    b"2",
                ]),
                feed: vec![cmd(&[b"RPUSH", &k("m2"), b"1", b"2", b"3"])],
                after: vec![cmd(&[b"LRANGE", &k("m2"), b"0", b"-1"])],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BZPOPMIN", &k("z1"), b"0"]),
                feed: vec![cmd(&[b"ZADD", &k("z1"), b"2", b"two", b"1.5", b"one"])],
                after: vec![cmd(&[b"ZRANGE", &k("z1"), b"0", b"-1", b"WITHSCORES"])],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BZPOPMAX", &k("z2"), &k("z3"), b"0"]),
                feed: vec![cmd(&[b"ZADD", &k("z3"), b"2", b"two", b"1.5", b"one"])],
                after: vec![cmd(&[b"ZRANGE", &k("z3"), b"0", b"-1", b"WITHSCORES"])],
            },
            Later {
                setup: vec![],
                blocking: cmd(&[b"BZMPOP", b"0", b"1", &k("z4"), b"MAX", b"COUNT", b"5"]),
                feed: vec![cmd(&[b"ZADD", &k("z4"), b"1", b"a", b"2", b"b"])],
                after: vec![cmd(&[b"EXISTS", &k("z4")])],
            },
            Later {
                setup: vec![cmd(&[b"XADD", &k("s1"), b"1-1", b"f", b"old"])],
                blocking: cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", &k("s1"), b"$"]),
                feed: vec![cmd(&[b"XADD", &k("s1"), b"5-1", b"f", b"new"])],
                after: vec![cmd(&[b"XLEN", &k("s1")])],
            },
            Later {
                setup: vec![cmd(&[
                    b"XGROUP",
                    b"CREATE",
                    &k("s2"),
                    b"grp",
                    b"$",
                    b"MKSTREAM",
                ])],
                blocking: cmd(&[
                    b"XREADGROUP",
                    b"GROUP",
                    b"grp",
                    b"c1",
                    b"COUNT",
                    b"10",
                    b"BLOCK",
                    b"0",
                    b"STREAMS",
                    &k("s2"),
                    b">",
                ]),
                feed: vec![cmd(&[b"XADD", &k("s2"), b"7-1", b"f", b"v", b"g", b"w"])],
                after: vec![cmd(&[b"XPENDING", &k("s2"), b"grp"])],
            },
        ];
        for case in &cases {
            let want = run_later(&reference.addr(), &|| blocked(&reference), case, resp3);
            let got = run_later(&respite.addr(), &|| blocked_on(&backends), case, resp3);
            assert_eq!(
                got.iter().map(|r| show(r)).collect::<Vec<_>>(),
                want.iter().map(|r| show(r)).collect::<Vec<_>>(),
                "RESP{} {}: respite (left) vs redis (right)",
                if resp3 { 3 } else { 2 },
                shown(&case.blocking)
            );
        }
    }
}

/// Every blocking command that times out answers what one redis-server answers (RESP2
/// `*-1`, RESP3 `_`), after its own timeout and not before.
#[test]
fn blocking_commands_time_out_as_redis_does() {
    let (_backends, respite, reference) = setup();
    let commands: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"BLPOP", b"{t}a", b"{t}b", b"0.2"]),
        cmd(&[b"BRPOP", b"{t}a", b"0.2"]),
        cmd(&[b"BRPOPLPUSH", b"{t}a", b"{t}b", b"0.2"]),
        cmd(&[b"BLMOVE", b"{t}a", b"{t}b", b"RIGHT", b"LEFT", b"0.2"]),
        cmd(&[b"BLMPOP", b"0.2", b"2", b"{t}a", b"{t}b", b"LEFT"]),
        cmd(&[b"BZPOPMIN", b"{t}z", b"0.2"]),
        cmd(&[b"BZPOPMAX", b"{t}z", b"{t}y", b"0.2"]),
        cmd(&[b"BZMPOP", b"0.2", b"1", b"{t}z", b"MIN"]),
        cmd(&[b"XREAD", b"BLOCK", b"200", b"STREAMS", b"{t}s", b"$"]),
        cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"g",
            b"c",
            b"BLOCK",
            b"200",
            b"STREAMS",
            b"{t}s",
            b">",
        ]),
    ];
    for resp3 in [false, true] {
        let mut r = reference.raw();
        let mut p = respite.raw();
        hello(&mut r, resp3);
        hello(&mut p, resp3);
        let group = cmd(&[b"XGROUP", b"CREATE", b"{t}s", b"g", b"$", b"MKSTREAM"]);
        let want = call(&mut r, &group);
        assert_eq!(show(&call(&mut p, &group)), show(&want));
        for command in &commands {
            // Both at once: each waits its 200 ms in parallel.
            let started = Instant::now();
            send(&mut r, command);
            send(&mut p, command);
            let want = r.read_reply();
            let got = p.read_reply();
            let waited = started.elapsed();
            assert_eq!(
                show(&got),
                show(&want),
                "RESP{} {}: respite (left) vs redis (right)",
                if resp3 { 3 } else { 2 },
                shown(command)
            );
            assert!(
                want == b"*-1\r\n" || want == b"_\r\n",
                "{}: redis answered {}",
                shown(command),
                show(&want)
            );
            assert!(
                waited >= Duration::from_millis(190) && waited < Duration::from_millis(900),
                "{} answered after {waited:?}",
                shown(command)
            );
        }
        assert_eq!(show(&call(&mut p, &cmd(&[b"DEL", b"{t}s"]))), show(&int(1)));
        call(&mut r, &cmd(&[b"DEL", b"{t}s"]));
    }
}

/// The listener's `op_timeout` (1 s) does not cut a blocking command: `BLPOP k 3` answers nil
/// after its 3 s, `XREAD BLOCK 1500` after its 1.5 s, and `BLPOP k 0` is served by an LPUSH
/// that comes 2.5 s later.
#[test]
fn op_timeout_does_not_cut_blocking_commands() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let addr = respite.addr();
    std::thread::scope(|s| {
        let timed = s.spawn(|| {
            let mut c = RawClient::connect(&addr);
            let started = Instant::now();
            let reply = c.cmd(&[b"BLPOP", b"{o}k", b"3"]);
            (reply, started.elapsed())
        });
        let stream = s.spawn(|| {
            let mut c = RawClient::connect(&addr);
            let started = Instant::now();
            let reply = c.cmd(&[b"XREAD", b"BLOCK", b"1500", b"STREAMS", b"{o}s", b"$"]);
            (reply, started.elapsed())
        });
        let served = s.spawn(|| {
            let mut c = RawClient::connect(&addr);
            let started = Instant::now();
            let reply = c.cmd(&[b"BLPOP", b"{o}k2", b"0"]);
            (reply, started.elapsed())
        });
        // The time span is the point of this test (longer than op_timeout), not a way to wait
        // for something.
        std::thread::sleep(Duration::from_millis(2500));
        let mut feeder = RawClient::connect(&addr);
        assert_eq!(feeder.cmd(&[b"LPUSH", b"{o}k2", b"e"]), int(1));

        let (reply, waited) = timed.join().unwrap();
        assert_eq!(show(&reply), show(b"*-1\r\n"), "BLPOP {{o}}k 3");
        assert!(
            waited >= Duration::from_millis(2900) && waited < Duration::from_millis(4500),
            "BLPOP {{o}}k 3 answered after {waited:?}"
        );
        let (reply, waited) = stream.join().unwrap();
        assert_eq!(show(&reply), show(b"*-1\r\n"), "XREAD BLOCK 1500");
        assert!(
            waited >= Duration::from_millis(1450) && waited < Duration::from_millis(2900),
            "XREAD BLOCK 1500 answered after {waited:?}"
        );
        let (reply, waited) = served.join().unwrap();
        assert_eq!(
            show(&reply),
            show(b"*2\r\n$5\r\n{o}k2\r\n$1\r\ne\r\n"),
            "BLPOP {{o}}k2 0"
        );
        assert!(
            waited >= Duration::from_millis(2400),
            "BLPOP {{o}}k2 0 answered after {waited:?}, before the LPUSH"
        );
    });
}

/// A blocking command whose keys are on two backends is refused with `-CROSSSLOT` and runs
/// nothing (the lists, sorted sets and streams still hold their elements); keys of one hash tag
/// are served.
#[test]
fn keys_on_two_backends_are_refused_and_nothing_runs() {
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let (a, b) = (placement.key_on(0, "l"), placement.key_on(1, "l"));
    let (za, zb) = (placement.key_on(0, "z"), placement.key_on(2, "z"));
    let (sa, sb) = (placement.key_on(1, "s"), placement.key_on(2, "s"));
    let (a, b, za, zb, sa, sb) = (
        a.as_bytes(),
        b.as_bytes(),
        za.as_bytes(),
        zb.as_bytes(),
        sa.as_bytes(),
        sb.as_bytes(),
    );
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    for list in [a, b] {
        assert_eq!(c.cmd(&[b"RPUSH", list, b"e"]), int(1));
    }
    for z in [za, zb] {
        assert_eq!(c.cmd(&[b"ZADD", z, b"1", b"m"]), int(1));
    }
    for s in [sa, sb] {
        assert_eq!(c.cmd(&[b"XADD", s, b"1-1", b"f", b"v"]), bulk(b"1-1"));
    }
    let refused: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"BLPOP", a, b, b"0"]),
        cmd(&[b"BRPOP", b, a, b"0"]),
        cmd(&[b"BRPOPLPUSH", a, b, b"0"]),
        cmd(&[b"BLMOVE", b, a, b"LEFT", b"RIGHT", b"0"]),
        cmd(&[b"BLMPOP", b"0", b"2", a, b, b"LEFT", b"COUNT", b"9"]),
        cmd(&[b"BZPOPMIN", za, zb, b"0"]),
        cmd(&[b"BZPOPMAX", zb, za, b"0"]),
        cmd(&[b"BZMPOP", b"0", b"2", za, zb, b"MAX"]),
        cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", sa, sb, b"0", b"0"]),
    ];
    for command in &refused {
        let started = Instant::now();
        assert_eq!(
            show(&call(&mut c, command)),
            show(CROSSSLOT),
            "{}",
            shown(command)
        );
        assert!(started.elapsed() < Duration::from_millis(900));
    }
    for list in [a, b] {
        assert_eq!(c.cmd(&[b"LLEN", list]), int(1), "{}", show(list));
    }
    for z in [za, zb] {
        assert_eq!(c.cmd(&[b"ZCARD", z]), int(1), "{}", show(z));
    }
    for s in [sa, sb] {
        assert_eq!(c.cmd(&[b"XLEN", s]), int(1), "{}", show(s));
    }
    // One hash tag: one backend, served.
    assert_eq!(c.cmd(&[b"RPUSH", b"{t}b", b"x"]), int(1));
    assert_eq!(
        show(&c.cmd(&[b"BLPOP", b"{t}a", b"{t}b", b"0"])),
        show(b"*2\r\n$4\r\n{t}b\r\n$1\r\nx\r\n")
    );
    assert_eq!(c.cmd(&[b"RPUSH", b"{t}b", b"y"]), int(1));
    assert_eq!(
        show(&c.cmd(&[b"BLMOVE", b"{t}b", b"{t}a", b"LEFT", b"RIGHT", b"0"])),
        show(&bulk(b"y"))
    );
    assert_eq!(c.cmd(&[b"LLEN", b"{t}a"]), int(1));
}

/// Requests pipelined after a blocking command wait for it, in order: `BLPOP {q}l 0`, `GET {q}x`
/// and `PING` in one write; nothing is answered until another client's `SET {q}x v` and then
/// `LPUSH {q}l e`; then BLPOP's array, `v` (the GET ran after the BLPOP was served) and PONG.
#[test]
fn pipelined_requests_wait_for_the_blocking_command() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    let mut pipeline = Vec::new();
    RawClient::encode_into(&mut pipeline, &[b"BLPOP", b"{q}l", b"0"]);
    RawClient::encode_into(&mut pipeline, &[b"GET", b"{q}x"]);
    RawClient::encode_into(&mut pipeline, &[b"PING"]);
    c.send_raw(&pipeline);
    assert!(
        wait_until(Duration::from_secs(5), || blocked_on(&backends) == 1),
        "BLPOP never blocked at a backend"
    );
    assert_nothing_to_read(&c, Duration::from_millis(200), "BLPOP + GET + PING");
    let mut other = respite.raw();
    assert_eq!(other.cmd(&[b"SET", b"{q}x", b"v"]), OK);
    assert_nothing_to_read(&c, Duration::from_millis(100), "after SET, before LPUSH");
    assert_eq!(other.cmd(&[b"LPUSH", b"{q}l", b"e"]), int(1));
    assert_eq!(
        show(&c.read_reply()),
        show(b"*2\r\n$4\r\n{q}l\r\n$1\r\ne\r\n")
    );
    assert_eq!(show(&c.read_reply()), show(&bulk(b"v")));
    assert_eq!(show(&c.read_reply()), show(b"+PONG\r\n"));
}

/// A client that disconnects while blocked frees the upstream at once: the backend has no
/// blocked client within 1 s, the lease is no longer active, and an element pushed next stays
/// in the list (nothing is popped for the client that left).
#[test]
fn disconnect_while_blocked_frees_the_upstream() {
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let owner = &backends[placement.owner(b"{k}l")];
    let respite = Respite::over(&addrs(&backends), 2);
    let mut gone = respite.raw();
    gone.send(&[b"BLPOP", b"{k}l", b"0"]);
    assert!(
        wait_until(Duration::from_secs(5), || blocked(owner) == 1),
        "BLPOP never blocked at its backend"
    );
    assert!(
        wait_until(Duration::from_secs(1), || {
            respite.stat("redis.main.blocked_clients") == 1
                && respite.stat("cluster.cache.leased_cx_active") == 1
        }),
        "while blocked: blocked_clients {} leased_cx_active {}",
        respite.stat("redis.main.blocked_clients"),
        respite.stat("cluster.cache.leased_cx_active")
    );
    drop(gone);
    let left = Instant::now();
    assert!(
        wait_until(Duration::from_secs(1), || blocked(owner) == 0),
        "the backend still has a blocked client 1 s after its client left"
    );
    eprintln!(
        "upstream unblocked {:?} after the client left",
        left.elapsed()
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"LPUSH", b"{k}l", b"x"]), int(1));
    assert_eq!(c.cmd(&[b"LLEN", b"{k}l"]), int(1));
    assert_eq!(owner.raw().cmd(&[b"LLEN", b"{k}l"]), int(1));
    assert!(
        wait_until(Duration::from_secs(1), || {
            respite.stat("redis.main.blocked_clients") == 0
                && respite.stat("cluster.cache.leased_cx_active") == 0
        }),
        "blocked_clients {} leased_cx_active {}",
        respite.stat("redis.main.blocked_clients"),
        respite.stat("cluster.cache.leased_cx_active")
    );
    // The next blocking command works as before.
    assert_eq!(
        show(&c.cmd(&[b"BLPOP", b"{k}l", b"0"])),
        show(b"*2\r\n$4\r\n{k}l\r\n$1\r\nx\r\n")
    );
}

/// Fifty clients blocked at once on distinct keys (spread evenly over three backends, so no
/// worker's per-host lease bound of 32 is reached) are all served, each with its own element,
/// exactly once; the lists are empty after and the clients go on working.
#[test]
fn many_blocked_clients_each_get_their_element_once() {
    const CLIENTS: usize = 50;
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let keys: Vec<String> = (0..CLIENTS)
        .map(|i| placement.key_on(i % 3, &format!("many{i}")))
        .collect();
    let respite = Respite::over(&addrs(&backends), 2);
    let mut clients: Vec<RawClient> = keys
        .iter()
        .map(|k| {
            let mut c = respite.raw();
            c.send(&[b"BLPOP", k.as_bytes(), b"0"]);
            c
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || blocked_on(&backends)
            == CLIENTS as i64),
        "{} of {CLIENTS} clients blocked at the backends",
        blocked_on(&backends)
    );
    assert_eq!(respite.stat("redis.main.blocked_clients"), CLIENTS as i64);
    let mut feeder = respite.raw();
    let pushes: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| cmd(&[b"RPUSH", k.as_bytes(), format!("v{i}").as_bytes()]))
        .collect();
    for reply in feeder.pipeline(&pushes) {
        assert_eq!(show(&reply), show(&int(1)));
    }
    for (i, (c, k)) in clients.iter_mut().zip(&keys).enumerate() {
        let mut want = format!("*2\r\n${}\r\n{k}\r\n", k.len()).into_bytes();
        want.extend(bulk(format!("v{i}").as_bytes()));
        assert_eq!(show(&c.read_reply()), show(&want), "client {i}");
    }
    for k in &keys {
        assert_eq!(feeder.cmd(&[b"LLEN", k.as_bytes()]), int(0), "{k}");
    }
    for c in &mut clients {
        assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
    }
    assert!(wait_until(Duration::from_secs(2), || blocked_on(&backends) == 0));
    assert!(
        wait_until(Duration::from_secs(2), || respite
            .stat("redis.main.blocked_clients")
            == 0),
        "blocked_clients {}",
        respite.stat("redis.main.blocked_clients")
    );
}

/// Inside MULTI a blocking command does not block: it is queued and EXEC runs it as Redis
/// does (nil on empty keys, the element when there is one), byte for byte.
#[test]
fn blocking_commands_inside_multi_do_not_block() {
    let (_backends, respite, reference) = setup();
    let pipelines: Vec<Vec<Vec<Vec<u8>>>> = vec![
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"BLPOP", b"{t}e", b"0"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"BRPOP", b"{t}e", b"0"]),
            cmd(&[b"BRPOPLPUSH", b"{t}e", b"{t}f", b"0"]),
            cmd(&[b"BLMOVE", b"{t}e", b"{t}f", b"LEFT", b"LEFT", b"0"]),
            cmd(&[b"BLMPOP", b"0", b"1", b"{t}e", b"LEFT"]),
            cmd(&[b"BZPOPMIN", b"{t}z", b"0"]),
            cmd(&[b"BZPOPMAX", b"{t}z", b"0"]),
            cmd(&[b"BZMPOP", b"0", b"1", b"{t}z", b"MIN"]),
            cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"{t}s", b"$"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"RPUSH", b"{t}e", b"1", b"2", b"3"]),
            cmd(&[b"ZADD", b"{t}z", b"1", b"a", b"2", b"b"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"BLPOP", b"{t}e", b"0"]),
            cmd(&[b"BLMOVE", b"{t}e", b"{t}f", b"LEFT", b"LEFT", b"0"]),
            cmd(&[b"BZPOPMAX", b"{t}z", b"0"]),
            cmd(&[b"LRANGE", b"{t}f", b"0", b"-1"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"LRANGE", b"{t}e", b"0", b"-1"]),
        ],
    ];
    let mut r = reference.raw();
    let mut p = respite.raw();
    for (n, pipeline) in pipelines.iter().enumerate() {
        let want = r.pipeline(pipeline);
        let started = Instant::now();
        let got = p.pipeline(pipeline);
        if n == 0 {
            assert_eq!(show(&got[2]), show(b"*1\r\n*-1\r\n"));
        }
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "a transaction with blocking commands took {:?}",
            started.elapsed()
        );
        for ((command, w), g) in pipeline.iter().zip(&want).zip(&got) {
            assert_eq!(
                show(g),
                show(w),
                "{}: respite (left) vs redis (right)",
                shown(command)
            );
        }
    }
}

/// Blocking commands with bad arguments get Redis's error, byte for byte (none of them blocks).
#[test]
fn bad_arguments_answer_as_redis_does() {
    let (_backends, respite, reference) = setup();
    let commands: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"BLPOP", b"k", b"notanumber"]),
        cmd(&[b"BLPOP", b"k", b"-1"]),
        cmd(&[b"BLPOP", b"k"]),
        cmd(&[b"BRPOP", b"k", b"1e400"]),
        cmd(&[b"BLMPOP", b"0", b"0", b"k", b"LEFT"]),
        cmd(&[b"BLMPOP", b"0", b"1", b"k", b"WRONG"]),
        cmd(&[b"BLMPOP", b"x", b"1", b"k", b"LEFT"]),
        cmd(&[b"BLMOVE", b"{t}a", b"{t}b", b"UP", b"LEFT", b"0"]),
        cmd(&[b"BZPOPMIN", b"z", b"soon"]),
        cmd(&[b"BZMPOP", b"0", b"2", b"k"]),
        cmd(&[b"BZMPOP", b"0", b"1", b"k", b"MIDDLE"]),
        cmd(&[b"XREAD", b"BLOCK", b"x", b"STREAMS", b"s", b"$"]),
        cmd(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s"]),
        cmd(&[
            b"XREADGROUP",
            b"GROUP",
            b"nogroup",
            b"c",
            b"BLOCK",
            b"0",
            b"STREAMS",
            b"s",
            b">",
        ]),
    ];
    let mut r = reference.raw();
    let mut p = respite.raw();
    // A key of the wrong type.
    let setup = cmd(&[b"SET", b"{t}str", b"x"]);
    assert_eq!(call(&mut r, &setup), OK);
    assert_eq!(call(&mut p, &setup), OK);
    let wrongtype = cmd(&[b"BLPOP", b"{t}str", b"0"]);
    for command in commands.iter().chain([&wrongtype]) {
        let want = call(&mut r, command);
        let started = Instant::now();
        let got = call(&mut p, command);
        assert_eq!(
            show(&got),
            show(&want),
            "{}: respite (left) vs redis (right)",
            shown(command)
        );
        assert!(
            want.starts_with(b"-"),
            "{}: {}",
            shown(command),
            show(&want)
        );
        assert!(started.elapsed() < Duration::from_millis(900));
    }
}

/// `redis.main.blocked_clients` is the number of clients blocked now (3, then 0), each holds
/// one active lease that goes back to the idle pool once served, and 200 sequential BLPOPs
/// served at once on one client reuse leased connections (at most 2 new upstream connects).
#[test]
fn blocked_clients_and_lease_stats() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let keys: [&[u8]; 3] = [b"{st}a", b"{st}b", b"{st}c"];
    let mut clients: Vec<RawClient> = keys
        .iter()
        .map(|k| {
            let mut c = respite.raw();
            c.send(&[b"BLPOP", *k, b"0"]);
            c
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || respite
            .stat("redis.main.blocked_clients")
            == 3),
        "blocked_clients {}",
        respite.stat("redis.main.blocked_clients")
    );
    assert!(wait_until(Duration::from_secs(5), || blocked_on(&backends) == 3));
    assert_eq!(respite.stat("cluster.cache.leased_cx_active"), 3);
    let mut feeder = respite.raw();
    for k in keys {
        assert_eq!(feeder.cmd(&[b"RPUSH", k, b"v"]), int(1));
    }
    for (c, k) in clients.iter_mut().zip(keys) {
        let mut want = format!("*2\r\n${}\r\n", k.len()).into_bytes();
        want.extend_from_slice(k);
        want.extend_from_slice(b"\r\n$1\r\nv\r\n");
        assert_eq!(show(&c.read_reply()), show(&want));
    }
    assert!(
        wait_until(Duration::from_secs(2), || respite
            .stat("redis.main.blocked_clients")
            == 0
            && respite.stat("cluster.cache.leased_cx_active") == 0),
        "blocked_clients {} leased_cx_active {}",
        respite.stat("redis.main.blocked_clients"),
        respite.stat("cluster.cache.leased_cx_active")
    );
    assert!(
        respite.stat("cluster.cache.leased_cx_idle") >= 1,
        "no leased connection went back to the pool: {:?}",
        respite.stats()
    );

    let connects = respite.stat("cluster.cache.leased_cx_connect");
    let mut c = respite.raw();
    for i in 0..200 {
        let v = i.to_string();
        let replies = c.pipeline(&[
            cmd(&[b"RPUSH", b"{st}q", v.as_bytes()]),
            cmd(&[b"BLPOP", b"{st}q", b"0"]),
        ]);
        assert_eq!(replies[0], int(1));
        let mut want = b"*2\r\n$5\r\n{st}q\r\n".to_vec();
        want.extend(bulk(v.as_bytes()));
        assert_eq!(show(&replies[1]), show(&want));
    }
    let new = respite.stat("cluster.cache.leased_cx_connect") - connects;
    assert!(
        new <= 2,
        "200 sequential BLPOPs made {new} new upstream connections"
    );
    assert_eq!(respite.stat("cluster.cache.leased_cx_active"), 0);
}

/// The transaction counters move by exactly what a small script does: `tx_committed` for each
/// EXEC that ran (a runtime error inside counts: EXEC ran), `tx_aborted` for each EXEC that ran
/// nothing (EXECABORT after a queue-time error or after a CROSSSLOT refusal, nil after a WATCH
/// conflict), `tx_cross_slot` for each command refused with CROSSSLOT inside MULTI or WATCH.
#[test]
fn transaction_stats_count_commits_aborts_and_cross_slot() {
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let (a, b) = (placement.key_on(0, "tx"), placement.key_on(1, "tx"));
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let respite = Respite::over(&addrs(&backends), 2);
    let names = [
        "redis.main.tx_committed",
        "redis.main.tx_aborted",
        "redis.main.tx_cross_slot",
    ];
    let base: Vec<i64> = names.iter().map(|n| respite.stat(n)).collect();
    let mut c = respite.raw();
    let mut other = respite.raw();

    // Committed: a plain transaction, and one whose INCR fails at run time.
    let r = pipe(
        &mut c,
        &[
            &[b"MULTI"],
            &[b"SET", b"{t}a", b"1"],
            &[b"INCR", b"{t}a"],
            &[b"EXEC"],
        ],
    );
    assert_eq!(show(&r[3]), show(b"*2\r\n+OK\r\n:2\r\n"));
    let r = pipe(
        &mut c,
        &[
            &[b"MULTI"],
            &[b"SET", b"{t}s", b"x"],
            &[b"INCR", b"{t}s"],
            &[b"EXEC"],
        ],
    );
    assert!(r[3].starts_with(b"*2\r\n+OK\r\n-ERR"), "{}", show(&r[3]));
    // Aborted: a queue-time error.
    let r = pipe(
        &mut c,
        &[
            &[b"MULTI"],
            &[b"SET", b"{t}a", b"9"],
            &[b"NOSUCHCOMMAND"],
            &[b"EXEC"],
        ],
    );
    assert_eq!(show(&r[3]), show(EXECABORT));
    // Aborted: a WATCH conflict.
    assert_eq!(c.cmd(&[b"WATCH", b"{t}w"]), OK);
    assert_eq!(other.cmd(&[b"SET", b"{t}w", b"1"]), OK);
    let r = pipe(&mut c, &[&[b"MULTI"], &[b"SET", b"{t}w", b"2"], &[b"EXEC"]]);
    assert_eq!(show(&r[2]), show(b"*-1\r\n"));
    // Cross-slot inside MULTI (counted), then EXEC aborts (counted).
    let r = pipe(
        &mut c,
        &[
            &[b"MULTI"],
            &[b"SET", a, b"1"],
            &[b"SET", b, b"1"],
            &[b"EXEC"],
        ],
    );
    assert_eq!(show(&r[1]), show(QUEUED));
    assert_eq!(show(&r[2]), show(CROSSSLOT));
    assert_eq!(show(&r[3]), show(EXECABORT));
    // Cross-slot WATCH (counted); no EXEC.
    let r = pipe(&mut c, &[&[b"WATCH", a], &[b"WATCH", b], &[b"UNWATCH"]]);
    assert_eq!(show(&r[0]), show(OK));
    assert_eq!(show(&r[1]), show(CROSSSLOT));
    assert_eq!(show(&r[2]), show(OK));
    // Committed: a blocking command inside MULTI.
    let r = pipe(
        &mut c,
        &[&[b"MULTI"], &[b"BLPOP", b"{t}e", b"0"], &[b"EXEC"]],
    );
    assert_eq!(show(&r[2]), show(b"*1\r\n*-1\r\n"));
    assert!(!exists_on(&mut backends[0].raw(), a) && !exists_on(&mut backends[1].raw(), b));

    let want = [3, 3, 2];
    let deltas = || -> Vec<i64> {
        names
            .iter()
            .zip(&base)
            .map(|(n, b)| respite.stat(n) - b)
            .collect()
    };
    wait_until(Duration::from_secs(2), || deltas() == want);
    assert_eq!(
        deltas(),
        want,
        "deltas of {names:?} (committed, aborted, cross_slot)"
    );
}

/// Timeouts past what Redis accepts, or over a century, are answered as Redis does (an error, or
/// a block until served), never a hung session.
#[test]
fn huge_timeouts_answer_as_redis_does() {
    let reference = RedisServer::start();
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    for t in [
        &b"1e19"[..],
        b"9223372036854775807",
        b"18000000000000000000",
        b"1e16",
    ] {
        for args in [
            vec![&b"BLPOP"[..], b"hl", t],
            vec![b"BZPOPMIN", b"hz", t],
            vec![b"BLMOVE", b"hl", b"hm", b"LEFT", b"LEFT", t],
        ] {
            let want = reference.raw().cmd(&args);
            assert_eq!(show(&respite.raw().cmd(&args)), show(&want), "{args:?}");
        }
    }
    // Over a century but within Redis's range: blocks until served.
    let mut waiter = respite.raw();
    waiter.send(&[b"BLPOP", b"hl", b"1e12"]);
    let mut pusher = respite.raw();
    assert!(wait_until(Duration::from_secs(5), || blocked(&backends[0]) == 1));
    assert_eq!(pusher.cmd(&[b"RPUSH", b"hl", b"x"]), int(1));
    assert_eq!(waiter.read_reply(), b"*2\r\n$2\r\nhl\r\n$1\r\nx\r\n");
}

/// The worker that serves a connection whose CLIENT ID is `id` (Respite's ids are
/// `session × workers + worker + 1`).
fn worker_of(id: &[u8], workers: u64) -> u64 {
    let n: u64 = String::from_utf8_lossy(id)
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("CLIENT ID answered {}", show(id)));
    (n - 1) % workers
}

/// CLIENT UNBLOCK as Redis's list unit uses it, run against `addr`: the blocked client's
/// replies (nil, nil, Redis's `-UNBLOCKED` error, for BLPOP, BZPOPMIN and XREAD BLOCK), the
/// unblocker's replies (`:1` each, then the argument errors and `:0` for ids not blocked), and
/// the lists afterwards (nothing popped for an unblocked client). `pair` gives the blocked
/// client and its unblocker; `blocked` counts blocked clients at the backends.
fn unblock_script(
    pair: (RawClient, RawClient),
    blocked: &dyn Fn() -> i64,
    resp3: bool,
) -> Vec<Vec<u8>> {
    let (mut rd, mut r) = pair;
    hello(&mut rd, resp3);
    let id = String::from_utf8_lossy(&rd.cmd(&[b"CLIENT", b"ID"]))
        .trim()
        .trim_start_matches(':')
        .to_string();
    let mut out = Vec::new();
    let waits: [&[&[u8]]; 3] = [
        &[b"BLPOP", b"ul", b"0"],
        &[b"BZPOPMIN", b"uz", b"0"],
        &[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"us", b"$"],
    ];
    for wait in waits {
        for reason in [None, Some(&b"TIMEOUT"[..]), Some(&b"error"[..])] {
            rd.send(wait);
            assert!(
                wait_until(Duration::from_secs(5), || blocked() == 1),
                "{:?} never blocked",
                wait.first().map(|a| show(a))
            );
            let mut unblock: Vec<&[u8]> = vec![b"CLIENT", b"UNBLOCK", id.as_bytes()];
            unblock.extend(reason);
            out.push(r.cmd(&unblock));
            out.push(rd.read_reply());
            assert!(wait_until(Duration::from_secs(5), || blocked() == 0));
        }
    }
    let never_given = (u64::MAX / 4).to_string();
    let errors: [&[&[u8]]; 8] = [
        &[b"CLIENT", b"UNBLOCK", b"asd"],
        &[b"CLIENT", b"UNBLOCK", b"asd", b"foo"],
        &[b"CLIENT", b"UNBLOCK", id.as_bytes(), b"foo"],
        &[b"CLIENT", b"unblock", id.as_bytes(), b"timeout", b"x"],
        &[b"CLIENT", b"UNBLOCK", id.as_bytes()],
        &[b"CLIENT", b"UNBLOCK", b"-1"],
        &[b"CLIENT", b"UNBLOCK", never_given.as_bytes(), b"ERROR"],
        &[b"CLIENT", b"UNBLOCK", b"18446744073709551615"],
    ];
    out.extend(errors.iter().map(|c| r.cmd(c)));
    out.push(rd.cmd(&[b"RPUSH", b"ul", b"a"]));
    out.push(r.cmd(&[b"LRANGE", b"ul", b"0", b"-1"]));
    out.push(r.cmd(&[b"DEL", b"ul"]));
    out
}

/// CLIENT UNBLOCK with the ids Respite gives, the blocked client and the unblocker served by
/// different workers: every reply equals one redis-server's byte for byte, in both protocols;
/// the unblocked client gets Redis's own reply and nothing is popped for it.
#[test]
fn client_unblock_answers_as_redis_does() {
    let (backends, respite, reference) = setup();
    for resp3 in [false, true] {
        let want = unblock_script(
            (reference.raw(), reference.raw()),
            &|| blocked(&reference),
            resp3,
        );
        // An unblocker on the other worker than the blocked client.
        let mut rd = respite.raw();
        let rd_worker = worker_of(&rd.cmd(&[b"CLIENT", b"ID"]), 2);
        let r = (0..64)
            .map(|_| respite.raw())
            .find_map(|mut r| (worker_of(&r.cmd(&[b"CLIENT", b"ID"]), 2) != rd_worker).then_some(r))
            .expect("64 connections all went to one worker");
        hello(&mut rd, false);
        let got = unblock_script((rd, r), &|| blocked_on(&backends), resp3);
        assert_eq!(
            got.iter().map(|r| show(r)).collect::<Vec<_>>(),
            want.iter().map(|r| show(r)).collect::<Vec<_>>(),
            "resp3 {resp3}: respite (left) vs redis (right)"
        );
        let unblocks: Vec<String> = got.iter().step_by(2).take(9).map(|r| show(r)).collect();
        assert_eq!(
            unblocks,
            vec![show(b":1\r\n"); 9],
            "resp3 {resp3}: every unblock found its client"
        );
    }
    assert_eq!(respite.stat("redis.main.blocked_clients"), 0);
}

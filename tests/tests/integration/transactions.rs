//! Transactions through Respite (MULTI, EXEC, DISCARD, WATCH, UNWATCH) against real
//! redis-servers: replies byte for byte as one redis-server gives them, and on every path that
//! discards a transaction (queue-time error, keys on two backends, DISCARD, disconnect, reload,
//! backend down, no leased connection free) nothing of it runs.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, RedisServer, free_port};

const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// True if `key` exists on any of `backends`.
fn exists_anywhere(backends: &[RedisServer], key: &[u8]) -> bool {
    backends.iter().any(|b| exists_on(&mut b.raw(), key))
}

/// Pipelines that use transactions, with keys of one hash tag: Respite's replies equal one
/// redis-server's, byte for byte (queue-time errors, runtime errors inside EXEC, empty
/// transactions, EXEC/DISCARD without MULTI, nested MULTI, WATCH inside MULTI, a malformed EXEC,
/// RESET and UNWATCH inside MULTI).
#[test]
fn transactions_answer_as_redis_does() {
    let reference = RedisServer::start();
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let pipelines: Vec<Vec<Vec<Vec<u8>>>> = vec![
        // The bug report's pipeline: SET and INCR run inside the transaction, once.
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"tx1", b"1"]),
            cmd(&[b"INCR", b"tx1"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"tx1"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}a", b"x"]),
            cmd(&[b"INCR", b"{t}a"]),
            cmd(&[b"LPUSH", b"{t}l", b"1", b"2"]),
            cmd(&[b"MGET", b"{t}a", b"{t}b"]),
            cmd(&[b"DEL", b"{t}l", b"{t}b"]),
            cmd(&[b"PING"]),
            cmd(&[b"ECHO", b"e\r\nx"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"{t}a"]),
        ],
        vec![cmd(&[b"MULTI"]), cmd(&[b"EXEC"])],
        vec![cmd(&[b"EXEC"]), cmd(&[b"DISCARD"]), cmd(&[b"UNWATCH"])],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}q", b"1"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"WATCH", b"{t}q"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"{t}q"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}e", b"1"]),
            cmd(&[b"NOSUCHCOMMAND", b"x"]),
            cmd(&[b"GET"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"{t}e"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}m", b"1"]),
            cmd(&[b"EXEC", b"junk"]),
            cmd(&[b"GET", b"{t}m"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}d", b"1"]),
            cmd(&[b"DISCARD"]),
            cmd(&[b"GET", b"{t}d"]),
            cmd(&[b"DISCARD"]),
        ],
        vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"{t}r", b"1"]),
            cmd(&[b"RESET"]),
            cmd(&[b"GET", b"{t}r"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"WATCH", b"{t}w"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"UNWATCH"]),
            cmd(&[b"SET", b"{t}w", b"1"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"WATCH", b"{t}w", b"{t}w2"]),
            cmd(&[b"UNWATCH"]),
            cmd(&[b"WATCH"]),
        ],
    ];
    let mut r = reference.raw();
    let mut c = respite.raw();
    for p in &pipelines {
        let want = r.pipeline(p);
        let got = c.pipeline(p);
        for ((command, w), g) in p.iter().zip(&want).zip(&got) {
            let shown: Vec<String> = command.iter().map(|a| show(a)).collect();
            assert_eq!(
                show(g),
                show(w),
                "{shown:?}: respite (left) vs redis (right)"
            );
        }
    }
}

/// Queue-time errors that only the backend knows (here `-OOM` of a backend at its
/// `maxmemory`) reach the client as Redis gives them, when the command is queued, and EXEC then
/// answers Redis's `-EXECABORT`: a transaction's commands go to its backend as they are queued,
/// both pipelined and one round trip at a time (where the client reads each `+QUEUED` before
/// it sends the next command), with and without WATCH. Byte for byte as one redis-server in the same state; nothing runs.
#[test]
fn queue_time_errors_are_the_backends() {
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let tx: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{o}k", b"v"]),
        // Inside MULTI Redis refuses every command at maxmemory, PING too.
        cmd(&[b"PING"]),
        cmd(&[b"INCR", b"{o}n"]),
        cmd(&[b"EXEC"]),
    ];
    let watched: Vec<Vec<Vec<u8>>> = std::iter::once(cmd(&[b"WATCH", b"{o}k"]))
        .chain(tx.iter().cloned())
        .collect();
    let full = |on: bool| {
        let value: &[u8] = if on { b"1" } else { b"0" };
        for s in backends.iter().chain(std::iter::once(&reference)) {
            let mut c = s.raw();
            assert_eq!(c.cmd(&[b"CONFIG", b"SET", b"maxmemory", value]), OK);
            assert_eq!(
                c.cmd(&[b"CONFIG", b"SET", b"maxmemory-policy", b"noeviction"]),
                OK
            );
        }
    };
    full(true);
    for (i, t) in [&tx, &watched].into_iter().enumerate() {
        let want = reference.raw().pipeline(t);
        assert!(
            want.iter().any(|r| r.starts_with(b"-OOM")),
            "no OOM directly: {want:?}"
        );
        assert_eq!(
            show(want.last().unwrap()),
            show(EXECABORT),
            "transaction {i}"
        );
        let got = respite.raw().pipeline(t);
        assert_eq!(
            got.iter().map(|r| show(r)).collect::<Vec<_>>(),
            want.iter().map(|r| show(r)).collect::<Vec<_>>(),
            "transaction {i}, pipelined: respite (left) vs redis (right)"
        );
        let mut one_by_one = respite.raw();
        let got: Vec<Vec<u8>> = t
            .iter()
            .map(|c| {
                let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
                one_by_one.cmd(&args)
            })
            .collect();
        assert_eq!(
            got.iter().map(|r| show(r)).collect::<Vec<_>>(),
            want.iter().map(|r| show(r)).collect::<Vec<_>>(),
            "transaction {i}, one round trip per command: respite (left) vs redis (right)"
        );
    }
    full(false);
    // A client that leaves after its queued commands reached the backend: nothing runs.
    let mut gone = respite.raw();
    assert_eq!(gone.cmd(&[b"MULTI"]), OK);
    assert_eq!(gone.cmd(&[b"SET", b"{o}gone", b"1"]), b"+QUEUED\r\n");
    drop(gone);
    std::thread::sleep(Duration::from_millis(300));
    for k in [&b"{o}k"[..], b"{o}n", b"{o}gone"] {
        assert!(!exists_anywhere(&backends, k), "{}", show(k));
    }
    // The connection, and the leased ones, serve the next transaction.
    let mut c = respite.raw();
    assert_eq!(
        c.pipeline(&tx).last().map(|r| show(r)),
        Some(show(b"*3\r\n+OK\r\n+PONG\r\n:1\r\n"))
    );
}

/// QUIT, or a protocol error, inside MULTI: one command queued in an earlier read (it reached
/// the backend) and one in the same read as the QUIT. The replies are one redis-server's, byte
/// for byte, the connection closes, and nothing of the transaction runs.
#[test]
fn quit_or_a_protocol_error_inside_multi_runs_nothing() {
    use std::io::{Read, Write};
    let reference = RedisServer::start();
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let ends: [&[u8]; 2] = [b"*1\r\n$4\r\nQUIT\r\n", b"*1\r\n$x\r\n"];
    for (i, end) in ends.into_iter().enumerate() {
        let (sent, later) = (format!("{{q}}sent{i}"), format!("{{q}}later{i}"));
        let run = |port: u16| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut first = b"*1\r\n$5\r\nMULTI\r\n".to_vec();
            first.extend(RawClient::encode(&[b"SET", sent.as_bytes(), b"1"]));
            s.write_all(&first).unwrap();
            let mut got = vec![0u8; b"+OK\r\n+QUEUED\r\n".len()];
            s.read_exact(&mut got).unwrap();
            let mut second = RawClient::encode(&[b"SET", later.as_bytes(), b"1"]);
            second.extend_from_slice(end);
            s.write_all(&second).unwrap();
            s.read_to_end(&mut got).unwrap();
            got
        };
        assert_eq!(
            show(&run(respite.port)),
            show(&run(reference.port)),
            "end {i}"
        );
        std::thread::sleep(Duration::from_millis(200));
        for k in [&sent, &later] {
            assert!(!exists_anywhere(&backends, k.as_bytes()), "{k}");
        }
    }
    assert_eq!(respite.stat("cluster.cache.leased_cx_active"), 0);
}

/// A transaction whose keys are on two backends is refused at the first key that goes
/// elsewhere (`-CROSSSLOT`, as Redis Cluster answers) and EXEC runs nothing; so is one that
/// mixes in a command Respite sends to every backend.
#[test]
fn keys_on_two_backends_discard_the_whole_transaction() {
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let a = placement.key_on(0, "x");
    let b = placement.key_on(1, "x");
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", a.as_bytes(), b"1"]),
        cmd(&[b"SET", b.as_bytes(), b"1"]),
        cmd(&[b"SET", a.as_bytes(), b"2"]),
        cmd(&[b"EXEC"]),
    ]);
    assert_eq!(show(&replies[1]), show(b"+QUEUED\r\n"));
    assert_eq!(show(&replies[2]), show(CROSSSLOT));
    assert_eq!(show(&replies[3]), show(b"+QUEUED\r\n"));
    assert_eq!(show(&replies[4]), show(EXECABORT));
    assert!(!exists_anywhere(&backends, a.as_bytes()));
    assert!(!exists_anywhere(&backends, b.as_bytes()));

    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", a.as_bytes(), b"1"]),
        cmd(&[b"FLUSHALL"]),
        cmd(&[b"EXEC"]),
    ]);
    assert!(
        replies[2].starts_with(b"-ERR 'flushall' inside MULTI is not supported"),
        "{}",
        show(&replies[2])
    );
    assert_eq!(show(&replies[3]), show(EXECABORT));
    assert!(!exists_anywhere(&backends, a.as_bytes()));
    // WATCH binds the transaction to its keys' backend.
    let replies = c.pipeline(&[
        cmd(&[b"WATCH", a.as_bytes()]),
        cmd(&[b"WATCH", b.as_bytes()]),
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b.as_bytes(), b"1"]),
        cmd(&[b"EXEC"]),
    ]);
    assert_eq!(show(&replies[0]), show(OK));
    assert_eq!(show(&replies[1]), show(CROSSSLOT));
    assert_eq!(show(&replies[3]), show(CROSSSLOT));
    assert_eq!(show(&replies[4]), show(EXECABORT));
    assert!(!exists_anywhere(&backends, b.as_bytes()));
}

/// Nothing queued runs when the client disconnects before EXEC, nor when the listener is
/// reloaded in the middle, nor when the backend is down at EXEC.
#[test]
fn discarded_transactions_run_nothing() {
    let backends = servers(2);
    let port = free_port();
    let admin = free_port();
    let cfg = simple_config(port, admin, &addrs(&backends), 1, "");
    let respite = Respite::start(&cfg, port, admin);

    let mut gone = respite.raw();
    gone.send(&[b"MULTI"]);
    gone.send(&[b"SET", b"{d}gone", b"1"]);
    drop(gone);

    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"{d}reload", b"1"]), b"+QUEUED\r\n");
    respite.reload(&cfg.replace("op_timeout = \"1s\"", "op_timeout = \"2s\""));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !respite.log().contains("reloaded") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let exec = c.cmd(&[b"EXEC"]);
    assert!(exec.starts_with(b"-EXECABORT"), "{}", show(&exec));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!exists_anywhere(&backends, b"{d}gone"));
    assert!(!exists_anywhere(&backends, b"{d}reload"));
    // And the connection works normally after.
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"{d}after", b"1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
    assert!(exists_anywhere(&backends, b"{d}after"));
}

/// A backend that is down when EXEC comes: the client gets an error and nothing runs later
/// (the queued commands are not kept anywhere).
#[test]
fn backend_down_at_exec_runs_nothing() {
    let mut backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"down", b"1"]), b"+QUEUED\r\n");
    backends[0].kill();
    let exec = c.cmd(&[b"EXEC"]);
    assert!(exec.starts_with(b"-"), "{}", show(&exec));
    // Back (empty, on the same port): the queued SET was kept nowhere and never arrives.
    backends[0].restart();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!exists_on(&mut backends[0].raw(), b"down"));
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"up", b"1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
}

/// WATCH through Respite is optimistic locking as at Redis: 20 clients incrementing one
/// counter with WATCH/GET/MULTI/SET/EXEC (retrying when EXEC answers nil) end with exactly
/// the number of increments that committed, and the lease pool holds no connection afterwards.
#[test]
fn watch_gives_exactly_once_increments_under_contention() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    const CLIENTS: usize = 20;
    const EACH: usize = 10;
    let addr = respite.addr();
    let conflicts: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let addr = addr.clone();
                s.spawn(move || {
                    let mut c = RawClient::connect(&addr);
                    let mut conflicts = 0;
                    for _ in 0..EACH {
                        loop {
                            assert_eq!(c.cmd(&[b"WATCH", b"counter"]), OK);
                            let v = c.cmd(&[b"GET", b"counter"]);
                            let n: u64 = if v == NIL {
                                0
                            } else {
                                let text = String::from_utf8_lossy(&v);
                                text.lines()
                                    .nth(1)
                                    .and_then(|l| l.parse().ok())
                                    .unwrap_or(0)
                            };
                            assert_eq!(c.cmd(&[b"MULTI"]), OK);
                            let next = (n + 1).to_string();
                            assert_eq!(
                                c.cmd(&[b"SET", b"counter", next.as_bytes()]),
                                b"+QUEUED\r\n"
                            );
                            match c.cmd(&[b"EXEC"]).as_slice() {
                                b"*1\r\n+OK\r\n" => break,
                                b"*-1\r\n" => conflicts += 1,
                                other => panic!("EXEC answered {}", show(other)),
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"GET", b"counter"]),
        bulk((CLIENTS * EACH).to_string().as_bytes())
    );
    eprintln!("{conflicts} EXECs answered nil (a WATCHed key changed)");
    assert!(
        conflicts > 0,
        "20 clients never conflicted: WATCH cannot have been tested"
    );
    assert_eq!(respite.stat("cluster.cache.leased_cx_active"), 0);
    assert_eq!(respite.stat("cluster.cache.leased_cx_closed_dirty"), 0);
}

/// Respite (1 worker) over `backends` with `max_leased_connections = 1` and `op_timeout`.
fn one_leased_connection(backends: &[RedisServer], op_timeout: &str) -> Respite {
    let port = free_port();
    let admin = free_port();
    let cfg = simple_config(port, admin, &addrs(backends), 1, "")
        .replace(
            "type = \"static\"",
            "type = \"static\"\nmax_leased_connections = 1",
        )
        .replace(
            "op_timeout = \"1s\"",
            &format!("op_timeout = \"{op_timeout}\""),
        );
    assert!(cfg.contains("max_leased_connections = 1"), "{cfg}");
    assert!(
        cfg.contains(&format!("op_timeout = \"{op_timeout}\"")),
        "{cfg}"
    );
    Respite::start(&cfg, port, admin)
}

/// With `max_leased_connections = 1`, a second client's transaction waits while a WATCH holds
/// the one connection: its first command gets an error after `op_timeout`, EXEC aborts and
/// nothing runs, not even the commands queued after the connection became free; once the WATCH
/// ends the pool serves again, reusing the connection (no new connect).
#[test]
fn exhausted_lease_pool_refuses_then_recovers() {
    let backends = servers(1);
    let respite = one_leased_connection(&backends, "1s");
    let mut holder = respite.raw();
    assert_eq!(holder.cmd(&[b"WATCH", b"held"]), OK);
    let mut other = respite.raw();
    assert_eq!(other.cmd(&[b"MULTI"]), OK);
    let started = Instant::now();
    let queued = other.cmd(&[b"SET", b"waited", b"1"]);
    let waited = started.elapsed();
    assert!(
        queued.starts_with(b"-ERR no leased upstream connection became free"),
        "{}",
        show(&queued)
    );
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    // The same, pipelined in one write by another client: EXEC aborts too.
    let replies = respite.raw().pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"waited", b"1"]),
        cmd(&[b"EXEC"]),
    ]);
    assert!(
        replies[1].starts_with(b"-ERR no leased upstream connection became free"),
        "{}",
        show(&replies[1])
    );
    assert_eq!(show(&replies[2]), show(EXECABORT));
    assert_eq!(respite.stat("cluster.cache.leased_cx_pool_exhausted"), 2);
    // The connection is free again before the first transaction's next command: that command
    // must not open the transaction anew with only itself (half of it would run).
    assert_eq!(holder.cmd(&[b"UNWATCH"]), OK);
    assert_eq!(other.cmd(&[b"SET", b"waited:later", b"1"]), b"+QUEUED\r\n");
    assert_eq!(show(&other.cmd(&[b"EXEC"])), show(EXECABORT));
    for k in [&b"waited"[..], b"waited:later"] {
        assert!(!exists_on(&mut backends[0].raw(), k), "{}", show(k));
    }
    assert_eq!(respite.stat("cluster.cache.leased_cx_pool_exhausted"), 2);
    assert_eq!(other.cmd(&[b"MULTI"]), OK);
    assert_eq!(other.cmd(&[b"SET", b"waited", b"2"]), b"+QUEUED\r\n");
    assert_eq!(other.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
    assert_eq!(other.cmd(&[b"GET", b"waited"]), bulk(b"2"));
    assert_eq!(respite.stat("cluster.cache.leased_cx_connect"), 1);
    // A client that leaves while it holds a WATCH: its connection is closed, not returned.
    assert_eq!(holder.cmd(&[b"WATCH", b"held"]), OK);
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(5);
    while respite.stat("cluster.cache.leased_cx_closed_dirty") < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(respite.stat("cluster.cache.leased_cx_closed_dirty"), 1);
    assert_eq!(other.cmd(&[b"MULTI"]), OK);
    assert_eq!(other.cmd(&[b"EXEC"]), b"*0\r\n");
}

/// Requests pipelined before WATCH, EXEC or a blocking command run before it, as on Redis's one
/// connection, though they go out on a shared connection and it on a leased one (each of
/// these pipelines, sent in one write 30 times over one backend and 2 workers, answers as one
/// redis-server does, byte for byte: no lost INCR, no WATCH passed by the client's own write,
/// no spurious conflict from a write before the WATCH).
#[test]
fn requests_before_a_leased_exchange_run_before_it() {
    let reference = RedisServer::start();
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 2);
    let pipelines: Vec<Vec<Vec<Vec<u8>>>> = vec![
        vec![
            cmd(&[b"SET", b"k", b"10"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"INCR", b"k"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"k"]),
        ],
        vec![
            cmd(&[b"WATCH", b"other"]),
            cmd(&[b"SET", b"k", b"10"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"INCR", b"k"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"k"]),
        ],
        vec![
            cmd(&[b"WATCH", b"k"]),
            cmd(&[b"INCR", b"k"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"INCR", b"k"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"SET", b"k", b"1"]),
            cmd(&[b"WATCH", b"k"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"INCR", b"k"]),
            cmd(&[b"EXEC"]),
        ],
        vec![
            cmd(&[b"WATCH", b"k"]),
            cmd(&[b"DEL", b"l"]),
            cmd(&[b"RPUSH", b"l", b"a"]),
            cmd(&[b"DEL", b"l"]),
            cmd(&[b"BLPOP", b"l", b"0.2"]),
            cmd(&[b"UNWATCH"]),
        ],
        vec![
            cmd(&[b"RPUSH", b"l", b"a"]),
            cmd(&[b"BLPOP", b"l", b"0.2"]),
            cmd(&[b"LLEN", b"l"]),
        ],
    ];
    let mut r = reference.raw();
    let mut p = respite.raw();
    for (i, pipeline) in pipelines.iter().enumerate() {
        for round in 0..30 {
            for c in [&mut r, &mut p] {
                assert_eq!(c.cmd(&[b"DEL", b"k", b"l", b"other"]).first(), Some(&b':'));
            }
            let want = r.pipeline(pipeline);
            let got = p.pipeline(pipeline);
            assert_eq!(
                got.iter().map(|x| show(x)).collect::<Vec<_>>(),
                want.iter().map(|x| show(x)).collect::<Vec<_>>(),
                "pipeline {i}, round {round}: respite (left) vs redis (right)"
            );
        }
    }
}

/// TIME inside MULTI is queued and answered by the transaction's backend, as at Redis (outside
/// MULTI Respite answers it): EXEC's array holds the backend's `[seconds, microseconds]`, and
/// the backend counts one TIME call.
#[test]
fn time_inside_multi_is_the_backends() {
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"TIME"]), b"+QUEUED\r\n");
    let exec = String::from_utf8_lossy(&c.cmd(&[b"EXEC"])).to_string();
    let lines: Vec<&str> = exec.split("\r\n").collect();
    assert_eq!(lines.get(..2), Some(&["*1", "*2"][..]), "{exec:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let secs: u64 = lines.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(secs.abs_diff(now) < 5, "{exec:?}");
    let stats =
        String::from_utf8_lossy(&backends[0].raw().cmd(&[b"INFO", b"commandstats"])).to_string();
    assert!(stats.contains("cmdstat_time:calls=1,"), "{stats}");
}

/// A client that leaves while it waits for a leased connection leaves the wait: the
/// `leased_cx_waiting` gauge goes back to 0, and the next freed connection goes to the client
/// still waiting behind it at once, not after `op_timeout`.
#[test]
fn a_waiter_that_leaves_passes_its_turn_on() {
    let backends = servers(1);
    let respite = one_leased_connection(&backends, "3s");
    let mut holder = respite.raw();
    assert_eq!(holder.cmd(&[b"WATCH", b"held"]), OK);
    let mut gone = respite.raw();
    gone.send(&[b"BLPOP", b"bl", b"0"]);
    assert!(wait_until(Duration::from_secs(2), || {
        respite.stat("cluster.cache.leased_cx_waiting") == 1
    }));
    let mut next = respite.raw();
    next.send(&[b"BLPOP", b"bl", b"0.5"]);
    assert!(wait_until(Duration::from_secs(2), || {
        respite.stat("cluster.cache.leased_cx_waiting") == 2
    }));
    drop(gone);
    assert!(
        wait_until(Duration::from_secs(2), || {
            respite.stat("cluster.cache.leased_cx_waiting") == 1
        }),
        "leased_cx_waiting {} after one waiter left",
        respite.stat("cluster.cache.leased_cx_waiting")
    );
    let freed = Instant::now();
    assert_eq!(holder.cmd(&[b"UNWATCH"]), OK);
    assert_eq!(next.read_reply(), b"*-1\r\n");
    let served = freed.elapsed();
    assert!(
        served < Duration::from_millis(1500),
        "the waiter got the freed connection after {served:?}"
    );
    assert_eq!(respite.stat("cluster.cache.leased_cx_waiting"), 0);
    assert_eq!(respite.stat("cluster.cache.leased_cx_pool_exhausted"), 0);
}

/// A request pipelined after EXEC sees the transaction's writes (the session waits for EXEC's
/// reply before it handles the next request).
#[test]
fn requests_after_exec_see_its_writes() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    for i in 0..50 {
        let v = i.to_string();
        let replies = c.pipeline(&[
            cmd(&[b"MULTI"]),
            cmd(&[b"SET", b"seq", v.as_bytes()]),
            cmd(&[b"EXEC"]),
            cmd(&[b"GET", b"seq"]),
        ]);
        assert_eq!(show(&replies[3]), show(&bulk(v.as_bytes())));
    }
}

/// A transaction pipelined in one write is answered in one write: `+OK` and the `+QUEUED`s
/// wait for EXEC's array instead of going out one round trip ahead of it (each client read
/// gets all of them at once, every time).
#[test]
fn a_pipelined_transaction_is_answered_in_one_write() {
    use std::io::{Read, Write};
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let c = respite.raw();
    let mut stream = c.stream();
    let request: &[u8] = b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$2\r\ntx\r\n$1\r\n1\r\n\
*2\r\n$4\r\nINCR\r\n$2\r\ntx\r\n*1\r\n$4\r\nEXEC\r\n";
    let want: &[u8] = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:2\r\n";
    for i in 0..50 {
        stream.write_all(request).unwrap();
        let mut buf = [0u8; 256];
        let n = stream.read(&mut buf).unwrap();
        assert_eq!(
            show(&buf[..n]),
            show(want),
            "transaction {i}: the first read"
        );
    }
}

/// The Rust `redis` crate's atomic pipeline (MULTI … EXEC in one write) works, and its
/// `transaction` helper (WATCH, reads, MULTI/EXEC, retried on nil).
#[test]
fn redis_crate_transactions_work() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let port: u16 = respite.addr().rsplit(':').next().unwrap().parse().unwrap();
    let mut conn = respite_tests::redis_client(port);
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .set("{crate}a", 1)
        .ignore()
        .incr("{crate}a", 5)
        .incr("{crate}b", 2)
        .query(&mut conn)
        .unwrap();
    assert_eq!((a, b), (6, 2));
    let (n,): (i64,) = redis::transaction(&mut conn, &["{crate}a"], |conn, pipe| {
        let v: i64 = redis::cmd("GET").arg("{crate}a").query(conn)?;
        pipe.set("{crate}a", v * 10)
            .ignore()
            .get("{crate}a")
            .query(conn)
    })
    .unwrap();
    assert_eq!(n, 60);
}

/// Routes that rewrite keys (`remove_prefix`, `key_formatter`): a transaction, a WATCH and a
/// blocking command go to the backend of the rewritten key, as the same single command does —
/// one copy of each key, WATCH conflicts seen, BLPOP served by what RPUSH pushed.
#[test]
fn rewritten_keys_place_transactions_and_blocking_as_single_commands() {
    let backends = servers(3);
    let routes = r#"[[listeners.prefix_routes.routes]]
prefix = "u:"
cluster = "cache"
remove_prefix = true
[[listeners.prefix_routes.routes]]
prefix = "f:"
cluster = "cache"
key_formatter = "{%KEY%}"
"#;
    let respite = Respite::over_with(&addrs(&backends), 1, routes);
    let mut c = respite.raw();
    let mut other = respite.raw();
    let copies = |key: &[u8]| {
        backends
            .iter()
            .filter(|b| exists_on(&mut b.raw(), key))
            .count()
    };
    for i in 0..12 {
        for (client, stored) in [
            (format!("u:k{i}"), format!("k{i}")),
            (format!("f:k{i}"), format!("{{f:k{i}}}")),
        ] {
            let k = client.as_bytes();
            assert_eq!(other.cmd(&[b"SET", k, b"other"]), OK);
            assert_eq!(c.cmd(&[b"MULTI"]), OK);
            assert_eq!(c.cmd(&[b"SET", k, b"mine"]), b"+QUEUED\r\n");
            assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
            assert_eq!(other.cmd(&[b"GET", k]), bulk(b"mine"), "{client}");
            assert_eq!(copies(stored.as_bytes()), 1, "{client} stored as {stored}");

            assert_eq!(c.cmd(&[b"WATCH", k]), OK);
            assert_eq!(other.cmd(&[b"SET", k, b"changed"]), OK);
            assert_eq!(c.cmd(&[b"MULTI"]), OK);
            assert_eq!(c.cmd(&[b"SET", k, b"lost"]), b"+QUEUED\r\n");
            assert_eq!(
                c.cmd(&[b"EXEC"]),
                b"*-1\r\n",
                "{client}: WATCH missed a write"
            );
            assert_eq!(other.cmd(&[b"GET", k]), bulk(b"changed"));

            let list = format!("{client}:l");
            let l = list.as_bytes();
            assert_eq!(other.cmd(&[b"RPUSH", l, b"e"]), int(1));
            let popped = c.cmd(&[b"BLPOP", l, b"1"]);
            assert!(popped.starts_with(b"*2\r\n"), "{client}: {}", show(&popped));
            assert_eq!(other.cmd(&[b"LLEN", l]), int(0));
        }
    }
}

/// A WATCH then a blocking command and SCRIPT KILL on the same connection, with one leased
/// connection per host: the blocking command runs on the WATCH's connection (as at Redis,
/// where they are one) and SCRIPT KILL never waits for a free one.
#[test]
fn watch_lends_its_connection_and_script_kill_never_waits() {
    let backends = servers(1);
    let respite = one_leased_connection(&backends, "1s");
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"WATCH", b"w"]), OK);
    assert_eq!(c.cmd(&[b"BLPOP", b"w:l", b"0.1"]), b"*-1\r\n");
    assert_eq!(
        c.cmd(&[b"SCRIPT", b"KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );
    // The WATCH still holds: another client's write makes EXEC nil.
    let mut other = respite.raw();
    assert_eq!(other.cmd(&[b"SET", b"w", b"x"]), OK);
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"w", b"y"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"EXEC"]), b"*-1\r\n");
    assert_eq!(respite.stat("cluster.cache.leased_cx_pool_exhausted"), 0);
}

/// A reload between MULTI (or WATCH) and EXEC: the commands queued after it answer `+QUEUED`
/// (not a misleading `-CROSSSLOT`), EXEC answers the reload's `-EXECABORT`, and nothing runs.
#[test]
fn reload_during_a_transaction_runs_nothing_and_says_why() {
    let backends = servers(3);
    let port = free_port();
    let admin = free_port();
    let cfg = simple_config(port, admin, &addrs(&backends), 1, "");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    let mut w = respite.raw();
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"{r}a", b"1"]), b"+QUEUED\r\n");
    assert_eq!(w.cmd(&[b"WATCH", b"{r}w"]), OK);
    respite.reload(&cfg.replace("op_timeout = \"1s\"", "op_timeout = \"2s\""));
    assert!(
        wait_until(Duration::from_secs(10), || respite
            .log()
            .contains("reloaded")),
        "no reload: {}",
        respite.log()
    );
    assert_eq!(c.cmd(&[b"SET", b"{r}b", b"1"]), b"+QUEUED\r\n");
    let exec = c.cmd(&[b"EXEC"]);
    assert!(exec.starts_with(b"-EXECABORT"), "{}", show(&exec));
    assert!(show(&exec).contains("reloaded"), "{}", show(&exec));
    assert_eq!(w.cmd(&[b"MULTI"]), OK);
    assert_eq!(w.cmd(&[b"SET", b"{r}w", b"1"]), b"+QUEUED\r\n");
    let exec = w.cmd(&[b"EXEC"]);
    assert!(show(&exec).contains("reloaded"), "{}", show(&exec));
    for k in [&b"{r}a"[..], b"{r}b", b"{r}w"] {
        assert!(!exists_anywhere(&backends, k));
    }
}

/// Large commands inside MULTI are queued as the client sent them, never copied: a transaction
/// holding a 48 MiB `SET` peaks at well under twice that in Respite's RSS (it held four copies:
/// the read buffer, the queue, the copy kept for a re-send, and the write), and runs as any
/// other. Pipelined with small commands around it, on its own read, after WATCH, discarded,
/// discarded by a queue-time error behind it, and abandoned by its client (after the
/// `+QUEUED`, and in the middle of the value): replies as Redis gives them, values byte for
/// byte, and nothing of a discarded transaction runs.
#[test]
fn large_commands_inside_multi_are_queued_as_sent() {
    const MIB: usize = 1 << 20;
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let pid = respite.pid();
    let pattern = |n: usize, seed: u8| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"{t}small", b"s"]), OK);
    let base = peak_rss_kib(pid);
    let big = pattern(48 * MIB, 1);
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{t}a", &big]),
        cmd(&[b"APPEND", b"{t}a", b"!"]),
        cmd(&[b"GET", b"{t}small"]),
        cmd(&[b"EXEC"]),
        cmd(&[b"STRLEN", b"{t}a"]),
    ]);
    let queued = b"+QUEUED\r\n".to_vec();
    let len = int(48 * MIB as i64 + 1);
    let exec = [b"*3\r\n+OK\r\n".to_vec(), len.clone(), bulk(b"s")].concat();
    assert_eq!(
        replies,
        vec![
            OK.to_vec(),
            queued.clone(),
            queued.clone(),
            queued.clone(),
            exec,
            len
        ]
    );
    let grew = peak_rss_kib(pid).saturating_sub(base) / 1024;
    eprintln!("peak RSS grew {grew} MiB for a 48 MiB value inside MULTI");
    assert!(
        grew < 80,
        "the 48 MiB value was held more than once: +{grew} MiB"
    );
    let mut want = big.clone();
    want.push(b'!');
    let mut direct = backends[0].raw();
    assert!(
        direct.cmd(&[b"GET", b"{t}a"]) == bulk(&want),
        "{{t}}a byte for byte"
    );

    // On its own read, after WATCH.
    let other = pattern(3 * MIB, 7);
    assert_eq!(c.cmd(&[b"WATCH", b"{t}b"]), OK);
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"{t}b", &other]), queued);
    assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
    assert!(direct.cmd(&[b"GET", b"{t}b"]) == bulk(&other));

    // Discarded, and discarded by a queue-time error behind it: nothing runs.
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{t}d", &other]),
        cmd(&[b"DISCARD"]),
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{t}e", &other]),
        cmd(&[b"GET"]),
        cmd(&[b"EXEC"]),
    ]);
    assert_eq!(replies.len(), 7);
    assert_eq!(replies[2], OK);
    assert!(replies[5].starts_with(b"-ERR wrong number of arguments"));
    assert_eq!(replies[6], EXECABORT);

    // A client that leaves after queueing one (its `+QUEUED` read: the frame went to the
    // backend inside the open transaction), and one that leaves in the middle of the value.
    let mut gone = respite.raw();
    assert_eq!(gone.cmd(&[b"MULTI"]), OK);
    assert_eq!(gone.cmd(&[b"SET", b"{t}f", &other]), queued);
    drop(gone);
    let mut cut = respite.raw();
    let mut frame = b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$4\r\n{t}g\r\n".to_vec();
    frame.extend_from_slice(format!("${}\r\n", other.len()).as_bytes());
    frame.extend_from_slice(&other);
    cut.send_raw(&frame[..frame.len() - MIB]);
    drop(cut);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        direct.cmd(&[b"EXISTS", b"{t}d", b"{t}e", b"{t}f", b"{t}g"]),
        int(0),
        "nothing of a discarded or abandoned transaction ran"
    );
    // And the connection the transactions held went back clean: the next one runs.
    assert_eq!(c.cmd(&[b"MULTI"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"{t}h", &other]), queued);
    assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n+OK\r\n");
    assert_eq!(direct.cmd(&[b"STRLEN", b"{t}h"]), int(3 * MIB as i64));
}

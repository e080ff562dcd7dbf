//! Request mirroring (Envoy `request_mirror_policy`) against real redis-servers: a mirror that is
//! stopped or killed never slows or fails the primary path and is counted
//! (`cluster.<c>.mirror_rq_*`); a client's commands reach the mirror in the order sent, exactly
//! once; `runtime_fraction` picks the same keys on every run.
//!
//! Every config has two listeners on one process over the same primary: `main` mirrors to
//! cluster `mirror`, `plain` does not, so the no-mirror latency baseline is measured in the same
//! test, on the same process, against the same backend.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use respite_tests::{RawClient, RedisServer, Respite, free_port};

/// The mirror cluster's per-worker bound on in-flight copies in the stopped-mirror test: small,
/// so a stopped mirror reaches it within a few batches.
const SMALL_BOUND: usize = 64;

/// How a test's `main` listener mirrors.
struct MirrorSpec {
    /// `exclude_read_commands`.
    exclude_reads: bool,
    /// `runtime_fraction`, percent.
    fraction: f64,
    /// The mirror cluster's `max_pending_requests`.
    max_pending: usize,
    /// The mirror cluster's `connections_per_host`.
    connections: usize,
}

impl Default for MirrorSpec {
    fn default() -> Self {
        MirrorSpec {
            exclude_reads: true,
            fraction: 100.0,
            max_pending: 16384,
            connections: 1,
        }
    }
}

/// Ports of one test's respite: listener `main` (mirrors), listener `plain` (does not), admin.
#[derive(Clone, Copy)]
struct Ports {
    main: u16,
    plain: u16,
    admin: u16,
}

impl Ports {
    fn new() -> Ports {
        Ports {
            main: free_port(),
            plain: free_port(),
            admin: free_port(),
        }
    }
}

fn config(p: Ports, primary: &str, mirror: &str, m: &MirrorSpec) -> String {
    format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
drain_timeout = "2s"
[[listeners]]
name = "main"
address = "127.0.0.1:{main}"
stat_prefix = "main"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "primary"
[[listeners.prefix_routes.catch_all_route.request_mirror_policy]]
cluster = "mirror"
exclude_read_commands = {exclude}
runtime_fraction = {fraction:?}
[[listeners]]
name = "plain"
address = "127.0.0.1:{plain}"
stat_prefix = "plain"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "primary"
[[clusters]]
name = "primary"
connect_timeout = "250ms"
hosts = ["{primary}"]
[[clusters]]
name = "mirror"
connect_timeout = "250ms"
max_pending_requests = {max_pending}
connections_per_host = {connections}
hosts = ["{mirror}"]
"#,
        admin = p.admin,
        main = p.main,
        plain = p.plain,
        exclude = m.exclude_reads,
        fraction = m.fraction,
        max_pending = m.max_pending,
        connections = m.connections,
    )
}

fn start(p: Ports, primary: &RedisServer, mirror: &RedisServer, m: &MirrorSpec) -> Respite {
    let cfg = config(p, &primary.addr(), &mirror.addr(), m);
    Respite::start(&cfg, p.main, p.admin)
}

/// The mirror stats of cluster `mirror`, in a fixed order for printing and deltas.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct MirrorStats {
    total: i64,
    success: i64,
    error: i64,
    overflow: i64,
    active: i64,
}

impl MirrorStats {
    fn read(r: &Respite) -> MirrorStats {
        let s = r.stats();
        let get = |n: &str| {
            s.get(&format!("cluster.mirror.mirror_rq_{n}"))
                .copied()
                .unwrap_or(0)
        };
        MirrorStats {
            total: get("total"),
            success: get("success"),
            error: get("error"),
            overflow: get("overflow"),
            active: get("active"),
        }
    }

    fn minus(self, o: MirrorStats) -> MirrorStats {
        MirrorStats {
            total: self.total - o.total,
            success: self.success - o.success,
            error: self.error - o.error,
            overflow: self.overflow - o.overflow,
            active: self.active,
        }
    }
}

/// Waits until every copy handed to the mirror pool has an outcome (nothing active, success +
/// error = total); returns the stats then. Panics after 15 s with the stats.
fn drained(r: &Respite) -> MirrorStats {
    let mut last = MirrorStats::default();
    let ok = wait_until(Duration::from_secs(15), || {
        last = MirrorStats::read(r);
        // Whether overflowed copies count in `total` is not part of the contract: accept both.
        let done = last.success + last.error;
        last.active == 0 && (done == last.total || done + last.overflow == last.total)
    });
    assert!(ok, "mirror copies never drained: {last:?}");
    last
}

/// What one pipelined load saw.
struct Load {
    /// Replies that were not the expected one.
    errors: usize,
    /// The first few of them.
    samples: Vec<String>,
    /// Latency of each pipelined batch (send to last reply).
    batches: Vec<Duration>,
    elapsed: Duration,
}

impl Load {
    fn p(&self, q: f64) -> Duration {
        let mut b = self.batches.clone();
        b.sort();
        b[((b.len() - 1) as f64 * q) as usize]
    }
}

/// `n` pipelined `SET <prefix>:<i> v<i>` in batches of `batch` on one connection to `addr`;
/// every reply must be `+OK`.
fn set_load(addr: &str, prefix: &str, n: usize, batch: usize) -> Load {
    let mut c = RawClient::connect(addr);
    let mut load = Load {
        errors: 0,
        samples: Vec::new(),
        batches: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let cmds: Vec<Vec<Vec<u8>>> = (i..end)
            .map(|j| {
                vec![
                    b"SET".to_vec(),
                    format!("{prefix}:{j}").into_bytes(),
                    format!("v{j}").into_bytes(),
                ]
            })
            .collect();
        let t = Instant::now();
        let replies = c.pipeline(&cmds);
        load.batches.push(t.elapsed());
        for r in replies {
            if r != OK {
                load.errors += 1;
                if load.samples.len() < 5 {
                    load.samples.push(show(&r));
                }
            }
        }
        i = end;
    }
    load.elapsed = start.elapsed();
    load
}

/// SETs through `main` until one of them is seen on the mirror (mirroring works again); returns
/// how long that took. Panics after `timeout`.
fn mirroring_resumes(r: &Respite, mirror: &RedisServer, timeout: Duration) -> Duration {
    let start = Instant::now();
    let mut c = r.raw();
    let mut direct = mirror.raw();
    let mut i = 0u64;
    let ok = wait_until(timeout, || {
        i += 1;
        let k = format!("resume:{i}").into_bytes();
        assert_eq!(c.cmd(&[b"SET", &k, b"x"]), OK, "primary SET during resume");
        // The copy is fire-and-forget: give it a moment to land.
        wait_until(Duration::from_millis(200), || exists_on(&mut direct, &k))
    });
    assert!(
        ok,
        "mirroring did not resume within {timeout:?}; stats {:?}; log:\n{}",
        MirrorStats::read(r),
        r.log()
    );
    start.elapsed()
}

const LOAD_SETS: usize = 20_000;
const LOAD_BATCH: usize = 50;

/// Asserts the mirrored load had no error and a p99 close to the baseline's; prints both.
fn assert_unaffected(what: &str, baseline: &Load, mirrored: &Load, r: &Respite) {
    println!(
        "{what}: baseline (no mirror) p50 {:?} p99 {:?} total {:?}; with the mirror {what}: p50 \
         {:?} p99 {:?} total {:?} ({} SETs in batches of {LOAD_BATCH})",
        baseline.p(0.5),
        baseline.p(0.99),
        baseline.elapsed,
        mirrored.p(0.5),
        mirrored.p(0.99),
        mirrored.elapsed,
        LOAD_SETS,
    );
    assert_eq!(
        baseline.errors, 0,
        "baseline errors: {:?}",
        baseline.samples
    );
    assert_eq!(
        mirrored.errors, 0,
        "primary path errors with the mirror {what}: {:?}",
        mirrored.samples
    );
    assert_eq!(r.stat("redis.main.command.set.error"), 0);
    // Generous (2 shared, noisy cores): a primary path that waited on the mirror would wait for
    // op_timeout (1 s) or stall outright.
    let bound = baseline.p(0.99) * 5 + Duration::from_millis(100);
    assert!(
        mirrored.p(0.99) <= bound,
        "primary p99 {:?} with the mirror {what} > bound {bound:?} (baseline p99 {:?})",
        mirrored.p(0.99),
        baseline.p(0.99)
    );
    assert!(
        mirrored.elapsed <= baseline.elapsed * 5 + Duration::from_millis(500),
        "the load took {:?} with the mirror {what}, {:?} without",
        mirrored.elapsed,
        baseline.elapsed
    );
}

/// A SIGSTOPped mirror: the primary path has no error and a normal p99, in-flight copies stop at
/// the bound and the rest overflow; after SIGCONT new writes are mirrored again.
#[test]
fn stopped_mirror_never_slows_or_fails_the_primary() {
    let primary = RedisServer::start();
    let mirror = RedisServer::start();
    let p = Ports::new();
    let spec = MirrorSpec {
        max_pending: SMALL_BOUND,
        ..MirrorSpec::default()
    };
    let r = start(p, &primary, &mirror, &spec);

    // Warm both paths (upstream connections open), then the baseline on `plain`.
    assert_eq!(r.raw().cmd(&[b"SET", b"warm", b"1"]), OK);
    mirroring_resumes(&r, &mirror, Duration::from_secs(5));
    let plain = format!("127.0.0.1:{}", p.plain);
    let baseline = set_load(&plain, "base", LOAD_SETS, LOAD_BATCH);
    let before = drained(&r);

    let stopped = Stopped::new(mirror.pid());
    let mut peak_active = 0;
    let loaded = {
        let addr = r.addr();
        let h = std::thread::spawn(move || set_load(&addr, "stop", LOAD_SETS, LOAD_BATCH));
        while !h.is_finished() {
            peak_active = peak_active.max(MirrorStats::read(&r).active);
            std::thread::sleep(Duration::from_millis(20));
        }
        h.join().expect("load thread")
    };
    let during = MirrorStats::read(&r).minus(before);
    peak_active = peak_active.max(during.active);
    println!("stopped mirror: stats delta {during:?}, peak active {peak_active}");
    assert_unaffected("stopped", &baseline, &loaded, &r);
    assert!(
        during.overflow > 0,
        "a stopped mirror with max_pending_requests {SMALL_BOUND} never overflowed: {during:?}"
    );
    // One client connection = one worker; the bound is per worker.
    assert!(
        peak_active <= (SMALL_BOUND * 2) as i64,
        "{peak_active} copies in flight, bound {SMALL_BOUND} per worker"
    );
    assert!(
        during.total + during.overflow >= LOAD_SETS as i64,
        "every SET is either handed to the mirror or counted as overflow: {during:?}"
    );
    // The primary has every write.
    let mut direct = primary.raw();
    for i in (0..LOAD_SETS).step_by(997) {
        let k = format!("stop:{i}");
        assert_eq!(
            direct.cmd(&[b"GET", k.as_bytes()]),
            bulk(format!("v{i}").as_bytes())
        );
    }

    drop(stopped);
    let took = mirroring_resumes(&r, &mirror, Duration::from_secs(15));
    println!("mirroring resumed {took:?} after SIGCONT");
    let after = drained(&r);
    println!("after SIGCONT: {after:?}");
}

/// A killed mirror: the primary path has no error and a normal p99, the copies are counted as
/// `mirror_rq_error` (or overflow); after a restart on the same port new writes are mirrored.
#[test]
fn killed_mirror_never_slows_or_fails_the_primary() {
    let primary = RedisServer::start();
    let mut mirror = RedisServer::start();
    let p = Ports::new();
    let r = start(p, &primary, &mirror, &MirrorSpec::default());

    assert_eq!(r.raw().cmd(&[b"SET", b"warm", b"1"]), OK);
    mirroring_resumes(&r, &mirror, Duration::from_secs(5));
    let baseline = set_load(
        &format!("127.0.0.1:{}", p.plain),
        "base",
        LOAD_SETS,
        LOAD_BATCH,
    );
    let before = drained(&r);

    mirror.kill();
    let loaded = set_load(&r.addr(), "kill", LOAD_SETS, LOAD_BATCH);
    // Give the last copies time to fail (connect refused, op_timeout at worst).
    let during = drained(&r).minus(before);
    println!("killed mirror: stats delta {during:?}");
    assert_unaffected("killed", &baseline, &loaded, &r);
    assert!(
        during.error > 0,
        "copies to a killed mirror were not counted as mirror_rq_error: {during:?}"
    );
    assert_eq!(
        during.success, 0,
        "copies to a killed mirror counted as success: {during:?}"
    );
    assert!(
        during.total + during.overflow >= LOAD_SETS as i64,
        "every SET is either handed to the mirror or counted as overflow: {during:?}"
    );

    mirror.restart();
    let took = mirroring_resumes(&r, &mirror, Duration::from_secs(20));
    println!("mirroring resumed {took:?} after the mirror restarted");
}

/// Runs `per_client` groups of commands from `clients` connections in parallel, each pipelined
/// in batches; panics if a reply is an error. Group `g` of client `c` is `make(c, g)`.
fn pipelined_clients(
    addr: &str,
    clients: usize,
    per_client: usize,
    make: fn(usize, usize) -> Vec<Vec<Vec<u8>>>,
) -> usize {
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let addr = addr.to_string();
            std::thread::spawn(move || {
                let mut conn = RawClient::connect(&addr);
                let mut sent = 0;
                for chunk in (0..per_client).collect::<Vec<_>>().chunks(100) {
                    let cmds: Vec<Vec<Vec<u8>>> = chunk.iter().flat_map(|&g| make(c, g)).collect();
                    sent += cmds.len();
                    for (cmd, reply) in cmds.iter().zip(conn.pipeline(&cmds)) {
                        assert!(
                            !reply.starts_with(b"-"),
                            "{} answered {}",
                            show(&cmd.concat()),
                            show(&reply)
                        );
                    }
                }
                sent
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .sum()
}

fn order_group(c: usize, g: usize) -> Vec<Vec<Vec<u8>>> {
    let k = format!("ord:{c}:{g}");
    let k = k.as_bytes();
    match g % 3 {
        0 => vec![cmd(&[b"SET", k, b"v"]), cmd(&[b"EXPIRE", k, b"100"])],
        1 => vec![
            cmd(&[b"SET", k, b"a"]),
            cmd(&[b"DEL", k]),
            cmd(&[b"SET", k, b"b"]),
        ],
        _ => vec![
            cmd(&[b"DEL", k]),
            cmd(&[b"RPUSH", k, b"1"]),
            cmd(&[b"RPUSH", k, b"2"]),
            cmd(&[b"RPUSH", k, b"3"]),
        ],
    }
}

/// Pipelined `SET k v` + `EXPIRE k 100`, `SET a` / `DEL` / `SET b`, `DEL` + three `RPUSH`es from
/// four clients: on the mirror every key has its TTL, its final value, its list in order.
#[test]
fn mirror_keeps_each_clients_order() {
    let primary = RedisServer::start();
    let mirror = RedisServer::start();
    let p = Ports::new();
    // Two connections per mirror host: a client's copies must still stay on one of them.
    let spec = MirrorSpec {
        connections: 2,
        ..MirrorSpec::default()
    };
    let r = start(p, &primary, &mirror, &spec);
    const CLIENTS: usize = 4;
    const GROUPS: usize = 1500;
    let sent = pipelined_clients(&r.addr(), CLIENTS, GROUPS, order_group);
    let s = drained(&r);
    println!("order: {sent} commands sent, mirror stats {s:?}");
    assert_eq!(s.total, sent as i64, "every write is mirrored once: {s:?}");
    assert_eq!(s.success, sent as i64, "{s:?}");
    assert_eq!((s.error, s.overflow), (0, 0), "{s:?}");

    let mut bad = Vec::new();
    for (name, server) in [("primary", &primary), ("mirror", &mirror)] {
        let mut d = server.raw();
        for c in 0..CLIENTS {
            for g in 0..GROUPS {
                let k = format!("ord:{c}:{g}");
                let k = k.as_bytes();
                let ok = match g % 3 {
                    0 => {
                        let ttl = String::from_utf8_lossy(&d.cmd(&[b"TTL", k])).to_string();
                        let ttl: i64 = ttl.trim_start_matches(':').trim().parse().unwrap_or(-9);
                        (90..=100).contains(&ttl) && d.cmd(&[b"GET", k]) == bulk(b"v")
                    }
                    1 => d.cmd(&[b"GET", k]) == bulk(b"b"),
                    _ => {
                        d.cmd(&[b"LRANGE", k, b"0", b"-1"])
                            == b"*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
                    }
                };
                if !ok {
                    bad.push(format!("{name}: {}", show(k)));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} keys out of order, e.g. {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

fn incr_group(c: usize, g: usize) -> Vec<Vec<Vec<u8>>> {
    vec![cmd(&[b"INCR", format!("once:{c}:{g}").as_bytes()])]
}

/// `calls` of `cmd` in a server's INFO commandstats.
fn calls(server: &RedisServer, cmd: &str) -> u64 {
    commandstats(server).get(cmd).copied().unwrap_or(0)
}

/// INCR of N distinct keys, once each: every key is 1 on the primary and on the mirror, and each
/// of them ran exactly N INCRs.
#[test]
fn mirror_runs_each_write_exactly_once() {
    let primary = RedisServer::start();
    let mirror = RedisServer::start();
    let p = Ports::new();
    let r = start(p, &primary, &mirror, &MirrorSpec::default());
    const CLIENTS: usize = 2;
    const KEYS: usize = 5000;
    let sent = pipelined_clients(&r.addr(), CLIENTS, KEYS, incr_group);
    assert_eq!(sent, CLIENTS * KEYS);
    let s = drained(&r);
    println!("exactly once: {sent} INCRs, mirror stats {s:?}");
    for (name, server) in [("primary", &primary), ("mirror", &mirror)] {
        assert_eq!(
            calls(server, "incr"),
            sent as u64,
            "INCR calls on the {name}"
        );
        let mut d = server.raw();
        for c in 0..CLIENTS {
            for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
                let keys: Vec<String> = chunk.iter().map(|g| format!("once:{c}:{g}")).collect();
                let mut args: Vec<&[u8]> = vec![b"MGET"];
                args.extend(keys.iter().map(|k| k.as_bytes()));
                let reply = d.cmd(&args);
                let want: Vec<u8> = format!("*{}\r\n", keys.len())
                    .into_bytes()
                    .into_iter()
                    .chain(keys.iter().flat_map(|_| bulk(b"1")))
                    .collect();
                assert_eq!(
                    show(&reply),
                    show(&want),
                    "{name}: keys once:{c}:{}.. are not all 1",
                    chunk[0]
                );
            }
        }
    }
    assert_eq!((s.error, s.overflow), (0, 0), "{s:?}");
}

/// Keys `frac:<i>` the mirror holds, of `n`.
fn mirrored_keys(mirror: &RedisServer, n: usize) -> BTreeSet<usize> {
    let mut d = mirror.raw();
    (0..n)
        .filter(|i| exists_on(&mut d, format!("frac:{i}").as_bytes()))
        .collect()
}

/// `runtime_fraction = 25`: about a quarter of the keys are mirrored, the same ones on a second
/// run by a new process; reads are not mirrored (`exclude_read_commands`).
#[test]
fn runtime_fraction_mirrors_the_same_keys_every_run() {
    let primary = RedisServer::start();
    let mirror = RedisServer::start();
    let spec = MirrorSpec {
        fraction: 25.0,
        ..MirrorSpec::default()
    };
    const N: usize = 4000;
    let mut runs = Vec::new();
    for run in 0..2 {
        mirror.raw().cmd(&[b"FLUSHALL"]);
        let r = start(Ports::new(), &primary, &mirror, &spec);
        let mut c = r.raw();
        let sets: Vec<Vec<Vec<u8>>> = (0..N)
            .map(|i| cmd(&[b"SET", format!("frac:{i}").as_bytes(), b"x"]))
            .collect();
        assert!(pipelined(&mut c, &sets, 200).iter().all(|r| r == OK));
        let s = drained(&r);
        let keys = mirrored_keys(&mirror, N);
        let share = keys.len() as f64 * 100.0 / N as f64;
        println!(
            "run {run}: {} of {N} keys mirrored ({share:.1}%), {s:?}",
            keys.len()
        );
        assert_eq!(
            s.total,
            keys.len() as i64,
            "mirror_rq_total vs keys on the mirror"
        );
        assert!(
            (18.0..=32.0).contains(&share),
            "runtime_fraction 25: {share:.1}% of keys mirrored"
        );

        // Reads are never mirrored here.
        let gets_before = calls(&mirror, "get");
        let gets: Vec<Vec<Vec<u8>>> = (0..N)
            .map(|i| cmd(&[b"GET", format!("frac:{i}").as_bytes()]))
            .collect();
        assert!(
            pipelined(&mut c, &gets, 200)
                .iter()
                .all(|r| r == &bulk(b"x"))
        );
        let after = drained(&r);
        assert_eq!(after.total, s.total, "GETs were mirrored");
        assert_eq!(
            calls(&mirror, "get"),
            gets_before,
            "GETs reached the mirror"
        );
        runs.push(keys);
    }
    let diff: Vec<_> = runs[0].symmetric_difference(&runs[1]).take(10).collect();
    assert!(
        diff.is_empty(),
        "a second run mirrored different keys, e.g. {diff:?}"
    );
}

/// A committed transaction is copied to the mirror whole, as one MULTI … EXEC on the mirror (it
/// runs there as a transaction: one `exec` call, the values equal), one copy in the counters; a
/// discarded transaction (DISCARD, a queue-time error) and a read-only one (reads excluded) are
/// not copied at all.
#[test]
fn committed_transactions_are_mirrored_whole() {
    let (primary, mirror) = (RedisServer::start(), RedisServer::start());
    let r = start(Ports::new(), &primary, &mirror, &MirrorSpec::default());
    let mut c = r.raw();
    let before = MirrorStats::read(&r);
    let committed = [
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{tx}a", b"1"]),
        cmd(&[b"INCRBY", b"{tx}a", b"41"]),
        cmd(&[b"LPUSH", b"{tx}l", b"x", b"y"]),
        cmd(&[b"EXEC"]),
    ];
    let replies = pipelined(&mut c, &committed, 5);
    assert_eq!(
        replies.last().map(|r| show(r)),
        Some(show(b"*3\r\n+OK\r\n:42\r\n:2\r\n"))
    );
    let discarded = [
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{tx}gone", b"1"]),
        cmd(&[b"DISCARD"]),
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"{tx}gone", b"1"]),
        cmd(&[b"NOSUCHCOMMAND"]),
        cmd(&[b"EXEC"]),
        cmd(&[b"MULTI"]),
        cmd(&[b"GET", b"{tx}a"]),
        cmd(&[b"EXEC"]),
    ];
    let replies = pipelined(&mut c, &discarded, 10);
    assert_eq!(
        replies.last().map(|r| show(r)),
        Some(show(b"*1\r\n$2\r\n42\r\n"))
    );
    let after = drained(&r).minus(before);
    assert_eq!(
        (after.total, after.success, after.error),
        (1, 1, 0),
        "{after:?}"
    );
    let mut m = mirror.raw();
    assert_eq!(m.cmd(&[b"GET", b"{tx}a"]), bulk(b"42"));
    assert_eq!(m.cmd(&[b"LLEN", b"{tx}l"]), int(2));
    assert!(!exists_on(&mut m, b"{tx}gone"));
    assert_eq!(calls(&mirror, "exec"), 1);
    assert_eq!(calls(&mirror, "multi"), 1);
}

/// A committed transaction's copy keeps its place among the client's copies at the mirror:
/// `SET k a`, `MULTI`, `APPEND k b`, `EXEC`, `APPEND k c`, pipelined, leave `abc` on the mirror
/// as on the primary, first as it is, then with the mirror's shared connection backed up (the
/// mirror paused by `CLIENT PAUSE … WRITE` while another client's 200 copies fill the
/// connection's depth, so `SET k a`'s copy waits in Respite). The transaction's copy goes on a
/// connection of its own: sent at once, with the client's next requests let go at once, `APPEND
/// k c`'s copy overtook it even in the first round (the mirror held `acb`), and it could itself
/// overtake `SET k a`'s.
#[test]
fn a_mirrored_transaction_reaches_the_mirror_in_the_clients_order() {
    let (primary, mirror) = (RedisServer::start(), RedisServer::start());
    let r = start(Ports::new(), &primary, &mirror, &MirrorSpec::default());
    for (round, key) in [b"plain".as_slice(), b"paused"].into_iter().enumerate() {
        if round == 1 {
            let pause: &[&[u8]] = &[b"CLIENT", b"PAUSE", b"500", b"WRITE"];
            assert_eq!(mirror.raw().cmd(pause), OK);
            let fillers: Vec<Vec<Vec<u8>>> = (0..200)
                .map(|i| cmd(&[b"SET", format!("filler:{i}").as_bytes(), b"x"]))
                .collect();
            assert!(r.raw().pipeline(&fillers).iter().all(|reply| reply == OK));
        }
        let mut c = r.raw();
        let replies = c.pipeline(&[
            cmd(&[b"SET", key, b"a"]),
            cmd(&[b"MULTI"]),
            cmd(&[b"APPEND", key, b"b"]),
            cmd(&[b"EXEC"]),
            cmd(&[b"APPEND", key, b"c"]),
        ]);
        assert_eq!(replies.last().map(|r| show(r)), Some(show(b":3\r\n")));
        assert_eq!(primary.raw().cmd(&[b"GET", key]), bulk(b"abc"));
        let s = drained(&r);
        let held = mirror.raw().cmd(&[b"GET", key]);
        assert_eq!(
            show(&held),
            show(&bulk(b"abc")),
            "round {round}: the mirror's copies ran out of the client's order ({s:?})"
        );
    }
    let s = drained(&r);
    assert_eq!((s.error, s.overflow), (0, 0), "{s:?}");

    // A paused mirror holds the client's next request, never the transaction's own replies.
    let pause: &[&[u8]] = &[b"CLIENT", b"PAUSE", b"2000", b"ALL"];
    assert_eq!(mirror.raw().cmd(pause), OK);
    let mut c = r.raw();
    let t = Instant::now();
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"APPEND", b"late", b"x"]),
        cmd(&[b"EXEC"]),
    ]);
    let took = t.elapsed();
    assert_eq!(replies.last().map(|r| show(r)), Some(show(b"*1\r\n:1\r\n")));
    assert!(
        took < Duration::from_millis(500),
        "EXEC's reply waited {took:?} for the paused mirror"
    );
}

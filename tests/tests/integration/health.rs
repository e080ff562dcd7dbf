//! Health checking and outlier detection against real redis-servers: a hung backend
//! (SIGSTOP) found by active checks, with `fail_fast` and with `rehash`; draining with
//! `EXISTS drain-key`; outlier ejection of a killed backend and `max_ejection_percent`; a hung
//! Redis Cluster replica skipped by `prefer_replica` reads.
//!
//! Detection and recovery times are printed (`--nocapture`) for the note in docs/health.md.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::cluster::{cluster_config, key_slot};
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, RedisCluster, RedisServer, free_port};

const NO_HOST: &[u8] = b"-no upstream host\r\n";
/// The listener's op_timeout: a request to a hung host that nobody detected takes this long.
const OP_TIMEOUT: Duration = Duration::from_secs(1);
/// A "fast" answer: far under op_timeout (2 shared, noisy cores).
const FAST: Duration = Duration::from_millis(300);

/// Active check settings of these tests: interval 200ms, timeout 100ms, thresholds 2 and 2.
const INTERVAL: Duration = Duration::from_millis(200);
const CHECK_TIMEOUT: Duration = Duration::from_millis(100);
const UNHEALTHY_THRESHOLD: u32 = 2;
const HEALTHY_THRESHOLD: u32 = 2;

/// The `[[clusters.health_checks]]` table of these tests (`key`: EXISTS instead of PING).
fn health_check(key: Option<&str>) -> String {
    let key = key.map(|k| format!("key = \"{k}\"\n")).unwrap_or_default();
    format!(
        "[[clusters.health_checks]]\ninterval = \"200ms\"\ninterval_jitter = \"20ms\"\n\
         timeout = \"100ms\"\nunhealthy_threshold = {UNHEALTHY_THRESHOLD}\n\
         healthy_threshold = {HEALTHY_THRESHOLD}\nno_traffic_interval = \"200ms\"\n{key}"
    )
}

/// A one-listener, 2-worker config over `backends` with `cluster_lines` appended to the
/// cluster table (its keys, then any sub-tables).
fn config(backends: &[String], cluster_lines: &str) -> (String, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let mut cfg = simple_config(port, admin, backends, 2, "");
    cfg.push_str(cluster_lines);
    (cfg, port, admin)
}

/// Sends one command on a fresh-enough client; a client whose connection broke is replaced.
fn timed(client: &mut RawClient, addr: &str, args: &[&[u8]]) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    match client.try_cmd(args) {
        Ok(r) => (r, t.elapsed()),
        Err(e) => {
            *client = RawClient::connect(addr);
            (format!("-client error {e}\r\n").into_bytes(), t.elapsed())
        }
    }
}

/// How long one poll of [`until_fast`] waits for its reply: the resolution of the measured
/// detection times (a poll that reaches the hung host waits this long).
const POLL_WAIT: Duration = Duration::from_millis(100);

/// Sends `args` on a new connection and waits at most [`POLL_WAIT`] for the reply (`None`: no
/// reply that fast; the connection is dropped, and with it the late reply).
fn fast_reply(addr: &str, args: &[&[u8]]) -> Option<Vec<u8>> {
    let mut c = RawClient::try_connect(addr).ok()?;
    c.stream().set_read_timeout(Some(POLL_WAIT)).ok()?;
    c.try_cmd(args).ok()
}

/// Polls `args` (each time on a new connection, so a request stuck on a hung host does not
/// delay the next poll) until `want(reply)` holds for a reply that came within [`POLL_WAIT`];
/// returns how long after `since` that was. Panics after `limit`.
fn until_fast(
    addr: &str,
    args: &[&[u8]],
    since: Instant,
    limit: Duration,
    what: &str,
    want: impl Fn(&[u8]) -> bool,
) -> Duration {
    loop {
        let r = fast_reply(addr, args);
        if r.as_deref().is_some_and(&want) {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < limit,
            "{what}: not within {limit:?}; last reply {:?}",
            r.map(|r| show(&r))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Background GET/SET traffic on keys that stay healthy; counts requests and failures.
struct Traffic {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Traffic {
    fn start(addr: &str, keys: Vec<String>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let (s, d, addr) = (stop.clone(), done.clone(), addr.to_string());
        let thread = std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let mut errors = Vec::new();
            let mut n = 0usize;
            while !s.load(Ordering::Relaxed) {
                let k = keys[n % keys.len()].as_bytes();
                let v = format!("v{n}");
                let r = c.try_cmd(&[b"SET", k, v.as_bytes()]);
                match r {
                    Ok(r) if r == OK => {}
                    other => errors.push(format!("SET {}: {other:?}", show(k))),
                }
                n += 1;
                d.store(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            errors
        });
        Traffic {
            stop,
            done,
            thread: Some(thread),
        }
    }

    /// Stops the traffic; returns (requests, errors).
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self
            .thread
            .take()
            .map(|t| t.join().expect("traffic thread"))
            .unwrap_or_default();
        (self.done.load(Ordering::Relaxed), errors)
    }
}

/// 3 backends, one SIGSTOPped: its keys, the others' keys, and the health stats.
struct Setup {
    backends: Vec<RedisServer>,
    addrs: Vec<String>,
    placement: Placement,
    victim: usize,
    victim_key: String,
    other_keys: Vec<String>,
}

fn setup() -> Setup {
    let backends = servers(3);
    let addrs = addrs(&backends);
    let placement = Placement::new(&addrs);
    let victim = 1;
    let victim_key = placement.key_on(victim, "victim");
    let other_keys = vec![placement.key_on(0, "other"), placement.key_on(2, "other")];
    Setup {
        backends,
        addrs,
        placement,
        victim,
        victim_key,
        other_keys,
    }
}

fn sigstop_scenario(rehash: bool) {
    let s = setup();
    let mode = if rehash { "rehash" } else { "fail_fast" };
    let (cfg, port, admin) = config(
        &s.addrs,
        &format!("on_unhealthy = \"{mode}\"\n{}", health_check(None)),
    );
    let respite = Respite::start(&cfg, port, admin);
    let addr = respite.addr();
    let vk = s.victim_key.as_bytes();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", vk, b"before"]), OK);
    let mut direct = s.backends[s.victim].raw();
    assert_eq!(direct.cmd(&[b"GET", vk]), bulk(b"before"));
    assert!(
        wait_until(Duration::from_secs(5), || respite
            .stat("cluster.cache.health_check.healthy")
            == 3),
        "3 healthy hosts at start: {:?}",
        respite.stats()
    );

    let traffic = Traffic::start(&addr, s.other_keys.clone());
    let stopped = Stopped::new(s.backends[s.victim].pid());
    let t0 = Instant::now();
    let detected = if rehash {
        until_fast(
            &addr,
            &[b"SET", vk, b"moved"],
            t0,
            Duration::from_secs(5),
            "rehash",
            |r| r == OK,
        )
    } else {
        until_fast(
            &addr,
            &[b"GET", vk],
            t0,
            Duration::from_secs(5),
            "fail fast",
            |r| r == NO_HOST,
        )
    };
    let bound = INTERVAL * UNHEALTHY_THRESHOLD + CHECK_TIMEOUT;
    println!(
        "{mode}: SIGSTOP detected after {detected:?} (interval x unhealthy_threshold + timeout = \
         {bound:?}; op_timeout {OP_TIMEOUT:?})"
    );
    assert!(
        detected < bound + Duration::from_millis(1500),
        "detection took {detected:?}"
    );
    assert_eq!(respite.stat("cluster.cache.health_check.healthy"), 2);
    assert_eq!(respite.stat("cluster.cache.membership_healthy"), 2);
    assert!(respite.stat("cluster.cache.health_check.network_failure") >= 2);
    // Steady state while it is down: every request for its key answers fast.
    for _ in 0..20 {
        let (r, took) = timed(&mut c, &addr, &[b"GET", vk]);
        assert!(
            took < FAST,
            "{mode}: a request for the hung host's key took {took:?}"
        );
        if rehash {
            assert_eq!(r, bulk(b"moved"), "rehash: served by another host");
        } else {
            assert_eq!(r, NO_HOST);
        }
    }
    if rehash {
        let holders: Vec<usize> = (0..3)
            .filter(|&i| i != s.victim)
            .filter(|&i| exists_on(&mut s.backends[i].raw(), vk))
            .collect();
        assert_eq!(holders.len(), 1, "the moved key lives on one other host");
        assert_ne!(
            s.placement.owner(vk),
            holders[0],
            "placement says the victim owns it"
        );
    }

    drop(stopped);
    let t1 = Instant::now();
    let value: &[u8] = if rehash { b"back" } else { b"before" };
    let recovered = if rehash {
        // Writes go back to the victim once it is healthy: SET and look there directly.
        let mut direct = s.backends[s.victim].raw();
        loop {
            let (r, _) = timed(&mut c, &addr, &[b"SET", vk, value]);
            if r == OK && direct.cmd(&[b"GET", vk]) == bulk(value) {
                break t1.elapsed();
            }
            assert!(
                t1.elapsed() < Duration::from_secs(5),
                "rehash: no way back: {}",
                show(&r)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    } else {
        until_fast(
            &addr,
            &[b"GET", vk],
            t1,
            Duration::from_secs(5),
            "recovery",
            |r| r == bulk(b"before"),
        )
    };
    let bound = INTERVAL * HEALTHY_THRESHOLD;
    println!(
        "{mode}: SIGCONT, serving again after {recovered:?} (interval x healthy_threshold = {bound:?})"
    );
    assert!(
        recovered < bound + Duration::from_millis(2500),
        "recovery took {recovered:?}"
    );
    assert!(wait_until(Duration::from_secs(2), || respite
        .stat("cluster.cache.membership_healthy")
        == 3));

    let (n, errors) = traffic.finish();
    println!(
        "{mode}: {n} requests for other hosts' keys during the test, {} failed",
        errors.len()
    );
    assert!(n > 50, "traffic ran: {n}");
    assert!(errors.is_empty(), "other keys were affected: {errors:?}");
    assert!(
        respite.log().contains("host unhealthy"),
        "transition logged"
    );
}

/// `fail_fast`: a SIGSTOPped backend is found by the active check; its keys then get `-no
/// upstream host` at once (not after op_timeout), other keys keep working, and it serves again
/// after `healthy_threshold` passing checks once SIGCONTed.
#[test]
fn sigstop_fail_fast() {
    sigstop_scenario(false);
}

/// `rehash`: the hung backend's keys go to another backend while it is unhealthy, and back to
/// it after SIGCONT.
#[test]
fn sigstop_rehash() {
    sigstop_scenario(true);
}

/// `EXISTS drain-key`: setting the key directly on a backend drains it (its keys fail fast);
/// deleting it restores it.
#[test]
fn exists_drain_key() {
    let s = setup();
    let (cfg, port, admin) = config(&s.addrs, &health_check(Some("drain-key")));
    let respite = Respite::start(&cfg, port, admin);
    let addr = respite.addr();
    let vk = s.victim_key.as_bytes();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", vk, b"v"]), OK);
    let mut direct = s.backends[s.victim].raw();
    assert_eq!(direct.cmd(&[b"SET", b"drain-key", b"1"]), OK);
    let t0 = Instant::now();
    let drained = until_fast(
        &addr,
        &[b"GET", vk],
        t0,
        Duration::from_secs(5),
        "drain",
        |r| r == NO_HOST,
    );
    for k in &s.other_keys {
        assert_eq!(
            c.cmd(&[b"SET", k.as_bytes(), b"x"]),
            OK,
            "other hosts still serve"
        );
    }
    assert_eq!(direct.cmd(&[b"DEL", b"drain-key"]), int(1));
    let t1 = Instant::now();
    let restored = until_fast(
        &addr,
        &[b"GET", vk],
        t1,
        Duration::from_secs(5),
        "restore",
        |r| r == bulk(b"v"),
    );
    println!("EXISTS drain-key: drained after {drained:?}, restored after {restored:?}");
    // The key check fails on `:1` (an answer, not a network failure).
    assert!(respite.stat("cluster.cache.health_check.failure") >= 2);
    assert_eq!(
        respite.stat("cluster.cache.health_check.network_failure"),
        0
    );
}

/// Outlier detection without active checks, `rehash`: a SIGKILLed backend is ejected after
/// `consecutive_5xx` failures and its keys move; after a restart and `base_ejection_time` it is
/// un-ejected and its keys go back.
#[test]
fn outlier_ejects_killed_backend() {
    let mut s = setup();
    let (cfg, port, admin) = config(
        &s.addrs,
        "on_unhealthy = \"rehash\"\n[clusters.outlier_detection]\nconsecutive_5xx = 3\n\
         base_ejection_time = \"1s\"\nmax_ejection_time = \"10s\"\nmax_ejection_percent = 100\n\
         interval = \"1s\"\n",
    );
    let respite = Respite::start(&cfg, port, admin);
    let addr = respite.addr();
    let vk = s.victim_key.as_bytes();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", vk, b"before"]), OK);
    let traffic = Traffic::start(&addr, s.other_keys.clone());

    s.backends[s.victim].kill();
    let t0 = Instant::now();
    let moved = until_fast(
        &addr,
        &[b"SET", vk, b"moved"],
        t0,
        Duration::from_secs(10),
        "eject",
        |r| r == OK,
    );
    println!("outlier: killed backend ejected and its key served elsewhere after {moved:?}");
    assert_eq!(
        respite.stat("cluster.cache.outlier_detection.ejections_active"),
        1
    );
    assert!(respite.stat("cluster.cache.outlier_detection.ejections_enforced_total") >= 1);
    assert!(
        respite.stat("cluster.cache.outlier_detection.ejections_enforced_consecutive_5xx") >= 1
    );
    assert_eq!(respite.stat("cluster.cache.membership_healthy"), 2);
    assert!(respite.log().contains("host ejected"));

    s.backends[s.victim].restart();
    let t1 = Instant::now();
    assert!(
        wait_until(Duration::from_secs(15), || respite
            .stat("cluster.cache.outlier_detection.ejections_active")
            == 0),
        "un-ejected after base_ejection_time: {:?}",
        respite.stats()
    );
    let unejected = t1.elapsed();
    let mut direct = s.backends[s.victim].raw();
    loop {
        let (r, _) = timed(&mut c, &addr, &[b"SET", vk, b"home"]);
        if r == OK && direct.cmd(&[b"GET", vk]) == bulk(b"home") {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "the key did not go home: {}",
            show(&r)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "outlier: restarted backend un-ejected after {unejected:?}, its key home after {:?}",
        t1.elapsed()
    );
    let (n, errors) = traffic.finish();
    assert!(n > 50);
    assert!(errors.is_empty(), "other keys were affected: {errors:?}");
}

/// `max_ejection_percent = 34` of 3 hosts: killing two backends ejects only one; the other
/// request counts as `ejections_overflow`.
#[test]
fn max_ejection_percent_caps_ejections() {
    let mut s = setup();
    let (cfg, port, admin) = config(
        &s.addrs,
        "[clusters.outlier_detection]\nconsecutive_5xx = 2\nbase_ejection_time = \"30s\"\n\
         max_ejection_percent = 34\ninterval = \"1s\"\n",
    );
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    for k in s.other_keys.iter().chain([&s.victim_key]) {
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), b"v"]), OK);
    }
    s.backends[0].kill();
    s.backends[1].kill();
    // Reconnect attempts fail on their own (no traffic needed); keep some anyway.
    let overflowed = wait_until(Duration::from_secs(10), || {
        for k in s.other_keys.iter().chain([&s.victim_key]) {
            let _ = c.try_cmd(&[b"GET", k.as_bytes()]);
        }
        respite.stat("cluster.cache.outlier_detection.ejections_overflow") > 0
    });
    let stats = respite.stats();
    assert!(overflowed, "no overflow: {stats:?}");
    assert_eq!(
        stats.get("cluster.cache.outlier_detection.ejections_active"),
        Some(&1),
        "{stats:?}"
    );
    assert_eq!(stats.get("cluster.cache.membership_healthy"), Some(&2));
    // The live backend still serves.
    assert_eq!(c.cmd(&[b"GET", s.other_keys[1].as_bytes()]), bulk(b"v"));
}

/// Redis Cluster, `read_policy = "prefer_replica"` with a health check: a SIGSTOPped replica
/// is skipped, so reads of its shard are served by the primary quickly (not after op_timeout),
/// and the degraded host triggered a topology refresh.
#[test]
fn cluster_prefer_replica_skips_hung_replica() {
    // The cluster's own failure detection (cluster-node-timeout) must not be what saves the
    // reads: make it slower than the health check by far.
    let mut cluster = RedisCluster::start_with(&["--cluster-node-timeout", "10000"]);
    let (port, admin) = (free_port(), free_port());
    let mut cfg = cluster_config(port, admin, &cluster.seeds(), "prefer_replica", "");
    cfg.push_str(&health_check(None));
    let respite = Respite::start(&cfg, port, admin);
    let addr = respite.addr();
    let owners = cluster.slot_owners();
    let primary = owners[0].clone();
    let replica = cluster.replicas_of(&primary)[0].clone();
    let key = (0..100_000)
        .map(|i| format!("hc-{i}"))
        .find(|k| owners[key_slot(k.as_bytes()) as usize] == primary)
        .expect("a key of the shard");
    let kb = key.as_bytes();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", kb, b"v"]), OK);
    // The replica has it and serves the reads.
    assert!(wait_until(Duration::from_secs(5), || {
        let r = c.cmd(&[b"GET", kb]);
        r == bulk(b"v")
    }));
    assert!(
        wait_until(Duration::from_secs(5), || respite
            .stat("cluster.rc.health_check.healthy")
            == 6),
        "6 nodes checked: {:?}",
        respite.stats()
    );
    let degraded_before = respite.stat("cluster.rc.redis_cluster.refresh_host_degraded");

    cluster.sigstop(&replica);
    let t0 = Instant::now();
    let served = until_fast(
        &addr,
        &[b"GET", kb],
        t0,
        Duration::from_secs(5),
        "primary",
        |r| r == bulk(b"v"),
    );
    // Once detected, every read is fast.
    let mut slowest = Duration::ZERO;
    for _ in 0..50 {
        let (r, took) = timed(&mut c, &addr, &[b"GET", kb]);
        assert_eq!(show(&r), show(&bulk(b"v")));
        slowest = slowest.max(took);
    }
    println!(
        "cluster: hung replica {replica} skipped after {served:?}; then 50 reads, slowest {slowest:?}"
    );
    assert!(slowest < FAST, "a read took {slowest:?}");
    assert!(
        wait_until(Duration::from_secs(3), || respite
            .stat("cluster.rc.redis_cluster.refresh_host_degraded")
            > degraded_before),
        "no degraded-host refresh: {:?}",
        respite.stats()
    );
    assert_eq!(respite.stat("cluster.rc.health_check.healthy"), 5);
    cluster.sigcont(&replica);
    assert!(
        wait_until(Duration::from_secs(5), || respite
            .stat("cluster.rc.health_check.healthy")
            == 6),
        "the replica comes back"
    );
}

/// Reload: an unchanged cluster keeps its hosts' health (a drained host stays drained across a
/// reload of something else); removing the checks makes the host healthy again; adding them
/// back finds it drained again.
#[test]
fn reload_keeps_or_clears_health() {
    let s = setup();
    let (port, admin) = (free_port(), free_port());
    let with = |op_timeout: &str, checks: bool| {
        let mut cfg = simple_config(port, admin, &s.addrs, 2, "").replace(
            "op_timeout = \"1s\"",
            &format!("op_timeout = \"{op_timeout}\""),
        );
        if checks {
            cfg.push_str(&health_check(Some("drain-key")));
        }
        cfg
    };
    let respite = Respite::start(&with("1s", true), port, admin);
    let addr = respite.addr();
    let vk = s.victim_key.as_bytes();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", vk, b"v"]), OK);
    assert_eq!(
        s.backends[s.victim]
            .raw()
            .cmd(&[b"SET", b"drain-key", b"1"]),
        OK
    );
    let t0 = Instant::now();
    until_fast(
        &addr,
        &[b"GET", vk],
        t0,
        Duration::from_secs(5),
        "drain",
        |r| r == NO_HOST,
    );

    let reloaded = |n: usize| {
        wait_until(Duration::from_secs(5), || {
            respite.log().matches("config reloaded").count() >= n
        })
    };
    // Another op_timeout: new pools, same cluster. The host is still drained at once.
    respite.reload(&with("2s", true));
    assert!(reloaded(1), "reload 1: {}", respite.log());
    for _ in 0..10 {
        assert_eq!(
            fast_reply(&addr, &[b"GET", vk]).map(|r| show(&r)),
            Some(show(NO_HOST)),
            "drained across an unrelated reload"
        );
    }
    // No checks any more: healthy again.
    respite.reload(&with("2s", false));
    assert!(reloaded(2), "reload 2: {}", respite.log());
    let t1 = Instant::now();
    let back = until_fast(
        &addr,
        &[b"GET", vk],
        t1,
        Duration::from_secs(5),
        "no checks",
        |r| r == bulk(b"v"),
    );
    // Checks again: drained again once they fail `unhealthy_threshold` times.
    respite.reload(&with("2s", true));
    assert!(reloaded(3), "reload 3: {}", respite.log());
    let t2 = Instant::now();
    let again = until_fast(
        &addr,
        &[b"GET", vk],
        t2,
        Duration::from_secs(5),
        "checks back",
        |r| r == NO_HOST,
    );
    println!(
        "reload: healthy {back:?} after the checks were removed, drained {again:?} after they came back"
    );
}

/// `no_traffic_interval`: while the cluster sends no requests, a healthy host is checked every
/// `no_traffic_interval` (60s here) instead of every `interval` (200ms); traffic brings the
/// short interval back.
#[test]
fn no_traffic_interval_applies_while_idle() {
    let s = setup();
    let check = health_check(None).replace(
        "no_traffic_interval = \"200ms\"",
        "no_traffic_interval = \"60s\"",
    );
    let (cfg, port, admin) = config(&s.addrs, &check);
    let respite = Respite::start(&cfg, port, admin);
    let attempts = || respite.stat("cluster.cache.health_check.attempt");
    std::thread::sleep(Duration::from_millis(500));
    let idle_start = attempts();
    std::thread::sleep(Duration::from_millis(1500));
    let idle = attempts() - idle_start;
    let traffic = Traffic::start(&respite.addr(), s.other_keys.clone());
    let busy_start = attempts();
    std::thread::sleep(Duration::from_millis(1500));
    let busy = attempts() - busy_start;
    let (n, errors) = traffic.finish();
    println!(
        "no_traffic_interval: {idle} checks of 3 hosts in 1.5s idle, {busy} with traffic ({n} requests)"
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        idle <= 3,
        "idle hosts are checked every no_traffic_interval: {idle}"
    );
    assert!(
        busy >= 3 * 4,
        "busy hosts are checked every interval: {busy}"
    );
}

/// The clients of a host that hangs stop sending (each waits for its reply until op_timeout),
/// so the cluster shows no new traffic; the host must still be checked every `interval` once a
/// check failed, not every `no_traffic_interval`. Regression: detection took op_timeout (5 s)
/// here, or never happened when the hang was shorter.
#[test]
fn hung_host_is_found_while_its_clients_are_stuck() {
    let s = setup();
    let (port, admin) = (free_port(), free_port());
    let mut cfg = simple_config(port, admin, &s.addrs, 2, "")
        .replace("op_timeout = \"1s\"", "op_timeout = \"5s\"");
    cfg.push_str(&health_check(None).replace(
        "no_traffic_interval = \"200ms\"",
        "no_traffic_interval = \"60s\"",
    ));
    let respite = Respite::start(&cfg, port, admin);
    let vk = s.victim_key.clone();
    let mut c = respite.raw();
    // Traffic only to the victim, then one client stuck on it.
    for _ in 0..100 {
        assert_eq!(c.cmd(&[b"GET", vk.as_bytes()]), NIL);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(respite.stat("cluster.cache.membership_healthy"), 3);
    let hung = Stopped::new(s.backends[s.victim].pid());
    let t0 = Instant::now();
    let addr = respite.addr();
    let stuck = std::thread::spawn(move || {
        let mut c = RawClient::connect(&addr);
        c.cmd(&[b"GET", vk.as_bytes()])
    });
    let found = wait_until(Duration::from_secs(4), || {
        respite.stat("cluster.cache.membership_healthy") == 2
    });
    let took = t0.elapsed();
    println!("hung host with stuck clients: unhealthy after {took:?}");
    assert!(
        found,
        "not detected within 4s (op_timeout 5s); log:\n{}",
        respite.log()
    );
    // Bound: unhealthy_threshold × (interval + jitter + timeout) = 640 ms, plus slack.
    assert!(
        took < Duration::from_millis(1500),
        "detected after {took:?}"
    );
    drop(hung);
    let _ = stuck.join();
}

/// Redis's `timeout` closes idle client connections: a close with nothing in flight is not a
/// failure of the host. Regression: each idle close counted towards `consecutive_5xx` and a
/// healthy, idle Redis got ejected.
#[test]
fn idle_close_by_redis_timeout_is_not_an_outlier_failure() {
    let backends = vec![
        RedisServer::start_with(&["--timeout", "1"]),
        RedisServer::start(),
    ];
    let addrs = addrs(&backends);
    let placement = Placement::new(&addrs);
    let key = placement.key_on(0, "idle");
    let (cfg, port, admin) = config(
        &addrs,
        "[clusters.outlier_detection]\nconsecutive_5xx = 1\nbase_ejection_time = \"30s\"\n\
         max_ejection_percent = 100\n",
    );
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"v"]), OK);
    let connections = |s: &RedisServer| -> u64 {
        let info = String::from_utf8_lossy(&s.raw().cmd(&[b"INFO", b"stats"])).to_string();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("total_connections_received")
    };
    let before = connections(&backends[0]);
    std::thread::sleep(Duration::from_millis(3500));
    // Redis did close the idle connections (they came back), so the case was exercised.
    let reconnects = connections(&backends[0]) - before - 1;
    assert!(
        reconnects >= 2,
        "Redis closed only {reconnects} idle connections"
    );
    assert_eq!(
        respite.stat("cluster.cache.outlier_detection.ejections_enforced_total"),
        0,
        "log:\n{}",
        respite.log()
    );
    for _ in 0..20 {
        assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"w"]), OK);
    }
    println!("idle closes by Redis: {reconnects} reconnects, 0 ejections");
}

/// A reload that only adds (or removes) health checks keeps the upstream connections: no
/// reconnect, no failed request. Regression: every connection was replaced, and with a
/// connection rate limit below the connection count keys failed for seconds.
#[test]
fn reload_of_health_settings_keeps_connections() {
    let s = setup();
    let (port, admin) = (free_port(), free_port());
    let base = simple_config(port, admin, &s.addrs, 2, "").replace(
        "connect_timeout = \"250ms\"",
        "connect_timeout = \"250ms\"\nconnection_rate_limit_per_sec = 1",
    );
    let respite = Respite::start(&base, port, admin);
    // 2 workers × 3 hosts; at 1 connection per second per host the second worker's connections
    // come up a second later.
    assert!(
        wait_until(Duration::from_secs(5), || {
            respite.stat("cluster.cache.upstream_cx_active") == 6
        }),
        "connections did not come up"
    );
    let keys: Vec<String> = (0..3).map(|b| s.placement.key_on(b, "keep")).collect();
    let traffic = Traffic::start(&respite.addr(), keys);
    std::thread::sleep(Duration::from_millis(300));
    let before = respite.stat("cluster.cache.upstream_cx_total");
    let mut with_checks = base.clone();
    with_checks.push_str(&health_check(None));
    with_checks.push_str("[clusters.outlier_detection]\nconsecutive_5xx = 3\n");
    respite.reload(&with_checks);
    std::thread::sleep(Duration::from_millis(700));
    respite.reload(&base);
    std::thread::sleep(Duration::from_millis(700));
    let (n, errors) = traffic.finish();
    let after = respite.stat("cluster.cache.upstream_cx_total");
    assert!(
        respite.log().matches("config reloaded").count() == 2,
        "both reloads applied; log:\n{}",
        respite.log()
    );
    assert_eq!(after, before, "upstream connections were replaced");
    assert!(
        errors.is_empty(),
        "{} of {n} failed: {errors:?}",
        errors.len()
    );
    println!("reload of health settings: {n} requests, 0 errors, no reconnect");
}

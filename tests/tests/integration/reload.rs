//! SIGHUP reload: a cluster's hosts change, a broken file is rejected, an unchanged cluster
//! keeps its upstream connections.

use crate::common;

use std::time::Duration;

use common::*;
use respite_tests::free_port;
use respite_tests::respite::{Respite, simple_config};

fn count(log: &str, what: &str) -> usize {
    log.matches(what).count()
}

/// Waits until respite has logged `what` `n` times.
fn wait_log(respite: &Respite, what: &str, n: usize) {
    let ok = wait_until(Duration::from_secs(5), || count(&respite.log(), what) >= n);
    assert!(
        ok,
        "respite did not log {what:?} {n} time(s); log:\n{}",
        respite.log()
    );
}

/// (Test 9) Reload with hosts A,B → A,B,C; a broken file keeps the previous config; a reload that
/// leaves the cluster unchanged opens no upstream connection.
#[test]
fn sighup_reload() {
    let backends = servers(3);
    let all = addrs(&backends);
    let two = all[..2].to_vec();
    let port = free_port();
    let admin = free_port();
    // One worker: which upstream connections exist is then deterministic.
    let respite = Respite::start(&simple_config(port, admin, &two, 1, ""), port, admin);
    let old = Placement::new(&two);
    let new = Placement::new(&all);
    let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("{i}:r").into_bytes()).collect();

    let mut c = respite.raw();
    for k in &keys {
        assert_eq!(c.cmd(&[b"SET", k, b"old"]), OK);
    }
    let mut direct: Vec<_> = backends.iter().map(|b| b.raw()).collect();
    for k in &keys {
        for (i, d) in direct.iter_mut().enumerate() {
            assert_eq!(
                exists_on(d, k),
                i == old.owner(k),
                "before reload: {}",
                show(k)
            );
        }
    }

    // A,B → A,B,C.
    respite.reload(&simple_config(port, admin, &all, 1, ""));
    wait_log(&respite, "config reloaded", 1);
    // A key ketama over A,B,C puts on C.
    let probe = (0..100_000)
        .map(|i| format!("moves:{i}").into_bytes())
        .find(|k| new.owner(k) == 2)
        .expect("no key maps to C");
    let probe = &probe;
    let ok = wait_until(Duration::from_secs(5), || {
        let mut c = respite.raw();
        assert_eq!(c.cmd(&[b"SET", probe, b"new"]), OK);
        exists_on(&mut direct[2], probe)
    });
    assert!(
        ok,
        "{} (ketama over A,B,C says C) never reached C",
        show(probe)
    );
    for d in direct.iter_mut() {
        d.cmd(&[b"FLUSHALL"]);
    }
    let mut c = respite.raw();
    for k in &keys {
        assert_eq!(c.cmd(&[b"SET", k, b"new"]), OK);
    }
    for k in &keys {
        for (i, d) in direct.iter_mut().enumerate() {
            assert_eq!(
                exists_on(d, k),
                i == new.owner(k),
                "after reload: {}",
                show(k)
            );
        }
    }

    // A broken file: rejected, logged, the A,B,C config keeps serving.
    respite.reload("[[listeners]]\nname = \"main\"\nbogus_key = 1\n");
    wait_log(&respite, "config reload rejected", 1);
    assert!(
        respite.log().contains("bogus_key"),
        "log:\n{}",
        respite.log()
    );
    for d in direct.iter_mut() {
        d.cmd(&[b"FLUSHALL"]);
    }
    let mut c = respite.raw();
    for k in &keys {
        assert_eq!(c.cmd(&[b"SET", k, b"still"]), OK);
        assert_eq!(c.cmd(&[b"GET", k]), bulk(b"still"));
    }
    for k in &keys {
        for (i, d) in direct.iter_mut().enumerate() {
            assert_eq!(
                exists_on(d, k),
                i == new.owner(k),
                "after rejected reload: {}",
                show(k)
            );
        }
    }

    // Unchanged cluster, a second listener added: no new upstream connection.
    let cx_before = respite.stat("cluster.cache.upstream_cx_total");
    assert!(
        cx_before >= 3,
        "upstream_cx_total {cx_before} with 3 hosts in use"
    );
    let port2 = free_port();
    let cfg = simple_config(port, admin, &all, 1, "")
        + &format!(
            "[[listeners]]\nname = \"second\"\naddress = \"127.0.0.1:{port2}\"\n\
             stat_prefix = \"second\"\nop_timeout = \"1s\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n"
        );
    respite.reload(&cfg);
    wait_log(&respite, "config reloaded", 2);
    assert!(
        wait_until(Duration::from_secs(5), || listening(port2)),
        "second listener"
    );
    for p in [port, port2] {
        let mut c = respite_tests::RawClient::connect(&format!("127.0.0.1:{p}"));
        for k in &keys {
            assert_eq!(c.cmd(&[b"GET", k]), bulk(b"still"), "via port {p}");
        }
    }
    assert_eq!(
        respite.stat("redis.second.command.get.total"),
        keys.len() as i64
    );
    assert_eq!(
        respite.stat("cluster.cache.upstream_cx_total"),
        cx_before,
        "an unchanged cluster reconnected on reload"
    );
}

/// Runs prlimit(1) on `pid`: `nofile` is `soft:hard`.
fn set_nofile(pid: u32, nofile: &str) {
    let ok = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={nofile}"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "prlimit --pid={pid} --nofile={nofile} failed");
}

/// A reload whose connections outgrow the bounds is rejected with its reason, and the running
/// config keeps serving without growing: `connections_per_host = 1000000` (past its ceiling of
/// 256; it once took the process to gigabytes and the OOM killer), and 100 connections per host
/// under a hard RLIMIT_NOFILE too small for them. In between, 64 per host under a soft limit too
/// small but a hard one large enough: applied, the soft limit raised to the hard one.
#[test]
fn sighup_reload_refuses_connections_past_the_bounds() {
    let backends = servers(2);
    let hosts = addrs(&backends);
    let port = free_port();
    let admin = free_port();
    let base = simple_config(port, admin, &hosts, 2, "");
    let respite = Respite::start(&base, port, admin);
    let pid = respite.pid();
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"bounds", b"v1"]), OK);
    let cx = |r: &Respite| r.stat("cluster.cache.upstream_cx_total");
    let cx_before = cx(&respite);
    let rss_before = rss_kib(pid);

    let huge = format!("{base}connections_per_host = 1000000\n");
    let line = base.lines().count() + 1;
    respite.reload(&huge);
    wait_log(&respite, "config reload rejected", 1);
    let want = format!(
        "respite.toml:{line}:24: clusters[0].connections_per_host: 1000000 is too many: must be \
         between 1 and 256"
    );
    assert!(respite.log().contains(&want), "log:\n{}", respite.log());
    std::thread::sleep(Duration::from_millis(300));
    let rss_after = rss_kib(pid);
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS went from {rss_before} KiB to {rss_after} KiB on a rejected reload"
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"bounds"]), bulk(b"v1"));
    assert_eq!(c.cmd(&[b"SET", b"bounds", b"v2"]), OK);
    assert_eq!(
        cx(&respite),
        cx_before,
        "a rejected reload opened connections"
    );

    // 64 per host: 2 workers × (4 + 1 listener + 2 hosts × (64 × 2 + 32 leased) + 2
    // subscribers) + 64 = 718 descriptors. Under a soft limit of 700 (which leaves the config
    // 525) and the hard limit respite was started with, it is applied, the soft limit raised.
    let (_, hard) = nofile_limits(pid);
    assert!(
        hard >= 958,
        "the hard limit {hard} cannot hold the 718 of this test"
    );
    let more = format!("{base}connections_per_host = 64\n");
    set_nofile(pid, &format!("700:{hard}"));
    respite.reload(&more);
    wait_log(&respite, "config reloaded", 1);
    assert!(
        respite
            .log()
            .contains("raised the soft RLIMIT_NOFILE to the hard limit"),
        "log:\n{}",
        respite.log()
    );
    assert_eq!(nofile_limits(pid), (hard, hard));
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"bounds"]), bulk(b"v2"));
    assert_eq!(c.cmd(&[b"SET", b"bounds", b"v3"]), OK);
    // Every worker opened its 64 connections to each host.
    let want = cx_before + 2 * 2 * 64;
    let ok = wait_until(Duration::from_secs(5), || cx(&respite) >= want);
    assert!(
        ok,
        "upstream_cx_total {} after the reload, want {want}",
        cx(&respite)
    );
    let cx_more = cx(&respite);

    // 100 per host needs 2 × (5 + 2 × (100 × 2 + 32) + 2) + 64 = 1006, more than three quarters
    // of a hard limit of 800 (lowering it needs no privilege; raising it back would).
    let most = format!("{base}connections_per_host = 100\n");
    set_nofile(pid, "700:800");
    respite.reload(&most);
    wait_log(&respite, "config reload rejected", 2);
    let log = respite.log();
    assert!(
        log.contains(&format!(
            "respite.toml:{line}:24: clusters[0].connections_per_host: the config can hold 1006 \
             file descriptors open on 2 worker(s)"
        )) && log.contains("the hard RLIMIT_NOFILE is 800"),
        "log:\n{log}"
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"GET", b"bounds"]), bulk(b"v3"));
    assert_eq!(
        cx(&respite),
        cx_more,
        "a rejected reload opened connections"
    );
}

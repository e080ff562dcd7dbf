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

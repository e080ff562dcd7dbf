//! Behaviours found wrong by trying Respite as a new user would; each test holds the right value
//! for the whole class.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Placement, addrs, bulk, servers, wait_until};
use respite_tests::respite::simple_config;
use respite_tests::{RawClient, Respite, free_port};

const OK: &[u8] = b"+OK\r\n";
/// Redis 7.0's reply to wrong credentials.
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

/// A reload that replaces a cluster's pool (here: a changed connect_timeout) must not fail the
/// requests already in flight on the old pool: they finish there, then it closes.
#[test]
fn reload_of_a_changed_cluster_fails_no_request_in_flight() {
    let backends = servers(3);
    let hosts = addrs(&backends);
    let (port, admin) = (free_port(), free_port());
    let base = simple_config(port, admin, &hosts, 1, "");
    let respite = Respite::start(&base, port, admin);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for t in 0..8 {
        let (stop, errors, done, addr) =
            (stop.clone(), errors.clone(), done.clone(), respite.addr());
        clients.push(std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Deep pipelines keep requests in flight across each reload.
                let mut batch = Vec::new();
                for j in 0..64 {
                    let k = format!("{j}:reload:{t}:{i}");
                    batch.push(vec![b"SET".to_vec(), k.into_bytes(), b"v".to_vec()]);
                }
                for r in c.pipeline(&batch) {
                    if r != OK {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    let changed = base.replace("connect_timeout = \"250ms\"", "connect_timeout = \"300ms\"");
    assert_ne!(changed, base);
    for n in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        respite.reload(if n % 2 == 0 { &changed } else { &base });
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    assert!(
        respite.log().matches("config reloaded").count() >= 20,
        "{}",
        respite.log()
    );
    assert!(
        done.load(Ordering::Relaxed) > 1000,
        "load too small to mean anything"
    );
    assert_eq!(
        errors.load(Ordering::Relaxed),
        0,
        "requests failed across reloads"
    );
    // The replaced pools closed their connections once drained: one live set per host remains.
    assert!(
        wait_until(Duration::from_secs(5), || respite
            .stat("cluster.cache.upstream_cx_active")
            == 3),
        "upstream_cx_active {}",
        respite.stat("cluster.cache.upstream_cx_active")
    );
}

/// With `downstream_auth_username` set, a password alone authenticates Redis's `default` user,
/// which is not that user: refused, as Redis refuses it.
#[test]
fn auth_with_username_configured_needs_the_username() {
    let backends = servers(1);
    let respite = Respite::over_with(
        &addrs(&backends),
        1,
        "downstream_auth_passwords = [\"pw\"]\ndownstream_auth_username = \"app\"",
    );
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"AUTH", b"pw"]), WRONGPASS);
    assert_eq!(
        c.cmd(&[b"GET", b"k"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.cmd(&[b"AUTH", b"default", b"pw"]), WRONGPASS);
    assert_eq!(c.cmd(&[b"AUTH", b"app", b"pw"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), b"$-1\r\n");
}

/// Integer arguments are read with Redis's strict rules.
#[test]
fn select_reads_integers_strictly() {
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let mut direct = backends[0].raw();
    for arg in [&b"0"[..], b"00", b"-0", b"+0", b"x"] {
        let got = c.cmd(&[b"SELECT", arg]);
        if arg == b"0" {
            assert_eq!(got, OK);
        } else {
            assert_eq!(got, direct.cmd(&[b"SELECT", arg]), "SELECT {arg:?}");
        }
    }
}

/// A split command whose parts failed counts as an error in `command.<cmd>.error`, even when
/// the merged reply is an array with the errors inline (MGET).
#[test]
fn split_command_with_failed_parts_counts_as_error() {
    let mut backends = servers(2);
    let hosts = addrs(&backends);
    let respite = Respite::over(&hosts, 1);
    let placement = Placement::new(&hosts);
    // One key on each backend, chosen by the placement respite uses.
    let key_on = |shard: usize| {
        (0..1000)
            .map(|i| format!("{i}:mget"))
            .find(|k| placement.owner(k.as_bytes()) == shard)
            .expect("a key for each shard")
    };
    let (k0, k1) = (key_on(0), key_on(1));
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[b"MSET", k0.as_bytes(), b"1", k1.as_bytes(), b"2"]),
        OK
    );
    let before = respite.stat("redis.main.command.mget.error");
    assert_eq!(
        c.cmd(&[b"MGET", k0.as_bytes(), k1.as_bytes()]),
        [&b"*2\r\n"[..], &bulk(b"1"), &bulk(b"2")].concat()
    );
    backends[1].kill();
    // Until the connection failure is seen the slot holds `upstream failure`, then `no upstream
    // host`: either way an error inline for the key of the dead backend.
    let reply = c.cmd(&[b"MGET", k0.as_bytes(), k1.as_bytes()]);
    let text = String::from_utf8_lossy(&reply).to_string();
    assert!(
        reply.starts_with(&[&b"*2\r\n"[..], &bulk(b"1")].concat()),
        "{text}"
    );
    assert!(
        text.ends_with("upstream failure\r\n") || text.ends_with("no upstream host\r\n"),
        "{text}"
    );
    assert_eq!(respite.stat("redis.main.command.mget.error"), before + 1);
}

//! The non-hashing policies against real redis-servers, counted by each server's
//! `INFO commandstats`: weighted `round_robin` serves each host its weight's share (Envoy's EDF
//! order, exact over whole periods), `random` ignores weights as Envoy's and twemproxy's do, and
//! `least_request` sends a third as many commands as `random` to a host stalled by
//! `DEBUG SLEEP`.

use crate::common;

use std::thread;
use std::time::Duration;

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port};

const COMMANDS: usize = 3000;

/// One listener over `hosts` (address, weight) with `lb_policy` and one worker (so one
/// round-robin turn counter sees every command).
fn start(hosts: &[(String, u32)], lb_policy: &str) -> Respite {
    let port = free_port();
    let admin_port = free_port();
    let hosts: Vec<String> = hosts
        .iter()
        .map(|(a, w)| format!("{{ address = \"{a}\", weight = {w} }}"))
        .collect();
    let cfg = format!(
        r#"[admin]
address = "127.0.0.1:{admin_port}"
[runtime]
workers = 1
drain_timeout = "5s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "20s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
type = "static"
lb_policy = "{lb_policy}"
connect_timeout = "250ms"
hosts = [{}]
"#,
        hosts.join(", ")
    );
    Respite::start(&cfg, port, admin_port)
}

/// Executed GETs of `server` since its last `CONFIG RESETSTAT`.
fn gets(server: &RedisServer) -> u64 {
    let info = server.raw().cmd(&[b"INFO", b"commandstats"]);
    let stats = respite_tests::cluster::parse_commandstats(&String::from_utf8_lossy(&info));
    stats.get("get").map_or(0, |s| s.calls)
}

fn reset(servers: &[RedisServer]) {
    for s in servers {
        assert_eq!(s.raw().cmd(&[b"CONFIG", b"RESETSTAT"]), b"+OK\r\n");
    }
}

/// `COMMANDS` GETs, one at a time, through `r`.
fn send_gets(r: &Respite) {
    let mut c = r.raw();
    for i in 0..COMMANDS {
        let key = format!("k{i}");
        let reply = c.cmd(&[b"GET", key.as_bytes()]);
        assert_eq!(reply, b"$-1\r\n", "GET {key}: {}", show(&reply));
    }
}

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n)
        .map(|_| RedisServer::start_with(&["--enable-debug-command", "yes"]))
        .collect()
}

#[test]
fn weighted_round_robin_serves_each_host_its_weight() {
    let s = servers(3);
    let weights = [1u32, 2, 3];
    let hosts: Vec<(String, u32)> = s.iter().map(|x| x.addr()).zip(weights).collect();
    let r = start(&hosts, "round_robin");
    reset(&s);
    send_gets(&r);
    let counts: Vec<u64> = s.iter().map(gets).collect();
    assert_eq!(counts.iter().sum::<u64>(), COMMANDS as u64, "{counts:?}");
    // 500 whole periods of 6 turns; the first command may start mid-period.
    for (c, w) in counts.iter().zip(weights) {
        let want = COMMANDS as u64 * u64::from(w) / 6;
        assert!(c.abs_diff(want) <= 3, "{counts:?} for weights {weights:?}");
    }
}

#[test]
fn random_ignores_weights() {
    let s = servers(2);
    let hosts = vec![(s[0].addr(), 1), (s[1].addr(), 3)];
    let r = start(&hosts, "random");
    reset(&s);
    send_gets(&r);
    let counts: Vec<u64> = s.iter().map(gets).collect();
    assert_eq!(counts.iter().sum::<u64>(), COMMANDS as u64, "{counts:?}");
    // Uniform: 1500 each; 250 is over 9 standard deviations.
    for c in &counts {
        assert!(c.abs_diff(1500) < 250, "{counts:?}");
    }
}

/// Client connections that send one GET each while one of three hosts stalls.
const STALL_CLIENTS: usize = 450;

/// How many of `STALL_CLIENTS` GETs (one per client connection, so no reply waits behind
/// another's) went to host 0 of three while it sleeps in `DEBUG SLEEP`. The GETs are sent in
/// groups of 10, 10 ms apart: the healthy hosts answer between groups, the stalled one does
/// not, so its outstanding count only grows.
fn picks_of_a_stalled_host(lb_policy: &str) -> u64 {
    let s = servers(3);
    let hosts: Vec<(String, u32)> = s.iter().map(|x| (x.addr(), 1)).collect();
    let r = start(&hosts, lb_policy);
    let mut clients: Vec<RawClient> = (0..STALL_CLIENTS).map(|_| r.raw()).collect();
    reset(&s);
    let stalled = s[0].addr();
    let sleeper = thread::spawn(move || {
        let mut c = RawClient::connect(&stalled);
        c.cmd(&[b"DEBUG", b"SLEEP", b"1.5"])
    });
    thread::sleep(Duration::from_millis(100));
    for (i, c) in clients.iter_mut().enumerate() {
        let mut get = Vec::new();
        RawClient::encode_into(&mut get, &[b"GET", format!("k{i}").as_bytes()]);
        c.send_raw(&get);
        if i % 10 == 9 {
            thread::sleep(Duration::from_millis(10));
        }
    }
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.read_reply(), b"$-1\r\n", "client {i}");
    }
    assert_eq!(sleeper.join().expect("sleeper"), b"+OK\r\n");
    let counts: Vec<u64> = s.iter().map(gets).collect();
    assert_eq!(
        counts.iter().sum::<u64>(),
        STALL_CLIENTS as u64,
        "{counts:?}"
    );
    counts[0]
}

#[test]
fn least_request_avoids_a_stalled_host() {
    // Once the stalled host is the busiest, Envoy's two choices pick it only when both draws
    // are it: 1 in 9, about 50 of 450 (standard deviation 7); `random` picks it 1 in 3, about
    // 150 (standard deviation 10).
    let least_request = picks_of_a_stalled_host("least_request");
    let random = picks_of_a_stalled_host("random");
    println!("GETs sent to the stalled host: least_request {least_request}, random {random}");
    assert!(
        least_request < 100,
        "least_request {least_request}, random {random}"
    );
    assert!(
        random > 110,
        "least_request {least_request}, random {random}"
    );
}

#[test]
fn least_request_spreads_an_even_load() {
    let s = servers(3);
    let hosts: Vec<(String, u32)> = s.iter().map(|x| (x.addr(), 1)).collect();
    let r = start(&hosts, "least_request");
    reset(&s);
    send_gets(&r);
    let counts: Vec<u64> = s.iter().map(gets).collect();
    assert_eq!(counts.iter().sum::<u64>(), COMMANDS as u64, "{counts:?}");
    for c in &counts {
        assert!(c.abs_diff(1000) < 200, "{counts:?}");
    }
}

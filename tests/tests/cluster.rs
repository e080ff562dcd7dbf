//! Respite over a real Redis Cluster (six `redis-server`s, 3 primaries + 3 replicas, made by
//! `respite_tests::cluster::RedisCluster`): key placement, locally answered `CLUSTER`
//! commands, resharding and failover under load, a stopped replica, read policies checked with
//! per-node `INFO commandstats`, and MOVED handling without a topology refresh.
//!
//! Each test starts its own cluster (≈2–4 s). `cluster_harness_direct` checks the harness itself
//! against the cluster, without Respite.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use respite_tests::cluster::{Reply, cluster_config, key_slot, query};
use respite_tests::{RawClient, RedisCluster, Respite, free_port};

/// Respite's `op_timeout` in these tests (see `cluster_config`).
const OP_TIMEOUT: Duration = Duration::from_secs(1);

/// Slack on top of `op_timeout` allowed for one request (2 shared cores, other builds running).
const LATENCY_MARGIN: Duration = Duration::from_millis(1500);

/// Starts Respite over `cluster` with `read_policy` and `extra` config lines (see
/// `cluster_config`).
fn respite_over(cluster: &RedisCluster, read_policy: &str, extra: &str) -> Respite {
    let (port, admin) = (free_port(), free_port());
    let cfg = cluster_config(port, admin, &cluster.seeds(), read_policy, extra);
    Respite::start(&cfg, port, admin)
}

/// Sends `args` (text) over `c` and parses the reply; panics on I/O errors.
fn cmd(c: &mut RawClient, args: &[&str]) -> Reply {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    Reply::parse(&c.cmd(&args))
}

/// Sends `args` over `c`; `Err` on I/O errors (timeouts, closed connection).
fn try_cmd(c: &mut RawClient, args: &[&str]) -> std::io::Result<Reply> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.try_cmd(&args).map(|r| Reply::parse(&r))
}

/// A bulk-string reply holding `v`.
fn bulk(v: &str) -> Reply {
    Reply::Bulk(Some(v.as_bytes().to_vec()))
}

/// `+OK`.
fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// The last `n` lines of `text` (for assertion messages with logs).
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Keys whose slots cover every primary: `prefix:0 .. prefix:n-1`.
fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

// ---- the harness, straight against the cluster -------------------------------------------

#[test]
fn cluster_harness_direct() {
    let t0 = Instant::now();
    let mut cluster = RedisCluster::start();
    println!("cluster up in {:?}", t0.elapsed());
    let primaries = cluster.primaries();
    let replicas = cluster.replicas();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    assert_eq!(replicas.len(), 3, "{replicas:?}");
    assert_eq!(cluster.nodes().len(), 6);
    for r in &replicas {
        assert!(primaries.contains(&cluster.primary_of(r)), "{r}");
    }
    for p in &primaries {
        assert_eq!(cluster.replicas_of(p).len(), 1, "{p}");
    }
    let counts = cluster.slot_counts();
    assert_eq!(counts.values().sum::<usize>(), 16384);
    assert_eq!(counts.keys().cloned().collect::<Vec<_>>(), primaries);

    // key_slot agrees with the servers, and slot_owner is the node that accepts the key.
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"{user1}:a"), key_slot(b"user1"));
    let owners = cluster.slot_owners();
    for k in keys("h", 200) {
        let slot = key_slot(k.as_bytes());
        assert_eq!(
            query(&primaries[0], &["CLUSTER", "KEYSLOT", &k]),
            Reply::Int(slot.into())
        );
        let owner = cluster.slot_owner(slot);
        assert_eq!(owner, owners[slot as usize]);
        assert_eq!(query(&owner, &["SET", &k, &format!("v-{k}")]), ok());
        for other in primaries.iter().filter(|p| **p != owner) {
            assert_eq!(
                query(other, &["GET", &k]),
                Reply::Error(format!("MOVED {slot} {owner}")),
                "{k} on {other}"
            );
        }
        assert_eq!(cluster.direct_get(k.as_bytes()), format!("${}\r\nv-{k}\r\n", k.len() + 2).into_bytes());
    }
    assert_eq!(cluster.dbsize(), 200);

    // Resharding moves the lowest slots of `from` to `to`, keys included.
    let (from, to) = (primaries[0].clone(), primaries[1].clone());
    let from_slots: Vec<u16> = (0..16384u16).filter(|s| owners[*s as usize] == from).collect();
    let t = Instant::now();
    cluster.reshard(&from, &to, 300);
    println!("reshard of 300 slots (200 keys in the cluster) took {:?}", t.elapsed());
    let after = cluster.slot_owners();
    for s in &from_slots[..300] {
        assert_eq!(after[*s as usize], to, "slot {s}");
    }
    for s in &from_slots[300..] {
        assert_eq!(after[*s as usize], from, "slot {s}");
    }
    assert_eq!(cluster.slot_counts()[&to], counts[&to] + 300);
    let mut moved_keys = 0;
    for k in keys("h", 200) {
        let slot = key_slot(k.as_bytes());
        if from_slots[..300].contains(&slot) {
            moved_keys += 1;
            assert_eq!(query(&to, &["GET", &k]), bulk(&format!("v-{k}")));
        }
        assert_eq!(query(&after[slot as usize], &["GET", &k]), bulk(&format!("v-{k}")));
    }
    println!("{moved_keys} of 200 keys moved");
    assert_eq!(cluster.dbsize(), 200);

    // commandstats / reset_stats; replicas count the writes replicated from their primary.
    cluster.reset_stats();
    let p = primaries[2].clone();
    let r = cluster.replicas_of(&p)[0].clone();
    let mine: Vec<String> = keys("cs", 400)
        .into_iter()
        .filter(|k| after[key_slot(k.as_bytes()) as usize] == p)
        .take(20)
        .collect();
    for k in &mine {
        assert_eq!(query(&p, &["SET", k, "x"]), ok());
    }
    for k in &mine[..5] {
        assert_eq!(query(&p, &["GET", k]), bulk("x"));
    }
    assert_eq!(query(&r, &["GET", &mine[0]]), Reply::Error(format!("MOVED {} {p}", key_slot(mine[0].as_bytes()))));
    let stats = cluster.commandstats(&p);
    assert_eq!(stats.get("set"), Some(&20), "{stats:?}");
    assert_eq!(stats.get("get"), Some(&5), "{stats:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let rstats = loop {
        let s = cluster.commandstats_full(&r);
        if s.get("set").map(|s| s.calls) == Some(20) || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(rstats.get("set").map(|s| s.calls), Some(20), "replicated SETs: {rstats:?}");
    assert_eq!(rstats.get("get").map(|s| (s.calls, s.rejected_calls)), Some((0, 1)), "{rstats:?}");

    // Manual failover swaps roles.
    let t = Instant::now();
    cluster.failover(&r);
    println!("CLUSTER FAILOVER took {:?}", t.elapsed());
    assert!(cluster.primaries().contains(&r));
    assert!(cluster.replicas().contains(&p));
    assert_eq!(cluster.primary_of(&p), r);
    assert_eq!(query(&r, &["GET", &mine[0]]), bulk("x"));

    // SIGSTOP / SIGCONT.
    let stopped = cluster.replicas()[0].clone();
    cluster.sigstop(&stopped);
    assert!(!cluster.live_nodes().contains(&stopped));
    {
        let mut c = RawClient::connect(&stopped);
        c.stream().set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(c.try_cmd(&[b"PING"]).is_err(), "a stopped node answered");
    }
    cluster.sigcont(&stopped);
    assert_eq!(query(&stopped, &["PING"]), Reply::Simple("PONG".into()));
    cluster.wait_stable(Duration::from_secs(30));

    // SIGKILL a primary: its replica takes over.
    let victim = cluster.primaries()[0].clone();
    let heir = cluster.replicas_of(&victim)[0].clone();
    let t = Instant::now();
    cluster.kill(&victim);
    assert!(std::net::TcpStream::connect(&victim).is_err(), "{victim} still accepts");
    cluster.wait_stable(Duration::from_secs(30));
    println!("kill of a primary → stable cluster in {:?}", t.elapsed());
    assert!(cluster.primaries().contains(&heir), "{heir} not promoted");
    assert!(!cluster.nodes().is_empty() && !cluster.live_nodes().contains(&victim));
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.slot_counts().values().sum::<usize>(), 16384);
    for k in keys("h", 200) {
        assert_eq!(
            Reply::parse(&cluster.direct_get(k.as_bytes())),
            bulk(&format!("v-{k}")),
            "{k} after failover"
        );
    }
    println!("harness test took {:?}", t0.elapsed());
}

//! Respite over a real Redis Cluster (six `redis-server`s, 3 primaries + 3 replicas, made by
//! `respite_tests::cluster::RedisCluster`): key placement, locally answered `CLUSTER`
//! commands, resharding and failover under load, a stopped replica, read policies checked with
//! per-node `INFO commandstats`, and MOVED handling without a topology refresh.
//!
//! Each test starts its own cluster (≈6 s: `redis-cli --cluster create` waits in 1 s steps).
//! `cluster_harness_direct` checks the harness itself against the cluster, without Respite.
//! Timing is asserted only as bounds with wide margins (write recovery after a SIGKILL,
//! requests within op_timeout); the measured values are printed (`--nocapture`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Keys of `cluster_harness_direct`: 200 spread over all slots, plus 20 in slots 0..299 (the
/// ones its reshard moves).
fn harness_keys() -> Vec<String> {
    let mut ks = keys("h", 200);
    ks.extend(
        (0..)
            .map(|i| format!("low:{i}"))
            .filter(|k| key_slot(k.as_bytes()) < 300)
            .take(20),
    );
    ks
}

/// The harness itself, straight against the cluster (no Respite): roles, slot owners agreeing
/// with the servers' MOVED replies, reshard, commandstats, failover, SIGSTOP, SIGKILL, restart,
/// add_node.
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
    for k in harness_keys() {
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
        assert_eq!(
            cluster.direct_get(k.as_bytes()),
            format!("${}\r\nv-{k}\r\n", k.len() + 2).into_bytes()
        );
    }
    assert_eq!(cluster.dbsize(), harness_keys().len() as i64);

    // Resharding moves the lowest slots of `from` to `to`, keys included.
    // redis-cli moves the lowest slots of `from`: slot 0's owner gives up 0..299.
    let from = owners[0].clone();
    let to = primaries
        .iter()
        .find(|p| **p != from)
        .expect("another primary")
        .clone();
    let from_slots: Vec<u16> = (0..16384u16)
        .filter(|s| owners[*s as usize] == from)
        .collect();
    let t = Instant::now();
    cluster.reshard(&from, &to, 300);
    println!(
        "reshard of 300 slots (220 keys in the cluster) took {:?}",
        t.elapsed()
    );
    let after = cluster.slot_owners();
    for s in &from_slots[..300] {
        assert_eq!(after[*s as usize], to, "slot {s}");
    }
    for s in &from_slots[300..] {
        assert_eq!(after[*s as usize], from, "slot {s}");
    }
    assert_eq!(cluster.slot_counts()[&to], counts[&to] + 300);
    let mut moved_keys = 0;
    for k in harness_keys() {
        let slot = key_slot(k.as_bytes());
        if from_slots[..300].contains(&slot) {
            moved_keys += 1;
            assert_eq!(query(&to, &["GET", &k]), bulk(&format!("v-{k}")));
        }
        assert_eq!(
            query(&after[slot as usize], &["GET", &k]),
            bulk(&format!("v-{k}"))
        );
    }
    assert!(moved_keys >= 20, "{moved_keys} keys moved");
    assert_eq!(cluster.dbsize(), harness_keys().len() as i64);

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
    assert_eq!(
        query(&r, &["GET", &mine[0]]),
        Reply::Error(format!("MOVED {} {p}", key_slot(mine[0].as_bytes())))
    );
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
    assert_eq!(
        rstats.get("set").map(|s| s.calls),
        Some(20),
        "replicated SETs: {rstats:?}"
    );
    assert_eq!(
        rstats.get("get").map(|s| (s.calls, s.rejected_calls)),
        Some((0, 1)),
        "{rstats:?}"
    );

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
        c.stream()
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
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
    assert!(
        std::net::TcpStream::connect(&victim).is_err(),
        "{victim} still accepts"
    );
    cluster.wait_stable(Duration::from_secs(30));
    println!("kill of a primary → stable cluster in {:?}", t.elapsed());
    assert!(cluster.primaries().contains(&heir), "{heir} not promoted");
    assert!(!cluster.nodes().is_empty() && !cluster.live_nodes().contains(&victim));
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.slot_counts().values().sum::<usize>(), 16384);
    for k in harness_keys() {
        assert_eq!(
            Reply::parse(&cluster.direct_get(k.as_bytes())),
            bulk(&format!("v-{k}")),
            "{k} after failover"
        );
    }

    // A restarted node rejoins with its nodes.conf, as a replica of the node that took over.
    cluster.restart(&victim);
    cluster.wait_stable(Duration::from_secs(30));
    assert!(
        cluster.replicas().contains(&victim),
        "{victim} did not rejoin as a replica"
    );
    assert_eq!(cluster.primary_of(&victim), heir);

    // add_node joins an empty primary; slots can be moved to it.
    let new = cluster.add_node();
    assert!(cluster.primaries().contains(&new));
    assert!(!cluster.slot_owners().contains(&new));
    let source = cluster.slot_owner(16383);
    cluster.reshard(&source, &new, 100);
    assert_eq!(cluster.slot_counts()[&new], 100);
    for k in harness_keys() {
        assert_eq!(
            Reply::parse(&cluster.direct_get(k.as_bytes())),
            bulk(&format!("v-{k}")),
            "{k} after moving slots to a new node"
        );
    }
    println!("harness test took {:?}", t0.elapsed());
}

// ---- key placement and merged multi-key commands -----------------------------------------

/// The RESP encoding of `args`, for pipelines.
fn command(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// How a key of the readback test is written and read (by its index).
fn readback_ops(i: usize, key: &str) -> (Vec<Vec<u8>>, Reply, Vec<Vec<u8>>) {
    match i % 50 {
        1 => (
            command(&["HSET", key, "f1", &format!("a{i}"), "f2", "b"]),
            Reply::Int(2),
            command(&["HGETALL", key]),
        ),
        2 => (
            command(&["RPUSH", key, "x", &format!("y{i}"), "z"]),
            Reply::Int(3),
            command(&["LRANGE", key, "0", "-1"]),
        ),
        _ => (
            command(&["SET", key, &format!("value-{i}")]),
            ok(),
            command(&["GET", key]),
        ),
    }
}

/// 2000 keys written through Respite read back equal to a direct read from their slot owner;
/// MGET/MSET/DEL/EXISTS across slots merge right; cross-slot SUNION gets CROSSSLOT; DBSIZE sums
/// the primaries; every primary got requests.
#[test]
fn readback() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "");
    let owners = cluster.slot_owners();
    let owner = |k: &str| owners[key_slot(k.as_bytes()) as usize].clone();
    let mut direct: HashMap<String, RawClient> = cluster
        .primaries()
        .into_iter()
        .map(|p| (p.clone(), RawClient::connect(&p)))
        .collect();
    let mut c = respite.raw();

    // 2000 keys: every 4th hash-tagged (40 tags), the rest plain; strings, hashes, lists.
    let keys: Vec<String> = (0..2000)
        .map(|i| {
            if i % 4 == 0 {
                format!("{{user{}}}:k{i}", i % 40)
            } else {
                format!("plain:{i}")
            }
        })
        .collect();
    for chunk in keys.chunks(100).enumerate().map(|(n, ks)| (n * 100, ks)) {
        let (base, ks) = chunk;
        let ops: Vec<_> = ks
            .iter()
            .enumerate()
            .map(|(j, k)| readback_ops(base + j, k))
            .collect();
        let writes: Vec<Vec<Vec<u8>>> = ops.iter().map(|o| o.0.clone()).collect();
        let replies = c.pipeline(&writes);
        for ((k, o), r) in ks.iter().zip(&ops).zip(&replies) {
            assert_eq!(Reply::parse(r), o.1, "write of {k} through respite");
        }
    }
    for (i, k) in keys.iter().enumerate() {
        let read = readback_ops(i, k).2;
        let args: Vec<&[u8]> = read.iter().map(Vec::as_slice).collect();
        let via = c.cmd(&args);
        let want = direct.get_mut(&owner(k)).expect("owner").cmd(&args);
        assert_eq!(
            String::from_utf8_lossy(&via),
            String::from_utf8_lossy(&want),
            "{k} (slot {}) through respite vs its owner {}",
            key_slot(k.as_bytes()),
            owner(k)
        );
        assert!(
            !Reply::parse(&want).is_error() && want != b"$-1\r\n",
            "{k} missing on its owner"
        );
    }

    // MGET of 500 string keys (plus missing ones) across all slots = the owners' values.
    let mut mget = vec!["MGET".to_string()];
    mget.extend(
        keys.iter()
            .enumerate()
            .filter(|(i, _)| !matches!(i % 50, 1 | 2))
            .map(|(_, k)| k.clone())
            .step_by(3)
            .take(490),
    );
    mget.extend((0..10).map(|i| format!("missing:{i}")));
    assert_eq!(mget.len(), 501);
    let mut want = b"*500\r\n".to_vec();
    for k in &mget[1..] {
        want.extend(
            direct
                .get_mut(&owner(k))
                .expect("owner")
                .cmd(&[b"GET", k.as_bytes()]),
        );
    }
    let args: Vec<&str> = mget.iter().map(String::as_str).collect();
    let via = {
        let a: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        c.cmd(&a)
    };
    assert_eq!(
        String::from_utf8_lossy(&via),
        String::from_utf8_lossy(&want),
        "MGET"
    );

    // MSET / DEL / EXISTS across slots, checked on the owners.
    let mkeys = keys_in_distinct_slots("mset", 100);
    let mut mset = vec!["MSET".to_string()];
    for k in &mkeys {
        mset.extend([k.clone(), format!("m-{k}")]);
    }
    let a: Vec<&str> = mset.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut c, &a), ok(), "MSET across slots");
    for k in &mkeys {
        assert_eq!(
            query(&owner(k), &["GET", k]),
            bulk(&format!("m-{k}")),
            "{k} after MSET"
        );
    }
    let mut del = vec!["DEL"];
    del.extend(mkeys[..50].iter().map(String::as_str));
    del.extend(["missing:1", "missing:2"]);
    assert_eq!(cmd(&mut c, &del), Reply::Int(50), "DEL across slots");
    for k in &mkeys[..50] {
        assert_eq!(
            query(&owner(k), &["EXISTS", k]),
            Reply::Int(0),
            "{k} after DEL"
        );
    }
    let mut exists = vec!["EXISTS"];
    exists.extend(mkeys.iter().map(String::as_str));
    exists.push(mkeys[99].as_str()); // counted twice, as Redis does
    exists.push("missing:3");
    assert_eq!(cmd(&mut c, &exists), Reply::Int(51), "EXISTS across slots");

    // Cross-slot SUNION is refused; same-slot SUNION runs on the owner.
    assert_ne!(key_slot(b"set:a"), key_slot(b"set:b"));
    assert_eq!(
        c.cmd(&[b"SUNION", b"set:a", b"set:b"]),
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    assert_eq!(cmd(&mut c, &["SADD", "{t}a", "1", "2"]), Reply::Int(2));
    assert_eq!(cmd(&mut c, &["SADD", "{t}b", "2", "3"]), Reply::Int(2));
    let mut members: Vec<String> = cmd(&mut c, &["SUNION", "{t}a", "{t}b"])
        .array()
        .iter()
        .map(Reply::text)
        .collect();
    members.sort();
    assert_eq!(members, ["1", "2", "3"]);
    assert_eq!(query(&owner("{t}a"), &["SCARD", "{t}b"]), Reply::Int(2));

    // DBSIZE is the sum over the primaries.
    let total = cluster.dbsize();
    assert_eq!(total, 2000 + 50 + 2);
    assert_eq!(cmd(&mut c, &["DBSIZE"]), Reply::Int(total));

    // Every primary got requests.
    let stats = respite.stats();
    for p in cluster.primaries() {
        let name = format!("cluster.rc.host.{p}.rq_total");
        assert!(
            stats.get(&name).copied().unwrap_or(0) > 0,
            "{name} = 0: {stats:?}"
        );
    }

    // A large MSET over keys in six slots goes one slot at a time on connections of their own,
    // sent from the client's frame: every value lands whole on its slot's owner.
    let large = keys_in_distinct_slots("large", 6);
    let values: Vec<Vec<u8>> = (0..large.len())
        .map(|i| vec![b'a' + i as u8; (1 << 20) + i])
        .collect();
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for (k, v) in large.iter().zip(&values) {
        mset.push(k.as_bytes());
        mset.push(v);
    }
    let leased = respite.stat("cluster.rc.leased_cx_total");
    assert_eq!(c.cmd(&mset), b"+OK\r\n");
    assert!(
        respite.stat("cluster.rc.leased_cx_total") > leased,
        "the large MSET took no connection of its own"
    );
    for (k, v) in large.iter().zip(&values) {
        let on_owner = RawClient::connect(&owner(k)).cmd(&[b"GET", k.as_bytes()]);
        let mut want = format!("${}\r\n", v.len()).into_bytes();
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\n");
        assert!(on_owner == want, "{k} on its owner is not its value");
    }
}

/// `n` keys `prefix:i`, each in a different slot (so a multi-key command over them spans
/// every primary).
fn keys_in_distinct_slots(prefix: &str, n: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|k| seen.insert(key_slot(k.as_bytes())))
        .take(n)
        .collect()
}

// ---- Respite as a one-node cluster --------------------------------------------------------

/// Respite answers CLUSTER SLOTS/KEYSLOT/INFO/NODES/SHARDS as a one-node cluster at its own
/// address, and a cluster-aware client (redis crate) works through it.
#[test]
fn cluster_commands_local() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "");
    let mut c = respite.raw();

    let slots = cmd(&mut c, &["CLUSTER", "SLOTS"]);
    let ranges = slots.array();
    assert_eq!(ranges.len(), 1, "{slots:?}");
    let r = ranges[0].array();
    assert_eq!((r[0].int(), r[1].int()), (0, 16383), "{slots:?}");
    let node = r[2].array();
    assert_eq!(node[0].text(), "127.0.0.1", "{slots:?}");
    assert_eq!(node[1].int(), i64::from(respite.port), "{slots:?}");
    assert_eq!(r.len(), 3, "no replicas expected: {slots:?}");

    assert_eq!(
        cmd(&mut c, &["CLUSTER", "KEYSLOT", "foo"]),
        Reply::Int(12182)
    );
    assert_eq!(
        cmd(&mut c, &["CLUSTER", "KEYSLOT", "{user1}:a"]),
        Reply::Int(key_slot(b"user1").into())
    );
    let info = cmd(&mut c, &["CLUSTER", "INFO"]).text();
    assert!(info.contains("cluster_state:ok"), "{info}");
    let nodes = cmd(&mut c, &["CLUSTER", "NODES"]).text();
    assert!(
        nodes.contains(&respite.addr()) && nodes.contains("myself") && nodes.contains("0-16383"),
        "{nodes}"
    );
    assert_eq!(nodes.trim().lines().count(), 1, "{nodes}");
    let shards = cmd(&mut c, &["CLUSTER", "SHARDS"]);
    assert_eq!(shards.array().len(), 1, "{shards:?}");

    // A cluster-aware client sees one node (Respite) and works through it.
    let client = redis::cluster::ClusterClient::new(vec![format!("redis://{}/", respite.addr())])
        .expect("cluster client");
    let mut conn = client
        .get_connection()
        .expect("cluster connection through respite");
    let ks = keys_in_distinct_slots("cc", 50);
    for k in &ks {
        let () = redis::cmd("SET")
            .arg(k)
            .arg(format!("cc-{k}"))
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("SET {k} via cluster client: {e}"));
    }
    for k in &ks {
        let v: String = redis::cmd("GET").arg(k).query(&mut conn).expect("GET");
        assert_eq!(v, format!("cc-{k}"));
        assert_eq!(
            query(&cluster.key_owner(k.as_bytes()), &["GET", k]),
            bulk(&format!("cc-{k}"))
        );
    }
    let n: i64 = redis::cmd("INCR")
        .arg("cc:counter")
        .query(&mut conn)
        .expect("INCR");
    assert_eq!(n, 1);

    cluster_transactions(&cluster, &respite);
}

/// Transactions over the Redis Cluster (part of `cluster_commands_local`, sharing its cluster):
/// keys of one slot run on the slot's primary as one MULTI/EXEC; keys of two slots are refused
/// with `-CROSSSLOT` and nothing runs; a WATCH broken by another client makes EXEC nil.
fn cluster_transactions(cluster: &RedisCluster, respite: &Respite) {
    let mut c = respite.raw();
    assert_eq!(cmd(&mut c, &["MULTI"]), ok());
    assert_eq!(
        cmd(&mut c, &["SET", "{tx}a", "1"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        cmd(&mut c, &["INCRBY", "{tx}a", "4"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        cmd(&mut c, &["GET", "{tx}a"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        cmd(&mut c, &["EXEC"]),
        Reply::Array(Some(vec![ok(), Reply::Int(5), bulk("5")]))
    );
    let owner = cluster.key_owner(b"{tx}a");
    assert_eq!(query(&owner, &["GET", "{tx}a"]), bulk("5"));

    let ks = keys_in_distinct_slots("txc", 2);
    assert_eq!(cmd(&mut c, &["MULTI"]), ok());
    assert_eq!(
        cmd(&mut c, &["SET", &ks[0], "1"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        cmd(&mut c, &["SET", &ks[1], "1"]),
        Reply::Error("CROSSSLOT Keys in request don't hash to the same slot".into())
    );
    assert_eq!(
        cmd(&mut c, &["EXEC"]),
        Reply::Error("EXECABORT Transaction discarded because of previous errors.".into())
    );
    for k in &ks {
        assert_eq!(
            query(&cluster.key_owner(k.as_bytes()), &["EXISTS", k]),
            Reply::Int(0)
        );
    }

    let mut other = respite.raw();
    assert_eq!(cmd(&mut c, &["WATCH", "{tx}a"]), ok());
    assert_eq!(cmd(&mut other, &["SET", "{tx}a", "changed"]), ok());
    assert_eq!(cmd(&mut c, &["MULTI"]), ok());
    assert_eq!(
        cmd(&mut c, &["SET", "{tx}a", "lost"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(cmd(&mut c, &["EXEC"]), Reply::Array(None));
    assert_eq!(query(&owner, &["GET", "{tx}a"]), bulk("changed"));
}

// ---- resharding under load ----------------------------------------------------------------

/// What one load thread of `resharding_under_load` saw.
#[derive(Default)]
struct ReshardLoad {
    requests: u64,
    /// Error replies and I/O errors, with the command.
    errors: Vec<String>,
    /// key → last acknowledged value (keys written by this thread only).
    acked: HashMap<String, String>,
    /// Keys whose last write got an error (value unknown).
    uncertain: std::collections::HashSet<String>,
    /// counter → acknowledged INCRs.
    incrs: HashMap<String, i64>,
    /// Reads that returned something else than the last acknowledged value (nil included).
    wrong_reads: Vec<String>,
    /// MGET elements that were nil for a key acknowledged before the MGET was sent.
    false_nils: u64,
}

/// Hash tags whose slots are among the 2000 that `resharding_under_load` moves, so multi-key
/// commands on one tag meet slots being migrated (`TRYAGAIN` while their keys are split
/// between the two nodes, `ASK` once all have moved).
fn moving_tags() -> Vec<String> {
    (0..)
        .map(|n| format!("g{n}"))
        .filter(|tag| key_slot(tag.as_bytes()) < 2000)
        .take(4)
        .collect()
}

/// Key `i` (0..30) of tag group `tag` of thread `t`: all of a group's keys share one slot.
fn tagged_key(tag: &str, t: usize, i: usize) -> String {
    format!("{{{tag}}}:{t}:{i}")
}

/// One thread of `resharding_under_load`: SET / GET / MGET of 10 / INCR over its own keys
/// `k:<t>:<i>` and counters `c:<t>:<j>`, and MGET / MSET within one hash-tag group, until
/// `stop`, checking every read against its own acknowledged writes.
fn reshard_worker(addr: String, t: usize, stop: Arc<AtomicBool>) -> ReshardLoad {
    let tags = moving_tags();
    let mut rng = fastrand::Rng::with_seed(t as u64);
    let mut c = RawClient::connect(&addr);
    let mut out = ReshardLoad::default();
    let mut seq = 0u64;
    let expect = |out: &ReshardLoad, k: &str| -> Option<Reply> {
        if out.uncertain.contains(k) {
            return None;
        }
        Some(out.acked.get(k).map_or(Reply::Bulk(None), |v| bulk(v)))
    };
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        out.requests += 1;
        let op = rng.u32(0..100);
        let key = format!("k:{t}:{}", rng.usize(0..300));
        let args: Vec<String> = match op {
            0..40 => vec!["SET".into(), key.clone(), format!("v{t}-{seq}")],
            40..65 => vec!["GET".into(), key.clone()],
            65..75 => {
                let mut a = vec!["MGET".to_string()];
                a.extend((0..10).map(|_| format!("k:{t}:{}", rng.usize(0..300))));
                a
            }
            75..85 => {
                let tag = &tags[rng.usize(0..tags.len())];
                let mut a = vec!["MGET".to_string()];
                a.extend((0..10).map(|_| tagged_key(tag, t, rng.usize(0..30))));
                a
            }
            85..90 => {
                let tag = &tags[rng.usize(0..tags.len())];
                let mut a = vec!["MSET".to_string()];
                for _ in 0..5 {
                    a.push(tagged_key(tag, t, rng.usize(0..30)));
                    a.push(format!("m{t}-{seq}"));
                }
                a
            }
            _ => vec!["INCR".into(), format!("c:{t}:{}", rng.usize(0..20))],
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = match try_cmd(&mut c, &argv) {
            Ok(r) => r,
            Err(e) => {
                out.errors.push(format!("{argv:?}: I/O error {e}"));
                if argv[0] == "SET" {
                    out.uncertain.insert(key);
                }
                if argv[0] == "MSET" {
                    out.uncertain.extend(args[1..].iter().step_by(2).cloned());
                }
                c = RawClient::connect(&addr);
                continue;
            }
        };
        if let Reply::Error(e) = &reply {
            out.errors.push(format!("{argv:?}: -{e}"));
            if argv[0] == "SET" {
                out.uncertain.insert(key);
            }
            if argv[0] == "MSET" {
                out.uncertain.extend(args[1..].iter().step_by(2).cloned());
            }
            if argv[0] == "INCR" {
                out.uncertain.insert(args[1].clone());
            }
            continue;
        }
        match argv[0] {
            "SET" if reply != ok() => {
                out.wrong_reads.push(format!("{argv:?}: {reply:?}"));
                out.uncertain.insert(key);
            }
            "SET" => {
                out.uncertain.remove(&key);
                out.acked.insert(key, args[2].clone());
            }
            "MSET" if reply != ok() => {
                out.wrong_reads.push(format!("{argv:?}: {reply:?}"));
                out.uncertain.extend(args[1..].iter().step_by(2).cloned());
            }
            "MSET" => {
                for kv in args[1..].chunks(2) {
                    out.uncertain.remove(&kv[0]);
                    out.acked.insert(kv[0].clone(), kv[1].clone());
                }
            }
            "GET" => {
                if let Some(want) = expect(&out, &key)
                    && reply != want
                {
                    out.wrong_reads
                        .push(format!("GET {key}: {reply:?}, want {want:?}"));
                }
            }
            "MGET" => {
                let got = match reply {
                    Reply::Array(Some(v)) if v.len() == 10 => v,
                    other => {
                        out.wrong_reads.push(format!("{argv:?}: {other:?}"));
                        continue;
                    }
                };
                for (k, r) in args[1..].iter().zip(got) {
                    let Some(want) = expect(&out, k) else {
                        continue;
                    };
                    if r != want {
                        if r == Reply::Bulk(None) {
                            out.false_nils += 1;
                        }
                        out.wrong_reads
                            .push(format!("MGET … {k} …: {r:?}, want {want:?}"));
                    }
                }
            }
            _ => {
                let n = out.incrs.entry(args[1].clone()).or_default();
                *n += 1;
                if reply != Reply::Int(*n) && !out.uncertain.contains(&args[1]) {
                    out.wrong_reads
                        .push(format!("INCR {}: {reply:?}, want {n}", args[1]));
                }
            }
        }
    }
    out
}

/// 4 threads of mixed load through Respite while 4000 slot moves run (2000 slots away from one
/// primary and back): no error replies, no lost acknowledged write, no false nil in MGET.
#[test]
fn resharding_under_load() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "");
    let original = cluster.slot_owners();
    let (p0, p1, p2) = (
        original[0].clone(),
        original[8000].clone(),
        original[16000].clone(),
    );
    let moved_keys = (0..4)
        .flat_map(|t| (0..300).map(move |i| format!("k:{t}:{i}")))
        .filter(|k| key_slot(k.as_bytes()) < 2000)
        .count();
    println!("{moved_keys} of 1200 load keys are in the 2000 slots that move");
    assert!(moved_keys > 50);

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (addr, stop) = (respite.addr(), stop.clone());
            std::thread::spawn(move || reshard_worker(addr, t, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    // redis-cli takes the lowest slots of the source: 0..999 → p1, 1000..1999 → p2, then back.
    cluster.reshard(&p0, &p1, 1000);
    cluster.reshard(&p0, &p2, 1000);
    let moved = cluster.slot_owners();
    assert!(moved[..1000].iter().all(|o| *o == p1) && moved[1000..2000].iter().all(|o| *o == p2));
    cluster.reshard(&p1, &p0, 1000);
    cluster.reshard(&p2, &p0, 1000);
    let reshard_time = t.elapsed();
    assert_eq!(cluster.slot_owners(), original, "slots did not come back");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let loads: Vec<ReshardLoad> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();

    let stats = respite.stats();
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    let requests: u64 = loads.iter().map(|l| l.requests).sum();
    let errors: Vec<&String> = loads.iter().flat_map(|l| &l.errors).collect();
    let wrong: Vec<&String> = loads.iter().flat_map(|l| &l.wrong_reads).collect();
    let false_nils: u64 = loads.iter().map(|l| l.false_nils).sum();
    println!(
        "resharding under load: 4000 slot moves in {reshard_time:?}; requests={requests} \
         errors={} wrong_reads={} false_nils={false_nils} redirects_followed={} \
         redirects_failed={} refreshes periodic={} triggered={} topology_changed={} retries={}",
        errors.len(),
        wrong.len(),
        stat("cluster.rc.upstream_internal_redirect_succeeded_total"),
        stat("cluster.rc.upstream_internal_redirect_failed_total"),
        stat("cluster.rc.redis_cluster.refresh_periodic"),
        stat("cluster.rc.redis_cluster.refresh_triggered"),
        stat("cluster.rc.redis_cluster.topology_changed"),
        stat("cluster.rc.redis_cluster.retries"),
    );
    assert!(requests > 1000, "load did not run: {requests} requests");
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}\nrespite log:\n{}",
        errors.len(),
        &errors[..errors.len().min(10)],
        tail(&respite.log(), 30)
    );
    assert_eq!(false_nils, 0, "MGET returned nil for acknowledged keys");
    assert!(
        wrong.is_empty(),
        "{} wrong reads, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );

    // Every acknowledged write is there, on the key's owner and through respite.
    let mut c = respite.raw();
    let mut checked = 0;
    for l in &loads {
        for (k, v) in &l.acked {
            if l.uncertain.contains(k) {
                continue;
            }
            assert_eq!(
                query(&cluster.key_owner(k.as_bytes()), &["GET", k]),
                bulk(v),
                "{k} on its owner"
            );
            assert_eq!(cmd(&mut c, &["GET", k]), bulk(v), "{k} through respite");
            checked += 1;
        }
        for (k, n) in &l.incrs {
            if !l.uncertain.contains(k) {
                assert_eq!(
                    query(&cluster.key_owner(k.as_bytes()), &["GET", k]),
                    bulk(&n.to_string()),
                    "{k}"
                );
            }
        }
    }
    println!("{checked} acknowledged keys read back");
}

// ---- failover under load ------------------------------------------------------------------

/// One request of a timed load: when it was sent (since the test's epoch), how long it took,
/// its key's slot, and whether it got the expected reply.
#[derive(Debug, Clone, Copy)]
struct Rec {
    at: Duration,
    lat: Duration,
    slot: u16,
    write: bool,
    ok: bool,
}

/// A load thread until `stop`: writers SET `w:<t>:<i>` (expect `+OK`); readers GET the
/// preloaded `r:<i>` (expect `r-<i>`). Every request is recorded; replies that are neither
/// the expected value nor an error are returned as `wrong` (data errors, e.g. a nil).
fn timed_worker(
    addr: String,
    t: usize,
    write: bool,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<Rec>, Vec<String>) {
    let mut rng = fastrand::Rng::with_seed(100 + t as u64);
    let mut c = RawClient::connect(&addr);
    let (mut recs, mut wrong) = (Vec::new(), Vec::new());
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let (key, want) = if write {
            (format!("w:{t}:{}", rng.usize(0..2000)), ok())
        } else {
            let i = rng.usize(0..READ_KEYS);
            (format!("r:{i}"), bulk(&format!("r-{i}")))
        };
        let value = format!("{t}-{seq}");
        let args: Vec<&str> = if write {
            vec!["SET", &key, &value]
        } else {
            vec!["GET", &key]
        };
        let sent = Instant::now();
        let reply = try_cmd(&mut c, &args);
        let lat = sent.elapsed();
        let good = match &reply {
            Ok(r) if *r == want => true,
            Ok(Reply::Error(_)) => false,
            Ok(other) => {
                wrong.push(format!("{args:?} → {other:?}"));
                false
            }
            Err(_) => {
                c = RawClient::connect(&addr);
                false
            }
        };
        recs.push(Rec {
            at: sent - epoch,
            lat,
            slot: key_slot(key.as_bytes()),
            write,
            ok: good,
        });
    }
    (recs, wrong)
}

/// Number of preloaded keys `r:<i>` the readers of `failover_under_load` read.
const READ_KEYS: usize = 600;

/// Load through Respite (`prefer_replica`) across a manual failover and a SIGKILLed primary:
/// writes recover within a bound (printed), reads keep flowing, the untouched shard sees no
/// error, no request outlives op_timeout (plus slack).
#[test]
fn failover_under_load() {
    // Without full coverage, a shard without a primary does not take the others down
    // (`CLUSTERDOWN` everywhere until the replica is promoted), so the other shards' traffic
    // must flow untouched.
    let mut cluster = RedisCluster::start_with(&["--cluster-require-full-coverage", "no"]);
    let respite = respite_over(&cluster, "prefer_replica", "");
    let original = cluster.slot_owners();
    let (pa, pb, pc) = (
        original[0].clone(),
        original[8000].clone(),
        original[16000].clone(),
    );
    let slots_of = |p: &str| -> Vec<bool> { original.iter().map(|o| o == p).collect() };
    let (in_a, in_b, in_c) = (slots_of(&pa), slots_of(&pb), slots_of(&pc));

    // Preload the readers' keys on their owners and wait until replicated.
    let mut conns: HashMap<String, RawClient> = HashMap::new();
    for i in 0..READ_KEYS {
        let k = format!("r:{i}");
        let owner = &original[key_slot(k.as_bytes()) as usize];
        let c = conns
            .entry(owner.clone())
            .or_insert_with(|| RawClient::connect(owner));
        assert_eq!(cmd(c, &["SET", &k, &format!("r-{i}")]), ok());
    }
    for (owner, c) in &mut conns {
        assert_eq!(
            cmd(c, &["WAIT", "1", "5000"]),
            Reply::Int(1),
            "replication of {owner}"
        );
    }

    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (addr, stop) = (respite.addr(), stop.clone());
            std::thread::spawn(move || timed_worker(addr, t, t < 2, epoch, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    // (a) Manual failover of shard A.
    let ra = cluster.replicas_of(&pa)[0].clone();
    let ta = epoch.elapsed();
    cluster.failover(&ra);
    let ta_end = epoch.elapsed();
    std::thread::sleep(Duration::from_secs(3));

    // (b) SIGKILL the primary of shard B.
    let heir = cluster.replicas_of(&pb)[0].clone();
    let tb = epoch.elapsed();
    cluster.kill(&pb);
    cluster.wait_stable(Duration::from_secs(30));
    let tb_stable = epoch.elapsed();
    assert!(cluster.primaries().contains(&heir));
    std::thread::sleep(Duration::from_secs(6));
    stop.store(true, Ordering::Relaxed);
    let mut recs = Vec::new();
    let mut wrong = Vec::new();
    for w in workers {
        let (r, bad) = w.join().expect("worker");
        recs.extend(r);
        wrong.extend(bad);
    }
    recs.sort_by_key(|r| r.at);
    let end = epoch.elapsed();

    // (a): how long writes to shard A failed.
    let a_fail: Vec<&Rec> = recs
        .iter()
        .filter(|r| r.write && !r.ok && in_a[r.slot as usize] && r.at >= ta)
        .collect();
    let a_window = match (a_fail.first(), a_fail.last()) {
        (Some(f), Some(l)) => l.at + l.lat - f.at,
        _ => Duration::ZERO,
    };
    println!(
        "(a) CLUSTER FAILOVER took {:?}; {} failed writes to its slots over {a_window:?}",
        ta_end - ta,
        a_fail.len()
    );

    // (b): time from the kill until writes to shard B's slots succeed again.
    let b_writes: Vec<&Rec> = recs
        .iter()
        .filter(|r| r.write && in_b[r.slot as usize] && r.at >= tb)
        .collect();
    let last_fail = b_writes.iter().rposition(|r| !r.ok);
    let recovered = match last_fail {
        None => b_writes.first().map(|_| Duration::ZERO),
        Some(i) => b_writes[i + 1..].first().map(|r| r.at + r.lat - tb),
    };
    let fails_b = b_writes.iter().filter(|r| !r.ok).count();
    println!(
        "(b) SIGKILL of a primary: cluster stable after {:?}; {fails_b} failed writes to its \
         slots; writes recovered after {recovered:?} (of {} writes to its slots after the kill)",
        tb_stable - tb,
        b_writes.len()
    );
    let recovery = recovered.unwrap_or_else(|| {
        panic!(
            "writes to the killed primary's slots never succeeded again ({fails_b} failed); \
             respite log:\n{}",
            tail(&respite.log(), 30)
        )
    });
    assert!(
        recovery < Duration::from_secs(15),
        "write recovery took {recovery:?}"
    );
    let window_end = tb + recovery.max(Duration::from_secs(1));

    // Reads kept flowing: other shards during the window, shard B afterwards.
    let reads_ok = |from: Duration, to: Duration, b: bool| {
        recs.iter()
            .filter(|r| !r.write && r.ok && r.at >= from && r.at < to && in_b[r.slot as usize] == b)
            .count()
    };
    let other_in_window = reads_ok(tb, window_end, false);
    let b_in_window = reads_ok(tb, window_end, true);
    let b_after = reads_ok(tb + recovery, end, true);
    println!(
        "reads ok during the kill window: {other_in_window} other shards, {b_in_window} shard B; \
         shard B after recovery: {b_after}"
    );
    assert!(
        other_in_window > 0,
        "no successful reads of other shards during the window"
    );
    assert!(
        b_after > 0,
        "no successful reads of the killed shard after recovery"
    );

    // Shard C was never touched: every request to it succeeded.
    let c_fail: Vec<&Rec> = recs
        .iter()
        .filter(|r| in_c[r.slot as usize] && !r.ok)
        .collect();
    assert!(
        c_fail.is_empty(),
        "{} failed requests to the untouched shard: {:?}",
        c_fail.len(),
        &c_fail[..c_fail.len().min(5)]
    );
    assert!(
        wrong.is_empty(),
        "wrong replies: {:?}",
        &wrong[..wrong.len().min(10)]
    );

    let stat = |n: &str| respite.stat(&format!("cluster.rc.{n}"));
    println!(
        "respite: refreshes periodic={} triggered={} failed={} topology_changed={} retries={} \
         redirects followed={}",
        stat("redis_cluster.refresh_periodic"),
        stat("redis_cluster.refresh_triggered"),
        stat("redis_cluster.refresh_failed"),
        stat("redis_cluster.topology_changed"),
        stat("redis_cluster.retries"),
        stat("upstream_internal_redirect_succeeded_total"),
    );

    // No request hung past op_timeout (plus scheduling slack).
    let max = recs.iter().map(|r| r.lat).max().unwrap_or_default();
    let over = recs.iter().filter(|r| r.lat > OP_TIMEOUT).count();
    println!(
        "{} requests; slowest {max:?}; {over} over op_timeout {OP_TIMEOUT:?}",
        recs.len()
    );
    assert!(max < OP_TIMEOUT + LATENCY_MARGIN, "a request took {max:?}");
}

// ---- a stopped replica ----------------------------------------------------------------------

/// `read_policy = "replica"`: with one replica SIGSTOPped, every write succeeds within
/// op_timeout, reads of its shard fail within op_timeout, and come back after SIGCONT.
#[test]
fn replica_sigstop_does_not_affect_writes() {
    let mut cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "replica", "");
    let owners = cluster.slot_owners();
    let shard = owners[0].clone();
    let stopped = cluster.replicas_of(&shard)[0].clone();
    let ks = keys_in_distinct_slots("s", 3000);
    let in_shard = |k: &str| owners[key_slot(k.as_bytes()) as usize] == shard;

    // Warm up: every node (the replica to be stopped included) has served respite.
    let mut c = respite.raw();
    for k in &ks[..300] {
        assert_eq!(cmd(&mut c, &["SET", k, "warm"]), ok());
    }
    for k in &ks[..300] {
        let r = cmd(&mut c, &["GET", k]);
        assert!(!r.is_error(), "GET {k} before the stop: {r:?}");
    }

    cluster.sigstop(&stopped);
    // Reads of the stopped replica's shard hang upstream: they must fail within op_timeout,
    // on their own connection, without holding up the writes.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (addr, stop) = (respite.addr(), stop.clone());
        let shard_keys: Vec<String> = ks
            .iter()
            .filter(|k| in_shard(k))
            .take(50)
            .cloned()
            .collect();
        std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let (mut n, mut slowest) = (0, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let k = &shard_keys[n % shard_keys.len()];
                let t = Instant::now();
                if try_cmd(&mut c, &["GET", k]).is_err() {
                    c = RawClient::connect(&addr);
                }
                slowest = slowest.max(t.elapsed());
                n += 1;
            }
            (n, slowest)
        })
    };
    let t = Instant::now();
    let (mut slowest, mut shard_writes) = (Duration::ZERO, 0);
    for (i, k) in ks.iter().enumerate() {
        let v = format!("after-stop-{i}");
        let t1 = Instant::now();
        assert_eq!(
            cmd(&mut c, &["SET", k, &v]),
            ok(),
            "SET {k} with a replica stopped"
        );
        let lat = t1.elapsed();
        assert!(
            lat < OP_TIMEOUT,
            "SET {k} took {lat:?} with a replica stopped"
        );
        slowest = slowest.max(lat);
        shard_writes += usize::from(in_shard(k));
    }
    stop.store(true, Ordering::Relaxed);
    let (reads, slowest_read) = reader.join().expect("reader");
    println!(
        "{} writes with {stopped} stopped in {:?} ({shard_writes} to its shard), slowest {slowest:?}; \
         {reads} reads of its shard, slowest {slowest_read:?}",
        ks.len(),
        t.elapsed()
    );
    assert!(shard_writes > 0);
    assert!(
        slowest_read < OP_TIMEOUT + LATENCY_MARGIN,
        "a read from the stopped replica's shard took {slowest_read:?}"
    );
    for (i, k) in ks.iter().enumerate().step_by(7) {
        assert_eq!(
            query(&owners[key_slot(k.as_bytes()) as usize], &["GET", k]),
            bulk(&format!("after-stop-{i}"))
        );
    }

    // Back: reads of that shard are served by the replica again.
    cluster.sigcont(&stopped);
    cluster.wait_stable(Duration::from_secs(30));
    let k = ks.iter().find(|k| in_shard(k)).expect("a key of the shard");
    let deadline = Instant::now() + Duration::from_secs(20);
    let t = Instant::now();
    loop {
        let r = try_cmd(&mut c, &["GET", k]);
        if matches!(&r, Ok(Reply::Bulk(Some(_)))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads of {stopped}'s shard did not come back: {r:?}"
        );
        if r.is_err() {
            c = respite.raw();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "reads of the shard came back {:?} after SIGCONT + stable",
        t.elapsed()
    );
}

// ---- read policies --------------------------------------------------------------------------

/// Each read policy, checked with every node's INFO commandstats: where the GETs ran, SETs on
/// primaries only (a replica's SETs are exactly its primary's), no MOVED-refused calls.
#[test]
fn read_policy_distribution() {
    let cluster = RedisCluster::start();
    const N: usize = 300;
    for policy in [
        "primary",
        "prefer_primary",
        "replica",
        "prefer_replica",
        "any",
    ] {
        let respite = respite_over(&cluster, policy, "");
        let mut clients: Vec<RawClient> = (0..16).map(|_| respite.raw()).collect();
        let ks = keys(&format!("rp:{policy}"), N);
        // Open every upstream connection before counting.
        for c in &mut clients {
            assert!(
                !cmd(c, &["GET", "rp:warmup"]).is_error(),
                "{policy}: warm-up GET"
            );
        }
        cluster.reset_stats();
        for (i, k) in ks.iter().enumerate() {
            assert_eq!(
                cmd(&mut clients[i % 16], &["SET", k, k]),
                ok(),
                "{policy}: SET {k}"
            );
        }
        let primaries = cluster.primaries();
        let replicas = cluster.replicas();
        // Replicas execute (and count) the SETs their primary streams to them: wait for that.
        let deadline = Instant::now() + Duration::from_secs(10);
        while replicas.iter().any(|r| {
            let mine = cluster.commandstats(r).get("set").copied().unwrap_or(0);
            mine != cluster
                .commandstats(&cluster.primary_of(r))
                .get("set")
                .copied()
                .unwrap_or(0)
        }) {
            assert!(
                Instant::now() < deadline,
                "{policy}: replication did not catch up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for (i, k) in ks.iter().enumerate() {
            assert_eq!(
                cmd(&mut clients[i % 16], &["GET", k]),
                bulk(k),
                "{policy}: GET {k}"
            );
        }

        let stats: BTreeMap<String, _> = cluster
            .nodes()
            .iter()
            .map(|n| (n.clone(), cluster.commandstats_full(n)))
            .collect();
        let count = |nodes: &[String], cmd: &str| -> (u64, u64) {
            nodes.iter().fold((0, 0), |(c, r), n| {
                let s = stats[n].get(cmd).copied().unwrap_or_default();
                (c + s.calls, r + s.rejected_calls)
            })
        };
        let (get_p, get_p_rej) = count(&primaries, "get");
        let (get_r, get_r_rej) = count(&replicas, "get");
        let (set_p, set_p_rej) = count(&primaries, "set");
        let (_, set_r_rej) = count(&replicas, "set");
        println!(
            "{policy}: GETs on primaries {get_p}, on replicas {get_r}; SETs on primaries {set_p}"
        );
        assert_eq!(
            get_p + get_r,
            N as u64,
            "{policy}: every GET ran once: {stats:?}"
        );
        assert_eq!(
            (get_p_rej, get_r_rej, set_p_rej, set_r_rej),
            (0, 0, 0, 0),
            "{policy}: MOVED/READONLY refusals: {stats:?}"
        );
        // Writes on primaries only: a replica's SETs are exactly its primary's (replicated).
        assert_eq!(set_p, N as u64, "{policy}: SETs on primaries");
        for r in &replicas {
            let p = cluster.primary_of(r);
            assert_eq!(
                stats[r].get("set").map(|s| s.calls),
                stats[&p].get("set").map(|s| s.calls),
                "{policy}: {r} ran SETs that did not come from its primary {p}"
            );
        }
        match policy {
            "primary" | "prefer_primary" => assert_eq!(get_r, 0, "{policy}: GETs on replicas"),
            "replica" | "prefer_replica" => assert_eq!(get_p, 0, "{policy}: GETs on primaries"),
            _ => assert!(
                get_p > 0 && get_r > 0,
                "any: GETs on primaries {get_p}, replicas {get_r}"
            ),
        }
    }
}

// ---- redirects without a topology refresh ---------------------------------------------------

/// With refreshes off (60 s, thresholds 0), MOVED after a reshard is followed (stat counted, no
/// refresh triggered); a node added later is reached through an unknown-host connection, or the MOVED goes to
/// the client when `max_upstream_unknown_connections = 0`.
#[test]
fn redirects_and_unknown_hosts() {
    let mut cluster = RedisCluster::start();
    // Only redirects can update these respites' maps: no periodic or triggered refresh.
    let no_refresh = "cluster_refresh_rate = \"60s\"\nredirect_refresh_threshold = 0\n\
                      failure_refresh_threshold = 0";
    let respite = respite_over(&cluster, "primary", no_refresh);
    let capped = respite_over(
        &cluster,
        "primary",
        &format!("{no_refresh}\nmax_upstream_unknown_connections = 0"),
    );
    let original = cluster.slot_owners();
    let (p0, p1) = (original[0].clone(), original[8000].clone());
    let ks = keys("mv", 2000);
    let mut c = respite.raw();
    for k in &ks {
        assert_eq!(cmd(&mut c, &["SET", k, &format!("v-{k}")]), ok(), "SET {k}");
    }
    let before = respite.stats();

    // Move 500 slots p0 → p1 (a known host): MOVED is followed.
    cluster.reshard(&p0, &p1, 500);
    let moved: Vec<&String> = ks.iter().filter(|k| key_slot(k.as_bytes()) < 500).collect();
    assert!(!moved.is_empty());
    for k in &ks {
        assert_eq!(
            cmd(&mut c, &["GET", k]),
            bulk(&format!("v-{k}")),
            "GET {k} after reshard"
        );
    }
    let mut cc = capped.raw();
    for k in &moved {
        assert_eq!(
            cmd(&mut cc, &["GET", k]),
            bulk(&format!("v-{k}")),
            "GET {k} (capped respite)"
        );
    }
    let stat = |r: &Respite, n: &str| r.stat(&format!("cluster.rc.{n}"));
    let followed = stat(&respite, "upstream_internal_redirect_succeeded_total");
    println!(
        "{} keys moved; redirects followed {followed} (was {}), refreshes triggered {}",
        moved.len(),
        before
            .get("cluster.rc.upstream_internal_redirect_succeeded_total")
            .copied()
            .unwrap_or(0),
        stat(&respite, "redis_cluster.refresh_triggered")
    );
    assert!(followed > 0, "no redirect followed: {:?}", respite.stats());
    assert_eq!(stat(&respite, "redis_cluster.refresh_triggered"), 0);

    // Move 300 slots to a node respite has never heard of: reached through an unknown-host
    // connection, or refused with the redirect when the cap is 0.
    let new = cluster.add_node();
    cluster.reshard(&p1, &new, 300);
    let owners = cluster.slot_owners();
    let on_new: Vec<&String> = ks
        .iter()
        .filter(|k| owners[key_slot(k.as_bytes()) as usize] == new)
        .collect();
    assert!(!on_new.is_empty());
    for k in &on_new {
        assert_eq!(
            cmd(&mut c, &["GET", k]),
            bulk(&format!("v-{k}")),
            "GET {k} on the new node"
        );
    }
    let unknown = stat(&respite, "redis_cluster.upstream_cx_unknown_total");
    println!(
        "{} keys on the new node; unknown-host connections {unknown}",
        on_new.len()
    );
    assert!(unknown > 0, "{:?}", respite.stats());
    let k = on_new[0];
    let slot = key_slot(k.as_bytes());
    assert_eq!(
        cmd(&mut cc, &["GET", k]),
        Reply::Error(format!("MOVED {slot} {new}")),
        "capped respite (max_upstream_unknown_connections = 0)"
    );
    assert!(
        stat(
            &capped,
            "redis_cluster.max_upstream_unknown_connections_reached"
        ) > 0,
        "{:?}",
        capped.stats()
    );
}

// ---- a redirect loop --------------------------------------------------------------------------

/// A slot left half-migrated (MIGRATING on its owner, the target not IMPORTING) makes a real
/// ASK → MOVED → ASK … loop for a missing key: Respite follows at most 5 redirects and answers
/// `-TRYAGAIN`, counts a failed redirect, and serves the slot again once it is stable.
#[test]
fn redirect_loop_is_bounded() {
    let cluster = RedisCluster::start();
    let respite = respite_over(
        &cluster,
        "primary",
        "cluster_refresh_rate = \"60s\"\nredirect_refresh_threshold = 0",
    );
    let key = "loop-key";
    let slot = key_slot(key.as_bytes());
    let owner = cluster.slot_owner(slot);
    let other = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != owner)
        .expect("a second primary");
    let other_id = cluster.node_id(&other);
    let mut c = respite.raw();
    assert_eq!(cmd(&mut c, &["GET", key]), Reply::Bulk(None));

    let slot_text = slot.to_string();
    assert_eq!(
        query(
            &owner,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &other_id]
        ),
        ok()
    );
    let reply = cmd(&mut c, &["GET", key]);
    assert_eq!(
        reply,
        Reply::Error("TRYAGAIN too many cluster redirects for one request".into())
    );
    assert!(respite.stat("cluster.rc.upstream_internal_redirect_failed_total") >= 1);
    // Other slots are unaffected while this one loops.
    assert_eq!(cmd(&mut c, &["SET", "{other}", "v"]), ok());

    assert_eq!(
        query(&owner, &["CLUSTER", "SETSLOT", &slot_text, "STABLE"]),
        ok()
    );
    assert_eq!(cmd(&mut c, &["SET", key, "v"]), ok());
    assert_eq!(cmd(&mut c, &["GET", key]), bulk("v"));
}

// ---- upstream handshake -----------------------------------------------------------------------

/// With an ACL user for the proxy, every upstream connection sends `AUTH proxy <pw>` and then,
/// on replicas, `READONLY`: reads under `read_policy = "replica"` succeed and every replica
/// shows the proxy's connections as `user=proxy` with the readonly flag `r`.
/// A user denied READONLY fails the replica handshakes: counted as `upstream_cx_connect_fail`,
/// reads under `replica` fail (`no upstream host`, or `upstream failure` when a retry is under
/// way), writes succeed.
#[test]
fn handshake_auth_then_readonly() {
    let cluster = RedisCluster::start();
    for node in cluster.nodes() {
        assert_eq!(
            query(
                &node,
                &["ACL", "SETUSER", "proxy", "on", ">pw", "~*", "&*", "+@all"]
            ),
            ok()
        );
    }
    let creds = "auth_username = \"proxy\"\nauth_password = \"pw\"";
    let respite = respite_over(&cluster, "replica", creds);
    let mut c = respite.raw();
    for i in 0..200 {
        let k = format!("hs:{i}");
        assert_eq!(cmd(&mut c, &["SET", &k, &k]), ok());
    }
    // Replicas apply the writes asynchronously: wait for the last one to be readable.
    let deadline = Instant::now() + Duration::from_secs(5);
    while cmd(&mut c, &["GET", "hs:199"]) != bulk("hs:199") {
        assert!(Instant::now() < deadline, "replica reads never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    for replica in cluster.replicas() {
        let list = query(&replica, &["CLIENT", "LIST"]).text();
        let proxy: Vec<&str> = list
            .lines()
            .filter(|l| l.contains(" user=proxy "))
            .collect();
        assert!(
            !proxy.is_empty(),
            "{replica}: no proxy connection in {list}"
        );
        for line in proxy {
            let flags = line
                .split(' ')
                .find_map(|f| f.strip_prefix("flags="))
                .unwrap_or_default();
            assert!(flags.contains('r'), "{replica}: not READONLY: {line}");
        }
    }
    assert_eq!(respite.stat("cluster.rc.upstream_cx_connect_fail"), 0);

    // A user that may not run READONLY: the replica handshakes fail and are counted, reads
    // under `replica` fail, writes are untouched.
    for node in cluster.nodes() {
        assert_eq!(
            query(
                &node,
                &[
                    "ACL",
                    "SETUSER",
                    "noro",
                    "on",
                    ">pw",
                    "~*",
                    "&*",
                    "+@all",
                    "-readonly"
                ]
            ),
            ok()
        );
    }
    let creds = "auth_username = \"noro\"\nauth_password = \"pw\"";
    let denied = respite_over(&cluster, "replica", creds);
    let mut c = denied.raw();
    let deadline = Instant::now() + Duration::from_secs(5);
    while denied.stat("cluster.rc.upstream_cx_connect_fail") < 3 {
        assert!(Instant::now() < deadline, "failed handshakes not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cmd(&mut c, &["SET", "hs:x", "1"]), ok());
    // A replica between attempts answers `no upstream host` at once; one whose retry is under
    // way queues the read and answers `upstream failure` when that handshake fails too. Either
    // is Envoy's text for the same fact: the read found no usable replica.
    let read = cmd(&mut c, &["GET", "hs:x"]);
    assert!(
        read == Reply::Error("no upstream host".into())
            || read == Reply::Error("upstream failure".into()),
        "read under `replica` with every READONLY refused: {read:?}"
    );
}

// ---- SCAN across a slot move ------------------------------------------------------------------

/// A full SCAN through Respite while a slot moves between primaries halfway: every key outside
/// the moved slot is returned (the SCAN guarantee), because the cursor names its node by a
/// stable order (primary address), not by an order that a slot move changes.
#[test]
fn scan_survives_a_slot_move() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "");
    let mut c = respite.raw();
    let keys = keys("sc", 3000);
    for k in &keys {
        assert_eq!(cmd(&mut c, &["SET", k, "1"]), ok());
    }
    let owners = cluster.slot_owners();
    // redis-cli moves the lowest slot of the source: slot 0's owner loses slot 0.
    let from = owners[0].clone();
    let to = owners[16383].clone();
    assert_ne!(from, to);
    let changed = respite.stat("cluster.rc.redis_cluster.topology_changed");

    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut cursor = "0".to_string();
    let mut rounds = 0;
    loop {
        let reply = cmd(&mut c, &["SCAN", &cursor, "COUNT", "100"]);
        let Reply::Array(Some(parts)) = reply else {
            panic!("SCAN reply {reply:?}");
        };
        let (Some(Reply::Bulk(Some(next))), Some(Reply::Array(Some(batch)))) =
            (parts.first(), parts.get(1))
        else {
            panic!("SCAN reply {parts:?}");
        };
        for k in batch {
            *seen.entry(k.text()).or_default() += 1;
        }
        cursor = String::from_utf8(next.clone()).expect("cursor");
        rounds += 1;
        if rounds == 10 {
            cluster.reshard(&from, &to, 1);
            let deadline = Instant::now() + Duration::from_secs(10);
            while respite.stat("cluster.rc.redis_cluster.topology_changed") == changed {
                assert!(Instant::now() < deadline, "Respite never saw the slot move");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if cursor == "0" {
            break;
        }
    }
    assert!(
        rounds > 10,
        "the scan ended before the slot moved ({rounds} rounds)"
    );
    let dups = seen.values().filter(|&&n| n > 1).count();
    println!(
        "scan: {rounds} rounds, {} keys seen, {dups} more than once",
        seen.len()
    );
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| key_slot(k.as_bytes()) != 0 && !seen.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} keys never returned: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

// ---- order of one client's commands to a slot being migrated ---------------------------------

/// One client pipelines `MSET {t}a 1 {t}b 1` and `SET {t}a 2` while slot `{t}` is half
/// migrated (`{t}a` already on the target): the MSET gets TRYAGAIN (its keys are split) and
/// the SET gets ASK. The SET must not overtake the MSET's retry: `{t}a` ends as 2.
#[test]
fn commands_to_a_migrating_slot_keep_their_order() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "");
    let mut c = respite.raw();
    assert_eq!(cmd(&mut c, &["SET", "{t}a", "0"]), ok());
    assert_eq!(cmd(&mut c, &["SET", "{t}b", "0"]), ok());
    let slot = key_slot(b"{t}");
    let source = cluster.slot_owner(slot);
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != source)
        .expect("a second primary");
    let (source_id, target_id) = (cluster.node_id(&source), cluster.node_id(&target));
    let (host, port) = target.rsplit_once(':').expect("ip:port");
    let s = slot.to_string();
    assert_eq!(
        query(
            &target,
            &["CLUSTER", "SETSLOT", &s, "IMPORTING", &source_id]
        ),
        ok()
    );
    assert_eq!(
        query(
            &source,
            &["CLUSTER", "SETSLOT", &s, "MIGRATING", &target_id]
        ),
        ok()
    );
    let migrate = |key: &str| {
        assert_eq!(
            query(
                &source,
                &["MIGRATE", host, port, "", "0", "5000", "KEYS", key]
            ),
            ok()
        );
    };
    migrate("{t}a");

    // How many TRYAGAIN the source has answered (Redis's INFO errorstats).
    let tryagains = || match query(&source, &["INFO", "errorstats"]) {
        Reply::Bulk(Some(text)) => String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("errorstat_TRYAGAIN:count="))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0),
        other => panic!("INFO errorstats: {other:?}"),
    };
    let before = tryagains();
    let mut batch = RawClient::encode(&[b"MSET", b"{t}a", b"1", b"{t}b", b"1"]);
    batch.extend(RawClient::encode(&[b"SET", b"{t}a", b"2"]));
    c.send_raw(&batch);
    // The rest of the slot moves only once the source answered the MSET with TRYAGAIN (its
    // keys split): a fixed 3 ms sleep lost that race on a loaded machine, and the MSET then
    // met the slot whole on the target.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tryagains() == before {
        assert!(
            Instant::now() < deadline,
            "the MSET never reached the source"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    migrate("{t}b");
    for node in cluster.primaries() {
        assert_eq!(
            query(&node, &["CLUSTER", "SETSLOT", &s, "NODE", &target_id]),
            ok()
        );
    }
    assert_eq!(Reply::parse(&c.read_reply()), ok(), "MSET");
    assert_eq!(Reply::parse(&c.read_reply()), ok(), "SET");
    assert_eq!(cmd(&mut c, &["GET", "{t}a"]), bulk("2"));
    assert_eq!(query(&target, &["GET", "{t}a"]), bulk("2"));
    assert!(
        respite.stat("cluster.rc.redis_cluster.retries") >= 1,
        "no TRYAGAIN was retried"
    );
}

// ---- Blocking commands across a slot migration and a failover ------------------------------

/// `blocked_clients` of `addr`'s `INFO clients`.
fn blocked_on(addr: &str) -> i64 {
    let info = query(addr, &["INFO", "clients"]).text();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no blocked_clients in INFO clients of {addr}: {info}"))
}

/// Waits until `addr` has `n` blocked clients; panics after 10 s.
fn wait_blocked(addr: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while blocked_on(addr) != n {
        assert!(
            Instant::now() < deadline,
            "{addr} never had {n} blocked clients"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lowest slot of a primary (what `reshard … 1` moves), that primary, another one, and a key
/// `prefix:N` of the slot.
fn slot_to_move(cluster: &RedisCluster, prefix: &str) -> (u16, String, String, String) {
    let ranges = cluster.slot_ranges();
    let (&(slot, _), (from, _)) = ranges.iter().next().expect("a slot range");
    let from = from.clone();
    let to = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != from)
        .expect("a second primary");
    let key = (0..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .expect("a key of the slot");
    (slot, from, to, key)
}

/// Transactions whose slot moved behind Respite's back (part of
/// `blocked_client_across_slot_migration_and_failover`, sharing its cluster; Respite's periodic
/// refresh is 60 s here, so only the redirect tells it): without WATCH, the old owner's `MOVED`
/// at queue time aborts the first attempt there and the transaction runs once at the new owner,
/// its large command (held as the client's frame) re-sent byte for byte;
/// with WATCH, EXEC answers nil and nothing runs. Moves the lowest slot of the first primary to
/// a second one and back.
fn transactions_across_a_slot_move(cluster: &RedisCluster) {
    let respite = respite_over(cluster, "primary", "cluster_refresh_rate = \"60s\"");
    let (slot, from, to, key) = slot_to_move(cluster, "txm");
    let mut c = respite.raw();
    assert_eq!(cmd(&mut c, &["SET", &key, "0"]), ok());

    cluster.reshard(&from, &to, 1);
    assert_eq!(cluster.slot_owner(slot), to);
    cluster.reset_stats();
    assert_eq!(cmd(&mut c, &["MULTI"]), ok());
    // A large command first: queued as the client's frame, it is what the move re-sends.
    let big_key = format!("{{{key}}}big");
    let big: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.cmd(&[b"SET", big_key.as_bytes(), &big]), b"+QUEUED\r\n");
    for _ in 0..2 {
        assert_eq!(cmd(&mut c, &["INCR", &key]), Reply::Simple("QUEUED".into()));
    }
    assert_eq!(
        cmd(&mut c, &["EXEC"]),
        Reply::Array(Some(vec![ok(), Reply::Int(1), Reply::Int(2)]))
    );
    assert_eq!(query(&to, &["GET", &key]), bulk("2"));
    let mut at_to = RawClient::connect(&to);
    assert!(
        at_to.cmd(&[b"GET", big_key.as_bytes()])
            == [format!("${}\r\n", big.len()).as_bytes(), &big, b"\r\n"].concat(),
        "the large command re-sent byte for byte"
    );
    // The premise: the first attempt went to the old owner, which refused it.
    let at_from = cluster.commandstats_full(&from);
    assert!(
        at_from.get("multi").is_some_and(|s| s.calls >= 1),
        "no MULTI reached the old owner {from}: {at_from:?}"
    );
    assert_eq!(cluster.commandstats(&to).get("exec"), Some(&1));

    assert_eq!(cmd(&mut c, &["WATCH", &key]), ok());
    cluster.reshard(&to, &from, 1);
    assert_eq!(cluster.slot_owner(slot), from);
    assert_eq!(cmd(&mut c, &["MULTI"]), ok());
    assert_eq!(
        cmd(&mut c, &["SET", &key, "lost"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(cmd(&mut c, &["EXEC"]), Reply::Array(None));
    assert_eq!(query(&from, &["GET", &key]), bulk("2"));
    // The connection goes on: the next command reaches the key's new owner.
    assert_eq!(cmd(&mut c, &["GET", &key]), bulk("2"));
}

/// Large requests over the cluster (part of `blocked_client_across_slot_migration_and_failover`,
/// sharing its cluster): a 2 MiB `SET` goes on a leased connection of its own; after its slot
/// moved (Respite's map not refreshed), the old owner's `MOVED` is followed on a lease to the
/// new owner, which then holds the value byte for byte; the client never sees the move.
fn large_requests_across_a_slot_move(cluster: &RedisCluster) {
    let respite = respite_over(cluster, "primary", "cluster_refresh_rate = \"60s\"");
    let (slot, from, to, key) = slot_to_move(cluster, "large");
    let value = |fill: u8| vec![fill; 2 << 20];
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", key.as_bytes(), &value(b'a')]), b"+OK\r\n");
    assert_eq!(query(&from, &["STRLEN", &key]), Reply::Int(2 << 20));
    cluster.reshard(&from, &to, 1);
    assert_eq!(cluster.slot_owner(slot), to);
    let leased = respite.stat("cluster.rc.leased_cx_total");
    assert_eq!(c.cmd(&[b"SET", key.as_bytes(), &value(b'b')]), b"+OK\r\n");
    assert!(
        respite.stat("cluster.rc.leased_cx_total") >= leased + 2,
        "the SET and its redirect each on a lease: {:?}",
        respite.stats()
    );
    assert_eq!(query(&to, &["STRLEN", &key]), Reply::Int(2 << 20));
    assert_eq!(query(&to, &["GETRANGE", &key, "-2", "-1"]), bulk("bb"));
    assert_eq!(cmd(&mut c, &["STRLEN", &key]), Reply::Int(2 << 20));
}

/// Pub/sub over the cluster (part of `blocked_client_across_slot_migration_and_failover`,
/// sharing its cluster): a shard channel subscribed through Respite keeps receiving after its
/// slot moved to another primary (Redis ends the subscription with `sunsubscribe`; Respite
/// subscribes at the new owner, and the client sees nothing of it) and after that primary fails
/// over; classic channels and patterns reach their subscribers wherever published; the counts
/// of SPUBLISH, PUBLISH and PUBSUB NUMSUB are the local subscribers'.
fn pubsub_across_a_slot_move_and_a_failover(cluster: &RedisCluster) {
    let respite = respite_over(cluster, "primary", "");
    let ranges = cluster.slot_ranges();
    // Neither node owns slot 0, which the tests after this one move and fail over.
    let (&(slot, _), (from, _)) = ranges.iter().nth(1).expect("a second slot range");
    let from = from.clone();
    let to = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != from && *p != cluster.slot_owner(0))
        .expect("a third primary");
    let chan = (0..)
        .map(|i| format!("sch:{i}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .expect("a channel of the slot");
    let mut sub = respite.raw();
    let confirm = |word: &str, name: &str, n: usize| {
        format!(
            "*3\r\n${}\r\n{word}\r\n${}\r\n{name}\r\n:{n}\r\n",
            word.len(),
            name.len()
        )
        .into_bytes()
    };
    let smessage = |name: &str, payload: &str| {
        format!(
            "*3\r\n$8\r\nsmessage\r\n${}\r\n{name}\r\n${}\r\n{payload}\r\n",
            name.len(),
            payload.len()
        )
        .into_bytes()
    };
    assert_eq!(
        sub.cmd(&[b"SSUBSCRIBE", chan.as_bytes()]),
        confirm("ssubscribe", &chan, 1)
    );
    let mut classic = respite.raw();
    assert_eq!(
        classic.cmd(&[b"SUBSCRIBE", b"news"]),
        confirm("subscribe", "news", 1)
    );
    assert_eq!(
        classic.cmd(&[b"PSUBSCRIBE", b"ne*"]),
        confirm("psubscribe", "ne*", 2)
    );
    let mut publisher = respite.raw();
    assert_eq!(
        cmd(&mut publisher, &["SPUBLISH", &chan, "one"]),
        Reply::Int(1)
    );
    assert_eq!(sub.read_reply(), smessage(&chan, "one"));
    assert_eq!(
        cmd(&mut publisher, &["PUBLISH", "news", "n1"]),
        Reply::Int(2)
    );
    assert!(classic.read_reply().ends_with(b"$2\r\nn1\r\n"));
    assert!(classic.read_reply().ends_with(b"$2\r\nn1\r\n"));
    // Classic pub/sub lives on one node (slot 0's primary). Published straight at another
    // node, a message still reaches both subscriptions (Redis Cluster delivers it everywhere).
    assert_eq!(
        query(&cluster.slot_owner(0), &["PUBSUB", "NUMPAT"]),
        Reply::Int(1)
    );
    let elsewhere = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != cluster.slot_owner(0))
        .expect("a second primary");
    assert_eq!(query(&elsewhere, &["PUBLISH", "news", "n2"]), Reply::Int(0));
    assert!(classic.read_reply().ends_with(b"$2\r\nn2\r\n"));
    assert!(classic.read_reply().ends_with(b"$2\r\nn2\r\n"));
    assert_eq!(
        cmd(&mut publisher, &["PUBSUB", "SHARDNUMSUB", &chan]),
        Reply::Array(Some(vec![bulk(&chan), Reply::Int(1)]))
    );

    // The slot moves: the subscription follows, unseen.
    cluster.reshard(&from, &to, 1);
    assert_eq!(cluster.slot_owner(slot), to);
    let deadline = Instant::now() + Duration::from_secs(10);
    while cmd(&mut publisher, &["SPUBLISH", &chan, "probe"]) != Reply::Int(1) {
        assert!(
            Instant::now() < deadline,
            "never subscribed at the new owner"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(sub.read_reply(), smessage(&chan, "probe"));
    assert_eq!(
        query(&to, &["PUBSUB", "SHARDNUMSUB", &chan]),
        Reply::Array(Some(vec![bulk(&chan), Reply::Int(1)]))
    );
    assert_eq!(
        cmd(&mut publisher, &["SPUBLISH", &chan, "two"]),
        Reply::Int(1)
    );
    assert_eq!(sub.read_reply(), smessage(&chan, "two"));
    assert!(respite.stat("pubsub.upstream_resubscribe") >= 1);

    // The new owner fails over: its replica takes the slot, and the subscription with it.
    let replica = cluster
        .replicas_of(&to)
        .into_iter()
        .next()
        .expect("a replica");
    cluster.failover(&replica);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Reply::Int(1)) = try_cmd(&mut publisher, &["SPUBLISH", &chan, "probe2"]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never subscribed after the failover"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sub.read_reply(), smessage(&chan, "probe2"));
    // Still subscribed, as far as the client knows.
    assert_eq!(sub.cmd(&[b"PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
}

/// A client blocked in BLPOP through Respite while its slot moves to another primary (Redis
/// answers the blocked client `MOVED`) is blocked again at the new owner, without seeing the
/// move, and is served there exactly once. After a failover of that primary Redis unblocks its
/// blocked clients with `-UNBLOCKED …`: the client gets that error, the command is not issued
/// again, and an element pushed afterwards is served to nobody (never twice).
#[test]
fn blocked_client_across_slot_migration_and_failover() {
    let cluster = RedisCluster::start();
    transactions_across_a_slot_move(&cluster);
    large_requests_across_a_slot_move(&cluster);
    pubsub_across_a_slot_move_and_a_failover(&cluster);
    let respite = respite_over(&cluster, "primary", "");
    // The lowest slot of a primary: what `reshard … 1` moves.
    let ranges = cluster.slot_ranges();
    let (&(first, _), (from, _)) = ranges.iter().next().expect("a slot range");
    let to = cluster
        .primaries()
        .into_iter()
        .find(|p| p != from)
        .expect("a second primary");
    let key = (0..)
        .map(|i| format!("bq:{i}"))
        .find(|k| key_slot(k.as_bytes()) == first)
        .expect("a key of the slot");

    let mut blocked = respite.raw();
    blocked.send(&[b"BLPOP", key.as_bytes(), b"0"]);
    wait_blocked(from, 1);
    cluster.reshard(from, &to, 1);
    assert_eq!(cluster.slot_owner(first), to);
    // Respite follows the MOVED the old owner gave the blocked client: blocked at `to` now.
    wait_blocked(&to, 1);
    assert_eq!(blocked_on(from), 0);
    let mut other = respite.raw();
    assert_eq!(cmd(&mut other, &["LPUSH", &key, "v"]), Reply::Int(1));
    assert_eq!(
        Reply::parse(&blocked.read_reply()),
        Reply::Array(Some(vec![bulk(&key), bulk("v")]))
    );
    assert_eq!(query(&to, &["LLEN", &key]), Reply::Int(0));

    // A failover of `to`: its blocked clients are unblocked with an error, never re-issued.
    blocked.send(&[b"BLPOP", key.as_bytes(), b"0"]);
    wait_blocked(&to, 1);
    let replica = cluster
        .replicas_of(&to)
        .into_iter()
        .next()
        .expect("a replica");
    cluster.failover(&replica);
    let reply = Reply::parse(&blocked.read_reply());
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("UNBLOCKED")),
        "{reply:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match try_cmd(&mut other, &["LPUSH", &key, "w"]) {
            Ok(Reply::Int(1)) => break,
            r => assert!(Instant::now() < deadline, "LPUSH after the failover: {r:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(query(&replica, &["LLEN", &key]), Reply::Int(1));
}

// ---- Transient states: BUSY retried like TRYAGAIN -------------------------------------------

/// A primary running a script past `busy-reply-threshold` answers other clients `-BUSY`
/// without running their commands: a Redis Cluster pool sends such a request again (like
/// `TRYAGAIN`, 10 ms doubling to 200 ms) while within `op_timeout`, so the client gets its
/// value once the script ends, not `-BUSY` (counted in `redis_cluster.retries`).
#[test]
fn busy_node_is_retried_within_op_timeout() {
    let cluster = RedisCluster::start();
    let respite = respite_over(&cluster, "primary", "op_timeout = \"5s\"");
    let mut c = respite.raw();
    assert_eq!(cmd(&mut c, &["SET", "busy:k", "v"]), ok());
    let owner = cluster.key_owner(b"busy:k");
    assert_eq!(
        query(&owner, &["CONFIG", "SET", "busy-reply-threshold", "100"]),
        ok()
    );
    let retries = "cluster.rc.redis_cluster.retries";
    let before = respite.stat(retries);
    // 700 ms of script: under the nodes' 1 s cluster-node-timeout, so no failover starts.
    const SPIN: &str = "local t = redis.call('TIME') \
        while true do \
          local n = redis.call('TIME') \
          if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 700000 then return 1 end \
        end";
    let script = {
        let owner = owner.clone();
        std::thread::spawn(move || query(&owner, &["EVAL", SPIN, "0"]))
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let is_busy = |r: &Reply| matches!(r, Reply::Error(e) if e.starts_with("BUSY "));
    let mut busy = query(&owner, &["PING"]);
    while !is_busy(&busy) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        busy = query(&owner, &["PING"]);
    }
    assert!(is_busy(&busy), "the node never answered BUSY: {busy:?}");
    let t = Instant::now();
    let got = cmd(&mut c, &["GET", "busy:k"]);
    let took = t.elapsed();
    assert_eq!(script.join().expect("script"), Reply::Int(1));
    eprintln!("GET on a busy node answered after {took:?}");
    assert_eq!(got, bulk("v"), "after {took:?}");
    assert!(respite.stat(retries) > before, "no BUSY was retried");
}

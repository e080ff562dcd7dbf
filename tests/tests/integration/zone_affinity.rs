//! `read_policy = "local_zone_affinity"` and `"local_zone_affinity_replicas_and_primary"`
//! (Envoy `LOCAL_ZONE_AFFINITY*`) over a real Valkey 8 cluster: each node's zone is set with
//! `CONFIG SET availability-zone` (the runtime form of `--availability-zone`), Respite learns
//! it with `zone_discovery = true` (`INFO server`'s `availability_zone`), and the nodes'
//! `INFO commandstats` tell which node served the GETs.

use std::time::{Duration, Instant};

use respite_tests::cluster::{Reply, cluster_config, query};
use respite_tests::{RawClient, RedisCluster, Respite, free_port};

/// The longest Respite may take to learn the zones (refresh every 1s) and use them.
const LEARN: Duration = Duration::from_secs(10);

fn set_zone(addr: &str, zone: &str) {
    assert_eq!(
        query(addr, &["CONFIG", "SET", "availability-zone", zone]),
        Reply::Simple("OK".into()),
        "CONFIG SET availability-zone on {addr}"
    );
}

fn respite_over(cluster: &RedisCluster, read_policy: &str, zone: &str) -> Respite {
    let (port, admin) = (free_port(), free_port());
    let extra = format!("local_zone = \"{zone}\"\nzone_discovery = true");
    let cfg = cluster_config(port, admin, &cluster.seeds(), read_policy, &extra);
    Respite::start(&cfg, port, admin)
}

/// `n` keys owned by `primary`, each SET to its own name through `c`.
fn keys_of(cluster: &RedisCluster, c: &mut RawClient, primary: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..)
        .map(|i| format!("zone:{i}"))
        .filter(|k| cluster.key_owner(k.as_bytes()) == primary)
        .take(n)
        .collect();
    for k in &keys {
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), k.as_bytes()]), b"+OK\r\n");
    }
    keys
}

fn gets(cluster: &RedisCluster, addr: &str) -> u64 {
    cluster.commandstats(addr).get("get").copied().unwrap_or(0)
}

/// GETs every key through `c` (from a fresh stats slate) until, within [`LEARN`], one round
/// had every reply right and every GET served by `want` and none by a node of `others`.
/// Rounds before may see errors (a node just killed) or nil (a replica catching up).
fn reads_land_on(
    cluster: &RedisCluster,
    c: &mut RawClient,
    keys: &[String],
    want: &str,
    others: &[&str],
) {
    let deadline = Instant::now() + LEARN;
    loop {
        cluster.reset_stats();
        let mut wrong = Vec::new();
        for k in keys {
            let r = Reply::parse(&c.cmd(&[b"GET", k.as_bytes()]));
            if r != Reply::Bulk(Some(k.as_bytes().to_vec())) {
                wrong.push((k.clone(), r));
            }
        }
        let counts: Vec<(&str, u64)> = std::iter::once(want)
            .chain(others.iter().copied())
            .map(|a| (a, gets(cluster, a)))
            .collect();
        if wrong.is_empty()
            && counts[0].1 == keys.len() as u64
            && counts[1..].iter().all(|(_, n)| *n == 0)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GETs did not all go to {want} within {LEARN:?}: {counts:?}, wrong replies {wrong:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `local_zone_affinity`: the same-zone replica serves the reads; killed, another replica of
/// the shard (other zone) does, not the primary.
#[test]
fn reads_go_to_the_same_zone_replica_then_another_replica() {
    let mut cluster = RedisCluster::start_program("valkey-server", &[]);
    let primary = cluster.primaries()[0].clone();
    let local = cluster.replicas_of(&primary)[0].clone();
    // A second replica for the shard, in another zone.
    let other = cluster.add_node();
    let id = cluster.node_id(&primary);
    assert_eq!(
        query(&other, &["CLUSTER", "REPLICATE", &id]),
        Reply::Simple("OK".into())
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cluster.replicas_of(&primary).contains(&other) {
        assert!(
            Instant::now() < deadline,
            "{other} did not become a replica"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.wait_stable(Duration::from_secs(20));
    for n in cluster.nodes() {
        set_zone(&n, "zone-b");
    }
    set_zone(&local, "zone-a");

    let respite = respite_over(&cluster, "local_zone_affinity", "zone-a");
    let mut c = respite.raw();
    let keys = keys_of(&cluster, &mut c, &primary, 40);
    reads_land_on(&cluster, &mut c, &keys, &local, &[&other, &primary]);

    cluster.kill(&local);
    reads_land_on(&cluster, &mut c, &keys, &other, &[&primary]);
}

/// `local_zone_affinity_replicas_and_primary` with the local zone a primary's and no replica
/// there: that primary serves its shard's reads; under `local_zone_affinity` its replica does.
#[test]
fn replicas_and_primary_reads_go_to_the_same_zone_primary() {
    let cluster = RedisCluster::start_program("valkey-server", &[]);
    for n in cluster.nodes() {
        set_zone(&n, "zone-b");
    }
    let primary = cluster.primaries()[1].clone();
    let replica = cluster.replicas_of(&primary)[0].clone();
    set_zone(&primary, "zone-a");

    let respite = respite_over(
        &cluster,
        "local_zone_affinity_replicas_and_primary",
        "zone-a",
    );
    let mut c = respite.raw();
    let keys = keys_of(&cluster, &mut c, &primary, 40);
    reads_land_on(&cluster, &mut c, &keys, &primary, &[&replica]);

    let lza = respite_over(&cluster, "local_zone_affinity", "zone-a");
    let mut c = lza.raw();
    reads_land_on(&cluster, &mut c, &keys, &replica, &[&primary]);
}

//! Discovery against a real Redis Cluster (3 primaries, 3 replicas) made with `redis-cli
//! --cluster create`; skipped when `redis-server` or `redis-cli` is not on the PATH.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Discovery, slot_map};
use crate::cluster::CLUSTER_SLOTS;
use crate::cluster::topology::{SlotMap, TopologyCell};
use crate::config::{ClusterConfig, ClusterType, HostConfig, LbPolicy, RedisClusterConfig};
use crate::stats::Store;
use crate::upstream::ClusterSlotsClient;

/// Six `redis-server` processes, killed on drop (also when the test panics).
struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A port `p` such that `p` and its cluster bus port `p + 10000` are free now.
fn free_port(taken: &[u16]) -> u16 {
    for _ in 0..1000 {
        let p = fastrand::u16(20000..30000);
        if !taken.contains(&p)
            && TcpListener::bind(("127.0.0.1", p)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 10000)).is_ok()
        {
            return p;
        }
    }
    panic!("no free port pair found");
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl RedisCluster {
    fn start() -> RedisCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            _dir: dir,
        };
        let mut ports = Vec::new();
        for _ in 0..6 {
            let port = free_port(&ports);
            ports.push(port);
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(format!("nodes-{port}.conf"))
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(cluster._dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            cluster.nodes.push((port, child));
        }
        for &port in &ports {
            wait_until(Duration::from_secs(10), "redis-server to listen", || {
                TcpStream::connect(addr(port)).is_ok()
            });
        }
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(p, _)| *p).collect()
    }
}

fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config(ports: &[u16]) -> ClusterConfig {
    ClusterConfig {
        name: "live".into(),
        cluster_type: ClusterType::RedisCluster,
        // Two seeds only: the other nodes must be learned from the map.
        hosts: ports
            .iter()
            .take(2)
            .map(|&p| HostConfig {
                address: addr(p),
                address_text: format!("127.0.0.1:{p}"),
                weight: 1,
                name: None,
            })
            .collect(),
        lb_policy: LbPolicy::Ketama,
        least_request: Default::default(),
        hash: crate::config::KeyHash::Fnv1a64,
        connect_timeout: Duration::from_secs(1),
        auth_username: None,
        auth_password: None,
        credentials: Vec::new(),
        db: 0,
        connections_per_host: 1,
        redis_cluster: RedisClusterConfig {
            cluster_refresh_rate: Duration::from_millis(200),
            ..RedisClusterConfig::default()
        },
        health_checks: Vec::new(),
        outlier_detection: None,
        on_unhealthy: Default::default(),
        connection_rate_limit_per_sec: 0,
        max_pending_requests: 16384,
        max_leased_connections: 32,
        max_reply_bytes_in_flight: 64 << 20,
        tcp_keepalive: Default::default(),
        tls: None,
        dns: None,
    }
}

/// 3 shards of 1 replica each, covering every slot.
fn complete(map: &SlotMap) -> bool {
    map.shards.len() == 3
        && map.shards.iter().all(|s| s.replicas.len() == 1)
        && super::covered(map) == i64::from(CLUSTER_SLOTS)
}

#[test]
fn live_discovery_publishes_the_map_and_follows_a_failover() {
    if !have("redis-server") || !have("redis-cli") {
        eprintln!("redis-server or redis-cli not found: skipped");
        return;
    }
    let redis = RedisCluster::start();
    let cfg = config(&redis.ports());

    // Replicas show up in CLUSTER SLOTS a few seconds after `--cluster create` returns.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = ClusterSlotsClient::new(&cfg, stop);
    wait_until(Duration::from_secs(30), "every node to see 3x1", || {
        redis
            .ports()
            .iter()
            .all(|&p| slot_map(&client, addr(p)).is_ok_and(|m| complete(&m)))
    });

    let cell = Arc::new(TopologyCell::default());
    let store = Store::new();
    let discovery = Discovery::spawn(cfg, cell.clone(), store.clone());
    assert!(discovery.wait_first(Duration::from_secs(5)), "no first map");
    let (_, first) = cell.current().expect("a map");
    assert!(complete(&first), "{first:?}");

    // A coordinated manual failover: the replica of shard 0 becomes its primary.
    let replica = first.shards[0].replicas[0];
    let out = Command::new("redis-cli")
        .args(["-p", &replica.port().to_string(), "CLUSTER", "FAILOVER"])
        .output()
        .expect("redis-cli runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    wait_until(
        Duration::from_secs(10),
        "the map to show the failover",
        || {
            cell.current().is_some_and(|(_, m)| {
                m.shards.iter().any(|s| s.primary == replica)
                    && super::covered(&m) == i64::from(CLUSTER_SLOTS)
            })
        },
    );

    let stat = |s: &str| store.counter_value(&format!("cluster.live.redis_cluster.{s}"));
    assert!(stat("topology_changed").is_some_and(|n| n >= 1));
    assert!(stat("refresh_periodic").is_some_and(|n| n >= 2));
    assert_eq!(
        store.gauge_value("cluster.live.redis_cluster.slots_covered"),
        Some(i64::from(CLUSTER_SLOTS))
    );

    // Dropping the handle stops the thread: no refresh after a few periods.
    drop(discovery);
    std::thread::sleep(Duration::from_millis(100));
    let before = stat("refresh_periodic");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(stat("refresh_periodic"), before);
}

//! Per-worker pipelined upstream connections and the per-cluster pools that own them.
//!
//! Each worker keeps, per (listener, cluster), `connections_per_host` connections to every host;
//! all of that worker's sessions share them (Envoy: one connection per upstream host per worker).

mod conn;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub use conn::{Conn, SendError};

use crate::cluster::LoadBalancer;
use crate::config::{ClusterConfig, ListenerConfig};
use crate::stats::{Counter, Gauge, Store};

/// Reply given for requests lost with a failed upstream connection or past op_timeout (Envoy).
pub const UPSTREAM_FAILURE: &[u8] = b"-upstream failure\r\n";
/// Reply given when no host can take the request (Envoy).
pub const NO_UPSTREAM_HOST: &[u8] = b"-no upstream host\r\n";

/// Receives the reply to one request (or one part of a split request).
pub trait Deliver {
    /// `reply` is one complete RESP reply; `seq` and `part` are the values given in [`Target`].
    fn deliver(&self, seq: u64, part: u32, reply: &[u8]);
}

/// Where a reply goes.
#[derive(Clone)]
pub struct Target {
    pub sink: Rc<dyn Deliver>,
    pub seq: u64,
    pub part: u32,
}

impl Target {
    /// Hands `reply` to the sink.
    pub fn deliver(&self, reply: &[u8]) {
        self.sink.deliver(self.seq, self.part, reply)
    }
}

/// Connection settings: the parts of the listener's Envoy `ConnPoolSettings` that act on upstream
/// connections, plus the cluster's connect and auth settings. Listeners whose settings are equal
/// share one pool (and so its connections) per worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolSettings {
    pub op_timeout: Duration,
    pub max_buffer_size_before_flush: usize,
    pub buffer_flush_timeout: Duration,
    pub connect_timeout: Duration,
    pub auth_username: Option<String>,
    pub auth_password: Option<String>,
    /// Speak RESP3 upstream (HELLO 3 at connect), for sessions whose client chose RESP3.
    pub resp3: bool,
}

impl PoolSettings {
    /// The settings a listener gives the pool of one of its clusters.
    pub fn new(listener: &ListenerConfig, cluster: &ClusterConfig) -> PoolSettings {
        PoolSettings {
            op_timeout: listener.op_timeout,
            max_buffer_size_before_flush: listener.max_buffer_size_before_flush,
            buffer_flush_timeout: listener.buffer_flush_timeout,
            connect_timeout: cluster.connect_timeout,
            auth_username: cluster.auth_username.clone(),
            auth_password: cluster.auth_password.clone(),
            resp3: false,
        }
    }
}

/// This worker's shard of one upstream host's stats (`cluster.<name>.…`).
#[derive(Clone)]
pub struct HostStats {
    pub cx_total: Arc<Counter>,
    pub cx_active: Arc<Gauge>,
    pub cx_connect_fail: Arc<Counter>,
    pub rq_total: Arc<Counter>,
    pub rq_error: Arc<Counter>,
    pub rq_timeout: Arc<Counter>,
    /// Writes to the host: `rq_total / flush_total` is how many requests a write carries, the
    /// batching that makes Redis cheaper behind the proxy (DESIGN.md "Upstream multiplexing").
    pub flush_total: Arc<Counter>,
}

impl HostStats {
    fn new(store: &Store, worker: usize, cluster: &str, host: &str) -> HostStats {
        let c = |name: &str| store.counter(&format!("cluster.{cluster}.{name}"), worker);
        let h =
            |name: &str| store.counter(&format!("cluster.{cluster}.host.{host}.{name}"), worker);
        HostStats {
            cx_total: c("upstream_cx_total"),
            cx_active: store.gauge(&format!("cluster.{cluster}.upstream_cx_active"), worker),
            cx_connect_fail: c("upstream_cx_connect_fail"),
            rq_total: h("rq_total"),
            rq_error: h("rq_error"),
            rq_timeout: c("upstream_rq_timeout"),
            flush_total: h("flush_total"),
        }
    }
}

/// The connections of one worker to the hosts of one cluster, and the hash that picks a host.
pub struct ClusterPool {
    pub name: String,
    lb: LoadBalancer,
    /// `hosts[i]` holds `connections_per_host` connections to host `i`.
    hosts: Vec<Vec<Rc<Conn>>>,
    /// The same for RESP3 clients, opened when the first one arrives.
    hosts_resp3: RefCell<Option<Vec<Vec<Rc<Conn>>>>>,
    host_stats: Vec<HostStats>,
    /// The config it was built from, to tell whether a reload changed it.
    pub cluster: ClusterConfig,
    pub settings: Rc<PoolSettings>,
}

impl ClusterPool {
    /// Builds the pool and starts connecting to every host.
    pub fn start(
        cluster: &ClusterConfig,
        settings: PoolSettings,
        store: &Store,
        worker: usize,
    ) -> Rc<ClusterPool> {
        let settings = Rc::new(settings);
        let host_stats: Vec<HostStats> = cluster
            .hosts
            .iter()
            .map(|h| HostStats::new(store, worker, &cluster.name, &h.address.to_string()))
            .collect();
        let hosts = connect_all(cluster, &settings, &host_stats);
        Rc::new(ClusterPool {
            name: cluster.name.clone(),
            lb: LoadBalancer::new(cluster.lb_policy, &cluster.hosts),
            hosts,
            hosts_resp3: RefCell::new(None),
            host_stats,
            cluster: cluster.clone(),
            settings,
        })
    }

    /// The host index `key` hashes to. The caller applies the listener's hash-tag rule first.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.lb.pick(key)
    }

    /// The connection to host `shard` used by session `session` (a session always uses the same
    /// one, so its commands to a host stay in order). `resp3`: the session speaks RESP3, so its
    /// replies must come from a RESP3 connection.
    #[inline]
    pub fn conn(&self, shard: usize, session: u64, resp3: bool) -> Option<Rc<Conn>> {
        if resp3 {
            let mut r3 = self.hosts_resp3.borrow_mut();
            let hosts = r3.get_or_insert_with(|| {
                let settings = Rc::new(PoolSettings {
                    resp3: true,
                    ..(*self.settings).clone()
                });
                connect_all(&self.cluster, &settings, &self.host_stats)
            });
            return pick(hosts, shard, session).cloned();
        }
        pick(&self.hosts, shard, session).cloned()
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// True if the cluster has no hosts.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

fn pick(hosts: &[Vec<Rc<Conn>>], shard: usize, session: u64) -> Option<&Rc<Conn>> {
    let conns = hosts.get(shard)?;
    // One connection per host is the default: skip the 64-bit division on every request.
    match conns.len() {
        0 | 1 => conns.first(),
        n => conns.get((session % n as u64) as usize),
    }
}

/// Starts `connections_per_host` connections to every host of `cluster`.
fn connect_all(
    cluster: &ClusterConfig,
    settings: &Rc<PoolSettings>,
    stats: &[HostStats],
) -> Vec<Vec<Rc<Conn>>> {
    let per_host = cluster.connections_per_host.max(1);
    cluster
        .hosts
        .iter()
        .zip(stats)
        .map(|(h, stats)| {
            (0..per_host)
                .map(|_| Conn::start(h.address, settings.clone(), stats.clone()))
                .collect()
        })
        .collect()
}

impl Drop for ClusterPool {
    /// The last session using this pool moved to a newer config: let in-flight requests finish.
    fn drop(&mut self) {
        let r3 = self.hosts_resp3.borrow_mut().take();
        for conn in self.hosts.iter().chain(r3.iter().flatten()).flatten() {
            conn.retire();
        }
    }
}

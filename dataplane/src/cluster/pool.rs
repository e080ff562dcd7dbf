//! One worker's pool for one cluster: where a key goes (placement by consistent hash or by
//! slot) combined with the worker's connections to the cluster's hosts.
//!
//! Each worker keeps, per (listener settings, cluster), `connections_per_host` connections to
//! every host; all of that worker's sessions share them (Envoy: one connection per upstream host
//! per worker).

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use super::LoadBalancer;
use super::host::{HostRegistry, SharedHost};
use super::rehash::Rehash;
use super::slots::SlotPool;
use super::topology::Registry;
use crate::config::{ClusterConfig, ClusterType, OnUnhealthy};
use crate::stats::Store;
use crate::upstream::{
    self, CommandName, HostStats, LeasePool, LeaseStats, PoolSettings, SendError, Target,
    UpstreamStats,
};

/// An upstream connection as this layer uses it: to a host whose shared state is a
/// [`SharedHost`].
pub type Conn = upstream::Conn<SharedHost>;

/// What every pool of one worker is built with.
#[derive(Clone)]
pub struct PoolContext {
    /// Where the pools' stats shards are registered.
    pub store: Arc<Store>,
    /// The worker's id: its stats shard.
    pub worker: usize,
    /// Slot map cells of the `redis_cluster` clusters.
    pub registry: Arc<Registry>,
    /// Process-wide host states.
    pub hosts: Arc<HostRegistry>,
    /// Names the command ids of per-command upstream stats (`enable_command_stats`).
    pub command_name: CommandName,
}

impl PoolContext {
    /// The stats shared by every host connection of one pool of `cluster`.
    pub(super) fn upstream_stats(
        &self,
        cluster: &str,
        settings: &PoolSettings,
    ) -> Rc<UpstreamStats> {
        let names = settings.enable_command_stats.then_some(self.command_name);
        UpstreamStats::new(&self.store, self.worker, cluster, names)
    }
}

/// Why a pool could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// A `redis_cluster` cluster has no slot map cell in the registry (the engine registers one
    /// before it applies a config).
    NoTopology {
        /// The cluster's name.
        cluster: String,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::NoTopology { cluster } => {
                write!(
                    f,
                    "cluster {cluster}: no topology for a redis_cluster cluster"
                )
            }
        }
    }
}

impl std::error::Error for PoolError {}

/// Where a request goes inside its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// The owner of a key: what [`ClusterPool::shard_of`] gave for the key (a host index, or a
    /// slot for Redis Cluster).
    Key(usize),
    /// Node `i` of [`ClusterPool::fanout_len`] (fan-out commands and SCAN).
    Node(usize),
}

/// The connections of one worker to the hosts of one cluster, and how a key picks its host.
pub struct ClusterPool {
    /// The cluster's name.
    pub name: String,
    kind: PoolKind,
    /// The config it was built from, to tell whether a reload changed it.
    pub cluster: ClusterConfig,
    /// The listener-side settings its connections were made with.
    pub settings: Rc<PoolSettings>,
    /// Connections held by one session at a time (transactions), at most
    /// `max_leased_connections` per host.
    pub leases: Rc<LeasePool>,
}

enum PoolKind {
    /// Static hosts placed by a consistent hash.
    Hashed(HashedPool),
    /// A Redis Cluster placed by slot.
    Slots(Rc<SlotPool>),
}

struct HashedPool {
    lb: LoadBalancer,
    /// `hosts[i]` holds `connections_per_host` connections to host `i`.
    hosts: Vec<Vec<Rc<Conn>>>,
    /// The same for RESP3 clients, opened when the first one arrives.
    hosts_resp3: RefCell<Option<Vec<Vec<Rc<Conn>>>>>,
    /// `shared[i]`: the process-wide state of host `i` (health, connection rate limit).
    shared: Vec<Arc<SharedHost>>,
    host_stats: Vec<HostStats>,
    /// `on_unhealthy = "rehash"`: the ring over the healthy hosts only.
    rehash: Option<Box<Rehash>>,
}

impl ClusterPool {
    /// Builds the pool and starts connecting to every host. A `redis_cluster` cluster takes its
    /// slot map from its cell in the context's registry.
    ///
    /// Errors: [`PoolError::NoTopology`] for a `redis_cluster` cluster with no cell there.
    pub fn start(
        cluster: &ClusterConfig,
        settings: PoolSettings,
        ctx: &PoolContext,
    ) -> Result<Rc<ClusterPool>, PoolError> {
        let mut settings = settings;
        settings.tls = settings
            .tls
            .take()
            .map(|t| t.with_stats(&ctx.store, ctx.worker));
        let settings = Rc::new(settings);
        let kind = match cluster.cluster_type {
            ClusterType::Static
            | ClusterType::Eds
            | ClusterType::StrictDns
            | ClusterType::LogicalDns => {
                let upstream = ctx.upstream_stats(&cluster.name, &settings);
                let host_stats: Vec<HostStats> = cluster
                    .hosts
                    .iter()
                    .map(|h| {
                        HostStats::new(
                            &ctx.store,
                            ctx.worker,
                            &cluster.name,
                            &h.address.to_string(),
                            &upstream,
                        )
                    })
                    .collect();
                let shared: Vec<Arc<SharedHost>> = cluster
                    .hosts
                    .iter()
                    .map(|h| ctx.hosts.host(cluster, h.address))
                    .collect();
                let conns = connect_all(cluster, &settings, &shared, &host_stats);
                let rehash = match (cluster.on_unhealthy, shared.first()) {
                    (OnUnhealthy::Rehash, Some(first)) => Some(Box::new(Rehash::new(
                        first.health.version().clone(),
                        cluster.lb_policy,
                        cluster.hash,
                        cluster.hosts.clone(),
                    ))),
                    _ => None,
                };
                PoolKind::Hashed(HashedPool {
                    lb: LoadBalancer::with_settings(
                        cluster.lb_policy,
                        cluster.hash,
                        cluster.least_request,
                        &cluster.hosts,
                    ),
                    hosts: conns,
                    hosts_resp3: RefCell::new(None),
                    shared,
                    host_stats,
                    rehash,
                })
            }
            ClusterType::RedisCluster => {
                let cell = ctx
                    .registry
                    .get(cluster)
                    .ok_or_else(|| PoolError::NoTopology {
                        cluster: cluster.name.clone(),
                    })?;
                PoolKind::Slots(SlotPool::start(cluster, settings.clone(), cell, ctx))
            }
        };
        let leases = LeasePool::new(
            &cluster.name,
            settings.clone(),
            cluster.max_leased_connections,
            LeaseStats::new(&ctx.store, ctx.worker, &cluster.name),
        );
        Ok(Rc::new(ClusterPool {
            name: cluster.name.clone(),
            kind,
            cluster: cluster.clone(),
            settings,
            leases,
        }))
    }

    /// Where `key` goes, for [`Dest::Key`]: a host index, or for Redis Cluster the key's slot
    /// (hash tags always on). The caller applies the listener's hash-tag rule first. A
    /// `rehash` cluster places keys on its healthy hosts only: `None` when none is healthy (the
    /// client gets `no upstream host`, [`SendError::NoHost`]).
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> Option<usize> {
        match &self.kind {
            PoolKind::Hashed(h) => {
                if let Some(lr) = h.lb.least_request() {
                    return h.least_request(lr);
                }
                match &h.rehash {
                    None => Some(h.lb.pick(key)),
                    Some(r) => r.pick(key, &h.lb, &h.shared),
                }
            }
            PoolKind::Slots(_) => Some(super::key_slot(key) as usize),
        }
    }

    /// Where every pub/sub channel of a `random`, `round_robin` or `least_request` cluster lives (a [`Dest::Key`] host index):
    /// its first host, or with `on_unhealthy = "rehash"` its first healthy one, so that
    /// PUBLISH and SUBSCRIBE of a channel meet. `None` for any other cluster (channels are
    /// placed like keys there) and when no host is healthy.
    pub fn non_hashing_pubsub_home(&self) -> Option<usize> {
        match &self.kind {
            PoolKind::Hashed(h) if h.lb.is_non_hashing() => match &h.rehash {
                None => Some(0),
                Some(_) => h.shared.iter().position(|s| s.health.is_healthy()),
            },
            _ => None,
        }
    }

    /// Whether keys have no fixed host (`lb_policy = "random"` or `"round_robin"`).
    pub fn is_non_hashing(&self) -> bool {
        matches!(&self.kind, PoolKind::Hashed(h) if h.lb.is_non_hashing())
    }

    /// Queues `request` for `dest`; its reply goes to `target`. `session` picks among a host's
    /// connections (a session always uses the same one, so its commands to a host stay in
    /// order); `resp3`: the session speaks RESP3, so its replies must come from a RESP3
    /// connection; `read`: a read command, which a Redis Cluster pool may send to a replica per
    /// `read_policy` (falling back to the other candidates in the same request).
    ///
    /// Errors: [`SendError::NoHost`] when no candidate host can take it, including a host that
    /// failed its health checks or is ejected (`on_unhealthy = "fail_fast"`: its keys fail at
    /// once, never queued); the caller answers.
    #[inline]
    pub fn send(
        &self,
        dest: Dest,
        session: u64,
        resp3: bool,
        read: bool,
        request: &[u8],
        target: Target,
    ) -> Result<(), SendError> {
        match &self.kind {
            PoolKind::Hashed(h) => {
                let shard = match dest {
                    Dest::Key(s) | Dest::Node(s) => s,
                };
                if !h.shared.get(shard).is_some_and(|s| s.health.is_healthy()) {
                    return Err(SendError::NoHost);
                }
                let conn = if resp3 {
                    let mut r3 = h.hosts_resp3.borrow_mut();
                    let hosts = r3.get_or_insert_with(|| {
                        let settings = Rc::new(PoolSettings {
                            resp3: true,
                            ..(*self.settings).clone()
                        });
                        connect_all(&self.cluster, &settings, &h.shared, &h.host_stats)
                    });
                    pick(hosts, shard, session).cloned()
                } else {
                    pick(&h.hosts, shard, session).cloned()
                };
                conn.ok_or(SendError::NoHost)?
                    .send(session, request, target)
            }
            PoolKind::Slots(p) => p.send(dest, session, resp3, read, request, target),
        }
    }

    /// The host that takes writes for [`Dest::Key`] `shard` (a host index, or a slot's primary
    /// for Redis Cluster): `None` when it is unknown, unhealthy or ejected.
    pub fn primary_addr(&self, shard: usize) -> Option<std::net::SocketAddr> {
        match &self.kind {
            PoolKind::Hashed(h) => {
                let host = h.shared.get(shard)?;
                host.health.is_healthy().then_some(host.addr)
            }
            PoolKind::Slots(p) => p.primary_of(shard),
        }
    }

    /// Every host that takes writes, healthy or not: each host of a hashed pool, each primary
    /// of a Redis Cluster (what SCRIPT KILL goes to: a host busy with a script fails its health
    /// checks).
    pub fn primary_addrs(&self) -> Vec<std::net::SocketAddr> {
        match &self.kind {
            PoolKind::Hashed(h) => h.shared.iter().map(|s| s.addr).collect(),
            PoolKind::Slots(p) => p.primary_addrs(),
        }
    }

    /// True for a Redis Cluster pool (placement by slot, redirects followed).
    pub fn is_redis_cluster(&self) -> bool {
        matches!(self.kind, PoolKind::Slots(_))
    }

    /// Where a request goes again after the redirect `reply` (`MOVED`/`ASK`, Redis Cluster
    /// spec) that `from` gave on a leased connection: the node, and whether `ASKING` must come
    /// first. `None` for anything else, and always for a pool that is not a Redis Cluster.
    pub fn lease_redirect(
        &self,
        from: std::net::SocketAddr,
        reply: &[u8],
    ) -> Option<(std::net::SocketAddr, bool)> {
        match &self.kind {
            PoolKind::Hashed(_) => None,
            PoolKind::Slots(p) => p.lease_redirect(from, reply),
        }
    }

    /// Number of nodes a fan-out command goes to: every host, or every Redis Cluster primary.
    pub fn fanout_len(&self) -> usize {
        match &self.kind {
            PoolKind::Hashed(h) => h.hosts.len(),
            PoolKind::Slots(p) => p.primaries(),
        }
    }
}

impl HashedPool {
    /// The `least_request` host of the current draw, by this worker's outstanding requests to
    /// each host (over its RESP2 and RESP3 connections). A `rehash` cluster picks among its
    /// healthy hosts only; a `fail_fast` one among all, as its other policies do.
    #[inline]
    fn least_request(&self, lr: &super::least_request::LeastRequest) -> Option<usize> {
        let r3 = self.hosts_resp3.borrow();
        lr.pick(|i| {
            if self.rehash.is_some() && !self.shared.get(i)?.health.is_healthy() {
                return None;
            }
            let count = |conns: &[Rc<Conn>]| conns.iter().map(|c| c.outstanding()).sum::<usize>();
            let resp3 = r3.as_ref().and_then(|h| h.get(i)).map_or(0, |c| count(c));
            Some(count(self.hosts.get(i)?) + resp3)
        })
    }
}

fn pick(hosts: &[Vec<Rc<Conn>>], shard: usize, session: u64) -> Option<&Rc<Conn>> {
    session_conn(hosts.get(shard)?, session)
}

/// The connection of a host that `session` uses (always the same one, so its requests to the
/// host stay in order).
pub(super) fn session_conn(conns: &[Rc<Conn>], session: u64) -> Option<&Rc<Conn>> {
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
    shared: &[Arc<SharedHost>],
    stats: &[HostStats],
) -> Vec<Vec<Rc<Conn>>> {
    let per_host = cluster.connections_per_host.max(1);
    shared
        .iter()
        .zip(stats)
        .map(|(h, stats)| {
            (0..per_host)
                .map(|_| Conn::start(h.clone(), settings.clone(), stats.clone()))
                .collect()
        })
        .collect()
}

impl Drop for ClusterPool {
    /// The last session using this pool moved to a newer config: let in-flight requests finish.
    fn drop(&mut self) {
        self.leases.retire();
        match &self.kind {
            PoolKind::Hashed(h) => {
                let r3 = h.hosts_resp3.borrow_mut().take();
                for conn in h.hosts.iter().chain(r3.iter().flatten()).flatten() {
                    conn.retire();
                }
            }
            PoolKind::Slots(p) => p.retire(),
        }
    }
}

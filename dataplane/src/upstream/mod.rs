//! Per-worker pipelined upstream connections and the per-cluster pools that own them.
//!
//! Each worker keeps, per (listener, cluster), `connections_per_host` connections to every host;
//! all of that worker's sessions share them (Envoy: one connection per upstream host per worker).

mod conn;
pub mod host;
mod limit;
mod slots;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use conn::read_replies;
pub use conn::{Conn, SendError};
pub use host::{HostRegistry, SharedHost};
pub use slots::SlotPool;

use crate::cluster::LoadBalancer;
use crate::cluster::health::ClusterVersion;
use crate::cluster::topology::Registry;
use crate::config::{
    ClusterConfig, ClusterType, HostConfig, ListenerConfig, OnUnhealthy, ReadPolicy, TcpKeepalive,
};
use crate::stats::{Counter, Gauge, LocalHistogram, Store};

/// Reply given for requests lost with a failed upstream connection or past op_timeout (Envoy).
pub const UPSTREAM_FAILURE: &[u8] = b"-upstream failure\r\n";
/// Reply to a Redis Cluster request whose pool a reload replaced while it was redirected or
/// queued: retryable, and not a raw `MOVED` that would send a cluster-aware client around the
/// proxy.
pub const POOL_REPLACED: &[u8] =
    b"-TRYAGAIN cluster connection pool replaced by a config reload; retry the command\r\n";
/// Reply given when no host can take the request (Envoy).
pub const NO_UPSTREAM_HOST: &[u8] = b"-no upstream host\r\n";
/// Reply given when the connection to the request's host already holds `max_pending_requests`
/// requests not yet written (the host is connecting or not reading): the request is refused at
/// once instead of queueing without bound. Envoy counts this as `upstream_rq_pending_overflow`.
pub const UPSTREAM_OVERFLOW: &[u8] =
    b"-upstream overflow: too many requests queued for this host (max_pending_requests)\r\n";

/// Receives the reply to one request (or one part of a split request).
pub trait Deliver {
    /// `reply` is one complete RESP reply; `seq` and `part` are the values given in [`Target`].
    fn deliver(&self, seq: u64, part: u32, reply: &[u8]);
}

/// Where a request goes inside its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// The owner of a key: the value of [`ClusterPool::shard_of`] for the key (a host index, or
    /// a slot for Redis Cluster).
    Key(usize),
    /// Node `i` of [`ClusterPool::fanout_len`] (fan-out commands and SCAN).
    Node(usize),
}

/// Redirect state of a request, carried along when a Redis Cluster pool sends it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// The request's slot, or `u16::MAX` when it was sent to a node rather than by key.
    pub slot: u16,
    /// `MOVED`/`ASK` redirects followed so far.
    pub hops: u8,
    /// `TRYAGAIN`/`CLUSTERDOWN` retries so far.
    pub tries: u8,
    /// When the request was first written upstream: retries stop at `op_timeout` from here.
    pub started: Option<Instant>,
    /// The client speaks RESP3, so a resent request must go out on a RESP3 connection.
    pub resp3: bool,
    /// The sending session: a resent request uses the same connection to its new node as the
    /// session's own requests do, so they stay in order there.
    pub session: u64,
    /// This request is the one its slot's later requests wait behind (see `slots.rs`).
    pub detour: bool,
}

impl Retry {
    /// A request sent for the first time, not by slot.
    pub const FIRST: Retry = Retry {
        slot: u16::MAX,
        hops: 0,
        tries: 0,
        started: None,
        resp3: false,
        session: 0,
        detour: false,
    };
}

/// Handles what a Redis Cluster node answers instead of a reply (Redis Cluster spec,
/// "Redirection and resharding"), and reports host failures to the topology.
pub trait Redirect {
    /// `reply` (`-MOVED …`, `-ASK …`, `-TRYAGAIN …`, `-CLUSTERDOWN …`) came from `from` for
    /// `request` (its encoded bytes); the handler sends it again or answers `target` itself.
    fn redirect(
        &self,
        from: SocketAddr,
        reply: &[u8],
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    );
    /// A connect failure, a closed connection or a timeout on one of the cluster's hosts.
    fn note_failure(&self);
}

/// Where a reply goes.
#[derive(Clone)]
pub struct Target {
    pub sink: Rc<dyn Deliver>,
    pub seq: u64,
    pub part: u32,
    /// The request's command table id, for `enable_command_stats` (out of the table: not
    /// counted per command).
    pub cmd: u16,
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
    /// Redis Cluster only: which node of a slot serves reads.
    pub read_policy: ReadPolicy,
    /// Redis Cluster only: per-worker cap on connections to hosts known only from redirects.
    pub max_upstream_unknown_connections: usize,
    /// Per connection, the most requests queued and not yet written: the cluster's
    /// `max_pending_requests` (per host and worker) shared out over `connections_per_host`,
    /// rounded up, so that no counter is shared between a host's connections.
    pub max_pending_requests: usize,
    /// The cluster's `tcp_keepalive`, applied to every upstream connection.
    pub tcp_keepalive: TcpKeepalive,
    /// The listener's `enable_command_stats` (in Envoy's `ConnPoolSettings`): per-command
    /// upstream counters and latency under `cluster.<c>.redis_cluster.upstream_commands.`.
    pub enable_command_stats: bool,
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
            read_policy: listener.read_policy,
            max_upstream_unknown_connections: listener.max_upstream_unknown_connections,
            max_pending_requests: cluster
                .max_pending_requests
                .div_ceil(cluster.connections_per_host.max(1))
                .max(1),
            tcp_keepalive: cluster.tcp_keepalive,
            enable_command_stats: listener.enable_command_stats,
        }
    }
}

/// This worker's shard of one cluster's upstream request stats, shared by the connections of
/// one pool: `cluster.<c>.redis_cluster.upstream_commands.upstream_rq_time` (ms, Envoy's) and,
/// with `enable_command_stats`, `…upstream_commands.<cmd>.total|success|failure|latency` (µs).
pub struct UpstreamStats {
    store: Arc<Store>,
    worker: usize,
    /// `cluster.<c>.redis_cluster.upstream_commands.`
    prefix: String,
    enabled: bool,
    rq_time: Rc<LocalHistogram>,
    commands: RefCell<Vec<Option<UpstreamCommandStats>>>,
}

/// `…upstream_commands.<cmd>.` of one command.
struct UpstreamCommandStats {
    total: Arc<Counter>,
    success: Arc<Counter>,
    failure: Arc<Counter>,
    latency: Rc<LocalHistogram>,
}

impl UpstreamStats {
    /// Registers `upstream_rq_time` of `cluster` for `worker`; per-command stats are registered
    /// as commands are first seen, and only if `enable_command_stats`.
    pub fn new(
        store: &Arc<Store>,
        worker: usize,
        cluster: &str,
        enable_command_stats: bool,
    ) -> Rc<UpstreamStats> {
        let prefix = format!("cluster.{cluster}.redis_cluster.upstream_commands.");
        Rc::new(UpstreamStats {
            rq_time: LocalHistogram::new(
                store.histogram(&format!("{prefix}upstream_rq_time"), worker),
            ),
            store: store.clone(),
            worker,
            prefix,
            enabled: enable_command_stats,
            commands: RefCell::new(Vec::new()),
        })
    }

    /// Records the time of an upstream request whose outcome is counted later (a redirect).
    #[inline]
    pub fn record_time(&self, d: Duration) {
        self.rq_time.record(d.as_millis() as u64);
    }

    /// Records one upstream request's outcome: `sent` is when its write batch went out (`None`:
    /// never written, so no time), `now` when its reply, timeout or failure came. `success`: a
    /// reply that is not an error (Envoy: `-` replies are failures).
    #[inline]
    pub fn record(&self, cmd: u16, success: bool, sent: Option<Instant>, now: Instant) {
        let elapsed = sent.map(|s| now.saturating_duration_since(s));
        if let Some(d) = elapsed {
            self.rq_time.record(d.as_millis() as u64);
        }
        if !self.enabled {
            return;
        }
        let idx = cmd as usize;
        let Some(spec) = crate::command::COMMANDS.get(idx) else {
            return;
        };
        let mut v = self.commands.borrow_mut();
        if v.len() <= idx {
            v.resize_with(idx + 1, || None);
        }
        let Some(slot) = v.get_mut(idx) else { return };
        let s = slot.get_or_insert_with(|| {
            let name = |n: &str| format!("{}{}.{n}", self.prefix, spec.name);
            UpstreamCommandStats {
                total: self.store.counter(&name("total"), self.worker),
                success: self.store.counter(&name("success"), self.worker),
                failure: self.store.counter(&name("failure"), self.worker),
                latency: LocalHistogram::new(self.store.histogram(&name("latency"), self.worker)),
            }
        });
        s.total.inc();
        if success {
            s.success.inc();
        } else {
            s.failure.inc();
        }
        if let Some(d) = elapsed {
            s.latency.record(d.as_micros() as u64);
        }
    }
}

/// This worker's shard of one upstream host's stats: cluster-wide ones (`cluster.<name>.…`)
/// and the host's own (`cluster.<name>.host.<ip:port>.…`, for the admin `/clusters` page).
#[derive(Clone)]
pub struct HostStats {
    pub cx_total: Arc<Counter>,
    pub cx_active: Arc<Gauge>,
    pub cx_connect_fail: Arc<Counter>,
    /// `upstream_rq_total` of the cluster (the host's is `rq_total`).
    pub upstream_rq_total: Arc<Counter>,
    pub rq_total: Arc<Counter>,
    pub rq_error: Arc<Counter>,
    pub rq_timeout: Arc<Counter>,
    /// The host's own `cx_total`, `cx_active`, `cx_connect_fail`, `rq_timeout`.
    pub host_cx_total: Arc<Counter>,
    pub host_cx_active: Arc<Gauge>,
    pub host_cx_connect_fail: Arc<Counter>,
    pub host_rq_timeout: Arc<Counter>,
    /// The host's `rq_time` histogram (µs): from the write of a request's batch to its reply.
    pub rq_time: Rc<LocalHistogram>,
    /// The cluster's request time and per-command stats.
    pub upstream: Rc<UpstreamStats>,
    /// Writes to the host: `rq_total / flush_total` is how many requests a write carries, the
    /// batching that makes Redis cheaper behind the proxy (DESIGN.md "Upstream multiplexing").
    pub flush_total: Arc<Counter>,
    /// Connect attempts that had to wait for the host's connection rate limit.
    pub cx_connect_rate_limited: Arc<Counter>,
    /// Requests refused because `max_pending_requests` were already queued (Envoy's name).
    pub rq_pending_overflow: Arc<Counter>,
}

impl HostStats {
    /// The stats of host `host` (its `ip:port`) of cluster `cluster`, shard `worker`; every one
    /// is registered (at 0) here, so a host shows up as soon as a pool for it exists.
    pub fn new(
        store: &Store,
        worker: usize,
        cluster: &str,
        host: &str,
        upstream: &Rc<UpstreamStats>,
    ) -> HostStats {
        let c = |name: &str| store.counter(&format!("cluster.{cluster}.{name}"), worker);
        let host_name = |name: &str| format!("cluster.{cluster}.host.{host}.{name}");
        let h = |name: &str| store.counter(&host_name(name), worker);
        HostStats {
            cx_total: c("upstream_cx_total"),
            cx_active: store.gauge(&format!("cluster.{cluster}.upstream_cx_active"), worker),
            cx_connect_fail: c("upstream_cx_connect_fail"),
            upstream_rq_total: c("upstream_rq_total"),
            rq_total: h("rq_total"),
            rq_error: h("rq_error"),
            rq_timeout: c("upstream_rq_timeout"),
            host_cx_total: h("cx_total"),
            host_cx_active: store.gauge(&host_name("cx_active"), worker),
            host_cx_connect_fail: h("cx_connect_fail"),
            host_rq_timeout: h("rq_timeout"),
            rq_time: LocalHistogram::new(store.histogram(&host_name("rq_time"), worker)),
            upstream: upstream.clone(),
            flush_total: h("flush_total"),
            cx_connect_rate_limited: c("upstream_cx_connect_rate_limited"),
            rq_pending_overflow: c("upstream_rq_pending_overflow"),
        }
    }
}

/// The connections of one worker to the hosts of one cluster, and how a key picks its host.
pub struct ClusterPool {
    pub name: String,
    kind: PoolKind,
    /// The config it was built from, to tell whether a reload changed it.
    pub cluster: ClusterConfig,
    pub settings: Rc<PoolSettings>,
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

/// A `rehash` cluster's placement around unhealthy hosts, per worker: rebuilt only when the
/// cluster's health version moves (one relaxed load per request), like `SlotPool`'s map.
/// With no healthy host at all every key fails fast: there is no Envoy "panic mode" that would
/// send to unhealthy hosts anyway.
struct Rehash {
    version: Arc<ClusterVersion>,
    /// The version `healthy` was built from; `u64::MAX` before the first build.
    seen: Cell<u64>,
    healthy: RefCell<Healthy>,
    policy: crate::config::LbPolicy,
    hosts: Vec<HostConfig>,
}

/// Which hosts a `rehash` cluster places keys on.
enum Healthy {
    /// Every host: the full ring applies.
    All,
    /// Some hosts: a ring over them, and each of its indices' host index in the cluster.
    Some(LoadBalancer, Vec<usize>),
    /// No host is healthy.
    None,
}

impl Rehash {
    /// The host of `key`, or `usize::MAX` (no host: the send fails with `no upstream host`).
    #[inline]
    fn pick(&self, key: &[u8], full: &LoadBalancer, shared: &[Arc<SharedHost>]) -> usize {
        let v = self.version.get();
        if v != self.seen.get() {
            self.rebuild(shared);
            self.seen.set(v);
        }
        match &*self.healthy.borrow() {
            Healthy::All => full.pick(key),
            Healthy::Some(lb, map) => map.get(lb.pick(key)).copied().unwrap_or(usize::MAX),
            Healthy::None => usize::MAX,
        }
    }

    /// Rebuilds the ring over the hosts healthy now (off the steady path: health changes only).
    fn rebuild(&self, shared: &[Arc<SharedHost>]) {
        let map: Vec<usize> = (0..shared.len())
            .filter(|&i| shared.get(i).is_some_and(|h| h.health.is_healthy()))
            .collect();
        let healthy = if map.len() == shared.len() {
            Healthy::All
        } else if map.is_empty() {
            Healthy::None
        } else {
            let hosts: Vec<HostConfig> = map
                .iter()
                .filter_map(|&i| self.hosts.get(i).cloned())
                .collect();
            Healthy::Some(LoadBalancer::new(self.policy, &hosts), map)
        };
        *self.healthy.borrow_mut() = healthy;
    }
}

impl ClusterPool {
    /// Builds the pool and starts connecting to every host. A `redis_cluster` cluster takes its
    /// slot map from its cell in `registry`.
    ///
    /// Errors: a `redis_cluster` cluster with no cell in `registry` (the engine registers one
    /// before it applies a config).
    pub fn start(
        cluster: &ClusterConfig,
        settings: PoolSettings,
        store: &Arc<Store>,
        worker: usize,
        registry: &Registry,
        hosts: &Arc<HostRegistry>,
    ) -> Result<Rc<ClusterPool>, String> {
        let settings = Rc::new(settings);
        let kind = match cluster.cluster_type {
            ClusterType::Static | ClusterType::Eds => {
                let upstream =
                    UpstreamStats::new(store, worker, &cluster.name, settings.enable_command_stats);
                let host_stats: Vec<HostStats> = cluster
                    .hosts
                    .iter()
                    .map(|h| {
                        HostStats::new(
                            store,
                            worker,
                            &cluster.name,
                            &h.address.to_string(),
                            &upstream,
                        )
                    })
                    .collect();
                let shared: Vec<Arc<SharedHost>> = cluster
                    .hosts
                    .iter()
                    .map(|h| hosts.host(cluster, h.address))
                    .collect();
                let conns = connect_all(cluster, &settings, &shared, &host_stats);
                let rehash = match (cluster.on_unhealthy, shared.first()) {
                    (OnUnhealthy::Rehash, Some(first)) => Some(Box::new(Rehash {
                        version: first.health.version().clone(),
                        seen: Cell::new(u64::MAX),
                        healthy: RefCell::new(Healthy::All),
                        policy: cluster.lb_policy,
                        hosts: cluster.hosts.clone(),
                    })),
                    _ => None,
                };
                PoolKind::Hashed(HashedPool {
                    lb: LoadBalancer::new(cluster.lb_policy, &cluster.hosts),
                    hosts: conns,
                    hosts_resp3: RefCell::new(None),
                    shared,
                    host_stats,
                    rehash,
                })
            }
            ClusterType::RedisCluster => {
                let cell = registry.get(cluster).ok_or_else(|| {
                    format!(
                        "cluster {}: no topology for a redis_cluster cluster",
                        cluster.name
                    )
                })?;
                PoolKind::Slots(SlotPool::start(
                    cluster,
                    settings.clone(),
                    cell,
                    store.clone(),
                    worker,
                    hosts.clone(),
                ))
            }
        };
        Ok(Rc::new(ClusterPool {
            name: cluster.name.clone(),
            kind,
            cluster: cluster.clone(),
            settings,
        }))
    }

    /// Where `key` goes: a host index, or for Redis Cluster the key's slot (hash tags always
    /// on). The caller applies the listener's hash-tag rule first. A `rehash` cluster places
    /// keys on its healthy hosts only; with none healthy it returns `usize::MAX`, which
    /// [`ClusterPool::send`] answers with [`SendError::NoHost`].
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        match &self.kind {
            PoolKind::Hashed(h) => match &h.rehash {
                None => h.lb.pick(key),
                Some(r) => r.pick(key, &h.lb, &h.shared),
            },
            PoolKind::Slots(_) => crate::cluster::key_slot(key) as usize,
        }
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
                conn.ok_or(SendError::NoHost)?.send(request, target)
            }
            PoolKind::Slots(p) => p.send(dest, session, resp3, read, request, target),
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

fn pick(hosts: &[Vec<Rc<Conn>>], shard: usize, session: u64) -> Option<&Rc<Conn>> {
    session_conn(hosts.get(shard)?, session)
}

/// The connection of a host that `session` uses (always the same one, so its requests to the
/// host stay in order).
fn session_conn(conns: &[Rc<Conn>], session: u64) -> Option<&Rc<Conn>> {
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

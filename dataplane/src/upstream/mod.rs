//! Sockets to the backends: per-worker pipelined connections, their stats, the process-wide
//! connect rate limit per host, and the wire side of active health checks and of Redis
//! Cluster discovery (what their replies mean is decided in `cluster`).
//!
//! Which host a request goes to is decided above, in `cluster` (placement, read policy, health,
//! redirects); this layer only moves bytes and reports what happened on the wire. It knows a
//! host only through [`HostState`] and a Redis Cluster pool only through [`Redirect`].

mod backoff;
mod check;
mod cluster_slots;
mod conn;
mod handshake;
mod host;
mod lease;
mod limit;
mod room;
mod subscriber;
mod tls;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use check::{CheckReply, CheckSession};
pub use cluster_slots::{ClusterSlotsClient, FetchError};
pub use conn::{Conn, SendError};
pub use handshake::{UpstreamAuth, encode_handshake};
pub use host::{HostState, Streak};
pub use lease::{BlockedError, LEASE_EXHAUSTED, Lease, LeaseError, LeasePool, LeaseStats, Piece};
pub use limit::ConnectLimiter;
pub use subscriber::{Event, SubConn, Subscriber};
pub use tls::{SslStats, TlsSettings};

use crate::config::{ClusterConfig, ListenerConfig, ReadPolicy, TcpKeepalive};
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

    /// True once Respite cut the client off (its output-buffer limit, or evicted for the
    /// worker's memory budget): its requests not yet written upstream are dropped instead of
    /// sent, as Redis drops what waits in the query buffer of a client it frees for the same
    /// reasons. A client that merely closed is not cut off: what it sent still runs.
    fn cut_off(&self) -> bool {
        false
    }

    /// True when the client holds and awaits little (the engine's budget calls it light, an
    /// estimate from reply sizes): a request of it that has to wait in a connection's waiting
    /// room while nothing else of it waits there takes a first turn (`room.rs`). A receiver
    /// that cannot tell says false.
    fn light(&self) -> bool {
        false
    }
}

/// Redirect state of a request, carried along when a Redis Cluster pool sends it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// The request's slot; `None` when it was sent to a node rather than by key.
    pub slot: Option<u16>,
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
    /// This request is the one its slot's later requests wait behind (a Redis Cluster pool's
    /// per-slot order, kept while a slot migrates).
    pub detour: bool,
}

impl Retry {
    /// A request sent for the first time, not by slot.
    pub const FIRST: Retry = Retry {
        slot: None,
        hops: 0,
        tries: 0,
        started: None,
        resp3: false,
        session: 0,
        detour: false,
    };
}

/// Names a command table id for per-command stats (`enable_command_stats`); `None` for an id
/// out of the table. Given by the layer that owns the command table.
pub type CommandName = fn(u16) -> Option<&'static str>;

/// Handles what a Redis Cluster node answers instead of a reply (Redis Cluster spec,
/// "Redirection and resharding"), and reports host failures to the topology.
pub trait Redirect {
    /// `reply` (`-MOVED …`, `-ASK …`, `-TRYAGAIN …`, `-CLUSTERDOWN …`, `-LOADING …`,
    /// `-BUSY …`, `-MASTERDOWN …`) came from `from` for
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
    /// Who gets the reply: a session's reply slots, a mirror's counters, a detour's end.
    pub sink: Rc<dyn Deliver>,
    /// The request's reply slot in the sink.
    pub seq: u64,
    /// The part of a split request (0 for a whole one).
    pub part: u32,
    /// The request's command table id, for `enable_command_stats` (out of the table: not
    /// counted per command).
    pub cmd: u16,
    /// The request runs a script (EVAL, FCALL, …): a host silent behind it may be busy with
    /// it rather than hung, so its timeout does not close the connection.
    pub script: bool,
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
    /// A request's longest wait for its reply, from its first write (redirects included).
    pub op_timeout: Duration,
    /// Bytes queued before a write goes out at once; 0: every request is written at once.
    pub max_buffer_size_before_flush: usize,
    /// The longest a queued request waits for its batch to fill.
    pub buffer_flush_timeout: Duration,
    /// Bound on connect plus handshake.
    pub connect_timeout: Duration,
    /// The cluster's upstream `AUTH` user, if any.
    pub auth_username: Option<String>,
    /// The cluster's upstream `AUTH` password.
    pub auth_password: Option<String>,
    /// The cluster's `[[clusters.credentials]]`: per-host credentials ([`PoolSettings::auth_for`]).
    pub credentials: Arc<[crate::config::CredentialConfig]>,
    /// The cluster's `db`: `SELECT`ed on every connection when not 0.
    pub db: u32,
    /// Speak RESP3 upstream (HELLO 3 at connect), for sessions whose client chose RESP3.
    pub resp3: bool,
    /// Redis Cluster only: which node of a slot serves reads.
    pub read_policy: ReadPolicy,
    /// Redis Cluster only: the listener's `local_zone`, for the zone read policies.
    pub local_zone: Option<String>,
    /// Redis Cluster only: per-worker cap on connections to hosts known only from redirects.
    pub max_upstream_unknown_connections: usize,
    /// Per connection, the most requests queued and not yet written: the cluster's
    /// `max_pending_requests` (per host and worker) shared out over `connections_per_host`,
    /// rounded up, so that no counter is shared between a host's connections.
    pub max_pending_requests: usize,
    /// Per connection, the reply bytes asked of the host and not yet read (estimated): the
    /// cluster's `max_reply_bytes_in_flight` (per host and worker) shared out over
    /// `connections_per_host`.
    pub max_reply_bytes_in_flight: usize,
    /// The cluster's `tcp_keepalive`, applied to every upstream connection.
    pub tcp_keepalive: TcpKeepalive,
    /// The listener's `enable_command_stats` (in Envoy's `ConnPoolSettings`): per-command
    /// upstream counters and latency under `cluster.<c>.redis_cluster.upstream_commands.`.
    pub enable_command_stats: bool,
    /// The cluster's `[clusters.tls]`: every connection of the pool is TLS.
    pub tls: Option<TlsSettings>,
    /// Redis Cluster only: the listener's `[listeners.dns_cache]`, which makes redirections to
    /// hostnames followed.
    pub dns_cache: Option<crate::config::DnsCacheConfig>,
}

impl PoolSettings {
    /// The credentials of a connection to `addr`: its `[[clusters.credentials]]` entry, else
    /// the cluster's (`config::credentials::auth_for`).
    pub fn auth_for(&self, addr: SocketAddr) -> crate::config::Auth<'_> {
        crate::config::credentials::auth_for(
            &self.credentials,
            crate::config::Auth {
                username: self.auth_username.as_deref(),
                password: self.auth_password.as_deref(),
            },
            addr,
            None,
        )
    }

    /// The settings a listener gives the pool of one of its clusters.
    pub fn new(listener: &ListenerConfig, cluster: &ClusterConfig) -> PoolSettings {
        PoolSettings {
            op_timeout: listener.op_timeout,
            max_buffer_size_before_flush: listener.max_buffer_size_before_flush,
            buffer_flush_timeout: listener.buffer_flush_timeout,
            connect_timeout: cluster.connect_timeout,
            auth_username: cluster.auth_username.clone(),
            auth_password: cluster.auth_password.clone(),
            credentials: cluster.credentials.clone().into(),
            db: cluster.db,
            resp3: false,
            read_policy: listener.read_policy,
            local_zone: listener.local_zone.clone(),
            max_upstream_unknown_connections: listener.max_upstream_unknown_connections,
            max_pending_requests: cluster
                .max_pending_requests
                .div_ceil(cluster.connections_per_host.max(1))
                .max(1),
            max_reply_bytes_in_flight: (cluster.max_reply_bytes_in_flight
                / cluster.connections_per_host.max(1))
            .max(1),
            tcp_keepalive: cluster.tcp_keepalive,
            enable_command_stats: listener.enable_command_stats,
            tls: TlsSettings::of(cluster),
            dns_cache: listener.dns_cache,
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
    /// Names per-command stats; `None`: `enable_command_stats` is off.
    command_name: Option<CommandName>,
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
    /// as commands are first seen (named by `command_name`), and only with `command_name`
    /// (`enable_command_stats`).
    pub fn new(
        store: &Arc<Store>,
        worker: usize,
        cluster: &str,
        command_name: Option<CommandName>,
    ) -> Rc<UpstreamStats> {
        let prefix = format!("cluster.{cluster}.redis_cluster.upstream_commands.");
        Rc::new(UpstreamStats {
            rq_time: LocalHistogram::new(
                store.histogram(&format!("{prefix}upstream_rq_time"), worker),
            ),
            store: store.clone(),
            worker,
            prefix,
            command_name,
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
        let Some(command_name) = self.command_name else {
            return;
        };
        let idx = cmd as usize;
        let mut v = self.commands.borrow_mut();
        if v.get(idx).is_none_or(Option::is_none) {
            // First request of this command: name and register its stats (off the steady path).
            let Some(command) = command_name(cmd) else {
                return;
            };
            if v.len() <= idx {
                v.resize_with(idx + 1, || None);
            }
            if let Some(slot) = v.get_mut(idx) {
                *slot = Some(self.command_stats(command));
            }
        }
        let Some(Some(s)) = v.get(idx) else { return };
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

    /// Registers `…upstream_commands.<command>.*`.
    fn command_stats(&self, command: &str) -> UpstreamCommandStats {
        let name = |n: &str| format!("{}{command}.{n}", self.prefix);
        UpstreamCommandStats {
            total: self.store.counter(&name("total"), self.worker),
            success: self.store.counter(&name("success"), self.worker),
            failure: self.store.counter(&name("failure"), self.worker),
            latency: LocalHistogram::new(self.store.histogram(&name("latency"), self.worker)),
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
    /// batching that makes Redis cheaper behind the proxy than direct clients.
    pub flush_total: Arc<Counter>,
    /// Connect attempts that had to wait for the host's connection rate limit.
    pub cx_connect_rate_limited: Arc<Counter>,
    /// Requests refused because `max_pending_requests` were already queued (Envoy's name).
    pub rq_pending_overflow: Arc<Counter>,
    /// Times a connection held requests back because the replies it had asked for reached
    /// `max_reply_bytes_in_flight`, or the requests out reached its depth (Envoy's name for an
    /// upstream that backed up).
    pub flow_control_backed_up: Arc<Counter>,
    /// Requests of clients Respite cut off (output-buffer limit, memory-budget eviction)
    /// dropped from the waiting room before they were written (Envoy's name).
    pub rq_cancelled: Arc<Counter>,
    /// New connections held back because the host answered `PING` with `-LOADING` (it is
    /// loading its dataset after a restart).
    pub cx_loading: Arc<Counter>,
    /// Requests answered with the host's own `-LOADING` error because it was still loading
    /// `op_timeout` after their connection first saw it loading.
    pub rq_loading: Arc<Counter>,
    /// RESP3 connections whose `HELLO 3` failed (`redis_cluster.upstream_resp3_hello_failure`,
    /// Envoy's name).
    pub resp3_hello_failure: Arc<Counter>,
}

/// Envoy's per-cluster counter of failed `HELLO 3` negotiations, under `cluster.<c>.`.
pub const RESP3_HELLO_FAILURE: &str = "redis_cluster.upstream_resp3_hello_failure";

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
            flow_control_backed_up: c("upstream_flow_control_backed_up_total"),
            rq_cancelled: c("upstream_rq_cancelled"),
            cx_loading: c("upstream_cx_loading"),
            rq_loading: c("upstream_rq_loading"),
            resp3_hello_failure: c(RESP3_HELLO_FAILURE),
        }
    }
}

//! The one config model and its TOML loader.
//!
//! TOML maps 1:1 onto the model; see `deploy/examples/respite.toml` for every key with its
//! default. Names follow Envoy's `redis_proxy` (`stat_prefix`, `op_timeout`,
//! `enable_hashtagging`, `prefix_routes.catch_all_route`, ...).
//!
//! Loading happens in two layers: a serde layer of spanned raw values ([`raw`], the file model)
//! checks the shape (unknown keys, types, required keys), then `validate` checks meaning
//! (durations, addresses, references, duplicates) and fills defaults. The file model also
//! serializes back into the file format: `respite-control` builds it to write the configs it
//! pushes. Every failure is a [`ConfigError`] of the form
//! `origin:line:col: key.path: message`, with the line taken from toml's spans.
//!
//! Every type serializes (serde) with its TOML key names, durations as humantime strings
//! (`"1s"`) and addresses as `"ip:port"`, for the admin `/config_dump`; passwords serialize as
//! [`REDACTED`], never in clear.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub mod credentials;
mod dns;
pub mod dns_names;
mod dump;
pub mod external_auth;
pub mod least_request;
pub mod limits;
mod locate;
pub mod raw;
mod routes;
mod sockmap;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_credentials;
#[cfg(test)]
mod tests_dns;
#[cfg(test)]
mod tests_least_request;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_protocol;
#[cfg(test)]
mod tests_raw;
#[cfg(test)]
mod tests_routes;
#[cfg(test)]
mod tests_sockmap;
#[cfg(test)]
mod tests_tls;
#[cfg(test)]
mod tests_twemproxy;
#[cfg(test)]
mod tests_zone;
pub mod tls;
#[cfg(test)]
pub(crate) mod tls_testing;
mod validate;
mod zone;

pub use credentials::{Auth, CredentialAddress, CredentialConfig};
pub use dns::{
    DEFAULT_DNS_CACHE_MAX_HOSTS, DEFAULT_DNS_CACHE_REFRESH_RATE, DEFAULT_DNS_REFRESH_RATE,
    DnsCacheConfig, DnsConfig, DnsLookupFamily, DnsTarget, is_dns,
};
pub use dump::REDACTED;
pub use external_auth::ExternalAuthConfig;
pub use least_request::LeastRequestConfig;
pub use routes::{KEY_VARIABLE, clusters_of};
pub use sockmap::{Sockmap, parse_port_list};
pub use tls::{DownstreamTls, SniCertificate, UpstreamTls};

/// A validated configuration snapshot. Immutable once built; a reload builds a new one.
///
/// Guarantees after [`parse`]: at least one listener; listener names and (non-zero-port)
/// addresses are unique; every route names an existing cluster; cluster names are unique; every
/// cluster has at least one host and no host twice.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Config {
    /// `[admin]`, optional.
    pub admin: AdminConfig,
    /// `[runtime]`, optional.
    pub runtime: RuntimeConfig,
    /// `[[listeners]]`, at least one, in file order.
    pub listeners: Vec<ListenerConfig>,
    /// `[[clusters]]`, in file order.
    pub clusters: Vec<ClusterConfig>,
    /// `[sockmap]`, optional: read by `respite-control` only; the data plane ignores it.
    pub sockmap: Sockmap,
}

/// `[admin]`: the admin HTTP endpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AdminConfig {
    /// TOML `address = "host:port"`. Default `127.0.0.1:9901` (Envoy's admin port). Unused
    /// with `control_socket_only`.
    pub address: SocketAddr,
    /// TOML `control_socket_only = true`: no TCP admin endpoint; the admin API answers only on
    /// the Unix control socket (`--control-socket`, mode 0600), where file permissions decide
    /// who may use it. The process refuses to start without a control socket, and with
    /// `--hot-restart` (which hands over through the admin address). Default false.
    pub control_socket_only: bool,
}

/// `[runtime]`: worker threads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuntimeConfig {
    /// Worker threads, 1 to [`limits::MAX_WORKERS`]; the default is the number of CPUs (resolved
    /// at load, within that maximum).
    pub workers: usize,
    /// Pin worker `i` to CPU `i % ncpu`. Default false.
    pub pin_workers: bool,
    /// How long SIGTERM waits for in-flight requests before exiting. TOML duration string
    /// (`"10s"`); default 10s.
    #[serde(serialize_with = "dump::duration")]
    pub drain_timeout: Duration,
    /// `tracing` filter directive (e.g. "info", "respite=debug"); `RUST_LOG` overrides it.
    /// Checked at load. Default none.
    pub log_level: Option<String>,
    /// Log line format: `"text"` (default, human-readable) or `"json"` (one JSON object per
    /// line, for log shippers). Takes effect at start.
    pub log_format: LogFormat,
    /// Bytes the process's clients may hold (Redis 7 `maxmemory-clients`): replies buffered for
    /// them plus the replies asked for on their behalf, split evenly among the workers. At it,
    /// sessions stop reading requests; past it, the clients holding the most are disconnected
    /// (`evicted_clients`). 0 = no limit. Default 1 GiB. Applies on reload.
    pub maxmemory_clients: usize,
}

/// `runtime.maxmemory_clients` when absent (bytes).
pub const DEFAULT_MAXMEMORY_CLIENTS: usize = 1024 * 1024 * 1024;

/// `runtime.log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// tracing-subscriber's human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON formatter).
    Json,
}

/// `[[listeners]]`: one downstream RESP listener (Envoy `redis_proxy` filter).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ListenerConfig {
    /// Required, non-empty, unique among listeners; printable. Without `stat_prefix` it is the
    /// stat prefix, and then follows its rules.
    pub name: String,
    /// Required `host:port` to bind; unique among listeners. Port 0 means any free port.
    pub address: SocketAddr,
    /// Stats root `redis.<stat_prefix>.`; defaults to `name`. ASCII letters, digits, `_`, `-`
    /// and `:` only, at most [`limits::MAX_STAT_NAME_LEN`] bytes (it reaches every stats
    /// output).
    pub stat_prefix: String,
    /// Required (as in Envoy), non-zero per-operation upstream timeout, e.g. `"1s"`.
    #[serde(serialize_with = "dump::duration")]
    pub op_timeout: Duration,
    /// twemproxy's `hash_tag` (src/nc_server.c `server_pool_idx`): with `Some([open, close])`
    /// a key is placed by the bytes between its first `open` and the first `close` after it
    /// when those are not empty, else by the whole key. `None`: the whole key. TOML
    /// `hash_tag = "{}"` (two bytes), or Envoy's `enable_hashtagging = true`, which means
    /// `"{}"`. A Redis Cluster cluster places by `{}` tags (its slot) whatever this is.
    #[serde(serialize_with = "dump::hash_tag")]
    pub hash_tag: Option<[u8; 2]>,
    /// Bytes; 0 = unset (flush at the end of each event-loop turn). Default 0; at most
    /// [`limits::MAX_BUFFER_SIZE_BEFORE_FLUSH`] (64 MiB).
    pub max_buffer_size_before_flush: usize,
    /// Default 3ms, at most [`limits::MAX_BUFFER_FLUSH_TIMEOUT`] (1s); used when
    /// `max_buffer_size_before_flush` is set.
    #[serde(serialize_with = "dump::duration")]
    pub buffer_flush_timeout: Duration,
    /// Accepted client passwords; empty (the default) means no client auth. No empty strings.
    #[serde(serialize_with = "dump::redact_each")]
    pub downstream_auth_passwords: Vec<String>,
    /// Turns on `AUTH user pass`; requires `downstream_auth_passwords`. Default none.
    pub downstream_auth_username: Option<String>,
    /// Extra command names (modules) routed like single-key commands by argv[1] (Envoy
    /// `custom_commands`); stored lowercase. Default empty.
    pub custom_commands: Vec<String>,
    /// Largest bulk string a request may carry, bytes; default and maximum 512 MiB (Redis's
    /// `proto-max-bulk-len`). A larger one gets a protocol error and the connection closes.
    pub max_request_bytes: usize,
    /// `[listeners.prefix_routes]`.
    pub prefix_routes: PrefixRoutes,
    /// `[[listeners.faults]]`, in order.
    pub faults: Vec<FaultConfig>,
    /// Which node of a Redis Cluster slot serves read commands (Envoy `read_policy`). Applies to
    /// `redis_cluster` clusters only. Default `primary`.
    pub read_policy: ReadPolicy,
    /// The one RESP version the listener serves (Envoy `protocol_version`); `None` (unset, the
    /// default): each connection picks RESP2 or RESP3 with `HELLO`, as Redis does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<ProtocolVersion>,
    /// The proxy's availability zone (Envoy `node.locality.zone`), compared with each Redis
    /// Cluster node's `availability_zone` by the `local_zone_affinity*` read policies; required
    /// by them and refused without them. Default none.
    pub local_zone: Option<String>,
    /// Per worker, the most connections to hosts known only from a `MOVED`/`ASK` redirect (Envoy
    /// `max_upstream_unknown_connections`); past it the redirect error goes to the client.
    /// Default 100, at most [`limits::MAX_UPSTREAM_UNKNOWN_CONNECTIONS`].
    pub max_upstream_unknown_connections: usize,
    /// Record `command.<cmd>.latency` in microseconds instead of milliseconds (Envoy
    /// `latency_in_micros`). Default false (milliseconds, Envoy's default).
    pub latency_in_micros: bool,
    /// Emit per-cluster, per-command upstream stats `cluster.<c>.redis_cluster.
    /// upstream_commands.<cmd>.total|success|failure|latency` (latency in µs; Envoy
    /// `enable_command_stats`). Default false.
    pub enable_command_stats: bool,
    /// `[listeners.hot_keys]`: track the most requested keys (absent = off, the default).
    pub hot_keys: Option<HotKeysConfig>,
    /// `[listeners.dns_cache]`: `redis_cluster` redirections naming a hostname are followed
    /// (absent, the default: they go to the client unchanged, as in Envoy without
    /// `dns_cache_config`).
    pub dns_cache: Option<DnsCacheConfig>,
    /// Values (request bulk strings or replies) at least this many bytes long are counted in
    /// `redis.<stat_prefix>.big_value_total` and logged (rate-limited) with their key. 0 = off
    /// (the default).
    pub big_value_bytes: usize,
    /// `[listeners.access_log]`: one line per sampled request (absent = off, the default).
    pub access_log: Option<AccessLogConfig>,
    /// `[listeners.client_output_buffer_limit_pubsub]`: when a subscribed client that does not
    /// read its messages is disconnected. Default Redis's: 32 MiB hard, 8 MiB soft for 60s.
    pub client_output_buffer_limit_pubsub: OutputBufferLimit,
    /// `[listeners.client_output_buffer_limit]`: when any other client that does not read its
    /// replies is disconnected. Default 1 GiB hard (above the largest value Redis stores by
    /// default, `proto-max-bulk-len` 512 MiB), 64 MiB soft for 60s.
    pub client_output_buffer_limit: OutputBufferLimit,
    /// `[listeners.tls]`: the listener accepts TLS only (absent, the default: plain TCP only).
    /// A reload changes the certificates of new connections; established ones keep theirs.
    pub tls: Option<DownstreamTls>,
    /// `[listeners.external_auth]`: AUTH is checked by a gRPC service (absent, the default:
    /// by `downstream_auth_passwords`). Not combined with `downstream_auth_passwords`.
    pub external_auth: Option<ExternalAuthConfig>,
    /// The one database a client's `SELECT` is answered `+OK` for: the `db` shared by every
    /// cluster the listener sends to (0 when they have none), `None` when their `db`s differ
    /// (then every `SELECT` is refused). Derived at load, not a TOML key
    /// ([`credentials::listener_db`]).
    #[serde(skip)]
    pub select_db: Option<u32>,
}

/// An output-buffer limit (Redis `client-output-buffer-limit <class> <hard> <soft> <soft
/// seconds>`): a client whose replies and messages not yet written pass `hard_limit` bytes, or
/// stay past `soft_limit` bytes for `soft_limit_for`, is disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OutputBufferLimit {
    /// Bytes; 0 = no hard limit.
    pub hard_limit: usize,
    /// Bytes; 0 = no soft limit.
    pub soft_limit: usize,
    /// How long the soft limit may be passed without a break.
    #[serde(serialize_with = "dump::duration")]
    pub soft_limit_for: Duration,
}

impl OutputBufferLimit {
    /// Respite's default for clients not subscribed. Redis sets none (`normal 0 0 0`); a proxy
    /// shared by many applications bounds each, above any single reply Redis sends by default.
    pub const NORMAL: OutputBufferLimit = OutputBufferLimit {
        hard_limit: 1024 * 1024 * 1024,
        soft_limit: 64 * 1024 * 1024,
        soft_limit_for: Duration::from_secs(60),
    };

    /// Redis's default for pub/sub clients: `client-output-buffer-limit pubsub 32mb 8mb 60`.
    pub const PUBSUB: OutputBufferLimit = OutputBufferLimit {
        hard_limit: 32 * 1024 * 1024,
        soft_limit: 8 * 1024 * 1024,
        soft_limit_for: Duration::from_secs(60),
    };
}

/// `[listeners.hot_keys]`: a bounded top-K of the most requested keys over a sliding window,
/// per listener (space-saving summaries per worker, merged on read; admin `/hot_keys`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HotKeysConfig {
    /// How many keys `/hot_keys` reports, 1..=1000. Default 10.
    pub top_k: usize,
    /// The sliding window the counts cover, at least 1s. Default 60s.
    #[serde(serialize_with = "dump::duration")]
    pub window: Duration,
}

impl Default for HotKeysConfig {
    fn default() -> Self {
        HotKeysConfig {
            top_k: 10,
            window: Duration::from_secs(60),
        }
    }
}

/// `[listeners.access_log]`: a sampled access log, one JSON object per line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AccessLogConfig {
    /// Required: a file to append to, or `"stderr"`.
    pub path: String,
    /// Fraction of requests logged, in (0, 1]; decided per request at random. Default 1.0.
    pub sample_rate: f64,
}

/// Envoy `ConnPoolSettings.ReadPolicy`. TOML: `read_policy = "primary" | "prefer_primary" |
/// "replica" | "prefer_replica" | "any" | "local_zone_affinity" |
/// "local_zone_affinity_replicas_and_primary"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ReadPolicy {
    /// Reads and writes go to the slot's primary.
    #[default]
    Primary,
    /// Reads go to the primary; to a replica when the primary cannot take the request.
    PreferPrimary,
    /// Reads go to replicas only; with no usable replica they fail (`no upstream host`).
    Replica,
    /// Reads go to a replica; to the primary when no replica can take the request.
    PreferReplica,
    /// Reads go to any node of the slot, spread by session.
    Any,
    /// Envoy `LOCAL_ZONE_AFFINITY` (formerly `AZ_AFFINITY`): reads go to a replica in the
    /// listener's `local_zone`; else to any replica; else to the primary. Node zones come from
    /// the cluster's `zone_discovery`.
    LocalZoneAffinity,
    /// Envoy `LOCAL_ZONE_AFFINITY_REPLICAS_AND_PRIMARY`: a replica in `local_zone`; else the
    /// primary if it is in `local_zone`; else any replica; else the primary.
    LocalZoneAffinityReplicasAndPrimary,
}

impl ReadPolicy {
    /// True for the policies that compare node zones with the listener's `local_zone`.
    pub fn zone_aware(self) -> bool {
        matches!(
            self,
            ReadPolicy::LocalZoneAffinity | ReadPolicy::LocalZoneAffinityReplicasAndPrimary
        )
    }
}

/// Envoy `RedisProxy.ProtocolVersion`: the RESP version a listener enforces. TOML:
/// `protocol_version = "resp2" | "resp3"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolVersion {
    /// RESP2 only: `HELLO 3` is answered `-NOPROTO`.
    Resp2,
    /// RESP3 only: a client must `HELLO 3` before any command but HELLO, AUTH and QUIT (the
    /// others are answered `-NOPROTO`), so every request goes to a RESP3 upstream connection.
    Resp3,
}

/// Envoy `PrefixRoutes`: which cluster a key goes to. The longest matching `prefix` of
/// [`PrefixRoutes::routes`] wins (a trie lookup, O(key length)); a key no prefix matches takes
/// [`PrefixRoutes::catch_all_route`], and without one gets `no upstream host`. Commands without a
/// key (fan-out commands such as FLUSHALL or DBSIZE, EVAL with no keys) are routed as the empty
/// key. [`parse`] requires a catch-all route or at least one route.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct PrefixRoutes {
    /// `[[listeners.prefix_routes.routes]]`, prefixes unique (compared lowercased when
    /// `case_insensitive`).
    pub routes: Vec<Route>,
    /// Match prefixes without regard to ASCII case (Envoy lowercases the key for the lookup only;
    /// the key forwarded keeps its case).
    pub case_insensitive: bool,
    /// `[listeners.prefix_routes.catch_all_route]`; its `prefix` is empty.
    pub catch_all_route: Option<Route>,
}

/// Envoy `PrefixRoutes.Route`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Route {
    /// The key prefix this route matches, at most 1000 bytes (Envoy's limit); empty for the
    /// catch-all route.
    pub prefix: String,
    /// Name of a `[[clusters]]` entry; [`parse`] rejects names that do not exist.
    pub cluster: String,
    /// Strip `prefix` from every key of the request before forwarding (and before
    /// `key_formatter`); hashing uses the forwarded key.
    pub remove_prefix: bool,
    /// Rewrite every key of the request with this template, `%KEY%` standing for the key (after
    /// `remove_prefix`), e.g. `"{%KEY%}"`. Hashing uses the rewritten key, so a template that
    /// adds a `{…}` hash tag decides the shard; [`parse`] requires `%KEY%` to appear.
    pub key_formatter: Option<String>,
    /// Fire-and-forget copies of the route's requests to other clusters.
    pub request_mirror_policy: Vec<MirrorPolicy>,
    /// `read_command_policy.cluster`: read commands go to this cluster instead of `cluster`.
    pub read_command_policy: Option<String>,
}

impl Route {
    /// A catch-all route to `cluster`: no prefix, no rewriting, no mirrors.
    pub fn catch_all(cluster: &str) -> Route {
        Route {
            prefix: String::new(),
            cluster: cluster.to_owned(),
            remove_prefix: false,
            key_formatter: None,
            request_mirror_policy: Vec::new(),
            read_command_policy: None,
        }
    }
}

/// Envoy `Route.RequestMirrorPolicy`: copy requests to `cluster`, ignoring its replies.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MirrorPolicy {
    /// Name of a `[[clusters]]` entry, not another mirror of the same route, nor a differently
    /// named cluster sharing a host with the route's. The route's own `cluster` is accepted, as
    /// in Envoy: each mirrored command then reaches that cluster twice (a write is applied
    /// twice).
    pub cluster: String,
    /// Mirror writes only.
    pub exclude_read_commands: bool,
    /// Percentage (0.0–100.0, default 100) of keys mirrored, decided by a hash of the key as the
    /// client sent it, so a key is always or never mirrored.
    pub runtime_fraction: f64,
}

/// Envoy `RedisFault.fault_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultType {
    /// Answer with an error instead of forwarding (after `delay`, if set).
    Error,
    /// Forward, and hold the reply back for `delay`.
    Delay,
}

/// Envoy `RedisFault`: `[[listeners.faults]]`. For one request, faults are tried in order with
/// one random draw (Envoy's amortised percentages: with 5% ERROR and 10% DELAY, 5% of requests
/// get the error and the next 10% the delay).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FaultConfig {
    pub fault_type: FaultType,
    /// Percentage (0.0–100.0) of matching requests that get this fault.
    pub fault_enabled: f64,
    /// Added delay; required for `delay` faults, optional for `error` faults.
    #[serde(serialize_with = "dump::opt_duration")]
    pub delay: Option<Duration>,
    /// Lowercase command names this fault applies to; empty: every command. AUTH and PING never
    /// get a fault ([`parse`] rejects them here).
    pub commands: Vec<String>,
}

/// `[[clusters]]`: a set of upstream Redis hosts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClusterConfig {
    /// Required, non-empty, unique among clusters; the same characters as a listener's
    /// `stat_prefix` (it scopes the `cluster.<name>.` stats).
    pub name: String,
    /// TOML key `type`; default `"static"`.
    #[serde(rename = "type")]
    pub cluster_type: ClusterType,
    /// Required, non-empty (may be empty for `type = "eds"`); no address twice. TOML items are `"host:port"` or
    /// `{ address = "host:port", weight = 1, name = "..." }`.
    pub hosts: Vec<HostConfig>,
    /// `"ketama"` (default), `"modula"`, `"random"`, `"round_robin"`, `"least_request"`,
    /// `"ring_hash"` or `"maglev"`.
    pub lb_policy: LbPolicy,
    /// `[clusters.least_request]`: settings of `lb_policy = "least_request"` (defaults for
    /// other policies, where the table is refused).
    pub least_request: LeastRequestConfig,
    /// twemproxy's key hash for `ketama` and `modula` (default `fnv1a_64`); `hash` set with
    /// `ring_hash`, `maglev` or `type = "redis_cluster"` is refused at load.
    pub hash: KeyHash,
    /// Non-zero; default 1s.
    #[serde(serialize_with = "dump::duration")]
    pub connect_timeout: Duration,
    /// Upstream ACL user; requires `auth_password`. Default none.
    pub auth_username: Option<String>,
    /// Upstream `AUTH` password (`requirepass`). Default none.
    #[serde(serialize_with = "dump::redact_option")]
    pub auth_password: Option<String>,
    /// `[[clusters.credentials]]`: per-host `AUTH` that replaces `auth_username`/`auth_password`
    /// for the host it names (Envoy `RedisProtocolOptions.credentials`; see
    /// [`ClusterConfig::auth_for`]). At most [`credentials::MAX_CREDENTIALS`]; default none.
    pub credentials: Vec<CredentialConfig>,
    /// The database every upstream connection `SELECT`s after its handshake (twemproxy
    /// `redis_db`); 0 (the default) sends nothing. Refused on `redis_cluster` clusters.
    pub db: u32,
    /// Upstream connections per host per worker, opened at once; 1 to
    /// [`limits::MAX_CONNECTIONS_PER_HOST`], default 1. With the other per-worker connections
    /// the config implies, bounded by `RLIMIT_NOFILE` ([`limits::fd_need`]).
    pub connections_per_host: usize,
    /// Topology settings of a `redis_cluster` cluster (Envoy `RedisClusterConfig`); defaults for
    /// other types, where the TOML keys are rejected.
    #[serde(flatten)]
    pub redis_cluster: RedisClusterConfig,
    /// `[[clusters.health_checks]]`: active checks, run once per process (not per worker). A host
    /// is healthy only while every check passes. Empty (the default) = no active checking.
    pub health_checks: Vec<HealthCheckConfig>,
    /// `[clusters.outlier_detection]`: passive ejection on consecutive local-origin failures.
    /// `None` (table absent, the default) = off, as in Envoy.
    pub outlier_detection: Option<OutlierDetectionConfig>,
    /// What a failed or ejected host means for its keys. Default `fail_fast`; `rehash` is
    /// rejected on `redis_cluster` clusters (slots cannot move by the proxy's choice).
    pub on_unhealthy: OnUnhealthy,
    /// New upstream connections per second to one host, summed over the process's workers (a
    /// token bucket holding one second's worth); 0 = unlimited. Default 100. Envoy has this on
    /// the listener's `ConnPoolSettings.connection_rate_limit`; here it belongs to the cluster,
    /// because it protects a host whatever listener sends to it.
    pub connection_rate_limit_per_sec: u32,
    /// Per host and worker, the most requests queued on an upstream connection and not yet
    /// written to its socket (waiting for the connection to come up, or behind a write the host
    /// is not reading); past it a request gets `-upstream overflow ...` at once. At least 1;
    /// default 16384 (Envoy's circuit breaker `max_pending_requests`, counted per worker here so
    /// that no counter is shared).
    pub max_pending_requests: usize,
    /// Per host and worker, the most leased upstream connections (in use plus idle): the
    /// connections a transaction holds from `WATCH` or `MULTI` to `EXEC`, apart from the shared
    /// pipelined ones. A client finding all in use waits up to the listener's `op_timeout`,
    /// then gets an error. 1 to [`limits::MAX_LEASED_CONNECTIONS`]; default 32.
    pub max_leased_connections: usize,
    /// Per host and worker, the bytes of replies Respite may have asked the host for and not
    /// yet read (estimated from the sizes of the replies it has been reading, with at most 64
    /// requests out at once until a connection's traffic shows it needs more; shared out over
    /// `connections_per_host`): past it requests wait in the connection's queue until replies
    /// come back, so the host's output buffer for Respite stays about this size whatever clients
    /// pipeline. [`limits::MIN_REPLY_BYTES_IN_FLIGHT`] to [`limits::MAX_REPLY_BYTES_IN_FLIGHT`];
    /// default 64 MiB.
    pub max_reply_bytes_in_flight: usize,
    /// `[clusters.tcp_keepalive]`: TCP keepalive on upstream connections, so a host that powers
    /// off is noticed while the connection is idle (Envoy `upstream_connection_options`).
    pub tcp_keepalive: TcpKeepalive,
    /// `[clusters.tls]`: every connection to the hosts is TLS (absent, the default: plain
    /// TCP). The handshake counts in `connect_timeout`.
    pub tls: Option<UpstreamTls>,
    /// `strict_dns` / `logical_dns` clusters: the names to resolve and how (`hosts` then holds
    /// the addresses the engine's resolver found, empty at load). `None` for other types.
    #[serde(flatten)]
    pub dns: Option<DnsConfig>,
}

impl ClusterConfig {
    /// True if a worker's pool built for `self` serves `other` unchanged, so a reload keeps its
    /// connections: everything but the health settings must match. Active checks run in the
    /// health thread, and outlier thresholds are read from the shared host state, so changing
    /// them never needs new connections.
    pub fn same_pool(&self, other: &ClusterConfig) -> bool {
        let strip = |c: &ClusterConfig| ClusterConfig {
            health_checks: Vec::new(),
            outlier_detection: None,
            ..c.clone()
        };
        strip(self) == strip(other)
    }
}

/// Envoy `core.v3.HealthCheck` with the `envoy.health_checkers.redis` extension: every
/// `interval` (plus up to `interval_jitter`), send `PING` (healthy on `+PONG`) or, when `key` is
/// set, `EXISTS key` (healthy only on `:0`, so setting the key drains the host).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct HealthCheckConfig {
    /// Time between checks of one host. Non-zero; default 5s.
    #[serde(serialize_with = "dump::duration")]
    pub interval: Duration,
    /// A random extra delay in [0, interval_jitter] added to each interval. Default 10% of
    /// `interval` (Envoy's default is 0; some jitter keeps proxies started together apart).
    #[serde(serialize_with = "dump::duration")]
    pub interval_jitter: Duration,
    /// Time to wait for the reply (connect included when the check must reconnect). Non-zero;
    /// default 1s.
    #[serde(serialize_with = "dump::duration")]
    pub timeout: Duration,
    /// Consecutive failed checks that make a healthy host unhealthy. At least 1; default 3.
    pub unhealthy_threshold: u32,
    /// Consecutive passed checks that make an unhealthy host healthy. At least 1; default 2.
    pub healthy_threshold: u32,
    /// Interval used while the cluster has seen no requests since the last check. Default 60s.
    #[serde(serialize_with = "dump::duration")]
    pub no_traffic_interval: Duration,
    /// `EXISTS key` instead of `PING` (Envoy `envoy.extensions.health_checkers.redis.v3.Redis`).
    pub key: Option<String>,
}

/// Envoy `cluster.v3.OutlierDetection`, the parts that apply to Redis: connect failures, op
/// timeouts and closed connections count as failures; every Redis reply, even an error reply,
/// counts as a success (Envoy redis_proxy docs, "Outlier detection").
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct OutlierDetectionConfig {
    /// Consecutive failures (seen by any one worker) that eject a host. At least 1; default 5.
    pub consecutive_5xx: u32,
    /// An ejection lasts `base_ejection_time × (number of times the host was ejected)`, capped by
    /// `max_ejection_time`. Default 30s.
    #[serde(serialize_with = "dump::duration")]
    pub base_ejection_time: Duration,
    /// Default 300s.
    #[serde(serialize_with = "dump::duration")]
    pub max_ejection_time: Duration,
    /// At most this percentage of the cluster's hosts are ejected at once (rounded down, but
    /// one host may always be ejected). 0-100; default 10.
    pub max_ejection_percent: u32,
    /// How often ejections are reviewed: ejection times are counted down, and a host that was
    /// not ejected during one interval has its ejection count decreased by one. Default 10s.
    #[serde(serialize_with = "dump::duration")]
    pub interval: Duration,
}

impl Default for OutlierDetectionConfig {
    fn default() -> Self {
        OutlierDetectionConfig {
            consecutive_5xx: 5,
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 10,
            interval: Duration::from_secs(10),
        }
    }
}

/// What an unhealthy (failed active checks) or ejected host means for the keys it owns. TOML:
/// `on_unhealthy = "fail_fast" | "rehash"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OnUnhealthy {
    /// Requests for the host's keys get an immediate `-no upstream host` error; keys never move,
    /// so no two hosts ever hold diverging values of one key (stateful data).
    #[default]
    FailFast,
    /// The host leaves the hash ring until it is healthy again; its keys go to the next host
    /// (pure caches, where a miss is cheap and a stale value on return is acceptable).
    Rehash,
}

/// TCP keepalive of upstream connections (Envoy `core.v3.TcpKeepalive`): after
/// `keepalive_time` idle, probe every `keepalive_interval`; `keepalive_probes` unanswered probes
/// close the connection. Defaults 30s / 5s / 3: a powered-off idle host is noticed in about 45s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct TcpKeepalive {
    #[serde(serialize_with = "dump::duration")]
    pub keepalive_time: Duration,
    #[serde(serialize_with = "dump::duration")]
    pub keepalive_interval: Duration,
    pub keepalive_probes: u32,
}

impl Default for TcpKeepalive {
    fn default() -> Self {
        TcpKeepalive {
            keepalive_time: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(5),
            keepalive_probes: 3,
        }
    }
}

/// Envoy `envoy.extensions.clusters.redis.v3.RedisClusterConfig`: how a `redis_cluster` cluster
/// keeps its slot map. TOML keys sit directly on the `[[clusters]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct RedisClusterConfig {
    /// How often `CLUSTER SLOTS` is polled from a random known node. Default 5s.
    #[serde(serialize_with = "dump::duration")]
    pub cluster_refresh_rate: Duration,
    /// Timeout of one topology request (connect + AUTH + `CLUSTER SLOTS`). Default 3s.
    #[serde(serialize_with = "dump::duration")]
    pub cluster_refresh_timeout: Duration,
    /// Minimum gap between refreshes triggered by redirects or failures; 0 = none (every
    /// threshold crossing refreshes, as in Envoy). Default 5s.
    #[serde(serialize_with = "dump::duration")]
    pub redirect_refresh_interval: Duration,
    /// `MOVED`/`ASK` replies (summed over workers) that trigger an early refresh; 0 = never.
    /// Default 5.
    pub redirect_refresh_threshold: u32,
    /// Upstream failures (connect failures, closed connections, timeouts) that trigger an early
    /// refresh; 0 = never. Default 5 (Envoy: 0; on here so that a dead primary's slots move to
    /// the promoted replica without waiting for the periodic refresh).
    pub failure_refresh_threshold: u32,
    /// Hosts turning unhealthy (active checks) or ejected (outlier detection) that trigger an
    /// early refresh; 0 = never. Default 1 (Envoy: 0; on here so that a primary found dead by a
    /// health check is looked up again at once).
    pub host_degraded_refresh_threshold: u32,
    /// Envoy `enable_zone_discovery`: with each topology refresh, ask every node `INFO server`
    /// and read its `availability_zone` (Valkey 8+; a node without the field, or that does not
    /// answer, has no known zone). Used by the `local_zone_affinity*` read policies. Default
    /// false.
    pub zone_discovery: bool,
}

impl Default for RedisClusterConfig {
    fn default() -> Self {
        RedisClusterConfig {
            cluster_refresh_rate: Duration::from_secs(5),
            cluster_refresh_timeout: Duration::from_secs(3),
            redirect_refresh_interval: Duration::from_secs(5),
            redirect_refresh_threshold: 5,
            failure_refresh_threshold: 5,
            host_degraded_refresh_threshold: 1,
            zone_discovery: false,
        }
    }
}

/// Envoy cluster discovery type. TOML: `type = "static"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterType {
    /// A fixed host list, resolved at load.
    Static,
    /// Hosts pushed by the control process from xDS EDS (Envoy `type: EDS`); otherwise like
    /// `static`, except that `hosts` may be empty: a cluster whose endpoints are all gone answers
    /// every request with `no upstream host`, as Envoy does.
    Eds,
    /// A Redis Cluster: `hosts` are seeds; the slot map comes from `CLUSTER SLOTS` (Envoy
    /// `envoy.clusters.redis`). Keys are placed by slot, `crc16(hashtag(key)) % 16384`, with
    /// hash tags always on; `lb_policy` does not apply.
    RedisCluster,
    /// Envoy STRICT_DNS: every address each configured name resolves to is a host, with the
    /// name's weight. Names are resolved off the workers at start and every
    /// `dns_refresh_rate`, never at load; a name that does not resolve (yet) contributes no
    /// host (a name that stops resolving keeps its last addresses, as in Envoy). A host's
    /// placement identity is its address `ip:port`.
    StrictDns,
    /// Envoy LOGICAL_DNS: exactly one configured name; the host is the first address it
    /// resolves to, re-resolved like `strict_dns`.
    LogicalDns,
}

/// Key placement policy of a cluster. TOML:
/// `lb_policy = "ketama" | "modula" | "random" | "round_robin" | "least_request" | "ring_hash"
/// | "maglev"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LbPolicy {
    /// twemproxy 0.5.0 `distribution: ketama` (src/hashkit/nc_ketama.c) with the cluster's
    /// `hash` (default `fnv1a_64`).
    #[default]
    Ketama,
    /// twemproxy 0.5.0 `distribution: modula` (src/hashkit/nc_modula.c): a table where each
    /// host appears `weight` times, in config order; a key goes to entry
    /// `hash(key) % entries`, with the cluster's `hash`.
    Modula,
    /// twemproxy 0.5.0 `distribution: random` (src/hashkit/nc_random.c): each command goes to
    /// a host drawn uniformly at random (twemproxy ignores weights here, and so does Respite);
    /// `hash` is accepted and has no effect, as in twemproxy. A key has no fixed home, so
    /// Respite draws once per client command (every key of one command, an MGET's included,
    /// goes to the same host, so no command is split across hosts) and once per transaction
    /// (MULTI…EXEC and WATCH stay on one host). Pub/sub needs PUBLISH and SUBSCRIBE of a
    /// channel to meet, so every channel, shard channel and pattern of a random cluster lives
    /// on one fixed host, its first live host; keyspace notifications are subscribed on every
    /// host (a key may be anywhere).
    Random,
    /// Envoy ROUND_ROBIN: each client command, or transaction, goes to the next host in turn
    /// on its worker; with unequal weights in Envoy's earliest-deadline-first order (host `i`
    /// serves `weight_i` of every `sum(weight)` turns, spread out). Like `random`, a key has no
    /// fixed home, and the same rules keep one command or transaction on one host and pub/sub
    /// on one fixed host; `hash` does not apply.
    RoundRobin,
    /// Envoy LEAST_REQUEST: each client command, or transaction, goes to the host with the
    /// fewest requests outstanding on this worker among `choice_count` hosts drawn at random
    /// (equal weights), or, with unequal weights, to a host drawn with probability
    /// proportional to `weight / (outstanding + 1)^active_request_bias`
    /// (`[clusters.least_request]`). Keys, transactions and pub/sub as with `random`; `hash`
    /// does not apply.
    LeastRequest,
    /// Envoy RING_HASH.
    RingHash,
    /// Envoy MAGLEV.
    Maglev,
}

/// twemproxy's key hash of a cluster (`hash:` of a nutcracker pool). TOML:
/// `hash = "fnv1a_64"` (default). Each is computed as nutcracker 0.5.0 does on x86-64
/// (`cluster::hashkit`, src/hashkit/*.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
pub enum KeyHash {
    /// `one_at_a_time` (nc_one_at_a_time.c).
    #[serde(rename = "one_at_a_time")]
    OneAtATime,
    /// `md5` (nc_md5.c).
    #[serde(rename = "md5")]
    Md5,
    /// `crc16` (nc_crc16.c), twemproxy's own, not Redis Cluster's.
    #[serde(rename = "crc16")]
    Crc16,
    /// `crc32` (nc_crc32.c), libmemcached's 15-bit variant.
    #[serde(rename = "crc32")]
    Crc32,
    /// `crc32a` (nc_crc32.c), the standard CRC-32.
    #[serde(rename = "crc32a")]
    Crc32a,
    /// `fnv1_64` (nc_fnv.c).
    #[serde(rename = "fnv1_64")]
    Fnv1_64,
    /// `fnv1a_64` (nc_fnv.c), twemproxy's default.
    #[default]
    #[serde(rename = "fnv1a_64")]
    Fnv1a64,
    /// `fnv1_32` (nc_fnv.c).
    #[serde(rename = "fnv1_32")]
    Fnv1_32,
    /// `fnv1a_32` (nc_fnv.c).
    #[serde(rename = "fnv1a_32")]
    Fnv1a32,
    /// `hsieh` (nc_hsieh.c).
    #[serde(rename = "hsieh")]
    Hsieh,
    /// `murmur` (nc_murmur.c).
    #[serde(rename = "murmur")]
    Murmur,
    /// `jenkins` (nc_jenkins.c).
    #[serde(rename = "jenkins")]
    Jenkins,
}

impl KeyHash {
    /// The TOML names of all twelve hashes, in twemproxy's order (`HASH_CODEC`, nc_hashkit.h),
    /// which is also the order of its `hash:` documentation.
    pub const NAMES: [&'static str; 12] = [
        "one_at_a_time",
        "md5",
        "crc16",
        "crc32",
        "crc32a",
        "fnv1_64",
        "fnv1a_64",
        "fnv1_32",
        "fnv1a_32",
        "hsieh",
        "murmur",
        "jenkins",
    ];
}

/// One upstream host.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HostConfig {
    /// `address_text` resolved at load (IP literals as is, hostnames via DNS, first result).
    pub address: SocketAddr,
    /// `host:port` exactly as written in the config (twemproxy's ketama hashes this text).
    pub address_text: String,
    /// Share of the key space relative to the other hosts; at least 1, default 1.
    pub weight: u32,
    /// Optional twemproxy-style server name; when set, ketama hashes it instead of the address.
    /// Unique within the cluster.
    pub name: Option<String>,
}

/// A config that could not be loaded; Display names the file, line and key:
/// `origin:line:col: key.path: message`, e.g.
/// `respite.toml:14:14: listeners[0].op_timeout: invalid duration "5": time unit needed, for
/// example 5sec or 5ms`. The `line:col` part is absent only when nothing in the file can be
/// pointed at (a missing file, or no `[[listeners]]` at all).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// Where the text came from: the file path as given, or the name a pushed text came under.
    pub origin: String,
    /// 1-based line and column (in characters) of the offending key or value; `None` when
    /// nothing in the text can be pointed at.
    pub location: Option<(usize, usize)>,
    /// The dotted key path (`listeners[0].op_timeout`); empty when the error is about the whole
    /// text (a file that cannot be read, a TOML syntax error outside any key).
    pub key: String,
    /// What is wrong, e.g. `must be greater than zero`.
    pub message: String,
}

impl ConfigError {
    /// `key.path: message` (or the message alone when there is no key): the error without its
    /// origin and location, for a text its reader never saw (a config rendered from Envoy
    /// resources, where only the key means something to the resource's author).
    pub fn reason(&self) -> String {
        if self.key.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.key, self.message)
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.origin)?;
        if let Some((line, col)) = self.location {
            write!(f, ":{line}:{col}")?;
        }
        write!(f, ": {}", self.reason())
    }
}
impl std::error::Error for ConfigError {}

/// Reads and validates a TOML config file, as [`parse`] does; errors name the path as given.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_fd_limit(path, limits::nofile().map(|(_, hard)| hard))
}

/// [`load`] with the file-descriptor check against `fd_limit`, or none when `None` (for a
/// reader that does not run the config, such as `respite drain --config`, which only wants
/// its admin address).
pub fn load_with_fd_limit(path: &Path, fd_limit: Option<u64>) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: path.display().to_string(),
        location: None,
        key: String::new(),
        message: e.to_string(),
    })?;
    parse_with_fd_limit(&text, &path.display().to_string(), fd_limit)
}

/// Parses and validates TOML text; `origin` names the source in errors. Hostnames in addresses
/// are resolved here (blocking DNS), so call it off the data path.
///
/// The file descriptors the whole config can hold open are checked against this process's hard
/// `RLIMIT_NOFILE` ([`limits::check_fds`]): `respite check-config`, start and SIGHUP load files
/// through here, and the data plane raises its soft limit up to the hard one when a config
/// needs it.
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_with_fd_limit(text, origin, limits::nofile().map(|(_, hard)| hard))
}

/// [`parse`] with the file-descriptor check against `fd_limit`, or none when `None`.
pub fn parse_with_fd_limit(
    text: &str,
    origin: &str,
    fd_limit: Option<u64>,
) -> Result<Config, ConfigError> {
    let src = locate::Source { text, origin };
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    validate::build(&src, raw, validate::Origin::File, fd_limit)
}

/// [`parse`] for a config pushed by `respite-control` over the control socket: the same checks,
/// except that zero listeners is valid (xDS can delete every listener; a data plane started
/// with no config file starts empty), and that the file-descriptor budget is left to the data
/// plane that applies it: a push runs on the data plane's workers, not on the `[runtime]` of
/// the text, and `respite-control` runs under other limits.
pub fn parse_pushed(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let src = locate::Source { text, origin };
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    validate::build(&src, raw, validate::Origin::Pushed, None)
}

/// Checks and normalises a log filter (`runtime.log_level`, admin `/logging?level=`): a comma
/// list of `level` or `target=level` directives, as `tracing_subscriber::EnvFilter` takes them,
/// with Envoy's level names accepted too (`warning` → `warn`, `critical` → `error`).
///
/// A bare word that is not a level is refused: `EnvFilter` would read it as a target name
/// enabled at every level, so `warning` would silently turn off every other log line.
///
/// # Errors
/// The offending directive and the accepted forms.
pub fn log_filter(text: &str) -> Result<String, String> {
    fn level(word: &str) -> Option<&'static str> {
        Some(match word.to_ascii_lowercase().as_str() {
            "trace" => "trace",
            "debug" => "debug",
            "info" => "info",
            "warn" | "warning" => "warn",
            "error" | "critical" | "err" => "error",
            "off" => "off",
            _ => return None,
        })
    }
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        let normal = match part.rsplit_once('=') {
            Some((target, lvl)) if !target.is_empty() => match level(lvl.trim()) {
                Some(l) => format!("{}={l}", target.trim()),
                None => part.to_owned(),
            },
            _ => match level(part) {
                Some(l) => l.to_owned(),
                None => {
                    return Err(format!(
                        "\"{part}\" is not a level: use trace, debug, info, warn (warning), \
                         error (critical) or off, or target=level"
                    ));
                }
            },
        };
        out.push(normal);
    }
    if out.is_empty() {
        return Err("empty log filter".into());
    }
    let joined = out.join(",");
    tracing_subscriber::EnvFilter::try_new(&joined).map_err(|e| e.to_string())?;
    Ok(joined)
}

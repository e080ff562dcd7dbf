//! The file model: the TOML document exactly as written, with spans kept on every value that a
//! later semantic check may need to point at. Shape checks (unknown keys, wrong types, missing
//! required keys) happen here; meaning checks happen in `validate`.
//!
//! The same types serialize (serde) back into the file format, which is how `respite-control`
//! writes the config it pushes: it builds these values from Envoy resources, so a key renamed
//! here is a compile error there instead of a key the data plane refuses at run time. Values
//! built in code carry no span ([`unspanned`]); absent options and empty lists are left out of
//! the text, so the data plane's defaults apply to them. What each key means, and its default,
//! is documented on the validated model ([`super::Config`] and the types it holds).

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
pub use toml::Spanned;

use super::{ClusterType, FaultType, KeyHash, LbPolicy, LogFormat, OnUnhealthy, ReadPolicy};

pub use super::sockmap::{RawPort, RawSockmap};

/// A value built in code rather than read from a text: its span is empty (`0..0`), and nothing
/// points at it (only parsed values can fail validation with a line number that means anything).
pub fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// A whole config file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[admin]` ([`super::AdminConfig`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<RawAdmin>,
    /// `[runtime]` ([`super::RuntimeConfig`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RawRuntime>,
    /// `[[listeners]]`, in file order.
    #[serde(default)]
    pub listeners: Vec<Spanned<RawListener>>,
    /// `[[clusters]]`, in file order.
    #[serde(default)]
    pub clusters: Vec<Spanned<RawCluster>>,
    /// `[sockmap]` ([`super::Sockmap`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockmap: Option<RawSockmap>,
}

impl RawConfig {
    /// The config as TOML text, in the format [`super::parse`] reads.
    ///
    /// # Errors
    /// Only a value TOML cannot hold (an integer above `i64::MAX`).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

/// `[admin]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `"host:port"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Spanned<String>>,
    /// Serve the admin API only on the control socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_socket_only: Option<Spanned<bool>>,
}

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuntime {
    /// Worker threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<Spanned<usize>>,
    /// Pin workers to CPUs.
    #[serde(default)]
    pub pin_workers: bool,
    /// SIGTERM's wait for in-flight requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Spanned<RawDuration>>,
    /// A `tracing` filter directive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<Spanned<String>>,
    /// `"text"` or `"json"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<Spanned<LogFormat>>,
    /// Bytes the clients may hold; 0 = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxmemory_clients: Option<Spanned<usize>>,
}

/// `[[listeners]]` ([`super::ListenerConfig`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    /// Required, unique.
    pub name: Spanned<String>,
    /// Required `"host:port"` to bind.
    pub address: Spanned<String>,
    /// Stats root; `name` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat_prefix: Option<Spanned<String>>,
    /// Required per-operation upstream timeout.
    pub op_timeout: Spanned<RawDuration>,
    /// Hash only the `{...}` part of keys.
    #[serde(default)]
    pub enable_hashtagging: bool,
    /// twemproxy `hash_tag`: two bytes, e.g. `"{}"` or `"::"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_tag: Option<Spanned<String>>,
    /// Bytes; 0 = flush at the end of each event-loop turn.
    #[serde(default)]
    pub max_buffer_size_before_flush: usize,
    /// Flush timer used with `max_buffer_size_before_flush`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer_flush_timeout: Option<Spanned<RawDuration>>,
    /// Accepted client passwords (in clear: this is the file, not the dump).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downstream_auth_passwords: Vec<Spanned<String>>,
    /// `AUTH user pass` username.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downstream_auth_username: Option<Spanned<String>>,
    /// Module commands routed by argv\[1\].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_commands: Vec<Spanned<String>>,
    /// Largest bulk string of a request, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<Spanned<usize>>,
    /// `[listeners.prefix_routes]`; required by validation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_routes: Option<Spanned<RawPrefixRoutes>>,
    /// `[[listeners.faults]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Spanned<RawFault>>,
    /// Redis Cluster replica reads; only with a `redis_cluster` route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_policy: Option<Spanned<ReadPolicy>>,
    /// `"resp2" | "resp3"`: the one RESP version served; unset: negotiated per connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<Spanned<super::ProtocolVersion>>,
    /// The proxy's zone for the `local_zone_affinity*` read policies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_zone: Option<Spanned<String>>,
    /// Redis Cluster redirect connections; only with a `redis_cluster` route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_upstream_unknown_connections: Option<Spanned<usize>>,
    /// Command latency stats in microseconds instead of milliseconds.
    #[serde(default)]
    pub latency_in_micros: bool,
    /// Per-command stats.
    #[serde(default)]
    pub enable_command_stats: bool,
    /// `[listeners.hot_keys]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_keys: Option<Spanned<RawHotKeys>>,
    /// `[listeners.dns_cache]`: follow redirections to hostnames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_cache: Option<Spanned<RawDnsCache>>,
    /// Values at least this big (bytes) are counted; 0 = off.
    #[serde(default)]
    pub big_value_bytes: usize,
    /// `[listeners.access_log]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<Spanned<RawAccessLog>>,
    /// `[listeners.client_output_buffer_limit_pubsub]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_output_buffer_limit_pubsub: Option<Spanned<RawOutputBufferLimit>>,
    /// `[listeners.client_output_buffer_limit]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_output_buffer_limit: Option<Spanned<RawOutputBufferLimit>>,
    /// `[listeners.tls]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Spanned<RawDownstreamTls>>,
    /// `[listeners.external_auth]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_auth: Option<Spanned<super::external_auth::RawExternalAuth>>,
}

/// `[listeners.tls]` ([`super::DownstreamTls`]). Paths as written (relative ones are relative
/// to the data plane's working directory).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDownstreamTls {
    /// PEM certificate chain file.
    pub certificate_chain: Spanned<String>,
    /// PEM private key file.
    pub private_key: Spanned<String>,
    /// PEM CA bundle for client certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted_ca: Option<Spanned<String>>,
    /// Refuse clients without a valid certificate.
    #[serde(default)]
    pub require_client_certificate: bool,
    /// `[[listeners.tls.sni]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<Spanned<RawSniCertificate>>,
}

/// `[[listeners.tls.sni]]` ([`super::SniCertificate`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSniCertificate {
    /// Names served by this certificate.
    pub server_names: Vec<Spanned<String>>,
    /// PEM certificate chain file.
    pub certificate_chain: Spanned<String>,
    /// PEM private key file.
    pub private_key: Spanned<String>,
}

/// `[clusters.tls]` ([`super::UpstreamTls`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// PEM CA bundle; the system's roots when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted_ca: Option<Spanned<String>>,
    /// Server name sent and verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<Spanned<String>>,
    /// PEM client certificate chain file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_chain: Option<Spanned<String>>,
    /// PEM private key file of the client certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Spanned<String>>,
    /// Accept any server certificate.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl RawListener {
    /// A listener with its required keys and every other key absent (its default).
    pub fn new(name: String, address: String, op_timeout: RawDuration) -> RawListener {
        RawListener {
            name: unspanned(name),
            address: unspanned(address),
            stat_prefix: None,
            op_timeout: unspanned(op_timeout),
            enable_hashtagging: false,
            hash_tag: None,
            max_buffer_size_before_flush: 0,
            buffer_flush_timeout: None,
            downstream_auth_passwords: Vec::new(),
            downstream_auth_username: None,
            custom_commands: Vec::new(),
            max_request_bytes: None,
            prefix_routes: None,
            faults: Vec::new(),
            read_policy: None,
            protocol_version: None,
            local_zone: None,
            max_upstream_unknown_connections: None,
            latency_in_micros: false,
            enable_command_stats: false,
            hot_keys: None,
            dns_cache: None,
            big_value_bytes: 0,
            access_log: None,
            client_output_buffer_limit_pubsub: None,
            client_output_buffer_limit: None,
            external_auth: None,
            tls: None,
        }
    }
}

/// `[listeners.dns_cache]` ([`super::DnsCacheConfig`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDnsCache {
    /// Re-resolution period of a cached name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_refresh_rate: Option<Spanned<RawDuration>>,
    /// Most names held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_hosts: Option<Spanned<usize>>,
    /// Address families.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_lookup_family: Option<Spanned<super::DnsLookupFamily>>,
}

/// `[listeners.hot_keys]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHotKeys {
    /// Keys reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<Spanned<usize>>,
    /// Counting window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Spanned<RawDuration>>,
}

/// `[listeners.client_output_buffer_limit_pubsub]`, `[listeners.client_output_buffer_limit]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutputBufferLimit {
    /// Bytes; 0 = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard_limit: Option<Spanned<usize>>,
    /// Bytes; 0 = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_limit: Option<Spanned<usize>>,
    /// How long the soft limit may be passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_limit_for: Option<Spanned<RawDuration>>,
}

/// `[listeners.access_log]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// A file path, or `"stderr"`.
    pub path: Spanned<String>,
    /// Fraction of requests logged, (0, 1].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_rate: Option<Spanned<f64>>,
}

/// `[listeners.prefix_routes]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrefixRoutes {
    /// `[[listeners.prefix_routes.routes]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Spanned<RawRoute>>,
    /// Compare prefixes without case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// The route of keys no prefix matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_all_route: Option<Spanned<RawRoute>>,
}

/// One route (or the catch-all route, which has no `prefix`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Key prefix; required except on the catch-all route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<Spanned<String>>,
    /// Required target cluster.
    pub cluster: Spanned<String>,
    /// Strip the prefix from keys sent upstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove_prefix: Option<Spanned<bool>>,
    /// Key template holding `%KEY%`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_formatter: Option<Spanned<String>>,
    /// `[[...request_mirror_policy]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_mirror_policy: Vec<Spanned<RawMirrorPolicy>>,
    /// Where read commands go instead of `cluster`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_command_policy: Option<Spanned<RawReadCommandPolicy>>,
}

impl RawRoute {
    /// A route to `cluster` with every other key absent.
    pub fn new(cluster: String) -> RawRoute {
        RawRoute {
            prefix: None,
            cluster: unspanned(cluster),
            remove_prefix: None,
            key_formatter: None,
            request_mirror_policy: Vec::new(),
            read_command_policy: None,
        }
    }
}

/// One request mirror of a route.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMirrorPolicy {
    /// Required mirror cluster.
    pub cluster: Spanned<String>,
    /// Mirror writes only.
    #[serde(default)]
    pub exclude_read_commands: bool,
    /// Percentage of requests mirrored, 0-100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_fraction: Option<Spanned<f64>>,
}

/// A route's `read_command_policy`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawReadCommandPolicy {
    /// Required cluster for read commands.
    pub cluster: Spanned<String>,
}

/// `[[listeners.faults]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    /// Required `"delay"` or `"error"`.
    pub fault_type: Spanned<FaultType>,
    /// Required percentage of requests, 0-100.
    pub fault_enabled: Spanned<f64>,
    /// Required for a delay fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<Spanned<RawDuration>>,
    /// Commands it applies to; empty = every command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<Spanned<String>>,
}

/// `[[clusters]]` ([`super::ClusterConfig`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Required, unique.
    pub name: Spanned<String>,
    /// `type`; `"static"` when absent.
    #[serde(rename = "type", default = "default_cluster_type")]
    pub cluster_type: ClusterType,
    /// Required (may be empty for `type = "eds"`).
    pub hosts: Spanned<Vec<Spanned<RawHost>>>,
    /// Consistent-hash policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lb_policy: Option<Spanned<LbPolicy>>,
    /// `[clusters.least_request]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub least_request: Option<Spanned<super::least_request::RawLeastRequest>>,
    /// twemproxy key hash (`ketama`, `modula`; accepted without effect with `random`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<Spanned<KeyHash>>,
    /// Upstream connect timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Spanned<RawDuration>>,
    /// Upstream `AUTH` username.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_username: Option<Spanned<String>>,
    /// Upstream `AUTH` password (in clear: this is the file, not the dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_password: Option<Spanned<String>>,
    /// `[[clusters.credentials]]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Spanned<Vec<Spanned<super::credentials::RawCredential>>>>,
    /// Database selected on every upstream connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db: Option<Spanned<u32>>,
    /// Connections per host per worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_per_host: Option<Spanned<usize>>,
    /// `redis_cluster` only: slot map poll interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_refresh_rate: Option<Spanned<RawDuration>>,
    /// `redis_cluster` only: timeout of one topology request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_refresh_timeout: Option<Spanned<RawDuration>>,
    /// `redis_cluster` only: least gap between triggered refreshes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_refresh_interval: Option<Spanned<RawDuration>>,
    /// `redis_cluster` only: redirects that trigger a refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_refresh_threshold: Option<Spanned<u32>>,
    /// `redis_cluster` only: failures that trigger a refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_refresh_threshold: Option<Spanned<u32>>,
    /// `redis_cluster` only: degraded hosts that trigger a refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_degraded_refresh_threshold: Option<Spanned<u32>>,
    /// `redis_cluster` only: learn node zones from `INFO server`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_discovery: Option<Spanned<bool>>,
    /// `[[clusters.health_checks]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<Spanned<RawHealthCheck>>,
    /// `[clusters.outlier_detection]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<Spanned<RawOutlierDetection>>,
    /// `"fail_fast"` or `"rehash"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_unhealthy: Option<Spanned<OnUnhealthy>>,
    /// New connections per second to one host; 0 = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_rate_limit_per_sec: Option<Spanned<u32>>,
    /// Queued requests per host and worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<Spanned<usize>>,
    /// Leased connections per host and worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_leased_connections: Option<Spanned<usize>>,
    /// Reply bytes asked of a host and not yet read, per host and worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_reply_bytes_in_flight: Option<Spanned<usize>>,
    /// `[clusters.tcp_keepalive]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive: Option<Spanned<RawTcpKeepalive>>,
    /// `[clusters.tls]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Spanned<RawUpstreamTls>>,
    /// `strict_dns` / `logical_dns` only: re-resolution period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_refresh_rate: Option<Spanned<RawDuration>>,
    /// `strict_dns` / `logical_dns` only: address families.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_lookup_family: Option<Spanned<super::DnsLookupFamily>>,
}

impl RawCluster {
    /// A cluster of `cluster_type` with no hosts and every other key absent.
    pub fn new(name: String, cluster_type: ClusterType) -> RawCluster {
        RawCluster {
            name: unspanned(name),
            cluster_type,
            hosts: unspanned(Vec::new()),
            lb_policy: None,
            least_request: None,
            hash: None,
            connect_timeout: None,
            auth_username: None,
            auth_password: None,
            credentials: None,
            db: None,
            connections_per_host: None,
            cluster_refresh_rate: None,
            cluster_refresh_timeout: None,
            redirect_refresh_interval: None,
            redirect_refresh_threshold: None,
            failure_refresh_threshold: None,
            host_degraded_refresh_threshold: None,
            zone_discovery: None,
            health_checks: Vec::new(),
            outlier_detection: None,
            on_unhealthy: None,
            connection_rate_limit_per_sec: None,
            max_pending_requests: None,
            max_leased_connections: None,
            max_reply_bytes_in_flight: None,
            tcp_keepalive: None,
            tls: None,
            dns_refresh_rate: None,
            dns_lookup_family: None,
        }
    }
}

/// `[[clusters.health_checks]]` ([`super::HealthCheckConfig`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// Time between checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Spanned<RawDuration>>,
    /// Random extra delay per interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_jitter: Option<Spanned<RawDuration>>,
    /// Reply timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Spanned<RawDuration>>,
    /// Failures that make a host unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold: Option<Spanned<u32>>,
    /// Passes that make a host healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy_threshold: Option<Spanned<u32>>,
    /// Interval while the cluster sees no traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_traffic_interval: Option<Spanned<RawDuration>>,
    /// `EXISTS key` instead of `PING`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Spanned<String>>,
}

/// `[clusters.outlier_detection]` ([`super::OutlierDetectionConfig`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutlierDetection {
    /// Consecutive failures that eject a host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consecutive_5xx: Option<Spanned<u32>>,
    /// First ejection's length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<Spanned<RawDuration>>,
    /// Longest ejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ejection_time: Option<Spanned<RawDuration>>,
    /// Most hosts ejected at once, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<Spanned<u32>>,
    /// Review interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Spanned<RawDuration>>,
}

/// `[clusters.tcp_keepalive]` ([`super::TcpKeepalive`]).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTcpKeepalive {
    /// Idle time before the first probe, whole seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<Spanned<RawDuration>>,
    /// Time between probes, whole seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_interval: Option<Spanned<RawDuration>>,
    /// Unanswered probes that close the connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_probes: Option<Spanned<u32>>,
}

fn default_cluster_type() -> ClusterType {
    ClusterType::Static
}

/// A duration as written. Numbers are accepted here only so that validation can reject them with
/// a message about units instead of serde's generic "invalid type".
#[derive(Debug, Clone, PartialEq)]
pub enum RawDuration {
    /// A string, e.g. `"250ms"` (humantime syntax; validation parses it).
    Text(String),
    /// A bare number, kept as written for the error message.
    Number(String),
}

impl Serialize for RawDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RawDuration::Text(t) => s.serialize_str(t),
            // Written back as the number it was, so that it fails validation the same way.
            RawDuration::Number(n) => match (n.parse::<i64>(), n.parse::<f64>()) {
                (Ok(i), _) => s.serialize_i64(i),
                (_, Ok(f)) => s.serialize_f64(f),
                _ => s.serialize_str(n),
            },
        }
    }
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration string with a unit, like \"250ms\" or \"5s\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A host is either `"host:port"` or `{ address, weight, name }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RawHost {
    /// `"host:port"`.
    Short(String),
    /// `{ address = "host:port", weight = N, name = "..." }`.
    Full(RawHostTable),
}

/// The table form of a host ([`super::HostConfig`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHostTable {
    /// Required `"host:port"`.
    pub address: Spanned<String>,
    /// Share of the key space; 1 when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<Spanned<u32>>,
    /// twemproxy-style server name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<Spanned<String>>,
}

impl<'de> Deserialize<'de> for RawHost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHost;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a \"host:port\" string or a table { address, weight, name }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawHost, E> {
                Ok(RawHost::Short(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawHost, A::Error> {
                // The map access is toml's own, so spans and unknown-key errors inside the
                // table keep their precise locations.
                RawHostTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawHost::Full)
            }
        }
        d.deserialize_any(V)
    }
}

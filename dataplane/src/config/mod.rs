//! The one config model (DESIGN.md "Config model") and its TOML loader.
//!
//! CONTRACT (skeleton): the types below are what the engine consumes; `load`/`parse` turn a TOML
//! file into a validated [`Config`] or a [`ConfigError`] naming the key and its line.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// A validated configuration snapshot. Immutable once built; a reload builds a new one.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub admin: AdminConfig,
    pub runtime: RuntimeConfig,
    pub listeners: Vec<ListenerConfig>,
    pub clusters: Vec<ClusterConfig>,
}

/// `[admin]`: the admin HTTP endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// Default `127.0.0.1:9901` (Envoy's admin port).
    pub address: SocketAddr,
}

/// `[runtime]`: worker threads.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeConfig {
    /// Worker threads; the default is the number of CPUs (resolved at load).
    pub workers: usize,
    /// Pin worker `i` to CPU `i % ncpu`.
    pub pin_workers: bool,
    /// How long SIGTERM waits for in-flight requests before exiting. Default 10s.
    pub drain_timeout: Duration,
    /// `tracing` filter directive (e.g. "info", "respite=debug"); `RUST_LOG` overrides it.
    pub log_level: Option<String>,
}

/// `[[listeners]]`: one downstream RESP listener (Envoy `redis_proxy` filter).
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    pub name: String,
    pub address: SocketAddr,
    pub stat_prefix: String,
    pub op_timeout: Duration,
    pub enable_hashtagging: bool,
    /// Bytes; 0 = unset (flush at the end of each event-loop turn).
    pub max_buffer_size_before_flush: usize,
    /// Default 3ms when `max_buffer_size_before_flush` is set.
    pub buffer_flush_timeout: Duration,
    pub downstream_auth_passwords: Vec<String>,
    pub downstream_auth_username: Option<String>,
    pub prefix_routes: PrefixRoutes,
}

/// Envoy `PrefixRoutes`; only the catch-all route for now.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PrefixRoutes {
    pub catch_all_route: Option<Route>,
}

/// Envoy `PrefixRoutes.Route`.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub cluster: String,
}

/// `[[clusters]]`: a set of upstream Redis hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    pub name: String,
    pub cluster_type: ClusterType,
    pub hosts: Vec<HostConfig>,
    pub lb_policy: LbPolicy,
    pub connect_timeout: Duration,
    pub auth_username: Option<String>,
    pub auth_password: Option<String>,
    /// Upstream connections per host per worker; default 1.
    pub connections_per_host: usize,
}

/// Envoy cluster discovery type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterType {
    Static,
}

/// Consistent-hash policy of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LbPolicy {
    /// twemproxy-compatible ketama (`hash: fnv1a_64`, `distribution: ketama`).
    #[default]
    Ketama,
    /// Envoy RING_HASH.
    RingHash,
    /// Envoy MAGLEV.
    Maglev,
}

/// One upstream host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    pub address: SocketAddr,
    /// `host:port` exactly as written in the config (twemproxy's ketama hashes this text).
    pub address_text: String,
    /// Default 1.
    pub weight: u32,
    /// Optional twemproxy-style server name; when set, ketama hashes it instead of the address.
    pub name: Option<String>,
}

/// A config that could not be loaded; Display names the file, line and key.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}

/// Reads and validates a TOML config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// Parses and validates TOML text; `origin` names the source in errors.
pub fn parse(_text: &str, _origin: &str) -> Result<Config, ConfigError> {
    Err(ConfigError("not implemented".into()))
}

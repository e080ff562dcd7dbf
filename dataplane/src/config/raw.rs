//! The serde layer: the TOML document exactly as written, with spans kept on every value that a
//! later semantic check may need to point at. Shape checks (unknown keys, wrong types, missing
//! required keys) happen here; meaning checks happen in `validate`.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::{ClusterType, FaultType, LbPolicy, LogFormat, OnUnhealthy, ReadPolicy};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub admin: Option<RawAdmin>,
    #[serde(default)]
    pub runtime: Option<RawRuntime>,
    #[serde(default)]
    pub listeners: Vec<Spanned<RawListener>>,
    #[serde(default)]
    pub clusters: Vec<Spanned<RawCluster>>,
    #[serde(default)]
    pub sockmap: Option<super::sockmap::RawSockmap>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub address: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRuntime {
    pub workers: Option<Spanned<usize>>,
    #[serde(default)]
    pub pin_workers: bool,
    pub drain_timeout: Option<Spanned<RawDuration>>,
    pub log_level: Option<Spanned<String>>,
    pub log_format: Option<Spanned<LogFormat>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub stat_prefix: Option<Spanned<String>>,
    pub op_timeout: Spanned<RawDuration>,
    #[serde(default)]
    pub enable_hashtagging: bool,
    #[serde(default)]
    pub max_buffer_size_before_flush: usize,
    pub buffer_flush_timeout: Option<Spanned<RawDuration>>,
    #[serde(default)]
    pub downstream_auth_passwords: Vec<Spanned<String>>,
    pub downstream_auth_username: Option<Spanned<String>>,
    #[serde(default)]
    pub custom_commands: Vec<Spanned<String>>,
    pub max_request_bytes: Option<Spanned<usize>>,
    pub prefix_routes: Option<Spanned<RawPrefixRoutes>>,
    #[serde(default)]
    pub faults: Vec<Spanned<RawFault>>,
    pub read_policy: Option<Spanned<ReadPolicy>>,
    pub max_upstream_unknown_connections: Option<Spanned<usize>>,
    #[serde(default)]
    pub latency_in_micros: bool,
    #[serde(default)]
    pub enable_command_stats: bool,
    pub hot_keys: Option<Spanned<RawHotKeys>>,
    #[serde(default)]
    pub big_value_bytes: usize,
    pub access_log: Option<Spanned<RawAccessLog>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHotKeys {
    pub top_k: Option<Spanned<usize>>,
    pub window: Option<Spanned<RawDuration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccessLog {
    pub path: Spanned<String>,
    pub sample_rate: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrefixRoutes {
    #[serde(default)]
    pub routes: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    pub case_insensitive: bool,
    pub catch_all_route: Option<Spanned<RawRoute>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub prefix: Option<Spanned<String>>,
    pub cluster: Spanned<String>,
    pub remove_prefix: Option<Spanned<bool>>,
    pub key_formatter: Option<Spanned<String>>,
    #[serde(default)]
    pub request_mirror_policy: Vec<Spanned<RawMirrorPolicy>>,
    pub read_command_policy: Option<Spanned<RawReadCommandPolicy>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMirrorPolicy {
    pub cluster: Spanned<String>,
    #[serde(default)]
    pub exclude_read_commands: bool,
    pub runtime_fraction: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReadCommandPolicy {
    pub cluster: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub fault_type: Spanned<FaultType>,
    pub fault_enabled: Spanned<f64>,
    pub delay: Option<Spanned<RawDuration>>,
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub name: Spanned<String>,
    #[serde(rename = "type", default = "default_cluster_type")]
    pub cluster_type: ClusterType,
    pub hosts: Spanned<Vec<Spanned<RawHost>>>,
    pub lb_policy: Option<Spanned<LbPolicy>>,
    pub connect_timeout: Option<Spanned<RawDuration>>,
    pub auth_username: Option<Spanned<String>>,
    pub auth_password: Option<Spanned<String>>,
    pub connections_per_host: Option<Spanned<usize>>,
    pub cluster_refresh_rate: Option<Spanned<RawDuration>>,
    pub cluster_refresh_timeout: Option<Spanned<RawDuration>>,
    pub redirect_refresh_interval: Option<Spanned<RawDuration>>,
    pub redirect_refresh_threshold: Option<Spanned<u32>>,
    pub failure_refresh_threshold: Option<Spanned<u32>>,
    pub host_degraded_refresh_threshold: Option<Spanned<u32>>,
    #[serde(default)]
    pub health_checks: Vec<Spanned<RawHealthCheck>>,
    pub outlier_detection: Option<Spanned<RawOutlierDetection>>,
    pub on_unhealthy: Option<Spanned<OnUnhealthy>>,
    pub connection_rate_limit_per_sec: Option<Spanned<u32>>,
    pub max_pending_requests: Option<Spanned<usize>>,
    pub tcp_keepalive: Option<Spanned<RawTcpKeepalive>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    pub interval: Option<Spanned<RawDuration>>,
    pub interval_jitter: Option<Spanned<RawDuration>>,
    pub timeout: Option<Spanned<RawDuration>>,
    pub unhealthy_threshold: Option<Spanned<u32>>,
    pub healthy_threshold: Option<Spanned<u32>>,
    pub no_traffic_interval: Option<Spanned<RawDuration>>,
    pub key: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutlierDetection {
    pub consecutive_5xx: Option<Spanned<u32>>,
    pub base_ejection_time: Option<Spanned<RawDuration>>,
    pub max_ejection_time: Option<Spanned<RawDuration>>,
    pub max_ejection_percent: Option<Spanned<u32>>,
    pub interval: Option<Spanned<RawDuration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTcpKeepalive {
    pub keepalive_time: Option<Spanned<RawDuration>>,
    pub keepalive_interval: Option<Spanned<RawDuration>>,
    pub keepalive_probes: Option<Spanned<u32>>,
}

fn default_cluster_type() -> ClusterType {
    ClusterType::Static
}

/// A duration as written. Numbers are accepted here only so that validation can reject them with
/// a message about units instead of serde's generic "invalid type".
#[derive(Debug)]
pub(super) enum RawDuration {
    Text(String),
    Number(String),
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
#[derive(Debug)]
pub(super) enum RawHost {
    Short(String),
    Full(RawHostTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostTable {
    pub address: Spanned<String>,
    pub weight: Option<Spanned<u32>>,
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

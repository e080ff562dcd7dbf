//! `cluster_type {name: envoy.clusters.redis, typed_config}` → the `redis_cluster` keys.
//! Source: Envoy's `extensions/clusters/redis/v3/redis_cluster.proto`. The proto's own example
//! wraps the config in a `google.protobuf.Struct`; that, a `TypedStruct` and the typed
//! `RedisClusterConfig` Any are all accepted (`fields::decode`, the rule for every typed_config).
//!
//! Values are copied as the resource gives them, Envoy's defaults included: an absent
//! `failure_refresh_threshold` or `host_degraded_refresh_threshold` is Envoy's 0 (never), not
//! Respite's own defaults (5 and 1), so an Envoy config behaves as it did under Envoy.

use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::google::protobuf::Any;

use respite::config::raw::{RawCluster, unspanned};

use super::fields::{decode, duration, positive_duration};

/// `cluster_type.typed_config`'s type.
pub const REDIS_CLUSTER_CONFIG_TYPE: &str =
    "type.googleapis.com/envoy.extensions.clusters.redis.v3.RedisClusterConfig";
const P: &str = "cluster_type.typed_config";

/// Writes the redis cluster keys. An absent `typed_config` means all Envoy defaults.
pub(super) fn config(any: Option<&Any>, t: &mut RawCluster) -> Result<(), String> {
    let cfg = match any {
        None => RedisClusterConfig::default(),
        Some(a) => decode(a, REDIS_CLUSTER_CONFIG_TYPE, P)?,
    };
    // Nodes' zones from `INFO server`'s `availability_zone` (Valkey 8+), as Envoy reads them.
    if cfg.enable_zone_discovery.is_some_and(|v| v.value) {
        t.zone_discovery = Some(unspanned(true));
    }
    if let Some(d) = &cfg.cluster_refresh_rate {
        let v = positive_duration(d, &format!("{P}.cluster_refresh_rate"))?;
        t.cluster_refresh_rate = Some(unspanned(v));
    }
    if let Some(d) = &cfg.cluster_refresh_timeout {
        let v = positive_duration(d, &format!("{P}.cluster_refresh_timeout"))?;
        t.cluster_refresh_timeout = Some(unspanned(v));
    }
    // 0 is Envoy's "no minimum gap between triggered refreshes"; the data plane means the same.
    if let Some(d) = &cfg.redirect_refresh_interval {
        let v = duration(d, &format!("{P}.redirect_refresh_interval"))?;
        t.redirect_refresh_interval = Some(unspanned(v));
    }
    // Envoy's default is 5, the same as Respite's, when unset.
    t.redirect_refresh_threshold = cfg.redirect_refresh_threshold.map(|v| unspanned(v.value));
    t.failure_refresh_threshold = Some(unspanned(cfg.failure_refresh_threshold));
    t.host_degraded_refresh_threshold = Some(unspanned(cfg.host_degraded_refresh_threshold));
    Ok(())
}

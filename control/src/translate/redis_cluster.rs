//! `cluster_type {name: envoy.clusters.redis, typed_config}` → the `redis_cluster` keys.
//! Source: Envoy's `extensions/clusters/redis/v3/redis_cluster.proto`. The proto's own example
//! wraps the config in a `google.protobuf.Struct`, so both that and the typed
//! `RedisClusterConfig` Any are accepted.
//!
//! Values are copied as the resource gives them, Envoy's defaults included: an absent
//! `failure_refresh_threshold` or `host_degraded_refresh_threshold` is Envoy's 0 (never), not
//! Respite's own defaults (5 and 1), so an Envoy config behaves as it did under Envoy.

use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::google::protobuf::{Any, Duration, Struct, Value, value};

use respite::config::raw::{RawCluster, unspanned};

use super::fields::{decode, duration, positive_duration};

const REDIS_CLUSTER_CONFIG_TYPE: &str =
    "type.googleapis.com/envoy.extensions.clusters.redis.v3.RedisClusterConfig";
const STRUCT_TYPE: &str = "type.googleapis.com/google.protobuf.Struct";
const P: &str = "cluster_type.typed_config";

/// Writes the redis cluster keys. An absent `typed_config` means all Envoy defaults.
pub(super) fn config(any: Option<&Any>, t: &mut RawCluster) -> Result<(), String> {
    let cfg = match any {
        None => RedisClusterConfig::default(),
        Some(a) if a.type_url == STRUCT_TYPE => {
            let st: Struct = decode(a, STRUCT_TYPE, P)?;
            from_struct(&st)?
        }
        Some(a) => decode(a, REDIS_CLUSTER_CONFIG_TYPE, P)?,
    };
    if cfg.enable_zone_discovery.is_some_and(|v| v.value) {
        return Err(format!(
            "{P}.enable_zone_discovery: availability-zone discovery is not supported"
        ));
    }
    if let Some(d) = &cfg.cluster_refresh_rate {
        let v = positive_duration(d, &format!("{P}.cluster_refresh_rate"))?;
        t.cluster_refresh_rate = Some(unspanned(v));
    }
    if let Some(d) = &cfg.cluster_refresh_timeout {
        let v = positive_duration(d, &format!("{P}.cluster_refresh_timeout"))?;
        t.cluster_refresh_timeout = Some(unspanned(v));
    }
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

/// The proto3 JSON mapping of `RedisClusterConfig` held in a `Struct`: field names in
/// snake_case or lowerCamelCase, durations as `"5s"` strings, integers as numbers.
fn from_struct(st: &Struct) -> Result<RedisClusterConfig, String> {
    let mut cfg = RedisClusterConfig::default();
    for (k, v) in &st.fields {
        let f = format!("{P}.{k}");
        match snake(k).as_str() {
            "cluster_refresh_rate" => cfg.cluster_refresh_rate = Some(json_duration(v, &f)?),
            "cluster_refresh_timeout" => cfg.cluster_refresh_timeout = Some(json_duration(v, &f)?),
            "redirect_refresh_interval" => {
                cfg.redirect_refresh_interval = Some(json_duration(v, &f)?);
            }
            "redirect_refresh_threshold" => {
                cfg.redirect_refresh_threshold =
                    Some(envoy_types::pb::google::protobuf::UInt32Value {
                        value: json_u32(v, &f)?,
                    });
            }
            "failure_refresh_threshold" => cfg.failure_refresh_threshold = json_u32(v, &f)?,
            "host_degraded_refresh_threshold" => {
                cfg.host_degraded_refresh_threshold = json_u32(v, &f)?;
            }
            "enable_zone_discovery" => {
                let on = matches!(v.kind, Some(value::Kind::BoolValue(true)));
                cfg.enable_zone_discovery =
                    Some(envoy_types::pb::google::protobuf::BoolValue { value: on });
            }
            _ => return Err(format!("{f}: unknown RedisClusterConfig field")),
        }
    }
    Ok(cfg)
}

/// `clusterRefreshRate` → `cluster_refresh_rate`.
fn snake(k: &str) -> String {
    let mut out = String::with_capacity(k.len() + 4);
    for ch in k.chars() {
        if ch.is_ascii_uppercase() {
            out.push('_');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// A proto3 JSON duration: a decimal number of seconds with an `s` suffix (`"5s"`, `"0.5s"`).
fn json_duration(v: &Value, f: &str) -> Result<Duration, String> {
    let Some(value::Kind::StringValue(text)) = &v.kind else {
        return Err(format!("{f}: expected a duration string such as \"5s\""));
    };
    let bad = || {
        format!(
            "{f}: invalid duration \"{text}\" (expected seconds with an \"s\" suffix, e.g. \"0.5s\")"
        )
    };
    let num = text.strip_suffix('s').ok_or_else(bad)?;
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let seconds: i64 = whole.parse().map_err(|_| bad())?;
    let nanos: i32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().map_err(|_| bad())?
    };
    Ok(Duration { seconds, nanos })
}

/// A JSON number (or numeric string, as proto3 JSON allows) that is a u32.
fn json_u32(v: &Value, f: &str) -> Result<u32, String> {
    match &v.kind {
        Some(value::Kind::NumberValue(n))
            if n.fract() == 0.0 && *n >= 0.0 && *n <= f64::from(u32::MAX) =>
        {
            Ok(*n as u32)
        }
        Some(value::Kind::StringValue(t)) => t
            .parse()
            .map_err(|_| format!("{f}: \"{t}\" is not a non-negative integer")),
        _ => Err(format!("{f}: expected a non-negative integer")),
    }
}

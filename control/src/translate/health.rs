//! Cluster health: active checks (`health_checks[]` with Envoy's redis health checker,
//! `health_checkers/redis/v3/redis.proto`) and passive outlier detection (`outlier_detection`,
//! the consecutive-failure part; Envoy `redis.rst` "Outlier detection").

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, OutlierDetection};
use envoy_types::pb::envoy::config::core::v3::HealthCheck;
use envoy_types::pb::envoy::config::core::v3::health_check::{self, HealthChecker};
use envoy_types::pb::envoy::extensions::health_checkers::redis::v3::Redis;
use envoy_types::pb::google::protobuf::Duration;

use super::REDIS_HEALTH_CHECK_TYPE;
use super::fields::{decode, duration, int, positive_duration, s};

/// `health_checks[]` → `[[clusters.health_checks]]`.
///
/// Only the redis checker applies (PING, or `EXISTS key`); TCP, HTTP and gRPC checkers are
/// invalid. Timing fields Respite does not have (`unhealthy_interval`, the edge intervals,
/// `no_traffic_healthy_interval`, `alt_port`) make the check invalid rather than run at other
/// times; `initial_jitter`, `reuse_connection` and event logging only shape the first check,
/// connection reuse and logs, and are ignored. `interval_jitter` plus `interval_jitter_percent`
/// of `interval` (Envoy adds both) becomes `interval_jitter`; with neither, Respite's default
/// (10 % of interval) applies where Envoy has none: jitter never changes a check's result.
pub(super) fn health_checks(c: &Cluster, t: &mut toml::Table) -> Result<(), String> {
    if c.health_checks.is_empty() {
        return Ok(());
    }
    let checks = c
        .health_checks
        .iter()
        .enumerate()
        .map(|(i, h)| health_check(h, &format!("health_checks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    t.insert("health_checks".into(), toml::Value::Array(checks));
    Ok(())
}

fn health_check(h: &HealthCheck, p: &str) -> Result<toml::Value, String> {
    let custom = match &h.health_checker {
        Some(HealthChecker::CustomHealthCheck(c)) => c,
        Some(HealthChecker::TcpHealthCheck(_)) => {
            return Err(format!(
                "{p}.tcp_health_check: not supported (use custom_health_check \
                 envoy.health_checkers.redis)"
            ));
        }
        Some(HealthChecker::HttpHealthCheck(_)) => {
            return Err(format!(
                "{p}.http_health_check: not supported (use custom_health_check \
                 envoy.health_checkers.redis)"
            ));
        }
        Some(HealthChecker::GrpcHealthCheck(_)) => {
            return Err(format!(
                "{p}.grpc_health_check: not supported (use custom_health_check \
                 envoy.health_checkers.redis)"
            ));
        }
        None => {
            return Err(format!(
                "{p}: no health checker (custom_health_check envoy.health_checkers.redis)"
            ));
        }
    };
    let Some(health_check::custom_health_check::ConfigType::TypedConfig(any)) = &custom.config_type
    else {
        return Err(format!(
            "{p}.custom_health_check.typed_config: required ({REDIS_HEALTH_CHECK_TYPE})"
        ));
    };
    if any.type_url != REDIS_HEALTH_CHECK_TYPE {
        return Err(format!(
            "{p}.custom_health_check: \"{}\" ({}) is not supported; only \
             envoy.health_checkers.redis",
            custom.name, any.type_url
        ));
    }
    let redis: Redis = decode(
        any,
        REDIS_HEALTH_CHECK_TYPE,
        &format!("{p}.custom_health_check.typed_config"),
    )?;
    if redis.aws_iam.is_some() {
        return Err(format!(
            "{p}.custom_health_check.typed_config.aws_iam: AWS IAM authentication is not \
             supported"
        ));
    }
    let unsupported = [
        (h.alt_port.is_some(), "alt_port"),
        (h.unhealthy_interval.is_some(), "unhealthy_interval"),
        (
            h.unhealthy_edge_interval.is_some(),
            "unhealthy_edge_interval",
        ),
        (h.healthy_edge_interval.is_some(), "healthy_edge_interval"),
        (
            h.no_traffic_healthy_interval.is_some(),
            "no_traffic_healthy_interval",
        ),
    ];
    if let Some((_, field)) = unsupported.into_iter().find(|(set, _)| *set) {
        return Err(format!("{p}.{field}: not supported"));
    }

    let mut t = toml::Table::new();
    let Some(interval) = &h.interval else {
        return Err(format!("{p}.interval: required"));
    };
    t.insert(
        "interval".into(),
        s(positive_duration(interval, &format!("{p}.interval"))?),
    );
    let Some(timeout) = &h.timeout else {
        return Err(format!("{p}.timeout: required"));
    };
    t.insert(
        "timeout".into(),
        s(positive_duration(timeout, &format!("{p}.timeout"))?),
    );
    if h.interval_jitter.is_some() || h.interval_jitter_percent > 0 {
        let fixed = h.interval_jitter.map(|d| nanos(&d)).unwrap_or(0);
        let share = nanos(interval) * u128::from(h.interval_jitter_percent) / 100;
        let total = fixed + share;
        let secs = i64::try_from(total / 1_000_000_000).unwrap_or(i64::MAX);
        let d = Duration {
            seconds: secs,
            nanos: (total % 1_000_000_000) as i32,
        };
        t.insert(
            "interval_jitter".into(),
            s(duration(&d, &format!("{p}.interval_jitter"))?),
        );
    }
    if let Some(v) = h.unhealthy_threshold {
        t.insert("unhealthy_threshold".into(), int(v.value));
    }
    if let Some(v) = h.healthy_threshold {
        t.insert("healthy_threshold".into(), int(v.value));
    }
    if let Some(d) = &h.no_traffic_interval {
        t.insert(
            "no_traffic_interval".into(),
            s(positive_duration(d, &format!("{p}.no_traffic_interval"))?),
        );
    }
    if !redis.key.is_empty() {
        t.insert("key".into(), s(redis.key));
    }
    Ok(toml::Value::Table(t))
}

/// Non-negative protobuf duration in nanoseconds (negative parts count as zero; `duration`
/// rejects them with a message).
fn nanos(d: &Duration) -> u128 {
    u128::from(d.seconds.max(0).unsigned_abs()) * 1_000_000_000
        + u128::from(d.nanos.max(0).unsigned_abs())
}

/// `outlier_detection` → `[clusters.outlier_detection]`: `consecutive_5xx`,
/// `base_ejection_time`, `max_ejection_time`, `max_ejection_percent`, `interval` (absent ones
/// keep the data plane defaults, which are Envoy's: 5, 30s, 300s, 10 %, 10s).
///
/// For Redis, connect failures, timeouts and closed connections are the "5xx"; every reply,
/// even an error reply, is a success (Envoy redis.rst), so success-rate ejection (Envoy's
/// `enforcing_success_rate`) would never fire on Redis errors and is ignored. Detectors Respite
/// does not have are invalid when enforced: `enforcing_consecutive_5xx` other than 100 %,
/// `enforcing_consecutive_gateway_failure`, `enforcing_failure_percentage(_local_origin)`,
/// `split_external_local_origin_errors`.
pub(super) fn outlier_detection(c: &Cluster, t: &mut toml::Table) -> Result<(), String> {
    let Some(o) = &c.outlier_detection else {
        return Ok(());
    };
    unsupported_detectors(o)?;
    let p = "outlier_detection";
    let mut ot = toml::Table::new();
    if let Some(v) = o.consecutive_5xx {
        ot.insert("consecutive_5xx".into(), int(v.value));
    }
    if let Some(d) = &o.base_ejection_time {
        ot.insert(
            "base_ejection_time".into(),
            s(positive_duration(d, &format!("{p}.base_ejection_time"))?),
        );
    }
    if let Some(d) = &o.max_ejection_time {
        ot.insert(
            "max_ejection_time".into(),
            s(positive_duration(d, &format!("{p}.max_ejection_time"))?),
        );
    }
    if let Some(v) = o.max_ejection_percent {
        ot.insert("max_ejection_percent".into(), int(v.value));
    }
    if let Some(d) = &o.interval {
        ot.insert(
            "interval".into(),
            s(positive_duration(d, &format!("{p}.interval"))?),
        );
    }
    t.insert("outlier_detection".into(), toml::Value::Table(ot));
    Ok(())
}

fn unsupported_detectors(o: &OutlierDetection) -> Result<(), String> {
    let p = "outlier_detection";
    if o.enforcing_consecutive_5xx.is_some_and(|v| v.value != 100) {
        return Err(format!(
            "{p}.enforcing_consecutive_5xx: only 100 is supported (every detected host is \
             ejected)"
        ));
    }
    let enforced = [
        (
            o.enforcing_consecutive_gateway_failure,
            "enforcing_consecutive_gateway_failure",
        ),
        (
            o.enforcing_failure_percentage,
            "enforcing_failure_percentage",
        ),
        (
            o.enforcing_failure_percentage_local_origin,
            "enforcing_failure_percentage_local_origin",
        ),
    ];
    if let Some((_, f)) = enforced
        .into_iter()
        .find(|(v, _)| v.is_some_and(|v| v.value > 0))
    {
        return Err(format!("{p}.{f}: this detector is not supported"));
    }
    if o.split_external_local_origin_errors {
        return Err(format!(
            "{p}.split_external_local_origin_errors: not supported (every failure Respite \
             counts is local-origin)"
        ));
    }
    Ok(())
}

//! Cluster health: active checks (`health_checks[]` with Envoy's redis health checker,
//! `health_checkers/redis/v3/redis.proto`) and passive outlier detection (`outlier_detection`,
//! the consecutive-failure part; Envoy `redis.rst` "Outlier detection").

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, OutlierDetection};
use envoy_types::pb::envoy::config::core::v3::HealthCheck;
use envoy_types::pb::envoy::config::core::v3::health_check::{self, HealthChecker};
use envoy_types::pb::envoy::extensions::health_checkers::redis::v3::Redis;
use envoy_types::pb::google::protobuf::Duration;

use respite::config::raw::{RawCluster, RawHealthCheck, RawOutlierDetection, unspanned};

use super::REDIS_HEALTH_CHECK_TYPE;
use super::fields::{decode, duration, positive_duration};

/// `health_checks[]` → `[[clusters.health_checks]]`.
///
/// Only the redis checker applies (PING, or `EXISTS key`); TCP, HTTP and gRPC checkers are
/// invalid. Timing fields Respite does not have (`unhealthy_interval`, the edge intervals,
/// `no_traffic_healthy_interval`, `alt_port`) make the check invalid rather than run at other
/// times; `initial_jitter`, `reuse_connection` and event logging only shape the first check,
/// connection reuse and logs, and are ignored. `interval_jitter` plus `interval_jitter_percent`
/// of `interval` (Envoy adds both) becomes `interval_jitter`; with neither, Respite's default
/// (10 % of interval) applies where Envoy has none: jitter never changes a check's result.
pub(super) fn health_checks(c: &Cluster, t: &mut RawCluster) -> Result<(), String> {
    t.health_checks = c
        .health_checks
        .iter()
        .enumerate()
        .map(|(i, h)| health_check(h, &format!("health_checks[{i}]")).map(unspanned))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(())
}

fn health_check(h: &HealthCheck, p: &str) -> Result<RawHealthCheck, String> {
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
    if super::fields::inner_type(any).as_deref() != Some(REDIS_HEALTH_CHECK_TYPE) {
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

    let mut t = RawHealthCheck::default();
    let Some(interval) = &h.interval else {
        return Err(format!("{p}.interval: required"));
    };
    t.interval = Some(unspanned(positive_duration(
        interval,
        &format!("{p}.interval"),
    )?));
    let Some(timeout) = &h.timeout else {
        return Err(format!("{p}.timeout: required"));
    };
    t.timeout = Some(unspanned(positive_duration(
        timeout,
        &format!("{p}.timeout"),
    )?));
    if h.interval_jitter.is_some() || h.interval_jitter_percent > 0 {
        let fixed = h.interval_jitter.map(|d| nanos(&d)).unwrap_or(0);
        let share = nanos(interval) * u128::from(h.interval_jitter_percent) / 100;
        let total = fixed + share;
        let secs = i64::try_from(total / 1_000_000_000).unwrap_or(i64::MAX);
        let d = Duration {
            seconds: secs,
            nanos: (total % 1_000_000_000) as i32,
        };
        t.interval_jitter = Some(unspanned(duration(&d, &format!("{p}.interval_jitter"))?));
    }
    t.unhealthy_threshold = h.unhealthy_threshold.map(|v| unspanned(v.value));
    t.healthy_threshold = h.healthy_threshold.map(|v| unspanned(v.value));
    if let Some(d) = &h.no_traffic_interval {
        t.no_traffic_interval = Some(unspanned(positive_duration(
            d,
            &format!("{p}.no_traffic_interval"),
        )?));
    }
    if !redis.key.is_empty() {
        t.key = Some(unspanned(redis.key));
    }
    Ok(t)
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
pub(super) fn outlier_detection(c: &Cluster, t: &mut RawCluster) -> Result<(), String> {
    let Some(o) = &c.outlier_detection else {
        return Ok(());
    };
    unsupported_detectors(o)?;
    let p = "outlier_detection";
    let time = |d: &Option<Duration>, key: &str| match d {
        Some(d) => positive_duration(d, &format!("{p}.{key}")).map(|v| Some(unspanned(v))),
        None => Ok(None),
    };
    let consecutive_5xx = o.consecutive_5xx.map(|v| unspanned(v.value));
    let base_ejection_time = time(&o.base_ejection_time, "base_ejection_time")?;
    let max_ejection_time = time(&o.max_ejection_time, "max_ejection_time")?;
    let max_ejection_percent = o.max_ejection_percent.map(|v| unspanned(v.value));
    let interval = time(&o.interval, "interval")?;
    t.outlier_detection = Some(unspanned(RawOutlierDetection {
        consecutive_5xx,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        interval,
    }));
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

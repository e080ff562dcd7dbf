//! `envoy.config.core.v3` (and `envoy.type.v3`) messages that listeners and clusters share.

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::r#type::v3 as ty;
use serde_json::Value;

use super::any::any;
use super::reader::{Obj, Res, oneof, structure};

/// `core.v3.Address`: `socket_address` or `pipe`.
pub fn address(v: &Value, p: &str) -> Res<core::Address> {
    use core::address::Address as A;
    let mut o = Obj::new(v, p)?;
    let sa = o
        .msg("socket_address", socket_address)?
        .map(A::SocketAddress);
    let pipe = o.msg("pipe", pipe)?.map(A::Pipe);
    let address = oneof(p, vec![("socket_address", sa), ("pipe", pipe)])?;
    o.finish()?;
    Ok(core::Address { address })
}

fn socket_address(v: &Value, p: &str) -> Res<core::SocketAddress> {
    use core::socket_address::PortSpecifier as P;
    let mut o = Obj::new(v, p)?;
    let port_value = o.opt_u32("port_value")?.map(P::PortValue);
    let named_port = o.opt_string("named_port")?.map(P::NamedPort);
    let r = core::SocketAddress {
        protocol: o.enm("protocol", core::socket_address::Protocol::from_str_name)?,
        address: o.string("address")?,
        resolver_name: o.string("resolver_name")?,
        ipv4_compat: o.bool("ipv4_compat")?,
        network_namespace_filepath: o.string("network_namespace_filepath")?,
        port_specifier: oneof(
            p,
            vec![("port_value", port_value), ("named_port", named_port)],
        )?,
    };
    o.done(r)
}

fn pipe(v: &Value, p: &str) -> Res<core::Pipe> {
    let mut o = Obj::new(v, p)?;
    let r = core::Pipe {
        path: o.string("path")?,
        mode: o.u32("mode")?,
    };
    o.done(r)
}

/// `core.v3.DataSource`: `filename`, `inline_bytes` (base64), `inline_string` or
/// `environment_variable`.
pub fn data_source(v: &Value, p: &str) -> Res<core::DataSource> {
    use core::data_source::Specifier as S;
    let mut o = Obj::new(v, p)?;
    let members = vec![
        ("filename", o.opt_string("filename")?.map(S::Filename)),
        ("inline_bytes", o.bytes("inline_bytes")?.map(S::InlineBytes)),
        (
            "inline_string",
            o.opt_string("inline_string")?.map(S::InlineString),
        ),
        (
            "environment_variable",
            o.opt_string("environment_variable")?
                .map(S::EnvironmentVariable),
        ),
    ];
    let specifier = oneof(p, members)?;
    o.finish()?;
    Ok(core::DataSource {
        watched_directory: None,
        specifier,
    })
}

/// `core.v3.TransportSocket`: `name` and `typed_config`.
pub fn transport_socket(v: &Value, p: &str) -> Res<core::TransportSocket> {
    let mut o = Obj::new(v, p)?;
    let r = core::TransportSocket {
        name: o.string("name")?,
        config_type: o
            .msg("typed_config", any)?
            .map(core::transport_socket::ConfigType::TypedConfig),
    };
    o.done(r)
}

/// `core.v3.TypedExtensionConfig`: `name` and `typed_config`.
pub fn typed_extension_config(v: &Value, p: &str) -> Res<core::TypedExtensionConfig> {
    let mut o = Obj::new(v, p)?;
    let r = core::TypedExtensionConfig {
        name: o.string("name")?,
        typed_config: o.msg("typed_config", any)?,
    };
    o.done(r)
}

/// `core.v3.RuntimeDouble`: `default_value` and `runtime_key`.
pub fn runtime_double(v: &Value, p: &str) -> Res<core::RuntimeDouble> {
    let mut o = Obj::new(v, p)?;
    let r = core::RuntimeDouble {
        default_value: o.f64("default_value")?,
        runtime_key: o.string("runtime_key")?,
    };
    o.done(r)
}

/// `core.v3.RuntimeFractionalPercent`: `default_value` and `runtime_key`.
pub fn runtime_fractional_percent(v: &Value, p: &str) -> Res<core::RuntimeFractionalPercent> {
    let mut o = Obj::new(v, p)?;
    let r = core::RuntimeFractionalPercent {
        default_value: o.msg("default_value", fractional_percent)?,
        runtime_key: o.string("runtime_key")?,
    };
    o.done(r)
}

/// `type.v3.FractionalPercent`: `numerator` over `denominator` (HUNDRED, TEN_THOUSAND, MILLION).
pub fn fractional_percent(v: &Value, p: &str) -> Res<ty::FractionalPercent> {
    let mut o = Obj::new(v, p)?;
    let r = ty::FractionalPercent {
        numerator: o.u32("numerator")?,
        denominator: o.enm(
            "denominator",
            ty::fractional_percent::DenominatorType::from_str_name,
        )?,
    };
    o.done(r)
}

/// `type.v3.Percent`: `value` in [0, 100].
pub fn percent(v: &Value, p: &str) -> Res<ty::Percent> {
    let mut o = Obj::new(v, p)?;
    let r = ty::Percent {
        value: o.f64("value")?,
    };
    o.done(r)
}

/// `core.v3.HealthCheck`, with the `tcp_health_check`, `http_health_check` (host, path) or
/// `custom_health_check` checker.
// Deprecated fields are still accepted by Envoy (with a warning); mapping them keeps the proto
// faithful, the translator decides.
#[allow(deprecated)]
pub fn health_check(v: &Value, p: &str) -> Res<core::HealthCheck> {
    use core::health_check::HealthChecker as H;
    let mut o = Obj::new(v, p)?;
    let tcp = o
        .msg("tcp_health_check", tcp_health_check)?
        .map(H::TcpHealthCheck);
    let http = o
        .msg("http_health_check", http_health_check)?
        .map(H::HttpHealthCheck);
    let custom = o
        .msg("custom_health_check", custom_health_check)?
        .map(H::CustomHealthCheck);
    let r = core::HealthCheck {
        timeout: o.dur("timeout")?,
        interval: o.dur("interval")?,
        initial_jitter: o.dur("initial_jitter")?,
        interval_jitter: o.dur("interval_jitter")?,
        interval_jitter_percent: o.u32("interval_jitter_percent")?,
        unhealthy_threshold: o.u32w("unhealthy_threshold")?,
        healthy_threshold: o.u32w("healthy_threshold")?,
        alt_port: o.u32w("alt_port")?,
        reuse_connection: o.boolw("reuse_connection")?,
        no_traffic_interval: o.dur("no_traffic_interval")?,
        no_traffic_healthy_interval: o.dur("no_traffic_healthy_interval")?,
        unhealthy_interval: o.dur("unhealthy_interval")?,
        unhealthy_edge_interval: o.dur("unhealthy_edge_interval")?,
        healthy_edge_interval: o.dur("healthy_edge_interval")?,
        event_log_path: o.string("event_log_path")?,
        always_log_health_check_failures: o.bool("always_log_health_check_failures")?,
        always_log_health_check_success: o.bool("always_log_health_check_success")?,
        health_checker: oneof(
            p,
            vec![
                ("tcp_health_check", tcp),
                ("http_health_check", http),
                ("custom_health_check", custom),
            ],
        )?,
        ..Default::default()
    };
    o.done(r)
}

fn tcp_health_check(v: &Value, p: &str) -> Res<core::health_check::TcpHealthCheck> {
    let mut o = Obj::new(v, p)?;
    let r = core::health_check::TcpHealthCheck {
        send: o.msg("send", payload)?,
        receive: o.list("receive", payload)?,
        proxy_protocol_config: None,
    };
    o.done(r)
}

fn http_health_check(v: &Value, p: &str) -> Res<core::health_check::HttpHealthCheck> {
    let mut o = Obj::new(v, p)?;
    let r = core::health_check::HttpHealthCheck {
        host: o.string("host")?,
        path: o.string("path")?,
        ..Default::default()
    };
    o.done(r)
}

fn custom_health_check(v: &Value, p: &str) -> Res<core::health_check::CustomHealthCheck> {
    let mut o = Obj::new(v, p)?;
    let r = core::health_check::CustomHealthCheck {
        name: o.string("name")?,
        config_type: o
            .msg("typed_config", any)?
            .map(core::health_check::custom_health_check::ConfigType::TypedConfig),
    };
    o.done(r)
}

/// `HealthCheck.Payload`: `text` (hex) or `binary` (base64).
fn payload(v: &Value, p: &str) -> Res<core::health_check::Payload> {
    use core::health_check::payload::Payload as P;
    let mut o = Obj::new(v, p)?;
    let text = o.opt_string("text")?.map(P::Text);
    let binary = o.bytes("binary")?.map(P::Binary);
    let payload = oneof(p, vec![("text", text), ("binary", binary)])?;
    o.finish()?;
    Ok(core::health_check::Payload { payload })
}

/// `core.v3.TcpKeepalive` (probes, time and interval in seconds).
pub fn tcp_keepalive(v: &Value, p: &str) -> Res<core::TcpKeepalive> {
    let mut o = Obj::new(v, p)?;
    let r = core::TcpKeepalive {
        keepalive_probes: o.u32w("keepalive_probes")?,
        keepalive_time: o.u32w("keepalive_time")?,
        keepalive_interval: o.u32w("keepalive_interval")?,
    };
    o.done(r)
}

/// `core.v3.ConfigSource`: `ads`, `self` or `path`, with `resource_api_version` and
/// `initial_fetch_timeout` (what an EDS cluster in a bootstrap names).
#[allow(deprecated)] // `path` is deprecated, still accepted by Envoy
pub fn config_source(v: &Value, p: &str) -> Res<core::ConfigSource> {
    use core::config_source::ConfigSourceSpecifier as S;
    let mut o = Obj::new(v, p)?;
    let ads = o
        .msg("ads", |v, p| Obj::new(v, p)?.finish())?
        .map(|()| S::Ads(core::AggregatedConfigSource {}));
    let self_ = o
        .msg("self", |v, p| {
            let mut s = Obj::new(v, p)?;
            let transport_api_version =
                s.enm("transport_api_version", core::ApiVersion::from_str_name)?;
            s.finish()?;
            Ok(core::SelfConfigSource {
                transport_api_version,
            })
        })?
        .map(S::Self_);
    let path = o.opt_string("path")?.map(S::Path);
    let r = core::ConfigSource {
        authorities: Vec::new(),
        initial_fetch_timeout: o.dur("initial_fetch_timeout")?,
        resource_api_version: o.enm("resource_api_version", core::ApiVersion::from_str_name)?,
        config_source_specifier: oneof(p, vec![("ads", ads), ("self", self_), ("path", path)])?,
    };
    o.done(r)
}

/// `core.v3.Locality`.
pub fn locality(v: &Value, p: &str) -> Res<core::Locality> {
    let mut o = Obj::new(v, p)?;
    let r = core::Locality {
        region: o.string("region")?,
        zone: o.string("zone")?,
        sub_zone: o.string("sub_zone")?,
    };
    o.done(r)
}

/// `core.v3.CidrRange`.
pub fn cidr_range(v: &Value, p: &str) -> Res<core::CidrRange> {
    let mut o = Obj::new(v, p)?;
    let r = core::CidrRange {
        address_prefix: o.string("address_prefix")?,
        prefix_len: o.u32w("prefix_len")?,
    };
    o.done(r)
}

/// `core.v3.Metadata`: `filter_metadata` (map of Struct) and `typed_filter_metadata` (map of
/// Any).
pub fn metadata(v: &Value, p: &str) -> Res<core::Metadata> {
    let mut o = Obj::new(v, p)?;
    let r = core::Metadata {
        filter_metadata: o.map("filter_metadata", structure)?,
        typed_filter_metadata: o.map("typed_filter_metadata", any)?,
    };
    o.done(r)
}

/// `core.v3.GrpcService` with an `envoy_grpc` target (`cluster_name`, `authority`) or a
/// `google_grpc` one (`target_uri`), and `timeout`.
pub fn grpc_service(v: &Value, p: &str) -> Res<core::GrpcService> {
    let mut o = Obj::new(v, p)?;
    let target = o.msg("envoy_grpc", |v, p| {
        let mut g = Obj::new(v, p)?;
        let r = core::grpc_service::EnvoyGrpc {
            cluster_name: g.string("cluster_name")?,
            authority: g.string("authority")?,
            ..Default::default()
        };
        g.done(r)
    })?;
    // Only the target: credentials, metadata and the like are left to `done`, which refuses
    // them by name.
    let google = o.msg("google_grpc", |v, p| {
        let mut g = Obj::new(v, p)?;
        let r = core::grpc_service::GoogleGrpc {
            target_uri: g.string("target_uri")?,
            ..Default::default()
        };
        g.done(r)
    })?;
    let target = match (target, google) {
        (Some(e), _) => Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(e)),
        (None, Some(g)) => Some(core::grpc_service::TargetSpecifier::GoogleGrpc(g)),
        (None, None) => None,
    };
    let r = core::GrpcService {
        timeout: o.dur("timeout")?,
        target_specifier: target,
        ..Default::default()
    };
    o.done(r)
}

//! The Redis extension messages: the `redis_proxy` network filter, its per-cluster
//! `RedisProtocolOptions`, the `envoy.clusters.redis` cluster type and the
//! `envoy.health_checkers.redis` health checker (redis_proxy.proto, redis_cluster.proto,
//! health_checkers/redis.proto).

use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    self as rp, RedisProtocolOptions, RedisProxy, redis_proxy,
};
use envoy_types::pb::envoy::extensions::health_checkers::redis::v3::Redis;
use serde_json::Value;

use super::core::{address, data_source, grpc_service, runtime_fractional_percent};
use super::reader::{Obj, Res};

/// `RedisProxy` (the fields of an `Any`, `@type` already taken by the caller).
pub fn proxy(o: &mut Obj) -> Res<RedisProxy> {
    #[allow(deprecated)] // downstream_auth_password is deprecated but still accepted by Envoy
    let r = RedisProxy {
        stat_prefix: o.string("stat_prefix")?,
        settings: o.msg("settings", settings)?,
        latency_in_micros: o.bool("latency_in_micros")?,
        prefix_routes: o.msg("prefix_routes", prefix_routes)?,
        downstream_auth_password: o.msg("downstream_auth_password", data_source)?,
        downstream_auth_passwords: o.list("downstream_auth_passwords", data_source)?,
        faults: o.list("faults", fault)?,
        downstream_auth_username: o.msg("downstream_auth_username", data_source)?,
        external_auth_provider: o.msg("external_auth_provider", |v, p| {
            let mut e = Obj::new(v, p)?;
            let r = rp::RedisExternalAuthProvider {
                grpc_service: e.msg("grpc_service", grpc_service)?,
                enable_auth_expiration: e.bool("enable_auth_expiration")?,
            };
            e.done(r)
        })?,
        custom_commands: o.strings("custom_commands")?,
        protocol_version: o.enm(
            "protocol_version",
            redis_proxy::ProtocolVersion::from_str_name,
        )?,
    };
    Ok(r)
}

fn settings(v: &Value, p: &str) -> Res<redis_proxy::ConnPoolSettings> {
    let mut o = Obj::new(v, p)?;
    let r = redis_proxy::ConnPoolSettings {
        op_timeout: o.dur("op_timeout")?,
        enable_hashtagging: o.bool("enable_hashtagging")?,
        enable_redirection: o.bool("enable_redirection")?,
        dns_cache_config: o.msg("dns_cache_config", dns_cache_config)?,
        max_buffer_size_before_flush: o.u32("max_buffer_size_before_flush")?,
        buffer_flush_timeout: o.dur("buffer_flush_timeout")?,
        max_upstream_unknown_connections: o.u32w("max_upstream_unknown_connections")?,
        enable_command_stats: o.bool("enable_command_stats")?,
        read_policy: o.enm("read_policy", read_policy_name)?,
        connection_rate_limit: o.msg("connection_rate_limit", |v, p| {
            let mut c = Obj::new(v, p)?;
            let r = redis_proxy::ConnectionRateLimit {
                connection_rate_limit_per_sec: c.u32("connection_rate_limit_per_sec")?,
            };
            c.done(r)
        })?,
    };
    o.done(r)
}

fn prefix_routes(v: &Value, p: &str) -> Res<redis_proxy::PrefixRoutes> {
    let mut o = Obj::new(v, p)?;
    let r = redis_proxy::PrefixRoutes {
        routes: o.list("routes", route)?,
        case_insensitive: o.bool("case_insensitive")?,
        catch_all_route: o.msg("catch_all_route", route)?,
    };
    o.done(r)
}

fn route(v: &Value, p: &str) -> Res<redis_proxy::prefix_routes::Route> {
    use redis_proxy::prefix_routes::route;
    let mut o = Obj::new(v, p)?;
    let r = redis_proxy::prefix_routes::Route {
        prefix: o.string("prefix")?,
        remove_prefix: o.bool("remove_prefix")?,
        cluster: o.string("cluster")?,
        request_mirror_policy: o.list("request_mirror_policy", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = route::RequestMirrorPolicy {
                cluster: m.string("cluster")?,
                runtime_fraction: m.msg("runtime_fraction", runtime_fractional_percent)?,
                exclude_read_commands: m.bool("exclude_read_commands")?,
            };
            m.done(r)
        })?,
        key_formatter: o.string("key_formatter")?,
        read_command_policy: o.msg("read_command_policy", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = route::ReadCommandPolicy {
                cluster: m.string("cluster")?,
            };
            m.done(r)
        })?,
    };
    o.done(r)
}

fn fault(v: &Value, p: &str) -> Res<redis_proxy::RedisFault> {
    let mut o = Obj::new(v, p)?;
    let r = redis_proxy::RedisFault {
        fault_type: o.enm(
            "fault_type",
            redis_proxy::redis_fault::RedisFaultType::from_str_name,
        )?,
        fault_enabled: o.msg("fault_enabled", runtime_fractional_percent)?,
        delay: o.dur("delay")?,
        commands: o.strings("commands")?,
    };
    o.done(r)
}

/// `AwsIam` without `credential_provider` (a large message of its own: refused by name as an
/// unknown field).
fn aws_iam(v: &Value, p: &str) -> Res<rp::AwsIam> {
    let mut o = Obj::new(v, p)?;
    let r = rp::AwsIam {
        credential_provider: None,
        cache_name: o.string("cache_name")?,
        service_name: o.string("service_name")?,
        region: o.string("region")?,
        expiration_time: o.dur("expiration_time")?,
    };
    o.done(r)
}

/// `RedisProtocolOptions` (a cluster's `typed_extension_protocol_options` entry
/// `envoy.filters.network.redis_proxy`): upstream auth.
pub fn protocol_options(o: &mut Obj) -> Res<RedisProtocolOptions> {
    Ok(RedisProtocolOptions {
        auth_password: o.msg("auth_password", data_source)?,
        auth_username: o.msg("auth_username", data_source)?,
        aws_iam: o.msg("aws_iam", aws_iam)?,
        credentials: o.list("credentials", |v, p| {
            let mut c = Obj::new(v, p)?;
            let r = rp::redis_protocol_options::Credential {
                address: c.msg("address", address)?,
                auth_password: c.msg("auth_password", data_source)?,
                auth_username: c.msg("auth_username", data_source)?,
            };
            c.done(r)
        })?,
    })
}

/// `RedisClusterConfig` (`cluster_type` `envoy.clusters.redis`).
pub fn cluster_config(o: &mut Obj) -> Res<RedisClusterConfig> {
    Ok(RedisClusterConfig {
        cluster_refresh_rate: o.dur("cluster_refresh_rate")?,
        cluster_refresh_timeout: o.dur("cluster_refresh_timeout")?,
        redirect_refresh_interval: o.dur("redirect_refresh_interval")?,
        redirect_refresh_threshold: o.u32w("redirect_refresh_threshold")?,
        failure_refresh_threshold: o.u32("failure_refresh_threshold")?,
        host_degraded_refresh_threshold: o.u32("host_degraded_refresh_threshold")?,
        enable_zone_discovery: o.boolw("enable_zone_discovery")?,
    })
}

/// The `envoy.health_checkers.redis` config: `key` (EXISTS instead of PING) and `aws_iam`.
pub fn health_checker(o: &mut Obj) -> Res<Redis> {
    Ok(Redis {
        key: o.string("key")?,
        aws_iam: o.msg("aws_iam", aws_iam)?,
    })
}

/// `DnsCacheConfig` (dynamic forward proxy): the fields the translation maps; any other is
/// refused by name by the reader ("not supported by respite (refused)").
fn dns_cache_config(
    v: &Value,
    p: &str,
) -> Res<envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig> {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::DnsLookupFamily;
    let mut o = Obj::new(v, p)?;
    let r = envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig {
        name: o.string("name")?,
        dns_lookup_family: o.enm("dns_lookup_family", DnsLookupFamily::from_str_name)?,
        dns_refresh_rate: o.dur("dns_refresh_rate")?,
        max_hosts: o.u32w("max_hosts")?,
        ..Default::default()
    };
    o.done(r)
}

/// `ReadPolicy` by name, also under the names older Envoy protos gave 5 and 6 (`AZ_AFFINITY`,
/// `AZ_AFFINITY_REPLICAS_AND_PRIMARY`, renamed `LOCAL_ZONE_AFFINITY*` with the same numbers).
fn read_policy_name(name: &str) -> Option<redis_proxy::conn_pool_settings::ReadPolicy> {
    use redis_proxy::conn_pool_settings::ReadPolicy;
    ReadPolicy::from_str_name(name).or(match name {
        "AZ_AFFINITY" => Some(ReadPolicy::LocalZoneAffinity),
        "AZ_AFFINITY_REPLICAS_AND_PRIMARY" => Some(ReadPolicy::LocalZoneAffinityReplicasAndPrimary),
        _ => None,
    })
}

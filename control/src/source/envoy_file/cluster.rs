//! `envoy.config.cluster.v3.Cluster` and `envoy.config.endpoint.v3.ClusterLoadAssignment`.

use envoy_types::pb::envoy::config::cluster::v3::{self as c, cluster};
use envoy_types::pb::envoy::config::core::v3::{HealthStatus, RoutingPriority};
use envoy_types::pb::envoy::config::endpoint::v3 as e;
use serde_json::Value;

use super::any::any;
use super::core::{
    address, config_source, health_check, locality, metadata, percent, tcp_keepalive,
    transport_socket, typed_extension_config,
};
use super::reader::{MapErr, Obj, Res, oneof};

/// A Cluster: the fields a Redis upstream cluster carries. HTTP protocol options, subsets, LRS
/// and DNS resolver extensions are not mapped (unknown fields); `transport_socket_matches` is
/// refused by name.
// Deprecated fields are still accepted by Envoy (with a warning); mapping them keeps the proto
// faithful, the translator decides.
#[allow(deprecated)]
pub fn cluster(v: &Value, p: &str) -> Res<c::Cluster> {
    use cluster::ClusterDiscoveryType as D;
    use cluster::LbConfig as L;
    let mut o = Obj::new(v, p)?;
    o.msg::<()>("transport_socket_matches", |_, p| {
        Err(MapErr::new(
            p,
            format!(
                "{} (one transport_socket for every host)",
                crate::translate::tls::NOT_SUPPORTED
            ),
        ))
    })?;
    let ty = o.enm("type", cluster::DiscoveryType::from_str_name)?;
    let ty = o.has("type").then_some(D::Type(ty));
    let custom = o
        .msg("cluster_type", |v, p| {
            let mut t = Obj::new(v, p)?;
            let r = c::cluster::CustomClusterType {
                name: t.string("name")?,
                typed_config: t.msg("typed_config", any)?,
            };
            t.done(r)
        })?
        .map(D::ClusterType);
    let ring = o
        .msg("ring_hash_lb_config", ring_hash_lb_config)?
        .map(L::RingHashLbConfig);
    let maglev = o
        .msg("maglev_lb_config", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = cluster::MaglevLbConfig {
                table_size: m.u64w("table_size")?,
            };
            m.done(r)
        })?
        .map(L::MaglevLbConfig);
    let least = o
        .msg("least_request_lb_config", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = cluster::LeastRequestLbConfig {
                choice_count: m.u32w("choice_count")?,
                active_request_bias: m.msg("active_request_bias", super::core::runtime_double)?,
                ..Default::default()
            };
            m.done(r)
        })?
        .map(L::LeastRequestLbConfig);
    let rr = o
        .msg("round_robin_lb_config", |v, p| Obj::new(v, p)?.finish())?
        .map(|()| L::RoundRobinLbConfig(cluster::RoundRobinLbConfig::default()));
    let r = c::Cluster {
        name: o.string("name")?,
        alt_stat_name: o.string("alt_stat_name")?,
        eds_cluster_config: o.msg("eds_cluster_config", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = cluster::EdsClusterConfig {
                eds_config: m.msg("eds_config", config_source)?,
                service_name: m.string("service_name")?,
            };
            m.done(r)
        })?,
        connect_timeout: o.dur("connect_timeout")?,
        per_connection_buffer_limit_bytes: o.u32w("per_connection_buffer_limit_bytes")?,
        lb_policy: o.enm("lb_policy", cluster::LbPolicy::from_str_name)?,
        load_assignment: o.msg("load_assignment", cluster_load_assignment)?,
        health_checks: o.list("health_checks", health_check)?,
        max_requests_per_connection: o.u32w("max_requests_per_connection")?,
        circuit_breakers: o.msg("circuit_breakers", circuit_breakers)?,
        typed_extension_protocol_options: o.map("typed_extension_protocol_options", any)?,
        dns_refresh_rate: o.dur("dns_refresh_rate")?,
        dns_jitter: o.dur("dns_jitter")?,
        respect_dns_ttl: o.bool("respect_dns_ttl")?,
        dns_lookup_family: o.enm("dns_lookup_family", cluster::DnsLookupFamily::from_str_name)?,
        dns_resolvers: o.list("dns_resolvers", address)?,
        use_tcp_for_dns_lookups: o.bool("use_tcp_for_dns_lookups")?,
        wait_for_warm_on_init: o.boolw("wait_for_warm_on_init")?,
        outlier_detection: o.msg("outlier_detection", outlier_detection)?,
        cleanup_interval: o.dur("cleanup_interval")?,
        common_lb_config: o.msg("common_lb_config", common_lb_config)?,
        transport_socket: o.msg("transport_socket", transport_socket)?,
        metadata: o.msg("metadata", metadata)?,
        upstream_connection_options: o.msg("upstream_connection_options", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = c::UpstreamConnectionOptions {
                tcp_keepalive: m.msg("tcp_keepalive", tcp_keepalive)?,
                set_local_interface_name_on_upstream_connections: m
                    .bool("set_local_interface_name_on_upstream_connections")?,
                happy_eyeballs_config: None,
            };
            m.done(r)
        })?,
        close_connections_on_host_health_failure: o
            .bool("close_connections_on_host_health_failure")?,
        ignore_health_on_host_removal: o.bool("ignore_health_on_host_removal")?,
        load_balancing_policy: o.msg("load_balancing_policy", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = c::LoadBalancingPolicy {
                policies: m.list("policies", |v, p| {
                    let mut q = Obj::new(v, p)?;
                    let r = c::load_balancing_policy::Policy {
                        typed_extension_config: q
                            .msg("typed_extension_config", typed_extension_config)?,
                    };
                    q.done(r)
                })?,
            };
            m.done(r)
        })?,
        track_timeout_budgets: o.bool("track_timeout_budgets")?,
        connection_pool_per_downstream_connection: o
            .bool("connection_pool_per_downstream_connection")?,
        cluster_discovery_type: oneof(p, vec![("type", ty), ("cluster_type", custom)])?,
        lb_config: oneof(
            p,
            vec![
                ("ring_hash_lb_config", ring),
                ("maglev_lb_config", maglev),
                ("least_request_lb_config", least),
                ("round_robin_lb_config", rr),
            ],
        )?,
        ..Default::default()
    };
    o.done(r)
}

fn ring_hash_lb_config(v: &Value, p: &str) -> Res<cluster::RingHashLbConfig> {
    let mut o = Obj::new(v, p)?;
    let r = cluster::RingHashLbConfig {
        minimum_ring_size: o.u64w("minimum_ring_size")?,
        hash_function: o.enm(
            "hash_function",
            cluster::ring_hash_lb_config::HashFunction::from_str_name,
        )?,
        maximum_ring_size: o.u64w("maximum_ring_size")?,
    };
    o.done(r)
}

fn common_lb_config(v: &Value, p: &str) -> Res<cluster::CommonLbConfig> {
    let mut o = Obj::new(v, p)?;
    let r = cluster::CommonLbConfig {
        healthy_panic_threshold: o.msg("healthy_panic_threshold", percent)?,
        update_merge_window: o.dur("update_merge_window")?,
        ignore_new_hosts_until_first_hc: o.bool("ignore_new_hosts_until_first_hc")?,
        close_connections_on_host_set_change: o.bool("close_connections_on_host_set_change")?,
        consistent_hashing_lb_config: o.msg("consistent_hashing_lb_config", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = cluster::common_lb_config::ConsistentHashingLbConfig {
                use_hostname_for_hashing: m.bool("use_hostname_for_hashing")?,
                hash_balance_factor: m.u32w("hash_balance_factor")?,
            };
            m.done(r)
        })?,
        ..Default::default()
    };
    o.done(r)
}

fn outlier_detection(v: &Value, p: &str) -> Res<c::OutlierDetection> {
    let mut o = Obj::new(v, p)?;
    let r = c::OutlierDetection {
        consecutive_5xx: o.u32w("consecutive_5xx")?,
        interval: o.dur("interval")?,
        base_ejection_time: o.dur("base_ejection_time")?,
        max_ejection_percent: o.u32w("max_ejection_percent")?,
        enforcing_consecutive_5xx: o.u32w("enforcing_consecutive_5xx")?,
        enforcing_success_rate: o.u32w("enforcing_success_rate")?,
        success_rate_minimum_hosts: o.u32w("success_rate_minimum_hosts")?,
        success_rate_request_volume: o.u32w("success_rate_request_volume")?,
        success_rate_stdev_factor: o.u32w("success_rate_stdev_factor")?,
        consecutive_gateway_failure: o.u32w("consecutive_gateway_failure")?,
        enforcing_consecutive_gateway_failure: o.u32w("enforcing_consecutive_gateway_failure")?,
        split_external_local_origin_errors: o.bool("split_external_local_origin_errors")?,
        consecutive_local_origin_failure: o.u32w("consecutive_local_origin_failure")?,
        enforcing_consecutive_local_origin_failure: o
            .u32w("enforcing_consecutive_local_origin_failure")?,
        enforcing_local_origin_success_rate: o.u32w("enforcing_local_origin_success_rate")?,
        failure_percentage_threshold: o.u32w("failure_percentage_threshold")?,
        enforcing_failure_percentage: o.u32w("enforcing_failure_percentage")?,
        enforcing_failure_percentage_local_origin: o
            .u32w("enforcing_failure_percentage_local_origin")?,
        failure_percentage_minimum_hosts: o.u32w("failure_percentage_minimum_hosts")?,
        failure_percentage_request_volume: o.u32w("failure_percentage_request_volume")?,
        max_ejection_time: o.dur("max_ejection_time")?,
        max_ejection_time_jitter: o.dur("max_ejection_time_jitter")?,
        successful_active_health_check_uneject_host: o
            .boolw("successful_active_health_check_uneject_host")?,
        monitors: Vec::new(),
        always_eject_one_host: o.boolw("always_eject_one_host")?,
        detect_degraded_hosts: o.boolw("detect_degraded_hosts")?,
    };
    o.done(r)
}

fn circuit_breakers(v: &Value, p: &str) -> Res<c::CircuitBreakers> {
    let mut o = Obj::new(v, p)?;
    let r = c::CircuitBreakers {
        thresholds: o.list("thresholds", thresholds)?,
        per_host_thresholds: o.list("per_host_thresholds", thresholds)?,
    };
    o.done(r)
}

fn thresholds(v: &Value, p: &str) -> Res<c::circuit_breakers::Thresholds> {
    let mut o = Obj::new(v, p)?;
    let r = c::circuit_breakers::Thresholds {
        priority: o.enm("priority", RoutingPriority::from_str_name)?,
        max_connections: o.u32w("max_connections")?,
        max_pending_requests: o.u32w("max_pending_requests")?,
        max_requests: o.u32w("max_requests")?,
        max_retries: o.u32w("max_retries")?,
        retry_budget: o.msg("retry_budget", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = c::circuit_breakers::thresholds::RetryBudget {
                budget_percent: m.msg("budget_percent", percent)?,
                budget_interval: m.dur("budget_interval")?,
                min_retry_concurrency: m.u32w("min_retry_concurrency")?,
            };
            m.done(r)
        })?,
        track_remaining: o.bool("track_remaining")?,
        max_connection_pools: o.u32w("max_connection_pools")?,
    };
    o.done(r)
}

/// A ClusterLoadAssignment (a cluster's inline `load_assignment`, or an EDS resource).
pub fn cluster_load_assignment(v: &Value, p: &str) -> Res<e::ClusterLoadAssignment> {
    let mut o = Obj::new(v, p)?;
    let r = e::ClusterLoadAssignment {
        cluster_name: o.string("cluster_name")?,
        endpoints: o.list("endpoints", locality_lb_endpoints)?,
        policy: o.msg("policy", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = e::cluster_load_assignment::Policy {
                overprovisioning_factor: m.u32w("overprovisioning_factor")?,
                endpoint_stale_after: m.dur("endpoint_stale_after")?,
                weighted_priority_health: m.bool("weighted_priority_health")?,
                ..Default::default()
            };
            m.done(r)
        })?,
        ..Default::default()
    };
    o.done(r)
}

fn locality_lb_endpoints(v: &Value, p: &str) -> Res<e::LocalityLbEndpoints> {
    let mut o = Obj::new(v, p)?;
    let r = e::LocalityLbEndpoints {
        locality: o.msg("locality", locality)?,
        metadata: o.msg("metadata", metadata)?,
        lb_endpoints: o.list("lb_endpoints", lb_endpoint)?,
        load_balancing_weight: o.u32w("load_balancing_weight")?,
        priority: o.u32("priority")?,
        proximity: o.u32w("proximity")?,
        lb_config: None,
    };
    o.done(r)
}

fn lb_endpoint(v: &Value, p: &str) -> Res<e::LbEndpoint> {
    use e::lb_endpoint::HostIdentifier as H;
    let mut o = Obj::new(v, p)?;
    let ep = o.msg("endpoint", endpoint)?.map(H::Endpoint);
    let named = o.opt_string("endpoint_name")?.map(H::EndpointName);
    let r = e::LbEndpoint {
        health_status: o.enm("health_status", HealthStatus::from_str_name)?,
        metadata: o.msg("metadata", metadata)?,
        load_balancing_weight: o.u32w("load_balancing_weight")?,
        host_identifier: oneof(p, vec![("endpoint", ep), ("endpoint_name", named)])?,
    };
    o.done(r)
}

fn endpoint(v: &Value, p: &str) -> Res<e::Endpoint> {
    let mut o = Obj::new(v, p)?;
    let r = e::Endpoint {
        address: o.msg("address", address)?,
        health_check_config: o.msg("health_check_config", |v, p| {
            let mut m = Obj::new(v, p)?;
            let r = e::endpoint::HealthCheckConfig {
                port_value: m.u32("port_value")?,
                hostname: m.string("hostname")?,
                address: m.msg("address", address)?,
                disable_active_health_check: m.bool("disable_active_health_check")?,
            };
            m.done(r)
        })?,
        hostname: o.string("hostname")?,
        observability_name: o.string("observability_name")?,
        ..Default::default()
    };
    o.done(r)
}

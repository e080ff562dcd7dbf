//! Cluster, endpoint and whole-file translation: every mapping checked after the data plane's
//! parser, every rejection with its reason.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CustomClusterType, DiscoveryType, EdsClusterConfig, LbConfig, LbPolicy,
    MaglevLbConfig, RingHashLbConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, LoadBalancingPolicy, OutlierDetection, UpstreamConnectionOptions,
    circuit_breakers::Thresholds, load_balancing_policy::Policy,
};
use envoy_types::pb::envoy::config::core::v3::{
    HealthCheck, HealthStatus, TcpKeepalive, TransportSocket, TypedExtensionConfig,
    health_check::{CustomHealthCheck, HealthChecker, TcpHealthCheck, custom_health_check},
};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    AwsIam, RedisProtocolOptions,
};
use envoy_types::pb::envoy::extensions::health_checkers::redis::v3::Redis;
use envoy_types::pb::envoy::extensions::load_balancing_policies::cluster_provided::v3::ClusterProvided;
use envoy_types::pb::envoy::extensions::load_balancing_policies::maglev::v3::Maglev;
use envoy_types::pb::envoy::extensions::load_balancing_policies::ring_hash::v3::RingHash;
use envoy_types::pb::google::protobuf::{Any, Struct, UInt32Value, UInt64Value, Value, value};
use respite::config::{ClusterType, LbPolicy as RLb};

use super::HostSource;
use super::tests_support::*;

fn u32v(value: u32) -> Option<UInt32Value> {
    Some(UInt32Value { value })
}

fn redis_cluster(cfg: Option<Any>, ports: &[u32]) -> Cluster {
    let mut c = static_cluster("rc", ports);
    c.cluster_discovery_type = Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
        name: "envoy.clusters.redis".into(),
        typed_config: cfg,
    }));
    c.lb_policy = LbPolicy::ClusterProvided as i32;
    c
}

fn eds_cluster(service: &str) -> Cluster {
    Cluster {
        name: "dyn".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: None,
            service_name: service.into(),
        }),
        lb_policy: LbPolicy::Maglev as i32,
        ..Default::default()
    }
}

fn typed_policy(any: Any) -> Option<LoadBalancingPolicy> {
    Some(LoadBalancingPolicy {
        policies: vec![Policy {
            typed_extension_config: Some(TypedExtensionConfig {
                name: "p".into(),
                typed_config: Some(any),
            }),
        }],
    })
}

#[test]
fn static_cluster_with_envoy_defaults() {
    let c = parse_cluster(&static_cluster("cache", &[7001, 7002]));
    assert_eq!(c.name, "cache");
    assert_eq!(c.cluster_type, ClusterType::Static);
    assert_eq!(c.lb_policy, RLb::RingHash);
    // Envoy's default connect_timeout, not Respite's 1s.
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    let hosts: Vec<String> = c.hosts.iter().map(|h| h.address_text.clone()).collect();
    assert_eq!(hosts, vec!["127.0.0.1:7001", "127.0.0.1:7002"]);
}

#[test]
fn eds_cluster_names_its_assignment() {
    let d = super::cluster(&eds_cluster("svc-a")).unwrap();
    assert_eq!(d.hosts, HostSource::Eds("svc-a".into()));
    assert_eq!(d.cluster.cluster_type, ClusterType::Eds);
    let d = super::cluster(&eds_cluster("")).unwrap();
    assert_eq!(d.hosts, HostSource::Eds("dyn".into()));
    let c = parse_cluster(&eds_cluster(""));
    assert_eq!(c.cluster_type, ClusterType::Eds);
    assert_eq!(c.lb_policy, RLb::Maglev);
    assert!(c.hosts.is_empty());
}

#[test]
fn redis_cluster_typed_config() {
    let cfg = RedisClusterConfig {
        cluster_refresh_rate: Some(dur(10, 0)),
        cluster_refresh_timeout: Some(ms(1500)),
        redirect_refresh_interval: Some(ms(200)),
        redirect_refresh_threshold: u32v(9),
        failure_refresh_threshold: 3,
        host_degraded_refresh_threshold: 2,
        enable_zone_discovery: None,
    };
    let c = parse_cluster(&redis_cluster(Some(any(&cfg)), &[7101, 7102]));
    assert_eq!(c.cluster_type, ClusterType::RedisCluster);
    let r = &c.redis_cluster;
    assert_eq!(r.cluster_refresh_rate, Duration::from_secs(10));
    assert_eq!(r.cluster_refresh_timeout, Duration::from_millis(1500));
    assert_eq!(r.redirect_refresh_interval, Duration::from_millis(200));
    assert_eq!(r.redirect_refresh_threshold, 9);
    assert_eq!(r.failure_refresh_threshold, 3);
    assert_eq!(r.host_degraded_refresh_threshold, 2);
    assert_eq!(c.hosts.len(), 2, "seeds from load_assignment");
}

#[test]
fn redis_cluster_struct_config_as_in_the_proto_example() {
    let fields: HashMap<String, Value> = [
        (
            "clusterRefreshRate",
            Value {
                kind: Some(value::Kind::StringValue("10s".into())),
            },
        ),
        (
            "cluster_refresh_timeout",
            Value {
                kind: Some(value::Kind::StringValue("0.5s".into())),
            },
        ),
        (
            "redirectRefreshInterval",
            Value {
                kind: Some(value::Kind::StringValue("1.250s".into())),
            },
        ),
        (
            "redirectRefreshThreshold",
            Value {
                kind: Some(value::Kind::NumberValue(4.0)),
            },
        ),
        (
            "failure_refresh_threshold",
            Value {
                kind: Some(value::Kind::NumberValue(6.0)),
            },
        ),
        (
            "hostDegradedRefreshThreshold",
            Value {
                kind: Some(value::Kind::StringValue("2".into())),
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let st = Struct { fields };
    let c = parse_cluster(&redis_cluster(Some(any(&st)), &[7101]));
    let r = &c.redis_cluster;
    assert_eq!(r.cluster_refresh_rate, Duration::from_secs(10));
    assert_eq!(r.cluster_refresh_timeout, Duration::from_millis(500));
    assert_eq!(r.redirect_refresh_interval, Duration::from_millis(1250));
    assert_eq!(r.redirect_refresh_threshold, 4);
    assert_eq!(r.failure_refresh_threshold, 6);
    assert_eq!(r.host_degraded_refresh_threshold, 2);

    let bad = Struct {
        fields: [(
            "clusterRefreshRate".to_string(),
            Value {
                kind: Some(value::Kind::StringValue("5".into())),
            },
        )]
        .into_iter()
        .collect(),
    };
    assert_mentions(
        &cluster_err(&redis_cluster(Some(any(&bad)), &[7101])),
        &[
            "cluster_type.typed_config.clusterRefreshRate",
            "bad duration \"5\"",
        ],
    );
    let unknown = Struct {
        fields: [(
            "refresh".to_string(),
            Value {
                kind: Some(value::Kind::NumberValue(1.0)),
            },
        )]
        .into_iter()
        .collect(),
    };
    assert_mentions(
        &cluster_err(&redis_cluster(Some(any(&unknown)), &[7101])),
        &["typed_config.refresh", "unknown"],
    );
}

#[test]
fn redis_cluster_without_config_has_envoy_defaults() {
    let mut cl = redis_cluster(None, &[7101]);
    // The proto default (ROUND_ROBIN) is what a config without lb_policy has: accepted.
    cl.lb_policy = LbPolicy::RoundRobin as i32;
    let c = parse_cluster(&cl);
    let r = &c.redis_cluster;
    assert_eq!(r.cluster_refresh_rate, Duration::from_secs(5));
    assert_eq!(r.redirect_refresh_threshold, 5);
    // Envoy's 0 (off), not Respite's own defaults.
    assert_eq!(r.failure_refresh_threshold, 0);
    assert_eq!(r.host_degraded_refresh_threshold, 0);

    let mut cl = redis_cluster(None, &[7101]);
    cl.lb_policy = 0;
    cl.load_balancing_policy = typed_policy(any(&ClusterProvided {}));
    assert_eq!(parse_cluster(&cl).cluster_type, ClusterType::RedisCluster);
}

#[test]
fn redis_cluster_rejections() {
    let mut cl = redis_cluster(None, &[7101]);
    cl.lb_policy = LbPolicy::RingHash as i32;
    assert_mentions(
        &cluster_err(&cl),
        &["lb_policy", "RING_HASH", "CLUSTER_PROVIDED"],
    );

    let mut cl = redis_cluster(None, &[7101]);
    cl.cluster_discovery_type = Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
        name: "envoy.clusters.aggregate".into(),
        typed_config: None,
    }));
    assert_mentions(
        &cluster_err(&cl),
        &["cluster_type.name", "envoy.clusters.aggregate"],
    );

    let mut cl = redis_cluster(None, &[]);
    cl.load_assignment = None;
    assert_mentions(&cluster_err(&cl), &["load_assignment: required"]);

    let mut cl = redis_cluster(None, &[7101]);
    cl.cluster_discovery_type = Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
        name: "envoy.clusters.redis".into(),
        typed_config: Some(Any {
            type_url: "type.googleapis.com/some.Other".into(),
            value: vec![],
        }),
    }));
    assert_mentions(
        &cluster_err(&cl),
        &["cluster_type.typed_config", "some.Other"],
    );
}

#[test]
fn lb_policies() {
    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_policy = LbPolicy::Maglev as i32;
    cl.lb_config = Some(LbConfig::MaglevLbConfig(MaglevLbConfig {
        table_size: None,
    }));
    assert_eq!(parse_cluster(&cl).lb_policy, RLb::Maglev);

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
        minimum_ring_size: Some(UInt64Value { value: 1024 }),
        hash_function: 0,
        maximum_ring_size: Some(UInt64Value {
            value: 8 * 1024 * 1024,
        }),
    }));
    assert_eq!(parse_cluster(&cl).lb_policy, RLb::RingHash);

    // Typed policies supersede lb_policy.
    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_policy = LbPolicy::RoundRobin as i32;
    cl.load_balancing_policy = typed_policy(any(&Maglev::default()));
    assert_eq!(parse_cluster(&cl).lb_policy, RLb::Maglev);
    cl.load_balancing_policy = typed_policy(any(&RingHash::default()));
    assert_eq!(parse_cluster(&cl).lb_policy, RLb::RingHash);

    // An unknown policy first falls through to a known one, as in Envoy.
    let mut cl = static_cluster("c", &[7001, 7002]);
    let mut pols = typed_policy(Any {
        type_url: "type.googleapis.com/example.Custom".into(),
        value: vec![],
    })
    .unwrap();
    pols.policies
        .extend(typed_policy(any(&Maglev::default())).unwrap().policies);
    cl.load_balancing_policy = Some(pols);
    assert_eq!(parse_cluster(&cl).lb_policy, RLb::Maglev);

    // A non-hashing policy on one host: accepted (every policy picks that host).
    let mut cl = static_cluster("c", &[7001]);
    cl.lb_policy = LbPolicy::RoundRobin as i32;
    assert_eq!(parse_cluster(&cl).hosts.len(), 1);
}

#[test]
fn lb_policy_rejections() {
    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_policy = LbPolicy::ClusterProvided as i32;
    assert_mentions(
        &cluster_err(&cl),
        &["CLUSTER_PROVIDED", "envoy.clusters.redis"],
    );

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
        hash_function: 1, // MURMUR_HASH_2
        ..Default::default()
    }));
    assert_mentions(
        &cluster_err(&cl),
        &["ring_hash_lb_config.hash_function", "MURMUR_HASH_2"],
    );

    cl.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
        minimum_ring_size: Some(UInt64Value { value: 2048 }),
        ..Default::default()
    }));
    assert_mentions(&cluster_err(&cl), &["minimum_ring_size", "2048"]);

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.load_balancing_policy = typed_policy(any(&RingHash {
        hash_function: 2, // MURMUR_HASH_2 in the typed enum
        ..Default::default()
    }));
    assert_mentions(&cluster_err(&cl), &["hash_function", "MURMUR_HASH_2"]);

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_policy = LbPolicy::Maglev as i32;
    cl.lb_config = Some(LbConfig::MaglevLbConfig(MaglevLbConfig {
        table_size: Some(UInt64Value { value: 7 }),
    }));
    assert_mentions(&cluster_err(&cl), &["maglev_lb_config.table_size", "7"]);

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.load_balancing_policy = typed_policy(Any {
        type_url: "type.googleapis.com/example.Custom".into(),
        value: vec![],
    });
    assert_mentions(
        &cluster_err(&cl),
        &["load_balancing_policy", "example.Custom"],
    );
}

fn redis_check(key: &str) -> HealthCheck {
    HealthCheck {
        timeout: Some(ms(500)),
        interval: Some(dur(2, 0)),
        unhealthy_threshold: u32v(4),
        healthy_threshold: u32v(3),
        no_traffic_interval: Some(dur(30, 0)),
        health_checker: Some(HealthChecker::CustomHealthCheck(CustomHealthCheck {
            name: "envoy.health_checkers.redis".into(),
            config_type: Some(custom_health_check::ConfigType::TypedConfig(any(&Redis {
                key: key.into(),
                aws_iam: None,
            }))),
        })),
        ..Default::default()
    }
}

#[test]
fn redis_health_checks() {
    let mut cl = static_cluster("c", &[7001, 7002]);
    let mut second = redis_check("");
    second.interval_jitter = Some(ms(100));
    second.interval_jitter_percent = 10; // + 10 % of 2s
    cl.health_checks = vec![redis_check("respite:drain"), second];
    let c = parse_cluster(&cl);
    assert_eq!(c.health_checks.len(), 2);
    let h = &c.health_checks[0];
    assert_eq!(h.interval, Duration::from_secs(2));
    assert_eq!(h.timeout, Duration::from_millis(500));
    assert_eq!(h.unhealthy_threshold, 4);
    assert_eq!(h.healthy_threshold, 3);
    assert_eq!(h.no_traffic_interval, Duration::from_secs(30));
    assert_eq!(h.key.as_deref(), Some("respite:drain"));
    assert_eq!(c.health_checks[1].key, None);
    assert_eq!(
        c.health_checks[1].interval_jitter,
        Duration::from_millis(300)
    );
}

#[test]
fn health_check_rejections() {
    let mut cl = static_cluster("c", &[7001]);
    let mut tcp = redis_check("");
    tcp.health_checker = Some(HealthChecker::TcpHealthCheck(TcpHealthCheck::default()));
    cl.health_checks = vec![tcp];
    assert_mentions(
        &cluster_err(&cl),
        &["health_checks[0].tcp_health_check", "not supported"],
    );

    let mut other = redis_check("");
    other.health_checker = Some(HealthChecker::CustomHealthCheck(CustomHealthCheck {
        name: "envoy.health_checkers.thrift".into(),
        config_type: Some(custom_health_check::ConfigType::TypedConfig(Any {
            type_url: "type.googleapis.com/envoy.extensions.health_checkers.thrift.v3.Thrift"
                .into(),
            value: vec![],
        })),
    }));
    cl.health_checks = vec![other];
    assert_mentions(
        &cluster_err(&cl),
        &["custom_health_check", "thrift", "not supported"],
    );

    let mut no_interval = redis_check("");
    no_interval.interval = None;
    cl.health_checks = vec![no_interval];
    assert_mentions(&cluster_err(&cl), &["health_checks[0].interval: required"]);

    let mut edge = redis_check("");
    edge.unhealthy_interval = Some(dur(1, 0));
    cl.health_checks = vec![edge];
    assert_mentions(&cluster_err(&cl), &["health_checks[0].unhealthy_interval"]);
}

#[test]
fn outlier_detection_maps_and_refuses_other_detectors() {
    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.outlier_detection = Some(OutlierDetection {
        consecutive_5xx: u32v(3),
        interval: Some(dur(5, 0)),
        base_ejection_time: Some(dur(10, 0)),
        max_ejection_time: Some(dur(60, 0)),
        max_ejection_percent: u32v(50),
        enforcing_consecutive_5xx: u32v(100),
        ..Default::default()
    });
    let c = parse_cluster(&cl);
    let o = c.outlier_detection.unwrap();
    assert_eq!(o.consecutive_5xx, 3);
    assert_eq!(o.interval, Duration::from_secs(5));
    assert_eq!(o.base_ejection_time, Duration::from_secs(10));
    assert_eq!(o.max_ejection_time, Duration::from_secs(60));
    assert_eq!(o.max_ejection_percent, 50);

    // Present but empty: on, with Envoy's defaults.
    cl.outlier_detection = Some(OutlierDetection::default());
    let o = parse_cluster(&cl).outlier_detection.unwrap();
    assert_eq!(o.consecutive_5xx, 5);

    cl.outlier_detection = Some(OutlierDetection {
        enforcing_consecutive_5xx: u32v(50),
        ..Default::default()
    });
    assert_mentions(&cluster_err(&cl), &["enforcing_consecutive_5xx", "100"]);
    cl.outlier_detection = Some(OutlierDetection {
        enforcing_failure_percentage: u32v(10),
        ..Default::default()
    });
    assert_mentions(
        &cluster_err(&cl),
        &["enforcing_failure_percentage", "not supported"],
    );
}

fn with_protocol_options(cl: &mut Cluster, o: &RedisProtocolOptions) {
    cl.typed_extension_protocol_options
        .insert("envoy.filters.network.redis_proxy".into(), any(o));
}

#[test]
fn upstream_auth_limits_and_keepalive() {
    let mut cl = static_cluster("c", &[7001]);
    with_protocol_options(
        &mut cl,
        &RedisProtocolOptions {
            auth_password: Some(inline("s3cret")),
            auth_username: Some(inline("proxy")),
            ..Default::default()
        },
    );
    cl.circuit_breakers = Some(CircuitBreakers {
        thresholds: vec![Thresholds {
            max_pending_requests: u32v(512),
            max_connections: u32v(3),
            ..Default::default()
        }],
        per_host_thresholds: vec![],
    });
    cl.upstream_connection_options = Some(UpstreamConnectionOptions {
        tcp_keepalive: Some(TcpKeepalive {
            keepalive_probes: u32v(4),
            keepalive_time: u32v(60),
            keepalive_interval: u32v(10),
        }),
        ..Default::default()
    });
    let c = parse_cluster(&cl);
    assert_eq!(c.auth_password.as_deref(), Some("s3cret"));
    assert_eq!(c.auth_username.as_deref(), Some("proxy"));
    assert_eq!(c.max_pending_requests, 512);
    assert_eq!(c.tcp_keepalive.keepalive_time, Duration::from_secs(60));
    assert_eq!(c.tcp_keepalive.keepalive_interval, Duration::from_secs(10));
    assert_eq!(c.tcp_keepalive.keepalive_probes, 4);
}

#[test]
fn cluster_rejections() {
    let mut cl = static_cluster("c", &[7001]);
    with_protocol_options(
        &mut cl,
        &RedisProtocolOptions {
            aws_iam: Some(AwsIam {
                cache_name: "c".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    assert_mentions(&cluster_err(&cl), &["aws_iam", "not supported"]);

    let mut cl = static_cluster("c", &[7001]);
    cl.transport_socket = Some(TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: None,
    });
    assert_mentions(
        &cluster_err(&cl),
        &[
            "transport_socket.typed_config: required",
            "UpstreamTlsContext",
        ],
    );

    let mut cl = static_cluster("c", &[7001]);
    cl.cluster_discovery_type = Some(ClusterDiscoveryType::Type(
        DiscoveryType::OriginalDst as i32,
    ));
    assert_mentions(
        &cluster_err(&cl),
        &["type", "ORIGINAL_DST", "not supported"],
    );

    let mut cl = static_cluster("c", &[7001]);
    cl.load_assignment = None;
    assert_mentions(&cluster_err(&cl), &["load_assignment: required"]);

    let mut cl = static_cluster("c", &[7001]);
    cl.connect_timeout = Some(dur(0, 0));
    assert_mentions(&cluster_err(&cl), &["connect_timeout", "greater than zero"]);

    let mut cl = static_cluster("c", &[7001]);
    cl.name.clear();
    assert_mentions(&cluster_err(&cl), &["name: required"]);

    // The data plane's own refusal, named by key: max_ejection_percent above 100.
    let mut cl = static_cluster("c", &[7001]);
    cl.outlier_detection = Some(OutlierDetection {
        max_ejection_percent: u32v(150),
        ..Default::default()
    });
    assert_mentions(
        &cluster_err(&cl),
        &["clusters[0].outlier_detection.max_ejection_percent"],
    );
}

#[test]
fn endpoints_weights_health_and_duplicates() {
    let mut weighted = lb_endpoint("10.0.0.2", 6379);
    weighted.load_balancing_weight = u32v(3);
    let mut unhealthy = lb_endpoint("10.0.0.3", 6379);
    unhealthy.health_status = HealthStatus::Unhealthy as i32;
    let mut draining = lb_endpoint("10.0.0.4", 6379);
    draining.health_status = HealthStatus::Draining as i32;
    let mut timeout = lb_endpoint("10.0.0.5", 6379);
    timeout.health_status = HealthStatus::Timeout as i32;
    let mut degraded = lb_endpoint("10.0.0.6", 6379);
    degraded.health_status = HealthStatus::Degraded as i32;
    let mut healthy = lb_endpoint("fd00::7", 6379);
    healthy.health_status = HealthStatus::Healthy as i32;
    let cla = assignment(
        "dyn",
        vec![
            lb_endpoint("10.0.0.1", 6379),
            weighted,
            unhealthy,
            draining,
            timeout,
            degraded,
            healthy,
        ],
    );
    let hosts = super::endpoints(&cla).unwrap();
    let d = super::cluster(&eds_cluster("")).unwrap();
    let cfg = parse(&[], std::slice::from_ref(&d));
    assert!(cfg.clusters[0].hosts.is_empty());
    let text = super::render(&[], &[(&d, &hosts)]);
    let cfg = respite::config::parse_pushed(&text, "t").unwrap();
    let got: Vec<(String, u32)> = cfg.clusters[0]
        .hosts
        .iter()
        .map(|h| (h.address_text.clone(), h.weight))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.0.0.1:6379".to_string(), 1),
            ("10.0.0.2:6379".to_string(), 3),
            ("10.0.0.6:6379".to_string(), 1),
            ("[fd00::7]:6379".to_string(), 1),
        ]
    );

    let dup = assignment(
        "dyn",
        vec![lb_endpoint("10.0.0.1", 6379), lb_endpoint("10.0.0.1", 6379)],
    );
    assert_mentions(
        &super::endpoints(&dup).unwrap_err(),
        &[
            "endpoints[0].lb_endpoints[1].endpoint.address",
            "10.0.0.1:6379",
            "twice",
        ],
    );

    let failover = ClusterLoadAssignment {
        cluster_name: "dyn".into(),
        endpoints: vec![LocalityLbEndpoints {
            priority: 1,
            lb_endpoints: vec![lb_endpoint("10.0.0.9", 6379)],
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_mentions(
        &super::endpoints(&failover).unwrap_err(),
        &["endpoints[0].priority", "1"],
    );

    let mut zero = lb_endpoint("10.0.0.1", 6379);
    zero.load_balancing_weight = u32v(0);
    assert_mentions(
        &super::endpoints(&assignment("dyn", vec![zero])).unwrap_err(),
        &["load_balancing_weight", "at least 1"],
    );

    let empty = ClusterLoadAssignment {
        cluster_name: "dyn".into(),
        ..Default::default()
    };
    assert_eq!(super::endpoints(&empty).unwrap(), Vec::new());

    // An inline assignment whose endpoints are all unhealthy leaves a static cluster empty.
    let mut cl = static_cluster("c", &[]);
    let mut only = lb_endpoint("10.0.0.1", 6379);
    only.health_status = HealthStatus::Unhealthy as i32;
    cl.load_assignment = Some(assignment("c", vec![only]));
    assert_mentions(
        &cluster_err(&cl),
        &["load_assignment", "no usable endpoint"],
    );
}

#[test]
fn static_config_translates_a_whole_bootstrap() {
    let l = listener_with(&proxy());
    let text = super::static_config(
        std::slice::from_ref(&l),
        &[static_cluster("cache", &[7001])],
    )
    .unwrap();
    let cfg = respite::config::parse_pushed(&text, "t").unwrap();
    assert_eq!(cfg.listeners[0].name, "redis");
    assert_eq!(cfg.clusters[0].name, "cache");

    // Errors name the resource.
    let mut bad = static_cluster("cache", &[7001]);
    bad.lb_policy = LbPolicy::ClusterProvided as i32;
    bad.load_assignment = Some(assignment(
        "cache",
        vec![
            lb_endpoint("127.0.0.1", 7001),
            lb_endpoint("127.0.0.1", 7002),
        ],
    ));
    assert_mentions(
        &super::static_config(std::slice::from_ref(&l), &[bad]).unwrap_err(),
        &["cluster \"cache\": lb_policy"],
    );
    let mut eds = eds_cluster("");
    eds.name = "cache".into();
    assert_mentions(
        &super::static_config(std::slice::from_ref(&l), &[eds]).unwrap_err(),
        &["cluster \"cache\"", "EDS", "xDS"],
    );
    let mut nameless = l.clone();
    nameless.name.clear();
    assert_mentions(
        &super::static_config(&[nameless], &[]).unwrap_err(),
        &["listeners[0]: name: required"],
    );
    // A route to a cluster that is not there: the data plane's whole-config check.
    assert_mentions(&super::static_config(&[l], &[]).unwrap_err(), &["cache"]);
}

/// `credentials` → `[[clusters.credentials]]`, per address and in order, the cluster-wide
/// AUTH next to them; the data plane's `auth_for` picks per host.
#[test]
fn per_address_credentials_map_per_address() {
    use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_protocol_options::Credential;
    use respite::config::{Auth, CredentialAddress};
    let mut cl = static_cluster("c", &[7001, 7002]);
    with_protocol_options(
        &mut cl,
        &RedisProtocolOptions {
            auth_password: Some(inline("cluster-pw")),
            credentials: vec![
                Credential {
                    address: Some(sock("127.0.0.1", 7001)),
                    auth_password: Some(inline("p1")),
                    auth_username: Some(inline("u1")),
                },
                Credential {
                    address: Some(sock("::1", 7003)),
                    auth_password: Some(inline("p3")),
                    auth_username: None,
                },
            ],
            ..Default::default()
        },
    );
    let c = parse_cluster(&cl);
    assert_eq!(c.credentials.len(), 2);
    assert_eq!(
        c.credentials[0].address,
        CredentialAddress::Ip("127.0.0.1:7001".parse().unwrap())
    );
    assert_eq!(c.credentials[0].auth_username.as_deref(), Some("u1"));
    assert_eq!(c.credentials[0].auth_password.as_deref(), Some("p1"));
    assert_eq!(
        c.credentials[1].address,
        CredentialAddress::Ip("[::1]:7003".parse().unwrap())
    );
    assert_eq!(c.credentials[1].auth_username, None);
    assert_eq!(
        c.auth_for("127.0.0.1:7001".parse().unwrap(), None),
        Auth {
            username: Some("u1"),
            password: Some("p1")
        }
    );
    assert_eq!(
        c.auth_for("127.0.0.1:7002".parse().unwrap(), None),
        Auth {
            username: None,
            password: Some("cluster-pw")
        }
    );
}

/// A credential's address must be a socket_address; the error names the entry's field.
#[test]
fn a_credential_address_that_is_not_a_socket_address_is_refused() {
    use envoy_types::pb::envoy::config::core::v3::{Address, Pipe, address};
    use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_protocol_options::Credential;
    let mut cl = static_cluster("c", &[7001]);
    with_protocol_options(
        &mut cl,
        &RedisProtocolOptions {
            credentials: vec![Credential {
                address: Some(Address {
                    address: Some(address::Address::Pipe(Pipe {
                        path: "/tmp/redis.sock".into(),
                        ..Default::default()
                    })),
                }),
                auth_password: Some(inline("x")),
                auth_username: None,
            }],
            ..Default::default()
        },
    );
    assert_mentions(
        &cluster_err(&cl),
        &["credentials[0].address", "socket_address"],
    );
}

/// ROUND_ROBIN (the proto default) and RANDOM over several hosts, static or EDS: the data
/// plane's `round_robin` and `random`.
#[test]
fn non_hashing_policies_map_onto_the_data_planes() {
    for (policy, want) in [
        (LbPolicy::RoundRobin, respite::config::LbPolicy::RoundRobin),
        (LbPolicy::Random, respite::config::LbPolicy::Random),
    ] {
        let mut cl = static_cluster("c", &[7001, 7002]);
        cl.lb_policy = policy as i32;
        let d = super::cluster(&cl).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.cluster.lb_policy.map(|p| *p.get_ref()), Some(want));
        let mut eds = eds_cluster("");
        eds.lb_policy = policy as i32;
        let d = super::cluster(&eds).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.cluster.lb_policy.map(|p| *p.get_ref()), Some(want));
    }
}

/// LEAST_REQUEST over several hosts, static or EDS, with its settings from
/// `least_request_lb_config` or the typed policy; endpoint weights reach the hosts of every
/// non-hashing policy (RANDOM ignores them in the data plane, as Envoy's does).
#[test]
fn least_request_and_weights_map_onto_the_data_plane() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LeastRequestLbConfig;
    use envoy_types::pb::envoy::config::core::v3::RuntimeDouble;
    use envoy_types::pb::envoy::extensions::load_balancing_policies::least_request::v3::{
        LeastRequest, least_request::SelectionMethod,
    };

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.lb_policy = LbPolicy::LeastRequest as i32;
    let c = parse_cluster(&cl);
    assert_eq!(c.lb_policy, RLb::LeastRequest);
    assert_eq!(
        c.least_request,
        respite::config::LeastRequestConfig::default()
    );
    let mut eds = eds_cluster("");
    eds.lb_policy = LbPolicy::LeastRequest as i32;
    let d = super::cluster(&eds).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        d.cluster.lb_policy.map(|p| *p.get_ref()),
        Some(RLb::LeastRequest)
    );

    cl.lb_config = Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
        choice_count: u32v(4),
        active_request_bias: Some(RuntimeDouble {
            default_value: 0.5,
            runtime_key: "lb.bias".into(),
        }),
        slow_start_config: None,
    }));
    let c = parse_cluster(&cl);
    assert_eq!(c.least_request.choice_count, 4);
    assert_eq!(c.least_request.active_request_bias, 0.5);

    let mut cl = static_cluster("c", &[7001, 7002]);
    cl.load_balancing_policy = typed_policy(any(&LeastRequest {
        choice_count: u32v(3),
        ..Default::default()
    }));
    let c = parse_cluster(&cl);
    assert_eq!(c.lb_policy, RLb::LeastRequest);
    assert_eq!(c.least_request.choice_count, 3);
    assert_eq!(c.least_request.active_request_bias, 1.0);

    cl.load_balancing_policy = typed_policy(any(&LeastRequest {
        selection_method: SelectionMethod::FullScan as i32,
        ..Default::default()
    }));
    assert_mentions(
        &cluster_err(&cl),
        &["selection_method", "FULL_SCAN", "not supported by respite"],
    );
    cl.load_balancing_policy = typed_policy(any(&LeastRequest {
        choice_count: u32v(1),
        ..Default::default()
    }));
    assert_mentions(
        &cluster_err(&cl),
        &["least_request.choice_count", "2 to 64"],
    );

    // Unequal weights: kept on the hosts for every non-hashing policy.
    for policy in [
        LbPolicy::RoundRobin,
        LbPolicy::Random,
        LbPolicy::LeastRequest,
    ] {
        let mut cl = static_cluster("c", &[7001]);
        cl.lb_policy = policy as i32;
        let mut heavy = lb_endpoint("127.0.0.1", 7002);
        heavy.load_balancing_weight = u32v(3);
        cl.load_assignment = Some(assignment("c", vec![lb_endpoint("127.0.0.1", 7001), heavy]));
        let c = parse_cluster(&cl);
        let weights: Vec<u32> = c.hosts.iter().map(|h| h.weight).collect();
        assert_eq!(weights, [1, 3], "{policy:?}");
    }
}

//! `LOCAL_ZONE_AFFINITY*` read policies, `enable_zone_discovery` and the node's zone.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CustomClusterType, LbPolicy,
};
use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::conn_pool_settings::ReadPolicy;
use envoy_types::pb::google::protobuf::BoolValue;
use respite::config::ReadPolicy as DataPlaneReadPolicy;

use super::tests_support::{any, assert_mentions, listener_with, proxy, static_cluster};

/// A Redis Cluster named "cache" with zone discovery as given.
fn cache(zone_discovery: bool) -> Cluster {
    let cfg = RedisClusterConfig {
        enable_zone_discovery: zone_discovery.then_some(BoolValue { value: true }),
        ..Default::default()
    };
    let mut c = static_cluster("cache", &[7001]);
    c.cluster_discovery_type = Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
        name: "envoy.clusters.redis".into(),
        typed_config: Some(any(&cfg)),
    }));
    c.lb_policy = LbPolicy::ClusterProvided as i32;
    c
}

fn zoned_listener(policy: ReadPolicy) -> envoy_types::pb::envoy::config::listener::v3::Listener {
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.read_policy = policy as i32;
    }
    listener_with(&p)
}

#[test]
fn zone_policies_take_the_node_zone() {
    for (policy, want) in [
        (
            ReadPolicy::LocalZoneAffinity,
            DataPlaneReadPolicy::LocalZoneAffinity,
        ),
        (
            ReadPolicy::LocalZoneAffinityReplicasAndPrimary,
            DataPlaneReadPolicy::LocalZoneAffinityReplicasAndPrimary,
        ),
    ] {
        let l = zoned_listener(policy);
        let text = super::static_config_in_zone(
            std::slice::from_ref(&l),
            &[cache(true)],
            Some("us-east-1a"),
        )
        .unwrap();
        let cfg = respite::config::parse_pushed(&text, "t").unwrap();
        assert_eq!(cfg.listeners[0].read_policy, want);
        assert_eq!(cfg.listeners[0].local_zone.as_deref(), Some("us-east-1a"));
        assert!(cfg.clusters[0].redis_cluster.zone_discovery);
    }
}

#[test]
fn zone_policy_mistakes_are_named() {
    let l = zoned_listener(ReadPolicy::LocalZoneAffinity);
    // No node zone.
    assert_mentions(
        &super::static_config_in_zone(std::slice::from_ref(&l), &[cache(true)], None).unwrap_err(),
        &["listener \"redis\"", "read_policy", "node.locality.zone"],
    );
    // No enable_zone_discovery on the cluster.
    assert_mentions(
        &super::static_config_in_zone(std::slice::from_ref(&l), &[cache(false)], Some("a"))
            .unwrap_err(),
        &["read_policy", "zone_discovery"],
    );
    // Other policies ignore the node's zone.
    let plain = listener_with(&proxy());
    let text = super::static_config_in_zone(&[plain], &[cache(true)], Some("a")).unwrap();
    let cfg = respite::config::parse_pushed(&text, "t").unwrap();
    assert_eq!(cfg.listeners[0].local_zone, None);
    assert!(cfg.clusters[0].redis_cluster.zone_discovery);
}

//! STRICT_DNS / LOGICAL_DNS clusters: the new types, their DNS keys, nothing resolved at
//! translation, and the DNS fields that cannot be honoured refused by name.

#![allow(deprecated)] // Envoy deprecates the Cluster DNS fields, which configs still carry.

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, DnsLookupFamily as EnvoyFamily, RefreshRate,
};
use respite::config::{ClusterType, DnsLookupFamily, DnsTarget};

use super::tests_support::*;

fn dns_cluster(t: DiscoveryType, host: &str) -> Cluster {
    let mut cl = static_cluster("cache", &[]);
    cl.cluster_discovery_type = Some(ClusterDiscoveryType::Type(t as i32));
    cl.load_assignment = Some(assignment("cache", vec![lb_endpoint(host, 7001)]));
    cl
}

#[test]
fn strict_dns_with_an_unresolvable_name_translates_unresolved() {
    let mut cl = dns_cluster(DiscoveryType::StrictDns, "respite-nowhere.invalid");
    cl.dns_refresh_rate = Some(ms(750));
    cl.dns_lookup_family = EnvoyFamily::V4Only as i32;
    cl.connect_timeout = Some(ms(250));
    let c = parse_cluster(&cl);
    assert_eq!(c.cluster_type, ClusterType::StrictDns);
    assert!(c.hosts.is_empty(), "resolved at translation: {:?}", c.hosts);
    let d = c.dns.expect("dns settings");
    assert_eq!(d.dns_refresh_rate, Duration::from_millis(750));
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::V4Only);
    assert_eq!(
        d.targets,
        vec![DnsTarget {
            host: "respite-nowhere.invalid".into(),
            port: 7001,
            weight: 1
        }]
    );
    assert_eq!(c.connect_timeout, Duration::from_millis(250));
}

#[test]
fn logical_dns_takes_envoy_defaults() {
    let c = parse_cluster(&dns_cluster(DiscoveryType::LogicalDns, "localhost"));
    assert_eq!(c.cluster_type, ClusterType::LogicalDns);
    let d = c.dns.expect("dns settings");
    assert_eq!(d.dns_refresh_rate, Duration::from_secs(5));
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::Auto);
    assert_eq!(d.targets[0].host, "localhost");
}

#[test]
fn logical_dns_with_two_endpoints_is_refused() {
    let mut cl = dns_cluster(DiscoveryType::LogicalDns, "a");
    cl.load_assignment = Some(assignment(
        "cache",
        vec![lb_endpoint("a", 7001), lb_endpoint("b", 7001)],
    ));
    assert_mentions(&cluster_err(&cl), &["exactly one host"]);
}

#[test]
fn dns_fields_respite_cannot_honour_are_refused_by_name() {
    type Set = Box<dyn Fn(&mut Cluster)>;
    let cases: Vec<(Set, &str)> = vec![
        (Box::new(|c| c.respect_dns_ttl = true), "respect_dns_ttl"),
        (
            Box::new(|c| {
                c.dns_failure_refresh_rate = Some(RefreshRate {
                    base_interval: Some(ms(100)),
                    max_interval: None,
                })
            }),
            "dns_failure_refresh_rate",
        ),
        (
            Box::new(|c| c.dns_resolvers = vec![sock("10.0.0.53", 53)]),
            "dns_resolvers",
        ),
        (
            Box::new(|c| c.use_tcp_for_dns_lookups = true),
            "use_tcp_for_dns_lookups",
        ),
        (
            Box::new(|c| c.dns_refresh_rate = Some(ms(0))),
            "dns_refresh_rate",
        ),
    ];
    for (set, field) in cases {
        let mut cl = dns_cluster(DiscoveryType::StrictDns, "localhost");
        set(&mut cl);
        let e = cluster_err(&cl);
        assert!(e.contains(field), "{field}: {e}");
        if field != "dns_refresh_rate" {
            assert!(e.contains("not supported by respite"), "{field}: {e}");
        }
    }
    // dns_jitter changes only when refreshes happen: ignored with a warning.
    let mut cl = dns_cluster(DiscoveryType::StrictDns, "localhost");
    cl.dns_jitter = Some(ms(100));
    assert_eq!(parse_cluster(&cl).cluster_type, ClusterType::StrictDns);
}

#[test]
fn dns_cache_config_maps_onto_the_listener_dns_cache() {
    use envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig;
    use envoy_types::pb::google::protobuf::UInt32Value;
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.dns_cache_config = Some(DnsCacheConfig {
            name: "redirects".into(),
            dns_refresh_rate: Some(ms(30_000)),
            max_hosts: Some(UInt32Value { value: 64 }),
            dns_lookup_family: EnvoyFamily::V4Only as i32,
            ..DnsCacheConfig::default()
        });
    }
    let l = parse_listener(&listener_with(&p)).listeners.remove(0);
    let d = l.dns_cache.expect("dns_cache");
    assert_eq!(d.dns_refresh_rate, Duration::from_secs(30));
    assert_eq!(d.max_hosts, 64);
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::V4Only);

    // Envoy's defaults when only the name is given.
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.dns_cache_config = Some(DnsCacheConfig {
            name: "c".into(),
            ..DnsCacheConfig::default()
        });
    }
    let d = parse_listener(&listener_with(&p))
        .listeners
        .remove(0)
        .dns_cache
        .expect("dns_cache");
    assert_eq!(d.dns_refresh_rate, Duration::from_secs(60));
    assert_eq!(d.max_hosts, 1024);
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::Auto);
}

//! Envoy xDS resources and responses for the scripted management server ([`crate::xds`]),
//! built as envoy-types protos: what a control plane driving Envoy's `redis_proxy` sends
//! (shapes from the Envoy protos: `redis_proxy.proto`, `redis_cluster.proto`, `cluster.proto`,
//! `endpoint.proto`).
//!
//! Builders never validate: tests also need resources a correct client must reject.

use std::collections::HashMap;
use std::net::SocketAddr;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiVersion, ConfigSource, Metadata,
    SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::prefix_routes::Route;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::{
    ConnPoolSettings, PrefixRoutes,
};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    RedisProxy,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Any, Duration, Struct, Value};

/// LDS type URL (xDS v3).
pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// CDS type URL (xDS v3).
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// EDS type URL (xDS v3).
pub const ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// Envoy's name of the Redis proxy network filter.
pub const REDIS_PROXY_FILTER: &str = "envoy.filters.network.redis_proxy";

/// Packs a resource into an `Any` with its own type URL.
pub fn any<T: prost::Name + prost::Message>(msg: T) -> Any {
    envoy_types::util::pack_any(msg)
}

fn socket_address(addr: SocketAddr) -> Address {
    Address {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: addr.ip().to_string(),
            port_specifier: Some(PortSpecifier::PortValue(u32::from(addr.port()))),
            ..Default::default()
        })),
    }
}

fn route(prefix: &str, cluster: &str) -> Route {
    Route {
        prefix: prefix.to_string(),
        cluster: cluster.to_string(),
        ..Default::default()
    }
}

/// The `RedisProxy` filter config a listener carries: stat prefix = listener name, op_timeout
/// 1 s, hash tagging on, `routes` as (prefix, cluster), and the catch-all route if any.
pub fn redis_proxy(name: &str, routes: &[(&str, &str)], catch_all: Option<&str>) -> RedisProxy {
    RedisProxy {
        stat_prefix: name.to_string(),
        settings: Some(ConnPoolSettings {
            op_timeout: Some(Duration {
                seconds: 1,
                nanos: 0,
            }),
            enable_hashtagging: true,
            ..Default::default()
        }),
        prefix_routes: Some(PrefixRoutes {
            routes: routes.iter().map(|(p, c)| route(p, c)).collect(),
            case_insensitive: false,
            catch_all_route: catch_all.map(|c| route("", c)),
        }),
        ..Default::default()
    }
}

/// A Listener on `addr` whose one filter chain holds `envoy.filters.network.redis_proxy`
/// with `proxy` as its typed_config.
pub fn listener_with(name: &str, addr: SocketAddr, proxy: RedisProxy) -> Listener {
    Listener {
        name: name.to_string(),
        address: Some(socket_address(addr)),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: REDIS_PROXY_FILTER.to_string(),
                config_type: Some(ConfigType::TypedConfig(any(proxy))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A Redis proxy Listener on `addr` sending every key to `catch_all_cluster`.
pub fn listener(name: &str, addr: SocketAddr, catch_all_cluster: &str) -> Listener {
    listener_with(name, addr, redis_proxy(name, &[], Some(catch_all_cluster)))
}

/// A Redis proxy Listener with prefix `routes` (prefix, cluster) and an optional catch-all.
pub fn listener_routes(
    name: &str,
    addr: SocketAddr,
    routes: &[(&str, &str)],
    catch_all: Option<&str>,
) -> Listener {
    listener_with(name, addr, redis_proxy(name, routes, catch_all))
}

/// A listener that is invalid whatever clusters exist: its catch-all route's `key_formatter`
/// has no `%KEY%` (every key would become the same key), a refusal of the data plane's own.
pub fn bad_listener_over(name: &str, addr: SocketAddr, cluster: &str) -> Listener {
    let mut proxy = redis_proxy(name, &[], Some(cluster));
    if let Some(r) = proxy
        .prefix_routes
        .as_mut()
        .and_then(|p| p.catch_all_route.as_mut())
    {
        r.key_formatter = "no-key-here".to_string();
    }
    listener_with(name, addr, proxy)
}

/// [`bad_listener_over`] on 127.0.0.1:1 over cluster `c1`: invalid whatever clusters exist.
pub fn bad_listener(name: &str) -> Listener {
    bad_listener_over(name, "127.0.0.1:1".parse().expect("literal"), "c1")
}

fn lb_endpoints(addrs: &[SocketAddr]) -> Vec<LocalityLbEndpoints> {
    vec![LocalityLbEndpoints {
        lb_endpoints: addrs
            .iter()
            .map(|a| LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                    address: Some(socket_address(*a)),
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }]
}

/// A ClusterLoadAssignment `name` with one locality holding `addrs`.
pub fn cla(name: &str, addrs: &[SocketAddr]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: lb_endpoints(addrs),
        ..Default::default()
    }
}

/// A ClusterLoadAssignment a conforming client must reject if it validates it: an endpoint with
/// no address at all.
pub fn bad_cla(name: &str) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: vec![LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(Endpoint::default())),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn connect_timeout() -> Option<Duration> {
    Some(Duration {
        seconds: 0,
        nanos: 250_000_000,
    })
}

/// A `type: STATIC`, `lb_policy: RING_HASH` Cluster with its hosts in `load_assignment`.
pub fn static_cluster(name: &str, addrs: &[SocketAddr]) -> Cluster {
    Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        lb_policy: LbPolicy::RingHash as i32,
        connect_timeout: connect_timeout(),
        load_assignment: Some(cla(name, addrs)),
        ..Default::default()
    }
}

/// A `type: EDS`, `lb_policy: RING_HASH` Cluster whose endpoints come over ADS; the EDS
/// resource name is the cluster name (no `service_name`).
pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        lb_policy: LbPolicy::RingHash as i32,
        connect_timeout: connect_timeout(),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ConfigSource {
                resource_api_version: ApiVersion::V3 as i32,
                config_source_specifier: Some(ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

/// [`static_cluster`] padded with about `pad_bytes` of `metadata` (no effect on a Redis proxy,
/// so a client ignores it): for large-response tests.
pub fn padded_cluster(name: &str, addrs: &[SocketAddr], pad_bytes: usize) -> Cluster {
    let mut c = static_cluster(name, addrs);
    let pad = Struct {
        fields: [(
            "pad".to_string(),
            Value {
                kind: Some(Kind::StringValue("x".repeat(pad_bytes))),
            },
        )]
        .into_iter()
        .collect(),
    };
    c.metadata = Some(Metadata {
        filter_metadata: HashMap::from([("respite.tests".to_string(), pad)]),
        ..Default::default()
    });
    c
}

/// A SotW response.
pub fn sotw(type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.to_string(),
        resources,
        type_url: type_url.to_string(),
        nonce: nonce.to_string(),
        ..Default::default()
    }
}

/// A Delta response: `resources` as (name, version, resource), each wrapped in a discovery
/// `Resource`; `removed` names in `removed_resources`.
pub fn delta_resp(
    type_url: &str,
    system_version: &str,
    nonce: &str,
    resources: Vec<(&str, &str, Any)>,
    removed: &[&str],
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: system_version.to_string(),
        resources: resources
            .into_iter()
            .map(|(name, version, resource)| Resource {
                name: name.to_string(),
                version: version.to_string(),
                resource: Some(resource),
                ..Default::default()
            })
            .collect(),
        type_url: type_url.to_string(),
        removed_resources: removed.iter().map(|s| s.to_string()).collect(),
        nonce: nonce.to_string(),
        ..Default::default()
    }
}

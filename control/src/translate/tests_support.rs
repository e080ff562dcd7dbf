//! Builders of Envoy protos for the translation tests, and a render-and-parse helper that checks
//! output the way the control process will: through the data plane's own parser.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{
    Address, DataSource, RuntimeFractionalPercent, SocketAddress, address, data_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisProxy;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::{
    ConnPoolSettings, PrefixRoutes, prefix_routes::Route,
};
use envoy_types::pb::envoy::r#type::v3::FractionalPercent;
use envoy_types::pb::google::protobuf::{Any, Duration};
use prost::{Message, Name};
use respite::config::Config;
use respite::config::raw::RawHost;

use super::{ClusterDraft, HostSource, ListenerDraft};

pub fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

pub fn dur(seconds: i64, nanos: i32) -> Duration {
    Duration { seconds, nanos }
}

pub fn ms(n: i64) -> Duration {
    dur(n / 1000, ((n % 1000) * 1_000_000) as i32)
}

pub fn sock(host: &str, port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: host.into(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

pub fn inline(s: &str) -> DataSource {
    DataSource {
        specifier: Some(data_source::Specifier::InlineString(s.into())),
        ..Default::default()
    }
}

pub fn fraction(numerator: u32, denominator: i32) -> RuntimeFractionalPercent {
    RuntimeFractionalPercent {
        default_value: Some(FractionalPercent {
            numerator,
            denominator,
        }),
        runtime_key: "ignored.key".into(),
    }
}

pub fn route(prefix: &str, cluster: &str) -> Route {
    Route {
        prefix: prefix.into(),
        cluster: cluster.into(),
        ..Default::default()
    }
}

/// A minimal valid RedisProxy: stat_prefix "redis", op_timeout 1s, catch-all to `cache`.
pub fn proxy() -> RedisProxy {
    RedisProxy {
        stat_prefix: "redis".into(),
        settings: Some(ConnPoolSettings {
            op_timeout: Some(dur(1, 0)),
            ..Default::default()
        }),
        prefix_routes: Some(PrefixRoutes {
            catch_all_route: Some(route("", "cache")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn redis_filter(p: &RedisProxy) -> Filter {
    Filter {
        name: "envoy.filters.network.redis_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(any(p))),
    }
}

/// Listener `redis` on 127.0.0.1:6379 with one chain holding the redis_proxy filter `p`.
pub fn listener_with(p: &RedisProxy) -> Listener {
    Listener {
        name: "redis".into(),
        address: Some(sock("127.0.0.1", 6379)),
        filter_chains: vec![FilterChain {
            filters: vec![redis_filter(p)],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn lb_endpoint(host: &str, port: u32) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(sock(host, port)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub fn assignment(name: &str, eps: Vec<LbEndpoint>) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: eps,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A STATIC RING_HASH cluster with the given ports on 127.0.0.1.
pub fn static_cluster(name: &str, ports: &[u32]) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        lb_policy: envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy::RingHash as i32,
        load_assignment: Some(assignment(
            name,
            ports.iter().map(|p| lb_endpoint("127.0.0.1", *p)).collect(),
        )),
        ..Default::default()
    }
}

/// Translates `l`, renders it with one plain static cluster per cluster it names (or the given
/// drafts), and parses the result with the data plane's parser.
pub fn parse_listener(l: &Listener) -> Config {
    let d = match super::listener(l) {
        Ok(d) => d,
        Err(e) => panic!("listener rejected: {e}"),
    };
    let clusters: Vec<ClusterDraft> = d
        .clusters
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let port = 7000 + u32::try_from(i).unwrap_or(0);
            match super::cluster(&static_cluster(name, &[port])) {
                Ok(c) => c,
                Err(e) => panic!("cluster rejected: {e}"),
            }
        })
        .collect();
    parse(&[&d], &clusters)
}

/// Renders listeners and clusters (inline hosts, or no hosts for EDS) and parses the text.
pub fn parse(listeners: &[&ListenerDraft], clusters: &[ClusterDraft]) -> Config {
    let hosts: Vec<Vec<RawHost>> = clusters
        .iter()
        .map(|c| match &c.hosts {
            HostSource::Inline(h) => h.clone(),
            HostSource::Eds(_) => Vec::new(),
        })
        .collect();
    let cs: Vec<(&ClusterDraft, &[RawHost])> = clusters
        .iter()
        .zip(&hosts)
        .map(|(c, h)| (c, h.as_slice()))
        .collect();
    let text = super::render(listeners, &cs);
    match respite::config::parse_pushed(&text, "test") {
        Ok(c) => c,
        Err(e) => panic!("data plane rejected the rendered config: {e}\n{text}"),
    }
}

/// Translates one cluster and parses it alone (no listeners).
pub fn parse_cluster(c: &Cluster) -> respite::config::ClusterConfig {
    let d = match super::cluster(c) {
        Ok(d) => d,
        Err(e) => panic!("cluster rejected: {e}"),
    };
    let mut cfg = parse(&[], &[d]);
    cfg.clusters.remove(0)
}

/// The error of a listener that must be rejected.
pub fn listener_err(l: &Listener) -> String {
    match super::listener(l) {
        Ok(d) => panic!("listener accepted: {:?}", d.listener),
        Err(e) => e,
    }
}

/// The error of a cluster that must be rejected.
pub fn cluster_err(c: &Cluster) -> String {
    match super::cluster(c) {
        Ok(d) => panic!("cluster accepted: {:?}", d.cluster),
        Err(e) => e,
    }
}

/// Asserts `err` contains every fragment.
pub fn assert_mentions(err: &str, fragments: &[&str]) {
    for f in fragments {
        assert!(err.contains(f), "error {err:?} does not mention {f:?}");
    }
}

//! Applier unit tests: the cache, warming, per-resource rejection and cascades, validated by the
//! data plane's own parser (dry run: no data plane socket).

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress, address, socket_address};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    RedisProxy, redis_proxy,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Name;

use super::{Applier, Options};
use crate::xds::status::Status;
use crate::xds::{Applier as _, CLUSTER_TYPE, ENDPOINT_TYPE, Interest, LISTENER_TYPE, Update};

fn any<M: Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

fn addr(port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: "127.0.0.1".into(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

fn listener(name: &str, port: u32, catch_all: &str) -> Listener {
    let proxy = RedisProxy {
        stat_prefix: name.into(),
        settings: Some(redis_proxy::ConnPoolSettings {
            op_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        }),
        prefix_routes: Some(redis_proxy::PrefixRoutes {
            catch_all_route: Some(redis_proxy::prefix_routes::Route {
                cluster: catch_all.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Listener {
        name: name.into(),
        address: Some(addr(port)),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.redis_proxy".into(),
                config_type: Some(filter::ConfigType::TypedConfig(any(&proxy))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn cla(name: &str, ports: &[u32]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: ports
                .iter()
                .map(|p| LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(addr(*p)),
                        ..Default::default()
                    })),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn static_cluster(name: &str, ports: &[u32]) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Static as i32,
        )),
        lb_policy: cluster::LbPolicy::RingHash as i32,
        load_assignment: Some(cla(name, ports)),
        ..Default::default()
    }
}

fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        lb_policy: cluster::LbPolicy::RingHash as i32,
        eds_cluster_config: Some(cluster::EdsClusterConfig::default()),
        ..Default::default()
    }
}

fn update(type_url: &str, resources: Vec<(&str, Any)>, removed: &[&str]) -> Update {
    Update {
        type_url: type_url.into(),
        version: "1".into(),
        resources: resources
            .into_iter()
            .map(|(n, a)| (n.to_string(), a))
            .collect(),
        removed: removed.iter().map(|s| s.to_string()).collect(),
    }
}

fn applier(warming: Duration) -> Applier {
    Applier::new(
        Options {
            dataplane: None,
            listener_names: Vec::new(),
            warming_timeout: warming,
            before_push: None,
            local_zone: None,
        },
        Status::default(),
    )
}

/// (listener name, its catch-all cluster) of the applied config.
fn applied_listeners(a: &Applier) -> Vec<(String, String)> {
    a.applied()
        .map(|c| {
            c.listeners
                .iter()
                .map(|l| {
                    let ca = l
                        .prefix_routes
                        .catch_all_route
                        .as_ref()
                        .map(|r| r.cluster.clone())
                        .unwrap_or_default();
                    (l.name.clone(), ca)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn applied_hosts(a: &Applier, cluster: &str) -> Option<Vec<String>> {
    a.applied().and_then(|c| {
        c.clusters
            .iter()
            .find(|c| c.name == cluster)
            .map(|c| c.hosts.iter().map(|h| h.address.to_string()).collect())
    })
}

/// A listener `s` on cluster `c`: nothing is applied before some listener can serve.
fn serve_something(a: &mut Applier) {
    a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    a.apply(update(
        LISTENER_TYPE,
        vec![("s", any(&listener("s", 7009, "c")))],
        &[],
    ));
    assert_eq!(applied_listeners(a), vec![("s".into(), "c".into())]);
}

#[test]
fn nothing_is_applied_before_a_listener_can_serve() {
    let mut a = applier(Duration::from_secs(60));
    a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    assert!(a.applied().is_none(), "clusters alone pushed");
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "d")))],
        &[],
    ));
    assert!(
        a.applied().is_none(),
        "an empty config pushed while l warms"
    );
}

#[test]
fn a_listener_waits_for_its_cluster_then_applies() {
    let mut a = applier(Duration::from_secs(60));
    let v = a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "c")))],
        &[],
    ));
    assert!(v.is_ack(), "{v:?}");
    assert!(applied_listeners(&a).is_empty(), "warming listener applied");
    let dump = a.config_dump();
    assert_eq!(dump["listeners"][0]["waiting_for"][0], "c", "{dump}");
    let v = a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    assert!(v.is_ack(), "{v:?}");
    assert_eq!(applied_listeners(&a), vec![("l".into(), "c".into())]);
}

#[test]
fn a_changed_listener_keeps_serving_its_old_version_while_the_new_one_warms() {
    let mut a = applier(Duration::from_secs(60));
    a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "c")))],
        &[],
    ));
    assert_eq!(applied_listeners(&a), vec![("l".into(), "c".into())]);
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "d")))],
        &[],
    ));
    assert_eq!(applied_listeners(&a), vec![("l".into(), "c".into())]);
    a.apply(update(
        CLUSTER_TYPE,
        vec![
            ("c", any(&static_cluster("c", &[7100]))),
            ("d", any(&static_cluster("d", &[7200]))),
        ],
        &[],
    ));
    assert_eq!(applied_listeners(&a), vec![("l".into(), "d".into())]);
}

#[test]
fn warming_is_bounded() {
    let mut a = applier(Duration::from_millis(200));
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "nowhere")))],
        &[],
    ));
    assert!(applied_listeners(&a).is_empty());
    std::thread::sleep(Duration::from_millis(300));
    a.tick();
    // Applied, its route answering `no upstream host` through an empty cluster.
    assert_eq!(applied_listeners(&a), vec![("l".into(), "nowhere".into())]);
    assert_eq!(applied_hosts(&a, "nowhere"), Some(vec![]));
}

#[test]
fn an_eds_cluster_is_ready_once_its_endpoints_arrive() {
    let mut a = applier(Duration::from_secs(60));
    a.apply(update(
        CLUSTER_TYPE,
        vec![("e", any(&eds_cluster("e")))],
        &[],
    ));
    assert_eq!(
        a.interest()[2],
        (ENDPOINT_TYPE, Interest::Names(["e".to_string()].into()))
    );
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "e")))],
        &[],
    ));
    assert!(applied_listeners(&a).is_empty(), "applied before EDS");
    a.apply(update(
        ENDPOINT_TYPE,
        vec![("e", any(&cla("e", &[7300, 7301])))],
        &[],
    ));
    assert_eq!(applied_listeners(&a), vec![("l".into(), "e".into())]);
    assert_eq!(
        applied_hosts(&a, "e"),
        Some(vec!["127.0.0.1:7300".into(), "127.0.0.1:7301".into()])
    );
}

#[test]
fn a_bad_resource_is_rejected_by_name_and_the_others_apply() {
    let mut a = applier(Duration::from_secs(60));
    a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    a.apply(update(
        LISTENER_TYPE,
        vec![("l1", any(&listener("l1", 7001, "c")))],
        &[],
    ));
    // l2 binds the same address as l1: each alone is fine, together invalid.
    let mut wrong_type = any(&listener("l3", 7003, "c"));
    wrong_type.type_url = CLUSTER_TYPE.into();
    let v = a.apply(update(
        LISTENER_TYPE,
        vec![
            ("l1", any(&listener("l1", 7001, "c"))),
            ("l2", any(&listener("l2", 7001, "c"))),
            ("l3", wrong_type),
            ("l4", any(&listener("l4", 7004, "c"))),
        ],
        &[],
    ));
    let names: Vec<&str> = v.rejected.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["l3", "l2"], "{v:?}");
    assert!(
        v.rejected[1].1.contains("duplicate listener address"),
        "{v:?}"
    );
    assert_eq!(
        applied_listeners(&a),
        vec![("l1".into(), "c".into()), ("l4".into(), "c".into())]
    );
}

#[test]
fn deleting_a_cluster_drops_its_endpoints_and_its_eds_interest() {
    let mut a = applier(Duration::from_secs(60));
    serve_something(&mut a);
    a.apply(update(
        CLUSTER_TYPE,
        vec![("e", any(&eds_cluster("e")))],
        &[],
    ));
    a.apply(update(
        ENDPOINT_TYPE,
        vec![("e", any(&cla("e", &[7300])))],
        &[],
    ));
    assert_eq!(applied_hosts(&a, "e"), Some(vec!["127.0.0.1:7300".into()]));
    a.apply(update(CLUSTER_TYPE, vec![], &["e"]));
    assert_eq!(
        a.interest()[2],
        (ENDPOINT_TYPE, Interest::Names(Default::default()))
    );
    assert_eq!(applied_hosts(&a, "e"), None);
    // Back again: it waits for its endpoints anew (nothing assumed cached).
    a.apply(update(
        CLUSTER_TYPE,
        vec![("e", any(&eds_cluster("e")))],
        &[],
    ));
    assert_eq!(applied_hosts(&a, "e"), None);
}

#[test]
fn a_deleted_cluster_still_routed_to_answers_no_upstream_host() {
    let mut a = applier(Duration::from_secs(60));
    a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&static_cluster("c", &[7100])))],
        &[],
    ));
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "c")))],
        &[],
    ));
    let v = a.apply(update(CLUSTER_TYPE, vec![], &["c"]));
    assert!(v.is_ack(), "{v:?}");
    assert_eq!(applied_listeners(&a), vec![("l".into(), "c".into())]);
    assert_eq!(applied_hosts(&a, "c"), Some(vec![]));
}

#[test]
fn named_mode_subscribes_to_the_clusters_of_its_listeners() {
    let mut a = Applier::new(
        Options {
            dataplane: None,
            listener_names: vec!["l".into()],
            warming_timeout: Duration::from_secs(60),
            before_push: None,
            local_zone: None,
        },
        Status::default(),
    );
    assert_eq!(
        a.interest()[0],
        (LISTENER_TYPE, Interest::Names(["l".to_string()].into()))
    );
    assert_eq!(
        a.interest()[1],
        (CLUSTER_TYPE, Interest::Names(Default::default()))
    );
    a.apply(update(
        LISTENER_TYPE,
        vec![("l", any(&listener("l", 7001, "c")))],
        &[],
    ));
    assert_eq!(
        a.interest()[1],
        (CLUSTER_TYPE, Interest::Names(["c".to_string()].into()))
    );
}

/// The xDS path of the TLS translation: inline certificates pushed again give the same files
/// (the same config), and an SDS context is NACKed by name while the rest applies.
#[test]
fn tls_resources_apply_and_sds_is_rejected_by_name() {
    use envoy_types::pb::envoy::config::core::v3::{
        DataSource, TransportSocket, data_source, transport_socket,
    };
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, TlsCertificate, UpstreamTlsContext,
    };
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let inline = |s: String| DataSource {
        specifier: Some(data_source::Specifier::InlineString(s)),
        ..Default::default()
    };
    let socket = |a: Any| TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(a)),
    };
    let down = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificates: vec![TlsCertificate {
                certificate_chain: Some(inline(ck.cert.pem())),
                private_key: Some(inline(ck.signing_key.serialize_pem())),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut c = static_cluster("c", &[7100]);
    c.transport_socket = Some(socket(any(&UpstreamTlsContext {
        sni: "localhost".into(),
        ..Default::default()
    })));
    let mut sds = static_cluster("sds", &[7101]);
    sds.transport_socket = Some(socket(any(&UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                name: "client".into(),
                sds_config: None,
            }],
            ..Default::default()
        }),
        ..Default::default()
    })));
    let mut l = listener("s", 7009, "c");
    l.filter_chains[0].transport_socket = Some(socket(any(&down)));

    let mut a = applier(Duration::from_secs(60));
    let v = a.apply(update(
        CLUSTER_TYPE,
        vec![("c", any(&c)), ("sds", any(&sds))],
        &[],
    ));
    assert_eq!(v.rejected.len(), 1, "{v:?}");
    assert_eq!(v.rejected[0].0, "sds");
    assert!(
        v.rejected[0].1.contains(
            "transport_socket.typed_config.common_tls_context.\
             tls_certificate_sds_secret_configs: SDS is not supported by respite"
        ),
        "{v:?}"
    );
    let v = a.apply(update(LISTENER_TYPE, vec![("s", any(&l))], &[]));
    assert!(v.rejected.is_empty(), "{v:?}");
    let first = a.applied().expect("applied");
    assert!(first.listeners[0].tls.is_some());
    let upstream = first.clusters[0].tls.as_ref().expect("[clusters.tls]");
    assert!(upstream.insecure_skip_verify);

    let v = a.apply(update(LISTENER_TYPE, vec![("s", any(&l))], &[]));
    assert!(v.rejected.is_empty(), "{v:?}");
    assert_eq!(a.applied().expect("applied").listeners, first.listeners);
}

use std::path::PathBuf;

use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::core::v3::{
    Address, address, health_check::HealthChecker,
    health_check::custom_health_check::ConfigType as HcConfig, socket_address::PortSpecifier,
};
use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
use envoy_types::pb::envoy::extensions::clusters::redis::v3::RedisClusterConfig;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    RedisProtocolOptions, RedisProxy, redis_proxy::prefix_routes::Route,
};
use envoy_types::pb::envoy::extensions::health_checkers::redis::v3::Redis;
use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
use envoy_types::pb::google::protobuf::{Any, Duration, UInt32Value, UInt64Value};
use prost::Message;

use super::*;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/envoy.yaml")
}

fn dur(seconds: i64, nanos: i32) -> Option<Duration> {
    Some(Duration { seconds, nanos })
}

fn host_port(a: &Option<Address>) -> (String, u32) {
    match a.as_ref().and_then(|a| a.address.as_ref()) {
        Some(address::Address::SocketAddress(sa)) => match sa.port_specifier {
            Some(PortSpecifier::PortValue(p)) => (sa.address.clone(), p),
            ref other => panic!("port {other:?}"),
        },
        other => panic!("address {other:?}"),
    }
}

fn redis_proxy(sr: &StaticResources) -> RedisProxy {
    let f = &sr.listeners[0].filter_chains[0].filters[0];
    assert_eq!(f.name, "envoy.filters.network.redis_proxy");
    match &f.config_type {
        Some(ConfigType::TypedConfig(any)) => {
            assert_eq!(
                any.type_url,
                "type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy"
            );
            RedisProxy::decode(any.value.as_slice()).unwrap()
        }
        other => panic!("{other:?}"),
    }
}

fn route(prefix: &str, cluster: &str) -> Route {
    Route {
        prefix: prefix.into(),
        cluster: cluster.into(),
        ..Default::default()
    }
}

#[test]
fn example_listener_decodes_field_by_field() {
    let sr = load(&example()).unwrap();
    assert_eq!(sr.listeners.len(), 1);
    let l = &sr.listeners[0];
    assert_eq!(l.name, "redis_listener");
    assert_eq!(host_port(&l.address), ("127.0.0.1".into(), 6390));
    assert_eq!(l.filter_chains.len(), 1);
    assert_eq!(l.filter_chains[0].filters.len(), 1);

    let rp = redis_proxy(&sr);
    assert_eq!(rp.stat_prefix, "egress_redis");
    let s = rp.settings.clone().unwrap();
    assert_eq!(s.op_timeout, dur(5, 0));
    assert!(s.enable_hashtagging);
    assert!(s.enable_redirection);
    assert_eq!(s.buffer_flush_timeout, dur(0, 3_000_000));
    assert_eq!(s.max_buffer_size_before_flush, 0);
    let pr = rp.prefix_routes.unwrap();
    assert!(!pr.case_insensitive);
    assert_eq!(pr.routes.len(), 2);
    assert_eq!(pr.routes[0], route("cache:", "redis_cluster"));
    let r1 = &pr.routes[1];
    assert_eq!(r1.prefix, "cache:user:");
    assert!(r1.remove_prefix);
    assert_eq!(r1.cluster, "redis_ring");
    assert_eq!(r1.key_formatter, "%KEY%");
    assert_eq!(r1.request_mirror_policy.len(), 1);
    let m = &r1.request_mirror_policy[0];
    assert_eq!(m.cluster, "redis_shadow");
    assert!(m.exclude_read_commands);
    let rf = m.runtime_fraction.clone().unwrap();
    assert_eq!(rf.runtime_key, "redis.mirror.user");
    let dv = rf.default_value.unwrap();
    assert_eq!(dv.numerator, 100);
    assert_eq!(dv.denominator, DenominatorType::Hundred as i32);
    assert_eq!(pr.catch_all_route, Some(route("", "redis_ring")));
}

#[test]
fn example_clusters_decode_field_by_field() {
    let sr = load(&example()).unwrap();
    let names: Vec<&str> = sr.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["redis_ring", "redis_shadow", "redis_cluster"]);

    let ring = &sr.clusters[0];
    assert_eq!(
        ring.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32))
    );
    assert_eq!(ring.lb_policy, LbPolicy::RingHash as i32);
    assert_eq!(ring.connect_timeout, dur(1, 0));
    assert_eq!(ring.lb_config, None);
    let la = ring.load_assignment.as_ref().unwrap();
    assert_eq!(la.cluster_name, "redis_ring");
    let hosts: Vec<(String, u32)> = la.endpoints[0]
        .lb_endpoints
        .iter()
        .map(|e| match &e.host_identifier {
            Some(
                envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier::Endpoint(
                    ep,
                ),
            ) => host_port(&ep.address),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        hosts,
        [
            ("127.0.0.1".to_string(), 6379),
            ("127.0.0.1".to_string(), 6380)
        ]
    );
    assert_eq!(ring.health_checks.len(), 1);
    let hc = &ring.health_checks[0];
    assert_eq!(hc.timeout, dur(1, 0));
    assert_eq!(hc.interval, dur(5, 0));
    assert_eq!(hc.unhealthy_threshold, Some(UInt32Value { value: 2 }));
    assert_eq!(hc.healthy_threshold, Some(UInt32Value { value: 1 }));
    match &hc.health_checker {
        Some(HealthChecker::CustomHealthCheck(c)) => {
            assert_eq!(c.name, "envoy.health_checkers.redis");
            match &c.config_type {
                Some(HcConfig::TypedConfig(any)) => {
                    assert!(any.type_url.ends_with("health_checkers.redis.v3.Redis"));
                    assert_eq!(
                        Redis::decode(any.value.as_slice()).unwrap(),
                        Redis::default()
                    );
                }
                None => panic!("no typed_config"),
            }
        }
        other => panic!("{other:?}"),
    }
    let od = ring.outlier_detection.as_ref().unwrap();
    assert_eq!(od.consecutive_5xx, Some(UInt32Value { value: 5 }));
    assert_eq!(od.interval, dur(10, 0));
    assert_eq!(od.base_ejection_time, dur(30, 0));
    assert_eq!(od.max_ejection_percent, Some(UInt32Value { value: 50 }));
    assert!(ring.typed_extension_protocol_options.is_empty());

    let rc = &sr.clusters[2];
    assert_eq!(rc.lb_policy, LbPolicy::ClusterProvided as i32);
    match &rc.cluster_discovery_type {
        Some(ClusterDiscoveryType::ClusterType(t)) => {
            assert_eq!(t.name, "envoy.clusters.redis");
            let any = t.typed_config.as_ref().unwrap();
            let cfg = RedisClusterConfig::decode(any.value.as_slice()).unwrap();
            assert_eq!(cfg.cluster_refresh_rate, dur(5, 0));
            assert_eq!(cfg.cluster_refresh_timeout, dur(3, 0));
            assert_eq!(cfg.redirect_refresh_interval, dur(0, 50_000_000));
            assert_eq!(
                cfg.redirect_refresh_threshold,
                Some(UInt32Value { value: 10 })
            );
        }
        other => panic!("{other:?}"),
    }
    let seeds = &rc.load_assignment.as_ref().unwrap().endpoints[0].lb_endpoints;
    assert_eq!(seeds.len(), 2);
}

/// The same bootstrap as JSON, with lowerCamelCase names and numbers as strings: equal protos.
#[test]
fn json_and_yaml_give_equal_protos() {
    let yaml = std::fs::read_to_string(example()).unwrap();
    let from_yaml = parse(&yaml, true).unwrap();
    let (mut v, _) = yaml::parse(&yaml).unwrap();
    let from_json = parse(&serde_json::to_string_pretty(&v).unwrap(), false).unwrap();
    assert_eq!(from_yaml, from_json);

    // Rename a few fields to their JSON names: still equal.
    let l = &mut v["static_resources"]["listeners"][0];
    let f = &mut l["filter_chains"][0]["filters"][0]["typed_config"];
    let sp = f.as_object_mut().unwrap().remove("stat_prefix").unwrap();
    f["statPrefix"] = sp;
    let c = &mut v["static_resources"]["clusters"][0];
    let lb = c.as_object_mut().unwrap().remove("lb_policy").unwrap();
    c["lbPolicy"] = lb;
    c["outlier_detection"]["consecutive_5xx"] = serde_json::json!("5");
    let camel = parse(&v.to_string(), false).unwrap();
    assert_eq!(camel, from_yaml);
    assert_eq!(redis_proxy(&camel).stat_prefix, "egress_redis");
}

fn err(yaml: &str) -> String {
    parse(yaml, true).unwrap_err()
}

const CLUSTERS: &str = "static_resources:
  clusters:
  - name: a
    type: STATIC
  - name: b
    lb_polcy: RING_HASH
";

#[test]
fn unknown_field_names_path_and_line() {
    assert_eq!(
        err(CLUSTERS),
        "static_resources.clusters[1].lb_polcy: unknown field (line 6)"
    );
    // JSON: the path, no line.
    let e = parse(
        r#"{"static_resources": {"clusters": [{"name": "a", "lb_polcy": "X"}]}}"#,
        false,
    )
    .unwrap_err();
    assert_eq!(e, "static_resources.clusters[0].lb_polcy: unknown field");
}

#[test]
fn bad_enum_and_bad_duration_name_the_field() {
    let e = err("static_resources:\n  clusters:\n  - name: a\n    lb_policy: FOO\n");
    assert_eq!(
        e,
        "static_resources.clusters[0].lb_policy: unknown enum value \"FOO\" (line 4)"
    );
    let e = err("static_resources:\n  clusters:\n  - name: a\n    connect_timeout: 5\n");
    assert!(
        e.starts_with("static_resources.clusters[0].connect_timeout: expected a duration"),
        "{e}"
    );
    assert!(e.ends_with("(line 4)"), "{e}");
    let e = err("static_resources:\n  clusters:\n  - name: a\n    connect_timeout: 5ms\n");
    assert!(e.contains("bad duration \"5ms\""), "{e}");
}

const LISTENER_ANY: &str = "static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: x
";

#[test]
fn unmapped_type_url_is_named() {
    let e = err(LISTENER_ANY);
    assert!(
        e.starts_with(
            "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.@type: \
             unsupported type \"type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\""
        ),
        "{e}"
    );
    assert!(e.ends_with("(line 8)"), "{e}");
    let e = err(&LISTENER_ANY.replace(
        "\"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\n",
        "",
    ));
    assert!(e.contains("missing \"@type\""), "{e}");
}

#[test]
fn unknown_field_inside_an_any_names_its_path() {
    let y = "static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: x
          settings: { op_timeout: 1s, op_timeot: 2s }
";
    assert_eq!(
        err(y),
        "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.settings.op_timeot: \
         unknown field (line 10)"
    );
}

#[test]
fn dynamic_resources_is_refused_and_envoy_sections_ignored() {
    let e = err("dynamic_resources:\n  ads_config: {}\nstatic_resources: {}\n");
    assert_eq!(
        e,
        "dynamic_resources.ads_config: xDS over gRPC: use respite-control --bootstrap (this \
         import reads dynamic_resources only from files) (line 2)"
    );
    let sr = parse(
        "admin: {address: {socket_address: {address: 0.0.0.0, port_value: 9901}}}\n\
         node: {id: x}\nlayered_runtime: {}\nstats_sinks: []\noverload_manager: {}\n\
         static_resources: {}\n",
        true,
    )
    .unwrap();
    assert_eq!(sr, StaticResources::default());
    assert_eq!(
        err("static_resource: {}\n"),
        "static_resource: unknown field (line 1)"
    );
    assert_eq!(err("admin: {}\n"), "no static_resources");
}

#[test]
fn yaml_syntax_error_names_the_line() {
    let e = err("static_resources:\n  clusters:\n  - name: [a\n");
    assert!(e.contains("line"), "{e}");
    let e = load(std::path::Path::new("/nonexistent/envoy.yaml")).unwrap_err();
    assert!(e.starts_with("/nonexistent/envoy.yaml: "), "{e}");
}

#[test]
fn oneof_members_are_exclusive() {
    let y = "static_resources:
  clusters:
  - name: a
    type: STATIC
    cluster_type: { name: envoy.clusters.redis }
";
    assert_eq!(
        err(y),
        "static_resources.clusters[0]: type and cluster_type are set, but only one of them may be (line 3)"
    );
}

#[test]
fn protocol_options_and_data_sources_decode() {
    let y = "static_resources:
  clusters:
  - name: a
    typed_extension_protocol_options:
      envoy.filters.network.redis_proxy:
        \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_password: { inline_string: s3cret }
        auth_username: { environment_variable: REDIS_USER }
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          downstream_auth_passwords: [{ inline_bytes: aGVsbG8= }, { filename: /etc/pw }]
          faults: [{ fault_type: ERROR, fault_enabled: { default_value: { numerator: 10 } }, commands: [GET] }]
          custom_commands: [bf.add]
          settings: { read_policy: PREFER_REPLICA, max_upstream_unknown_connections: 3 }
";
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    let sr = parse(y, true).unwrap();
    let any: &Any =
        &sr.clusters[0].typed_extension_protocol_options["envoy.filters.network.redis_proxy"];
    let po = RedisProtocolOptions::decode(any.value.as_slice()).unwrap();
    assert_eq!(
        po.auth_password.unwrap().specifier,
        Some(Specifier::InlineString("s3cret".into()))
    );
    assert_eq!(
        po.auth_username.unwrap().specifier,
        Some(Specifier::EnvironmentVariable("REDIS_USER".into()))
    );
    let rp = redis_proxy(&sr);
    let pw: Vec<_> = rp
        .downstream_auth_passwords
        .iter()
        .map(|d| d.specifier.clone())
        .collect();
    assert_eq!(
        pw,
        [
            Some(Specifier::InlineBytes(b"hello".to_vec())),
            Some(Specifier::Filename("/etc/pw".into()))
        ]
    );
    assert_eq!(rp.faults.len(), 1);
    assert_eq!(rp.faults[0].fault_type, 1);
    assert_eq!(rp.faults[0].commands, ["GET"]);
    assert_eq!(
        rp.faults[0]
            .fault_enabled
            .clone()
            .unwrap()
            .default_value
            .unwrap()
            .numerator,
        10
    );
    assert_eq!(rp.custom_commands, ["bf.add"]);
    let s = rp.settings.unwrap();
    assert_eq!(s.read_policy, 3);
    assert_eq!(
        s.max_upstream_unknown_connections,
        Some(UInt32Value { value: 3 })
    );
}

#[test]
fn typed_struct_is_unwrapped_into_its_message() {
    let y = "static_resources:
  clusters:
  - name: a
    cluster_type:
      name: envoy.clusters.redis
      typed_config:
        \"@type\": type.googleapis.com/xds.type.v3.TypedStruct
        type_url: type.googleapis.com/envoy.extensions.clusters.redis.v3.RedisClusterConfig
        value: { cluster_refresh_rate: 2s }
";
    let sr = parse(y, true).unwrap();
    match &sr.clusters[0].cluster_discovery_type {
        Some(ClusterDiscoveryType::ClusterType(t)) => {
            let any = t.typed_config.as_ref().unwrap();
            assert!(any.type_url.ends_with("RedisClusterConfig"));
            let cfg = RedisClusterConfig::decode(any.value.as_slice()).unwrap();
            assert_eq!(cfg.cluster_refresh_rate, dur(2, 0));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lb_configs_and_keepalive_decode() {
    let y = "static_resources:
  clusters:
  - name: a
    lb_policy: RING_HASH
    ring_hash_lb_config: { minimum_ring_size: 1024, maximumRingSize: \"8388608\", hash_function: MURMUR_HASH_2 }
    upstream_connection_options: { tcp_keepalive: { keepalive_time: 30, keepalive_probes: 3 } }
    circuit_breakers: { thresholds: [{ priority: HIGH, max_connections: 7 }] }
  - name: b
    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: envoy.load_balancing_policies.maglev
          typed_config:
            \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev
            table_size: 65537
";
    use envoy_types::pb::envoy::config::cluster::v3::cluster::ring_hash_lb_config::HashFunction;
    use envoy_types::pb::envoy::extensions::load_balancing_policies::maglev::v3::Maglev;
    let sr = parse(y, true).unwrap();
    match &sr.clusters[0].lb_config {
        Some(LbConfig::RingHashLbConfig(c)) => {
            assert_eq!(c.minimum_ring_size, Some(UInt64Value { value: 1024 }));
            assert_eq!(c.maximum_ring_size, Some(UInt64Value { value: 8388608 }));
            assert_eq!(c.hash_function, HashFunction::MurmurHash2 as i32);
        }
        other => panic!("{other:?}"),
    }
    let ka = sr.clusters[0]
        .upstream_connection_options
        .unwrap()
        .tcp_keepalive
        .unwrap();
    assert_eq!(ka.keepalive_time, Some(UInt32Value { value: 30 }));
    assert_eq!(ka.keepalive_probes, Some(UInt32Value { value: 3 }));
    assert_eq!(ka.keepalive_interval, None);
    let t = &sr.clusters[0].circuit_breakers.as_ref().unwrap().thresholds[0];
    assert_eq!(t.priority, 1);
    assert_eq!(t.max_connections, Some(UInt32Value { value: 7 }));
    let p = &sr.clusters[1]
        .load_balancing_policy
        .as_ref()
        .unwrap()
        .policies[0];
    let tec = p.typed_extension_config.as_ref().unwrap();
    assert_eq!(tec.name, "envoy.load_balancing_policies.maglev");
    let m = Maglev::decode(tec.typed_config.as_ref().unwrap().value.as_slice()).unwrap();
    assert_eq!(m.table_size, Some(UInt64Value { value: 65537 }));
}

/// A listener and a cluster with TLS transport sockets, `files` = (certificate, key, CA).
fn tls_yaml(files: (&str, &str, &str), extra_validation: &str) -> String {
    let (cert, key, ca) = files;
    format!(
        "static_resources:
  listeners:
  - name: redis
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 6390 }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: r
          settings: {{ op_timeout: 1s }}
          prefix_routes: {{ catch_all_route: {{ cluster: cache }} }}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: true
          common_tls_context:
            alpn_protocols: [redis]
            tls_params: {{ tls_minimum_protocol_version: TLSv1_2 }}
            tls_certificates:
            - certificate_chain: {{ filename: {cert} }}
              private_key: {{ filename: {key} }}
            validation_context:
              trusted_ca: {{ filename: {ca} }}
{extra_validation}
  clusters:
  - name: cache
    type: STATIC
    load_assignment:
      cluster_name: cache
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 7000 }} }} }}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          tls_certificates:
          - certificate_chain: {{ filename: {cert} }}
            private_key: {{ filename: {key} }}
          validationContext: {{ trustedCa: {{ filename: {ca} }} }}
"
    )
}

#[test]
fn tls_transport_sockets_import_and_translate() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let path = |n: &str, text: String| {
        let p = dir.path().join(n);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let cert = path("cert.pem", ck.cert.pem());
    let key = path("key.pem", ck.signing_key.serialize_pem());
    let sr = parse(&tls_yaml((&cert, &key, &cert), ""), true).unwrap();
    let text = crate::translate::static_config(&sr.listeners, &sr.clusters).unwrap();
    let cfg = respite::config::parse_pushed(&text, "t").unwrap();
    let l = cfg.listeners[0].tls.as_ref().unwrap();
    assert_eq!(l.certificate_chain, PathBuf::from(&cert));
    assert_eq!(l.trusted_ca, Some(PathBuf::from(&cert)));
    assert!(l.require_client_certificate);
    let c = cfg.clusters[0].tls.as_ref().unwrap();
    assert_eq!(c.sni.as_deref(), Some("localhost"));
    assert_eq!(c.trusted_ca, Some(PathBuf::from(&cert)));
    assert_eq!(c.private_key, Some(PathBuf::from(&key)));
    assert!(!c.insecure_skip_verify);
}

#[test]
fn tls_sds_and_unmapped_fields_are_refused_by_path() {
    let files = ("/c.pem", "/k.pem", "/ca.pem");
    let v =
        "              match_typed_subject_alt_names: [{ san_type: DNS, matcher: { exact: a } }]";
    assert_eq!(
        err(&tls_yaml(files, v)),
        "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.\
         common_tls_context.validation_context.match_typed_subject_alt_names: not supported by \
         respite (line 26)"
    );
    let sds = tls_yaml(files, "").replace(
        "            tls_certificates:",
        "            tls_certificate_sds_secret_configs: [{ name: cert, sds_config: { ads: {} } }]
            tls_certificates:",
    );
    let e = err(&sds);
    assert!(
        e.starts_with(
            "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.\
             common_tls_context.tls_certificate_sds_secret_configs: SDS is not supported by \
             respite"
        ),
        "{e}"
    );
    let matches = tls_yaml(files, "").replace(
        "    type: STATIC",
        "    type: STATIC\n    transport_socket_matches: [{ name: m }]",
    );
    assert_mentions_all(
        &err(&matches),
        &[
            "static_resources.clusters[0].transport_socket_matches",
            "not supported by respite",
        ],
    );
}

fn assert_mentions_all(e: &str, parts: &[&str]) {
    for p in parts {
        assert!(e.contains(p), "{e:?} does not mention {p:?}");
    }
}

//! Config shapes from Envoy's own redis configs (its `examples/redis/envoy.yaml`, the redis
//! docs, the redis_proxy and redis cluster integration tests), written for these tests: each is
//! imported and translated whole, or refused naming the one unsupported feature.

use super::*;
use crate::translate::static_config;

/// Imports and translates `yaml` (a whole bootstrap): the data-plane TOML.
fn toml(yaml: &str) -> String {
    let sr = parse(yaml, true).unwrap_or_else(|e| panic!("import: {e}"));
    static_config(&sr.listeners, &sr.clusters).unwrap_or_else(|e| panic!("translate: {e}"))
}

/// The import or the translation's error.
fn refusal(yaml: &str) -> String {
    match parse(yaml, true) {
        Err(e) => e,
        Ok(sr) => static_config(&sr.listeners, &sr.clusters).expect_err("must be refused"),
    }
}

const LISTENER: &str = "  listeners:
  - name: redis_listener
    address: {socket_address: {address: 127.0.0.1, port_value: 7100}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: egress_redis
          settings: {op_timeout: 5s}
          prefix_routes: {catch_all_route: {cluster: redis_cluster}}
";

/// A static cluster `redis_cluster` with one host and `extra` (indented cluster fields).
fn with_cluster(extra: &str) -> String {
    format!(
        "static_resources:\n{LISTENER}  clusters:
  - name: redis_cluster
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 7101}}}}}}
{extra}"
    )
}

fn auth_under(key: &str) -> String {
    with_cluster(&format!(
        "    typed_extension_protocol_options:
      {key}:
        \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_password: {{inline_string: s3cret}}
"
    ))
}

#[test]
fn protocol_options_are_found_by_their_type_under_any_key() {
    for key in [
        "envoy.filters.network.redis_proxy",
        "envoy.redis_proxy",
        "envoy.filters.network.redis_prxy",
    ] {
        let t = toml(&auth_under(key));
        assert!(t.contains("auth_password = \"s3cret\""), "{key}: {t}");
    }
}

#[test]
fn protocol_options_wrapped_in_a_typed_struct_or_struct_keep_auth() {
    for ts in ["udpa.type.v1.TypedStruct", "xds.type.v3.TypedStruct"] {
        let t = toml(&with_cluster(&format!(
            "    typed_extension_protocol_options:
      envoy.filters.network.redis_proxy:
        \"@type\": type.googleapis.com/{ts}
        type_url: type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        value: {{auth_username: {{inline_string: app}}, auth_password: {{inline_string: pw}}}}
"
        )));
        assert!(t.contains("auth_password = \"pw\""), "{ts}: {t}");
        assert!(t.contains("auth_username = \"app\""), "{ts}: {t}");
    }
    // A bare Struct names no type: its key says what it is.
    let t = toml(&with_cluster(
        "    typed_extension_protocol_options:
      envoy.redis_proxy:
        \"@type\": type.googleapis.com/google.protobuf.Struct
        value: {auth_password: {inline_string: pw2}}
",
    ));
    assert!(t.contains("auth_password = \"pw2\""), "{t}");
}

#[test]
fn protocol_options_respite_does_not_understand_are_refused_by_key() {
    let e = refusal(&with_cluster(
        "    typed_extension_protocol_options:
      envoy.filters.network.other:
        \"@type\": type.googleapis.com/google.protobuf.Struct
        value: {auth_password: {inline_string: pw}}
",
    ));
    assert!(
        e.contains("typed_extension_protocol_options[\"envoy.filters.network.other\"]")
            && e.contains("not supported by respite"),
        "{e}"
    );
    // Two sets of Redis options (one under the legacy key) are ambiguous.
    let two = auth_under("envoy.redis_proxy").replace(
        "        auth_password: {inline_string: s3cret}\n",
        "        auth_password: {inline_string: s3cret}
      envoy.filters.network.redis_proxy:
        \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_password: {inline_string: other}
",
    );
    assert!(refusal(&two).contains("already given"), "{}", refusal(&two));
}

/// `listeners:`, `filter_chains:`, `filters:` and `request_mirror_policy:` as single objects,
/// as in Envoy's redis cluster integration test; enum names in lower case, as in its docs.
#[test]
fn single_objects_for_lists_and_lower_case_enums() {
    let yaml = "static_resources:
  listeners:
    name: redis_listener
    address: {socket_address: {address: 127.0.0.1, port_value: 7100}}
    filter_chains:
      filters:
        name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: egress_redis
          settings: {op_timeout: 5s}
          prefix_routes:
            routes:
              prefix: \"a:\"
              cluster: redis_cluster
              request_mirror_policy: {cluster: redis_cluster, exclude_read_commands: true}
            catch_all_route: {cluster: redis_cluster}
  clusters:
  - name: redis_cluster
    connect_timeout: 1s
    type: strict_dns
    lb_policy: ring_hash
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
        lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 7101}}}
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 7102}}}
";
    let sr = parse(yaml, true).unwrap();
    assert_eq!(sr.listeners.len(), 1);
    assert_eq!(sr.listeners[0].filter_chains.len(), 1);
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{DiscoveryType, LbPolicy};
    let c = &sr.clusters[0];
    assert_eq!(c.lb_policy, LbPolicy::RingHash as i32);
    assert_eq!(
        c.cluster_discovery_type,
        Some(
            envoy_types::pb::envoy::config::cluster::v3::cluster::ClusterDiscoveryType::Type(
                DiscoveryType::StrictDns as i32
            )
        )
    );
    // The mirror onto the route's own cluster (Envoy accepts it) translates too.
    let t = static_config(&sr.listeners, &sr.clusters).unwrap();
    assert!(t.contains("lb_policy = \"ring_hash\""), "{t}");
    let mirror = t.find("request_mirror_policy").expect("mirror kept");
    assert!(t[mirror..].contains("cluster = \"redis_cluster\""), "{t}");
}

/// Envoy's Redis Cluster integration test: `RedisClusterConfig` in a `Struct`, with
/// `redirect_refresh_interval: 0s` (no minimum gap between triggered refreshes).
#[test]
fn redis_cluster_in_a_struct_with_a_zero_redirect_refresh_interval() {
    let yaml = format!(
        "static_resources:\n{LISTENER}  clusters:
  - name: redis_cluster
    lb_policy: CLUSTER_PROVIDED
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 7101}}}}}}
    cluster_type:
      name: envoy.clusters.redis
      typed_config:
        \"@type\": type.googleapis.com/google.protobuf.Struct
        value:
          cluster_refresh_rate: 1s
          cluster_refresh_timeout: 4s
          redirect_refresh_interval: 0s
          redirect_refresh_threshold: 1
"
    );
    let t = toml(&yaml);
    assert!(t.contains("type = \"redis_cluster\""), "{t}");
    assert!(t.contains("redirect_refresh_interval = \"0s\""), "{t}");
    assert!(t.contains("cluster_refresh_timeout = \"4s\""), "{t}");
    assert!(t.contains("redirect_refresh_threshold = 1"), "{t}");
    // The same config as a TypedStruct: one unwrapping rule for every typed_config.
    let typed = yaml.replace(
        "\"@type\": type.googleapis.com/google.protobuf.Struct\n",
        "\"@type\": type.googleapis.com/xds.type.v3.TypedStruct
        type_url: type.googleapis.com/envoy.extensions.clusters.redis.v3.RedisClusterConfig\n",
    );
    assert!(toml(&typed).contains("redirect_refresh_interval = \"0s\""));
}

#[test]
fn real_envoy_fields_are_not_supported_typos_are_unknown() {
    let e = refusal(&with_cluster(
        "    preconnect_policy: {per_upstream_preconnect_ratio: 1.5}\n",
    ));
    assert!(
        e.contains(
            "static_resources.clusters[0].preconnect_policy: not supported by respite (refused)"
        ),
        "{e}"
    );
    // A oneof member of Envoy's Cluster the import does not map: refused, not "unknown".
    let e = refusal(&with_cluster("    originalDstLbConfig: {}\n"));
    assert!(
        e.contains("originalDstLbConfig: not supported by respite (refused)"),
        "{e}"
    );
    let e = refusal(&with_cluster("    preconect_policy: {}\n"));
    assert!(
        e.contains("static_resources.clusters[0].preconect_policy: unknown field"),
        "{e}"
    );
    // No-effect fields are ignored (and logged), the rest still translates.
    let t = toml(&with_cluster(
        "    track_cluster_stats: {timeout_budgets: true}\n",
    ));
    assert!(t.contains("name = \"redis_cluster\""), "{t}");
}

/// Envoy's `examples/redis/envoy.yaml` (older versions): the v2 filter type is refused naming
/// the v2 API.
#[test]
fn v2_api_is_refused_by_name() {
    let yaml = with_cluster("").replace(
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
        "envoy.config.filter.network.redis_proxy.v2.RedisProxy",
    );
    let e = refusal(&yaml);
    assert!(e.contains("v2 API is not supported by respite"), "{e}");
}

/// Envoy's proto default ROUND_ROBIN and RANDOM over several hosts (Envoy's integration-test
/// configs and its docs' upstream-auth example omit `lb_policy`): the data plane's
/// `round_robin` and `random`; weights and LEAST_REQUEST with its settings carried over.
#[test]
fn non_hashing_policies_over_several_hosts() {
    let two_hosts = |extra: &str, second: &str| {
        with_cluster(extra).replace(
            "        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 7101}}}\n",
            &format!(
                "        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 7101}}}}}}\n        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 7102}}}}}}{second}\n"
            ),
        )
    };
    let t = toml(&two_hosts("", ""));
    assert!(t.contains("lb_policy = \"round_robin\""), "{t}");
    let t = toml(&two_hosts("    lb_policy: random\n", ""));
    assert!(t.contains("lb_policy = \"random\""), "{t}");
    let t = toml(&two_hosts(
        "    lb_policy: ROUND_ROBIN\n",
        "\n          load_balancing_weight: 3",
    ));
    assert!(t.contains("lb_policy = \"round_robin\""), "{t}");
    assert!(t.contains("weight = 3"), "{t}");
    let t = toml(&two_hosts(
        "    lb_policy: LEAST_REQUEST\n    least_request_lb_config: {choice_count: 3, active_request_bias: {default_value: 0.5, runtime_key: k}}\n",
        "",
    ));
    assert!(t.contains("lb_policy = \"least_request\""), "{t}");
    assert!(t.contains("choice_count = 3"), "{t}");
    assert!(t.contains("active_request_bias = 0.5"), "{t}");
}

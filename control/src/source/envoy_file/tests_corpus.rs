//! Every config shape in Envoy's own Redis material, walked one by one: the redis_proxy
//! integration test's configs (basic, command stats, redirection, redirection with a DNS cache,
//! batching, routes, mirrors, downstream passwords, per-cluster upstream passwords, faults),
//! the Redis Cluster integration test's (a `Struct`-wrapped cluster config, refresh
//! thresholds, a read policy, upstream auth), `examples/redis` (static and with its clusters in
//! a `dynamic_resources` file) and the filter docs' examples (DNS lookups, per-endpoint
//! credentials, AWS IAM). The configs are written for these tests in the same shapes (ports and
//! names are ours). Each is served — imported, translated and accepted by the data plane's own
//! parser — or refused naming the one feature Respite does not have.

use super::*;
use crate::translate::static_config;

/// Imports and translates a whole bootstrap: the data-plane TOML.
fn served(yaml: &str) -> String {
    let sr = parse(yaml, true).unwrap_or_else(|e| panic!("import: {e}\n{yaml}"));
    static_config(&sr.listeners, &sr.clusters).unwrap_or_else(|e| panic!("translate: {e}\n{yaml}"))
}

/// The import's or the translation's error.
fn refused(yaml: &str) -> String {
    match parse(yaml, true) {
        Err(e) => e,
        Ok(sr) => static_config(&sr.listeners, &sr.clusters).expect_err("must be refused"),
    }
}

/// The integration tests' bootstrap: an admin section with a v3 access log, then
/// `static_resources` with `clusters` and a single `listeners` object whose `filter_chains`
/// and `filters` are single objects too (Envoy's YAML loader takes one value for a list).
/// `proxy` is the RedisProxy's fields, indented by 10.
fn integration(clusters: &str, proxy: &str) -> String {
    format!(
        "admin:
  access_log:
  - name: envoy.access_loggers.file
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
      path: /dev/null
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  clusters:
{clusters}  listeners:
    name: listener_a
    address: {{socket_address: {{address: 127.0.0.1, port_value: 7300}}}}
    filter_chains:
      filters:
        name: redis
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: redis_walk
{proxy}"
    )
}

/// A STATIC cluster `name` under RANDOM with hosts on `ports`, and `extra` cluster fields.
fn random_cluster(name: &str, ports: &[u16], extra: &str) -> String {
    let mut s = format!(
        "    - name: {name}
      type: STATIC
      lb_policy: RANDOM
{extra}      load_assignment:
        cluster_name: {name}
        endpoints:
          - lb_endpoints:
"
    );
    for p in ports {
        s.push_str(&format!(
            "            - endpoint:
                address:
                  socket_address: {{address: 127.0.0.1, port_value: {p}}}
"
        ));
    }
    s
}

const CATCH_ALL: &str = "          prefix_routes:
            catch_all_route:
              cluster: pool_a
";

fn basic(settings_extra: &str) -> String {
    integration(
        &random_cluster("pool_a", &[7301, 7302], ""),
        &format!("{CATCH_ALL}          settings:\n            op_timeout: 5s\n{settings_extra}"),
    )
}

#[test]
fn redis_proxy_integration_basic_stats_redirection_batching() {
    let t = served(&basic(""));
    assert!(t.contains("lb_policy = \"random\""), "{t}");
    assert!(
        t.contains("127.0.0.1:7301") && t.contains("127.0.0.1:7302"),
        "{t}"
    );
    let t = served(&basic("            enable_command_stats: true\n"));
    assert!(t.contains("enable_command_stats = true"), "{t}");
    // Accepted: Respite follows MOVED/ASK on redis_cluster clusters, where Envoy's docs ask
    // for the flag (README, "Envoy file").
    served(&basic("            enable_redirection: true\n"));
    let t = served(&basic(
        "            max_buffer_size_before_flush: 1024\n            buffer_flush_timeout: 0.003s\n",
    ));
    assert!(t.contains("max_buffer_size_before_flush = 1024"), "{t}");
    assert!(t.contains("buffer_flush_timeout = \"3ms\""), "{t}");
}

#[test]
fn redis_proxy_integration_redirection_with_a_dns_cache() {
    for family in ["V4_ONLY", "V6_ONLY", "AUTO", "v4_preferred", "ALL"] {
        served(&basic(&format!(
            "            enable_redirection: true
            dns_cache_config:
              name: walk_cache
              dns_lookup_family: {family}
              max_hosts: 100
"
        )));
    }
}

fn three_clusters(extra: &[&str; 3]) -> String {
    random_cluster("pool_a", &[7301, 7302], extra[0])
        + &random_cluster("pool_b", &[7303, 7304], extra[1])
        + &random_cluster("pool_c", &[7305, 7306], extra[2])
}

#[test]
fn redis_proxy_integration_routes_mirrors_and_upstream_passwords() {
    let routes = "          settings:
            op_timeout: 5s
          prefix_routes:
            catch_all_route:
              cluster: pool_a
            routes:
            - prefix: \"left:\"
              cluster: pool_b
            - prefix: \"right:\"
              cluster: pool_c
";
    let t = served(&integration(&three_clusters(&["", "", ""]), routes));
    assert!(t.contains("\"left:\"") && t.contains("\"right:\""), "{t}");

    let mirrors = "          settings:
            op_timeout: 5s
          prefix_routes:
            catch_all_route:
              cluster: pool_a
              request_mirror_policy:
              - cluster: pool_b
              - cluster: pool_c
            routes:
            - prefix: \"writes:\"
              cluster: pool_a
              request_mirror_policy:
              - cluster: pool_b
                exclude_read_commands: true
            - prefix: \"half:\"
              cluster: pool_a
              request_mirror_policy:
              - cluster: pool_b
                runtime_fraction:
                  default_value:
                    numerator: 50
                    denominator: HUNDRED
                  runtime_key: \"walk_key\"
";
    let t = served(&integration(&three_clusters(&["", "", ""]), mirrors));
    assert!(t.contains("exclude_read_commands = true"), "{t}");

    let auth = |n: &str| {
        format!(
            "      typed_extension_protocol_options:
        envoy.filters.network.redis_proxy:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
          auth_password: {{ inline_string: pw_{n} }}
"
        )
    };
    let one = |name: &str, port: u16| random_cluster(name, &[port], &auth(name));
    let clusters = one("pool_a", 7301) + &one("pool_b", 7303) + &one("pool_c", 7305);
    let t = served(&integration(&clusters, routes));
    for n in ["pool_a", "pool_b", "pool_c"] {
        assert!(t.contains(&format!("auth_password = \"pw_{n}\"")), "{t}");
    }
}

#[test]
fn redis_proxy_integration_downstream_passwords_and_faults() {
    let t = served(&basic(
        "          downstream_auth_password: { inline_string: walkpass }\n",
    ));
    assert!(t.contains("walkpass"), "{t}");
    let t = served(&basic(
        "          downstream_auth_passwords:
          - inline_string: first_pw
          - inline_string: second_pw
",
    ));
    assert!(t.contains("first_pw") && t.contains("second_pw"), "{t}");
    let t = served(&basic(
        "          faults:
          - fault_type: ERROR
            fault_enabled:
              default_value:
                numerator: 100
                denominator: HUNDRED
            commands:
            - GET
          - fault_type: DELAY
            fault_enabled:
              default_value:
                numerator: 20
                denominator: HUNDRED
              runtime_key: \"walk_key\"
            delay: 2s
            commands:
            - SET
",
    ));
    for part in [
        "fault_type = \"error\"",
        "fault_type = \"delay\"",
        "fault_enabled = 20.0",
        "delay = \"2s\"",
    ] {
        assert!(t.contains(part), "{part}: {t}");
    }
}

/// The Redis Cluster integration test's bootstrap (current API): one seed node, the cluster
/// config wrapped in a `google.protobuf.Struct`; `settings` and `cluster_config` are extra
/// lines of the listener's settings and the Struct's value.
pub(super) fn redis_cluster(settings: &str, cluster_config: &str, cluster_extra: &str) -> String {
    format!(
        "admin:
  access_log_path: /dev/null
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
    name: listener_rc
    address: {{socket_address: {{address: 127.0.0.1, port_value: 7310}}}}
    filter_chains:
      filters:
        name: redis
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: redis_walk
          prefix_routes:
            catch_all_route:
              cluster: rc
          settings:
            op_timeout: 5s
            enable_redirection: true
{settings}  clusters:
    - name: rc
      lb_policy: CLUSTER_PROVIDED
      load_assignment:
        cluster_name: rc
        endpoints:
        - lb_endpoints:
          - endpoint:
              address:
                socket_address: {{address: 127.0.0.1, port_value: 7311}}
      cluster_type:
        name: envoy.clusters.redis
        typed_config:
          \"@type\": type.googleapis.com/google.protobuf.Struct
          value:
            cluster_refresh_rate: 60s
            cluster_refresh_timeout: 4s
{cluster_config}{cluster_extra}"
    )
}

#[test]
fn redis_cluster_integration_refresh_read_policy_and_auth() {
    let t = served(&redis_cluster(
        "",
        "            redirect_refresh_interval: 0s\n            redirect_refresh_threshold: 1\n",
        "",
    ));
    assert!(t.contains("type = \"redis_cluster\""), "{t}");
    served(&redis_cluster(
        "",
        "            redirect_refresh_interval: 100s
            redirect_refresh_threshold: 1
            failure_refresh_threshold: 1
",
        "",
    ));
    let t = served(&redis_cluster(
        "            read_policy: REPLICA\n",
        "            redirect_refresh_interval: 0s\n",
        "",
    ));
    assert!(t.contains("read_policy = \"replica\""), "{t}");
    let auth = "      typed_extension_protocol_options:
        envoy.filters.network.redis_proxy:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
          auth_password: { inline_string: clusterpw }
";
    let t = served(&redis_cluster("", "", auth));
    assert!(t.contains("auth_password = \"clusterpw\""), "{t}");
    // The test's older revision used the v2 API, which Envoy itself no longer loads.
    let e = refused(&redis_cluster("", "", "").replace(
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
        "envoy.config.filter.network.redis_proxy.v2.RedisProxy",
    ));
    assert!(e.contains("v2"), "{e}");
}

const EXAMPLE_LISTENER: &str = "  - name: redis_listener
    address:
      socket_address:
        address: 0.0.0.0
        port_value: 7320
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: redis
          prefix_routes:
            catch_all_route:
              cluster: redis_cluster
          settings:
            op_timeout: 5s
          downstream_auth_password:
            inline_string: \"walk\"
";

const EXAMPLE_CLUSTER: &str = "name: redis_cluster
  connect_timeout: 1s
  type: STRICT_DNS # static
  lb_policy: MAGLEV
  typed_extension_protocol_options:
    envoy.filters.network.redis_proxy:
      \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
      auth_password:
        inline_string: \"walk\"
  load_assignment:
    cluster_name: redis_cluster
    endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: localhost
                port_value: 7321
";

/// `examples/redis`: its static envoy.yaml, and envoy-dynamic.yaml, whose cluster comes from a
/// CDS file (a `DiscoveryResponse`) named by `dynamic_resources.cds_config.path`.
#[test]
fn examples_redis_static_and_with_a_cds_file() {
    let static_yaml = format!(
        "static_resources:\n  listeners:\n{EXAMPLE_LISTENER}  clusters:\n  - {}\nadmin:\n  \
         address:\n    socket_address: {{address: 0.0.0.0, port_value: 8001}}\n",
        EXAMPLE_CLUSTER.replace("\n", "\n  ")
    );
    let t = served(&static_yaml);
    assert!(t.contains("lb_policy = \"maglev\""), "{t}");

    let dir = std::env::temp_dir().join(format!("respite-walk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cds = dir.join("cds.yaml");
    std::fs::write(
        &cds,
        format!(
            "version_info: \"0\"\nresources:\n- \"@type\": \
             type.googleapis.com/envoy.config.cluster.v3.Cluster\n  {EXAMPLE_CLUSTER}"
        ),
    )
    .unwrap();
    let boot = dir.join("envoy-dynamic.yaml");
    std::fs::write(
        &boot,
        format!(
            "node:\n  id: walk\n  cluster: test\n\ndynamic_resources:\n  cds_config:\n    path: \
             \"{}\"\n\nstatic_resources:\n  listeners:\n{EXAMPLE_LISTENER}\nadmin:\n  \
             access_log_path: \"/dev/null\"\n  address:\n    socket_address: {{address: \
             0.0.0.0, port_value: 8001}}\n",
            cds.display()
        ),
    )
    .unwrap();
    let sr = load(&boot).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sr.clusters.len(), 1);
    assert_eq!(sr.xds_files.cds.as_deref(), Some(cds.as_path()));
    let t = static_config(&sr.listeners, &sr.clusters).unwrap_or_else(|e| panic!("{e}"));
    assert!(t.contains("name = \"redis_cluster\""), "{t}");

    // path_config_source, an LDS file too, and errors that name the file, path and line.
    let lds = dir.join("lds.yaml");
    std::fs::write(
        &lds,
        format!(
            "version_info: \"1\"\nresources:\n- \"@type\": \
             type.googleapis.com/envoy.config.listener.v3.Listener\n{}",
            EXAMPLE_LISTENER
                .replacen("  - name", "  name", 1)
                .replace("\n  ", "\n")
        ),
    )
    .unwrap();
    std::fs::write(
        &boot,
        format!(
            "dynamic_resources:\n  lds_config:\n    path_config_source: {{path: \"{}\"}}\n    \
             resource_api_version: V3\n  cds_config: {{path: \"{}\"}}\n",
            lds.display(),
            cds.display()
        ),
    )
    .unwrap();
    let sr = load(&boot).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((sr.listeners.len(), sr.clusters.len()), (1, 1));
    std::fs::write(
        &cds,
        "resources:\n- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  name: x\n",
    )
    .unwrap();
    let e = load(&boot).unwrap_err();
    assert!(
        e.starts_with(&format!("{}: resources[0]: ", cds.display()))
            && e.contains("this file holds envoy.config.cluster.v3.Cluster resources"),
        "{e}"
    );
    std::fs::write(
        &boot,
        "dynamic_resources:\n  cds_config:\n    api_config_source: {api_type: GRPC}\n",
    )
    .unwrap();
    let e = load(&boot).unwrap_err();
    assert!(
        e.contains("dynamic_resources.cds_config.api_config_source: xDS over gRPC: use respite-control --bootstrap"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The filter docs' examples: DNS lookups on redirection (a STRICT_DNS cluster of a name that
/// does not resolve here), per-endpoint upstream credentials (mapped per address) and AWS IAM (refused by name).
#[test]
fn filter_docs_examples() {
    let docs_listener = |settings: &str| {
        format!(
            "static_resources:
  listeners:
  - name: listener_0
    address:
      socket_address:
        address: 0.0.0.0
        port_value: 7330
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: redis_stats
          prefix_routes:
            catch_all_route:
              cluster: redis_cluster
          settings:
            op_timeout: 5s
{settings}"
        )
    };
    let dns = docs_listener(
        "            enable_redirection: true
            dns_cache_config:
              name: dns_cache_for_redis
              dns_lookup_family: V4_ONLY
              max_hosts: 100
  clusters:
  - name: redis_cluster
    connect_timeout: 1s
    type: STRICT_DNS
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: redis.walk.invalid
                port_value: 7331
",
    );
    let t = served(&dns);
    assert!(t.contains("redis.walk.invalid:7331"), "{t}");

    let mut creds = docs_listener(
        "  clusters:
  - name: redis_cluster
    connect_timeout: 1s
    type: STRICT_DNS
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
      - lb_endpoints:
",
    );
    for i in 1..=3 {
        creds.push_str(&format!(
            "        - endpoint:
            address:
              socket_address:
                address: node_{i}.walk.invalid
                port_value: {}
",
            7340 + i
        ));
    }
    creds.push_str(
        "    typed_extension_protocol_options:
      envoy.filters.network.redis_proxy:
        \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_username:
          inline_string: default_username
        auth_password:
          inline_string: default_password
        credentials:
",
    );
    for i in 1..=3 {
        creds.push_str(&format!(
            "        - address:
            socket_address:
              address: node_{i}.walk.invalid
              port_value: {}
          auth_username:
            inline_string: node_{i}_user
          auth_password:
            inline_string: node_{i}_pw
",
            7340 + i
        ));
    }
    // Per-endpoint credentials: one `[[clusters.credentials]]` per address, in order, next to
    // the cluster-wide AUTH.
    let t = served(&creds);
    let v: toml::Value = toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
    let c = &v["clusters"][0];
    assert_eq!(c["auth_username"].as_str(), Some("default_username"), "{t}");
    assert_eq!(c["auth_password"].as_str(), Some("default_password"), "{t}");
    let creds = c["credentials"].as_array().unwrap_or_else(|| panic!("{t}"));
    assert_eq!(creds.len(), 3, "{t}");
    for (i, e) in (1..=3).zip(creds) {
        assert_eq!(
            e["address"].as_str(),
            Some(format!("node_{i}.walk.invalid:{}", 7340 + i).as_str()),
            "{t}"
        );
        assert_eq!(
            e["auth_username"].as_str(),
            Some(format!("node_{i}_user").as_str())
        );
        assert_eq!(
            e["auth_password"].as_str(),
            Some(format!("node_{i}_pw").as_str())
        );
    }

    let iam = docs_listener(
        "  clusters:
  - name: redis_cluster
    connect_timeout: 1s
    type: strict_dns
    load_assignment:
      cluster_name: redis_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: cache.walk.invalid
                port_value: 6379
    typed_extension_protocol_options:
      envoy.filters.network.redis_proxy:
        \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_username:
          inline_string: test
        aws_iam:
          region: ap-southeast-2
          service_name: elasticache
          cache_name: testcache
          expiration_time: 900s
",
    );
    let e = refused(&iam);
    assert!(e.contains("aws_iam"), "{e}");
}

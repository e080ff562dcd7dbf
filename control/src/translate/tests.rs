//! Listener translation: every mapping checked after the data plane's parser, every rejection
//! with its reason.

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{
    DataSource, GrpcService, TransportSocket, address, data_source, socket_address,
};
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, ListenerFilter, filter, listener_filter,
};
use envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisExternalAuthProvider;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::{
    PrefixRoutes, RedisFault,
    prefix_routes::route::{ReadCommandPolicy, RequestMirrorPolicy},
};
use envoy_types::pb::google::protobuf::{Any, UInt32Value};
use respite::config::{FaultType, ReadPolicy};

use super::tests_support::*;

const HUNDRED: i32 = 0;
const TEN_THOUSAND: i32 = 1;
const MILLION: i32 = 2;

/// Envoy's documentation example listener (redis_proxy docs).
#[test]
fn envoy_documentation_example() {
    let mut p = proxy();
    p.stat_prefix = "cache".into();
    if let Some(s) = p.settings.as_mut() {
        s.op_timeout = Some(ms(500));
        s.enable_hashtagging = true;
        s.enable_redirection = true;
    }
    p.prefix_routes = Some(PrefixRoutes {
        routes: vec![route("user:", "redis_users")],
        catch_all_route: Some(route("", "redis_default")),
        ..Default::default()
    });
    let mut l = listener_with(&p);
    l.name = "redis_listener".into();
    l.address = Some(sock("0.0.0.0", 6379));

    let d = super::listener(&l).unwrap();
    assert_eq!(
        d.clusters,
        BTreeSet::from(["redis_default".to_string(), "redis_users".to_string()])
    );
    let cfg = parse_listener(&l);
    let lc = &cfg.listeners[0];
    assert_eq!(lc.name, "redis_listener");
    assert_eq!(lc.address.to_string(), "0.0.0.0:6379");
    assert_eq!(lc.stat_prefix, "cache");
    assert_eq!(lc.op_timeout, Duration::from_millis(500));
    assert_eq!(lc.hash_tag, Some(*b"{}"));
    assert_eq!(lc.prefix_routes.routes.len(), 1);
    assert_eq!(lc.prefix_routes.routes[0].prefix, "user:");
    assert_eq!(lc.prefix_routes.routes[0].cluster, "redis_users");
    assert!(!lc.prefix_routes.routes[0].remove_prefix);
    let catch_all = lc.prefix_routes.catch_all_route.as_ref().unwrap();
    assert_eq!(catch_all.cluster, "redis_default");
}

#[test]
fn connection_settings_map_to_listener_keys() {
    let mut p = proxy();
    p.latency_in_micros = true;
    p.custom_commands = vec!["bf.add".into(), "bf.exists".into()];
    if let Some(s) = p.settings.as_mut() {
        s.max_buffer_size_before_flush = 16384;
        s.buffer_flush_timeout = Some(dur(0, 20_000));
        s.enable_command_stats = true;
        s.enable_hashtagging = false;
    }
    let cfg = parse_listener(&listener_with(&p));
    let lc = &cfg.listeners[0];
    assert_eq!(lc.stat_prefix, "redis");
    assert_eq!(lc.op_timeout, Duration::from_secs(1));
    assert_eq!(lc.hash_tag, None);
    assert_eq!(lc.max_buffer_size_before_flush, 16384);
    assert_eq!(lc.buffer_flush_timeout, Duration::from_micros(20));
    assert!(lc.enable_command_stats);
    assert!(lc.latency_in_micros);
    assert_eq!(lc.custom_commands, vec!["bf.add", "bf.exists"]);
}

#[test]
fn durations_render_in_the_largest_exact_unit() {
    let f = super::fields::duration;
    let text = |t: &str| respite::config::raw::RawDuration::Text(t.into());
    assert_eq!(f(&dur(2, 0), "x").unwrap(), text("2s"));
    assert_eq!(f(&ms(1500), "x").unwrap(), text("1500ms"));
    assert_eq!(f(&dur(0, 20_000), "x").unwrap(), text("20us"));
    assert_eq!(f(&dur(0, 7), "x").unwrap(), text("7ns"));
    assert_eq!(f(&dur(0, 0), "x").unwrap(), text("0s"));
    assert_mentions(
        &f(&dur(-1, 0), "a.b").unwrap_err(),
        &["a.b", "non-negative"],
    );
}

#[test]
fn read_policies_map_and_need_a_redis_cluster() {
    let cases = [
        (1, "prefer_primary", ReadPolicy::PreferPrimary),
        (2, "replica", ReadPolicy::Replica),
        (3, "prefer_replica", ReadPolicy::PreferReplica),
        (4, "any", ReadPolicy::Any),
    ];
    for (v, text, policy) in cases {
        let mut p = proxy();
        if let Some(s) = p.settings.as_mut() {
            s.read_policy = v;
            s.max_upstream_unknown_connections = Some(UInt32Value { value: 7 });
        }
        let d = super::listener(&listener_with(&p)).unwrap();
        let written = d.listener.read_policy.clone().map(|r| r.into_inner());
        assert_eq!(written, Some(policy));
        assert_eq!(toml::Value::try_from(policy).unwrap().as_str(), Some(text));
        // Routed to a Redis Cluster: kept.
        let mut rc = static_cluster("cache", &[7000]);
        rc.cluster_discovery_type = Some(redis_cluster_type(None));
        rc.lb_policy = 0;
        let c = super::cluster(&rc).unwrap();
        let cfg = parse(&[&d], &[c]);
        assert_eq!(cfg.listeners[0].read_policy, policy);
        assert_eq!(cfg.listeners[0].max_upstream_unknown_connections, 7);
        // Routed to a plain cluster: dropped by render (Envoy: "Redis Cluster only").
        let cfg = parse(
            &[&d],
            &[super::cluster(&static_cluster("cache", &[7000])).unwrap()],
        );
        assert_eq!(cfg.listeners[0].read_policy, ReadPolicy::Primary);
        assert_eq!(cfg.listeners[0].max_upstream_unknown_connections, 100);
    }
    // MASTER (the default) writes nothing.
    let d = super::listener(&listener_with(&proxy())).unwrap();
    assert_eq!(d.listener.read_policy, None);
}

fn redis_cluster_type(
    cfg: Option<Any>,
) -> envoy_types::pb::envoy::config::cluster::v3::cluster::ClusterDiscoveryType {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, CustomClusterType,
    };
    ClusterDiscoveryType::ClusterType(CustomClusterType {
        name: "envoy.clusters.redis".into(),
        typed_config: cfg,
    })
}

#[test]
fn prefix_routes_with_every_route_field() {
    let mut p = proxy();
    let mut users = route("user:", "users");
    users.remove_prefix = true;
    users.key_formatter = "{%KEY%}".into();
    users.read_command_policy = Some(ReadCommandPolicy {
        cluster: "users-replica".into(),
    });
    users.request_mirror_policy = vec![
        RequestMirrorPolicy {
            cluster: "users-new".into(),
            runtime_fraction: Some(fraction(50, HUNDRED)),
            exclude_read_commands: true,
        },
        RequestMirrorPolicy {
            cluster: "users-audit".into(),
            runtime_fraction: None,
            exclude_read_commands: false,
        },
    ];
    let mut catch_all = route("", "cache");
    catch_all.request_mirror_policy = vec![
        RequestMirrorPolicy {
            cluster: "cache-a".into(),
            runtime_fraction: Some(fraction(2500, TEN_THOUSAND)),
            exclude_read_commands: false,
        },
        RequestMirrorPolicy {
            cluster: "cache-b".into(),
            runtime_fraction: Some(fraction(1, MILLION)),
            exclude_read_commands: false,
        },
    ];
    p.prefix_routes = Some(PrefixRoutes {
        routes: vec![users, route("session:", "sessions")],
        case_insensitive: true,
        catch_all_route: Some(catch_all),
    });
    let l = listener_with(&p);
    let d = super::listener(&l).unwrap();
    let want: BTreeSet<String> = [
        "users",
        "users-replica",
        "users-new",
        "users-audit",
        "sessions",
        "cache",
        "cache-a",
        "cache-b",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(d.clusters, want);

    let cfg = parse_listener(&l);
    let pr = &cfg.listeners[0].prefix_routes;
    assert!(pr.case_insensitive);
    let r = &pr.routes[0];
    assert_eq!(r.prefix, "user:");
    assert_eq!(r.cluster, "users");
    assert!(r.remove_prefix);
    assert_eq!(r.key_formatter.as_deref(), Some("{%KEY%}"));
    assert_eq!(r.read_command_policy.as_deref(), Some("users-replica"));
    assert_eq!(r.request_mirror_policy.len(), 2);
    assert_eq!(r.request_mirror_policy[0].cluster, "users-new");
    assert!(r.request_mirror_policy[0].exclude_read_commands);
    assert_eq!(r.request_mirror_policy[0].runtime_fraction, 50.0);
    assert_eq!(r.request_mirror_policy[1].runtime_fraction, 100.0);
    assert!(!r.request_mirror_policy[1].exclude_read_commands);
    assert_eq!(pr.routes[1].prefix, "session:");
    let ca = pr.catch_all_route.as_ref().unwrap();
    assert_eq!(ca.cluster, "cache");
    assert_eq!(ca.request_mirror_policy[0].runtime_fraction, 25.0);
    assert!((ca.request_mirror_policy[1].runtime_fraction - 0.0001).abs() < 1e-12);
}

#[test]
fn fraction_above_its_denominator_is_a_hundred_percent() {
    let pct = super::fields::runtime_percent(Some(&fraction(250, HUNDRED)), "f").unwrap();
    assert_eq!(pct, 100.0);
    let err =
        super::fields::runtime_percent(Some(&fraction(1, 9)), "m.runtime_fraction").unwrap_err();
    assert_mentions(&err, &["m.runtime_fraction.default_value.denominator", "9"]);
}

#[test]
fn faults_map_type_percent_delay_and_commands() {
    let mut p = proxy();
    p.faults = vec![
        RedisFault {
            fault_type: 1, // ERROR
            fault_enabled: Some(fraction(5, HUNDRED)),
            delay: Some(ms(10)),
            commands: vec![],
        },
        RedisFault {
            fault_type: 0, // DELAY
            fault_enabled: Some(fraction(1000, TEN_THOUSAND)),
            delay: Some(ms(250)),
            commands: vec!["GET".into(), "SET".into()],
        },
    ];
    let cfg = parse_listener(&listener_with(&p));
    let f = &cfg.listeners[0].faults;
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].fault_type, FaultType::Error);
    assert_eq!(f[0].fault_enabled, 5.0);
    assert_eq!(f[0].delay, Some(Duration::from_millis(10)));
    assert!(f[0].commands.is_empty());
    assert_eq!(f[1].fault_type, FaultType::Delay);
    assert_eq!(f[1].fault_enabled, 10.0);
    assert_eq!(f[1].delay, Some(Duration::from_millis(250)));
    assert_eq!(f[1].commands, vec!["get", "set"]);
}

#[test]
fn downstream_auth_from_every_data_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "from-file").unwrap();
    // A variable every test process has, so the test need not change the environment.
    let from_env = std::env::var("PATH").unwrap();
    let mut p = proxy();
    #[allow(deprecated)]
    {
        p.downstream_auth_password = Some(inline("deprecated-one"));
    }
    p.downstream_auth_passwords = vec![
        inline("inline"),
        DataSource {
            specifier: Some(data_source::Specifier::InlineBytes(b"bytes".to_vec())),
            ..Default::default()
        },
        DataSource {
            specifier: Some(data_source::Specifier::Filename(file.display().to_string())),
            ..Default::default()
        },
        DataSource {
            specifier: Some(data_source::Specifier::EnvironmentVariable("PATH".into())),
            ..Default::default()
        },
    ];
    p.downstream_auth_username = Some(inline("app"));
    let cfg = parse_listener(&listener_with(&p));
    let lc = &cfg.listeners[0];
    assert_eq!(
        lc.downstream_auth_passwords,
        vec![
            "deprecated-one",
            "inline",
            "bytes",
            "from-file",
            from_env.as_str()
        ]
    );
    assert_eq!(lc.downstream_auth_username.as_deref(), Some("app"));
}

#[test]
fn data_source_errors_name_the_field() {
    let mut p = proxy();
    p.downstream_auth_passwords = vec![DataSource {
        specifier: Some(data_source::Specifier::EnvironmentVariable(
            "RESPITE_TRANSLATE_SURELY_UNSET".into(),
        )),
        ..Default::default()
    }];
    let err = listener_err(&listener_with(&p));
    assert_mentions(
        &err,
        &[
            "redis_proxy.downstream_auth_passwords[0].environment_variable",
            "RESPITE_TRANSLATE_SURELY_UNSET",
            "not set",
        ],
    );
    let mut p = proxy();
    p.downstream_auth_passwords = vec![DataSource {
        specifier: Some(data_source::Specifier::Filename(
            "/nonexistent/respite/pw".into(),
        )),
        ..Default::default()
    }];
    let err = listener_err(&listener_with(&p));
    assert_mentions(
        &err,
        &[
            "downstream_auth_passwords[0].filename",
            "/nonexistent/respite/pw",
        ],
    );
}

#[test]
fn ipv6_listener_address_is_bracketed() {
    let mut l = listener_with(&proxy());
    l.address = Some(sock("::1", 6390));
    let d = super::listener(&l).unwrap();
    assert_eq!(d.listener.address.get_ref(), "[::1]:6390");
    let cfg = parse_listener(&l);
    assert_eq!(cfg.listeners[0].address.to_string(), "[::1]:6390");
}

#[test]
fn listener_address_must_be_a_tcp_socket_address() {
    let mut l = listener_with(&proxy());
    l.address = Some(envoy_types::pb::envoy::config::core::v3::Address {
        address: Some(address::Address::Pipe(
            envoy_types::pb::envoy::config::core::v3::Pipe {
                path: "/tmp/redis.sock".into(),
                mode: 0,
            },
        )),
    });
    assert_mentions(&listener_err(&l), &["address", "pipe"]);

    let mut l = listener_with(&proxy());
    let mut a = sock("127.0.0.1", 1);
    if let Some(address::Address::SocketAddress(sa)) = a.address.as_mut() {
        sa.port_specifier = Some(socket_address::PortSpecifier::NamedPort("redis".into()));
    }
    l.address = Some(a);
    assert_mentions(
        &listener_err(&l),
        &["address.socket_address.named_port", "redis"],
    );

    let mut l = listener_with(&proxy());
    l.address = None;
    assert_mentions(&listener_err(&l), &["address: required"]);
}

#[test]
fn filter_chain_shape_is_one_chain_one_redis_filter() {
    let p = proxy();
    let base = listener_with(&p);

    let mut l = base.clone();
    l.filter_chains.clear();
    assert_mentions(&listener_err(&l), &["filter_chains: required"]);

    let mut l = base.clone();
    l.filter_chains.push(l.filter_chains[0].clone());
    assert_mentions(&listener_err(&l), &["filter_chains", "exactly one"]);

    let mut l = base.clone();
    l.filter_chains[0].filter_chain_match = Some(FilterChainMatch::default());
    assert_mentions(&listener_err(&l), &["filter_chain_match", "not supported"]);

    let mut l = base.clone();
    l.filter_chains[0].transport_socket = Some(TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: None,
    });
    assert_mentions(
        &listener_err(&l),
        &[
            "filter_chains[0].transport_socket.typed_config: required",
            "DownstreamTlsContext",
        ],
    );

    // Any listener filter but tls_inspector changes what the listener accepts: refused by name.
    let mut l = base.clone();
    l.listener_filters = vec![ListenerFilter {
        name: "envoy.filters.listener.proxy_protocol".into(),
        ..Default::default()
    }];
    assert_mentions(
        &listener_err(&l),
        &[
            "listener_filters[0] (envoy.filters.listener.proxy_protocol)",
            "not supported by respite",
        ],
    );
    // A filter named tls_inspector whose typed_config is something else is not the inspector.
    l.listener_filters = vec![ListenerFilter {
        name: "envoy.filters.listener.tls_inspector".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(Any {
            type_url: "type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.\
                       ProxyProtocol"
                .into(),
            value: vec![],
        })),
        ..Default::default()
    }];
    assert_mentions(&listener_err(&l), &["listener_filters[0]", "not supported"]);

    let tcp_proxy = Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(Any {
            type_url: "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
                .into(),
            value: vec![],
        })),
    };
    let mut l = base.clone();
    l.filter_chains[0].filters.push(tcp_proxy.clone());
    assert_mentions(
        &listener_err(&l),
        &["filters", "envoy.filters.network.tcp_proxy", "alone"],
    );

    let mut l = base.clone();
    l.filter_chains[0].filters = vec![tcp_proxy];
    assert_mentions(
        &listener_err(&l),
        &[
            "filters[0]",
            "envoy.filters.network.tcp_proxy",
            "TcpProxy",
            "not supported",
        ],
    );

    let mut l = base.clone();
    l.filter_chains = vec![FilterChain {
        filters: vec![Filter {
            name: "envoy.filters.network.redis_proxy".into(),
            config_type: None,
        }],
        ..Default::default()
    }];
    assert_mentions(&listener_err(&l), &["typed_config: required"]);

    // Matched by type URL, not by filter name.
    let mut l = base;
    l.filter_chains[0].filters[0].name = "my-redis".into();
    assert!(super::listener(&l).is_ok());
}

/// Names that reach the data plane's stats are checked by the data plane's parser, whatever the
/// source: an Envoy `stat_prefix` or cluster name with a newline is refused, naming the key and
/// the character.
#[test]
fn names_reaching_stats_are_refused_with_the_character() {
    let mut p = proxy();
    p.stat_prefix = "main\nfake 1".into();
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &[
            "listeners[0].stat_prefix",
            r#""main\nfake 1" contains '\n', which is not allowed in a name that reaches stats"#,
        ],
    );
    let c = static_cluster("cache 2", &[7001]);
    assert_mentions(
        &cluster_err(&c),
        &["clusters[0].name", r#""cache 2" contains ' '"#],
    );
}

#[test]
fn redis_proxy_required_fields() {
    let mut p = proxy();
    p.stat_prefix.clear();
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["redis_proxy.stat_prefix: required"],
    );

    let mut p = proxy();
    p.settings = None;
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["redis_proxy.settings: required"],
    );

    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.op_timeout = None;
    }
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["redis_proxy.settings.op_timeout: required"],
    );

    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.op_timeout = Some(dur(0, 0));
    }
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["op_timeout", "greater than zero"],
    );

    let mut p = proxy();
    p.prefix_routes = None;
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["redis_proxy.prefix_routes: required"],
    );

    let mut p = proxy();
    p.prefix_routes = Some(PrefixRoutes::default());
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["prefix_routes", "catch_all_route"],
    );

    let mut p = proxy();
    p.prefix_routes = Some(PrefixRoutes {
        routes: vec![route("a:", "")],
        ..Default::default()
    });
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["prefix_routes.routes[0].cluster: required"],
    );

    let mut l = listener_with(&proxy());
    l.name.clear();
    assert_mentions(&listener_err(&l), &["name: required"]);
}

#[test]
fn unsupported_behaviour_is_refused_by_name() {
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.dns_cache_config = Some(DnsCacheConfig {
            host_ttl: Some(super::tests_support::ms(1000)),
            ..DnsCacheConfig::default()
        });
    }
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["dns_cache_config.host_ttl", "not supported by respite"],
    );

    let mut p = proxy();
    p.external_auth_provider = Some(RedisExternalAuthProvider {
        grpc_service: Some(GrpcService::default()),
        enable_auth_expiration: false,
    });
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &[
            "external_auth_provider.grpc_service",
            "envoy_grpc or google_grpc required",
        ],
    );

    let mut p = proxy();
    p.protocol_version = 7;
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["protocol_version", "unknown value 7"],
    );
}

/// `settings.connection_rate_limit` with `per_sec`.
fn rate_limited(
    per_sec: u32,
) -> envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisProxy {
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.connection_rate_limit = Some(
            envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::ConnectionRateLimit {
                connection_rate_limit_per_sec: per_sec,
            },
        );
    }
    p
}

#[test]
fn accepted_and_ignored_settings() {
    // enable_redirection is accepted and not written (see settings_fields).
    let mut p = proxy();
    if let Some(s) = p.settings.as_mut() {
        s.enable_redirection = true;
    }
    let d = super::listener(&listener_with(&p)).unwrap();
    let written = toml::Table::try_from(&d.listener).unwrap();
    assert!(!written.contains_key("enable_redirection"));
    parse_listener(&listener_with(&p));
}

#[test]
fn connection_rate_limit_is_no_listener_key_but_the_cluster_s() {
    let p = rate_limited(10);
    let d = super::listener(&listener_with(&p)).unwrap();
    let written = toml::Table::try_from(&d.listener).unwrap();
    assert!(!written.contains_key("connection_rate_limit"));
    assert!(!written.contains_key("connection_rate_limit_per_sec"));
    assert_eq!(d.connection_rate_limit_per_sec, Some(10));
    let cfg = parse_listener(&listener_with(&p));
    assert_eq!(cfg.clusters[0].connection_rate_limit_per_sec, 10);
}

#[test]
fn connection_rate_limit_reaches_every_cluster_the_listener_names() {
    let mut p = rate_limited(7);
    p.prefix_routes = Some(PrefixRoutes {
        routes: vec![{
            let mut r = route("a:", "routed");
            r.request_mirror_policy = vec![RequestMirrorPolicy {
                cluster: "mirror".into(),
                ..Default::default()
            }];
            r.read_command_policy = Some(ReadCommandPolicy {
                cluster: "reads".into(),
            });
            r
        }],
        catch_all_route: Some(route("", "cache")),
        ..Default::default()
    });
    let mut l = listener_with(&p);
    let d = super::listener(&l).unwrap();
    // A second listener leaves `other` alone: it keeps the data plane's default.
    l.name = "plain".into();
    l.address = Some(sock("127.0.0.1", 6380));
    let mut plain = proxy();
    plain.stat_prefix = "plain".into();
    plain.prefix_routes = Some(PrefixRoutes {
        catch_all_route: Some(route("", "other")),
        ..Default::default()
    });
    l.filter_chains[0].filters = vec![redis_filter(&plain)];
    let d2 = super::listener(&l).unwrap();
    let names = ["cache", "routed", "mirror", "reads", "other"];
    let clusters: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| super::cluster(&static_cluster(n, &[7100 + i as u32])).unwrap())
        .collect();
    let cfg = parse(&[&d, &d2], &clusters);
    let limit = |name: &str| {
        cfg.clusters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.connection_rate_limit_per_sec)
    };
    for n in ["cache", "routed", "mirror", "reads"] {
        assert_eq!(limit(n), Some(7), "{n}");
    }
    assert_eq!(limit("other"), Some(100));
}

#[test]
fn connection_rate_limit_lowest_listener_wins() {
    let d1 = super::listener(&listener_with(&rate_limited(50))).unwrap();
    let mut l = listener_with(&rate_limited(20));
    l.name = "second".into();
    l.address = Some(sock("127.0.0.1", 6380));
    let d2 = super::listener(&l).unwrap();
    let c = super::cluster(&static_cluster("cache", &[7000])).unwrap();
    let cfg = parse(&[&d1, &d2], std::slice::from_ref(&c));
    assert_eq!(cfg.clusters[0].connection_rate_limit_per_sec, 20);
    let cfg = parse(&[&d2, &d1], &[c]);
    assert_eq!(cfg.clusters[0].connection_rate_limit_per_sec, 20);
}

#[test]
fn connection_rate_limit_zero_is_refused_as_envoy_does() {
    assert_mentions(
        &listener_err(&listener_with(&rate_limited(0))),
        &["connection_rate_limit_per_sec", "above 0"],
    );
}

#[test]
fn data_plane_refusals_name_the_key() {
    // A DELAY fault without a delay: only the data plane knows it is required.
    let mut p = proxy();
    p.faults = vec![RedisFault {
        fault_type: 0,
        fault_enabled: Some(fraction(5, HUNDRED)),
        delay: None,
        commands: vec![],
    }];
    let err = listener_err(&listener_with(&p));
    assert_mentions(&err, &["listeners[0].faults[0]", "delay"]);
    assert!(!err.starts_with("translated"), "location left in {err:?}");

    let mut p = proxy();
    p.faults = vec![RedisFault {
        fault_type: 1,
        fault_enabled: None,
        delay: None,
        commands: vec![],
    }];
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["redis_proxy.faults[0].fault_enabled: required"],
    );
}

#[test]
fn listener_level_features_are_refused_by_name() {
    use envoy_types::pb::envoy::config::listener::v3::{
        AdditionalAddress, UdpListenerConfig, listener::InternalListenerConfig,
        listener::ListenerSpecifier,
    };
    let base = listener_with(&proxy());
    let mut l = base.clone();
    l.additional_addresses = vec![AdditionalAddress {
        address: Some(sock("127.0.0.2", 6379)),
        ..Default::default()
    }];
    assert_mentions(&listener_err(&l), &["additional_addresses"]);

    let mut l = base.clone();
    l.udp_listener_config = Some(UdpListenerConfig::default());
    assert_mentions(&listener_err(&l), &["udp_listener_config"]);

    let mut l = base;
    l.listener_specifier = Some(ListenerSpecifier::InternalListener(
        InternalListenerConfig::default(),
    ));
    assert_mentions(&listener_err(&l), &["internal listeners are not supported"]);
}

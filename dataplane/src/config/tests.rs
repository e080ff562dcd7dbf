use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::*;

/// Nine numbered lines; the bad-config tests edit one line at a time so line numbers stay put.
pub(super) const MINIMAL: &str = r#"[[listeners]]
name = "main"
address = "127.0.0.1:6380"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
hosts = ["127.0.0.1:7001"]
"#;

fn v4(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

fn edit(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from:?} not in MINIMAL");
    MINIMAL.replacen(from, to, 1)
}

fn err(text: &str) -> String {
    match parse(text, "t.toml") {
        Ok(c) => panic!("expected an error, parsed {c:?}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts the error starts with `t.toml:<line>:` and names `key` and `fragment`.
pub(super) fn assert_err(text: &str, line: usize, key: &str, fragment: &str) {
    let e = err(text);
    let at = format!("t.toml:{line}:");
    assert!(e.starts_with(&at), "{e:?} does not start with {at:?}");
    assert!(
        e.contains(&format!(": {key}: ")),
        "{e:?} does not name key {key:?}"
    );
    assert!(e.contains(fragment), "{e:?} does not contain {fragment:?}");
}

#[test]
fn full_config() {
    let text = r#"
[admin]
address = "127.0.0.1:9902"
[runtime]
workers = 3
pin_workers = true
drain_timeout = "1m"
log_level = "respite=debug,warn"
[[listeners]]
name = "main"
address = "127.0.0.1:6380"
stat_prefix = "edge"
op_timeout = "250ms"
enable_hashtagging = true
max_buffer_size_before_flush = 1024
buffer_flush_timeout = "5ms"
downstream_auth_passwords = ["s3cret", "other"]
downstream_auth_username = "app"
custom_commands = ["BF.ADD", "bf.exists"]
max_request_bytes = 1048576
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[listeners]]
name = "second"
address = "[::1]:6381"
op_timeout = "2s"
prefix_routes = { catch_all_route = { cluster = "sessions" } }
[[clusters]]
name = "cache"
type = "static"
lb_policy = "ketama"
connect_timeout = "500ms"
auth_username = "proxy"
auth_password = "pw"
connections_per_host = 2
hosts = ["127.0.0.1:7001", { address = "127.0.0.1:7002", weight = 2, name = "redis-2" }]
[[clusters]]
name = "sessions"
lb_policy = "maglev"
hosts = [{ address = "127.0.0.1:7003" }]
"#;
    let want = Config {
        admin: AdminConfig {
            address: v4(9902),
            control_socket_only: false,
        },
        runtime: RuntimeConfig {
            workers: 3,
            pin_workers: true,
            drain_timeout: Duration::from_secs(60),
            log_level: Some("respite=debug,warn".into()),
            log_format: LogFormat::Text,
            maxmemory_clients: crate::config::DEFAULT_MAXMEMORY_CLIENTS,
        },
        listeners: vec![
            ListenerConfig {
                select_db: Some(0),
                name: "main".into(),
                address: v4(6380),
                stat_prefix: "edge".into(),
                op_timeout: Duration::from_millis(250),
                hash_tag: Some(*b"{}"),
                max_buffer_size_before_flush: 1024,
                buffer_flush_timeout: Duration::from_millis(5),
                downstream_auth_passwords: vec!["s3cret".into(), "other".into()],
                downstream_auth_username: Some("app".into()),
                custom_commands: vec!["bf.add".into(), "bf.exists".into()],
                max_request_bytes: 1024 * 1024,
                prefix_routes: PrefixRoutes {
                    catch_all_route: Some(Route::catch_all("cache")),
                    ..PrefixRoutes::default()
                },

                faults: vec![],
                read_policy: ReadPolicy::Primary,
                protocol_version: None,
                local_zone: None,
                max_upstream_unknown_connections: 100,
                latency_in_micros: false,
                enable_command_stats: false,
                hot_keys: None,
                dns_cache: None,
                big_value_bytes: 0,
                access_log: None,
                client_output_buffer_limit_pubsub: OutputBufferLimit::PUBSUB,
                client_output_buffer_limit: OutputBufferLimit::NORMAL,
                tls: None,
                external_auth: None,
            },
            ListenerConfig {
                select_db: Some(0),
                name: "second".into(),
                address: SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 6381),
                stat_prefix: "second".into(),
                op_timeout: Duration::from_secs(2),
                hash_tag: None,
                max_buffer_size_before_flush: 0,
                buffer_flush_timeout: Duration::from_millis(3),
                downstream_auth_passwords: vec![],
                downstream_auth_username: None,
                custom_commands: vec![],
                max_request_bytes: 512 * 1024 * 1024,
                prefix_routes: PrefixRoutes {
                    catch_all_route: Some(Route::catch_all("sessions")),
                    ..PrefixRoutes::default()
                },

                faults: vec![],
                read_policy: ReadPolicy::Primary,
                protocol_version: None,
                local_zone: None,
                max_upstream_unknown_connections: 100,
                latency_in_micros: false,
                enable_command_stats: false,
                hot_keys: None,
                dns_cache: None,
                big_value_bytes: 0,
                access_log: None,
                client_output_buffer_limit_pubsub: OutputBufferLimit::PUBSUB,
                client_output_buffer_limit: OutputBufferLimit::NORMAL,
                tls: None,
                external_auth: None,
            },
        ],
        clusters: vec![
            ClusterConfig {
                name: "cache".into(),
                cluster_type: ClusterType::Static,
                hosts: vec![
                    HostConfig {
                        address: v4(7001),
                        address_text: "127.0.0.1:7001".into(),
                        weight: 1,
                        name: None,
                    },
                    HostConfig {
                        address: v4(7002),
                        address_text: "127.0.0.1:7002".into(),
                        weight: 2,
                        name: Some("redis-2".into()),
                    },
                ],
                lb_policy: LbPolicy::Ketama,
                least_request: Default::default(),
                hash: crate::config::KeyHash::Fnv1a64,
                connect_timeout: Duration::from_millis(500),
                auth_username: Some("proxy".into()),
                auth_password: Some("pw".into()),
                credentials: Vec::new(),
                db: 0,
                connections_per_host: 2,
                redis_cluster: RedisClusterConfig::default(),
                health_checks: vec![],
                outlier_detection: None,
                on_unhealthy: OnUnhealthy::FailFast,
                connection_rate_limit_per_sec: 100,
                max_pending_requests: 16384,
                max_leased_connections: 32,
                max_reply_bytes_in_flight: 64 << 20,
                tcp_keepalive: TcpKeepalive::default(),
                tls: None,
                dns: None,
            },
            ClusterConfig {
                name: "sessions".into(),
                cluster_type: ClusterType::Static,
                hosts: vec![HostConfig {
                    address: v4(7003),
                    address_text: "127.0.0.1:7003".into(),
                    weight: 1,
                    name: None,
                }],
                lb_policy: LbPolicy::Maglev,
                least_request: Default::default(),
                hash: crate::config::KeyHash::Fnv1a64,
                connect_timeout: Duration::from_secs(1),
                auth_username: None,
                auth_password: None,
                credentials: Vec::new(),
                db: 0,
                connections_per_host: 1,
                redis_cluster: RedisClusterConfig::default(),
                health_checks: vec![],
                outlier_detection: None,
                on_unhealthy: OnUnhealthy::FailFast,
                connection_rate_limit_per_sec: 100,
                max_pending_requests: 16384,
                max_leased_connections: 32,
                max_reply_bytes_in_flight: 64 << 20,
                tcp_keepalive: TcpKeepalive::default(),
                tls: None,
                dns: None,
            },
        ],
        sockmap: Sockmap::default(),
    };
    assert_eq!(parse(text, "t.toml"), Ok(want));
}

#[test]
fn defaults() {
    let c = parse(MINIMAL, "t.toml").expect("minimal config parses");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.admin.address, v4(9901));
    assert_eq!(
        c.runtime,
        RuntimeConfig {
            workers: cpus,
            pin_workers: false,
            drain_timeout: Duration::from_secs(10),
            log_level: None,
            log_format: LogFormat::Text,
            maxmemory_clients: 1 << 30,
        }
    );
    let l = &c.listeners[0];
    assert_eq!(l.stat_prefix, "main");
    assert_eq!(l.hash_tag, None);
    assert_eq!(l.max_buffer_size_before_flush, 0);
    assert_eq!(l.buffer_flush_timeout, Duration::from_millis(3));
    assert!(l.downstream_auth_passwords.is_empty());
    assert_eq!(l.downstream_auth_username, None);
    let cl = &c.clusters[0];
    assert_eq!(cl.cluster_type, ClusterType::Static);
    assert_eq!(cl.lb_policy, LbPolicy::Ketama);
    assert_eq!(cl.connect_timeout, Duration::from_secs(1));
    assert_eq!(cl.connections_per_host, 1);
    assert_eq!(
        (cl.auth_username.as_deref(), cl.auth_password.as_deref()),
        (None, None)
    );
    assert_eq!(cl.hosts[0].weight, 1);
}

/// `[admin] control_socket_only = true`: no TCP admin address; the listener may then take the
/// default admin port; an `address` beside it is an error naming the key and line.
#[test]
fn admin_on_the_control_socket_only() {
    let c = parse(MINIMAL, "t.toml").expect("minimal config parses");
    assert!(!c.admin.control_socket_only);
    let text = format!("{MINIMAL}[admin]\ncontrol_socket_only = true\n")
        .replace("127.0.0.1:6380", "127.0.0.1:9901");
    let c = parse(&text, "t.toml").expect("parses");
    assert!(c.admin.control_socket_only);
    assert_eq!(c.listeners[0].address, v4(9901));
    assert_err(
        &format!("{MINIMAL}[admin]\ncontrol_socket_only = true\naddress = \"127.0.0.1:9902\"\n"),
        12,
        "admin.address",
        "not used with admin.control_socket_only = true",
    );
}

#[test]
fn example_file_parses() {
    let c = parse(
        include_str!("../../../deploy/examples/respite.toml"),
        "respite.toml",
    )
    .expect("example parses");
    assert_eq!(c.admin.address, v4(9901));
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(c.listeners[0].address, v4(6380));
    assert_eq!(
        c.listeners[0].prefix_routes.catch_all_route,
        Some(Route::catch_all("cache"))
    );
    assert_eq!(c.clusters.len(), 1);
    assert_eq!(c.clusters[0].lb_policy, LbPolicy::Ketama);
    let addrs: Vec<_> = c.clusters[0].hosts.iter().map(|h| h.address).collect();
    assert_eq!(addrs, vec![v4(7001), v4(7002), v4(7003)]);
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("respite.toml");
    std::fs::write(&path, MINIMAL).expect("write");
    let c = load(&path).expect("loads");
    assert_eq!(c.listeners[0].name, "main");

    std::fs::write(&path, edit(r#"op_timeout = "1s""#, r#"op_timeout = "5""#)).expect("write");
    let e = load(&path).expect_err("bad duration").to_string();
    assert_eq!(
        e,
        format!(
            "{}:4:14: listeners[0].op_timeout: invalid duration \"5\": time unit needed, for \
             example 5sec or 5ms",
            path.display()
        )
    );

    let missing = dir.path().join("nope.toml");
    let e = load(&missing).expect_err("missing file").to_string();
    assert!(e.starts_with(&format!("{}: ", missing.display())), "{e}");
}

#[test]
fn duration_without_unit() {
    let e = err(&edit(r#"op_timeout = "1s""#, r#"op_timeout = "5""#));
    assert_eq!(
        e,
        "t.toml:4:14: listeners[0].op_timeout: invalid duration \"5\": time unit needed, for \
         example 5sec or 5ms"
    );
}

#[test]
fn duration_as_bare_number() {
    let e = err(&edit(r#"op_timeout = "1s""#, "op_timeout = 5"));
    assert_eq!(
        e,
        "t.toml:4:14: listeners[0].op_timeout: invalid duration 5: a unit is required, write a \
         string such as \"5s\" or \"5ms\""
    );
}

#[test]
fn duration_of_wrong_type() {
    assert_err(
        &edit(r#"op_timeout = "1s""#, "op_timeout = true"),
        4,
        "listeners[0].op_timeout",
        "invalid type: boolean `true`, expected a duration string with a unit",
    );
}

#[test]
fn duration_garbage_and_zero() {
    assert_err(
        &edit(r#"op_timeout = "1s""#, r#"op_timeout = "soon""#),
        4,
        "listeners[0].op_timeout",
        "invalid duration \"soon\"",
    );
    assert_err(
        &edit(r#"op_timeout = "1s""#, r#"op_timeout = "0s""#),
        4,
        "listeners[0].op_timeout",
        "must be greater than zero",
    );
    let text = format!("{MINIMAL}connect_timeout = 1\n");
    assert_err(
        &text,
        10,
        "clusters[0].connect_timeout",
        "a unit is required",
    );
    let text = format!("{MINIMAL}[runtime]\ndrain_timeout = \"3 fortnights\"\n");
    assert_err(&text, 11, "runtime.drain_timeout", "invalid duration");
}

#[test]
fn missing_required_key() {
    let e = err(&edit(
        "op_timeout = \"1s\"\n",
        "enable_hashtagging = true\n",
    ));
    assert_eq!(
        e,
        "t.toml:1:1: listeners[0].op_timeout: missing field `op_timeout`"
    );
    assert_err(
        &edit("name = \"cache\"\n", "# unnamed\n"),
        7,
        "clusters[0].name",
        "missing field `name`",
    );
}

#[test]
fn unknown_keys() {
    assert_err(
        &edit(
            "op_timeout = \"1s\"\n",
            "op_timeout = \"1s\"\nop_timout = \"2s\"\n",
        ),
        5,
        "listeners[0].op_timout",
        "unknown field `op_timout`",
    );
    assert_err(
        &edit(
            "cluster = \"cache\"\n",
            "cluster = \"cache\"\nprefix = \"a:\"\n",
        ),
        7,
        "listeners[0].prefix_routes.catch_all_route.prefix",
        "the catch-all route matches every key; it has no prefix",
    );
    assert_err(
        &format!("{MINIMAL}[stats]\nflush = 1\n"),
        10,
        "stats",
        "unknown field `stats`",
    );
    assert_err(
        &format!("{MINIMAL}[admin]\nadress = \"127.0.0.1:1\"\n"),
        11,
        "admin.adress",
        "unknown field `adress`",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = [{ address = "127.0.0.1:7001", wieght = 2 }]"#,
        ),
        9,
        "clusters[0].hosts[0].wieght",
        "unknown field `wieght`",
    );
}

#[test]
fn unknown_keys_in_second_array_table() {
    let text = format!(
        "{MINIMAL}[[clusters]]\nname = \"b\"\nhosts = [\"127.0.0.1:7002\"]\nbogus = true\n"
    );
    assert_err(&text, 13, "clusters[1].bogus", "unknown field `bogus`");
}

#[test]
fn bad_types() {
    assert_err(
        &format!("{MINIMAL}[runtime]\nworkers = \"two\"\n"),
        11,
        "runtime.workers",
        "invalid type: string \"two\"",
    );
    assert_err(
        &format!("{MINIMAL}[runtime]\npin_workers = 1\n"),
        11,
        "runtime.pin_workers",
        "invalid type: integer `1`, expected a boolean",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = [{ address = "127.0.0.1:7001", weight = -1 }]"#,
        ),
        9,
        "clusters[0].hosts[0].weight",
        "-1",
    );
    assert_err(
        &edit(r#"hosts = ["127.0.0.1:7001"]"#, "hosts = [7001]"),
        9,
        "clusters[0].hosts[0]",
        "invalid type",
    );
    assert_err(
        &format!("{MINIMAL}lb_policy = \"least_connection\"\n"),
        10,
        "clusters[0].lb_policy",
        "unknown variant `least_connection`, expected one of `ketama`, `modula`, `random`, \
         `round_robin`, `least_request`, `ring_hash`, `maglev`",
    );
    assert_err(
        &format!("{MINIMAL}type = \"original_dst\"\n"),
        10,
        "clusters[0].type",
        "unknown variant `original_dst`",
    );
}

#[test]
fn zero_workers_and_connections() {
    let e = err(&format!("{MINIMAL}[runtime]\nworkers = 0\n"));
    assert_eq!(
        e,
        "t.toml:11:11: runtime.workers: must be at least 1 (omit it to use one worker per CPU)"
    );
    assert_err(
        &format!("{MINIMAL}connections_per_host = 0\n"),
        10,
        "clusters[0].connections_per_host",
        "must be at least 1",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = [{ address = "127.0.0.1:7001", weight = 0 }]"#,
        ),
        9,
        "clusters[0].hosts[0].weight",
        "must be at least 1",
    );
}

#[test]
fn bad_addresses() {
    let e = err(&edit(
        r#"address = "127.0.0.1:6380""#,
        r#"address = "127.0.0.1""#,
    ));
    assert_eq!(
        e,
        "t.toml:3:11: listeners[0].address: invalid address \"127.0.0.1\": expected host:port, \
         e.g. \"127.0.0.1:6379\""
    );
    assert_err(
        &edit(
            r#"address = "127.0.0.1:6380""#,
            r#"address = "127.0.0.1:99999""#,
        ),
        3,
        "listeners[0].address",
        "invalid address",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = ["127.0.0.1:0"]"#,
        ),
        9,
        "clusters[0].hosts[0]",
        "port 0",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = [{ address = "no-such-host.invalid:7001" }]"#,
        ),
        9,
        "clusters[0].hosts[0].address",
        "cannot resolve",
    );
    assert_err(
        &format!("{MINIMAL}[admin]\naddress = \"::1:9901\"\n"),
        11,
        "admin.address",
        "write IPv6 addresses in brackets",
    );
}

#[test]
fn ipv6_and_hostnames() {
    let text = edit(
        r#"hosts = ["127.0.0.1:7001"]"#,
        r#"hosts = ["[::1]:7001", "localhost:7002"]"#,
    );
    let c = parse(&text, "t.toml").expect("parses");
    let hosts = &c.clusters[0].hosts;
    assert_eq!(
        hosts[0].address,
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 7001)
    );
    assert_eq!(hosts[0].address_text, "[::1]:7001");
    assert!(
        hosts[1].address.ip().is_loopback(),
        "{:?}",
        hosts[1].address
    );
    assert_eq!(hosts[1].address.port(), 7002);
    assert_eq!(hosts[1].address_text, "localhost:7002");
}

#[test]
fn dangling_cluster() {
    let e = err(&edit(r#"cluster = "cache""#, r#"cluster = "nosuch""#));
    assert_eq!(
        e,
        "t.toml:6:11: listeners[0].prefix_routes.catch_all_route.cluster: unknown cluster \
         \"nosuch\""
    );
}

#[test]
fn missing_catch_all_route() {
    let e = err(&edit(
        "[listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n",
        "# no route\n#\n",
    ));
    assert!(
        e.starts_with("t.toml:1:1: listeners[0].prefix_routes.catch_all_route: missing"),
        "{e}"
    );
    assert_err(
        &edit(
            "[listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n",
            "[listeners.prefix_routes]\n#\n",
        ),
        5,
        "listeners[0].prefix_routes.catch_all_route",
        "with no routes, a catch-all route naming a cluster is required",
    );
}

#[test]
fn duplicates() {
    let second = |name: &str, addr: &str| {
        format!(
            "{MINIMAL}[[listeners]]\nname = \"{name}\"\naddress = \"{addr}\"\nop_timeout = \"1s\"\n\
             prefix_routes.catch_all_route.cluster = \"cache\"\n"
        )
    };
    assert_err(
        &second("main", "127.0.0.1:6381"),
        11,
        "listeners[1].name",
        "duplicate listener name \"main\" (also listeners[0].name)",
    );
    assert_err(
        &second("other", "127.0.0.1:6380"),
        12,
        "listeners[1].address",
        "duplicate listener address 127.0.0.1:6380 (also listeners[0].address)",
    );
    // Port 0 means "pick a free port", so it may repeat.
    assert!(
        parse(
            &second("other", "127.0.0.1:0").replace("127.0.0.1:6380", "127.0.0.1:0"),
            "t.toml"
        )
        .is_ok()
    );
    assert_err(
        &format!("{MINIMAL}[[clusters]]\nname = \"cache\"\nhosts = [\"127.0.0.1:7002\"]\n"),
        11,
        "clusters[1].name",
        "duplicate cluster name \"cache\" (also clusters[0].name)",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            "hosts = [\n  \"127.0.0.1:7001\",\n  { address = \"127.0.0.1:7001\" },\n]",
        ),
        11,
        "clusters[0].hosts[1].address",
        "duplicate host 127.0.0.1:7001 (also clusters[0].hosts[0])",
    );
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            "hosts = [\n  { address = \"127.0.0.1:7001\", name = \"a\" },\n  { address = \"127.0.0.1:7002\", name = \"a\" },\n]",
        ),
        11,
        "clusters[0].hosts[1].name",
        "duplicate host name \"a\"",
    );
    assert_err(
        &format!("{MINIMAL}[admin]\naddress = \"127.0.0.1:6380\"\n"),
        3,
        "listeners[0].address",
        "already used by admin.address",
    );
}

#[test]
fn empty_hosts_and_names() {
    let e = err(&edit(r#"hosts = ["127.0.0.1:7001"]"#, "hosts = []"));
    assert_eq!(
        e,
        "t.toml:9:9: clusters[0].hosts: a cluster needs at least one host"
    );
    assert_err(
        &edit(r#"name = "main""#, r#"name = """#),
        2,
        "listeners[0].name",
        "must not be empty",
    );
}

#[test]
fn auth_rules() {
    assert_err(
        &format!("{MINIMAL}auth_username = \"u\"\n"),
        10,
        "clusters[0].auth_username",
        "requires auth_password",
    );
    assert_err(
        &edit(
            "op_timeout = \"1s\"\n",
            "op_timeout = \"1s\"\ndownstream_auth_username = \"u\"\n",
        ),
        5,
        "listeners[0].downstream_auth_username",
        "requires downstream_auth_passwords",
    );
    assert_err(
        &edit(
            "op_timeout = \"1s\"\n",
            "op_timeout = \"1s\"\ndownstream_auth_passwords = [\"a\", \"\"]\n",
        ),
        5,
        "listeners[0].downstream_auth_passwords[1]",
        "must not be empty",
    );
    let c = parse(&format!("{MINIMAL}auth_password = \"pw\"\n"), "t.toml").expect("parses");
    assert_eq!(c.clusters[0].auth_password.as_deref(), Some("pw"));
}

#[test]
fn bad_log_level() {
    assert_err(
        &format!("{MINIMAL}[runtime]\nlog_level = \"respite=loud\"\n"),
        11,
        "runtime.log_level",
        "invalid log filter",
    );
}

#[test]
fn no_listeners() {
    let e = err("[[clusters]]\nname = \"cache\"\nhosts = [\"127.0.0.1:7001\"]\n");
    assert_eq!(
        e,
        "t.toml: listeners: at least one [[listeners]] table is required"
    );
}

#[test]
fn syntax_error_has_line() {
    let e = err(&edit(r#"name = "main""#, r#"name = "main"#));
    assert!(e.starts_with("t.toml:2:"), "{e}");
}

#[test]
fn column_counts_characters() {
    let line = r#"hosts = [{ name = "é", address = "127.0.0.1:7001", weight = 0 }]"#;
    let col = line.find("0 }").map(|b| line[..b].chars().count() + 1);
    assert_eq!(col, Some(61));
    let e = err(&edit(r#"hosts = ["127.0.0.1:7001"]"#, line));
    assert!(
        e.starts_with("t.toml:9:61: clusters[0].hosts[0].weight: "),
        "{e}"
    );
}

#[test]
fn listener_errors_come_before_cluster_errors() {
    let text = edit(r#"op_timeout = "1s""#, r#"op_timeout = "1""#)
        .replace(r#"hosts = ["127.0.0.1:7001"]"#, "hosts = []");
    assert_err(&text, 4, "listeners[0].op_timeout", "time unit needed");
}

#[test]
fn custom_commands_and_max_request_bytes_are_checked() {
    let base = |extra: &str| {
        format!(
            "[[listeners]]\nname = \"l\"\naddress = \"127.0.0.1:6380\"\nop_timeout = \"1s\"\n{extra}\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
             [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n"
        )
    };
    let e = parse(&base("custom_commands = [\"get\"]"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:5:"), "{e}");
    assert!(
        e.contains("listeners[0].custom_commands[0]") && e.contains("built-in"),
        "{e}"
    );
    let e = parse(&base("max_request_bytes = 0"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml:5:") && e.contains("listeners[0].max_request_bytes"),
        "{e}"
    );
}

#[test]
fn pubsub_output_buffer_limit_defaults_to_redis_and_names_bad_keys() {
    let base = |table: &str| {
        format!(
            "[[listeners]]\nname = \"l\"\naddress = \"127.0.0.1:6380\"\nop_timeout = \"1s\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n{table}\n\
             [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n"
        )
    };
    let c = parse(&base(""), "t.toml").unwrap();
    assert_eq!(
        c.listeners[0].client_output_buffer_limit_pubsub,
        OutputBufferLimit {
            hard_limit: 32 << 20,
            soft_limit: 8 << 20,
            soft_limit_for: Duration::from_secs(60),
        }
    );
    let c = parse(
        &base("[listeners.client_output_buffer_limit_pubsub]\nhard_limit = 1024\nsoft_limit_for = \"5s\""),
        "t.toml",
    )
    .unwrap();
    let l = c.listeners[0].client_output_buffer_limit_pubsub;
    assert_eq!(
        (l.hard_limit, l.soft_limit, l.soft_limit_for),
        (1024, 8 << 20, Duration::from_secs(5))
    );
    let e = parse(
        &base("[listeners.client_output_buffer_limit_pubsub]\nsoft_limit_for = \"5\""),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("t.toml:8:")
            && e.contains("client_output_buffer_limit_pubsub.soft_limit_for"),
        "{e}"
    );
    let e = parse(
        &base("[listeners.client_output_buffer_limit_pubsub]\nhard = 1"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hard"), "{e}");
}

#[test]
fn normal_output_buffer_limit_and_maxmemory_clients() {
    let base = |head: &str, table: &str| {
        format!(
            "{head}[[listeners]]\nname = \"l\"\naddress = \"127.0.0.1:6380\"\nop_timeout = \"1s\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n{table}\n\
             [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n"
        )
    };
    let c = parse(&base("", ""), "t.toml").unwrap();
    assert_eq!(
        c.listeners[0].client_output_buffer_limit,
        OutputBufferLimit {
            hard_limit: 1 << 30,
            soft_limit: 64 << 20,
            soft_limit_for: Duration::from_secs(60),
        }
    );
    assert_eq!(c.runtime.maxmemory_clients, 1 << 30);
    let c = parse(
        &base(
            "[runtime]\nmaxmemory_clients = 0\n",
            "[listeners.client_output_buffer_limit]\nhard_limit = 65536\nsoft_limit = 0",
        ),
        "t.toml",
    )
    .unwrap();
    let l = c.listeners[0].client_output_buffer_limit;
    assert_eq!((l.hard_limit, l.soft_limit), (65536, 0));
    assert_eq!(c.runtime.maxmemory_clients, 0);
    let e = parse(
        &base(
            "",
            "[listeners.client_output_buffer_limit]\nsoft_limit_for = \"x\"",
        ),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("client_output_buffer_limit.soft_limit_for"),
        "{e}"
    );
}

#[test]
fn redis_cluster_keys() {
    let text = format!(
        "{}type = \"redis_cluster\"\ncluster_refresh_rate = \"1s\"\ncluster_refresh_timeout = \
         \"500ms\"\nredirect_refresh_interval = \"100ms\"\nredirect_refresh_threshold = 0\n\
         failure_refresh_threshold = 2\n",
        edit(
            "op_timeout = \"1s\"",
            "op_timeout = \"1s\"\nread_policy = \"prefer_replica\""
        )
    );
    let c = parse(&text, "t.toml").unwrap();
    let cl = &c.clusters[0];
    assert_eq!(cl.cluster_type, ClusterType::RedisCluster);
    assert_eq!(
        cl.redis_cluster,
        RedisClusterConfig {
            cluster_refresh_rate: Duration::from_secs(1),
            cluster_refresh_timeout: Duration::from_millis(500),
            redirect_refresh_interval: Duration::from_millis(100),
            redirect_refresh_threshold: 0,
            failure_refresh_threshold: 2,
            host_degraded_refresh_threshold: 1,
            zone_discovery: false,
        }
    );
    assert_eq!(c.listeners[0].read_policy, ReadPolicy::PreferReplica);
    assert_eq!(c.listeners[0].max_upstream_unknown_connections, 100);

    // Defaults (Envoy's, except failure_refresh_threshold) and read_policy's default.
    let c = parse(&format!("{MINIMAL}type = \"redis_cluster\"\n"), "t.toml").unwrap();
    assert_eq!(c.clusters[0].redis_cluster, RedisClusterConfig::default());
    assert_eq!(
        c.clusters[0].redis_cluster.cluster_refresh_rate,
        Duration::from_secs(5)
    );
    assert_eq!(c.listeners[0].read_policy, ReadPolicy::Primary);

    // 0 = no minimum gap between triggered refreshes (Envoy's meaning; its Redis Cluster
    // integration test sets it); the other durations must still be positive.
    let c = parse(
        &format!("{MINIMAL}type = \"redis_cluster\"\nredirect_refresh_interval = \"0s\"\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        c.clusters[0].redis_cluster.redirect_refresh_interval,
        Duration::ZERO
    );
}

#[test]
fn redis_cluster_key_errors() {
    assert_err(
        &format!("{MINIMAL}cluster_refresh_rate = \"1s\"\n"),
        10,
        "clusters[0].cluster_refresh_rate",
        "applies only to type = \"redis_cluster\"",
    );
    assert_err(
        &format!("{MINIMAL}type = \"redis_cluster\"\nlb_policy = \"maglev\"\n"),
        11,
        "clusters[0].lb_policy",
        "does not apply to type \"redis_cluster\"",
    );
    assert_err(
        &format!("{MINIMAL}type = \"redis_cluster\"\ncluster_refresh_rate = \"0s\"\n"),
        11,
        "clusters[0].cluster_refresh_rate",
        "",
    );
    assert_err(
        &edit(
            "op_timeout = \"1s\"",
            "op_timeout = \"1s\"\nread_policy = \"master\"",
        ),
        5,
        "listeners[0].read_policy",
        "unknown variant `master`",
    );
    // Cluster-only listener keys on a listener routing to a static cluster.
    assert_err(
        &edit(
            "op_timeout = \"1s\"",
            "op_timeout = \"1s\"\nread_policy = \"replica\"",
        ),
        5,
        "listeners[0].read_policy",
        "applies only to a listener routing to a type = \"redis_cluster\" cluster",
    );
    assert_err(
        &edit(
            "op_timeout = \"1s\"",
            "op_timeout = \"1s\"\nmax_upstream_unknown_connections = 5",
        ),
        5,
        "listeners[0].max_upstream_unknown_connections",
        "(none of its routes does)",
    );
}

#[test]
fn health_outlier_and_connection_keys() {
    let text = format!(
        "{MINIMAL}on_unhealthy = \"rehash\"\nconnection_rate_limit_per_sec = 5\n\
         max_pending_requests = 10\n\
         [[clusters.health_checks]]\ninterval = \"250ms\"\ntimeout = \"100ms\"\n\
         unhealthy_threshold = 2\nhealthy_threshold = 1\nkey = \"drain-key\"\n\
         [[clusters.health_checks]]\n\
         [clusters.outlier_detection]\nconsecutive_5xx = 3\nbase_ejection_time = \"2s\"\n\
         max_ejection_percent = 50\n\
         [clusters.tcp_keepalive]\nkeepalive_time = \"10s\"\n"
    );
    let c = parse(&text, "t.toml").expect("parses");
    let cl = &c.clusters[0];
    assert_eq!(cl.on_unhealthy, OnUnhealthy::Rehash);
    assert_eq!(cl.connection_rate_limit_per_sec, 5);
    assert_eq!(cl.max_pending_requests, 10);
    assert_eq!(
        cl.health_checks,
        vec![
            HealthCheckConfig {
                interval: Duration::from_millis(250),
                interval_jitter: Duration::from_millis(25),
                timeout: Duration::from_millis(100),
                unhealthy_threshold: 2,
                healthy_threshold: 1,
                no_traffic_interval: Duration::from_secs(60),
                key: Some("drain-key".into()),
            },
            HealthCheckConfig {
                interval: Duration::from_secs(5),
                interval_jitter: Duration::from_millis(500),
                timeout: Duration::from_secs(1),
                unhealthy_threshold: 3,
                healthy_threshold: 2,
                no_traffic_interval: Duration::from_secs(60),
                key: None,
            },
        ]
    );
    assert_eq!(
        cl.outlier_detection,
        Some(OutlierDetectionConfig {
            consecutive_5xx: 3,
            base_ejection_time: Duration::from_secs(2),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 50,
            interval: Duration::from_secs(10),
        })
    );
    assert_eq!(
        cl.tcp_keepalive,
        TcpKeepalive {
            keepalive_time: Duration::from_secs(10),
            ..TcpKeepalive::default()
        }
    );
}

#[test]
fn bad_health_outlier_and_connection_keys() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[[clusters.health_checks]]\nunhealthy_threshold = 0\n",
            11,
            "clusters[0].health_checks[0].unhealthy_threshold",
            "at least 1",
        ),
        (
            "[[clusters.health_checks]]\ninterval = \"0s\"\n",
            11,
            "clusters[0].health_checks[0].interval",
            "greater than zero",
        ),
        (
            "[[clusters.health_checks]]\nkey = \"\"\n",
            11,
            "clusters[0].health_checks[0].key",
            "must not be empty",
        ),
        (
            "[clusters.outlier_detection]\nmax_ejection_percent = 101\n",
            11,
            "clusters[0].outlier_detection.max_ejection_percent",
            "between 0 and 100",
        ),
        (
            "[clusters.outlier_detection]\nbase_ejection_time = \"10s\"\nmax_ejection_time = \"1s\"\n",
            12,
            "clusters[0].outlier_detection.max_ejection_time",
            "base_ejection_time",
        ),
        (
            "[clusters.tcp_keepalive]\nkeepalive_time = \"1500ms\"\n",
            11,
            "clusters[0].tcp_keepalive.keepalive_time",
            "whole number of seconds",
        ),
        (
            "[clusters.tcp_keepalive]\nkeepalive_interval = \"32768s\"\n",
            11,
            "clusters[0].tcp_keepalive.keepalive_interval",
            "at most 32767s",
        ),
        (
            "[clusters.tcp_keepalive]\nkeepalive_probes = 128\n",
            11,
            "clusters[0].tcp_keepalive.keepalive_probes",
            "between 1 and 127",
        ),
        (
            "[[clusters.health_checks]]\ninterval = \"18446744073709551615s\"\n",
            11,
            "clusters[0].health_checks[0].interval",
            "at most 365 days",
        ),
        (
            "[clusters.outlier_detection]\nbase_ejection_time = \"400d\"\n",
            11,
            "clusters[0].outlier_detection.base_ejection_time",
            "at most 365 days",
        ),
        (
            "max_pending_requests = 0\n",
            10,
            "clusters[0].max_pending_requests",
            "at least 1",
        ),
        (
            "type = \"redis_cluster\"\non_unhealthy = \"rehash\"\n",
            11,
            "clusters[0].on_unhealthy",
            "redis_cluster",
        ),
        (
            "host_degraded_refresh_threshold = 2\n",
            10,
            "clusters[0].host_degraded_refresh_threshold",
            "applies only to type = \"redis_cluster\"",
        ),
    ];
    for (extra, line, key, fragment) in cases {
        assert_err(&format!("{MINIMAL}{extra}"), *line, key, fragment);
    }
    // An unknown key inside the new tables is named with its line.
    let e = err(&format!(
        "{MINIMAL}[[clusters.health_checks]]\nintervall = \"1s\"\n"
    ));
    assert!(e.starts_with("t.toml:11:"), "{e}");
    assert!(e.contains("intervall"), "{e}");
}

#[test]
fn observability_keys() {
    let listener_keys = "latency_in_micros = true\nenable_command_stats = true\n\
        big_value_bytes = 1024\n";
    let text = MINIMAL.replace(
        "op_timeout = \"1s\"\n",
        &format!(
            "op_timeout = \"1s\"\n{listener_keys}[listeners.hot_keys]\ntop_k = 20\n\
             window = \"30s\"\n[listeners.access_log]\npath = \"stderr\"\nsample_rate = 0.25\n"
        ),
    ) + "[runtime]\nlog_format = \"json\"\n";
    let c = parse(&text, "t.toml").expect("parses");
    let l = &c.listeners[0];
    assert!(l.latency_in_micros && l.enable_command_stats);
    assert_eq!(l.big_value_bytes, 1024);
    assert_eq!(
        l.hot_keys,
        Some(HotKeysConfig {
            top_k: 20,
            window: Duration::from_secs(30)
        })
    );
    assert_eq!(
        l.access_log,
        Some(AccessLogConfig {
            path: "stderr".into(),
            sample_rate: 0.25
        })
    );
    assert_eq!(c.runtime.log_format, LogFormat::Json);

    let d = parse(MINIMAL, "t.toml").expect("parses");
    let l = &d.listeners[0];
    assert!(!l.latency_in_micros && !l.enable_command_stats);
    assert_eq!((l.hot_keys.clone(), l.big_value_bytes), (None, 0));
    assert_eq!(l.access_log, None);
    assert_eq!(d.runtime.log_format, LogFormat::Text);
    let empty_hot = MINIMAL.replace(
        "[listeners.prefix_routes",
        "[listeners.hot_keys]\n[listeners.prefix_routes",
    );
    let h = parse(&empty_hot, "t.toml").expect("parses");
    assert_eq!(h.listeners[0].hot_keys, Some(HotKeysConfig::default()));

    let with = |extra: &str| {
        MINIMAL.replace(
            "[listeners.prefix_routes",
            &format!("{extra}[listeners.prefix_routes"),
        )
    };
    assert_err(
        &with("[listeners.hot_keys]\ntop_k = 0\n"),
        6,
        "listeners[0].hot_keys.top_k",
        "between 1 and 1000",
    );
    assert_err(
        &with("[listeners.hot_keys]\nwindow = \"500ms\"\n"),
        6,
        "listeners[0].hot_keys.window",
        "at least 1s",
    );
    assert_err(
        &with("[listeners.access_log]\npath = \"\"\n"),
        6,
        "listeners[0].access_log.path",
        "must not be empty",
    );
    assert_err(
        &with("[listeners.access_log]\npath = \"/tmp/a\"\nsample_rate = 0.0\n"),
        7,
        "listeners[0].access_log.sample_rate",
        "greater than 0",
    );
    assert_err(
        &with("[listeners.access_log]\nsample_rate = 0.5\n"),
        5,
        "listeners[0].access_log.path",
        "missing",
    );
    assert!(err("[runtime]\nlog_format = \"xml\"\n").contains("log_format"));
}

/// Envoy's level names are accepted; a bare word that is not a level is refused instead of
/// being read as a target name (which silently turned every other log line off).
#[test]
fn log_filters() {
    assert_eq!(log_filter("warning").as_deref(), Ok("warn"));
    assert_eq!(log_filter("critical").as_deref(), Ok("error"));
    assert_eq!(log_filter("INFO").as_deref(), Ok("info"));
    assert_eq!(
        log_filter("info, respite=Warning").as_deref(),
        Ok("info,respite=warn")
    );
    assert_eq!(
        log_filter("respite::upstream=debug").as_deref(),
        Ok("respite::upstream=debug")
    );
    for bad in ["verbose", "err0r", "a,a,a", "", " , "] {
        assert!(log_filter(bad).is_err(), "{bad:?} accepted");
    }
    let c = parse(
        &format!("{MINIMAL}[runtime]\nlog_level = \"warning\"\n"),
        "t.toml",
    )
    .expect("parses");
    assert_eq!(c.runtime.log_level.as_deref(), Some("warn"));
    assert_err(
        &format!("{MINIMAL}[runtime]\nlog_level = \"verbose\"\n"),
        11,
        "runtime.log_level",
        "not a level",
    );
}

/// Names that become a segment of dotted stat names may not contain a dot.
#[test]
fn stat_names_have_no_dots() {
    let e = MINIMAL.replace("name = \"main\"", "name = \"main.v2\"");
    assert_err(&e, 2, "listeners[0].name", "contains a dot");
    let ok = MINIMAL.replace(
        "name = \"main\"",
        "name = \"main.v2\"\nstat_prefix = \"main_v2\"",
    );
    assert_eq!(
        parse(&ok, "t.toml").expect("parses").listeners[0].stat_prefix,
        "main_v2"
    );
    let e = MINIMAL.replace(
        "op_timeout = \"1s\"",
        "stat_prefix = \"a.b\"\nop_timeout = \"1s\"",
    );
    assert_err(&e, 4, "listeners[0].stat_prefix", "contains a dot");
    let e = MINIMAL
        .replace("name = \"cache\"", "name = \"rc.v2\"")
        .replace("cluster = \"cache\"", "cluster = \"rc.v2\"");
    assert_err(&e, 8, "clusters[0].name", "contains a dot");
}

/// `type = "eds"`: hosts come from respite-control and may be none at all (every request then
/// answers `no upstream host`); `parse_pushed` takes a config with no listeners, `parse` not.
#[test]
fn eds_clusters_may_be_empty_and_pushed_configs_may_have_no_listeners() {
    let text = "[[clusters]]\nname = \"e\"\ntype = \"eds\"\nhosts = []\n";
    let c = parse_pushed(text, "push").expect("eds with no hosts");
    assert_eq!(c.clusters[0].cluster_type, ClusterType::Eds);
    assert!(c.clusters[0].hosts.is_empty());
    assert!(c.listeners.is_empty());
    let e = parse(text, "t.toml").expect_err("a file needs a listener");
    assert!(e.to_string().contains("at least one [[listeners]]"), "{e}");
    let static_empty = "[[clusters]]\nname = \"s\"\nhosts = []\n";
    let e = parse_pushed(static_empty, "push").expect_err("static needs hosts");
    assert!(
        e.to_string().contains("a cluster needs at least one host"),
        "{e}"
    );
}

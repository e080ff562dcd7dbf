//! The file model serializes back into the file format: parsing the serialized text gives the
//! same config (or the same error) as parsing the original.

use super::raw::RawConfig;
use super::{ConfigError, parse};

/// Every key of every table, with values other than the defaults where a default exists.
const EVERY_KEY: &str = r#"
[admin]
address = "127.0.0.1:9902"
[runtime]
workers = 3
pin_workers = true
drain_timeout = "1m"
log_level = "respite=debug,warn"
log_format = "json"
[sockmap]
enabled = true
cgroup = "/sys/fs/cgroup/respite"
ports = [6379, "7000-7005"]
upstreams = true
bpffs = "/sys/fs/bpf"
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
custom_commands = ["BF.ADD"]
max_request_bytes = 1048576
read_policy = "prefer_replica"
protocol_version = "resp3"
max_upstream_unknown_connections = 7
latency_in_micros = true
enable_command_stats = true
big_value_bytes = 4096
[listeners.hot_keys]
top_k = 20
window = "30s"
[listeners.access_log]
path = "stderr"
sample_rate = 0.5
[[listeners.faults]]
fault_type = "delay"
fault_enabled = 12.5
delay = "20ms"
commands = ["GET", "set"]
[listeners.prefix_routes]
case_insensitive = true
[[listeners.prefix_routes.routes]]
prefix = "user:"
cluster = "cache"
remove_prefix = true
key_formatter = "{%KEY%}"
read_command_policy = { cluster = "replicas" }
request_mirror_policy = [{ cluster = "shadow", exclude_read_commands = true, runtime_fraction = 50.0 }]
[listeners.prefix_routes.catch_all_route]
cluster = "slots"
[[clusters]]
name = "cache"
type = "static"
lb_policy = "ring_hash"
connect_timeout = "500ms"
auth_username = "proxy"
auth_password = "pw"
connections_per_host = 2
on_unhealthy = "rehash"
connection_rate_limit_per_sec = 0
max_pending_requests = 64
hosts = ["127.0.0.1:7001", { address = "127.0.0.1:7002", weight = 2, name = "redis-2" }]
[[clusters.health_checks]]
interval = "2s"
interval_jitter = "100ms"
timeout = "500ms"
unhealthy_threshold = 4
healthy_threshold = 3
no_traffic_interval = "30s"
key = "maintenance"
[clusters.outlier_detection]
consecutive_5xx = 3
base_ejection_time = "10s"
max_ejection_time = "60s"
max_ejection_percent = 50
interval = "5s"
[clusters.tcp_keepalive]
keepalive_time = "60s"
keepalive_interval = "10s"
keepalive_probes = 5
[[clusters]]
name = "replicas"
type = "eds"
hosts = []
[[clusters]]
name = "shadow"
lb_policy = "maglev"
hosts = [{ address = "127.0.0.1:7003" }]
[[clusters]]
name = "slots"
type = "redis_cluster"
cluster_refresh_rate = "10s"
cluster_refresh_timeout = "2s"
redirect_refresh_interval = "1s"
redirect_refresh_threshold = 3
failure_refresh_threshold = 0
host_degraded_refresh_threshold = 2
hosts = ["127.0.0.1:7100"]
"#;

/// The text parsed as the file model and serialized again.
fn reserialized(text: &str) -> String {
    let raw: RawConfig = toml::from_str(text).expect("the file model reads the text");
    raw.to_toml().expect("the file model serializes")
}

/// The error without its location: a reserialized text has its keys on other lines.
fn meaning(r: Result<super::Config, ConfigError>) -> Result<super::Config, String> {
    r.map_err(|e| e.reason())
}

#[test]
fn every_key_serializes_back_to_the_same_config() {
    let want = parse(EVERY_KEY, "t.toml").expect("the text is valid");
    let again = reserialized(EVERY_KEY);
    assert_eq!(parse(&again, "t.toml"), Ok(want), "{again}");
}

#[test]
fn example_file_serializes_back_to_the_same_config() {
    let text = include_str!("../../../deploy/examples/respite.toml");
    let again = reserialized(text);
    assert_eq!(parse(&again, "t.toml"), parse(text, "t.toml"), "{again}");
}

#[test]
fn invalid_values_serialize_back_to_the_same_error() {
    let bad = [
        EVERY_KEY.replace(r#"op_timeout = "250ms""#, "op_timeout = 250"),
        EVERY_KEY.replace(r#"delay = "20ms""#, "delay = 1.5"),
        EVERY_KEY.replace(r#"ports = [6379, "7000-7005"]"#, "ports = [0]"),
    ];
    for text in bad {
        let want = meaning(parse(&text, "t.toml"));
        assert!(want.is_err(), "{text}");
        assert_eq!(meaning(parse(&reserialized(&text), "t.toml")), want);
    }
}

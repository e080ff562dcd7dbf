//! The deploy/ observability files and `respite top` against a real respite over real
//! redis-servers:
//! - every metric that `deploy/grafana/respite.json` and `deploy/prometheus/alerts.yml` query
//!   exists in a live `/stats/prometheus` after traffic, and both files have the structure
//!   Grafana and Prometheus need (a structural check; `promtool` is not required);
//! - `respite top --once` prints one 120x40 frame with the figures of the traffic it watched.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use respite::stats::prometheus::{
    LABEL_CLUSTER_NAME, LABEL_HOST, LABEL_REDIS_COMMAND, LABEL_REDIS_PREFIX,
};
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port, respite_bin};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

/// A respite over two redis-servers with every stat family the dashboards use turned on:
/// active health checks, outlier detection, per-command upstream stats.
fn respite_over(servers: &[RedisServer]) -> Respite {
    let port = free_port();
    let admin = free_port();
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| format!("\"{}\"", s.addr()))
        .collect();
    let config = format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "1s"
latency_in_micros = true
enable_command_stats = true
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
type = "static"
lb_policy = "ketama"
hosts = [{}]
[[clusters.health_checks]]
interval = "200ms"
timeout = "100ms"
unhealthy_threshold = 2
healthy_threshold = 1
[clusters.outlier_detection]
consecutive_5xx = 5
"#,
        hosts.join(", ")
    );
    Respite::start(&config, port, admin)
}

/// GETs, SETs, an unknown command and a wrong-arity one, so that every counter family moves.
fn traffic(addr: &str, rounds: usize) {
    let mut c = RawClient::connect(addr);
    for i in 0..rounds {
        // Varied keys: twemproxy's ketama hashes keys with FNV-1a, under which `k0`..`k49` can
        // all land on one of two hosts for some port pairs.
        let key = format!("k{:x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        c.cmd(&[b"SET", key.as_bytes(), b"v"]);
        c.cmd(&[b"GET", key.as_bytes()]);
    }
    c.cmd(&[b"NOSUCHCOMMAND"]);
    c.cmd(&[b"GET"]);
}

/// Every sample's metric name in a Prometheus text exposition (`name{…} v` or `name v`).
fn series_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Identifiers `envoy_…` in a PromQL expression that are metric names (not the label names).
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let labels = [
        LABEL_CLUSTER_NAME,
        LABEL_HOST,
        LABEL_REDIS_COMMAND,
        LABEL_REDIS_PREFIX,
    ];
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut i = 0;
    while i < b.len() {
        if ident(b[i]) && (i == 0 || !ident(b[i - 1])) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            if word.starts_with("envoy_") && !labels.contains(&word) {
                out.insert(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every PromQL string of the dashboard: panel target `expr`s and variable queries.
fn dashboard_exprs(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let panels = d["panels"].as_array().expect("panels");
    for p in panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("target expr").to_owned());
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push(q.to_owned());
        }
    }
    out
}

/// Checks the dashboard's structure: schema, the `DS_PROMETHEUS` input and variable, the two
/// label variables, unique panel ids, every data panel on the Prometheus datasource.
fn check_dashboard(d: &Value) {
    let schema = d["schemaVersion"].as_u64().expect("schemaVersion");
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| v["name"].as_str().expect("variable name"))
        .collect();
    for want in ["DS_PROMETHEUS", LABEL_REDIS_PREFIX, LABEL_CLUSTER_NAME] {
        assert!(vars.contains(&want), "variable {want} missing: {vars:?}");
    }
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "duplicate panel id {id}");
        assert!(p["gridPos"]["w"].as_u64().is_some(), "panel {id} gridPos");
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "panel {id}");
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "panel {id} has no query");
        }
    }
}

/// Checks the rules file's structure (Prometheus rule file format): groups with a name and
/// rules, each rule an `alert` with an `expr`, a `for` duration, a severity and a summary.
fn alert_exprs(doc: &Yaml) -> Vec<(String, String)> {
    let groups = doc["groups"].as_vec().expect("groups");
    assert!(!groups.is_empty());
    let mut out = Vec::new();
    for g in groups {
        assert!(g["name"].as_str().is_some(), "group name");
        for r in g["rules"].as_vec().expect("rules") {
            let name = r["alert"].as_str().expect("alert name").to_owned();
            let expr = r["expr"].as_str().expect("expr").trim().to_owned();
            let dur = r["for"].as_str().unwrap_or_else(|| panic!("{name}: for"));
            assert!(
                humantime_like(dur),
                "{name}: `for: {dur}` is not a Prometheus duration"
            );
            assert!(
                r["labels"]["severity"].as_str().is_some(),
                "{name}: severity"
            );
            assert!(
                r["annotations"]["summary"].as_str().is_some(),
                "{name}: summary"
            );
            out.push((name, expr));
        }
    }
    out
}

/// `<n><unit>` with a Prometheus duration unit.
fn humantime_like(s: &str) -> bool {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && ["ms", "s", "m", "h", "d", "w", "y"].contains(&&s[digits..])
}

#[test]
fn dashboard_and_alerts_query_series_that_respite_exports() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let r = respite_over(&servers);
    traffic(&r.addr(), 200);
    // Histograms reach the shared shards on the workers' 100 ms flush; health checks run
    // every 200 ms.
    std::thread::sleep(Duration::from_millis(700));
    let (status, exposition) = r.admin_get("/stats/prometheus");
    assert_eq!(status, 200);
    let have = series_names(&exposition);

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy("grafana/respite.json")).expect("read dashboard"),
    )
    .expect("dashboard is JSON");
    check_dashboard(&dashboard);
    let alerts = YamlLoader::load_from_str(
        &std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("read alerts"),
    )
    .expect("alerts.yml is YAML");
    let rules = alert_exprs(&alerts[0]);
    let names: BTreeSet<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "RespiteAdminDown",
        "RespiteUpstreamHostEjected",
        "RespiteClusterDegraded",
        "RespiteCommandErrorRatioHigh",
        "RespiteCommandLatencyP99High",
    ] {
        assert!(names.contains(want), "alert {want} missing");
    }

    let mut used = BTreeSet::new();
    for e in dashboard_exprs(&dashboard) {
        used.extend(metrics_in(&e));
    }
    let dashboard_count = used.len();
    for (_, e) in &rules {
        used.extend(metrics_in(e));
    }
    println!(
        "{} metric names used ({dashboard_count} by the dashboard), {} series exported",
        used.len(),
        have.len()
    );
    let missing: Vec<&String> = used.iter().filter(|m| !have.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "metrics queried but not exported by /stats/prometheus: {missing:?}\nexported: {have:?}"
    );
    // The check itself must see names: a parser that found none would pass vacuously.
    assert!(
        used.len() >= 20,
        "only {} names found: {used:?}",
        used.len()
    );
}

#[test]
fn metric_name_extraction_ignores_labels_and_functions() {
    let m = metrics_in(
        r#"histogram_quantile(0.99, sum by (le, envoy_redis_prefix) (rate(envoy_redis_command_latency_bucket{envoy_redis_prefix=~"$envoy_redis_prefix"}[5m]))) / up"#,
    );
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        ["envoy_redis_command_latency_bucket"]
    );
    assert_eq!(
        series_names("# TYPE a counter\na{x=\"1\"} 2\nb 3\n"),
        ["a".to_owned(), "b".to_owned()].into()
    );
}

#[test]
fn top_once_prints_a_frame_of_live_traffic() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let r = respite_over(&servers);
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (addr, stop) = (r.addr(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                traffic(&addr, 50);
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let admin = format!("127.0.0.1:{}", r.admin_port);
    let out = Command::new(respite_bin())
        .args(["top", "--admin", &admin, "--once", "--interval", "1s"])
        .output()
        .expect("run respite top");
    stop.store(true, Ordering::Relaxed);
    let rounds = load.join().expect("load thread");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "respite top failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rounds > 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 40, "a 120x40 frame");
    assert!(lines.iter().all(|l| l.chars().count() <= 120));
    assert!(
        text.contains(&format!("admin {admin}")),
        "header names the admin address"
    );
    // Command rows: the listener, the command, a non-zero rate, latencies in µs
    // (latency_in_micros = true in the config, read from /config_dump).
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches(|c: char| c == '│' || c.is_whitespace())
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for cmd in ["get", "set"] {
        let row = lines
            .iter()
            .map(|l| cells(l))
            .find(|c| c.len() >= 2 && c[0] == "main" && c[1] == cmd)
            .unwrap_or_else(|| panic!("no {cmd} row"));
        // listener command req/s err/s err% p50 unit p99 unit
        let rps: f64 = row[2].parse().unwrap_or_else(|_| panic!("rps in {row:?}"));
        assert!(rps > 0.0, "{cmd} rate {rps}: {row:?}");
        let p50: u64 = row[5].parse().unwrap_or_else(|_| panic!("p50 in {row:?}"));
        let p99: u64 = row[7].parse().unwrap_or_else(|_| panic!("p99 in {row:?}"));
        assert!(p50 > 0 && p50 <= p99, "{cmd} p50 {p50} p99 {p99}: {row:?}");
        assert_eq!((row[6].as_str(), row[8].as_str()), ("µs", "µs"), "{row:?}");
    }
    // Host rows: both backends, healthy, with traffic.
    for s in &servers {
        let row = lines
            .iter()
            .find(|l| l.contains(&s.addr()))
            .unwrap_or_else(|| panic!("no row for host {}", s.addr()));
        let c = cells(row);
        assert_eq!(
            (c[0].as_str(), c[2].as_str()),
            ("cache", "healthy"),
            "{row:?}"
        );
        let rps: f64 = c[4].parse().unwrap_or_else(|_| panic!("rps in {row:?}"));
        assert!(rps > 0.0, "host rate {rps}: {row:?}");
    }
}

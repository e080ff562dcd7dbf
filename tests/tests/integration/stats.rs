//! The exact-counters test: a scripted workload of known composition goes through
//! Respite to two real redis-servers, then every relevant counter must equal its expected value,
//! read from the admin `/stats` text AND from `/stats/prometheus` parsed by an independent
//! Prometheus text-format parser (`prometheus-parse`).
//!
//! Workload (one listener `main`, two workers, two backends, op_timeout 500ms):
//! - one connection: 500 SET, 1 000 GET (all hits), 20 unknown commands, 10 MGET and 5 DEL of
//!   two keys each (one key per backend, so each splits into two upstream requests);
//! - 3 protocol errors, each on its own connection (a protocol error closes it);
//! - 2 backend timeouts: the backend that owns the key is SIGSTOPped, then two `INCR`s in a
//!   row through Respite are each answered `-upstream failure` after op_timeout.
//!
//! Counters are compared as deltas over the workload (the harness's readiness probe connects
//! once before it). Expected values follow Envoy's meaning of each stat (its redis_proxy docs):
//! `downstream_rq_total` counts every request the proxy decoded, unknown commands included.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use prometheus_parse::{Scrape, Value};
use respite_tests::{Respite, free_port};

const GETS: u64 = 1_000;
const SETS: u64 = 500;
const UNKNOWN: u64 = 20;
const MGETS: u64 = 10;
const DELS: u64 = 5;
const PROTOCOL_ERRORS: u64 = 3;
/// One request times out on the stopped backend: the hung connection is then closed, and a
/// reconnect to a stopped host fails its handshake (its `PING` unanswered within
/// `connect_timeout`), so later requests fail fast instead of timing out.
const TIMEOUTS: u64 = 1;
const OP_TIMEOUT: Duration = Duration::from_millis(500);

fn config(port: u16, admin: u16, backends: &[String]) -> String {
    let hosts: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
op_timeout = "{}ms"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
hosts = [{}]
"#,
        OP_TIMEOUT.as_millis(),
        hosts.join(", ")
    )
}

/// One counter as both endpoints name it: the Envoy stat name, and the Prometheus metric with
/// its labels.
struct Stat {
    name: String,
    metric: &'static str,
    labels: Vec<(&'static str, String)>,
}

fn listener(rest: &str) -> Stat {
    let (metric, labels) = match rest.strip_prefix("command.") {
        Some(cmd_stat) => {
            let (cmd, stat) = cmd_stat.split_once('.').expect("command.<cmd>.<stat>");
            let metric = match stat {
                "total" => "envoy_redis_command_total",
                "success" => "envoy_redis_command_success",
                "error" => "envoy_redis_command_error",
                other => panic!("no metric for {other}"),
            };
            (
                metric,
                vec![
                    ("envoy_redis_prefix", "main".to_string()),
                    ("envoy_redis_command", cmd.to_string()),
                ],
            )
        }
        None => {
            let metric = match rest {
                "downstream_rq_total" => "envoy_redis_downstream_rq_total",
                "downstream_cx_total" => "envoy_redis_downstream_cx_total",
                "downstream_cx_protocol_error" => "envoy_redis_downstream_cx_protocol_error",
                "splitter.unsupported_command" => "envoy_redis_splitter_unsupported_command",
                other => panic!("no metric for {other}"),
            };
            (metric, vec![("envoy_redis_prefix", "main".to_string())])
        }
    };
    Stat {
        name: format!("redis.main.{rest}"),
        metric,
        labels,
    }
}

fn host_stat(host: &str, stat: &str) -> Stat {
    Stat {
        name: format!("cluster.cache.host.{host}.{stat}"),
        metric: match stat {
            "rq_total" => "envoy_cluster_host_rq_total",
            "rq_error" => "envoy_cluster_host_rq_error",
            other => panic!("no metric for {other}"),
        },
        labels: vec![
            ("envoy_cluster_name", "cache".to_string()),
            ("envoy_upstream_host", host.to_string()),
        ],
    }
}

/// `/stats/prometheus` parsed by `prometheus-parse`.
fn scrape(respite: &Respite) -> Scrape {
    let (status, body) = respite.admin_get("/stats/prometheus");
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("prometheus text parses")
}

/// The value of a counter or gauge sample (0 when the series is absent).
fn prom_value(scrape: &Scrape, stat: &Stat) -> f64 {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == stat.metric
                && s.labels.len() == stat.labels.len()
                && stat
                    .labels
                    .iter()
                    .all(|(k, v)| s.labels.get(k) == Some(v.as_str()))
        })
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{}: not a counter: {other:?}", stat.metric),
        })
        .collect();
    assert!(
        found.len() <= 1,
        "{} appears {} times",
        stat.name,
        found.len()
    );
    found.first().copied().unwrap_or(0.0)
}

/// The number of values in histogram `metric` with `labels`, from the parsed `+Inf` bucket;
/// `None` when the histogram is absent.
fn prom_histogram_count(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .find_map(|s| match &s.value {
            Value::Histogram(buckets) => buckets
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map(|b| b.count),
            _ => None,
        })
}

fn text_stats(respite: &Respite) -> BTreeMap<String, i64> {
    respite.stats()
}

#[test]
fn every_counter_is_exact_after_a_known_workload() {
    let backends = servers(2);
    let addrs = addrs(&backends);
    let placement = Placement::new(&addrs);
    let (port, admin) = (free_port(), free_port());
    let respite = Respite::start(&config(port, admin, &addrs), port, admin);

    let before_text = text_stats(&respite);
    let before_prom = scrape(&respite);

    // 500 SET, 1 000 GET (hits), 20 unknown, 10 MGET + 5 DEL across both backends.
    let mut c = respite.raw();
    let keys: Vec<String> = (0..SETS).map(|i| format!("key:{i}")).collect();
    let sets: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .map(|k| cmd(&[b"SET", k.as_bytes(), format!("v-{k}").as_bytes()]))
        .collect();
    for r in pipelined(&mut c, &sets, 50) {
        assert_eq!(r, OK);
    }
    let gets: Vec<Vec<Vec<u8>>> = (0..GETS as usize)
        .map(|i| cmd(&[b"GET", keys[i % keys.len()].as_bytes()]))
        .collect();
    for (i, r) in pipelined(&mut c, &gets, 100).into_iter().enumerate() {
        let k = &keys[i % keys.len()];
        assert_eq!(r, bulk(format!("v-{k}").as_bytes()), "GET {k}");
    }
    for i in 0..UNKNOWN {
        let r = c.cmd(&[b"NOSUCHCOMMAND", format!("{i}").as_bytes()]);
        assert!(r.starts_with(b"-ERR unknown command"), "{}", show(&r));
    }
    let (a, b) = (placement.key_on(0, "split"), placement.key_on(1, "split"));
    for _ in 0..MGETS {
        let r = c.cmd(&[b"MGET", a.as_bytes(), b.as_bytes()]);
        assert_eq!(r, b"*2\r\n$-1\r\n$-1\r\n", "{}", show(&r));
    }
    for _ in 0..DELS {
        assert_eq!(c.cmd(&[b"DEL", a.as_bytes(), b.as_bytes()]), int(0));
    }
    drop(c);

    // Protocol errors: each closes its connection after the error reply.
    for _ in 0..PROTOCOL_ERRORS {
        let mut p = respite.raw();
        p.send_raw(b"*1\r\n$abc\r\n");
        let r = p.read_reply();
        assert!(r.starts_with(b"-ERR Protocol error"), "{}", show(&r));
        assert!(p.is_closed(Duration::from_secs(5)), "connection stays open");
    }

    // Backend timeouts: backend 0 is SIGSTOPped; an INCR of its key times out ([`TIMEOUTS`]).
    let hung = placement.key_on(0, "hung");
    let connect_fail = || respite.stat("cluster.cache.upstream_cx_connect_fail");
    {
        let _stopped = Stopped::new(backends[0].pid());
        let mut t = respite.raw();
        let failed_before = connect_fail();
        let start = Instant::now();
        let r = t.cmd(&[b"INCR", hung.as_bytes()]);
        let took = start.elapsed();
        println!("timeout: {} after {took:?}", show(&r));
        assert_eq!(r, b"-upstream failure\r\n");
        assert!(took >= OP_TIMEOUT - Duration::from_millis(50), "{took:?}");
        // The hung connection is closed; reconnecting to the stopped host fails its handshake.
        assert!(
            wait_until(Duration::from_secs(10), || connect_fail() > failed_before),
            "no failed reconnect to the stopped host"
        );
    }

    let after_text = text_stats(&respite);
    let after_prom = scrape(&respite);

    let host0 = addrs[0].as_str();
    let host1 = addrs[1].as_str();
    let upstream_requests = SETS + GETS + 2 * MGETS + 2 * DELS + TIMEOUTS;
    let expected: Vec<(Stat, u64)> = vec![
        (
            listener("downstream_rq_total"),
            GETS + SETS + UNKNOWN + MGETS + DELS + TIMEOUTS,
        ),
        // The workload connection, one per protocol error, the timeouts' connection.
        (listener("downstream_cx_total"), 1 + PROTOCOL_ERRORS + 1),
        (listener("downstream_cx_protocol_error"), PROTOCOL_ERRORS),
        (listener("splitter.unsupported_command"), UNKNOWN),
        (listener("command.get.total"), GETS),
        (listener("command.get.success"), GETS),
        (listener("command.get.error"), 0),
        (listener("command.set.total"), SETS),
        (listener("command.set.success"), SETS),
        (listener("command.set.error"), 0),
        (listener("command.mget.total"), MGETS),
        (listener("command.mget.success"), MGETS),
        (listener("command.del.total"), DELS),
        (listener("command.del.success"), DELS),
        (listener("command.incr.total"), TIMEOUTS),
        (listener("command.incr.success"), 0),
        (listener("command.incr.error"), TIMEOUTS),
        (
            Stat {
                name: "cluster.cache.upstream_rq_timeout".into(),
                metric: "envoy_cluster_upstream_rq_timeout",
                labels: vec![("envoy_cluster_name", "cache".into())],
            },
            TIMEOUTS,
        ),
        (host_stat(host0, "rq_error"), TIMEOUTS),
        (host_stat(host1, "rq_error"), 0),
    ];

    let mut wrong = Vec::new();
    for (stat, want) in &expected {
        let text = after_text.get(&stat.name).copied().unwrap_or(0)
            - before_text.get(&stat.name).copied().unwrap_or(0);
        let prom = prom_value(&after_prom, stat) - prom_value(&before_prom, stat);
        println!(
            "{:<55} want {want:>5}  /stats {text:>5}  prometheus {prom:>7}",
            stat.name
        );
        if text != *want as i64 || prom != *want as f64 {
            wrong.push(format!(
                "{}: want {want}, /stats {text}, prometheus {prom}",
                stat.name
            ));
        }
    }
    // Per-host request counts add up to every upstream request (each host's share depends on
    // placement; their sum does not).
    let host_total = |stats: &BTreeMap<String, i64>| -> i64 {
        [host0, host1]
            .iter()
            .map(|h| {
                stats
                    .get(&host_stat(h, "rq_total").name)
                    .copied()
                    .unwrap_or(0)
            })
            .sum()
    };
    let text = host_total(&after_text) - host_total(&before_text);
    let prom_total = |s: &Scrape| -> f64 {
        [host0, host1]
            .iter()
            .map(|h| prom_value(s, &host_stat(h, "rq_total")))
            .sum()
    };
    let prom = prom_total(&after_prom) - prom_total(&before_prom);
    println!(
        "{:<55} want {upstream_requests:>5}  /stats {text:>5}  prometheus {prom:>7}",
        "cluster.cache.host.*.rq_total (sum)"
    );
    if text != upstream_requests as i64 || prom != upstream_requests as f64 {
        wrong.push(format!(
            "sum of host rq_total: want {upstream_requests}, /stats {text}, prometheus {prom}"
        ));
    }
    assert!(wrong.is_empty(), "wrong counters:\n{}", wrong.join("\n"));
}

/// `command.get.latency` holds exactly one value per GET (after the workers' ≤100 ms histogram
/// flush), in `/stats` JSON and in the parsed Prometheus histogram.
#[test]
fn get_latency_histogram_counts_every_get() {
    let backends = servers(1);
    let addrs = addrs(&backends);
    let (port, admin) = (free_port(), free_port());
    let respite = Respite::start(&config(port, admin, &addrs), port, admin);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let gets: Vec<Vec<Vec<u8>>> = (0..GETS).map(|_| cmd(&[b"GET", b"k"])).collect();
    for r in pipelined(&mut c, &gets, 100) {
        assert_eq!(r, bulk(b"v"));
    }
    let labels = [
        ("envoy_redis_prefix", "main"),
        ("envoy_redis_command", "get"),
    ];
    let mut last = (None, None);
    let done = wait_until(Duration::from_secs(3), || {
        let scraped = scrape(&respite);
        let prom = prom_histogram_count(&scraped, "envoy_redis_command_latency", &labels);
        // The `_count` sample (parsed as untyped) agrees with the `+Inf` bucket.
        let count_sample = Stat {
            name: "redis.main.command.get.latency (count)".into(),
            metric: "envoy_redis_command_latency_count",
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect(),
        };
        let prom = prom.filter(|&n| n == prom_value(&scraped, &count_sample));
        let (_, body) = respite.admin_get(
            "/stats?format=json&filter=%5Eredis%5C.main%5C.command%5C.get%5C.latency%24&histogram_buckets=detailed",
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let json_count: Option<u64> = v["stats"]
            .as_array()
            .and_then(|s| s.last())
            .and_then(|h| h["histograms"]["details"][0]["totals"].as_array())
            .map(|t| t.iter().map(|b| b["count"].as_u64().unwrap_or(0)).sum());
        last = (prom, json_count);
        prom == Some(GETS as f64) && json_count == Some(GETS)
    });
    println!(
        "get latency count: prometheus {:?}, json {:?}",
        last.0, last.1
    );
    assert!(done, "want {GETS} GET latencies, got {last:?}");
}

/// The parser used above reads Respite's histograms: a store with known values, rendered and
/// parsed back, gives every `le` bucket, the `+Inf` count and `_count`/`_sum`.
#[test]
fn prometheus_parse_reads_our_histograms() {
    let store = respite::stats::Store::new();
    let h = store.histogram("redis.main.command.get.latency", 0);
    for v in [1, 1, 3, 40, 700] {
        h.record(v);
    }
    store
        .histogram("redis.main.command.get.latency", 1)
        .record(2);
    let body = store.render_prometheus();
    let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("parses");
    let labels = [
        ("envoy_redis_prefix", "main"),
        ("envoy_redis_command", "get"),
    ];
    assert_eq!(
        prom_histogram_count(&scrape, "envoy_redis_command_latency", &labels),
        Some(6.0)
    );
    let buckets = scrape
        .samples
        .iter()
        .find_map(|s| match &s.value {
            Value::Histogram(b) if s.metric == "envoy_redis_command_latency" => Some(b.clone()),
            _ => None,
        })
        .expect("histogram sample");
    let le = |bound: f64| {
        buckets
            .iter()
            .find(|b| b.less_than == bound)
            .map(|b| b.count)
    };
    assert_eq!(
        [le(0.5), le(1.0), le(5.0), le(50.0), le(500.0), le(1000.0)],
        [
            Some(0.0),
            Some(2.0),
            Some(4.0),
            Some(5.0),
            Some(5.0),
            Some(6.0)
        ]
    );
    let untyped = |metric: &'static str| Stat {
        name: metric.into(),
        metric,
        labels: labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect(),
    };
    assert_eq!(
        prom_value(&scrape, &untyped("envoy_redis_command_latency_count")),
        6.0
    );
    assert_eq!(
        prom_value(&scrape, &untyped("envoy_redis_command_latency_sum")),
        747.0
    );
}

/// `membership_total` and `membership_healthy` exist for a cluster with neither health checks nor
/// outlier detection (Envoy reports them for every cluster): every host counts as healthy.
#[test]
fn membership_gauges_exist_without_health_checks() {
    let redis = servers(2);
    let addrs = addrs(&redis);
    let (port, admin) = (free_port(), free_port());
    let respite = Respite::start(&config(port, admin, &addrs), port, admin);
    let ok = wait_until(Duration::from_secs(5), || {
        let s = respite.stats();
        s.get("cluster.cache.membership_total") == Some(&2)
            && s.get("cluster.cache.membership_healthy") == Some(&2)
    });
    let s = respite.stats();
    assert!(
        ok,
        "membership_total {:?}, membership_healthy {:?}",
        s.get("cluster.cache.membership_total"),
        s.get("cluster.cache.membership_healthy")
    );
}

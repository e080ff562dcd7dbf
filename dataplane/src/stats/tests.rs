use std::sync::Arc;

use super::*;

#[test]
fn shards_of_two_workers_are_summed() {
    let store = Store::new();
    store.counter("redis.p.downstream_cx_total", 0).add(3);
    store.counter("redis.p.downstream_cx_total", 1).add(4);
    let g0 = store.gauge("redis.p.downstream_cx_active", 0);
    let g1 = store.gauge("redis.p.downstream_cx_active", 1);
    g0.inc();
    g0.inc();
    g1.dec();
    assert_eq!(store.counter_value("redis.p.downstream_cx_total"), Some(7));
    assert_eq!(store.gauge_value("redis.p.downstream_cx_active"), Some(1));
    assert_eq!(store.counter_value("nope"), None);
    assert_eq!(
        store.counters(),
        vec![("redis.p.downstream_cx_total".to_owned(), 7)]
    );
    assert_eq!(
        store.gauges(),
        vec![("redis.p.downstream_cx_active".to_owned(), 1)]
    );
}

#[test]
fn same_name_and_worker_returns_same_arc() {
    let store = Store::new();
    let a = store.counter("c", 2);
    let b = store.counter("c", 2);
    assert!(Arc::ptr_eq(&a, &b));
    assert!(!Arc::ptr_eq(&a, &store.counter("c", 3)));
    assert!(!Arc::ptr_eq(&a, &store.counter("d", 2)));
    a.add(5);
    drop(a);
    drop(b);
    // A re-registering worker continues its shard: counts never go backwards.
    let again = store.counter("c", 2);
    again.inc();
    assert_eq!(again.get(), 6);
    assert!(Arc::ptr_eq(&store.gauge("g", 0), &store.gauge("g", 0)));
    assert!(Arc::ptr_eq(
        &store.histogram("h", 0),
        &store.histogram("h", 0)
    ));
}

#[test]
fn shards_written_from_worker_threads() {
    let store = Store::new();
    let handles: Vec<_> = (0..2)
        .map(|w| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let c = store.counter("redis.p.downstream_rq_total", w);
                for _ in 0..10_000 {
                    c.inc();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        store.counter_value("redis.p.downstream_rq_total"),
        Some(20_000)
    );
}

fn sample_store() -> Arc<Store> {
    let store = Store::new();
    store.counter("redis.egress.downstream_cx_total", 0).add(5);
    store.counter("redis.egress.downstream_cx_total", 1).add(2);
    store.gauge("redis.egress.downstream_cx_active", 0).add(3);
    store.gauge("redis.egress.downstream_cx_active", 1).add(-1);
    store.counter("redis.egress.command.get.total", 1).add(9);
    store.counter("redis.ingress.command.get.total", 0).add(1);
    store
        .counter(
            "cluster.cache.upstream_internal_redirect_succeeded_total",
            0,
        )
        .add(4);
    store
}

#[test]
fn render_text_exact() {
    let store = sample_store();
    assert_eq!(
        store.render_text(),
        "cluster.cache.upstream_internal_redirect_succeeded_total: 4\n\
         redis.egress.command.get.total: 9\n\
         redis.egress.downstream_cx_active: 2\n\
         redis.egress.downstream_cx_total: 7\n\
         redis.ingress.command.get.total: 1\n"
    );
    assert_eq!(
        store.render_text_filtered(Some("downstream")),
        "redis.egress.downstream_cx_active: 2\nredis.egress.downstream_cx_total: 7\n"
    );
    assert_eq!(store.render_text_filtered(Some("")), store.render_text());
    assert_eq!(Store::new().render_text(), "");
}

#[test]
fn render_text_histograms() {
    let store = Store::new();
    store.counter("a", 0).inc();
    store.histogram("redis.p.command.get.latency", 0);
    let h = store.histogram(
        "cluster.c.redis_cluster.upstream_commands.upstream_rq_time",
        1,
    );
    for _ in 0..4 {
        h.record(30);
    }
    assert_eq!(
        store.render_text(),
        "a: 1\n\
         cluster.c.redis_cluster.upstream_commands.upstream_rq_time: P0(nan,30) P25(nan,30) \
         P50(nan,30) P75(nan,30) P90(nan,30) P95(nan,30) P99(nan,30) P99.5(nan,30) \
         P99.9(nan,30) P100(nan,30)\n\
         redis.p.command.get.latency: No recorded values\n"
    );
}

const EXPECTED_PROM: &str = "\
# TYPE envoy_cluster_upstream_internal_redirect_succeeded_total counter
envoy_cluster_upstream_internal_redirect_succeeded_total{envoy_cluster_name=\"cache\"} 4
# TYPE envoy_redis_command_get_total counter
envoy_redis_command_get_total{envoy_redis_prefix=\"egress\"} 9
envoy_redis_command_get_total{envoy_redis_prefix=\"ingress\"} 1
# TYPE envoy_redis_command_total counter
envoy_redis_command_total{envoy_redis_prefix=\"egress\",envoy_redis_command=\"get\"} 9
envoy_redis_command_total{envoy_redis_prefix=\"ingress\",envoy_redis_command=\"get\"} 1
# TYPE envoy_redis_downstream_cx_active gauge
envoy_redis_downstream_cx_active{envoy_redis_prefix=\"egress\"} 2
# TYPE envoy_redis_downstream_cx_total counter
envoy_redis_downstream_cx_total{envoy_redis_prefix=\"egress\"} 7
";

#[test]
fn render_prometheus_exact() {
    let store = sample_store();
    let out = store.render_prometheus();
    assert_eq!(out, EXPECTED_PROM);
    check_exposition(&out);
    assert_eq!(
        store.render_prometheus_filtered(Some("cluster.")),
        "# TYPE envoy_cluster_upstream_internal_redirect_succeeded_total counter\n\
         envoy_cluster_upstream_internal_redirect_succeeded_total{envoy_cluster_name=\"cache\"} 4\n"
    );
}

#[test]
fn render_prometheus_histogram_and_odd_names() {
    let store = Store::new();
    let h = store.histogram("redis.p.command.get.latency", 0);
    h.record(7);
    h.record(30);
    store
        .histogram("redis.p.command.get.latency", 1)
        .record(20_000_000);
    store.counter("weird-name.with\"quote", 0).inc();
    store.gauge("redis.p.command.bf.add.total", 0).inc(); // dotted command name
    let out = store.render_prometheus();
    check_exposition(&out);
    assert!(out.contains("# TYPE envoy_redis_command_latency histogram\n"));
    assert!(out.contains(
        "envoy_redis_command_latency_bucket{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\",le=\"10\"} 1\n"
    ));
    assert!(out.contains(
        "envoy_redis_command_latency_bucket{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\",le=\"50\"} 2\n"
    ));
    assert!(out.contains(
        "envoy_redis_command_latency_bucket{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\",le=\"+Inf\"} 3\n"
    ));
    assert!(out.contains(
        "envoy_redis_command_latency_sum{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\"} 20000037\n"
    ));
    assert!(out.contains(
        "envoy_redis_command_latency_count{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\"} 3\n"
    ));
    assert!(out.contains("envoy_weird_name_with_quote 1\n"));
    assert!(out.contains(
        "envoy_redis_command_total{envoy_redis_prefix=\"p\",envoy_redis_command=\"bf.add\"} 1\n"
    ));
}

#[test]
fn prometheus_type_line_once_and_kind_conflicts_dropped() {
    let store = Store::new();
    store.counter("redis.a.command.get.total", 0).inc();
    store.counter("redis.b.command.set.total", 0).inc();
    store.gauge("redis.c.command.del.total", 0).inc(); // same family, other kind
    let out = store.render_prometheus();
    check_exposition(&out);
    assert_eq!(out.matches("# TYPE envoy_redis_command_total").count(), 1);
    assert!(!out.contains("\"del\""));
}

#[test]
fn label_values_are_escaped() {
    let store = Store::new();
    store.counter("cluster.a\"b\\c.upstream_cx_total", 0).inc();
    let out = store.render_prometheus();
    assert_eq!(
        out,
        "# TYPE envoy_cluster_upstream_cx_total counter\n\
         envoy_cluster_upstream_cx_total{envoy_cluster_name=\"a\\\"b\\\\c\"} 1\n"
    );
    check_exposition(&out);
}

/// Minimal Prometheus 0.0.4 text check: every non-comment line is
/// `name{label="value",...} value` (labels optional) with a valid metric name, well-formed
/// quoted/escaped label values and a numeric value; every `# TYPE` names a family once, before
/// its samples.
pub fn check_exposition(text: &str) {
    fn valid_name(n: &str) -> bool {
        let mut cs = n.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    let mut typed: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let (name, kind) = (it.next().unwrap(), it.next().unwrap());
            assert!(valid_name(name), "bad family name in {line:?}");
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "{line:?}"
            );
            assert!(!typed.iter().any(|t| t == name), "TYPE twice: {line:?}");
            typed.push(name.to_owned());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let name_end = line.find(['{', ' ']).expect(line);
        let name = &line[..name_end];
        assert!(valid_name(name), "bad metric name in {line:?}");
        let family = typed.last().expect("sample before any TYPE");
        assert!(
            name == family
                || [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count")
                ]
                .contains(&name.to_owned()),
            "sample {name} outside its family {family}"
        );
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut r = r;
            loop {
                let eq = r.find('=').expect(line);
                assert!(valid_name(&r[..eq]), "bad label name in {line:?}");
                r = r[eq + 1..].strip_prefix('"').expect(line);
                let mut chars = r.char_indices();
                let close = loop {
                    match chars.next().expect(line) {
                        (_, '\\') => {
                            let (_, e) = chars.next().expect(line);
                            assert!(matches!(e, '\\' | '"' | 'n'), "bad escape in {line:?}");
                        }
                        (i, '"') => break i,
                        (_, '\n') => panic!("raw newline"),
                        _ => {}
                    }
                };
                r = &r[close + 1..];
                if let Some(x) = r.strip_prefix(',') {
                    r = x;
                } else {
                    rest = r.strip_prefix('}').expect(line);
                    break;
                }
            }
        }
        let value = rest.strip_prefix(' ').expect(line);
        assert!(value.parse::<f64>().is_ok(), "bad value in {line:?}");
    }
}

/// Envoy's own names for per-command stats (no command tag in Envoy's default extractors), next
/// to the labelled form, so dashboards built for Envoy keep working.
#[test]
fn per_command_stats_also_carry_envoys_names() {
    let store = Store::new();
    store.counter("redis.p.command.bf.add.error", 0).add(2);
    store
        .counter("cluster.c.redis_cluster.upstream_commands.get.success", 0)
        .add(5);
    store.histogram("redis.p.command.get.latency", 0).record(30);
    let out = store.render_prometheus();
    check_exposition(&out);
    for line in [
        "envoy_redis_command_bf_add_error{envoy_redis_prefix=\"p\"} 2\n",
        "envoy_redis_command_error{envoy_redis_prefix=\"p\",envoy_redis_command=\"bf.add\"} 2\n",
        "envoy_cluster_redis_cluster_upstream_commands_get_success{envoy_cluster_name=\"c\"} 5\n",
        "envoy_redis_command_get_latency_count{envoy_redis_prefix=\"p\"} 1\n",
        "envoy_redis_command_latency_count{envoy_redis_prefix=\"p\",envoy_redis_command=\"get\"} 1\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
}

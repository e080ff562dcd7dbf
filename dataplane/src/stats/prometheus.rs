//! Envoy-style stat name → Prometheus series conversion (tag extraction) and the text renderer.
//!
//! Output follows the Prometheus text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>), shaped like Envoy's
//! `/stats/prometheus`: every metric name starts with `envoy_`, the tag-carrying name segments
//! are pulled out into labels (Envoy's `envoy.redis_prefix` / `envoy.cluster_name` tags), and
//! each family gets exactly one `# TYPE` line followed by all its samples.
//!
//! # Naming scheme
//!
//! Stat names are split on `.`. Stat prefixes and cluster names are assumed to contain no dot
//! (a dot inside one would be read as a segment boundary). Command names *may* contain dots
//! (`bf.add`), so a command is everything between the fixed segments and the last segment.
//!
//! | Envoy stat name | Prometheus series |
//! |---|---|
//! | `redis.<p>.command.<cmd…>.<stat>` | `envoy_redis_command_<stat>{envoy_redis_prefix="<p>",envoy_redis_command="<cmd…>"}` |
//! | `redis.<p>.<rest>` | `envoy_redis_<rest>{envoy_redis_prefix="<p>"}` |
//! | `cluster.<c>.redis_cluster.upstream_commands.<cmd…>.<stat>` | `envoy_cluster_redis_cluster_upstream_commands_<stat>{envoy_cluster_name="<c>",envoy_redis_command="<cmd…>"}` |
//! | `cluster.<c>.host.<ip:port>.<stat>` | `envoy_cluster_host_<stat>{envoy_cluster_name="<c>",envoy_upstream_host="<ip:port>"}` |
//! | `cluster.<c>.<rest>` | `envoy_cluster_<rest>{envoy_cluster_name="<c>"}` |
//! | anything else `<name>` | `envoy_<name>` (no labels) |
//!
//! Per-command stats are rendered twice: in the labelled form above (one family per stat, the
//! command as a label, for per-command queries) and under Envoy's own name, where the command
//! stays in the metric name (`envoy_redis_command_get_total{envoy_redis_prefix="p"}`,
//! [`envoy_command_series`]), so dashboards built for Envoy keep working unchanged.
//!
//! After extraction every character of the metric name outside `[a-zA-Z0-9_:]` (dots included)
//! becomes `_`; the `envoy_` prefix keeps the first character valid. Label values are escaped as
//! the format requires (`\` → `\\`, `"` → `\"`, newline → `\n`).
//!
//! Examples: `redis.egress.downstream_cx_total` →
//! `envoy_redis_downstream_cx_total{envoy_redis_prefix="egress"}`;
//! `redis.egress.command.get.total` →
//! `envoy_redis_command_total{envoy_redis_prefix="egress",envoy_redis_command="get"}`;
//! `cluster.cache.upstream_internal_redirect_succeeded_total` →
//! `envoy_cluster_upstream_internal_redirect_succeeded_total{envoy_cluster_name="cache"}`.
//!
//! Counters render as `# TYPE <m> counter`, gauges as `gauge`, histograms as `histogram` with
//! `<m>_bucket{…,le="<bound>"}` cumulative buckets over Envoy's default bounds
//! ([`super::histogram::PROMETHEUS_BUCKETS`], in the recorded unit), `<m>_sum` and `<m>_count`.
//! If two stats of different kinds map to the same family name, the family keeps the kind seen
//! first (counters, then gauges, then histograms) and the conflicting samples are left out, since
//! one family cannot carry two types.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::histogram::{HistogramSnapshot, PROMETHEUS_BUCKETS};

/// Label name for the `redis.<stat_prefix>.` scope (Envoy tag `envoy.redis_prefix`).
pub const LABEL_REDIS_PREFIX: &str = "envoy_redis_prefix";
/// Label name for the `cluster.<name>.` scope (Envoy tag `envoy.cluster_name`).
pub const LABEL_CLUSTER_NAME: &str = "envoy_cluster_name";
/// Label name for the upstream host (`ip:port`) of per-host stats.
pub const LABEL_HOST: &str = "envoy_upstream_host";
/// Label name for the command segment of per-command stats.
pub const LABEL_REDIS_COMMAND: &str = "envoy_redis_command";

/// One Prometheus series: a valid metric name plus `(label name, raw label value)` pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// Metric (family) name, matching `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    pub name: String,
    /// Labels in output order; values are unescaped here and escaped at render time.
    pub labels: Vec<(&'static str, String)>,
}

/// Envoy's own Prometheus series of a per-command stat, when it differs from [`series`]:
/// Envoy's default tag extractors have no command tag (envoyproxy/envoy#25540), so the command
/// stays in the metric name, e.g. `redis.main.command.get.total` →
/// `envoy_redis_command_get_total{envoy_redis_prefix="main"}` and
/// `cluster.c.redis_cluster.upstream_commands.get.total` →
/// `envoy_cluster_redis_cluster_upstream_commands_get_total{envoy_cluster_name="c"}`.
/// Dashboards built for Envoy query these; `None` for every other stat.
pub fn envoy_command_series(stat: &str) -> Option<Series> {
    let parts: Vec<&str> = stat.split('.').collect();
    let (raw, label, value) = match parts.as_slice() {
        ["redis", p, "command", cmd @ .., last] if !cmd.is_empty() => (
            format!("envoy_redis_command_{}_{last}", cmd.join("_")),
            LABEL_REDIS_PREFIX,
            *p,
        ),
        [
            "cluster",
            c,
            "redis_cluster",
            "upstream_commands",
            cmd @ ..,
            last,
        ] if !cmd.is_empty() => (
            format!(
                "envoy_cluster_redis_cluster_upstream_commands_{}_{last}",
                cmd.join("_")
            ),
            LABEL_CLUSTER_NAME,
            *c,
        ),
        _ => return None,
    };
    Some(Series {
        name: sanitize_metric_name(&raw),
        labels: vec![(label, value.to_owned())],
    })
}

/// Converts an Envoy-style stat name into its Prometheus series (see the module docs for the
/// scheme).
pub fn series(stat: &str) -> Series {
    let parts: Vec<&str> = stat.split('.').collect();
    let (raw, labels): (String, Vec<(&'static str, String)>) = match parts.as_slice() {
        ["redis", p, "command", cmd @ .., last] if !cmd.is_empty() => (
            format!("envoy_redis_command_{last}"),
            vec![
                (LABEL_REDIS_PREFIX, (*p).to_owned()),
                (LABEL_REDIS_COMMAND, cmd.join(".")),
            ],
        ),
        ["redis", p, rest @ ..] if !rest.is_empty() => (
            format!("envoy_redis_{}", rest.join("_")),
            vec![(LABEL_REDIS_PREFIX, (*p).to_owned())],
        ),
        [
            "cluster",
            c,
            "redis_cluster",
            "upstream_commands",
            cmd @ ..,
            last,
        ] if !cmd.is_empty() => (
            format!("envoy_cluster_redis_cluster_upstream_commands_{last}"),
            vec![
                (LABEL_CLUSTER_NAME, (*c).to_owned()),
                (LABEL_REDIS_COMMAND, cmd.join(".")),
            ],
        ),
        ["cluster", c, "host", addr @ .., last] if !addr.is_empty() => (
            format!("envoy_cluster_host_{last}"),
            vec![
                (LABEL_CLUSTER_NAME, (*c).to_owned()),
                (LABEL_HOST, addr.join(".")),
            ],
        ),
        ["cluster", c, rest @ ..] if !rest.is_empty() => (
            format!("envoy_cluster_{}", rest.join("_")),
            vec![(LABEL_CLUSTER_NAME, (*c).to_owned())],
        ),
        _ => (format!("envoy_{stat}"), Vec::new()),
    };
    Series {
        name: sanitize_metric_name(&raw),
        labels,
    }
}

/// Replaces every character outside `[a-zA-Z0-9_:]` with `_`, and prefixes `_` if the first
/// character is a digit (or the name is empty), so the result is a valid Prometheus metric name.
pub fn sanitize_metric_name(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Escapes a label value for the text format: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn label_block(labels: &[(&'static str, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{}\"", escape_label_value(v)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

#[derive(Clone)]
enum Value {
    Int(i128),
    Hist(HistogramSnapshot),
}

struct Family {
    kind: Kind,
    samples: Vec<(Vec<(&'static str, String)>, Value)>,
}

/// Renders summed stats (each input sorted by stat name) as Prometheus text format 0.0.4.
/// Families are sorted by metric name; samples keep their stat-name order.
pub(crate) fn render(
    counters: &[(String, u64)],
    gauges: &[(String, i64)],
    histograms: &[(String, HistogramSnapshot)],
) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut add = |stat: &str, kind: Kind, value: Value| {
        for s in std::iter::once(series(stat)).chain(envoy_command_series(stat)) {
            let fam = families.entry(s.name).or_insert_with(|| Family {
                kind,
                samples: Vec::new(),
            });
            if fam.kind == kind {
                fam.samples.push((s.labels, value.clone()));
            }
        }
    };
    for (n, v) in counters {
        add(n, Kind::Counter, Value::Int(i128::from(*v)));
    }
    for (n, v) in gauges {
        add(n, Kind::Gauge, Value::Int(i128::from(*v)));
    }
    for (n, h) in histograms {
        add(n, Kind::Histogram, Value::Hist(h.clone()));
    }

    let mut out = String::new();
    for (name, fam) in &families {
        let _ = writeln!(out, "# TYPE {name} {}", fam.kind.as_str());
        for (labels, value) in &fam.samples {
            match value {
                Value::Int(v) => {
                    let _ = writeln!(out, "{name}{} {v}", label_block(labels, None));
                }
                Value::Hist(h) => {
                    let counts = h.cumulative(&PROMETHEUS_BUCKETS);
                    for (bound, n) in PROMETHEUS_BUCKETS.iter().zip(counts) {
                        let le = bound.to_string();
                        let lb = label_block(labels, Some(("le", &le)));
                        let _ = writeln!(out, "{name}_bucket{lb} {n}");
                    }
                    let cum = h.count();
                    let lb = label_block(labels, Some(("le", "+Inf")));
                    let _ = writeln!(out, "{name}_bucket{lb} {cum}");
                    let lb = label_block(labels, None);
                    let _ = writeln!(out, "{name}_sum{lb} {}", h.sum());
                    let _ = writeln!(out, "{name}_count{lb} {cum}");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, labels: &[(&'static str, &str)]) -> Series {
        Series {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        }
    }

    #[test]
    fn tag_extraction_scheme() {
        assert_eq!(
            series("redis.egress.downstream_cx_total"),
            s(
                "envoy_redis_downstream_cx_total",
                &[(LABEL_REDIS_PREFIX, "egress")]
            )
        );
        assert_eq!(
            series("redis.egress.splitter.invalid_request"),
            s(
                "envoy_redis_splitter_invalid_request",
                &[(LABEL_REDIS_PREFIX, "egress")]
            )
        );
        assert_eq!(
            series("redis.egress.command.get.total"),
            s(
                "envoy_redis_command_total",
                &[(LABEL_REDIS_PREFIX, "egress"), (LABEL_REDIS_COMMAND, "get")]
            )
        );
        assert_eq!(
            series("redis.egress.command.bf.add.success"),
            s(
                "envoy_redis_command_success",
                &[
                    (LABEL_REDIS_PREFIX, "egress"),
                    (LABEL_REDIS_COMMAND, "bf.add")
                ]
            )
        );
        assert_eq!(
            series("cluster.cache.upstream_internal_redirect_failed_total"),
            s(
                "envoy_cluster_upstream_internal_redirect_failed_total",
                &[(LABEL_CLUSTER_NAME, "cache")]
            )
        );
        assert_eq!(
            series("cluster.cache.host.127.0.0.1:7001.rq_total"),
            s(
                "envoy_cluster_host_rq_total",
                &[
                    (LABEL_CLUSTER_NAME, "cache"),
                    (LABEL_HOST, "127.0.0.1:7001")
                ]
            )
        );
        assert_eq!(
            series("cluster.cache.redis_cluster.upstream_commands.upstream_rq_time"),
            s(
                "envoy_cluster_redis_cluster_upstream_commands_upstream_rq_time",
                &[(LABEL_CLUSTER_NAME, "cache")]
            )
        );
        assert_eq!(
            series("cluster.cache.redis_cluster.upstream_commands.get.failure"),
            s(
                "envoy_cluster_redis_cluster_upstream_commands_failure",
                &[(LABEL_CLUSTER_NAME, "cache"), (LABEL_REDIS_COMMAND, "get")]
            )
        );
        assert_eq!(series("server.live"), s("envoy_server_live", &[]));
        assert_eq!(series("redis.x"), s("envoy_redis_x", &[]));
        assert_eq!(series("a-b.c d"), s("envoy_a_b_c_d", &[]));
    }

    #[test]
    fn sanitize_and_escape() {
        assert_eq!(sanitize_metric_name("9lives"), "_9lives");
        assert_eq!(sanitize_metric_name(""), "_");
        assert_eq!(sanitize_metric_name("a:b.c-d"), "a:b_c_d");
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}

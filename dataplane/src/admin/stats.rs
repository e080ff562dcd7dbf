//! `/stats` (text, JSON, Prometheus) and `/stats/prometheus`, with Envoy's `?filter=<regex>`.
//!
//! JSON (`?format=json`) has Envoy admin's shape (Envoy docs, "admin: /stats?format=json"):
//!
//! ```json
//! {"stats":[{"name":"redis.main.downstream_cx_total","value":7}, …,
//!   {"histograms":{"supported_quantiles":[0,25,50,75,90,95,99,99.5,99.9,100],
//!     "computed_quantiles":[{"name":"redis.main.command.get.latency",
//!       "values":[{"interval":null,"cumulative":1.0}, …]}]}}]}
//! ```
//!
//! Counters and gauges come first, together sorted by name; the histograms element comes last,
//! only when some histogram passes the filter. `interval` is always `null` (there is no flush
//! interval: histograms are cumulative since start); `cumulative` is `null` for a histogram
//! with no values. With `histogram_buckets=detailed` the histograms element is instead
//! `{"histograms":{"details":[{"name":N,"totals":[{"lower_bound":L,"width":W,"count":C}, …],
//! "intervals":[]}]}}`: HdrHistogram's own buckets, in the recorded unit.

use regex::Regex;
use serde_json::{Value, json};

use super::query::Query;
use super::{PROMETHEUS_CONTENT_TYPE, Reply, format, json, text};
use crate::stats::Store;
use crate::stats::histogram::TEXT_QUANTILES;

/// The stat-name predicate of `?filter=`: absent or empty keeps everything; otherwise a regex
/// searched anywhere in the name. An invalid regex is a `400` with the parser's message.
pub(super) fn filter(q: &Query) -> Result<Option<Regex>, Reply> {
    match q.get("filter") {
        None | Some("") => Ok(None),
        Some(f) => Regex::new(f)
            .map(Some)
            .map_err(|e| text(400, format!("invalid regex in filter={f:?}: {e}\n"))),
    }
}

fn keep(re: &Option<Regex>) -> impl Fn(&str) -> bool + '_ {
    move |name: &str| re.as_ref().is_none_or(|r| r.is_match(name))
}

/// `GET /stats`.
pub(super) fn stats(store: &Store, q: &Query) -> Result<Reply, Reply> {
    let re = filter(q)?;
    match format(q, &["text", "json", "prometheus"])? {
        "json" => {
            let detailed = match q.get("histogram_buckets") {
                None | Some("") | Some("none") => false,
                Some("detailed") => true,
                Some(other) => {
                    return Err(text(
                        400,
                        format!("unsupported histogram_buckets={other:?}; use detailed or none\n"),
                    ));
                }
            };
            Ok(json(
                &render_json(store, &keep(&re), detailed),
                q.has("pretty"),
            ))
        }
        "prometheus" => Ok(prometheus_reply(store, &re)),
        _ => Ok(text(200, store.render_text_where(&keep(&re)))),
    }
}

/// `GET /stats/prometheus`.
pub(super) fn prometheus(store: &Store, q: &Query) -> Result<Reply, Reply> {
    let re = filter(q)?;
    Ok(prometheus_reply(store, &re))
}

fn prometheus_reply(store: &Store, re: &Option<Regex>) -> Reply {
    Reply {
        status: 200,
        content_type: PROMETHEUS_CONTENT_TYPE,
        body: store.render_prometheus_where(&keep(re)),
    }
}

/// The `/stats?format=json` document (see the module docs) of the stats `keep` accepts.
pub fn render_json(store: &Store, keep: &dyn Fn(&str) -> bool, detailed: bool) -> Value {
    let mut scalars: Vec<(String, Value)> = store
        .counters()
        .into_iter()
        .filter(|(n, _)| keep(n))
        .map(|(n, v)| (n, json!(v)))
        .chain(
            store
                .gauges()
                .into_iter()
                .filter(|(n, _)| keep(n))
                .map(|(n, v)| (n, json!(v))),
        )
        .collect();
    scalars.sort_by(|a, b| a.0.cmp(&b.0));
    let mut stats: Vec<Value> = scalars
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();

    let histograms: Vec<_> = store
        .histograms()
        .into_iter()
        .filter(|(n, _)| keep(n))
        .collect();
    if !histograms.is_empty() {
        let element = if detailed {
            let details: Vec<Value> = histograms
                .iter()
                .map(|(name, h)| {
                    let totals: Vec<Value> = h
                        .recorded()
                        .into_iter()
                        .map(|(lower_bound, width, count)| {
                            json!({"lower_bound": lower_bound, "width": width, "count": count})
                        })
                        .collect();
                    json!({"name": name, "totals": totals, "intervals": []})
                })
                .collect();
            json!({"details": details})
        } else {
            let computed: Vec<Value> = histograms
                .iter()
                .map(|(name, h)| {
                    let values: Vec<Value> = TEXT_QUANTILES
                        .iter()
                        .map(|&p| json!({"interval": null, "cumulative": h.quantile(p)}))
                        .collect();
                    json!({"name": name, "values": values})
                })
                .collect();
            json!({"supported_quantiles": TEXT_QUANTILES, "computed_quantiles": computed})
        };
        stats.push(json!({ "histograms": element }));
    }
    json!({ "stats": stats })
}

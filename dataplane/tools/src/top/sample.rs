//! One read of the admin endpoint, parsed: stat values, detailed histogram buckets, host
//! health, and the latency unit of each listener.
//!
//! Shapes are the admin endpoint's, as docs/observability.md documents them: `GET /stats?format=json&
//! histogram_buckets=detailed` is Envoy's `{"stats":[{"name","value"}…, {"histograms":
//! {"details":[{"name","totals":[{"lower_bound","width","count"}…]}]}}]}`; `/clusters?format=
//! json` is Envoy's `cluster_statuses`; `/config_dump` is the live config as JSON.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

/// Detailed histogram buckets `(lower_bound, width, count)`, as `HistogramSnapshot::recorded`.
pub type Buckets = Vec<(u64, u64, u64)>;

/// Counters and gauges (by name; the JSON does not tell them apart) and histograms of one read.
#[derive(Debug, Clone)]
pub struct StatsSample {
    /// When the response was read (rates divide counter deltas by the time between two reads).
    pub at: Instant,
    /// Counter and gauge values. Gauges may be negative.
    pub values: BTreeMap<String, i64>,
    /// Detailed buckets per histogram name.
    pub histograms: BTreeMap<String, Buckets>,
}

impl StatsSample {
    /// A counter's or gauge's value, 0 when absent.
    pub fn value(&self, name: &str) -> i64 {
        self.values.get(name).copied().unwrap_or(0)
    }
}

/// Parses a `/stats?format=json&histogram_buckets=detailed` body read at `at`.
///
/// # Errors
/// The body is not JSON or has no `stats` array.
pub fn parse_stats(body: &str, at: Instant) -> Result<StatsSample, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("/stats JSON: {e}"))?;
    let stats = v
        .get("stats")
        .and_then(Value::as_array)
        .ok_or("/stats JSON: no \"stats\" array (is the admin endpoint respite or Envoy?)")?;
    let mut values = BTreeMap::new();
    let mut histograms = BTreeMap::new();
    for e in stats {
        if let (Some(name), Some(value)) = (e.get("name").and_then(Value::as_str), e.get("value")) {
            if let Some(n) = number(value) {
                values.insert(name.to_owned(), n);
            }
        } else if let Some(details) = e
            .get("histograms")
            .and_then(|h| h.get("details"))
            .and_then(Value::as_array)
        {
            for d in details {
                let Some(name) = d.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let totals = d.get("totals").and_then(Value::as_array);
                let buckets = totals
                    .into_iter()
                    .flatten()
                    .filter_map(|b| {
                        let f = |k: &str| b.get(k).and_then(Value::as_u64);
                        Some((f("lower_bound")?, f("width")?, f("count")?))
                    })
                    .collect();
                histograms.insert(name.to_owned(), buckets);
            }
        }
    }
    Ok(StatsSample {
        at,
        values,
        histograms,
    })
}

/// An integer stat value; Envoy's JSON writes them as numbers, a few exporters as strings.
fn number(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
        .or_else(|| v.as_f64().map(|f| f as i64))
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// Health of one upstream host as `/clusters?format=json` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHealth {
    /// Cluster name.
    pub cluster: String,
    /// `ip:port`, as in the `cluster.<c>.host.<ip:port>.` stat names.
    pub host: String,
    /// `healthy`, `unhealthy` (failed active health check), `ejected` (outlier detection),
    /// or Envoy's `eds_health_status` lower-cased.
    pub health: String,
}

/// Parses Envoy's `/clusters?format=json` shape: `{"cluster_statuses":[{"name",
/// "host_statuses":[{"address":{"socket_address":{"address","port_value"}},
/// "health_status":{"failed_active_health_check","failed_outlier_check","eds_health_status"}}]}]}`
/// (Envoy admin docs, `/clusters`; `admin.v3.Clusters`).
///
/// # Errors
/// The body is not JSON or has no `cluster_statuses` array.
pub fn parse_clusters(body: &str) -> Result<Vec<HostHealth>, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("/clusters JSON: {e}"))?;
    let clusters = v
        .get("cluster_statuses")
        .and_then(Value::as_array)
        .ok_or("/clusters JSON: no \"cluster_statuses\" array")?;
    let mut out = Vec::new();
    for c in clusters {
        let cluster = c.get("name").and_then(Value::as_str).unwrap_or("?");
        let hosts = c.get("host_statuses").and_then(Value::as_array);
        for h in hosts.into_iter().flatten() {
            let sa = h.get("address").and_then(|a| a.get("socket_address"));
            let ip = sa.and_then(|s| s.get("address")).and_then(Value::as_str);
            let port = sa.and_then(|s| s.get("port_value")).and_then(number);
            let (Some(ip), Some(port)) = (ip, port) else {
                continue;
            };
            let host = if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            };
            let hs = h.get("health_status");
            let flag = |k: &str| {
                hs.and_then(|s| s.get(k))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            };
            let health = if flag("failed_outlier_check") {
                "ejected".to_owned()
            } else if flag("failed_active_health_check") {
                "unhealthy".to_owned()
            } else {
                hs.and_then(|s| s.get("eds_health_status"))
                    .and_then(Value::as_str)
                    .map_or("healthy".to_owned(), str::to_ascii_lowercase)
            };
            out.push(HostHealth {
                cluster: cluster.to_owned(),
                host,
                health,
            });
        }
    }
    Ok(out)
}

/// Unit of the `command.<cmd>.latency` histograms of each listener, from `/config_dump`:
/// `stat_prefix → true` when the listener has `latency_in_micros` (µs), `false` for ms
/// (Envoy's default).
///
/// # Errors
/// The body is not JSON or has no `listeners` array.
pub fn parse_units(body: &str) -> Result<BTreeMap<String, bool>, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("/config_dump JSON: {e}"))?;
    let listeners = v
        .get("listeners")
        .and_then(Value::as_array)
        .ok_or("/config_dump JSON: no \"listeners\" array")?;
    Ok(listeners
        .iter()
        .filter_map(|l| {
            let prefix = l.get("stat_prefix").and_then(Value::as_str)?;
            let micros = l
                .get("latency_in_micros")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Some((prefix.to_owned(), micros))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_json_values_and_detailed_buckets() {
        let body = r#"{"stats":[
            {"name":"redis.main.command.get.total","value":10},
            {"name":"redis.main.downstream_cx_active","value":-1},
            {"name":"server.uptime","value":"42"},
            {"histograms":{"details":[
                {"name":"redis.main.command.get.latency",
                 "totals":[{"lower_bound":1,"width":1,"count":3},{"lower_bound":200,"width":2,"count":1}],
                 "intervals":[]}]}}]}"#;
        let s = parse_stats(body, Instant::now()).unwrap();
        assert_eq!(s.value("redis.main.command.get.total"), 10);
        assert_eq!(s.value("redis.main.downstream_cx_active"), -1);
        assert_eq!(s.value("server.uptime"), 42);
        assert_eq!(s.value("absent"), 0);
        assert_eq!(
            s.histograms["redis.main.command.get.latency"],
            vec![(1, 1, 3), (200, 2, 1)]
        );
        assert!(parse_stats("# text", Instant::now()).is_err());
        assert!(parse_stats("{}", Instant::now()).is_err());
    }

    #[test]
    fn clusters_json_health() {
        let body = r#"{"cluster_statuses":[{"name":"cache","host_statuses":[
            {"address":{"socket_address":{"address":"127.0.0.1","port_value":6379}},
             "health_status":{"eds_health_status":"HEALTHY"}},
            {"address":{"socket_address":{"address":"127.0.0.1","port_value":6380}},
             "health_status":{"failed_outlier_check":true,"eds_health_status":"HEALTHY"}},
            {"address":{"socket_address":{"address":"::1","port_value":6381}},
             "health_status":{"failed_active_health_check":true}}]}]}"#;
        let h = parse_clusters(body).unwrap();
        let got: Vec<(&str, &str)> = h
            .iter()
            .map(|h| (h.host.as_str(), h.health.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("127.0.0.1:6379", "healthy"),
                ("127.0.0.1:6380", "ejected"),
                ("[::1]:6381", "unhealthy")
            ]
        );
        assert!(h.iter().all(|h| h.cluster == "cache"));
    }

    #[test]
    fn config_dump_units() {
        let body = r#"{"listeners":[{"stat_prefix":"a","latency_in_micros":true},
                                    {"stat_prefix":"b"}],"clusters":[]}"#;
        let u = parse_units(body).unwrap();
        assert_eq!(u.get("a"), Some(&true));
        assert_eq!(u.get("b"), Some(&false));
    }
}

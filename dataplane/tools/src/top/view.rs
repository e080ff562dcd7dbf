//! What one frame shows, computed from two reads: rates are counter deltas over the time
//! between the reads; interval quantiles come from the difference of the detailed histogram
//! buckets (exact for the interval, not cumulative since start).

use std::collections::{BTreeMap, BTreeSet};

use super::sample::{Buckets, HostHealth, StatsSample};

/// Unit of a latency column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds (`latency_in_micros`, per-host `rq_time`).
    Micros,
    /// Milliseconds (Envoy's default for `command.<cmd>.latency`).
    Millis,
    /// `/config_dump` was unavailable: the number is shown without a unit.
    Unknown,
}

impl Unit {
    /// Short suffix printed after a value.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Micros => "µs",
            Unit::Millis => "ms",
            Unit::Unknown => "?",
        }
    }
}

/// The header line's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Admin address shown.
    pub admin: String,
    /// `server.uptime` (seconds) when the endpoint reports one.
    pub uptime_s: Option<i64>,
    /// Downstream requests/s over all listeners (`downstream_rq_total`).
    pub rps: f64,
    /// Errors / total of all `command.<cmd>.` counters in the interval; `None` without requests.
    pub error_ratio: Option<f64>,
    /// Sum of `downstream_cx_active` over listeners.
    pub cx_active: i64,
    /// Seconds between the two reads.
    pub interval_s: f64,
}

/// One row of the per-command table.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    /// Listener stat prefix.
    pub prefix: String,
    /// Command name as in the stat name (lower case; may contain dots, e.g. `bf.add`).
    pub command: String,
    /// `command.<cmd>.total` per second.
    pub rps: f64,
    /// `command.<cmd>.error` per second.
    pub errors_per_s: f64,
    /// Interval p50 / p99 of `command.<cmd>.latency` in `unit`; `None` without samples.
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub unit: Unit,
}

/// One row of the per-host table.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRow {
    pub cluster: String,
    /// `ip:port`.
    pub host: String,
    /// From `/clusters`; `?` when the host is not listed there (or it was unavailable).
    pub health: String,
    /// `cx_active` gauge.
    pub cx_active: i64,
    /// `rq_total` per second.
    pub rps: f64,
    /// `rq_error` + `rq_timeout` per second.
    pub errors_per_s: f64,
    /// Interval p50 / p99 of `rq_time`, µs.
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
}

/// Everything one frame shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub summary: Summary,
    /// Sorted by rps, descending, then name.
    pub commands: Vec<CommandRow>,
    /// Sorted by cluster, then host.
    pub hosts: Vec<HostRow>,
    /// The last error (a failed read), shown in the header.
    pub error: Option<String>,
}

/// `(prefix, command, stat)` of `redis.<prefix>.command.<cmd…>.<stat>`.
fn command_stat(name: &str) -> Option<(&str, &str, &str)> {
    let rest = name.strip_prefix("redis.")?;
    let (prefix, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix("command.")?;
    let (cmd, stat) = rest.rsplit_once('.')?;
    Some((prefix, cmd, stat))
}

/// `(cluster, host, stat)` of `cluster.<c>.host.<ip:port>.<stat>`.
fn host_stat(name: &str) -> Option<(&str, &str, &str)> {
    let rest = name.strip_prefix("cluster.")?;
    let (cluster, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix("host.")?;
    let (host, stat) = rest.rsplit_once('.')?;
    Some((cluster, host, stat))
}

/// `later - earlier` per bucket (keyed by lower bound); buckets that shrank (a restart) count 0.
pub fn bucket_delta(earlier: Option<&Buckets>, later: &Buckets) -> Buckets {
    let before: BTreeMap<u64, u64> = earlier
        .into_iter()
        .flatten()
        .map(|&(low, _, n)| (low, n))
        .collect();
    later
        .iter()
        .filter_map(|&(low, width, n)| {
            let d = n.saturating_sub(before.get(&low).copied().unwrap_or(0));
            (d > 0).then_some((low, width, d))
        })
        .collect()
}

/// The value at percentile `pct` (0–100) of `buckets`: the highest value of the bucket holding
/// rank `ceil(pct/100 · count)` (at least rank 1), as HdrHistogram's `value_at_quantile`
/// reports. `None` when empty.
pub fn quantile(buckets: &Buckets, pct: f64) -> Option<u64> {
    let total: u64 = buckets.iter().map(|b| b.2).sum();
    if total == 0 {
        return None;
    }
    let rank = ((pct / 100.0).clamp(0.0, 1.0) * total as f64)
        .ceil()
        .max(1.0) as u64;
    let mut seen = 0;
    for &(low, width, n) in buckets {
        seen += n;
        if seen >= rank {
            return Some(low + width.saturating_sub(1));
        }
    }
    buckets
        .last()
        .map(|&(low, width, _)| low + width.saturating_sub(1))
}

/// The frame for the interval `prev → cur`. `units` maps a listener's stat prefix to
/// `latency_in_micros` (`None`: unknown); `health` is `/clusters`' answer (`None`: unavailable).
pub fn compute(
    admin: &str,
    prev: &StatsSample,
    cur: &StatsSample,
    units: Option<&BTreeMap<String, bool>>,
    health: Option<&[HostHealth]>,
) -> View {
    let dt = cur.at.saturating_duration_since(prev.at).as_secs_f64();
    let rate = |name: &str| {
        if dt <= 0.0 {
            return 0.0;
        }
        let d = cur.value(name).saturating_sub(prev.value(name)).max(0);
        d as f64 / dt
    };
    let interval_q = |name: &str| {
        let Some(b) = cur.histograms.get(name) else {
            return (None, None);
        };
        let d = bucket_delta(prev.histograms.get(name), b);
        (quantile(&d, 50.0), quantile(&d, 99.0))
    };

    let mut commands: BTreeSet<(String, String)> = BTreeSet::new();
    let mut hosts: BTreeSet<(String, String)> = BTreeSet::new();
    let mut summary = Summary {
        admin: admin.to_owned(),
        uptime_s: cur.values.get("server.uptime").copied(),
        interval_s: dt,
        ..Summary::default()
    };
    let names = cur.values.keys().chain(cur.histograms.keys());
    for name in names {
        if let Some((p, c, _)) = command_stat(name) {
            commands.insert((p.to_owned(), c.to_owned()));
        } else if let Some((c, h, _)) = host_stat(name) {
            hosts.insert((c.to_owned(), h.to_owned()));
        } else if let Some(rest) = name.strip_prefix("redis.") {
            match rest.split_once('.') {
                Some((_, "downstream_rq_total")) => summary.rps += rate(name),
                Some((_, "downstream_cx_active")) => summary.cx_active += cur.value(name),
                _ => {}
            }
        }
    }

    let (mut all_total, mut all_err) = (0.0, 0.0);
    let mut command_rows: Vec<CommandRow> = commands
        .into_iter()
        .map(|(prefix, command)| {
            let base = format!("redis.{prefix}.command.{command}");
            let rps = rate(&format!("{base}.total"));
            let errors_per_s = rate(&format!("{base}.error"));
            all_total += rps;
            all_err += errors_per_s;
            let (p50, p99) = interval_q(&format!("{base}.latency"));
            let unit = match units.map(|u| u.get(&prefix)) {
                Some(Some(true)) => Unit::Micros,
                Some(Some(false)) => Unit::Millis,
                _ => Unit::Unknown,
            };
            CommandRow {
                prefix,
                command,
                rps,
                errors_per_s,
                p50,
                p99,
                unit,
            }
        })
        .collect();
    command_rows.sort_by(|a, b| {
        b.rps
            .total_cmp(&a.rps)
            .then_with(|| (&a.prefix, &a.command).cmp(&(&b.prefix, &b.command)))
    });
    summary.error_ratio = (all_total > 0.0).then(|| all_err / all_total);

    let host_rows = hosts
        .into_iter()
        .map(|(cluster, host)| {
            let base = format!("cluster.{cluster}.host.{host}");
            let (p50_us, p99_us) = interval_q(&format!("{base}.rq_time"));
            let health = health
                .and_then(|hs| hs.iter().find(|h| h.cluster == cluster && h.host == host))
                .map_or_else(|| "?".to_owned(), |h| h.health.clone());
            HostRow {
                rps: rate(&format!("{base}.rq_total")),
                errors_per_s: rate(&format!("{base}.rq_error"))
                    + rate(&format!("{base}.rq_timeout")),
                cx_active: cur.value(&format!("{base}.cx_active")),
                health,
                p50_us,
                p99_us,
                cluster,
                host,
            }
        })
        .collect();

    View {
        summary,
        commands: command_rows,
        hosts: host_rows,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::sample::parse_stats;
    use super::*;

    #[test]
    fn quantiles_of_bucket_differences_are_the_interval_s() {
        // Before: 100 fast values. After: 100 more fast values and 100 slow ones. The
        // cumulative p99 would be in between; the interval p99 is the slow bucket.
        let before = vec![(10, 1, 100)];
        let after = vec![(10, 1, 200), (500, 4, 100)];
        let d = bucket_delta(Some(&before), &after);
        assert_eq!(d, vec![(10, 1, 100), (500, 4, 100)]);
        assert_eq!(quantile(&d, 50.0), Some(10));
        assert_eq!(quantile(&d, 50.5), Some(503));
        assert_eq!(quantile(&d, 99.0), Some(503));
        assert_eq!(quantile(&d, 0.0), Some(10));
        assert_eq!(quantile(&Vec::new(), 50.0), None);
        // Only new values: nothing happened in the interval.
        assert_eq!(bucket_delta(Some(&after), &after), Vec::new());
    }

    fn stats(json: &str, at: Instant) -> StatsSample {
        parse_stats(json, at).unwrap()
    }

    #[test]
    fn rates_errors_units_and_health() {
        let t0 = Instant::now();
        let prev = stats(
            r#"{"stats":[
            {"name":"redis.main.downstream_rq_total","value":1000},
            {"name":"redis.main.downstream_cx_active","value":3},
            {"name":"redis.main.command.get.total","value":800},
            {"name":"redis.main.command.get.error","value":0},
            {"name":"redis.main.command.set.total","value":200},
            {"name":"redis.main.command.set.error","value":10},
            {"name":"cluster.cache.host.127.0.0.1:6379.rq_total","value":1000},
            {"name":"cluster.cache.host.127.0.0.1:6379.rq_error","value":1},
            {"name":"cluster.cache.host.127.0.0.1:6379.cx_active","value":2},
            {"histograms":{"details":[
              {"name":"redis.main.command.get.latency","totals":[{"lower_bound":1,"width":1,"count":800}],"intervals":[]},
              {"name":"cluster.cache.host.127.0.0.1:6379.rq_time","totals":[{"lower_bound":100,"width":1,"count":1000}],"intervals":[]}
            ]}}]}"#,
            t0,
        );
        let cur = stats(
            r#"{"stats":[
            {"name":"redis.main.downstream_rq_total","value":3000},
            {"name":"redis.main.downstream_cx_active","value":4},
            {"name":"redis.main.command.get.total","value":2400},
            {"name":"redis.main.command.get.error","value":0},
            {"name":"redis.main.command.set.total","value":600},
            {"name":"redis.main.command.set.error","value":30},
            {"name":"cluster.cache.host.127.0.0.1:6379.rq_total","value":3000},
            {"name":"cluster.cache.host.127.0.0.1:6379.rq_error","value":3},
            {"name":"cluster.cache.host.127.0.0.1:6379.rq_timeout","value":2},
            {"name":"cluster.cache.host.127.0.0.1:6379.cx_active","value":2},
            {"histograms":{"details":[
              {"name":"redis.main.command.get.latency","totals":[{"lower_bound":1,"width":1,"count":1600},{"lower_bound":7,"width":1,"count":800}],"intervals":[]},
              {"name":"cluster.cache.host.127.0.0.1:6379.rq_time","totals":[{"lower_bound":100,"width":1,"count":1000},{"lower_bound":250,"width":2,"count":2000}],"intervals":[]}
            ]}}]}"#,
            t0 + Duration::from_secs(2),
        );
        let units: BTreeMap<String, bool> = [("main".to_owned(), false)].into();
        let health = vec![HostHealth {
            cluster: "cache".into(),
            host: "127.0.0.1:6379".into(),
            health: "ejected".into(),
        }];
        let v = compute("127.0.0.1:9901", &prev, &cur, Some(&units), Some(&health));
        assert_eq!(v.summary.rps, 1000.0);
        assert_eq!(v.summary.cx_active, 4);
        // 20 errors of 2000 commands in the interval.
        assert_eq!(v.summary.error_ratio, Some(0.01));
        let cmds: Vec<(&str, f64, f64)> = v
            .commands
            .iter()
            .map(|c| (c.command.as_str(), c.rps, c.errors_per_s))
            .collect();
        assert_eq!(cmds, [("get", 800.0, 0.0), ("set", 200.0, 10.0)]);
        let get = &v.commands[0];
        // Interval: 800 at 1 ms, 800 at 7 ms.
        assert_eq!(
            (get.p50, get.p99, get.unit),
            (Some(1), Some(7), Unit::Millis)
        );
        assert_eq!(
            (v.commands[1].p50, v.commands[1].unit),
            (None, Unit::Millis)
        );
        let h = &v.hosts[0];
        assert_eq!(
            (h.cluster.as_str(), h.host.as_str(), h.health.as_str()),
            ("cache", "127.0.0.1:6379", "ejected")
        );
        assert_eq!((h.rps, h.errors_per_s, h.cx_active), (1000.0, 2.0, 2));
        assert_eq!((h.p50_us, h.p99_us), (Some(251), Some(251)));

        let v = compute("a", &prev, &cur, None, None);
        assert_eq!(v.commands[0].unit, Unit::Unknown);
        assert_eq!(v.hosts[0].health, "?");
    }

    #[test]
    fn stat_names_with_dots() {
        assert_eq!(
            command_stat("redis.p.command.bf.add.total"),
            Some(("p", "bf.add", "total"))
        );
        assert_eq!(
            host_stat("cluster.c.host.10.0.0.1:7000.rq_time"),
            Some(("c", "10.0.0.1:7000", "rq_time"))
        );
        assert_eq!(command_stat("redis.p.downstream_rq_total"), None);
        assert_eq!(host_stat("cluster.c.upstream_rq_total"), None);
    }
}

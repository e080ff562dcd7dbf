//! Per-run metrics derived from a load [`Report`], and medians across repetitions.

use serde::Serialize;

use super::cases::{Case, Group};
use crate::report::Report;

/// Cores of untracked CPU use above which a run is flagged noisy.
pub const NOISY_CORES: f64 = 0.1;

/// The numbers of one run (or the medians of several). Latencies in µs, CPU in µs per request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Metrics {
    /// Requests/second achieved.
    pub rps: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// The proxy process (all threads); `None` for Redis direct.
    pub proxy_cpu_us_per_req: Option<f64>,
    /// All redis-servers together.
    pub redis_cpu_us_per_req: Option<f64>,
    /// The load generator (this process).
    pub client_cpu_us_per_req: Option<f64>,
    /// client + proxy + redis.
    pub machine_cpu_us_per_req: Option<f64>,
    /// CPU used by everything else on the machine, in cores over the run (/proc/stat busy minus
    /// the tracked processes).
    pub other_cores: Option<f64>,
    /// `other_cores > NOISY_CORES`.
    pub noisy: bool,
    /// Error replies plus failed connections.
    pub errors: u64,
    /// Open loop: p50 / p99 of how late the load generator wrote requests versus their intended
    /// time, µs (a floor under the measured latency that belongs to the client).
    pub send_lag_p50_us: Option<f64>,
    pub send_lag_p99_us: Option<f64>,
}

impl Metrics {
    /// Metrics of one run whose report tracked `respite-bench` (first), `proxy` and `redis*`.
    pub fn from_report(r: &Report) -> Self {
        let per_req = |us: u64| (r.requests > 0).then(|| us as f64 / r.requests as f64);
        let mut client = None;
        let mut proxy = None;
        let mut redis: Option<u64> = None;
        for (i, c) in r.cpu.iter().enumerate() {
            let Some(us) = c.cpu_us else { continue };
            if i == 0 {
                client = Some(us);
            } else if c.label == "proxy" {
                proxy = Some(us);
            } else if c.label.starts_with("redis") {
                redis = Some(redis.unwrap_or(0) + us);
            }
        }
        let tracked = client.unwrap_or(0) + proxy.unwrap_or(0) + redis.unwrap_or(0);
        let other_cores = r
            .machine_busy_us
            .filter(|_| r.elapsed_s > 0.0)
            .map(|busy| busy.saturating_sub(tracked) as f64 / 1e6 / r.elapsed_s);
        let l = &r.latency_us;
        Metrics {
            rps: r.rps,
            p50_us: l.p50,
            p90_us: l.p90,
            p99_us: l.p99,
            p999_us: l.p999,
            max_us: l.max,
            proxy_cpu_us_per_req: proxy.and_then(per_req),
            redis_cpu_us_per_req: redis.and_then(per_req),
            client_cpu_us_per_req: client.and_then(per_req),
            machine_cpu_us_per_req: per_req(tracked),
            other_cores,
            noisy: other_cores.is_some_and(|o| o > NOISY_CORES),
            errors: r.errors + r.connection_errors.len() as u64,
            send_lag_p50_us: r.send_lag_us.as_ref().map(|l| l.p50),
            send_lag_p99_us: r.send_lag_us.as_ref().map(|l| l.p99),
        }
    }
}

/// Median of the values (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One run as stored in the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub rep: usize,
    pub case: String,
    pub group: Group,
    pub target: String,
    pub metrics: Metrics,
    /// The full load report (parameters, CPU per process, latency curve).
    pub report: Report,
    /// `--stats-reader` runs: complete admin stats fetches per second during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats_fetches_per_s: Option<f64>,
    /// `--stats-reader` comparison runs: respite's worker and admin thread CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<super::stats_reader::ThreadCpuResult>,
    /// Stateful runs against Respite: leased upstream connections opened and open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leased: Option<super::stateful::LeasedConnects>,
    /// Pub/sub runs: published and delivered messages, order checks, Respite's fan-out stats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pubsub: Option<super::pubsub::FanOutRun>,
}

/// Medians over the repetitions of one case × target.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub case: String,
    pub label: String,
    pub group: Group,
    pub target: String,
    pub connections: usize,
    pub pipeline: usize,
    /// Open-loop target rate, requests/second.
    pub rate: Option<f64>,
    pub reps: usize,
    /// Repetitions flagged noisy.
    pub noisy_reps: usize,
    /// Median of each metric independently.
    pub median: Metrics,
    /// (percentile, median latency µs) for plots.
    pub latency_curve_us: Vec<(f64, f64)>,
}

/// Medians for every case × target that has runs, in case order then `targets` order.
pub fn summarize(runs: &[RunRecord], cases: &[Case], targets: &[String]) -> Vec<Summary> {
    let mut out = Vec::new();
    for case in cases {
        for target in targets {
            let rs: Vec<&RunRecord> = runs
                .iter()
                .filter(|r| r.case == case.id && &r.target == target)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let med = |f: &dyn Fn(&Metrics) -> f64| {
                median(&rs.iter().map(|r| f(&r.metrics)).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            let med_opt = |f: &dyn Fn(&Metrics) -> Option<f64>| {
                median(&rs.iter().filter_map(|r| f(&r.metrics)).collect::<Vec<_>>())
            };
            let noisy_reps = rs.iter().filter(|r| r.metrics.noisy).count();
            let curve = rs[0]
                .report
                .latency_curve_us
                .iter()
                .enumerate()
                .filter_map(|(i, &(p, _))| {
                    let vals: Vec<f64> = rs
                        .iter()
                        .filter_map(|r| r.report.latency_curve_us.get(i).map(|x| x.1))
                        .collect();
                    median(&vals).map(|m| (p, m))
                })
                .collect();
            out.push(Summary {
                case: case.id.to_string(),
                label: case.label.to_string(),
                group: case.group,
                target: target.clone(),
                connections: case.connections,
                pipeline: case.pipeline,
                rate: rs[0].report.params.rate,
                reps: rs.len(),
                noisy_reps,
                median: Metrics {
                    rps: med(&|m| m.rps),
                    p50_us: med(&|m| m.p50_us),
                    p90_us: med(&|m| m.p90_us),
                    p99_us: med(&|m| m.p99_us),
                    p999_us: med(&|m| m.p999_us),
                    max_us: med(&|m| m.max_us),
                    proxy_cpu_us_per_req: med_opt(&|m| m.proxy_cpu_us_per_req),
                    redis_cpu_us_per_req: med_opt(&|m| m.redis_cpu_us_per_req),
                    client_cpu_us_per_req: med_opt(&|m| m.client_cpu_us_per_req),
                    machine_cpu_us_per_req: med_opt(&|m| m.machine_cpu_us_per_req),
                    other_cores: med_opt(&|m| m.other_cores),
                    noisy: noisy_reps > 0,
                    errors: rs.iter().map(|r| r.metrics.errors).sum(),
                    send_lag_p50_us: med_opt(&|m| m.send_lag_p50_us),
                    send_lag_p99_us: med_opt(&|m| m.send_lag_p99_us),
                },
                latency_curve_us: curve,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{LoadConfig, Stop};
    use crate::mix::parse_mix;
    use crate::report::CpuUsage;
    use std::time::Duration;

    fn report(machine_busy_us: u64) -> Report {
        let cfg = LoadConfig {
            target: "t".into(),
            addr: ([127, 0, 0, 1], 1).into(),
            connections: 1,
            pipeline: 1,
            threads: 1,
            mix: parse_mix("get").unwrap(),
            keyspace: 1,
            value_size: 3,
            stop: Stop::Duration(Duration::from_secs(2)),
            warmup: None,
            prefill: false,
            auth: None,
            pids: Vec::new(),
            rate: None,
            key_offset: 0,
            quiet: true,
            cluster: false,
            tls: None,
        };
        let mut r = Report::new(&cfg, 1);
        r.requests = 100_000;
        r.elapsed_s = 2.0;
        r.rps = 50_000.0;
        let d = Duration::from_secs(2);
        let cpu = |label: &str, ms: u64| {
            CpuUsage::new(
                label.into(),
                Some(1),
                Some(Duration::from_millis(ms)),
                100_000,
                d,
            )
        };
        r.cpu = vec![
            cpu("respite-bench", 400),
            cpu("proxy", 600),
            cpu("redis1", 300),
            cpu("redis2", 200),
        ];
        r.machine_busy_us = Some(machine_busy_us);
        r
    }

    #[test]
    fn metrics_from_report() {
        // Tracked: 1.5 s of CPU; machine busy 1.6 s over 2 s -> 0.05 core of other CPU.
        let m = Metrics::from_report(&report(1_600_000));
        assert_eq!(m.client_cpu_us_per_req, Some(4.0));
        assert_eq!(m.proxy_cpu_us_per_req, Some(6.0));
        assert_eq!(m.redis_cpu_us_per_req, Some(5.0));
        assert_eq!(m.machine_cpu_us_per_req, Some(15.0));
        assert!((m.other_cores.unwrap() - 0.05).abs() < 1e-9);
        assert!(!m.noisy);
        // 2.0 s busy -> 0.25 core of other CPU: noisy.
        let m = Metrics::from_report(&report(2_000_000));
        assert!(m.noisy);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 2.0]), Some(2.0));
    }
}

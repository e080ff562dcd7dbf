//! Run reports: a readable text table and JSON (serde).

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::load::{LoadConfig, Stop};

/// The parameters a run was made with.
#[derive(Debug, Clone, Serialize)]
pub struct RunParams {
    pub mix: String,
    pub connections: usize,
    pub pipeline: usize,
    pub threads: usize,
    pub keyspace: u64,
    pub value_size: usize,
    /// `-n`, when the run was bounded by a request count.
    pub requests: Option<u64>,
    /// `--duration` in seconds, when the run was bounded by time.
    pub duration_s: Option<f64>,
    pub warmup_s: Option<f64>,
    pub prefill: bool,
    /// Open-loop target rate in requests/second (`None` = closed loop).
    pub rate: Option<f64>,
    /// Connections were TLS (handshakes before the load, not measured).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Open loop: how late the load generator wrote requests versus their intended send times, µs.
/// Large values mean the client (not the target) could not keep up with the schedule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SendLag {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// CPU time of one process over the measured interval.
#[derive(Debug, Clone, Serialize)]
pub struct CpuUsage {
    pub label: String,
    pub pid: Option<u32>,
    /// CPU time (utime + stime) in µs; `None` if /proc could not be read (process gone?).
    pub cpu_us: Option<u64>,
    /// CPU µs per measured request.
    pub us_per_request: Option<f64>,
    /// Average cores busy over the measured interval.
    pub cores: Option<f64>,
}

impl CpuUsage {
    pub fn new(
        label: String,
        pid: Option<u32>,
        cpu: Option<Duration>,
        requests: u64,
        elapsed: Duration,
    ) -> Self {
        let cpu_us = cpu.map(|c| c.as_micros() as u64);
        CpuUsage {
            label,
            pid,
            cpu_us,
            us_per_request: cpu_us
                .filter(|_| requests > 0)
                .map(|c| c as f64 / requests as f64),
            cores: cpu
                .filter(|_| !elapsed.is_zero())
                .map(|c| c.as_secs_f64() / elapsed.as_secs_f64()),
        }
    }
}

/// The result of one load run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    pub params: RunParams,
    /// Measured requests (commands; an MGET of 10 keys is one request).
    pub requests: u64,
    /// Replies that were RESP errors (`-...`).
    pub errors: u64,
    pub first_error: Option<String>,
    /// Nil replies (e.g. GET of a missing key).
    pub nil_replies: u64,
    pub elapsed_s: f64,
    pub rps: f64,
    pub latency_us: Latency,
    /// (percentile, latency µs) at the percentiles of [`CURVE_PERCENTILES`], for plots.
    pub latency_curve_us: Vec<(f64, f64)>,
    /// Open loop only: client send lag behind the schedule.
    pub send_lag_us: Option<SendLag>,
    /// Busy CPU µs of the whole machine (all CPUs, /proc/stat) over the measured interval.
    pub machine_busy_us: Option<u64>,
    /// This process first, then every `--pid`.
    pub cpu: Vec<CpuUsage>,
    pub prefill_errors: u64,
    pub prefill_first_error: Option<String>,
    /// Connections that failed (I/O or RESP framing errors); their requests are not counted.
    pub connection_errors: Vec<String>,
}

/// Percentiles recorded in [`Report::latency_curve_us`].
pub const CURVE_PERCENTILES: [f64; 10] = [
    50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999,
];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl Report {
    pub fn new(cfg: &LoadConfig, threads: usize) -> Self {
        Report {
            target: cfg.target.clone(),
            params: RunParams {
                mix: cfg.mix.to_string(),
                connections: cfg.connections,
                pipeline: cfg.pipeline,
                threads,
                keyspace: cfg.keyspace,
                value_size: cfg.value_size,
                requests: match cfg.stop {
                    Stop::Requests(n) => Some(n),
                    Stop::Duration(_) => None,
                },
                duration_s: match cfg.stop {
                    Stop::Requests(_) => None,
                    Stop::Duration(d) => Some(d.as_secs_f64()),
                },
                warmup_s: cfg.warmup.map(|w| w.as_secs_f64()),
                prefill: cfg.prefill,
                rate: cfg.rate,
                tls: cfg.tls.is_some(),
            },
            requests: 0,
            errors: 0,
            first_error: None,
            nil_replies: 0,
            elapsed_s: 0.0,
            rps: 0.0,
            latency_us: Latency::default(),
            latency_curve_us: Vec::new(),
            machine_busy_us: None,
            send_lag_us: None,
            cpu: Vec::new(),
            prefill_errors: 0,
            prefill_first_error: None,
            connection_errors: Vec::new(),
        }
    }

    /// Fills elapsed time, throughput and latency from the merged histogram (nanoseconds).
    pub fn set_timing(&mut self, elapsed: Duration, hist: &Histogram<u64>) {
        self.elapsed_s = elapsed.as_secs_f64();
        self.rps = if self.elapsed_s > 0.0 {
            self.requests as f64 / self.elapsed_s
        } else {
            0.0
        };
        if !hist.is_empty() {
            self.latency_us = Latency {
                min: us(hist.min()),
                mean: hist.mean() / 1000.0,
                p50: us(hist.value_at_quantile(0.50)),
                p90: us(hist.value_at_quantile(0.90)),
                p99: us(hist.value_at_quantile(0.99)),
                p999: us(hist.value_at_quantile(0.999)),
                max: us(hist.max()),
            };
            self.latency_curve_us = CURVE_PERCENTILES
                .iter()
                .map(|&p| (p, us(hist.value_at_quantile(p / 100.0))))
                .collect();
        }
    }

    /// Whether the run had failures that make its numbers untrustworthy.
    pub fn failed(&self) -> bool {
        !self.connection_errors.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }

    pub fn to_text(&self) -> String {
        let p = &self.params;
        let mut s = String::new();
        let bound = match (p.requests, p.duration_s) {
            (Some(n), _) => format!("n={n}"),
            (None, Some(d)) => format!("duration={d}s"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "respite-bench → {}  mix={}  c={}  P={}  threads={}  keyspace={}  value={}B  {}{}{}",
            self.target,
            p.mix,
            p.connections,
            p.pipeline,
            p.threads,
            p.keyspace,
            p.value_size,
            bound,
            if p.prefill { "  prefill" } else { "" },
            if p.tls { "  TLS" } else { "" },
        );
        let _ = writeln!(s, "  requests     {:>12}", group(self.requests));
        let _ = writeln!(
            s,
            "  errors       {:>12}{}",
            group(self.errors),
            match &self.first_error {
                Some(e) => format!("   first: {e}"),
                None => String::new(),
            }
        );
        let _ = writeln!(s, "  nil replies  {:>12}", group(self.nil_replies));
        let _ = writeln!(s, "  elapsed      {:>12.3} s", self.elapsed_s);
        let _ = writeln!(
            s,
            "  throughput   {:>12} req/s{}",
            group(self.rps.round() as u64),
            match p.rate {
                Some(r) => format!("   (open loop, target {} req/s)", group(r.round() as u64)),
                None => String::new(),
            }
        );
        let l = &self.latency_us;
        let _ = writeln!(
            s,
            "  latency µs   {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        let _ = writeln!(
            s,
            "               {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            l.mean, l.p50, l.p90, l.p99, l.p999, l.max
        );
        if let Some(lag) = &self.send_lag_us {
            let _ = writeln!(
                s,
                "  send lag µs  p50 {:.1}  p99 {:.1}  max {:.1}   (client lateness vs schedule)",
                lag.p50, lag.p99, lag.max
            );
        }
        let _ = writeln!(
            s,
            "  cpu          {:<24} {:>10} {:>8} {:>10}",
            "process", "µs/req", "cores", "cpu ms"
        );
        for c in &self.cpu {
            let name = match c.pid {
                Some(pid) => format!("{}[{}]", c.label, pid),
                None => c.label.clone(),
            };
            let f = |v: Option<f64>, prec: usize| {
                v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.prec$}"))
            };
            let _ = writeln!(
                s,
                "               {:<24} {:>10} {:>8} {:>10}",
                name,
                f(c.us_per_request, 2),
                f(c.cores, 2),
                f(c.cpu_us.map(|u| u as f64 / 1000.0), 0),
            );
        }
        if self.prefill_errors > 0 {
            let _ = writeln!(
                s,
                "  prefill errors {}   first: {}",
                group(self.prefill_errors),
                self.prefill_first_error.as_deref().unwrap_or("")
            );
        }
        for e in &self.connection_errors {
            let _ = writeln!(s, "  FAILED {e}");
        }
        s
    }
}

/// 1234567 -> "1 234 567" (thin grouping that reads well in tables).
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::group;

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1 000");
        assert_eq!(group(1234567), "1 234 567");
    }
}

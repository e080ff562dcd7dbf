//! `compare --baseline-bin`: the current Respite against a baseline build of it in one run. The
//! baseline runs as `respite-1w-baseline` (1 worker, `respite-1w`'s config, same backends), right
//! after `respite-1w` in every repetition of every case, so that a shared machine's drift hits
//! both alike; a change's before/after then comes from the same run instead of two runs minutes
//! apart, whose noise on a shared machine is larger than most hot-path changes.

use std::fmt::Write as _;

use serde::Serialize;

use super::metrics::{RunRecord, Summary};
use super::table::{fmt_cpu, fmt_rps, fmt_us, ratio};

/// Target name of the baseline binary's runs.
pub const TARGET: &str = "respite-1w-baseline";
/// The target of the current binary it is compared with.
pub const CURRENT: &str = "respite-1w";

/// One binary's medians in a case. Latencies in µs, CPU in µs per request.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// All of Respite's threads.
    pub proxy_cpu_us_per_req: Option<f64>,
    /// All redis-servers together.
    pub redis_cpu_us_per_req: Option<f64>,
    /// Repetitions flagged noisy (other processes used more than the threshold).
    pub noisy_reps: usize,
}

impl From<&Summary> for Side {
    fn from(s: &Summary) -> Side {
        let m = &s.median;
        Side {
            rps: m.rps,
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            proxy_cpu_us_per_req: m.proxy_cpu_us_per_req,
            redis_cpu_us_per_req: m.redis_cpu_us_per_req,
            noisy_reps: s.noisy_reps,
        }
    }
}

/// One case, current vs baseline, as stored in the JSON (`baseline`).
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    pub case: String,
    pub label: String,
    pub current: Side,
    pub baseline: Side,
    /// Median proxy CPU per request, current / baseline (below 1: the current binary is cheaper).
    pub proxy_cpu_ratio: Option<f64>,
    /// The same ratio within each repetition (the two runs of a rep are adjacent), in rep order:
    /// its spread is what this run's noise does to the figure.
    pub proxy_cpu_ratio_per_rep: Vec<f64>,
}

/// The pairs of every case that has medians of both [`CURRENT`] and [`TARGET`], in case order.
pub fn pairs(medians: &[Summary], runs: &[RunRecord]) -> Vec<Pair> {
    let proxy_cpu = |case: &str, rep: usize, target: &str| {
        runs.iter()
            .find(|r| r.case == case && r.rep == rep && r.target == target)
            .and_then(|r| r.metrics.proxy_cpu_us_per_req)
    };
    medians
        .iter()
        .filter(|b| b.target == TARGET)
        .filter_map(|b| {
            let c = medians
                .iter()
                .find(|m| m.case == b.case && m.target == CURRENT)?;
            let (current, baseline) = (Side::from(c), Side::from(b));
            let mut reps: Vec<usize> = runs
                .iter()
                .filter(|r| r.case == b.case && r.target == TARGET)
                .map(|r| r.rep)
                .collect();
            reps.sort_unstable();
            reps.dedup();
            Some(Pair {
                case: b.case.clone(),
                label: b.label.clone(),
                proxy_cpu_ratio: ratio(current.proxy_cpu_us_per_req, baseline.proxy_cpu_us_per_req),
                current,
                baseline,
                proxy_cpu_ratio_per_rep: reps
                    .into_iter()
                    .filter_map(|rep| {
                        ratio(
                            proxy_cpu(&b.case, rep, CURRENT),
                            proxy_cpu(&b.case, rep, TARGET),
                        )
                    })
                    .collect(),
            })
        })
        .collect()
}

/// The `## Current vs baseline` section; empty without pairs. `bin` is the baseline binary's
/// path as given.
pub fn render(pairs: &[Pair], bin: &str) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Current vs baseline ({CURRENT} vs {TARGET} = `{bin}`, 1 worker each)\n"
    );
    let _ = writeln!(
        s,
        "| case | rps current | baseline | p50 current | baseline | p99 current | baseline | proxy CPU µs/req current | baseline | current / baseline | per rep | redis CPU µs/req current | baseline | noisy |"
    );
    let _ = writeln!(
        s,
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    );
    for p in pairs {
        let (c, b) = (&p.current, &p.baseline);
        let per_rep: Vec<String> = p
            .proxy_cpu_ratio_per_rep
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect();
        let noisy = if c.noisy_reps + b.noisy_reps > 0 {
            format!("* ({}/{})", c.noisy_reps, b.noisy_reps)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.label,
            fmt_rps(c.rps),
            fmt_rps(b.rps),
            fmt_us(c.p50_us),
            fmt_us(b.p50_us),
            fmt_us(c.p99_us),
            fmt_us(b.p99_us),
            fmt_cpu(c.proxy_cpu_us_per_req),
            fmt_cpu(b.proxy_cpu_us_per_req),
            fmt_cpu(p.proxy_cpu_ratio),
            if per_rep.is_empty() {
                "–".to_string()
            } else {
                per_rep.join(" ")
            },
            fmt_cpu(c.redis_cpu_us_per_req),
            fmt_cpu(b.redis_cpu_us_per_req),
            noisy,
        );
    }
    let _ = writeln!(
        s,
        "\nMedians over the reps; \"per rep\" = current / baseline proxy CPU per request within each \
         rep (the two runs are adjacent), whose spread is the noise to judge the median ratio by. \
         noisy = `*` (noisy reps current/baseline).\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::super::cases::Group;
    use super::super::metrics::Metrics;
    use super::*;

    fn summary(target: &str, proxy_cpu: f64, noisy_reps: usize) -> Summary {
        Summary {
            case: "get-p1".into(),
            label: "GET P1".into(),
            group: Group::Main,
            target: target.into(),
            connections: 50,
            pipeline: 1,
            rate: None,
            reps: 2,
            noisy_reps,
            median: Metrics {
                rps: 100_000.0,
                p50_us: 250.0,
                p99_us: 1234.4,
                proxy_cpu_us_per_req: Some(proxy_cpu),
                redis_cpu_us_per_req: Some(3.5),
                ..Metrics::default()
            },
            latency_curve_us: Vec::new(),
        }
    }

    fn run(rep: usize, target: &str, proxy_cpu: f64) -> RunRecord {
        let cfg = crate::load::LoadConfig {
            target: target.into(),
            addr: ([127, 0, 0, 1], 1).into(),
            connections: 1,
            pipeline: 1,
            threads: 1,
            mix: crate::mix::parse_mix("get").unwrap(),
            keyspace: 1,
            value_size: 3,
            stop: crate::load::Stop::Requests(1),
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
        RunRecord {
            rep,
            case: "get-p1".into(),
            group: Group::Main,
            target: target.into(),
            metrics: Metrics {
                proxy_cpu_us_per_req: Some(proxy_cpu),
                ..Metrics::default()
            },
            report: crate::report::Report::new(&cfg, 1),
            stats_fetches_per_s: None,
            threads: None,
            leased: None,
            pubsub: None,
        }
    }

    #[test]
    fn pairs_and_section() {
        let medians = vec![
            summary("direct", 0.0, 0),
            summary(CURRENT, 4.5, 1),
            summary(TARGET, 5.0, 0),
        ];
        let runs = vec![
            run(1, CURRENT, 4.0),
            run(1, TARGET, 5.0),
            run(2, CURRENT, 5.0),
            run(2, TARGET, 5.0),
        ];
        let p = pairs(&medians, &runs);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].proxy_cpu_ratio, Some(0.9));
        assert_eq!(p[0].proxy_cpu_ratio_per_rep, [0.8, 1.0]);
        let md = render(&p, "/tmp/respite-base");
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "## Current vs baseline (respite-1w vs respite-1w-baseline = `/tmp/respite-base`, 1 worker each)"
        );
        assert_eq!(
            lines[4],
            "| GET P1 | 100 000 | 100 000 | 250 | 250 | 1234 | 1234 | 4.50 | 5.00 | 0.90 | 0.80 1.00 | 3.50 | 3.50 | * (1/0) |"
        );
        let cols = lines[2].matches('|').count();
        assert_eq!(lines[3].matches('|').count(), cols);
        assert_eq!(lines[4].matches('|').count(), cols);
        // Without baseline runs there is no section.
        assert!(pairs(&medians[..2], &runs).is_empty());
        assert_eq!(render(&[], "x"), "");
    }
}

//! The Markdown report: main cases, scaling sweeps, stateful cases, pub/sub, memory.

use std::fmt::Write as _;
use std::path::Path;

use super::Output;
use super::cases::Group;
use super::memory::MemoryResult;
use super::metrics::Summary;

/// 1234567.8 -> "1 234 568".
pub fn fmt_rps(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

/// Latency µs: one decimal below 100, none above.
pub fn fmt_us(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// CPU µs/request with two decimals, `–` when unknown.
pub fn fmt_cpu(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

/// `a / b`; `None` when either is unknown or `b` is not positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// `a / b` with two decimals, `–` when either is unknown or `b` is 0.
pub fn fmt_ratio(a: Option<f64>, b: Option<f64>) -> String {
    fmt_cpu(ratio(a, b))
}

fn baseline_rps(all: &[Summary], case: &str, baseline: &str) -> Option<f64> {
    all.iter()
        .find(|s| s.case == case && s.target == baseline)
        .map(|s| s.median.rps)
        .filter(|r| *r > 0.0)
}

fn noisy_mark(s: &Summary) -> String {
    if s.noisy_reps > 0 {
        format!("* ({}/{})", s.noisy_reps, s.reps)
    } else {
        String::new()
    }
}

/// How a table is laid out besides its rows.
pub struct Layout<'a> {
    /// Name of the first column.
    pub first: &'a str,
    /// The target the rps ratio column divides by (its header is `×<baseline>`).
    pub baseline: &'a str,
    /// Add a load-generator CPU column (the cluster comparison, where the client does routing).
    pub client_cpu: bool,
}

/// The layout of the standalone comparison's tables.
pub const fn standalone(first: &str) -> Layout<'_> {
    Layout {
        first,
        baseline: "direct",
        client_cpu: false,
    }
}

/// One table; `key` gives the first column's value for a summary.
pub fn table(
    all: &[Summary],
    rows: &[&Summary],
    layout: &Layout,
    key: &dyn Fn(&Summary) -> String,
) -> String {
    let mut s = String::new();
    let (client_head, client_sep) = if layout.client_cpu {
        (" client CPU µs/req |", "--:|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        s,
        "| {} | target | rps | ×{} | p50 | p90 | p99 | p99.9 | proxy CPU µs/req | redis CPU µs/req |{client_head} whole-machine CPU µs/req | noisy |",
        layout.first, layout.baseline
    );
    let _ = writeln!(
        s,
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|{client_sep}--:|---|"
    );
    for r in rows {
        let m = &r.median;
        let ratio = baseline_rps(all, &r.case, layout.baseline)
            .map_or_else(|| "–".to_string(), |d| format!("{:.2}", m.rps / d));
        let client = if layout.client_cpu {
            format!(" {} |", fmt_cpu(m.client_cpu_us_per_req))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{client} {} | {} |",
            key(r),
            r.target,
            fmt_rps(m.rps),
            ratio,
            fmt_us(m.p50_us),
            fmt_us(m.p90_us),
            fmt_us(m.p99_us),
            fmt_us(m.p999_us),
            fmt_cpu(m.proxy_cpu_us_per_req),
            fmt_cpu(m.redis_cpu_us_per_req),
            fmt_cpu(m.machine_cpu_us_per_req),
            noisy_mark(r),
        );
    }
    s
}

/// The memory table.
pub fn memory_table(mem: &[MemoryResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| proxy | idle connections | RSS before KiB | RSS after KiB | KiB per connection |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|");
    for m in mem {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} |",
            m.target,
            fmt_rps(m.connections as f64),
            fmt_rps(m.rss_before_kib as f64),
            fmt_rps(m.rss_after_kib as f64),
            m.kib_per_connection
        );
    }
    s
}

/// The `Machine: …` paragraph.
pub fn machine_line(o: &Output) -> String {
    let m = &o.machine;
    format!(
        "Machine: {} CPUs, {}, kernel {}, load average at start {}; {}; {}; respite {}.\n",
        m.nproc,
        m.cpu_model.as_deref().unwrap_or("?"),
        m.kernel.as_deref().unwrap_or("?"),
        m.loadavg_at_start
            .map_or_else(|| "?".into(), |l| format!("{} {} {}", l[0], l[1], l[2])),
        m.redis_version.as_deref().unwrap_or("redis-server ?"),
        m.nutcracker_version.as_deref().unwrap_or("nutcracker ?"),
        m.respite_commit.as_deref().unwrap_or("?"),
    )
}

/// The `## Failures` section (empty without failures).
pub fn failures(o: &Output) -> String {
    let mut s = String::new();
    if !o.failures.is_empty() {
        let _ = writeln!(s, "## Failures\n");
        for f in &o.failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
    s
}

/// The whole Markdown report.
pub fn render(o: &Output) -> String {
    let mut s = String::new();
    let st = &o.settings;
    let _ = writeln!(s, "# Respite comparison {}\n", o.timestamp);
    let _ = writeln!(s, "{}", machine_line(o));
    let _ = writeln!(
        s,
        "Medians of {} rep(s) of {} s runs ({} s warm-up), interleaved; {} redis-servers behind \
         each proxy, Redis direct = the first. Latency in µs; CPU in µs per request (proxy = all \
         its threads; whole machine = load generator + proxy + redis). Load generator threads: \
         {}. `*` = other processes used more than {} core in k of n reps.\n",
        st.reps,
        st.duration_s,
        st.warmup_s,
        st.redis_servers,
        st.client_threads,
        st.noisy_threshold_cores
    );
    let main: Vec<&Summary> = o
        .medians
        .iter()
        .filter(|x| matches!(x.group, Group::Main | Group::OpenLoop))
        .collect();
    if !main.is_empty() {
        let _ = writeln!(
            s,
            "## Main cases (50 connections, 3-byte values unless the case says 1 KiB, 100 000 keys)\n"
        );
        s.push_str(&table(
            &o.medians,
            &main,
            &standalone("case"),
            &|x| match x.rate {
                Some(r) => format!("{} @ {} rps", x.label, fmt_rps(r)),
                None => x.label.clone(),
            },
        ));
        let lags: Vec<String> = main
            .iter()
            .filter_map(|x| {
                let (p50, p99) = (x.median.send_lag_p50_us?, x.median.send_lag_p99_us?);
                Some(format!("{} {}/{}", x.target, fmt_us(p50), fmt_us(p99)))
            })
            .collect();
        if !lags.is_empty() {
            let _ = writeln!(
                s,
                "\nOpen loop: latency counts from each request's intended send time. Load generator \
                 send lag behind the schedule, p50/p99 µs (included in the latency above; the \
                 client's share): {}.",
                lags.join(", ")
            );
        }
        s.push('\n');
    }
    let conns: Vec<&Summary> = o
        .medians
        .iter()
        .filter(|x| x.group == Group::Connections)
        .collect();
    if !conns.is_empty() {
        let _ = writeln!(s, "## Scaling: connections (GET P1)\n");
        s.push_str(&table(
            &o.medians,
            &conns,
            &standalone("connections"),
            &|x| fmt_rps(x.connections as f64),
        ));
        s.push('\n');
    }
    let pipe: Vec<&Summary> = {
        let mut v: Vec<&Summary> = o
            .medians
            .iter()
            .filter(|x| {
                x.group == Group::Pipeline || matches!(x.case.as_str(), "get-p1" | "get-p16")
            })
            .collect();
        v.sort_by_key(|x| x.pipeline);
        v
    };
    if pipe.iter().any(|x| x.group == Group::Pipeline) {
        let _ = writeln!(s, "## Scaling: pipeline depth (GET, 50 connections)\n");
        s.push_str(&table(&o.medians, &pipe, &standalone("pipeline"), &|x| {
            x.pipeline.to_string()
        }));
        s.push('\n');
    }
    let baseline_bin = o.settings.baseline_bin.as_deref().unwrap_or(Path::new(""));
    s.push_str(&super::baseline::render(
        &o.baseline,
        &baseline_bin.display().to_string(),
    ));
    s.push_str(&super::stats_reader::render(o));
    s.push_str(&super::stateful::render(o));
    s.push_str(&super::pubsub::render(o));
    if !o.memory.is_empty() {
        let _ = writeln!(s, "## Memory per idle client connection\n");
        s.push_str(&memory_table(&o.memory));
        s.push('\n');
    }
    s.push_str(&failures(o));
    s
}

#[cfg(test)]
mod tests {
    use super::super::metrics::Metrics;
    use super::*;

    fn summary(case: &str, target: &str, rps: f64, noisy: usize) -> Summary {
        Summary {
            case: case.into(),
            label: "GET P1".into(),
            group: Group::Main,
            target: target.into(),
            connections: 50,
            pipeline: 1,
            rate: None,
            reps: 3,
            noisy_reps: noisy,
            median: Metrics {
                rps,
                p50_us: 250.0,
                p90_us: 800.0,
                p99_us: 1234.4,
                p999_us: 99.94,
                proxy_cpu_us_per_req: (target != "direct").then_some(6.891),
                redis_cpu_us_per_req: Some(3.5),
                machine_cpu_us_per_req: Some(20.0),
                ..Metrics::default()
            },
            latency_curve_us: Vec::new(),
        }
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_rps(1_052_632.4), "1 052 632");
        assert_eq!(fmt_rps(999.0), "999");
        assert_eq!(fmt_us(99.94), "99.9");
        assert_eq!(fmt_us(1234.5), "1234");
        assert_eq!(fmt_cpu(None), "–");
        assert_eq!(fmt_cpu(Some(6.891)), "6.89");
        assert_eq!(fmt_ratio(Some(1.0), Some(4.0)), "0.25");
        assert_eq!(fmt_ratio(None, Some(4.0)), "–");
        assert_eq!(fmt_ratio(Some(1.0), Some(0.0)), "–");
    }

    #[test]
    fn main_table_rows() {
        let all = vec![
            summary("get-p1", "direct", 160_000.0, 0),
            summary("get-p1", "twemproxy", 80_000.0, 1),
        ];
        let rows: Vec<&Summary> = all.iter().collect();
        let t = table(&all, &rows, &standalone("case"), &|x| x.label.clone());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].starts_with("| case | target | rps | ×direct | p50 | p90 | p99 | p99.9 |")
        );
        assert_eq!(
            lines[2],
            "| GET P1 | direct | 160 000 | 1.00 | 250 | 800 | 1234 | 99.9 | – | 3.50 | 20.00 |  |"
        );
        assert_eq!(
            lines[3],
            "| GET P1 | twemproxy | 80 000 | 0.50 | 250 | 800 | 1234 | 99.9 | 6.89 | 3.50 | 20.00 | * (1/3) |"
        );
        // Every row has the header's column count.
        let cols = lines[0].matches('|').count();
        assert!(lines.iter().all(|l| l.matches('|').count() == cols));
    }

    #[test]
    fn memory_rows() {
        let t = memory_table(&[MemoryResult {
            target: "twemproxy".into(),
            connections: 10_000,
            rss_before_kib: 4000,
            rss_after_kib: 14_000,
            kib_per_connection: 1.0,
        }]);
        assert!(t.contains("| twemproxy | 10 000 | 4 000 | 14 000 | 1.00 |"));
    }
}

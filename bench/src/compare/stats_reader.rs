//! `compare --stats-reader`: what reading the admin stats in a tight loop costs the workers
//! (issue 7: "Reading /stats in a tight loop during a benchmark costs the workers less than 2%
//! throughput"). The case runs against `respite-1w` twice per repetition, interleaved: as is, and
//! as `respite-1w+stats` — the same process while a thread here fetches `/stats` and
//! `/stats/prometheus` back to back, as fast as the admin endpoint answers.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use super::Output;
use super::metrics::Summary;
use super::table::{fmt_cpu, fmt_rps};

/// Target name of the runs made with the reader.
pub const TARGET: &str = "respite-1w+stats";
/// The target it is compared with.
pub const BASELINE: &str = "respite-1w";
/// Paths fetched in turn.
pub const PATHS: [&str; 2] = ["/stats", "/stats/prometheus"];

/// A running reader thread.
pub struct StatsReader {
    stop: Arc<AtomicBool>,
    fetches: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    started: Instant,
    thread: Option<JoinHandle<()>>,
}

/// What one reader did.
#[derive(Debug, Clone, Copy)]
pub struct ReaderResult {
    /// Complete `200` answers per second over the reader's lifetime.
    pub fetches_per_s: f64,
    /// Failed fetches.
    pub errors: u64,
}

impl StatsReader {
    /// Starts fetching from the admin endpoint at `admin`.
    pub fn start(admin: SocketAddr) -> StatsReader {
        let stop = Arc::new(AtomicBool::new(false));
        let fetches = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, fetches, errors) = (stop.clone(), fetches.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    match respite::top::http::get(admin, PATHS[i % PATHS.len()]) {
                        Ok(_) => fetches.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                    i += 1;
                }
            })
        };
        StatsReader {
            stop,
            fetches,
            errors,
            started: Instant::now(),
            thread: Some(thread),
        }
    }

    /// Stops the thread and reports its rate.
    pub fn finish(mut self) -> ReaderResult {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let secs = self.started.elapsed().as_secs_f64();
        ReaderResult {
            fetches_per_s: self.fetches.load(Ordering::Relaxed) as f64 / secs.max(1e-9),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

impl Drop for StatsReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The `## Stats reader` section: per case, throughput and proxy CPU per request without and
/// with the reader (medians), their ratio, and the reader's fetch rate. Empty without reader runs.
pub fn render(o: &Output) -> String {
    let with: Vec<&Summary> = o.medians.iter().filter(|m| m.target == TARGET).collect();
    if with.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Stats reader (respite-1w; a thread fetching {} in a tight loop)\n",
        PATHS.join(" and ")
    );
    let _ = writeln!(
        s,
        "| case | rps without | rps with | with / without | proxy CPU µs/req without | with | admin fetches/s |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|");
    for w in with {
        let Some(base) = o
            .medians
            .iter()
            .find(|m| m.case == w.case && m.target == BASELINE)
        else {
            continue;
        };
        let fetches: Vec<f64> = o
            .runs
            .iter()
            .filter(|r| r.case == w.case && r.target == TARGET)
            .filter_map(|r| r.stats_fetches_per_s)
            .collect();
        let ratio = if base.median.rps > 0.0 {
            format!("{:.3}", w.median.rps / base.median.rps)
        } else {
            "–".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            w.label,
            fmt_rps(base.median.rps),
            fmt_rps(w.median.rps),
            ratio,
            fmt_cpu(base.median.proxy_cpu_us_per_req),
            fmt_cpu(w.median.proxy_cpu_us_per_req),
            super::metrics::median(&fetches).map_or_else(|| "–".into(), fmt_rps),
        );
    }
    let _ = writeln!(
        s,
        "\nproxy CPU includes the admin thread rendering the stats; the reader thread runs in the \
         load generator (client CPU), on the same cores.\n"
    );
    s
}

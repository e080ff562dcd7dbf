//! `compare --stats-reader`: what reading the admin stats in a tight loop costs the workers
//! (the goal: less than 2% of their throughput). The case runs against `respite-1w` twice per repetition, interleaved: as is, and
//! as `respite-1w+stats` — the same process while a thread here fetches `/stats` and
//! `/stats/prometheus` back to back, as fast as the admin endpoint answers.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Output;
use super::metrics::Summary;
use super::table::{fmt_cpu, fmt_rps};

/// Target name of the runs made with the reader.
pub const TARGET: &str = "respite-1w+stats";
/// The target it is compared with.
pub const BASELINE: &str = "respite-1w";
/// Paths fetched in turn.
pub const PATHS: [&str; 2] = ["/stats", "/stats/prometheus"];

/// CPU time (utime + stime) of the threads of `pid` whose name starts with `prefix`
/// (`/proc/PID/task/*/{comm,stat}`): respite names its workers `respite-worker-<i>` and its admin
/// thread `respite-admin`. `None` when no such thread exists.
pub fn thread_cpu(pid: u32, prefix: &str) -> Option<Duration> {
    let tick = crate::procstat::clock_ticks();
    let mut ticks = 0;
    let mut found = false;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        if let Some(t) = crate::procstat::parse_stat_ticks(&stat) {
            ticks += t;
            found = true;
        }
    }
    found.then(|| Duration::from_micros(ticks * 1_000_000 / tick))
}

/// CPU of respite's worker threads and of its admin thread over one run.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpu {
    pid: u32,
    started: Instant,
    workers: Option<Duration>,
    admin: Option<Duration>,
}

/// [`ThreadCpu`]'s result.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ThreadCpuResult {
    /// Worker-thread CPU µs per request: worker CPU over the whole run (warm-up included)
    /// divided by (measured req/s × run wall time).
    pub worker_cpu_us_per_req: Option<f64>,
    /// Cores the admin thread used over the run.
    pub admin_cores: Option<f64>,
}

impl ThreadCpu {
    /// Starts measuring the threads of `pid`.
    pub fn start(pid: u32) -> ThreadCpu {
        ThreadCpu {
            pid,
            started: Instant::now(),
            workers: thread_cpu(pid, "respite-worker"),
            admin: thread_cpu(pid, "respite-admin"),
        }
    }

    /// The figures since `start`, for a run that measured `rps`.
    pub fn finish(self, rps: f64) -> ThreadCpuResult {
        let wall = self.started.elapsed().as_secs_f64();
        let delta = |before: Option<Duration>, prefix: &str| {
            Some(
                thread_cpu(self.pid, prefix)?
                    .saturating_sub(before?)
                    .as_secs_f64(),
            )
        };
        ThreadCpuResult {
            worker_cpu_us_per_req: delta(self.workers, "respite-worker")
                .filter(|_| rps > 0.0 && wall > 0.0)
                .map(|cpu| cpu * 1e6 / (rps * wall)),
            admin_cores: delta(self.admin, "respite-admin")
                .filter(|_| wall > 0.0)
                .map(|cpu| cpu / wall),
        }
    }
}

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
                    match respite_tools::admin_client::get(admin, PATHS[i % PATHS.len()]) {
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
        "| case | rps without | rps with | with / without | proxy CPU µs/req without | with | worker CPU µs/req without | with | admin thread cores with | admin fetches/s |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for w in with {
        let Some(base) = o
            .medians
            .iter()
            .find(|m| m.case == w.case && m.target == BASELINE)
        else {
            continue;
        };
        let med = |target: &str, f: &dyn Fn(&super::metrics::RunRecord) -> Option<f64>| {
            let v: Vec<f64> = o
                .runs
                .iter()
                .filter(|r| r.case == w.case && r.target == target)
                .filter_map(f)
                .collect();
            super::metrics::median(&v)
        };
        let fetches = med(TARGET, &|r| r.stats_fetches_per_s);
        let worker = |t| med(t, &|r| r.threads.and_then(|c| c.worker_cpu_us_per_req));
        let admin = med(TARGET, &|r| r.threads.and_then(|c| c.admin_cores));
        let ratio = if base.median.rps > 0.0 {
            format!("{:.3}", w.median.rps / base.median.rps)
        } else {
            "–".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.label,
            fmt_rps(base.median.rps),
            fmt_rps(w.median.rps),
            ratio,
            fmt_cpu(base.median.proxy_cpu_us_per_req),
            fmt_cpu(w.median.proxy_cpu_us_per_req),
            fmt_cpu(worker(BASELINE)),
            fmt_cpu(worker(TARGET)),
            admin.map_or_else(|| "–".into(), |a| format!("{a:.2}")),
            fetches.map_or_else(|| "–".into(), fmt_rps),
        );
    }
    let _ = writeln!(
        s,
        "\nproxy CPU = all of respite's threads, including the admin thread that renders the stats; \
         worker CPU = its `respite-worker-*` threads only (what a stalled or slowed worker would \
         show). The reader thread runs in the load generator, on the same cores as everything \
         else: on a machine with few cores its CPU and the admin thread's come out of the \
         throughput.\n"
    );
    s
}

//! The soak's report: the verdict with each check, the ledger, the load, the chaos events and
//! Respite's memory and file descriptors over time, as JSON and Markdown (and a short summary
//! for the terminal).

use std::fmt::Write as _;

use serde::Serialize;

use super::churn::ChurnResult;
use super::ledger::LedgerResult;
use super::load::LoadResult;
use crate::compare::sysstat::MachineInfo;

/// Everything written to `<timestamp>-soak.json`.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub timestamp: String,
    pub machine: MachineInfo,
    pub settings: Settings,
    /// `PASS` or `FAIL`.
    pub verdict: &'static str,
    pub checks: Vec<Check>,
    pub ledger: LedgerResult,
    pub load: LoadResult,
    pub churn: ChurnResult,
    pub reloads: Reloads,
    pub restarts: Vec<Restart>,
    pub respite: Health,
    pub memory: Memory,
    pub samples: Vec<Sample>,
}

/// The settings the soak ran with.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub duration_s: f64,
    pub warmup_s: f64,
    pub settle_s: f64,
    pub reload_every_s: f64,
    pub restart_every_s: f64,
    pub sample_every_s: f64,
    pub connections: usize,
    pub pipeline: usize,
    pub value_size: usize,
    pub ledger_keys: usize,
    pub churn_per_sec: u32,
    pub workers: usize,
    pub backends: usize,
    /// redis-server persistence of every backend.
    pub backend_persistence: &'static str,
}

/// One verdict criterion.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub pass: bool,
    pub detail: String,
}

/// SIGHUPs sent with a rewritten config, and what Respite logged about them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reloads {
    pub sent: u64,
    /// `config reloaded` lines in Respite's log.
    pub applied: usize,
    /// `config reload rejected` lines.
    pub rejected: usize,
}

/// One backend restart.
#[derive(Debug, Clone, Serialize)]
pub struct Restart {
    /// Seconds since the load started.
    pub t_s: f64,
    pub backend: String,
    /// From SIGTERM until it answered PING again.
    pub down_ms: u64,
    /// It exited on SIGTERM (not killed after the wait).
    pub clean_exit: bool,
    pub error: Option<String>,
}

/// Respite at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub alive: bool,
    /// Lines with `panicked` in its log.
    pub panics: usize,
    /// Its log (kept only when the soak fails).
    pub log: String,
}

/// Respite's memory and descriptors: after the warm-up (under load) and at the end (idle, after
/// the settle).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Memory {
    pub warm_rss_kib: u64,
    pub end_rss_kib: u64,
    pub peak_rss_kib: u64,
    /// The end may be this much above the warm-up: max(16 MiB, 20 %).
    pub rss_tolerance_kib: u64,
    pub warm_fds: usize,
    pub end_fds: usize,
    pub peak_fds: usize,
    pub fd_tolerance: usize,
}

/// One sample of Respite's process.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// `warmup`, `load` or `settle`.
    pub phase: &'static str,
    pub rss_kib: u64,
    pub fds: usize,
}

impl SoakReport {
    /// The lines printed at the end of a run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "soak verdict: {}", self.verdict);
        for c in &self.checks {
            let _ = writeln!(
                s,
                "  [{}] {}: {}",
                if c.pass { "ok" } else { "FAIL" },
                c.name,
                c.detail
            );
        }
        let l = &self.load;
        let _ = writeln!(
            s,
            "load: {} requests, {} ok, {} error replies, {} unanswered, {} reconnects; \
             pipeline p50 {} µs, p99 {} µs, max {} µs",
            l.requests,
            l.ok,
            l.error_replies,
            l.unanswered,
            l.reconnects,
            l.pipeline_p50_us,
            l.pipeline_p99_us,
            l.pipeline_max_us
        );
        let _ = writeln!(
            s,
            "ledger: {} keys (per backend {:?}), {} acknowledged INCRs, {} unknown, final sum {}, \
             lost {}",
            self.ledger.keys,
            self.ledger.keys_per_backend,
            self.ledger.acknowledged,
            self.ledger.unknown,
            self.ledger.value_sum,
            self.ledger.lost
        );
        let _ = writeln!(
            s,
            "churn: {} connections ({} connect failures); reloads: {} sent, {} applied; \
             backend restarts: {}",
            self.churn.connections,
            self.churn.connect_failures,
            self.reloads.sent,
            self.reloads.applied,
            self.restarts.len()
        );
        let m = &self.memory;
        let _ = writeln!(
            s,
            "respite RSS: {} KiB after warm-up, peak {} KiB, {} KiB at the end; fds {} → {} \
             (peak {})",
            m.warm_rss_kib, m.peak_rss_kib, m.end_rss_kib, m.warm_fds, m.end_fds, m.peak_fds
        );
        s
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let st = &self.settings;
        let _ = writeln!(s, "# Respite soak {} — {}\n", self.timestamp, self.verdict);
        let _ = writeln!(
            s,
            "{} s of load ({} s warm-up) over {} redis-servers ({}), {} connections × pipeline \
             {} of GET 45 % / SET 20 % / MGET8 15 % / INCR 20 % ({} B values, {} ledger keys), \
             {} churned connections/s, a config reload every {} s, a backend restart every {} s; \
             respite with {} workers. Machine: {} CPUs, load average at start {}.\n",
            st.duration_s,
            st.warmup_s,
            st.backends,
            st.backend_persistence,
            st.connections,
            st.pipeline,
            st.value_size,
            st.ledger_keys,
            st.churn_per_sec,
            st.reload_every_s,
            st.restart_every_s,
            st.workers,
            self.machine.nproc,
            self.machine.loadavg_at_start.map_or_else(
                || "unknown".into(),
                |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
            )
        );
        let _ = writeln!(
            s,
            "## Verdict: {}\n\n| check | result | detail |\n|---|---|---|",
            self.verdict
        );
        for c in &self.checks {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                c.name,
                if c.pass { "ok" } else { "**FAIL**" },
                c.detail
            );
        }
        let l = &self.ledger;
        let _ = writeln!(
            s,
            "\n## Ledger\n\n| keys (per backend) | acknowledged | unknown | final sum | lost | \
             unexplained |\n|--:|--:|--:|--:|--:|--:|\n| {} ({:?}) | {} | {} | {} | {} | {} |",
            l.keys,
            l.keys_per_backend,
            l.acknowledged,
            l.unknown,
            l.value_sum,
            l.lost,
            l.unexplained
        );
        for v in &l.violations {
            let _ = writeln!(
                s,
                "\n- `{}`: acknowledged {}, unknown {}, largest reply {}, final value {}",
                v.key, v.acknowledged, v.unknown, v.max_reply, v.value
            );
        }
        let d = &self.load;
        let _ = writeln!(
            s,
            "\n## Load\n\n| requests | ok | error replies | unanswered | reconnects | pipeline \
             p50 µs | p99 µs | max µs |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n| {} | {} | {} | {} \
             | {} | {} | {} | {} |",
            d.requests,
            d.ok,
            d.error_replies,
            d.unanswered,
            d.reconnects,
            d.pipeline_p50_us,
            d.pipeline_p99_us,
            d.pipeline_max_us
        );
        if !d.errors.is_empty() {
            let _ = writeln!(s, "\nErrors seen (during backend restarts, expected):\n");
            for (e, n) in &d.errors {
                let _ = writeln!(s, "- {n} × `{}`", e.replace('`', "'"));
            }
        }
        let c = &self.churn;
        let _ = writeln!(
            s,
            "\nChurn: {} connections, {} connect failures, {} PINGs unanswered. Reloads: {} \
             sent, {} applied, {} rejected.\n\n## Backend restarts\n\n| t (s) | backend | down \
             (ms) | clean exit | error |\n|--:|---|--:|---|---|",
            c.connections,
            c.connect_failures,
            c.ping_failures,
            self.reloads.sent,
            self.reloads.applied,
            self.reloads.rejected
        );
        for r in &self.restarts {
            let _ = writeln!(
                s,
                "| {:.1} | {} | {} | {} | {} |",
                r.t_s,
                r.backend,
                r.down_ms,
                r.clean_exit,
                r.error.as_deref().unwrap_or("")
            );
        }
        let m = &self.memory;
        let _ = writeln!(
            s,
            "\n## Respite memory and descriptors\n\n| | after warm-up | peak | end (idle) | \
             tolerance |\n|---|--:|--:|--:|--:|\n| RSS KiB | {} | {} | {} | +{} |\n| fds | {} \
             | {} | {} | +{} |\n\nRespite alive at the end: {}; panics in its log: {}.\n",
            m.warm_rss_kib,
            m.peak_rss_kib,
            m.end_rss_kib,
            m.rss_tolerance_kib,
            m.warm_fds,
            m.peak_fds,
            m.end_fds,
            m.fd_tolerance,
            self.respite.alive,
            self.respite.panics
        );
        let _ = writeln!(
            s,
            "### Samples\n\n| t (s) | phase | RSS KiB | fds |\n|--:|---|--:|--:|"
        );
        // At most ~60 rows: every k-th sample plus the last.
        let k = self.samples.len().div_ceil(60).max(1);
        for (i, x) in self.samples.iter().enumerate() {
            if i % k == 0 || i + 1 == self.samples.len() {
                let _ = writeln!(
                    s,
                    "| {:.1} | {} | {} | {} |",
                    x.t_s, x.phase, x.rss_kib, x.fds
                );
            }
        }
        s
    }
}

//! The attack's report: memory of Respite and of every backend through the phases, what the
//! attackers did and what Respite did to them, the probes' latency per phase, and the large
//! SETs; JSON, Markdown and a terminal summary.

use std::fmt::Write as _;

use serde::Serialize;

use super::attackers::AttackerResult;
use super::large::LargeSet;
use super::probe::ProbeStats;
use super::sampler::{BackendSeries, MemSample};
use crate::compare::sysstat::MachineInfo;

/// Everything written to `<timestamp>-attack.json`.
#[derive(Debug, Serialize)]
pub struct AttackReport {
    pub timestamp: String,
    pub machine: MachineInfo,
    pub settings: Settings,
    /// Respite alive at the end and no `panicked` in its log.
    pub respite_healthy: bool,
    pub respite_alive: bool,
    pub respite_panics: usize,
    /// The backend holding the big value.
    pub big_backend: String,
    pub attackers: AttackerResult,
    /// Seconds the attack actually ran.
    pub attack_s: f64,
    /// Set when a backend's RSS passed `--backend-rss-cap-mib` and the attack was cut short.
    pub guard: Option<String>,
    /// Backends SIGKILLed past 1.5 × the cap (and started again empty).
    pub killed_backends: Vec<String>,
    /// Respite's counters after the settle (summed over listeners).
    pub evicted_clients: i64,
    pub client_output_buffer_limit_disconnections: i64,
    pub downstream_cx_active_after_settle: i64,
    pub respite_rss: RespiteRss,
    pub backends: Vec<BackendMemory>,
    pub large: Large,
    pub probes: Vec<ProbeStats>,
    pub samples: Vec<MemSample>,
    /// Every backend's own `INFO memory` answers, in the order of `backends`.
    pub backend_series: Vec<BackendSeries>,
}

/// The flags the attack ran with.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub value_size: usize,
    pub clients: usize,
    pub requests: usize,
    pub attack_for_s: f64,
    pub settle_s: f64,
    pub large_clients: usize,
    pub large_mib: u64,
    pub backend_rss_cap_mib: u64,
    pub probe_interval_ms: f64,
    pub workers: usize,
    /// `runtime.maxmemory_clients` when set by a flag (else Respite's default).
    pub maxmemory_clients: Option<u64>,
    /// `client_output_buffer_limit.hard_limit` when set by a flag (else Respite's default).
    pub output_buffer_hard_limit: Option<u64>,
}

/// Respite's RSS through the attack, KiB.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RespiteRss {
    /// Before the attack, the big value stored and the probes running.
    pub idle_kib: u64,
    pub peak_attack_kib: u64,
    /// After the attackers closed and the settle.
    pub after_settle_kib: u64,
    /// after_settle − idle (negative: below the idle baseline).
    pub after_settle_minus_idle_kib: i64,
}

/// One backend's memory, bytes.
#[derive(Debug, Clone, Serialize)]
pub struct BackendMemory {
    pub name: String,
    pub idle_used: u64,
    pub idle_rss: u64,
    pub peak_used_attack: u64,
    pub peak_rss_attack: u64,
    pub peak_used_large: u64,
    pub peak_rss_large: u64,
    /// `INFO memory` requests that failed (5 s timeout or a broken connection): the backend was
    /// too busy to answer.
    pub info_failures: u64,
    /// The slowest `INFO memory` answer, ms.
    pub slowest_info_ms: u64,
}

/// The large-SET phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Large {
    pub sets: Vec<LargeSet>,
    pub respite_rss_before_kib: u64,
    pub respite_rss_peak_kib: u64,
    /// After the SETs, their keys deleted, and a short settle.
    pub respite_rss_after_kib: u64,
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

impl AttackReport {
    /// The lines printed at the end of a run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let st = &self.settings;
        let a = &self.attackers;
        let _ = writeln!(
            s,
            "attack: {} clients × {} GET of {} B for {:.1} s: {} connected, {} wrote everything, \
             {} write errors, {} KiB of requests written{}",
            st.clients,
            st.requests,
            st.value_size,
            self.attack_s,
            a.connected,
            a.wrote_all,
            a.write_errors,
            a.bytes_written >> 10,
            self.guard
                .as_deref()
                .map_or_else(String::new, |g| format!("; GUARD: {g}"))
        );
        for k in &self.killed_backends {
            let _ = writeln!(s, "hard guard: {k}");
        }
        let r = &self.respite_rss;
        let _ = writeln!(
            s,
            "respite RSS: idle {} KiB, peak during the attack {} KiB, {} KiB after the settle \
             ({:+} KiB vs idle); evicted_clients {}, client_output_buffer_limit_disconnections {}",
            r.idle_kib,
            r.peak_attack_kib,
            r.after_settle_kib,
            r.after_settle_minus_idle_kib,
            self.evicted_clients,
            self.client_output_buffer_limit_disconnections
        );
        for b in &self.backends {
            let _ = writeln!(
                s,
                "{}: used_memory idle {} MiB, peak {} MiB (attack) / {} MiB (large); RSS peak {} \
                 MiB (attack) / {} MiB (large); INFO failed {} times, slowest answer {} ms",
                b.name,
                mib(b.idle_used),
                mib(b.peak_used_attack),
                mib(b.peak_used_large),
                mib(b.peak_rss_attack),
                mib(b.peak_rss_large),
                b.info_failures,
                b.slowest_info_ms
            );
        }
        for p in &self.probes {
            let _ = writeln!(
                s,
                "probe {} {}: {} GETs, {} failed, p50 {} ms, p99 {} ms, max {} ms",
                p.backend,
                p.phase,
                p.samples,
                p.failures,
                ms(p.p50_us),
                ms(p.p99_us),
                ms(p.max_us)
            );
        }
        let l = &self.large;
        let ok = l.sets.iter().filter(|x| x.ok).count();
        let _ = writeln!(
            s,
            "large: {}/{} SETs of {} MiB ok; respite RSS {} KiB before, peak {} KiB, {} KiB after",
            ok,
            l.sets.len(),
            st.large_mib,
            l.respite_rss_before_kib,
            l.respite_rss_peak_kib,
            l.respite_rss_after_kib
        );
        let _ = writeln!(
            s,
            "respite: {} (alive {}, {} panics)",
            if self.respite_healthy {
                "healthy"
            } else {
                "UNHEALTHY"
            },
            self.respite_alive,
            self.respite_panics
        );
        s
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let st = &self.settings;
        let _ = writeln!(s, "# Respite hostile-client attack {}\n", self.timestamp);
        let _ = writeln!(
            s,
            "{} connections each pipelining {} `GET big` ({} B value, on {}) and never reading, \
             for {} s (ran {:.1} s), then {} s settle; then {} concurrent SETs of {} MiB. One \
             probe client per backend GETs a small key every {} ms throughout. Respite: {} \
             workers, maxmemory_clients {}, client_output_buffer_limit hard {}. Backend RSS cap \
             {} MiB. Machine: {} CPUs, load average at start {}.\n",
            st.clients,
            st.requests,
            st.value_size,
            self.big_backend,
            st.attack_for_s,
            self.attack_s,
            st.settle_s,
            st.large_clients,
            st.large_mib,
            st.probe_interval_ms,
            st.workers,
            st.maxmemory_clients
                .map_or_else(|| "default".into(), |v| v.to_string()),
            st.output_buffer_hard_limit
                .map_or_else(|| "default".into(), |v| v.to_string()),
            st.backend_rss_cap_mib,
            self.machine.nproc,
            self.machine.loadavg_at_start.map_or_else(
                || "unknown".into(),
                |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
            )
        );
        if let Some(g) = &self.guard {
            let _ = writeln!(s, "**Guard tripped: {g}; the attack was stopped.**\n");
        }
        for k in &self.killed_backends {
            let _ = writeln!(s, "**Hard guard: {k}.**\n");
        }
        let a = &self.attackers;
        let _ = writeln!(
            s,
            "## Attackers\n\n| connected | connect failures | wrote everything | write errors \
             (closed by respite) | KiB written | evicted_clients | output-limit disconnections \
             | clients left after settle |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n| {} | {} | {} | \
             {} | {} | {} | {} | {} |\n",
            a.connected,
            a.connect_failures,
            a.wrote_all,
            a.write_errors,
            a.bytes_written >> 10,
            self.evicted_clients,
            self.client_output_buffer_limit_disconnections,
            self.downstream_cx_active_after_settle
        );
        let r = &self.respite_rss;
        let _ = writeln!(
            s,
            "## Memory\n\n| process | idle | peak (attack) | after settle | peak (large) |\n\
             |---|--:|--:|--:|--:|\n| respite RSS MiB | {} | {} | {} | {} |",
            mib(r.idle_kib << 10),
            mib(r.peak_attack_kib << 10),
            mib(r.after_settle_kib << 10),
            mib(self.large.respite_rss_peak_kib << 10)
        );
        for b in &self.backends {
            let _ = writeln!(
                s,
                "| {} used_memory MiB | {} | {} | – | {} |\n| {} RSS MiB | {} | {} | – | {} |",
                b.name,
                mib(b.idle_used),
                mib(b.peak_used_attack),
                mib(b.peak_used_large),
                b.name,
                mib(b.idle_rss),
                mib(b.peak_rss_attack),
                mib(b.peak_rss_large)
            );
        }
        for b in &self.backends {
            let _ = writeln!(
                s,
                "\n{}: `INFO memory` failed {} times (5 s timeout), slowest answer {} ms.",
                b.name, b.info_failures, b.slowest_info_ms
            );
        }
        let _ = writeln!(
            s,
            "\nRespite after the settle: {:+} KiB vs idle. Respite healthy at the end: {} (alive \
             {}, {} panics).\n\n## Probes (other clients' latency)\n\n| backend | phase | GETs | \
             failed | p50 ms | p99 ms | max ms |\n|---|---|--:|--:|--:|--:|--:|",
            r.after_settle_minus_idle_kib,
            self.respite_healthy,
            self.respite_alive,
            self.respite_panics
        );
        for p in &self.probes {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.backend,
                p.phase,
                p.samples,
                p.failures,
                ms(p.p50_us),
                ms(p.p99_us),
                ms(p.max_us)
            );
        }
        let l = &self.large;
        let _ = writeln!(
            s,
            "\n## Large SETs\n\nRespite RSS {} MiB before, peak {} MiB during, {} MiB after \
             (keys deleted).\n\n| key | MiB | ms | outcome |\n|---|--:|--:|---|",
            mib(l.respite_rss_before_kib << 10),
            mib(l.respite_rss_peak_kib << 10),
            mib(l.respite_rss_after_kib << 10)
        );
        for x in &l.sets {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                x.key,
                x.mib,
                x.elapsed_ms,
                x.outcome.replace('|', "/")
            );
        }
        let _ = writeln!(
            s,
            "\n## Over time\n\n| t (s) | phase | respite RSS MiB | fds | backends used_memory \
             MiB (latest answer) | backends RSS MiB (latest answer) |\n|--:|---|--:|--:|---|---|"
        );
        let k = self.samples.len().div_ceil(80).max(1);
        for (i, x) in self.samples.iter().enumerate() {
            if i % k == 0 || i + 1 == self.samples.len() {
                let list = |v: &[u64]| v.iter().map(|b| mib(*b)).collect::<Vec<_>>().join(" / ");
                let _ = writeln!(
                    s,
                    "| {:.1} | {} | {} | {} | {} | {} |",
                    x.t_s,
                    x.phase,
                    mib(x.respite_rss_kib << 10),
                    x.respite_fds,
                    list(&x.backend_used),
                    list(&x.backend_rss)
                );
            }
        }
        s
    }
}

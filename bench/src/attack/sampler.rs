//! Memory over time during the attack: Respite's RSS and descriptors and every backend's RSS
//! from /proc, and every backend's `used_memory` and `used_memory_rss` from `INFO memory` on a
//! direct connection. It is also the guard: a backend whose RSS passes the cap trips it, and
//! the attack stops early (so a proxy that lets Redis buffer without bound cannot take the
//! machine down with it). The guard reads /proc, not only INFO: a backend busy writing
//! gigabytes of output buffer has been seen taking seconds to answer INFO.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::compare::sysstat::rss_kib;
use crate::fleet::{Direct, fd_count};

/// Phase names, indexed by [`Sampler::set_phase`].
pub const PHASES: [&str; 5] = ["idle", "attack", "settle", "large", "after"];

/// One sample of Respite, with the latest memory figures each backend gave.
#[derive(Debug, Clone, Serialize)]
pub struct MemSample {
    pub t_s: f64,
    pub phase: &'static str,
    pub respite_rss_kib: u64,
    pub respite_fds: usize,
    /// Per backend, in the order given: the latest `used_memory` and `used_memory_rss` read,
    /// bytes (0 before the first answer). A backend too busy to answer INFO keeps its last
    /// figures here; its own series shows the gap.
    pub backend_used: Vec<u64>,
    pub backend_rss: Vec<u64>,
    /// Per backend: VmRSS from /proc, KiB, read with this sample.
    pub backend_proc_rss_kib: Vec<u64>,
}

/// One `INFO memory` answer of one backend.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BackendSample {
    pub t_s: f64,
    pub used: u64,
    pub rss: u64,
    /// How long INFO took to answer, ms (a backend busy with output buffers answers late).
    pub info_ms: u64,
}

/// One backend's series and how often INFO failed (timed out at 5 s or the connection broke).
#[derive(Debug, Clone, Default, Serialize)]
pub struct BackendSeries {
    pub samples: Vec<BackendSample>,
    pub info_failures: u64,
}

struct Shared {
    stop: AtomicBool,
    phase: AtomicUsize,
    tripped: AtomicBool,
    trip: Mutex<Option<String>>,
    /// Latest (used, rss) per backend.
    latest: Vec<(AtomicU64, AtomicU64)>,
}

/// The running sampler: one thread for Respite, one per backend (so that a backend that takes
/// seconds to answer INFO does not stall the others' samples).
pub struct Sampler {
    shared: Arc<Shared>,
    thread: JoinHandle<Vec<MemSample>>,
    backends: Vec<JoinHandle<BackendSeries>>,
}

impl Sampler {
    /// Samples `pid` and the backends on `ports` (named `names`, processes `pids`) every
    /// `every`, times from `t0`; trips when a backend's RSS passes `cap_bytes`.
    pub fn start(
        pid: u32,
        names: Vec<String>,
        ports: Vec<u16>,
        pids: Vec<u32>,
        every: Duration,
        cap_bytes: u64,
        t0: Instant,
    ) -> Sampler {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            phase: AtomicUsize::new(0),
            tripped: AtomicBool::new(false),
            trip: Mutex::new(None),
            latest: ports
                .iter()
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        });
        let backends = ports
            .into_iter()
            .zip(names.clone())
            .enumerate()
            .map(|(i, (port, name))| {
                let sh = shared.clone();
                std::thread::spawn(move || backend(&sh, i, port, &name, every, cap_bytes, t0))
            })
            .collect();
        let sh = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !sh.stop.load(Ordering::Relaxed) {
                let procs: Vec<u64> = pids.iter().map(|p| rss_kib(*p).unwrap_or(0)).collect();
                for (kib, name) in procs.iter().zip(&names) {
                    if kib << 10 > cap_bytes {
                        sh.trip(name, kib << 10, cap_bytes, t0);
                    }
                }
                samples.push(MemSample {
                    t_s: t0.elapsed().as_secs_f64(),
                    phase: sh.phase(),
                    respite_rss_kib: rss_kib(pid).unwrap_or(0),
                    respite_fds: fd_count(pid).unwrap_or(0),
                    backend_used: sh
                        .latest
                        .iter()
                        .map(|l| l.0.load(Ordering::Relaxed))
                        .collect(),
                    backend_rss: sh
                        .latest
                        .iter()
                        .map(|l| l.1.load(Ordering::Relaxed))
                        .collect(),
                    backend_proc_rss_kib: procs,
                });
                std::thread::sleep(every);
            }
            samples
        });
        Sampler {
            shared,
            thread,
            backends,
        }
    }

    /// Labels the samples from now on with `PHASES[i]`.
    pub fn set_phase(&self, i: usize) {
        self.shared.phase.store(i, Ordering::Relaxed);
    }

    /// The guard's message once a backend passed the cap.
    pub fn tripped(&self) -> Option<String> {
        if !self.shared.tripped.load(Ordering::Relaxed) {
            return None;
        }
        self.shared.trip.lock().ok().and_then(|t| t.clone())
    }

    /// Respite's samples and each backend's series.
    pub fn finish(self) -> (Vec<MemSample>, Vec<BackendSeries>) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let series = self
            .backends
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect();
        (self.thread.join().unwrap_or_default(), series)
    }
}

impl Shared {
    /// Trips the guard (once) for backend `name` at `rss` bytes.
    fn trip(&self, name: &str, rss: u64, cap_bytes: u64, t0: Instant) {
        if self.tripped.swap(true, Ordering::Relaxed) {
            return;
        }
        let msg = format!(
            "{name} RSS {} MiB passed the cap of {} MiB at {:.1} s ({})",
            rss >> 20,
            cap_bytes >> 20,
            t0.elapsed().as_secs_f64(),
            self.phase()
        );
        eprintln!("attack: guard: {msg}");
        if let Ok(mut t) = self.trip.lock() {
            *t = Some(msg);
        }
    }

    fn phase(&self) -> &'static str {
        PHASES
            .get(self.phase.load(Ordering::Relaxed))
            .copied()
            .unwrap_or("?")
    }
}

/// One backend's sampling loop.
fn backend(
    sh: &Shared,
    i: usize,
    port: u16,
    name: &str,
    every: Duration,
    cap_bytes: u64,
    t0: Instant,
) -> BackendSeries {
    let mut series = BackendSeries::default();
    let mut conn: Option<Direct> = None;
    while !sh.stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = Direct::connect(port).ok();
        }
        let asked = Instant::now();
        match conn.as_mut().map(Direct::memory) {
            Some(Ok((used, rss))) => {
                series.samples.push(BackendSample {
                    t_s: t0.elapsed().as_secs_f64(),
                    used,
                    rss,
                    info_ms: asked.elapsed().as_millis() as u64,
                });
                if let Some(l) = sh.latest.get(i) {
                    l.0.store(used, Ordering::Relaxed);
                    l.1.store(rss, Ordering::Relaxed);
                }
                if rss > cap_bytes {
                    sh.trip(name, rss, cap_bytes, t0);
                }
            }
            _ => {
                series.info_failures += 1;
                conn = None;
            }
        }
        std::thread::sleep(every);
    }
    series
}

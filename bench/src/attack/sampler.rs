//! Memory over time during the attack: Respite's RSS and descriptors from /proc, every backend's
//! `used_memory` and `used_memory_rss` from `INFO memory` on a direct connection. It is also
//! the guard: a backend whose RSS passes the cap trips it, and the attack stops early (so a
//! proxy that lets Redis buffer without bound cannot take the machine down with it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::compare::sysstat::rss_kib;
use crate::fleet::{Direct, fd_count};

/// Phase names, indexed by [`Sampler::set_phase`].
pub const PHASES: [&str; 5] = ["idle", "attack", "settle", "large", "after"];

/// One sample.
#[derive(Debug, Clone, Serialize)]
pub struct MemSample {
    pub t_s: f64,
    pub phase: &'static str,
    pub respite_rss_kib: u64,
    pub respite_fds: usize,
    /// Per backend, in the order given: `used_memory` and `used_memory_rss`, bytes (0 when INFO
    /// failed).
    pub backend_used: Vec<u64>,
    pub backend_rss: Vec<u64>,
}

struct Shared {
    stop: AtomicBool,
    phase: AtomicUsize,
    tripped: AtomicBool,
    trip: Mutex<Option<String>>,
}

/// The running sampler.
pub struct Sampler {
    shared: Arc<Shared>,
    thread: JoinHandle<Vec<MemSample>>,
}

impl Sampler {
    /// Samples `pid` and the backends on `ports` (named `names`) every `every`, times from `t0`;
    /// trips when a backend's RSS passes `cap_bytes`.
    pub fn start(
        pid: u32,
        names: Vec<String>,
        ports: Vec<u16>,
        every: Duration,
        cap_bytes: u64,
        t0: Instant,
    ) -> Sampler {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            phase: AtomicUsize::new(0),
            tripped: AtomicBool::new(false),
            trip: Mutex::new(None),
        });
        let sh = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut conns: Vec<Option<Direct>> = ports.iter().map(|_| None).collect();
            let mut samples = Vec::new();
            while !sh.stop.load(Ordering::Relaxed) {
                let phase = PHASES
                    .get(sh.phase.load(Ordering::Relaxed))
                    .copied()
                    .unwrap_or("?");
                let mut used = Vec::with_capacity(ports.len());
                let mut rss = Vec::with_capacity(ports.len());
                for ((conn, port), name) in conns.iter_mut().zip(&ports).zip(&names) {
                    if conn.is_none() {
                        *conn = Direct::connect(*port).ok();
                    }
                    let m = conn.as_mut().map(Direct::memory);
                    let (u, r) = match m {
                        Some(Ok(m)) => m,
                        _ => {
                            *conn = None;
                            (0, 0)
                        }
                    };
                    if r > cap_bytes && !sh.tripped.swap(true, Ordering::Relaxed) {
                        let msg = format!(
                            "{name} RSS {} MiB passed the cap of {} MiB at {:.1} s ({phase})",
                            r >> 20,
                            cap_bytes >> 20,
                            t0.elapsed().as_secs_f64()
                        );
                        eprintln!("attack: guard: {msg}");
                        if let Ok(mut t) = sh.trip.lock() {
                            *t = Some(msg);
                        }
                    }
                    used.push(u);
                    rss.push(r);
                }
                samples.push(MemSample {
                    t_s: t0.elapsed().as_secs_f64(),
                    phase,
                    respite_rss_kib: rss_kib(pid).unwrap_or(0),
                    respite_fds: fd_count(pid).unwrap_or(0),
                    backend_used: used,
                    backend_rss: rss,
                });
                std::thread::sleep(every);
            }
            samples
        });
        Sampler { shared, thread }
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

    pub fn finish(self) -> Vec<MemSample> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

//! Well-behaved clients beside the attack: one per backend, each GETting a small key that lives
//! on its backend at a steady rate through Respite, timing every reply. The samples are kept
//! with their time so that each phase's percentiles can be cut out afterwards.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// One GET: when it was sent (seconds since the attack's clock started), how long its reply
/// took (µs), and whether it was the expected value.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSample {
    pub t_s: f64,
    pub latency_us: u64,
    pub ok: bool,
}

/// A running probe.
pub struct Probe {
    pub backend: String,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<ProbeSample>>,
}

impl Probe {
    /// GETs `key` (whose value is `value`) from `addr` every `interval`; times count from `t0`.
    pub fn start(
        backend: &str,
        addr: SocketAddr,
        key: String,
        value: Vec<u8>,
        interval: Duration,
        t0: Instant,
    ) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run(addr, &key, &value, interval, t0, &flag));
        Probe {
            backend: backend.to_string(),
            stop,
            thread,
        }
    }

    pub fn finish(self) -> (String, Vec<ProbeSample>) {
        self.stop.store(true, Ordering::Relaxed);
        (self.backend, self.thread.join().unwrap_or_default())
    }
}

fn run(
    addr: SocketAddr,
    key: &str,
    value: &[u8],
    interval: Duration,
    t0: Instant,
    stop: &AtomicBool,
) -> Vec<ProbeSample> {
    let request = crate::resp::command(&[b"GET", key.as_bytes()]);
    let mut expected = format!("${}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(value);
    expected.extend_from_slice(b"\r\n");
    let mut samples = Vec::new();
    let mut conn: Option<TcpStream> = None;
    let mut buf = vec![0u8; expected.len()];
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += interval;
        if let Some(w) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        } else {
            next = Instant::now();
        }
        let sent = Instant::now();
        let t_s = sent.duration_since(t0).as_secs_f64();
        let s = match conn.as_mut() {
            Some(s) => s,
            None => match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                Ok(s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = s.set_nodelay(true);
                    conn.insert(s)
                }
                Err(_) => {
                    samples.push(ProbeSample {
                        t_s,
                        latency_us: sent.elapsed().as_micros() as u64,
                        ok: false,
                    });
                    continue;
                }
            },
        };
        let outcome = s
            .write_all(&request)
            .and_then(|()| s.read_exact(&mut buf))
            .map(|()| buf == expected);
        let ok = matches!(outcome, Ok(true));
        if !ok {
            // Why, for the log: an I/O error (reset, end of stream, timeout) or a wrong reply.
            let why = match outcome {
                Err(e) => format!("{:?}: {e}", e.kind()),
                Ok(_) => format!(
                    "reply {:?}",
                    String::from_utf8_lossy(buf.get(..40).unwrap_or(&buf))
                ),
            };
            eprintln!(
                "attack: probe {addr} failed at {t_s:.1} s after {:?}: {why}",
                sent.elapsed()
            );
        }
        samples.push(ProbeSample {
            t_s,
            latency_us: sent.elapsed().as_micros() as u64,
            ok,
        });
        if !ok {
            // An error reply or a broken connection: start clean.
            conn = None;
        }
    }
    samples
}

/// Percentiles of one probe over one phase.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeStats {
    pub backend: String,
    pub phase: String,
    pub samples: usize,
    pub failures: usize,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// The statistics of the samples sent in [`from`, `to`) seconds.
pub fn stats(
    backend: &str,
    phase: &str,
    samples: &[ProbeSample],
    from: f64,
    to: f64,
) -> ProbeStats {
    let mut h = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut failures = 0;
    let mut n = 0;
    for s in samples.iter().filter(|s| s.t_s >= from && s.t_s < to) {
        n += 1;
        if !s.ok {
            failures += 1;
        }
        let _ = h.record(s.latency_us.max(1));
    }
    ProbeStats {
        backend: backend.to_string(),
        phase: phase.to_string(),
        samples: n,
        failures,
        p50_us: if n > 0 { h.value_at_quantile(0.5) } else { 0 },
        p99_us: if n > 0 { h.value_at_quantile(0.99) } else { 0 },
        max_us: h.max(),
    }
}

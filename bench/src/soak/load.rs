//! The soak's steady load: a few connections each sending pipelines of GET, SET, MGET and INCR
//! (the INCRs on ledger keys, accounted in the [`Ledger`]), closed loop, with blocking sockets on
//! one thread per connection. Errors are expected while a backend restarts: they are counted, the
//! connection is reopened when it breaks, and the load goes on.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::ledger::Ledger;
use crate::resp::{ReplyKind, command, parse_reply};

/// Plain keys `soak:key:<n>` the GET/SET/MGET traffic uses.
const KEYSPACE: u64 = 10_000;
/// Keys per MGET.
const MGET_KEYS: u64 = 8;
/// How long a reply may take before the connection is given up on (well above op_timeout).
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What one pipeline slot asked.
#[derive(Clone, Copy)]
enum Op {
    Get,
    Set,
    Mget,
    /// INCR of ledger key i.
    Incr(usize),
}

/// Load settings.
#[derive(Clone)]
pub struct LoadSpec {
    pub port: u16,
    pub connections: usize,
    pub pipeline: usize,
    pub value_size: usize,
}

/// Totals over every connection.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadResult {
    pub requests: u64,
    /// Requests answered with a value (INCR: an integer).
    pub ok: u64,
    /// Requests answered with an error reply.
    pub error_replies: u64,
    /// Requests without a reply (connection lost, timeout).
    pub unanswered: u64,
    /// Connections reopened after a failure.
    pub reconnects: u64,
    /// The most frequent error replies and connection failures, with counts.
    pub errors: BTreeMap<String, u64>,
    /// Pipeline round trips, µs.
    pub pipeline_p50_us: u64,
    pub pipeline_p99_us: u64,
    pub pipeline_max_us: u64,
}

/// The running connections.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Worker>>,
}

impl Load {
    /// Starts `spec.connections` threads.
    pub fn start(spec: &LoadSpec, ledger: Arc<Ledger>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..spec.connections)
            .map(|i| {
                let (spec, ledger, stop) = (spec.clone(), ledger.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut w = Worker::new(i as u64);
                    w.run(&spec, &ledger, &stop);
                    w
                })
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the connections (each finishes its pipeline) and sums their counts.
    pub fn finish(self) -> LoadResult {
        self.stop.store(true, Ordering::Relaxed);
        let mut r = LoadResult::default();
        let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
        for t in self.threads {
            let Ok(w) = t.join() else { continue };
            r.requests += w.requests;
            r.ok += w.ok;
            r.error_replies += w.error_replies;
            r.unanswered += w.unanswered;
            r.reconnects += w.reconnects;
            for (k, v) in w.errors {
                *r.errors.entry(k).or_default() += v;
            }
            let _ = hist.add(&w.hist);
        }
        r.pipeline_p50_us = hist.value_at_quantile(0.5);
        r.pipeline_p99_us = hist.value_at_quantile(0.99);
        r.pipeline_max_us = hist.max();
        r
    }
}

/// One connection's loop and counts.
struct Worker {
    rng: fastrand::Rng,
    requests: u64,
    ok: u64,
    error_replies: u64,
    unanswered: u64,
    reconnects: u64,
    errors: BTreeMap<String, u64>,
    hist: Histogram<u64>,
}

impl Worker {
    fn new(seed: u64) -> Worker {
        Worker {
            rng: fastrand::Rng::with_seed(0x50a4 + seed),
            requests: 0,
            ok: 0,
            error_replies: 0,
            unanswered: 0,
            reconnects: 0,
            errors: BTreeMap::new(),
            hist: Histogram::new(3).expect("3 significant digits is valid"),
        }
    }

    fn note(&mut self, what: String) {
        // Error texts can name keys or hosts: keep the first words so like errors add up.
        let short: String = what.chars().take(48).collect();
        *self.errors.entry(short).or_default() += 1;
    }

    fn run(&mut self, spec: &LoadSpec, ledger: &Ledger, stop: &AtomicBool) {
        let value = vec![b'v'; spec.value_size];
        let mut conn: Option<TcpStream> = None;
        let mut buf = Vec::with_capacity(64 * 1024);
        while !stop.load(Ordering::Relaxed) {
            let mut s = match conn.take() {
                Some(s) => s,
                None => match connect(spec.port) {
                    Ok(s) => s,
                    Err(e) => {
                        self.note(format!("connect: {e}"));
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                },
            };
            let ops: Vec<Op> = (0..spec.pipeline)
                .map(|_| self.pick(ledger.len()))
                .collect();
            let mut out = Vec::new();
            for op in &ops {
                out.extend_from_slice(&self.encode(*op, &value, ledger));
            }
            self.requests += ops.len() as u64;
            let sent = Instant::now();
            buf.clear();
            let answered = match s.write_all(&out) {
                Ok(()) => self.read_replies(&mut s, &ops, &mut buf, ledger),
                Err(e) => {
                    self.note(format!("write: {}", e.kind()));
                    0
                }
            };
            if answered == ops.len() {
                let _ = self.hist.record(sent.elapsed().as_micros() as u64);
                conn = Some(s);
            } else {
                // The connection failed mid-pipeline: whatever had no reply is unknown.
                self.unanswered += (ops.len() - answered) as u64;
                for op in ops.iter().skip(answered) {
                    if let Op::Incr(i) = op {
                        ledger.unknown(*i);
                    }
                }
                self.reconnects += 1;
            }
        }
    }

    /// Reads one reply per op; returns how many came.
    fn read_replies(
        &mut self,
        s: &mut TcpStream,
        ops: &[Op],
        buf: &mut Vec<u8>,
        ledger: &Ledger,
    ) -> usize {
        let mut chunk = [0u8; 64 * 1024];
        let mut pos = 0;
        for (n, op) in ops.iter().enumerate() {
            let reply = loop {
                match parse_reply(buf.get(pos..).unwrap_or_default()) {
                    Ok(Some(r)) => break r,
                    Ok(None) => match s.read(&mut chunk) {
                        Ok(0) => {
                            self.note("connection closed by respite".into());
                            return n;
                        }
                        Ok(k) => buf.extend_from_slice(chunk.get(..k).unwrap_or_default()),
                        Err(e) => {
                            self.note(format!("read: {}", e.kind()));
                            return n;
                        }
                    },
                    Err(e) => {
                        self.note(e.to_string());
                        return n;
                    }
                }
            };
            let at = pos;
            let bytes = buf.get(at..at + reply.len).unwrap_or_default();
            pos += reply.len;
            match (reply.kind, op) {
                (ReplyKind::Error { start, end }, _) => {
                    self.error_replies += 1;
                    // The offsets are within the reply parsed at `at`.
                    let msg = buf.get(at + start..at + end).unwrap_or_default();
                    self.note(String::from_utf8_lossy(msg).into_owned());
                    if let Op::Incr(i) = op {
                        ledger.unknown(*i);
                    }
                }
                (_, Op::Incr(i)) => match crate::fleet::integer(bytes) {
                    Some(v) => {
                        self.ok += 1;
                        ledger.acknowledged(*i, v);
                    }
                    None => {
                        self.error_replies += 1;
                        self.note("INCR answered with a non-integer".into());
                        ledger.unknown(*i);
                    }
                },
                _ => self.ok += 1,
            }
        }
        ops.len()
    }

    /// GET 45 %, SET 20 %, MGET 15 %, INCR 20 %.
    fn pick(&mut self, ledger_keys: usize) -> Op {
        match self.rng.u32(0..100) {
            0..45 => Op::Get,
            45..65 => Op::Set,
            65..80 => Op::Mget,
            _ => Op::Incr(self.rng.usize(0..ledger_keys.max(1))),
        }
    }

    fn key(&mut self) -> Vec<u8> {
        format!("soak:key:{}", self.rng.u64(0..KEYSPACE)).into_bytes()
    }

    fn encode(&mut self, op: Op, value: &[u8], ledger: &Ledger) -> Vec<u8> {
        match op {
            Op::Get => command(&[b"GET", &self.key()]),
            Op::Set => command(&[b"SET", &self.key(), value]),
            Op::Mget => {
                let keys: Vec<Vec<u8>> = (0..MGET_KEYS).map(|_| self.key()).collect();
                let mut args: Vec<&[u8]> = vec![b"MGET"];
                args.extend(keys.iter().map(Vec::as_slice));
                command(&args)
            }
            Op::Incr(i) => command(&[b"INCR", ledger.name(i).as_bytes()]),
        }
    }
}

fn connect(port: u16) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    s.set_write_timeout(Some(READ_TIMEOUT))?;
    s.set_nodelay(true)?;
    Ok(s)
}

//! `respite migrate verify`: SCAN the source and compare every key (or a sample) with the
//! target.
//!
//! A key found different is read again on both sides up to twice, about 100 ms and then 400 ms
//! later, and counts only if it still differs: with a live, mirrored workload a write can land
//! on the source between the two reads and on the target a moment later, which is not a
//! difference. The re-checks wait in a queue while the scan goes on, so many real differences
//! (e.g. verify before copy) do not stall the run. A key that disappears from the source
//! meanwhile (expired, deleted) is skipped. Re-reads take tokens from `--rate` like first reads.
//!
//! HyperLogLogs (strings with Redis's HLL header) are compared without the cardinality cached
//! in their header: PFCOUNT, a read the mirror does not copy, rewrites it on one side only.
//! A sparse HLL on one side and a dense one on the other are compared by PFCOUNT on both sides.
//!
//! A run that checks no key while the source is not empty (a `--match` that matches nothing)
//! warns `checked 0 keys` on stderr; `--from` and `--to` naming the same server are refused.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::compare::{compare, hll_needs_counts};
use super::endpoint::{Endpoint, KeyClient};
use super::progress;
use super::rate::TokenBucket;
use super::report::{Diff, DiffKind, VerifySummary, printable};
use super::scan::{Position, Scanner};
use super::value::{cmd1, fetch};
use super::{Result, VerifyArgs};

/// Pauses before the re-reads of a key found different.
const RECHECK_PAUSES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// Seed of the sampling hash (any constant: it only has to be the same on every run).
const SAMPLE_SEED: u64 = 0x7265_7370_6974_6521;

/// A key found different, waiting for its next re-read.
struct Pending {
    key: Vec<u8>,
    due: Instant,
    /// Re-reads done so far.
    rechecks: usize,
}

/// The state of one run.
struct Run<'a> {
    args: &'a VerifyArgs,
    src: KeyClient,
    dst: KeyClient,
    tolerance_ms: i64,
    bucket: TokenBucket,
    summary: VerifySummary,
    /// One FIFO per re-check number: its entries all wait the same pause, so each FIFO is in
    /// due order.
    pending: [VecDeque<Pending>; RECHECK_PAUSES.len()],
}

/// Runs verify; the exit code: 0 when differences <= `--max-diffs`, else 1.
pub fn run(args: &VerifyArgs) -> Result<u8> {
    let started = Instant::now();
    let source = Endpoint::open(&args.from)?;
    let target = Endpoint::open(&args.to)?;
    refuse_same_server(&source, &target)?;
    let total = source.dbsize()?;
    let fraction = args.sample.map(|n| sample_fraction(n, total));
    let mut run = Run {
        args,
        src: source.key_client()?,
        dst: target.key_client()?,
        tolerance_ms: i64::try_from(args.ttl_tolerance.as_millis()).unwrap_or(i64::MAX),
        bucket: TokenBucket::new(args.rate),
        summary: VerifySummary {
            source_keys: total,
            ..VerifySummary::default()
        },
        pending: Default::default(),
    };

    let bar = progress::bar(total, "verify");
    let mut scanner = Scanner::new(&source, Position::start(), args.pattern.clone());
    while let Some(keys) = scanner.next_batch()? {
        for key in keys {
            run.summary.scanned += 1;
            bar.inc(1);
            if fraction.is_some_and(|f| !sampled(&key, f)) {
                continue;
            }
            run.summary.checked += 1;
            run.check(key, 0)?;
            run.recheck_due(false)?;
            if run.summary.differences > 0 {
                bar.set_message(format!("{} differences", run.summary.differences));
            }
        }
    }
    run.recheck_due(true)?;
    bar.finish_and_clear();

    let mut summary = run.summary;
    summary.elapsed_seconds = started.elapsed().as_secs_f64();
    if summary.checked == 0 {
        eprintln!(
            "respite migrate verify: warning: checked 0 keys (source {}, {} keys{})",
            source.text,
            total,
            args.pattern
                .as_ref()
                .map_or(String::new(), |p| format!(", --match {p:?}"))
        );
    }
    if args.json {
        let json = serde_json::to_string(&summary).map_err(|e| format!("JSON: {e}"))?;
        println!("{json}");
    } else {
        print!("{}", summary.table());
    }
    Ok(if summary.differences > args.max_diffs {
        1
    } else {
        0
    })
}

impl Run<'_> {
    /// Reads `key` on both sides and counts it, or queues it for re-check number `rechecks`.
    fn check(&mut self, key: Vec<u8>, rechecks: usize) -> Result<()> {
        self.bucket.take();
        match self.compare(&key)? {
            Outcome::Equal => self.summary.equal += 1,
            Outcome::Skipped => self.summary.skipped += 1,
            Outcome::Differs(kind, detail) => match RECHECK_PAUSES.get(rechecks) {
                Some(pause) => self.pending[rechecks].push_back(Pending {
                    key,
                    due: Instant::now() + *pause,
                    rechecks,
                }),
                None => {
                    let diff = Diff {
                        key: printable(&key, 200),
                        kind,
                        detail,
                    };
                    self.summary.add_diff(diff, self.args.show);
                }
            },
        }
        Ok(())
    }

    /// Re-checks the queued keys whose pause is over; with `all`, waits for every one.
    fn recheck_due(&mut self, all: bool) -> Result<()> {
        loop {
            let next = (0..self.pending.len())
                .filter_map(|i| self.pending[i].front().map(|p| (p.due, i)))
                .min();
            let Some((due, queue)) = next else {
                return Ok(());
            };
            let now = Instant::now();
            if due > now {
                if !all {
                    return Ok(());
                }
                std::thread::sleep(due - now);
            }
            if let Some(p) = self.pending[queue].pop_front() {
                self.check(p.key, p.rechecks + 1)?;
            }
        }
    }

    /// Compares `key` once.
    fn compare(&mut self, key: &[u8]) -> Result<Outcome> {
        let read = |c: &mut KeyClient, side: &str| {
            fetch(c, key).map_err(|e| format!("{side}: reading key {}: {e}", printable(key, 80)))
        };
        let Some(a) = read(&mut self.src, "source")? else {
            return Ok(Outcome::Skipped);
        };
        let b = read(&mut self.dst, "target")?;
        let counts = if hll_needs_counts(&a, b.as_ref()) {
            pfcount(&mut self.src, key).zip(pfcount(&mut self.dst, key))
        } else {
            None
        };
        Ok(match compare(&a, b.as_ref(), self.tolerance_ms, counts) {
            None => Outcome::Equal,
            Some((kind, detail)) => Outcome::Differs(kind, detail),
        })
    }
}

/// `PFCOUNT key`; `None` on any error (the key changed type or vanished meanwhile: the
/// difference is then reported as such and read again like any other).
fn pfcount(c: &mut KeyClient, key: &[u8]) -> Option<i64> {
    match c.query(&cmd1("PFCOUNT", key)) {
        Ok(redis::Value::Int(n)) => Some(n),
        _ => None,
    }
}

/// Refuses `--from` and `--to` naming the same server (same resolved `host:port`, same db).
pub fn refuse_same_server(source: &Endpoint, target: &Endpoint) -> Result<()> {
    match source.same_server(target) {
        Some(node) => Err(format!(
            "--from {} and --to {} name the same server ({node}): refusing to compare or copy a \
             keyspace onto itself",
            source.text, target.text
        )),
        None => Ok(()),
    }
}

/// What one read of a key came to.
enum Outcome {
    Equal,
    Skipped,
    Differs(DiffKind, String),
}

/// The per-key probability that makes about `n` of `total` keys checked.
fn sample_fraction(n: u64, total: u64) -> f64 {
    if total == 0 {
        1.0
    } else {
        (n as f64 / total as f64).min(1.0)
    }
}

/// Whether `key` is in a sample of `fraction` of the keyspace: decided by a hash of the key, so
/// the same keys are chosen on every run and on both sides.
fn sampled(key: &[u8], fraction: f64) -> bool {
    let h = xxhash_rust::xxh64::xxh64(key, SAMPLE_SEED);
    (h as f64) < fraction * (u64::MAX as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_about_the_fraction() {
        let f = sample_fraction(1000, 10_000);
        let n = (0..10_000)
            .filter(|i| sampled(format!("key:{i}").as_bytes(), f))
            .count();
        assert!((800..1200).contains(&n), "{n}");
        assert_eq!(sample_fraction(5, 0), 1.0);
        assert!((0..100).all(|i| sampled(format!("k{i}").as_bytes(), 1.0)));
        assert_eq!(
            sampled(b"same", 0.5),
            sampled(b"same", 0.5),
            "deterministic"
        );
    }
}

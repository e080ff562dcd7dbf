//! Latency histograms: an HdrHistogram per worker, merged on read (Envoy's per-thread
//! histograms, merged by the main thread).
//!
//! A worker records into its [`LocalHistogram`] (a plain `RefCell`, nothing shared is written on
//! the request path). Every [`FLUSH_INTERVAL`] the worker calls [`flush_thread`], which adds each
//! dirty local histogram into its shared [`Histogram`] shard with `try_lock`: a reader holding
//! the lock never stalls a worker, whose values then simply wait for the next flush. Readers
//! ([`Histogram::snapshot`]) lock one shard at a time, long enough to copy it.
//!
//! Values are integers in whatever unit the recorder chose (µs, or ms for Envoy's default
//! `latency_in_micros = false`); the histogram does not know the unit. Precision: two
//! significant digits (HdrHistogram's `sigfig = 2`: any value is reported within 1% of what was
//! recorded), range 1 ..= [`HIGHEST`]; larger values are clamped to [`HIGHEST`].

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Largest recordable value: one hour in microseconds. Larger values are recorded as this.
pub const HIGHEST: u64 = 3_600_000_000;
/// HdrHistogram significant digits: 2 keeps a histogram at ~26 KiB and every value within 1%.
pub const SIGFIG: u8 = 2;
/// How often a worker publishes its local histograms (the staleness of histogram reads).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Envoy's default histogram bucket bounds (`stats_config.histogram_bucket_settings` unset;
/// `HistogramSettingsImpl::defaultBuckets`), used for Prometheus `le` buckets so dashboards built
/// for Envoy keep working. Unit-less like Envoy's: they apply to whatever unit was recorded.
pub const PROMETHEUS_BUCKETS: [f64; 19] = [
    0.5,
    1.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    600_000.0,
    1_800_000.0,
    3_600_000.0,
];

/// The quantiles (in percent) shown by the Envoy-style text render, as Envoy's admin `/stats`
/// does: `P0 P25 P50 P75 P90 P95 P99 P99.5 P99.9 P100`.
pub const TEXT_QUANTILES: [f64; 10] = [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0];

type Hdr = hdrhistogram::Histogram<u64>;

fn new_hdr() -> Hdr {
    // Constant bounds that hdrhistogram accepts (1 <= low, high >= 2 * low, sigfig <= 5); the
    // unit test `precision_and_buckets` constructs one, so this cannot fail at run time.
    #[allow(clippy::expect_used)]
    Hdr::new_with_bounds(1, HIGHEST, SIGFIG).expect("constant histogram bounds are valid")
}

/// Recorded values plus their exact sum (HdrHistogram only keeps an approximate one; the
/// Prometheus `_sum` must be exact).
#[derive(Clone)]
struct Recorded {
    hdr: Hdr,
    sum: u64,
}

impl Recorded {
    fn new() -> Recorded {
        Recorded {
            hdr: new_hdr(),
            sum: 0,
        }
    }

    fn record(&mut self, v: u64) {
        self.hdr.saturating_record(v.min(HIGHEST));
        self.sum = self.sum.wrapping_add(v);
    }

    fn add(&mut self, other: &Recorded) {
        // Same bounds on both sides, so `add` cannot fail on range; ignore the impossible error
        // rather than lose the request path to a panic.
        let _ = self.hdr.add(&other.hdr);
        self.sum = self.sum.wrapping_add(other.sum);
    }
}

/// One worker's published shard of a histogram, registered in the [`super::Store`] by
/// (name, worker). Workers write it only through [`LocalHistogram`]'s flush; readers snapshot it.
pub struct Histogram {
    published: Mutex<Recorded>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram").finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            published: Mutex::new(Recorded::new()),
        }
    }
}

impl Histogram {
    /// Records one value straight into the shared shard, taking its lock. For tests and cold
    /// paths only: workers record through a [`LocalHistogram`].
    pub fn record(&self, v: u64) {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(v);
    }

    /// A copy of everything published so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let r = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        HistogramSnapshot { rec: Some(r) }
    }
}

/// Slots of a [`LocalHistogram`]: HdrHistogram's layout at [`SIGFIG`] = 2 (values below 256
/// exact, then 128 sub-buckets per power of two) up to [`HIGHEST`] (< 2^32).
const LOCAL_SLOTS: usize = 256 + 24 * 128;

/// The slot of `v` (`v <= HIGHEST`) and the lowest value of that slot. Every value of a slot is
/// in one HdrHistogram bucket at [`SIGFIG`], so recording the slot's lowest value with the
/// slot's count publishes exactly what recording each value would have.
#[inline]
fn local_slot(v: u64) -> (usize, u64) {
    if v < 256 {
        return (v as usize, v);
    }
    let shift = 63 - v.leading_zeros() - 7;
    let sub = v >> shift;
    (
        256 + (shift as usize - 1) * 128 + (sub as usize - 128),
        sub << shift,
    )
}

/// A worker's private recorder for one histogram shard: `record` touches only this thread's
/// memory (a count per HdrHistogram bucket: a shift and an increment, about a fifth of an
/// HdrHistogram record, which matters at several records per request); [`flush_thread`]
/// publishes it into the shard.
pub struct LocalHistogram {
    counts: Box<[Cell<u64>]>,
    sum: Cell<u64>,
    dirty: Cell<bool>,
    shard: Arc<Histogram>,
}

thread_local! {
    static LOCALS: RefCell<Vec<Weak<LocalHistogram>>> = const { RefCell::new(Vec::new()) };
}

impl LocalHistogram {
    /// A recorder publishing into `shard`, registered for this thread's [`flush_thread`].
    /// Several recorders may publish into the same shard (e.g. after a config reload).
    pub fn new(shard: Arc<Histogram>) -> Rc<LocalHistogram> {
        let local = Rc::new(LocalHistogram {
            counts: (0..LOCAL_SLOTS).map(|_| Cell::new(0)).collect(),
            sum: Cell::new(0),
            dirty: Cell::new(false),
            shard,
        });
        LOCALS.with(|l| l.borrow_mut().push(Rc::downgrade(&local)));
        local
    }

    /// Records one value (in the histogram's unit). Thread-local only: no lock, no atomic.
    #[inline]
    pub fn record(&self, v: u64) {
        let (slot, _) = local_slot(v.min(HIGHEST));
        if let Some(c) = self.counts.get(slot) {
            c.set(c.get() + 1);
        }
        self.sum.set(self.sum.get().wrapping_add(v));
        self.dirty.set(true);
    }

    /// Publishes pending values into the shard. With `block == false` a contended shard (a
    /// reader copying it) is left for the next flush; returns whether nothing is left pending.
    pub fn flush(&self, block: bool) -> bool {
        if !self.dirty.get() {
            return true;
        }
        let Some(mut published) = super::lock_for_flush(&self.shard.published, block) else {
            return false;
        };
        for (slot, c) in self.counts.iter().enumerate() {
            let n = c.replace(0);
            if n > 0 {
                published.hdr.saturating_record_n(slot_value(slot), n);
            }
        }
        published.sum = published.sum.wrapping_add(self.sum.replace(0));
        self.dirty.set(false);
        true
    }
}

/// The lowest value of local slot `slot` (the inverse of [`local_slot`]).
fn slot_value(slot: usize) -> u64 {
    if slot < 256 {
        return slot as u64;
    }
    let shift = (slot - 256) / 128 + 1;
    let sub = ((slot - 256) % 128 + 128) as u64;
    sub << shift
}

impl Drop for LocalHistogram {
    fn drop(&mut self) {
        // A recorder dropped at a config reload or session end must not lose its last values.
        self.flush(true);
    }
}

/// Publishes every live [`LocalHistogram`] of this thread without blocking (contended shards
/// wait for the next call) and forgets dropped ones. Workers call it every [`FLUSH_INTERVAL`].
pub fn flush_thread() {
    flush_all(false)
}

/// As [`flush_thread`], but waits for contended shards: for a worker's exit.
pub fn flush_thread_blocking() {
    flush_all(true)
}

fn flush_all(block: bool) {
    let live: Vec<Rc<LocalHistogram>> = LOCALS.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|w| w.strong_count() > 0);
        l.iter().filter_map(Weak::upgrade).collect()
    });
    for h in live {
        h.flush(block);
    }
    // Hot keys publish on the same tick (stats/hotkeys.rs).
    super::hotkeys::flush_thread(block);
}

/// Merged (or single-shard) histogram values. `Default` is empty.
#[derive(Clone, Default)]
pub struct HistogramSnapshot {
    rec: Option<Recorded>,
}

impl std::fmt::Debug for HistogramSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistogramSnapshot")
            .field("count", &self.count())
            .field("sum", &self.sum())
            .finish()
    }
}

impl HistogramSnapshot {
    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.rec.as_ref().map_or(0, |r| r.hdr.len())
    }

    /// Exact sum of recorded values (wrapping), in the recorded unit.
    pub fn sum(&self) -> u64 {
        self.rec.as_ref().map_or(0, |r| r.sum)
    }

    /// Adds another snapshot's values into this one.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        let Some(o) = &other.rec else { return };
        match &mut self.rec {
            Some(r) => r.add(o),
            None => self.rec = Some(o.clone()),
        }
    }

    /// The value at percentile `pct` (0–100): HdrHistogram's highest value equivalent to the
    /// one at that rank (within 1% of a recorded value). `None` when nothing was recorded.
    pub fn quantile(&self, pct: f64) -> Option<f64> {
        let r = self.rec.as_ref().filter(|r| !r.hdr.is_empty())?;
        let q = (pct / 100.0).clamp(0.0, 1.0);
        let v = if q == 0.0 {
            r.hdr.min()
        } else {
            r.hdr.value_at_quantile(q)
        };
        Some(v as f64)
    }

    /// Cumulative counts of values `<= bounds[i]` (a value counts by HdrHistogram's highest
    /// equivalent value), one per bound; the `+Inf` count is [`HistogramSnapshot::count`].
    pub fn cumulative(&self, bounds: &[f64]) -> Vec<u64> {
        let mut out = vec![0u64; bounds.len()];
        let Some(r) = &self.rec else { return out };
        for v in r.hdr.iter_recorded() {
            let value = v.value_iterated_to() as f64;
            let n = v.count_at_value();
            let first = bounds.partition_point(|&b| b < value);
            for c in out.iter_mut().skip(first) {
                *c += n;
            }
        }
        out
    }

    /// Every non-empty HdrHistogram bucket as `(lower_bound, width, count)`, ascending: the
    /// values in `lower_bound ..= lower_bound + width - 1` are indistinguishable at this
    /// precision. These are the "detailed" buckets of Envoy's
    /// `/stats?format=json&histogram_buckets=detailed`; a client computes interval quantiles by
    /// differencing two reads.
    pub fn recorded(&self) -> Vec<(u64, u64, u64)> {
        let Some(r) = &self.rec else {
            return Vec::new();
        };
        r.hdr
            .iter_recorded()
            .map(|v| {
                let high = v.value_iterated_to();
                let low = r.hdr.lowest_equivalent(high);
                (low, high - low + 1, v.count_at_value())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_values_reach_the_shard_only_on_flush() {
        let shard = Arc::new(Histogram::default());
        let local = LocalHistogram::new(shard.clone());
        for v in [10, 20, 30, 40] {
            local.record(v);
        }
        assert_eq!(shard.snapshot().count(), 0);
        flush_thread();
        let s = shard.snapshot();
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum(), 100);
        assert_eq!(s.quantile(0.0), Some(10.0));
        assert_eq!(s.quantile(50.0), Some(20.0));
        assert_eq!(s.quantile(100.0), Some(40.0));
        assert_eq!(HistogramSnapshot::default().quantile(50.0), None);
    }

    #[test]
    fn a_contended_shard_waits_for_the_next_flush() {
        let shard = Arc::new(Histogram::default());
        let local = LocalHistogram::new(shard.clone());
        local.record(5);
        {
            let _reader = shard.published.lock().unwrap();
            assert!(!local.flush(false));
        }
        assert!(local.flush(false));
        assert_eq!(shard.snapshot().count(), 1);
    }

    #[test]
    fn dropping_a_recorder_publishes_it() {
        let shard = Arc::new(Histogram::default());
        let local = LocalHistogram::new(shard.clone());
        local.record(7);
        drop(local);
        assert_eq!(shard.snapshot().count(), 1);
        flush_thread(); // the dead entry is pruned without effect
        assert_eq!(shard.snapshot().count(), 1);
    }

    #[test]
    fn local_slots_publish_what_direct_records_would() {
        let direct = Histogram::default();
        let shard = Arc::new(Histogram::default());
        let local = LocalHistogram::new(shard.clone());
        let mut v = 0u64;
        let mut values = Vec::new();
        while v < 2 * HIGHEST {
            values.push(v);
            v = v * 1_013 / 1_000 + 1;
        }
        values.extend([
            255,
            256,
            257,
            383,
            384,
            20_351,
            20_352,
            HIGHEST,
            u64::MAX / 4,
        ]);
        for &v in &values {
            direct.record(v);
            local.record(v);
            let (slot, low) = local_slot(v.min(HIGHEST));
            assert!(slot < LOCAL_SLOTS, "{v}");
            assert_eq!(slot_value(slot), low, "{v}");
        }
        flush_thread();
        let (a, b) = (direct.snapshot(), shard.snapshot());
        assert_eq!(a.count(), b.count());
        assert_eq!(a.sum(), b.sum());
        assert_eq!(a.recorded(), b.recorded());
        for p in TEXT_QUANTILES {
            assert_eq!(a.quantile(p), b.quantile(p), "P{p}");
        }
    }

    #[test]
    fn precision_and_buckets() {
        let shard = Histogram::default();
        for v in [0u64, 1, 7, 30, 1_234, 5_000_000_000] {
            shard.record(v);
        }
        let s = shard.snapshot();
        assert_eq!(s.count(), 6);
        let max = s.quantile(100.0).unwrap();
        assert!(
            (max - HIGHEST as f64).abs() / (HIGHEST as f64) < 0.01,
            "{max}"
        );
        let p = s.quantile(80.0).unwrap();
        assert!((p - 1_234.0).abs() / 1_234.0 < 0.01, "{p}");
        let c = s.cumulative(&[0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 2_500.0]);
        assert_eq!(c, vec![1, 2, 2, 3, 3, 4, 5]);
        let mut merged = HistogramSnapshot::default();
        merged.merge(&s);
        merged.merge(&s);
        assert_eq!(merged.count(), 12);
        assert_eq!(merged.recorded().iter().map(|(_, _, n)| n).sum::<u64>(), 12);
        let r = s.recorded();
        assert_eq!(r[0], (0, 1, 1));
        assert!(
            r.iter()
                .any(|&(low, w, n)| low <= 1_234 && 1_234 < low + w && n == 1)
        );
    }
}

//! Fixed-bucket latency histograms in microseconds, sharded per worker like counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (inclusive, microseconds) of the finite histogram buckets; a final `+Inf` bucket
/// follows. Roughly Envoy's default bucket ladder (0.5 ms … 10 s) shifted down to cover the
/// tens-of-microseconds range a Redis proxy lives in.
pub const BUCKET_BOUNDS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Number of buckets including the final `+Inf` bucket.
pub const BUCKETS: usize = BUCKET_BOUNDS_US.len() + 1;

/// The quantiles (in percent) shown by the Envoy-style text render, as Envoy's admin `/stats`
/// does: `P0 P25 P50 P75 P90 P95 P99 P99.5 P99.9 P100`.
pub const TEXT_QUANTILES: [f64; 10] = [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0];

/// A histogram shard recording values in microseconds, written by one worker thread only
/// (relaxed load + store per bucket, no read-modify-write). Readers load relaxed and may see a
/// snapshot a few values behind; the count is derived from the buckets so it always equals the
/// `+Inf` cumulative bucket.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one value in microseconds. Single-writer: only the owning worker may call this.
    #[inline]
    pub fn record(&self, us: u64) {
        let i = BUCKET_BOUNDS_US.partition_point(|&b| b < us);
        let b = &self.buckets[i];
        b.store(b.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        self.sum_us.store(
            self.sum_us.load(Ordering::Relaxed).wrapping_add(us),
            Ordering::Relaxed,
        );
    }

    /// A point-in-time copy of this shard.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// Summed (or single-shard) histogram values: per-bucket counts (not cumulative; index `i`
/// counts values `<= BUCKET_BOUNDS_US[i]` and above the previous bound, the last index is `+Inf`)
/// and the sum of all recorded values in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// Per-bucket (non-cumulative) counts, `BUCKETS` long.
    pub buckets: [u64; BUCKETS],
    /// Sum of recorded values, microseconds (wrapping).
    pub sum_us: u64,
}

impl HistogramSnapshot {
    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, &b| a.wrapping_add(b))
    }

    /// Adds another shard's values into this one.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a = a.wrapping_add(*b);
        }
        self.sum_us = self.sum_us.wrapping_add(other.sum_us);
    }

    /// Estimated value (microseconds) at percentile `pct` (0–100), interpolating linearly inside
    /// the bucket that holds the rank; values in the `+Inf` bucket are reported as the last finite
    /// bound. `None` when nothing was recorded.
    pub fn quantile(&self, pct: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (pct.clamp(0.0, 100.0) / 100.0) * total as f64;
        let mut before = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (before + n) as f64 >= rank {
                let lower = if i == 0 {
                    0.0
                } else {
                    BUCKET_BOUNDS_US[i - 1] as f64
                };
                let upper = BUCKET_BOUNDS_US.get(i).map_or(lower, |&b| b as f64);
                let frac = ((rank - before as f64) / n as f64).clamp(0.0, 1.0);
                return Some(lower + (upper - lower) * frac);
            }
            before += n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_places_values_in_inclusive_buckets() {
        let h = Histogram::default();
        h.record(0);
        h.record(10);
        h.record(11);
        h.record(20_000_000);
        let s = h.snapshot();
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[BUCKETS - 1], 1);
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum_us, 20_000_021);
    }

    #[test]
    fn quantiles_interpolate_inside_bucket() {
        let h = Histogram::default();
        for _ in 0..4 {
            h.record(30); // bucket (25, 50]
        }
        let s = h.snapshot();
        assert_eq!(s.quantile(0.0), Some(25.0));
        assert_eq!(s.quantile(50.0), Some(37.5));
        assert_eq!(s.quantile(100.0), Some(50.0));
        assert_eq!(HistogramSnapshot::default().quantile(50.0), None);
    }
}

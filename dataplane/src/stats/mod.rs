//! Counters, gauges and histograms, sharded per worker and summed on read.
//!
//! Each worker asks the [`Store`] once for its own shard of a named stat and then
//! writes it alone (relaxed load + store, no read-modify-write, nothing shared on the request
//! path). Readers (admin) load the shards relaxed and sum them by name.
//!
//! Stat names are Envoy's dotted names (`redis.<stat_prefix>.downstream_cx_total`,
//! `cluster.<name>.upstream_internal_redirect_succeeded_total`, …; see the Envoy `redis_proxy`
//! reference, section 1.11 "Stats Envoy emits"). Two renders exist: [`Store::render_text`]
//! (Envoy admin `/stats`) and [`Store::render_prometheus`] (Prometheus text format 0.0.4, naming
//! scheme in [`prometheus`]).

pub mod clock;
pub mod external;
pub mod histogram;
pub mod hotkeys;
pub mod log_limit;
pub mod probe;
pub mod prometheus;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use histogram::{
    Histogram, HistogramSnapshot, LocalHistogram, PROMETHEUS_BUCKETS, flush_thread,
    flush_thread_blocking,
};

/// A monotonically increasing counter shard, written by one worker thread only.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds 1. Single-writer: only the owning worker may call this.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }
    /// Adds `n` (wrapping). Single-writer: relaxed load + store, not an atomic RMW.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    /// Overwrites the shard's value: for a total kept elsewhere (externally pushed stats,
    /// [`external`]), never for counting. Single-writer.
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
    /// This shard's current value (relaxed load; any thread).
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A gauge shard (may go up and down), written by one worker thread only. A shard may go
/// negative (e.g. a connection opened on one worker's count and closed on another's would); only
/// the sum over shards is meaningful.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Adds `n` (may be negative, wrapping). Single-writer: relaxed load + store.
    #[inline]
    pub fn add(&self, n: i64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    /// Adds 1.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }
    /// Subtracts 1.
    #[inline]
    pub fn dec(&self) {
        self.add(-1)
    }
    /// Overwrites the shard's value (e.g. a buffered-bytes level). Single-writer.
    #[inline]
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed)
    }
    /// This shard's current value (relaxed load; any thread).
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The health thread's shard of stats that workers count under the same names
/// (`cluster.<name>.ssl.*`): counters are single-writer, so it cannot share a worker's.
pub const HEALTH_SHARD: usize = external::EXTERNAL_SHARD - 1;

/// The discovery threads' shard of those stats (one thread per cluster, each writing only its
/// cluster's names; during a reload the old and the new thread of one cluster may overlap for a
/// refresh, where an increment can be lost, never corrupted).
pub const DISCOVERY_SHARD: usize = external::EXTERNAL_SHARD - 2;

/// name → worker → shard; BTreeMaps so reads come out sorted by name.
type Shards<T> = BTreeMap<String, BTreeMap<usize, Arc<T>>>;

fn shard<T: Default>(map: &Mutex<Shards<T>>, name: &str, worker: usize) -> Arc<T> {
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(by_worker) = m.get_mut(name) {
        return Arc::clone(by_worker.entry(worker).or_default());
    }
    let s = Arc::new(T::default());
    m.entry(name.to_owned())
        .or_default()
        .insert(worker, Arc::clone(&s));
    s
}

fn summed<T, V>(map: &Mutex<Shards<T>>, zero: V, fold: impl Fn(V, &T) -> V) -> Vec<(String, V)>
where
    V: Clone,
{
    // Only the shard handles are copied under the registry lock; the (slower) loads, histogram
    // copies and merges run after it is released. A worker registering its first stat of a name
    // takes the same lock, and the admin thread holding it runs at a lower priority.
    let shards: Vec<(String, Vec<Arc<T>>)> = {
        let m = map.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|(name, by_worker)| (name.clone(), by_worker.values().cloned().collect()))
            .collect()
    };
    shards
        .into_iter()
        .map(|(name, by_worker)| {
            let v = by_worker.iter().fold(zero.clone(), |acc, s| fold(acc, s));
            (name, v)
        })
        .collect()
}

/// The lock of a shard a worker publishes into (histograms, hot keys): with `block == false` a
/// contended lock (a reader copying the shard) gives `None`, and the worker tries again at its
/// next flush instead of waiting for the reader.
pub(crate) fn lock_for_flush<T>(m: &Mutex<T>, block: bool) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) if !block => None,
        Err(std::sync::TryLockError::WouldBlock) => {
            Some(m.lock().unwrap_or_else(|e| e.into_inner()))
        }
    }
}

/// Process-wide registry of stat shards, keyed by (stat name, worker index).
///
/// Registration takes a mutex and happens off the hot path (connection / cluster setup, or the
/// first time a command is seen); the returned shard is then written lock-free by its worker.
#[derive(Debug, Default)]
pub struct Store {
    counters: Mutex<Shards<Counter>>,
    gauges: Mutex<Shards<Gauge>>,
    histograms: Mutex<Shards<Histogram>>,
    /// stat prefix → worker → that worker's hot keys and big values of the listener.
    hot_keys: Mutex<Shards<hotkeys::HotKeysShard>>,
    /// Held while a push writes the [`external::EXTERNAL_SHARD`]: keeps that shard
    /// single-writer.
    external_writer: Mutex<()>,
}

impl Store {
    /// An empty registry.
    pub fn new() -> Arc<Store> {
        Arc::new(Store::default())
    }

    /// The shard of counter `name` owned by `worker`: the same `Arc` on every call for the same
    /// pair, so a worker that re-registers (e.g. after a config reload) continues its count.
    pub fn counter(&self, name: &str, worker: usize) -> Arc<Counter> {
        shard(&self.counters, name, worker)
    }

    /// The shard of gauge `name` owned by `worker` (same `Arc` for the same pair).
    pub fn gauge(&self, name: &str, worker: usize) -> Arc<Gauge> {
        shard(&self.gauges, name, worker)
    }

    /// The shard of histogram `name` owned by `worker` (same `Arc` for the same pair). The worker
    /// records through a [`LocalHistogram`] over it; values are in the unit the recorder chose.
    pub fn histogram(&self, name: &str, worker: usize) -> Arc<Histogram> {
        shard(&self.histograms, name, worker)
    }

    /// All counters, shards summed (wrapping), sorted by name.
    pub fn counters(&self) -> Vec<(String, u64)> {
        summed(&self.counters, 0u64, |a, c| a.wrapping_add(c.get()))
    }

    /// All gauges, shards summed (wrapping), sorted by name.
    pub fn gauges(&self) -> Vec<(String, i64)> {
        summed(&self.gauges, 0i64, |a, g| a.wrapping_add(g.get()))
    }

    /// All histograms, shards merged, sorted by name.
    pub fn histograms(&self) -> Vec<(String, HistogramSnapshot)> {
        summed(
            &self.histograms,
            HistogramSnapshot::default(),
            |mut a, h| {
                a.merge(&h.snapshot());
                a
            },
        )
    }

    /// The shard of listener `stat_prefix`'s hot keys and big values owned by `worker` (same
    /// `Arc` for the same pair); written through a [`hotkeys::LocalHotKeys`].
    pub fn hot_keys_shard(&self, stat_prefix: &str, worker: usize) -> Arc<hotkeys::HotKeysShard> {
        shard(&self.hot_keys, stat_prefix, worker)
    }

    /// Hot keys and big values of every listener that tracks them, sorted by stat prefix:
    /// workers' counts summed by key, the `top_k` largest kept (see [`hotkeys`] for what the
    /// counts cover). At most one stats flush tick stale.
    pub fn hot_keys(&self) -> Vec<hotkeys::HotKeysReport> {
        let listeners: Vec<(String, Vec<Arc<hotkeys::HotKeysShard>>)> = {
            let m = self.hot_keys.lock().unwrap_or_else(|e| e.into_inner());
            m.iter()
                .map(|(p, w)| (p.clone(), w.values().cloned().collect()))
                .collect()
        };
        listeners
            .iter()
            .filter_map(|(p, shards)| hotkeys::merge(p, shards))
            .collect()
    }

    /// Sum over workers of counter `name`, `None` if it was never registered.
    pub fn counter_value(&self, name: &str) -> Option<u64> {
        let m = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        m.get(name)
            .map(|w| w.values().fold(0u64, |a, c| a.wrapping_add(c.get())))
    }

    /// Sum over workers of gauge `name`, `None` if it was never registered.
    pub fn gauge_value(&self, name: &str) -> Option<i64> {
        let m = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        m.get(name)
            .map(|w| w.values().fold(0i64, |a, g| a.wrapping_add(g.get())))
    }

    /// Envoy admin `/stats` text: one `name: value` line per counter and gauge, sorted by name,
    /// shards summed; then one line per histogram, sorted by name, as Envoy prints them:
    /// `name: P0(nan,v) P25(nan,v) … P100(nan,v)` with cumulative quantiles in the recorded unit
    /// (the interval value is `nan`: there is no flush interval), or
    /// `name: No recorded values`.
    pub fn render_text(&self) -> String {
        self.render_text_filtered(None)
    }

    /// [`Store::render_text`] restricted to stat names containing `filter` (a plain substring,
    /// case-sensitive; Envoy's `?filter=` takes a regex, we take a substring). `None` or an empty
    /// filter keeps everything.
    pub fn render_text_filtered(&self, filter: Option<&str>) -> String {
        self.render_text_where(&|n: &str| filter.is_none_or(|f| n.contains(f)))
    }

    /// [`Store::render_text`] restricted to the stat names `keep` accepts (the admin endpoint's
    /// `?filter=<regex>`).
    pub fn render_text_where(&self, keep: &dyn Fn(&str) -> bool) -> String {
        let mut lines: Vec<(String, String)> = Vec::new();
        for (n, v) in self.counters() {
            if keep(&n) {
                lines.push((n, v.to_string()));
            }
        }
        for (n, v) in self.gauges() {
            if keep(&n) {
                lines.push((n, v.to_string()));
            }
        }
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::new();
        for (n, v) in &lines {
            let _ = writeln!(out, "{n}: {v}");
        }
        for (n, h) in self.histograms() {
            if !keep(&n) {
                continue;
            }
            if h.count() == 0 {
                let _ = writeln!(out, "{n}: No recorded values");
                continue;
            }
            let qs: Vec<String> = histogram::TEXT_QUANTILES
                .iter()
                .map(|&p| {
                    let v = h.quantile(p).unwrap_or(f64::NAN);
                    format!("P{p}(nan,{})", (v * 10.0).round() / 10.0)
                })
                .collect();
            let _ = writeln!(out, "{n}: {}", qs.join(" "));
        }
        out
    }

    /// Prometheus text exposition format 0.0.4, Envoy `/stats/prometheus` style; the naming
    /// scheme (tag extraction into `envoy_redis_prefix`, `envoy_cluster_name`,
    /// `envoy_redis_command` labels) is documented in [`prometheus`].
    pub fn render_prometheus(&self) -> String {
        self.render_prometheus_filtered(None)
    }

    /// [`Store::render_prometheus`] restricted to stats whose Envoy (dotted) name contains
    /// `filter` (plain substring). `None` or an empty filter keeps everything.
    pub fn render_prometheus_filtered(&self, filter: Option<&str>) -> String {
        self.render_prometheus_where(&|n: &str| filter.is_none_or(|f| n.contains(f)))
    }

    /// [`Store::render_prometheus`] restricted to the stats whose Envoy (dotted) name `keep`
    /// accepts (the admin endpoint's `?filter=<regex>`).
    pub fn render_prometheus_where(&self, keep: &dyn Fn(&str) -> bool) -> String {
        let keep = |n: &String| keep(n);
        let c: Vec<_> = self
            .counters()
            .into_iter()
            .filter(|(n, _)| keep(n))
            .collect();
        let g: Vec<_> = self.gauges().into_iter().filter(|(n, _)| keep(n)).collect();
        let h: Vec<_> = self
            .histograms()
            .into_iter()
            .filter(|(n, _)| keep(n))
            .collect();
        prometheus::render(&c, &g, &h)
    }
}

#[cfg(test)]
mod tests;

/// Test helpers shared with the admin tests.
#[cfg(test)]
pub(crate) mod tests_support {
    pub use super::tests::check_exposition;
}

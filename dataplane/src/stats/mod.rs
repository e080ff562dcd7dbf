//! Counters and gauges, sharded per worker and summed on read.
//!
//! CONTRACT (skeleton): each worker asks the [`Store`] once for its own shard of a named stat and
//! then writes it alone (relaxed load + store, no read-modify-write, nothing shared on the request
//! path). Readers (admin) sum the shards by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A monotonically increasing counter shard, written by one worker thread only.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A gauge shard (may go up and down), written by one worker thread only.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    #[inline]
    pub fn add(&self, n: i64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }
    #[inline]
    pub fn dec(&self) {
        self.add(-1)
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Process-wide registry of stat shards.
#[derive(Debug, Default)]
pub struct Store {}

impl Store {
    pub fn new() -> Arc<Store> {
        Arc::new(Store::default())
    }
    /// The shard of counter `name` owned by `worker` (same Arc on every call for the same pair).
    pub fn counter(&self, _name: &str, _worker: usize) -> Arc<Counter> {
        Arc::new(Counter::default())
    }
    /// The shard of gauge `name` owned by `worker`.
    pub fn gauge(&self, _name: &str, _worker: usize) -> Arc<Gauge> {
        Arc::new(Gauge::default())
    }
    /// Envoy-style text: `name: value` lines, sorted by name, shards summed.
    pub fn render_text(&self) -> String {
        String::new()
    }
    /// Prometheus text exposition format.
    pub fn render_prometheus(&self) -> String {
        String::new()
    }
}

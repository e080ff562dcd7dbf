//! Hot keys and big values per listener (beyond Envoy; admin `/hot_keys`).
//!
//! [`HotKeysReport`] and [`BigValue`] are what the admin endpoint renders;
//! [`super::Store::hot_keys`] returns one report per listener that has `[listeners.hot_keys]` or
//! `big_value_bytes` set.
//!
//! How the counts are made:
//! - Each worker keeps, per listener, a [`SpaceSaving`] summary (Metwally, Agrawal, El Abbadi,
//!   "Efficient Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005) of the
//!   keys it was asked for: at most `max(8 * top_k, 64)` keys, each with a count that
//!   over-estimates its true count by at most its `error` (≤ requests seen / capacity). Any key
//!   requested more often than `requests / capacity` times is guaranteed to be tracked.
//! - Sliding window: two generations. Every `window / 2` the current summary becomes the
//!   previous one and a fresh one starts; a report sums both. So the counts cover the last
//!   `window / 2` to `window` (never less than `window / 2`, except in the first half-window
//!   after start, nor more than `window`), with a rotation resolution of the stats flush tick
//!   ([`super::histogram::FLUSH_INTERVAL`]).
//! - The worker publishes its merged generations on its stats flush tick ([`flush_thread`],
//!   called by [`super::flush_thread`]) with `try_lock`, so a reader never stalls a worker; a
//!   report is at most one tick stale. [`super::Store::hot_keys`] sums the workers' counts by
//!   key and keeps the `top_k` largest.
//! - Big values go into a ring of the [`BIG_VALUES_KEPT`] most recent per worker, published on
//!   the same tick, merged newest first.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One listener's hot keys over its sliding window, merged over workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeysReport {
    /// The listener's `stat_prefix`.
    pub stat_prefix: String,
    /// The window the counts cover (`hot_keys.window`); zero when hot keys are off.
    pub window: Duration,
    /// Up to `top_k` (key, requests in the window), most requested first; ties by key.
    pub top: Vec<(Vec<u8>, u64)>,
    /// The most recent big values (newest first, bounded), when `big_value_bytes` is set.
    pub big_values: Vec<BigValue>,
}

/// A request value or reply of at least `big_value_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BigValue {
    /// The request's first key (empty when the command has none), cut to [`LOGGED_KEY_BYTES`].
    pub key: Vec<u8>,
    /// The command name, lowercase.
    pub command: String,
    /// Size in bytes: the request's largest bulk string, or the whole reply.
    pub bytes: usize,
    /// `"request"` or `"reply"`.
    pub direction: &'static str,
    /// When it was seen, milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

/// How many recent big values each worker keeps per listener (and a report shows).
pub const BIG_VALUES_KEPT: usize = 32;
/// Keys longer than this are tracked by their first `MAX_TRACKED_KEY` bytes (keys sharing that
/// prefix count as one), which bounds a summary's memory to `capacity * 1 KiB`.
pub const MAX_TRACKED_KEY: usize = 1024;
/// Keys in logs, access log lines and big-value records are cut to this many bytes.
pub const LOGGED_KEY_BYTES: usize = 100;
/// At most one big-value WARN line per listener per worker per this period; the next line says
/// how many were suppressed.
pub const BIG_VALUE_LOG_EVERY: Duration = Duration::from_secs(1);

/// Summary capacity for a `top_k`: a small multiple of it, so the top-k are tracked with a small
/// error under skewed (Zipf-like) traffic.
pub fn capacity_for(top_k: usize) -> usize {
    (8 * top_k).max(64)
}

/// The hash map of a summary is keyed by the key's 64-bit hash (already mixed): identity hash.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type HashIndex = HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>;

struct Entry {
    key: Vec<u8>,
    hash: u64,
    error: u64,
    /// Position in the min-heap.
    pos: u32,
}

/// Bits of a heap item holding the entry index; the count is in the bits above. Capacity is at
/// most `8 * 1000` (top_k ≤ 1000), well under 2^16.
const IDX_BITS: u32 = 16;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
/// Largest capacity (the index must fit in [`IDX_BITS`]).
const MAX_CAPACITY: usize = 1 << IDX_BITS;

/// A Space-Saving summary (Metwally et al. 2005) of at most `capacity` keys.
///
/// `record` is O(log capacity): one hash lookup and a sift in a min-heap of counts. A key
/// already tracked costs no allocation; a new key replaces the least counted one (count =
/// that minimum + 1, error = that minimum) and reuses its buffer. Keys are identified by a
/// seeded 64-bit xxHash; two different keys with the same hash (never seen in practice, and not
/// forceable without the per-summary random seed) count as the first one tracked.
///
/// The heap holds `count << 16 | entry index` in one `u64`, so a sift compares and moves plain
/// integers (ties between equal counts go by index).
pub struct SpaceSaving {
    capacity: usize,
    seed: u64,
    index: HashIndex,
    entries: Vec<Entry>,
    /// `count << IDX_BITS | entry index`, ordered as a binary min-heap.
    heap: Vec<u64>,
    total: u64,
}

impl SpaceSaving {
    /// An empty summary of at most `capacity` (1 ..= 65 536) keys.
    pub fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        SpaceSaving {
            capacity,
            seed: fastrand::u64(..),
            index: HashIndex::with_capacity_and_hasher(capacity, Default::default()),
            entries: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            total: 0,
        }
    }

    /// How many keys it can track.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Requests recorded since the last [`SpaceSaving::clear`].
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every key, keeping the memory for reuse.
    pub fn clear(&mut self) {
        self.index.clear();
        self.entries.clear();
        self.heap.clear();
        self.total = 0;
    }

    /// Counts one request for `key` (cut to [`MAX_TRACKED_KEY`] bytes).
    #[inline]
    pub fn record(&mut self, key: &[u8]) {
        let key = key.get(..MAX_TRACKED_KEY).unwrap_or(key);
        let hash = xxhash_rust::xxh64::xxh64(key, self.seed);
        self.total += 1;
        if let Some(&i) = self.index.get(&hash) {
            let Some(e) = self.entries.get(i as usize) else {
                return;
            };
            let pos = e.pos as usize;
            if let Some(item) = self.heap.get_mut(pos) {
                *item += 1 << IDX_BITS;
            }
            self.sift_down(pos);
            return;
        }
        if self.entries.len() < self.capacity {
            let i = self.entries.len() as u32;
            let pos = self.heap.len();
            self.entries.push(Entry {
                key: key.to_vec(),
                hash,
                error: 0,
                pos: pos as u32,
            });
            self.heap.push(1 << IDX_BITS | u64::from(i));
            self.index.insert(hash, i);
            self.sift_up(pos);
            return;
        }
        // Replace the least counted key (the heap's root).
        let Some(root) = self.heap.first_mut() else {
            return;
        };
        let i = (*root & IDX_MASK) as u32;
        let min = *root >> IDX_BITS;
        *root += 1 << IDX_BITS;
        let Some(e) = self.entries.get_mut(i as usize) else {
            return;
        };
        self.index.remove(&e.hash);
        e.key.clear();
        e.key.extend_from_slice(key);
        e.hash = hash;
        e.error = min;
        self.index.insert(hash, i);
        self.sift_down(0);
    }

    /// The estimated count of `key` (an over-estimate by at most its error), 0 if untracked.
    pub fn get(&self, key: &[u8]) -> u64 {
        self.find(key).map_or(0, |e| self.count_of(e))
    }

    fn count_of(&self, e: &Entry) -> u64 {
        self.heap.get(e.pos as usize).map_or(0, |h| h >> IDX_BITS)
    }

    fn find(&self, key: &[u8]) -> Option<&Entry> {
        let key = key.get(..MAX_TRACKED_KEY).unwrap_or(key);
        let hash = xxhash_rust::xxh64::xxh64(key, self.seed);
        let i = *self.index.get(&hash)?;
        self.entries.get(i as usize).filter(|e| e.key == key)
    }

    /// Every tracked key as `(key, count, error)`: the true count is in
    /// `count - error ..= count`. Unordered.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64, u64)> {
        self.entries
            .iter()
            .map(|e| (e.key.as_slice(), self.count_of(e), e.error))
    }

    /// Puts heap item `item` at position `to`, recording the position in its entry.
    #[inline]
    fn place(&mut self, to: usize, item: u64) {
        if let Some(h) = self.heap.get_mut(to) {
            *h = item;
        }
        if let Some(e) = self.entries.get_mut((item & IDX_MASK) as usize) {
            e.pos = to as u32;
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        let len = self.heap.len();
        let Some(&item) = self.heap.get(pos) else {
            return;
        };
        loop {
            let l = 2 * pos + 1;
            let Some(&lv) = self.heap.get(l) else { break };
            let (c, cv) = match self.heap.get(l + 1) {
                Some(&rv) if l + 1 < len && rv < lv => (l + 1, rv),
                _ => (l, lv),
            };
            if cv >= item {
                break;
            }
            self.place(pos, cv);
            pos = c;
        }
        self.place(pos, item);
    }

    fn sift_up(&mut self, mut pos: usize) {
        let Some(&item) = self.heap.get(pos) else {
            return;
        };
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let Some(&pv) = self.heap.get(parent) else {
                break;
            };
            if pv <= item {
                break;
            }
            self.place(pos, pv);
            pos = parent;
        }
        self.place(pos, item);
    }
}

/// Two [`SpaceSaving`] generations rotated every `window / 2` (see the module docs).
pub struct SlidingTopK {
    half: Duration,
    current: SpaceSaving,
    previous: SpaceSaving,
    rotated_at: Instant,
}

impl SlidingTopK {
    /// Summaries of `capacity` keys over `window`, starting at `now`.
    pub fn new(capacity: usize, window: Duration, now: Instant) -> SlidingTopK {
        SlidingTopK {
            half: (window / 2).max(Duration::from_millis(1)),
            current: SpaceSaving::new(capacity),
            previous: SpaceSaving::new(capacity),
            rotated_at: now,
        }
    }

    /// Counts one request for `key` in the current generation.
    #[inline]
    pub fn record(&mut self, key: &[u8]) {
        self.current.record(key);
    }

    /// Rotates the generations if a half-window has passed since the last rotation; after more
    /// than a whole window without a rotation both are empty. Returns whether it rotated.
    pub fn rotate(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.rotated_at);
        if elapsed < self.half {
            return false;
        }
        std::mem::swap(&mut self.current, &mut self.previous);
        self.current.clear();
        if elapsed >= 2 * self.half {
            self.previous.clear();
            self.rotated_at = now;
        } else {
            self.rotated_at += self.half;
        }
        true
    }

    /// Both generations summed by key, into `out` (cleared first; its buffers are reused).
    pub fn merged_into(&self, out: &mut Vec<(Vec<u8>, u64)>) {
        let mut n = 0;
        let mut put = |key: &[u8], count: u64| {
            match out.get_mut(n) {
                Some((k, c)) => {
                    k.clear();
                    k.extend_from_slice(key);
                    *c = count;
                }
                None => out.push((key.to_vec(), count)),
            }
            n += 1;
        };
        for (key, count, _) in self.current.iter() {
            put(key, count + self.previous.get(key));
        }
        for (key, count, _) in self.previous.iter() {
            if self.current.find(key).is_none() {
                put(key, count);
            }
        }
        out.truncate(n);
    }
}

/// What one worker last published for one listener.
#[derive(Debug, Default)]
struct Published {
    /// Hot keys or big values are configured: the listener is reported.
    enabled: bool,
    top_k: usize,
    /// Zero when hot keys are off.
    window: Duration,
    top: Vec<(Vec<u8>, u64)>,
    /// Newest first.
    big_values: Vec<BigValue>,
}

/// One worker's published hot keys and big values for one listener, registered in the
/// [`super::Store`] by (stat prefix, worker).
#[derive(Debug, Default)]
pub struct HotKeysShard {
    published: Mutex<Published>,
}

/// Merges the shards of one listener into its report; `None` when none is enabled.
pub(super) fn merge(stat_prefix: &str, shards: &[Arc<HotKeysShard>]) -> Option<HotKeysReport> {
    let mut enabled = false;
    let mut top_k = 0;
    let mut window = Duration::ZERO;
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut big_values = Vec::new();
    for s in shards {
        let p = s.published.lock().unwrap_or_else(PoisonError::into_inner);
        if !p.enabled {
            continue;
        }
        enabled = true;
        top_k = top_k.max(p.top_k);
        window = window.max(p.window);
        for (k, c) in &p.top {
            *counts.entry(k.clone()).or_default() += c;
        }
        big_values.extend(p.big_values.iter().cloned());
    }
    if !enabled {
        return None;
    }
    let mut top: Vec<(Vec<u8>, u64)> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(top_k);
    big_values.sort_by_key(|b| std::cmp::Reverse(b.unix_ms));
    big_values.truncate(BIG_VALUES_KEPT);
    Some(HotKeysReport {
        stat_prefix: stat_prefix.to_owned(),
        window,
        top,
        big_values,
    })
}

struct LocalState {
    /// `None` when hot keys are off.
    top: Option<SlidingTopK>,
    top_k: usize,
    window: Duration,
    big_enabled: bool,
    /// Newest at the front.
    big_values: VecDeque<BigValue>,
    /// Something changed since the last publish.
    dirty: bool,
    /// Reused buffer for the merged generations.
    scratch: Vec<(Vec<u8>, u64)>,
    last_warn: Option<Instant>,
    suppressed: u64,
}

/// A worker's private hot-keys summary and big-value ring for one listener: recording touches
/// only this thread's memory; [`flush_thread`] publishes it into the listener's shard.
pub struct LocalHotKeys {
    stat_prefix: String,
    state: RefCell<LocalState>,
    shard: Arc<HotKeysShard>,
}

thread_local! {
    static LOCALS: RefCell<Vec<Weak<LocalHotKeys>>> = const { RefCell::new(Vec::new()) };
}

impl LocalHotKeys {
    /// This thread's recorder for listener `stat_prefix`: the live one if there is one (so a
    /// config reload keeps the counts), else a new one publishing into `shard`. Then configured
    /// with `hot_keys` (`(top_k, window)`, `None` = off) and `big_values` (on/off).
    pub fn for_listener(
        stat_prefix: &str,
        shard: impl FnOnce() -> Arc<HotKeysShard>,
        hot_keys: Option<(usize, Duration)>,
        big_values: bool,
    ) -> Rc<LocalHotKeys> {
        let live = LOCALS.with(|l| {
            let mut l = l.borrow_mut();
            l.retain(|w| w.strong_count() > 0);
            l.iter()
                .filter_map(Weak::upgrade)
                .find(|h| h.stat_prefix == stat_prefix)
        });
        let local = live.unwrap_or_else(|| {
            let local = Rc::new(LocalHotKeys {
                stat_prefix: stat_prefix.to_owned(),
                state: RefCell::new(LocalState {
                    top: None,
                    top_k: 0,
                    window: Duration::ZERO,
                    big_enabled: false,
                    big_values: VecDeque::new(),
                    dirty: true,
                    scratch: Vec::new(),
                    last_warn: None,
                    suppressed: 0,
                }),
                shard: shard(),
            });
            LOCALS.with(|l| l.borrow_mut().push(Rc::downgrade(&local)));
            local
        });
        local.configure(hot_keys, big_values);
        local
    }

    fn configure(&self, hot_keys: Option<(usize, Duration)>, big_values: bool) {
        let mut st = self.state.borrow_mut();
        match hot_keys {
            Some((top_k, window)) => {
                let same = st.top.is_some() && st.top_k == top_k && st.window == window;
                if !same {
                    st.top = Some(SlidingTopK::new(
                        capacity_for(top_k),
                        window,
                        Instant::now(),
                    ));
                }
                st.top_k = top_k;
                st.window = window;
            }
            None => {
                st.top = None;
                st.top_k = 0;
                st.window = Duration::ZERO;
            }
        }
        st.big_enabled = big_values;
        if !big_values {
            st.big_values.clear();
        }
        st.dirty = true;
    }

    /// Counts one request for `key` (no-op when hot keys are off).
    #[inline]
    pub fn record_key(&self, key: &[u8]) {
        let mut st = self.state.borrow_mut();
        if let Some(top) = &mut st.top {
            top.record(key);
            st.dirty = true;
        }
    }

    /// Keeps `big` in the ring of recent big values and logs it at WARN, at most one line per
    /// [`BIG_VALUE_LOG_EVERY`] (the next line counts the suppressed ones).
    pub fn record_big(&self, big: BigValue, now: Instant) {
        let mut st = self.state.borrow_mut();
        let due = st
            .last_warn
            .is_none_or(|t| now.saturating_duration_since(t) >= BIG_VALUE_LOG_EVERY);
        if due {
            tracing::warn!(
                listener = %self.stat_prefix,
                command = %big.command,
                key = %escape_key(&big.key, LOGGED_KEY_BYTES),
                bytes = big.bytes,
                direction = big.direction,
                suppressed = st.suppressed,
                "big value"
            );
            st.last_warn = Some(now);
            st.suppressed = 0;
        } else {
            st.suppressed += 1;
        }
        if st.big_values.len() >= BIG_VALUES_KEPT {
            st.big_values.pop_back();
        }
        st.big_values.push_front(big);
        st.dirty = true;
    }

    /// Rotates the window if due and publishes into the shard. With `block == false` a contended
    /// shard (a reader copying it) is left for the next flush; returns whether it published.
    pub fn publish(&self, block: bool, now: Instant) -> bool {
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        if let Some(top) = &mut st.top
            && top.rotate(now)
        {
            st.dirty = true;
        }
        if !st.dirty {
            return true;
        }
        let Some(mut published) = super::lock_for_flush(&self.shard.published, block) else {
            return false;
        };
        match &st.top {
            Some(top) => top.merged_into(&mut st.scratch),
            None => st.scratch.clear(),
        }
        std::mem::swap(&mut published.top, &mut st.scratch);
        published.enabled = st.top.is_some() || st.big_enabled;
        published.top_k = st.top_k;
        published.window = st.window;
        published.big_values.clear();
        published.big_values.extend(st.big_values.iter().cloned());
        st.dirty = false;
        true
    }
}

impl Drop for LocalHotKeys {
    fn drop(&mut self) {
        // The listener lost its hot keys and big values (or went away): stop reporting it.
        let mut p = self
            .shard
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *p = Published::default();
    }
}

/// Publishes every live [`LocalHotKeys`] of this thread (see [`LocalHotKeys::publish`]) and
/// forgets dropped ones. Called by [`super::flush_thread`] on every stats flush tick.
pub fn flush_thread(block: bool) {
    let live: Vec<Rc<LocalHotKeys>> = LOCALS.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|w| w.strong_count() > 0);
        l.iter().filter_map(Weak::upgrade).collect()
    });
    let now = Instant::now();
    for h in live {
        h.publish(block, now);
    }
}

/// `key` cut to `max` bytes and escaped as Redis's `sdscatrepr` does (without the quotes):
/// printable ASCII as is, `\\` and `"` backslashed, `\n\r\t\a\b` by name, other bytes as
/// `\xNN`; a cut key ends with `...`.
pub fn escape_key(key: &[u8], max: usize) -> String {
    let cut = key.get(..max).unwrap_or(key);
    let mut s = String::with_capacity(cut.len() + 3);
    for &b in cut {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            7 => s.push_str("\\a"),
            8 => s.push_str("\\b"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                use std::fmt::Write as _;
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    if cut.len() < key.len() {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests;

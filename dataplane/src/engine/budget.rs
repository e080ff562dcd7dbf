//! A worker's memory budget for its clients: reply bytes buffered for them plus the replies it
//! has asked upstream for on their behalf (Redis 7 `maxmemory-clients`, per worker).
//!
//! Two figures are kept, both summed over the worker's sessions:
//! - `held`: bytes of replies and pub/sub messages received and not yet written to their client
//!   (a session's output buffer, the write in progress, replies waiting for an earlier one);
//! - `asked`: an estimate of the replies requested and not yet received — each session's
//!   requests in flight times the average size of its recent replies. It is what Redis holds in
//!   its output buffer for Respite's connections, and what will land in `held` next.
//!
//! While `held + asked` is at the limit, sessions stop reading requests (they wait in
//! [`Budget::wait`] and are woken once it is back under three quarters). A light session — one
//! that holds and awaits almost nothing, such as a client sending small requests one at a time —
//! may go on into a reserve of a quarter of the limit, so clients that ask and never read cannot
//! hold up the others. Clients that ask and do not read would keep
//! it there for ever, every other client of the worker waiting behind them: when `held` alone
//! passes the limit, or sessions wait for room with most of the budget held and not draining for
//! [`STALL`], the worker evicts the clients holding the most, as Redis evicts clients
//! over `maxmemory-clients`, until there is room ([`Budget::evict`]).
//!
//! Worker-local (one thread): plain cells, no atomics.

use std::cell::{Cell, RefCell};
use std::rc::Weak;

use super::sink::Sink;
use crate::net::Notify;

/// A session's first requests, before any reply told its typical size, are estimated at the
/// worker's typical reply, but never below this (bytes): a fresh worker must not let its first
/// clients ask for gigabytes of large values at once; 16 KiB still lets a new session pipeline
/// 256 requests, and its own replies bring its estimate down.
const MIN_ESTIMATE: usize = 16 * 1024;

/// How fast a session's estimate forgets a large reply: by 1/64 per reply.
pub const SESSION_DECAY: u32 = 6;
/// How fast the worker's estimate forgets one: by 1/1024 per reply.
const WORKER_DECAY: u32 = 10;

/// A decaying maximum of reply sizes: a large reply raises the estimate at once, small ones
/// lower it by `estimate >> decay` each. A plain average would let a flood of small replies
/// (errors, counters) hide that the next request asks for a large value again; only replies that
/// are not errors count, since a timed-out request's `-upstream failure` says nothing of its size.
#[inline]
pub fn next_estimate(estimate: usize, len: usize, decay: u32) -> usize {
    len.max(estimate - (estimate >> decay))
}

/// A session holding and awaiting at most this many bytes is light: it may use the reserve.
pub const LIGHT: usize = 64 * 1024;

/// How long sessions may wait for room while the held bytes do not drain before the largest
/// holders are evicted: heavy well-behaved clients wait at most about this for room.
pub const STALL: std::time::Duration = std::time::Duration::from_millis(200);

/// The budget of one worker.
#[derive(Default)]
pub struct Budget {
    /// Bytes; 0 = no limit. Set at start and on every config apply.
    limit: Cell<usize>,
    held: Cell<usize>,
    asked: Cell<usize>,
    /// Worker-wide decaying maximum of reply sizes (bytes): a new session's estimate.
    typical: Cell<usize>,
    /// Sessions paused until the budget has room again.
    waiting: RefCell<Vec<Weak<Sink>>>,
    /// Wakes the eviction task when `held` passed the limit.
    pub over: Notify,
    /// Bytes of sessions that closed since memory was last handed back to the kernel (their
    /// largest buffered amount each): the trim task uses it.
    released: Cell<usize>,
    /// Bytes written to clients, ever: a full budget with this unchanged is stalled.
    written: Cell<u64>,
}

impl Budget {
    /// Sets the worker's share of `runtime.maxmemory_clients` (bytes; 0 = no limit).
    pub fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
        self.wake_if_room();
    }

    /// Reply bytes buffered for the worker's clients.
    pub fn held(&self) -> usize {
        self.held.get()
    }

    /// The limit in bytes (0: none).
    pub fn limit(&self) -> usize {
        self.limit.get()
    }

    /// True while `held` is past the limit: some client must be evicted.
    pub fn over_limit(&self) -> bool {
        let limit = self.limit.get();
        limit > 0 && self.held.get() > limit
    }

    /// True when sessions may send more requests upstream; `light`: the session asking holds
    /// and awaits at most [`LIGHT`] bytes, and may use the reserve above the limit.
    #[inline]
    pub fn has_room(&self, light: bool) -> bool {
        let limit = self.limit.get();
        let bound = if light { limit + limit / 4 } else { limit };
        limit == 0 || self.used() < bound
    }

    fn used(&self) -> usize {
        self.held.get().saturating_add(self.asked.get())
    }

    /// True once the budget is back under three quarters of its limit: paused sessions resume
    /// (waking them at every byte freed would wake all of them for each reply).
    fn low(&self) -> bool {
        let limit = self.limit.get();
        limit == 0 || self.used() < limit / 4 * 3
    }

    /// The estimate a new session starts with (bytes per reply).
    pub fn initial_estimate(&self) -> usize {
        self.typical.get().max(MIN_ESTIMATE)
    }

    /// A reply of `len` bytes (not an error) arrived for some session: see [`next_estimate`].
    #[inline]
    pub fn observe_reply(&self, len: usize) {
        self.typical
            .set(next_estimate(self.typical.get(), len, WORKER_DECAY));
    }

    /// Replaces a session's share (`held` bytes, `asked` bytes) `old` by `new`.
    #[inline]
    pub fn update(&self, old: (usize, usize), new: (usize, usize)) {
        if old == new {
            return;
        }
        let held = self.held.get() - old.0.min(self.held.get()) + new.0;
        self.held.set(held);
        let asked = self.asked.get() - old.1.min(self.asked.get()) + new.1;
        self.asked.set(asked);
        if new.0 > old.0 && self.over_limit() {
            self.over.notify();
        } else if (new.0 < old.0 || new.1 < old.1) && !self.waiting.borrow().is_empty() {
            self.wake_if_room();
        }
    }

    /// Registers a session that paused for room; it is woken (its reader notified) once there is.
    pub fn wait(&self, sink: Weak<Sink>) {
        self.waiting.borrow_mut().push(sink);
    }

    fn wake_if_room(&self) {
        if !self.low() {
            return;
        }
        let woken = std::mem::take(&mut *self.waiting.borrow_mut());
        for sink in woken.iter().filter_map(Weak::upgrade) {
            sink.reader.notify();
        }
    }

    /// `n` bytes reached some client's socket.
    #[inline]
    pub fn wrote(&self, n: usize) {
        self.written.set(self.written.get().wrapping_add(n as u64));
    }

    /// Bytes written to clients so far (compare two readings).
    pub fn written(&self) -> u64 {
        self.written.get()
    }

    /// True when sessions wait for room that has not come back (the budget is above three
    /// quarters) and most of it is replies held for clients, not requests still at the
    /// backends: evicting holders makes room.
    pub fn stuck(&self) -> bool {
        !self.low()
            && self.held.get().saturating_mul(2) >= self.limit.get()
            && self.waiting.borrow().iter().any(|w| w.strong_count() > 0)
    }

    /// A session that held at most `peak` bytes closed.
    pub fn released(&self, peak: usize) {
        self.released.set(self.released.get().saturating_add(peak));
    }

    /// Bytes released by closed sessions since the last call (which resets it).
    pub fn take_released(&self) -> usize {
        self.released.replace(0)
    }

    /// Evicts clients, the largest holders first, until `held` is back under the limit and
    /// (`until_room`) the budget under three quarters of it, where paused sessions resume;
    /// `sessions` are the worker's open sessions. Returns how many were evicted.
    pub fn evict(&self, sessions: &[std::rc::Rc<Sink>], until_room: bool) -> usize {
        let mut order: Vec<(usize, &std::rc::Rc<Sink>)> =
            sessions.iter().map(|s| (s.held(), s)).collect();
        order.sort_unstable_by_key(|o| std::cmp::Reverse(o.0));
        let mut evicted = 0;
        for (held, sink) in order {
            let done = !self.over_limit() && (!until_room || self.low());
            if done || held == 0 {
                break;
            }
            sink.evict();
            evicted += 1;
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_counts_held_and_asked_bytes() {
        let b = Budget::default();
        assert!(b.has_room(false), "no limit: always room");
        b.set_limit(1000);
        b.update((0, 0), (400, 500));
        assert!(b.has_room(false));
        b.update((400, 500), (400, 600));
        assert!(!b.has_room(false), "held + asked = limit: no room");
        assert!(b.has_room(true), "a light session may use the reserve");
        b.update((400, 600), (400, 850));
        assert!(!b.has_room(true), "the reserve is a quarter of the limit");
        assert!(!b.over_limit(), "asked bytes alone never evict");
        b.update((400, 850), (1001, 0));
        assert!(b.over_limit());
        b.update((1001, 0), (0, 0));
        assert_eq!((b.held(), b.has_room(false)), (0, true));
    }

    #[test]
    fn the_estimate_follows_recent_replies() {
        let b = Budget::default();
        assert_eq!(b.initial_estimate(), MIN_ESTIMATE);
        b.observe_reply(1 << 20);
        assert_eq!(
            b.initial_estimate(),
            1 << 20,
            "a large reply counts at once"
        );
        for _ in 0..100 {
            b.observe_reply(5);
        }
        assert!(
            b.initial_estimate() > 900 * 1024,
            "{}",
            b.initial_estimate()
        );
        for _ in 0..20_000 {
            b.observe_reply(5);
        }
        assert_eq!(
            b.initial_estimate(),
            MIN_ESTIMATE,
            "small replies bring it down in time"
        );
        assert_eq!(
            next_estimate(MIN_ESTIMATE, 5, SESSION_DECAY),
            MIN_ESTIMATE / 64 * 63
        );
        assert_eq!(next_estimate(64 << 10, 10, SESSION_DECAY), 63 << 10);
    }
}

//! A worker's memory budget for its clients: reply bytes buffered for them plus the replies it
//! has asked upstream for on their behalf (Redis 7 `maxmemory-clients`, per worker).
//!
//! Two figures are kept, both summed over the worker's sessions:
//! - `held`: bytes of replies and pub/sub messages received and not yet written to their client
//!   (a session's output buffer, the write in progress, replies waiting for an earlier one),
//!   and the request frames open transactions hold (large commands queued inside MULTI, which
//!   Redis too counts as client memory);
//! - `asked`: an estimate of the replies requested and not yet received — each session's
//!   requests in flight times the average size of its recent replies. It is what Redis holds in
//!   its output buffer for Respite's connections, and what will land in `held` next.
//!
//! While `held + asked` is at the limit, sessions stop reading requests (they wait in
//! [`Budget::wait`] and are woken once it is back under three quarters, oldest first and
//! [`WAKE_BATCH`] at a time, so the room freed goes to the clients that waited longest rather
//! than to whichever of hundreds of woken sessions runs first). A light session — one
//! that holds and awaits almost nothing, such as a client sending small requests one at a time —
//! goes on while the bytes actually held are under the limit plus a reserve of a quarter of it,
//! whatever others asked for, so clients that ask and never read cannot hold up the others;
//! paused, it resumes as soon as the reserve has room, ahead of the heavy sessions queued
//! before it. Clients that ask and do not read would keep
//! it there for ever, every other client of the worker waiting behind them: when `held` alone
//! passes the limit, or sessions wait for room with most of the budget held and not draining for
//! [`STALL`], the worker evicts the clients holding the most, as Redis evicts clients
//! over `maxmemory-clients`, until there is room ([`Budget::evict`]).
//!
//! Requests count too: a session whose unparsed request passes [`RECEIVE_FREE`] (a large value
//! on its way in) reads more of it only while replies and requests being received together are
//! under the limit ([`Budget::may_receive`]). One such request at a time, the turn's holder,
//! always goes on, so several large requests arriving at once never wait on each other: at the
//! limit they are received one after another, and the worker holds at most the limit plus one
//! request (`max_request_bytes`).
//!
//! Worker-local (one thread): plain cells, no atomics.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
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

/// Unparsed request bytes a session holds without asking the budget (bytes): the common
/// request never does; 10 000 clients each stalled inside a request hold at most this each.
pub const RECEIVE_FREE: usize = 64 * 1024;

/// How many paused sessions one wake-up resumes: the next batch is woken by the bytes they
/// free, or by the eviction task's tick.
pub const WAKE_BATCH: usize = 8;

/// The budget of one worker.
#[derive(Default)]
pub struct Budget {
    /// Bytes; 0 = no limit. Set at start and on every config apply.
    limit: Cell<usize>,
    held: Cell<usize>,
    asked: Cell<usize>,
    /// Worker-wide decaying maximum of reply sizes (bytes): a new session's estimate.
    typical: Cell<usize>,
    /// Sessions paused until the budget has room again, oldest first.
    waiting: RefCell<VecDeque<Weak<Sink>>>,
    /// Light sessions paused until the reserve has room: woken all at once and ahead of the
    /// others, so a client that asks for little never queues behind the heavy ones.
    light_waiting: RefCell<Vec<Weak<Sink>>>,
    /// Wakes the eviction task when `held` passed the limit.
    pub over: Notify,
    /// Bytes of sessions that closed since memory was last handed back to the kernel (their
    /// largest buffered amount each): the trim task uses it.
    released: Cell<usize>,
    /// Bytes written to clients, ever: a full budget with this unchanged is stalled.
    written: Cell<u64>,
    /// Unparsed request bytes of sessions past [`RECEIVE_FREE`].
    receiving: Cell<usize>,
    /// The session (by id) whose large request always goes on.
    receive_turn: Cell<Option<u64>>,
    /// Sessions paused inside a large request until there is room or the turn is free.
    receivers: RefCell<Vec<Weak<Sink>>>,
}

impl Budget {
    /// Sets the worker's share of `runtime.maxmemory_clients` (bytes; 0 = no limit).
    pub fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
        self.wake_if_room();
    }

    /// Bytes held for the worker's clients: replies buffered and transactions' frames.
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
    /// and awaits at most [`LIGHT`] bytes. A light session is held back only by the bytes
    /// actually held, up to the limit plus a reserve of a quarter of it, not by the replies
    /// other sessions asked for: those are estimates, which a burst of new clients pipelining
    /// requests for large values overshoots many times over (each asked at a small estimate
    /// before any reply told the size: 32 GiB asked against a 512 MiB share, measured) while
    /// holding too little to be evicted, and a client sending one small request at a time
    /// would wait for all of them to drain. What light sessions add is small, and held bytes
    /// past the limit are evicted.
    #[inline]
    pub fn has_room(&self, light: bool) -> bool {
        let limit = self.limit.get();
        match (limit, light) {
            (0, _) => true,
            (_, true) => self.held.get() < limit + limit / 4,
            (_, false) => self.used() < limit,
        }
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
        } else if (new.0 < old.0 || new.1 < old.1)
            && !(self.waiting.borrow().is_empty()
                && self.light_waiting.borrow().is_empty()
                && self.receivers.borrow().is_empty())
        {
            self.wake_if_room();
        }
    }

    /// Registers a session that paused for room; it is woken (its reader notified) once there is:
    /// `light` (it holds and awaits at most [`LIGHT`]) once the reserve has room.
    pub fn wait(&self, sink: Weak<Sink>, light: bool) {
        if light {
            self.light_waiting.borrow_mut().push(sink);
        } else {
            self.waiting.borrow_mut().push_back(sink);
        }
    }

    /// Resumes every paused light session once the reserve has room; then, if the budget is
    /// back under three quarters of its limit, the [`WAKE_BATCH`] sessions that waited longest
    /// (closed sessions are dropped from the queue on the way).
    pub fn wake_if_room(&self) {
        if !self.light_waiting.borrow().is_empty() && self.has_room(true) {
            let woken = std::mem::take(&mut *self.light_waiting.borrow_mut());
            for sink in woken.iter().filter_map(Weak::upgrade) {
                sink.reader.notify();
            }
        }
        if !self.low() {
            return;
        }
        if !self.receivers.borrow().is_empty() {
            self.wake_receivers();
        }
        let mut woken = 0;
        while woken < WAKE_BATCH {
            let Some(next) = self.waiting.borrow_mut().pop_front() else {
                return;
            };
            if let Some(sink) = next.upgrade() {
                sink.reader.notify();
                woken += 1;
            }
        }
    }

    /// Replaces session `id`'s unparsed request bytes counted against the budget, `old` by
    /// `new` (0 below [`RECEIVE_FREE`]); returns `new`. A session whose request is complete
    /// (`new` = 0) gives up the turn, and the sessions paused inside a request try again.
    pub fn receiving(&self, id: u64, old: usize, new: usize) -> usize {
        if old != new {
            let now = self.receiving.get() - old.min(self.receiving.get()) + new;
            self.receiving.set(now);
        }
        if new == 0 && self.receive_turn.get() == Some(id) {
            self.receive_turn.set(None);
            self.wake_receivers();
        } else if new < old {
            self.wake_receivers();
        }
        new
    }

    /// True if session `id`, inside a request of more than [`RECEIVE_FREE`] bytes, may read
    /// more of it: it holds the turn (or takes it, free), or replies and requests being
    /// received are under the limit. Otherwise `sink` is registered and its reader notified
    /// once that may have changed.
    pub fn may_receive(&self, id: u64, sink: &std::rc::Rc<Sink>) -> bool {
        match self.receive_turn.get() {
            None => {
                self.receive_turn.set(Some(id));
                return true;
            }
            Some(turn) if turn == id => return true,
            Some(_) => {}
        }
        let limit = self.limit.get();
        if limit == 0 || self.used().saturating_add(self.receiving.get()) < limit {
            return true;
        }
        let mut receivers = self.receivers.borrow_mut();
        let me = std::rc::Rc::downgrade(sink);
        if !receivers.iter().any(|w| w.ptr_eq(&me)) {
            receivers.push(me);
        }
        false
    }

    /// Wakes the sessions paused inside a request (they check again, and wait again if still
    /// refused): large requests are few, so all of them.
    fn wake_receivers(&self) {
        let woken = std::mem::take(&mut *self.receivers.borrow_mut());
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
            && (self.waiting.borrow().iter().any(|w| w.strong_count() > 0)
                || self
                    .light_waiting
                    .borrow()
                    .iter()
                    .any(|w| w.strong_count() > 0))
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
            sessions.iter().map(|s| (s.memory(), s)).collect();
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
    use std::rc::Rc;

    /// True if `n` was notified (polls its wait once).
    fn notified(n: &Notify) -> bool {
        use std::future::Future;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::pin::pin!(n.notified()).poll(&mut cx).is_ready()
    }

    #[test]
    fn large_requests_are_received_one_at_a_time_at_the_limit() {
        use std::rc::Rc;
        let store = crate::stats::Store::new();
        let stats = Rc::new(super::super::stats::ListenerStats::new(store, 0, "t"));
        let budget = Rc::new(Budget::default());
        budget.set_limit(1 << 20);
        let sink = || {
            Rc::new(Sink::new(
                stats.clone(),
                Rc::new(Cell::new(0)),
                budget.clone(),
            ))
        };
        let (a, b, c) = (sink(), sink(), sink());
        // Under the limit every large request goes on.
        budget.receiving(1, 0, 300 << 10);
        assert!(budget.may_receive(1, &a), "the first takes the turn");
        budget.receiving(2, 0, 300 << 10);
        assert!(budget.may_receive(2, &b), "room left");
        budget.receiving(1, 300 << 10, 600 << 10);
        // Past it only the turn's holder reads on, however large its request.
        budget.receiving(3, 0, 200 << 10);
        assert!(!budget.may_receive(3, &c));
        assert!(!budget.may_receive(2, &b));
        assert!(budget.may_receive(1, &a));
        budget.receiving(1, 600 << 10, 5 << 20);
        assert!(budget.may_receive(1, &a), "one request may pass the limit");
        assert!(!notified(&b.reader) && !notified(&c.reader));
        // Its request complete, the turn is free: the paused ones try again.
        budget.receiving(1, 5 << 20, 0);
        assert!(notified(&b.reader) && notified(&c.reader));
        assert!(budget.may_receive(3, &c), "the turn, free, is taken");
        assert!(
            budget.may_receive(2, &b),
            "room again: 500 KiB of 1 MiB received"
        );
    }

    /// A budget of `limit` bytes and a maker of sessions reporting into it.
    fn budget_with_sessions(limit: usize) -> (Rc<Budget>, impl Fn() -> Rc<Sink>) {
        let store = crate::stats::Store::new();
        let stats = Rc::new(super::super::stats::ListenerStats::new(store, 0, "t"));
        let budget = Rc::new(Budget::default());
        budget.set_limit(limit);
        let b = budget.clone();
        let sink = move || Rc::new(Sink::new(stats.clone(), Rc::new(Cell::new(0)), b.clone()));
        (budget, sink)
    }

    #[test]
    fn paused_sessions_resume_oldest_first_a_batch_at_a_time() {
        let (budget, sink) = budget_with_sessions(1000);
        budget.update((0, 0), (1000, 0));
        let mut sinks: Vec<Rc<Sink>> = (0..20).map(|_| sink()).collect();
        for s in &sinks {
            budget.wait(Rc::downgrade(s), false);
        }
        // A closed session in the queue is skipped, not counted in the batch.
        drop(sinks.remove(1));
        budget.update((1000, 0), (800, 0));
        assert!(
            sinks.iter().all(|s| !notified(&s.reader)),
            "still above 3/4"
        );
        budget.update((800, 0), (0, 0));
        let woken: Vec<bool> = sinks.iter().map(|s| notified(&s.reader)).collect();
        let first: Vec<bool> = (0..19).map(|i| i < WAKE_BATCH).collect();
        assert_eq!(woken, first, "the oldest {WAKE_BATCH} first");
        budget.wake_if_room();
        let woken: Vec<bool> = sinks.iter().map(|s| notified(&s.reader)).collect();
        let second: Vec<bool> = (0..19)
            .map(|i| (WAKE_BATCH..2 * WAKE_BATCH).contains(&i))
            .collect();
        assert_eq!(woken, second, "then the next batch");
    }

    #[test]
    fn paused_light_sessions_resume_first_once_the_reserve_has_room() {
        let (budget, sink) = budget_with_sessions(1000);
        budget.update((0, 0), (1300, 0));
        let heavy: Vec<Rc<Sink>> = (0..3).map(|_| sink()).collect();
        for s in &heavy {
            budget.wait(Rc::downgrade(s), false);
        }
        let light = sink();
        budget.wait(Rc::downgrade(&light), true);
        budget.wake_if_room();
        assert!(!notified(&light.reader), "the reserve is full too");
        // Under the reserve (limit + 1/4), above three quarters: only the light one goes on.
        budget.update((1300, 0), (1100, 0));
        assert!(
            notified(&light.reader),
            "a light session resumes in the reserve"
        );
        assert!(heavy.iter().all(|s| !notified(&s.reader)));
        budget.update((1100, 0), (0, 0));
        assert!(heavy.iter().all(|s| notified(&s.reader)));
    }

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
        b.update((400, 600), (400, 32_000));
        assert!(
            b.has_room(true),
            "replies others asked for never hold back a light session"
        );
        assert!(!b.over_limit(), "asked bytes alone never evict");
        b.update((400, 32_000), (1249, 0));
        assert!(b.has_room(true));
        assert!(b.over_limit());
        b.update((1249, 0), (1250, 0));
        assert!(!b.has_room(true), "the reserve is a quarter of the limit");
        b.update((1250, 0), (0, 0));
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

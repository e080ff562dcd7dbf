//! The ordered reply queue of one downstream session.
//!
//! Every request takes a slot in request order; replies fill slots in whatever order upstreams
//! answer; completed slots at the head move to the output buffer, so the client reads its replies
//! in the order it sent the requests. A reply that completes the head slot is copied once, straight
//! into the output buffer.
//!
//! A slot may be held (a DELAY fault, Envoy `DelayFaultRequest`): its reply waits `delay` after it
//! arrives before it may be written, and since replies keep request order, every later reply of
//! the session waits behind it. The writer task sleeps until the held head is due
//! ([`Sink::wait_output`]); a closed session releases held slots at once.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::budget::{self, Budget};
use super::observe::Pending;
use super::output::Output;
use super::stats::ListenerStats;
use crate::command::Merge;
use crate::command::split::{Part, merge};
use crate::config::OutputBufferLimit;
use crate::net::{self, Notify};
use crate::resp::pubsub::{Correction, add_to_counts};
use crate::router::dispatch::Slots;
use crate::stats::clock;
use crate::stats::log_limit::log_limited;
use crate::upstream::Deliver;

/// Slots a session may have waiting before it stops reading (back-pressure).
const MAX_PENDING_SLOTS: usize = 256;
/// Reply bytes a session may hold for a slow reader before it stops reading.
const MAX_OUT_BYTES: usize = 4 * 1024 * 1024;
/// Reply bytes a session may have asked for and not received (its requests in flight times its
/// average reply) before it stops reading: a pipeline of large values goes out a few at a time,
/// so neither Respite nor Redis's output buffer for Respite holds more than this per session.
const MAX_ASKED_BYTES: usize = 4 * 1024 * 1024;

/// Reply buffers kept for reuse by a session (replies that arrive before the head's).
const MAX_SPARE_BUFFERS: usize = 16;
/// A reply buffer grown past this is not kept for reuse (so an idle session keeps at most
/// 64 KiB of them, typically a few hundred bytes).
const MAX_SPARE_CAPACITY: usize = 4 * 1024;

/// No command id (local replies to unknown or invalid commands).
pub const NO_CMD: u16 = u16::MAX;

enum SlotState {
    Waiting,
    /// The reply and whether it counts as a success.
    Ready(Vec<u8>, bool),
    Split(Box<SplitState>),
    /// A pub/sub frame (a message), not a reply: it holds its place in the output, and counts
    /// as no request.
    Push(Vec<u8>),
}

struct SplitState {
    merge: Merge,
    nkeys: usize,
    parts: Vec<Part>,
    replies: Vec<Option<Vec<u8>>>,
    remaining: usize,
}

/// Whether a slot's reply is held back (a DELAY fault).
#[derive(Clone, Copy)]
enum Hold {
    No,
    /// Held this long once its reply arrives.
    For(Duration),
    /// The reply arrived; it may be written from this instant.
    Until(Instant),
}

struct Slot {
    cmd: u16,
    /// When the request's bytes were read (its read batch's clock): latency runs from here.
    start: Instant,
    state: SlotState,
    /// Hot keys / big values / access log state of an observed request (engine/observe.rs).
    obs: Option<Box<Pending>>,
    hold: Hold,
    /// Added to the counts of the reply (see [`Sink::adjust_next`]); boxed twice so that a
    /// slot that has none (every request but PUBLISH and PUBSUB NUMSUB while subscriptions
    /// exist) carries one thin pointer.
    adjust: Option<Box<Box<[Correction]>>>,
    /// The reply is not written (CLIENT REPLY OFF or SKIP); it still takes its turn.
    silent: bool,
}

#[derive(Default)]
struct Inner {
    /// Replies ready for the client, in order (with how many: for `downstream_rq_active` and
    /// drain accounting).
    out: Output,
    head_seq: u64,
    slots: VecDeque<Slot>,
    /// The client is gone: replies are counted and dropped.
    closed: bool,
    /// Respite cut the client off ([`Sink::evict`], its output-buffer limit): its requests not
    /// yet written upstream are dropped.
    cut_off: bool,
    /// The reader has stopped: once every slot is written, the writer closes the connection.
    reader_done: bool,
    reader_paused: bool,
    /// Emptied reply buffers, reused for the next reply that arrives out of order: with
    /// pipelined keys on several backends that is a routine event, and must not cost an
    /// allocation per request.
    spare: Vec<Vec<u8>>,
    /// Observation for the next slot pushed ([`Sink::observe_next`]).
    next_obs: Option<Box<Pending>>,
    /// Hold for the next slot pushed ([`Sink::hold_next`]).
    next_hold: Option<Duration>,
    /// Count corrections for the next slot pushed ([`Sink::adjust_next`]).
    next_adjust: Option<Box<Box<[Correction]>>>,
    /// Whether the next slot pushed is silent ([`Sink::silence_next`]).
    next_silent: bool,
    /// Set by [`Sink::cork`]: nothing is written until [`Sink::uncork`].
    corked: bool,
    /// The slot [`Sink::answered_before`] waits to see at the head.
    awaited: Option<u64>,
    /// Bytes of pub/sub frames waiting in slots behind a reply.
    queued_push: usize,
    /// Bytes of replies waiting in slots for an earlier one (ready and split parts).
    queued: usize,
    /// Bytes of request frames this session's transaction holds (large commands queued inside
    /// MULTI, kept until the transaction and its copies are done): client memory for the
    /// worker's budget and its evictions, as Redis counts a client's MULTI state in
    /// `maxmemory-clients`, but not replies, so outside the output-buffer limit.
    frames: usize,
    /// Set while the session's EXEC is on its way: its frames are no longer evictable, since
    /// the transaction runs whatever happens to the client (Redis evicts between commands).
    executing: bool,
    /// Decaying maximum of this session's reply sizes (bytes, [`budget::next_estimate`]):
    /// what a request in flight is expected to bring back.
    estimate: usize,
    /// The (held, asked) bytes last reported to the worker's budget.
    charged: (usize, usize),
    /// The most bytes this session held at once (the trim task's hint once it closes).
    peak: usize,
    /// The client's output-buffer limit (Redis `client-output-buffer-limit normal`).
    limit: Option<OutputBufferLimit>,
    /// Bytes handed to the writer and not yet written.
    in_flight: usize,
    /// The client's output-buffer limit while it is subscribed (Redis's
    /// `client-output-buffer-limit pubsub`), and since when it has been over the soft limit.
    pubsub_limit: Option<OutputBufferLimit>,
    over_soft_since: Option<Instant>,
}

/// True when `held` bytes break `limit` at `now` (`over_since`: when the soft limit was first
/// passed, kept up to date).
fn broken(
    limit: &OutputBufferLimit,
    held: usize,
    now: Instant,
    over_since: &mut Option<Instant>,
) -> bool {
    if limit.hard_limit > 0 && held >= limit.hard_limit {
        return true;
    }
    if limit.soft_limit > 0 && held >= limit.soft_limit {
        let since = *over_since.get_or_insert(now);
        return now.saturating_duration_since(since) >= limit.soft_limit_for;
    }
    *over_since = None;
    false
}

/// Reply queue shared by a session's reader, its writer and the upstream connections.
pub struct Sink {
    inner: RefCell<Inner>,
    /// Wakes the writer task.
    pub writer: Notify,
    /// Wakes the reader task when back-pressure lifts.
    pub reader: Notify,
    /// Wakes [`Sink::answered_before`].
    head_moved: Notify,
    stats: Rc<ListenerStats>,
    /// Requests of this worker not yet fully answered (drain waits for zero).
    active: Rc<Cell<i64>>,
    /// The worker's memory budget for its clients, which this session's bytes count against.
    budget: Rc<Budget>,
    /// The client connection, shut when the client is disconnected for its memory (a write
    /// the client never reads would otherwise wait for ever, holding its bytes).
    stream: RefCell<Option<std::rc::Weak<net::Stream>>>,
}

impl Sink {
    /// A new, empty queue whose bytes count against `budget`.
    pub fn new(stats: Rc<ListenerStats>, active: Rc<Cell<i64>>, budget: Rc<Budget>) -> Sink {
        let inner = Inner {
            estimate: budget.initial_estimate(),
            ..Inner::default()
        };
        Sink {
            inner: RefCell::new(inner),
            writer: Notify::default(),
            reader: Notify::default(),
            head_moved: Notify::default(),
            stats,
            active,
            budget,
            stream: RefCell::new(None),
        }
    }

    /// The client connection, shut if the client is disconnected for its memory, and the
    /// client's output-buffer limit (Redis `client-output-buffer-limit normal`).
    pub fn attach(&self, stream: &Rc<net::Stream>, limit: OutputBufferLimit) {
        *self.stream.borrow_mut() = Some(Rc::downgrade(stream));
        self.inner.borrow_mut().limit = Some(limit);
    }

    /// Reply bytes held for this client: its output buffer, the write in progress, replies
    /// and messages waiting behind an earlier reply.
    pub fn held(&self) -> usize {
        held(&self.inner.borrow())
    }

    /// Client memory this session counts for in the worker's budget, as eviction sees it
    /// (bytes): the replies held for it ([`Sink::held`]) and the request frames its open
    /// transaction holds (not once its EXEC is on its way). Eviction frees the largest first.
    pub fn memory(&self) -> usize {
        let inner = self.inner.borrow();
        let frames = if inner.executing { 0 } else { inner.frames };
        held(&inner).saturating_add(frames)
    }

    /// The worker's memory budget for its clients in bytes (0: none).
    pub fn memory_limit(&self) -> usize {
        self.budget.limit()
    }

    /// The session's EXEC is on its way (`true`) or answered: see [`Sink::memory`].
    pub fn executing(&self, on: bool) {
        self.inner.borrow_mut().executing = on;
    }

    /// A request frame of `bytes` is held for this session's transaction (`held`: true) or was
    /// let go by its last holder (false); counted in the worker's budget while held.
    pub fn hold_frame(&self, bytes: usize, held: bool) {
        let mut inner = self.inner.borrow_mut();
        inner.frames = if held {
            inner.frames.saturating_add(bytes)
        } else {
            inner.frames.saturating_sub(bytes)
        };
        let broken = self.settle(&mut inner);
        drop(inner);
        if !held {
            self.budget.released(bytes);
        }
        if let Some(kind) = broken {
            self.disconnect(kind);
        }
    }

    /// Reports the session's bytes to the worker's budget and checks its output-buffer limit.
    /// Returns the limit it broke (the caller disconnects the client, outside the borrow).
    #[inline]
    fn settle(&self, inner: &mut Inner) -> Option<Broken> {
        if inner.closed {
            let old = std::mem::take(&mut inner.charged);
            self.budget.update(old, (0, 0));
            return None;
        }
        let held = held(inner);
        let asked = inner.slots.len().saturating_mul(inner.estimate);
        let charged = held.saturating_add(inner.frames);
        let old = std::mem::replace(&mut inner.charged, (charged, asked));
        self.budget.update(old, (charged, asked));
        inner.peak = inner.peak.max(held);
        let (limit, kind) = match (inner.pubsub_limit, inner.limit) {
            (Some(l), _) => (l, Broken::PubSub),
            (None, Some(l)) => (l, Broken::Normal),
            (None, None) => return None,
        };
        let hard = limit.hard_limit > 0 && held >= limit.hard_limit;
        let soft = limit.soft_limit > 0 && held >= limit.soft_limit;
        if !hard && !soft {
            inner.over_soft_since = None;
            return None;
        }
        let mut since = inner.over_soft_since;
        let broken = broken(&limit, held, Instant::now(), &mut since);
        inner.over_soft_since = since;
        broken.then_some(kind)
    }

    /// Disconnects the client for a broken output-buffer limit (logged, counted).
    #[cold]
    fn disconnect(&self, kind: Broken) {
        let held = self.held();
        match kind {
            Broken::PubSub => {
                log_limited!(WARN, "client disconnected: pub/sub output over its client-output-buffer-limit";
                    held_bytes = held);
                self.stats.pubsub_slow_close.inc();
            }
            Broken::Normal => {
                log_limited!(WARN, "client disconnected: replies not read over its client-output-buffer-limit";
                    held_bytes = held);
            }
        }
        self.stats.output_buffer_limit_close.inc();
        self.inner.borrow_mut().cut_off = true;
        self.close();
        self.shut();
    }

    /// Disconnects the client to bring the worker back under its memory budget (Redis
    /// `maxmemory-clients` client eviction); its outstanding replies are dropped as they come.
    pub fn evict(&self) {
        self.stats.evicted_clients.inc();
        self.inner.borrow_mut().cut_off = true;
        self.close();
        self.shut();
    }

    fn shut(&self) {
        let stream = self
            .stream
            .borrow()
            .as_ref()
            .and_then(std::rc::Weak::upgrade);
        if let Some(stream) = stream {
            net::shutdown(&stream);
        }
    }

    fn add_active(&self, n: i64) {
        self.active.set(self.active.get() + n);
        self.stats.rq_active.add(n);
    }

    /// Takes the next slot for a request of command `cmd` (its table id); returns its sequence.
    /// Its latency starts at the current read batch's clock ([`clock::now`]).
    pub fn push(&self, cmd: u16) -> u64 {
        let mut inner = self.inner.borrow_mut();
        let seq = inner.head_seq + inner.slots.len() as u64;
        let obs = inner.next_obs.take();
        let hold = match inner.next_hold.take() {
            None => Hold::No,
            Some(d) => Hold::For(d),
        };
        let adjust = inner.next_adjust.take();
        let silent = std::mem::take(&mut inner.next_silent);
        inner.slots.push_back(Slot {
            cmd,
            start: clock::now(),
            state: SlotState::Waiting,
            obs,
            hold,
            adjust,
            silent,
        });
        self.settle(&mut inner);
        drop(inner);
        self.add_active(1);
        seq
    }

    /// Attaches `obs` to the next slot pushed (the request about to be handled).
    pub fn observe_next(&self, obs: Box<Pending>) {
        self.inner.borrow_mut().next_obs = Some(obs);
    }

    /// Holds the reply of the next slot pushed (the request about to be handled) for `delay`
    /// after it arrives: a DELAY fault, or an ERROR fault with a delay.
    pub fn hold_next(&self, delay: Duration) {
        self.inner.borrow_mut().next_hold = Some(delay);
    }

    /// Whether the reply of the next slot pushed (the request about to be handled) is written
    /// (`silent` false) or dropped in its turn (Redis `CLIENT REPLY OFF|SKIP`).
    pub fn silence_next(&self, silent: bool) {
        self.inner.borrow_mut().next_silent = silent;
    }

    /// Applies `deltas` to the counts of the next slot's reply when it comes (see
    /// [`crate::resp::pubsub::add_to_counts`]): Redis counted the proxy's upstream
    /// subscriptions where clients want their own subscribers counted.
    pub fn adjust_next(&self, deltas: Box<[Correction]>) {
        self.inner.borrow_mut().next_adjust = Some(Box::new(deltas));
    }

    /// Turns the waiting slot `seq` into a split slot expecting one reply per part.
    pub fn make_split(&self, seq: u64, merge: Merge, nkeys: usize, parts: Vec<Part>) {
        let mut inner = self.inner.borrow_mut();
        let idx = (seq - inner.head_seq) as usize;
        if let Some(slot) = inner.slots.get_mut(idx) {
            let n = parts.len();
            slot.state = SlotState::Split(Box::new(SplitState {
                merge,
                nkeys,
                parts,
                replies: vec![None; n],
                remaining: n,
            }));
        }
    }

    /// Queues a locally generated reply in order.
    pub fn push_local(&self, cmd: u16, reply: &[u8]) {
        let seq = self.push(cmd);
        self.deliver(seq, 0, reply);
    }

    /// Appends a pub/sub frame (`frame`, a RESP2 array as Redis sends it; a push `>` for a
    /// RESP3 client) to the client's output: at once when no reply is awaited, else behind the
    /// replies of the requests before it, so a message never overtakes the confirmation of its
    /// subscription. It is not a request (no request stats). A client subscribed with an
    /// output-buffer limit that this frame breaks is disconnected (`false`, as for a client
    /// already gone).
    pub fn push_message(&self, frame: &[u8], resp3: bool) -> bool {
        let mut inner = self.inner.borrow_mut();
        if inner.closed {
            return false;
        }
        // A RESP3 client gets the array as a push: the same frame with `>` for `*`.
        let (kind, body): (&[u8], &[u8]) = match frame.split_first() {
            Some((b'*', rest)) if resp3 => (b">", rest),
            _ => (b"", frame),
        };
        if inner.slots.is_empty() {
            inner.out.extend(kind);
            inner.out.extend(body);
            self.stats.tx_buffered.add(frame.len() as i64);
        } else {
            let mut copy = inner.spare.pop().unwrap_or_default();
            copy.extend_from_slice(kind);
            copy.extend_from_slice(body);
            inner.queued_push += copy.len();
            inner.slots.push_back(Slot {
                cmd: NO_CMD,
                start: clock::now(),
                state: SlotState::Push(copy),
                obs: None,
                hold: Hold::No,
                adjust: None,
                silent: false,
            });
        }
        if let Some(kind) = self.settle(&mut inner) {
            drop(inner);
            self.disconnect(kind);
            return false;
        }
        drop(inner);
        self.writer.notify();
        true
    }

    /// Sets the output-buffer limit of a subscribed client (`None` once it no longer is).
    pub fn set_pubsub_limit(&self, limit: Option<OutputBufferLimit>) {
        let mut inner = self.inner.borrow_mut();
        inner.pubsub_limit = limit;
        inner.over_soft_since = None;
    }

    /// True if the reader may handle another request: the session has fewer than
    /// [`MAX_PENDING_SLOTS`] requests waiting, holds less than [`MAX_OUT_BYTES`] for its client,
    /// has asked for less than [`MAX_ASKED_BYTES`] (one request is always allowed), and the
    /// worker's budget has room.
    #[inline]
    pub fn has_capacity(&self) -> bool {
        let inner = self.inner.borrow();
        let waiting = inner.slots.len();
        let held = held(&inner);
        let asked = waiting.saturating_mul(inner.estimate);
        waiting < MAX_PENDING_SLOTS
            && held < MAX_OUT_BYTES
            && (waiting == 0 || asked < MAX_ASKED_BYTES)
            && self.budget.has_room(is_light(&inner))
    }

    /// Marks the reader as waiting for capacity: the writer wakes it as output drains, the
    /// budget as the worker's bytes fall.
    pub fn pause_reader(self: &Rc<Self>) {
        let light = {
            let mut inner = self.inner.borrow_mut();
            inner.reader_paused = true;
            is_light(&inner)
        };
        if !self.budget.has_room(false) {
            self.budget.wait(Rc::downgrade(self), light);
        }
    }

    /// Moves the completed head slot's reply into the output buffer. `success`: no error came
    /// back (for a split command, from any part: Envoy counts those as errors).
    /// `now`: the delivery batch's clock, shared by every slot it completes.
    fn complete_head(&self, inner: &mut Inner, reply: &[u8], success: bool, now: Instant) {
        let Some(slot) = inner.slots.pop_front() else {
            return;
        };
        if matches!(slot.state, SlotState::Push(_)) {
            inner.head_seq += 1;
            inner.queued_push = inner.queued_push.saturating_sub(reply.len());
            if !inner.closed {
                self.stats.tx_buffered.add(reply.len() as i64);
                inner.out.extend(reply);
            }
            return;
        }
        if let Some(obs) = slot.obs {
            obs.complete(reply, success);
        }
        inner.head_seq += 1;
        self.stats.record(slot.cmd, success, slot.start, now);
        if inner.closed || slot.silent {
            drop_active(self, 1);
        } else {
            self.stats.tx_buffered.add(reply.len() as i64);
            inner.out.extend(reply);
            inner.out.end_reply();
        }
    }

    /// Moves every completed slot at the head into the output buffer, up to a held one not due
    /// at `now` (a closed session holds nothing: there is no one to delay).
    fn drain_ready(&self, inner: &mut Inner, now: Instant) {
        let closed = inner.closed;
        while let Some(front) = inner.slots.front_mut() {
            if let Hold::Until(t) = front.hold
                && t > now
                && !closed
            {
                break;
            }
            let (mut bytes, success) = match &mut front.state {
                SlotState::Ready(bytes, success) => {
                    let bytes = std::mem::take(bytes);
                    inner.queued = inner.queued.saturating_sub(bytes.len());
                    (bytes, *success)
                }
                SlotState::Push(bytes) => (std::mem::take(bytes), true),
                _ => break,
            };
            self.complete_head(inner, &bytes, success, now);
            if inner.spare.len() < MAX_SPARE_BUFFERS && bytes.capacity() <= MAX_SPARE_CAPACITY {
                bytes.clear();
                inner.spare.push(bytes);
            }
        }
        if inner.awaited.is_some_and(|seq| inner.head_seq >= seq) {
            inner.awaited = None;
            self.head_moved.notify();
        }
    }

    /// Completes once every request before slot `seq` has its reply, i.e. ran at its backend.
    /// What goes out on a leased connection (WATCH, EXEC, a blocking command) waits for this,
    /// so it reaches Redis after the client's earlier requests, which went out on shared
    /// connections: at Redis, one connection, they run in the client's order.
    pub async fn answered_before(&self, seq: u64) {
        loop {
            {
                let mut inner = self.inner.borrow_mut();
                if inner.head_seq >= seq {
                    return;
                }
                inner.awaited = Some(seq);
            }
            self.head_moved.notified().await;
        }
    }

    /// When the head slot's held reply may be written, if the head is one.
    fn held_until(&self) -> Option<Instant> {
        let inner = self.inner.borrow();
        match inner.slots.front() {
            Some(Slot {
                hold: Hold::Until(t),
                state: SlotState::Ready(..),
                ..
            }) => Some(*t),
            _ => None,
        }
    }

    /// The writer's wait when nothing is ready to write: until it is notified, or until a held
    /// head reply is due, which this then moves to the output buffer.
    pub async fn wait_output(&self) {
        let Some(due) = self.held_until() else {
            return self.writer.notified().await;
        };
        let left = due.saturating_duration_since(Instant::now());
        if net::timeout(left, self.writer.notified()).await.is_none() {
            let mut inner = self.inner.borrow_mut();
            self.drain_ready(&mut inner, Instant::now());
        }
    }

    /// Holds back what is ready to write until [`Sink::uncork`]: while the session waits for
    /// an exchange that does not block (EXEC, WATCH, SCRIPT KILL, CLIENT UNBLOCK), so the
    /// replies read with it (a pipelined `MULTI … EXEC`'s `+OK` and `+QUEUED`) go out in the
    /// same write as its own.
    pub fn cork(&self) {
        self.inner.borrow_mut().corked = true;
    }

    /// Ends [`Sink::cork`] and wakes the writer.
    pub fn uncork(&self) {
        self.inner.borrow_mut().corked = false;
        self.writer.notify();
    }

    /// Moves what is ready to write into `batch` (see [`Output::take`]; `spare` is the writer's
    /// emptied buffer); returns the bytes and how many replies end in them, or `None` if
    /// nothing is ready (or the sink is corked and the reader still running).
    pub fn take_output(
        &self,
        batch: &mut Vec<Vec<u8>>,
        spare: &mut Vec<u8>,
    ) -> Option<(usize, usize)> {
        let mut inner = self.inner.borrow_mut();
        if inner.out.is_empty() || (inner.corked && !inner.closed && !inner.reader_done) {
            return None;
        }
        let (bytes, n) = inner.out.take(batch, spare);
        inner.in_flight = bytes;
        Some((bytes, n))
    }

    /// Called by the writer after `n` replies (`bytes` long) reached the kernel, or failed to.
    pub fn written(&self, n: usize, bytes: usize) {
        self.stats.tx_buffered.add(-(bytes as i64));
        self.budget.wrote(bytes);
        drop_active(self, n as i64);
        let mut inner = self.inner.borrow_mut();
        inner.in_flight = 0;
        self.settle(&mut inner);
        if inner.reader_paused {
            inner.reader_paused = false;
            drop(inner);
            self.reader.notify();
        }
    }

    /// True once the reader stopped and every reply has been handed to the writer.
    pub fn finished(&self) -> bool {
        let inner = self.inner.borrow();
        inner.reader_done && inner.slots.is_empty() && inner.out.is_empty()
    }

    /// The reader will read no more (client EOF, QUIT, protocol error, drain).
    pub fn reader_done(&self) {
        self.inner.borrow_mut().reader_done = true;
        self.writer.notify();
    }

    /// The client connection is gone: drop queued output, count outstanding replies as done.
    pub fn close(&self) {
        let mut inner = self.inner.borrow_mut();
        if inner.closed {
            return;
        }
        inner.closed = true;
        inner.reader_done = true;
        // Held replies are released (and dropped) now, so they do not keep requests active.
        self.drain_ready(&mut inner, Instant::now());
        let (dropped, n) = inner.out.clear();
        // Replies still to come are dropped as they arrive: what waits in slots goes now.
        for slot in inner.slots.iter_mut() {
            if let SlotState::Ready(bytes, _) | SlotState::Push(bytes) = &mut slot.state {
                *bytes = Vec::new();
            }
        }
        inner.queued = 0;
        inner.queued_push = 0;
        self.settle(&mut inner);
        self.budget.released(inner.peak);
        drop(inner);
        self.stats.tx_buffered.add(-(dropped as i64));
        drop_active(self, n as i64);
        self.reader.notify();
        self.writer.notify();
    }

    /// True once the client connection is gone.
    pub fn is_closed(&self) -> bool {
        self.inner.borrow().closed
    }
}

/// Which output-buffer limit a client broke.
#[derive(Clone, Copy)]
enum Broken {
    Normal,
    PubSub,
}

/// Reply bytes a session holds for its client (see [`Sink::held`]).
#[inline]
fn held(inner: &Inner) -> usize {
    inner.out.len() + inner.in_flight + inner.queued + inner.queued_push
}

/// A held slot's reply arrived: its hold runs from now (Envoy starts the delay timer in
/// `DelayFaultRequest::onResponse`).
fn start_hold(hold: &mut Hold) {
    if let Hold::For(d) = *hold {
        *hold = Hold::Until(Instant::now() + d);
    }
}

/// True when the session holds and awaits at most [`budget::LIGHT`] bytes: it may use the
/// budget's reserve, and resumes first once it has room.
#[inline]
fn is_light(inner: &Inner) -> bool {
    let asked = inner.slots.len().saturating_mul(inner.estimate);
    held(inner).saturating_add(asked) <= budget::LIGHT
}

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

fn drop_active(sink: &Sink, n: i64) {
    if n != 0 {
        sink.add_active(-n);
    }
}

impl Slots for Sink {
    #[inline]
    fn push(&self, cmd: u16) -> u64 {
        Sink::push(self, cmd)
    }

    fn split(&self, seq: u64, merge: Merge, nkeys: usize, parts: Vec<Part>) {
        self.make_split(seq, merge, nkeys, parts)
    }

    fn hold_next(&self, delay: Duration) {
        Sink::hold_next(self, delay)
    }

    #[inline]
    fn local(&self, cmd: u16, reply: &[u8]) {
        self.push_local(cmd, reply)
    }
}

impl Deliver for Sink {
    fn cut_off(&self) -> bool {
        self.inner.borrow().cut_off
    }

    fn light(&self) -> bool {
        self.inner.try_borrow().is_ok_and(|inner| is_light(&inner))
    }

    fn deliver(&self, seq: u64, part: u32, reply: &[u8]) {
        let mut inner = self.inner.borrow_mut();
        let Some(idx) = seq.checked_sub(inner.head_seq) else {
            return;
        };
        let idx = idx as usize;
        let closed = inner.closed;
        if !is_error(reply) {
            inner.estimate =
                budget::next_estimate(inner.estimate, reply.len(), budget::SESSION_DECAY);
            self.budget.observe_reply(reply.len());
        }
        let Some(slot) = inner.slots.get_mut(idx) else {
            return;
        };
        // A held reply waits in its slot even at the head (not once the client is gone).
        let held = matches!(slot.hold, Hold::For(_)) && !closed;
        let adjusted;
        let mut freed = 0;
        let reply = match (&slot.adjust, &slot.state) {
            (Some(deltas), SlotState::Waiting) => {
                adjusted = add_to_counts(reply, deltas);
                &adjusted[..]
            }
            _ => reply,
        };
        let (head, success): (Cow<'_, [u8]>, bool) = match &mut slot.state {
            SlotState::Waiting if idx == 0 && !held => (Cow::Borrowed(reply), !is_error(reply)),
            SlotState::Waiting if closed => {
                // Nobody will read it: the slot is answered with nothing held.
                if let Some(slot) = inner.slots.get_mut(idx) {
                    slot.state = SlotState::Ready(Vec::new(), !is_error(reply));
                }
                self.settle(&mut inner);
                return;
            }
            SlotState::Waiting => {
                let mut copy = inner.spare.pop().unwrap_or_default();
                copy.extend_from_slice(reply);
                inner.queued += copy.len();
                if let Some(slot) = inner.slots.get_mut(idx) {
                    slot.state = SlotState::Ready(copy, !is_error(reply));
                    if held {
                        start_hold(&mut slot.hold);
                        self.writer.notify();
                    }
                }
                if let Some(kind) = self.settle(&mut inner) {
                    drop(inner);
                    self.disconnect(kind);
                }
                return;
            }
            SlotState::Split(st) => {
                let Some(r) = st.replies.get_mut(part as usize) else {
                    return;
                };
                if r.is_some() {
                    return;
                }
                *r = Some(if closed { Vec::new() } else { reply.to_vec() });
                st.remaining -= 1;
                if st.remaining > 0 {
                    if !closed {
                        inner.queued += reply.len();
                    }
                    if let Some(kind) = self.settle(&mut inner) {
                        drop(inner);
                        self.disconnect(kind);
                    }
                    return;
                }
                let replies: Vec<&[u8]> = st
                    .replies
                    .iter()
                    .map(|r| r.as_deref().unwrap_or(b""))
                    .collect();
                // The earlier parts were held in the slot; this one was not.
                freed = replies.iter().map(|r| r.len()).sum::<usize>();
                if !closed {
                    freed = freed.saturating_sub(reply.len());
                }
                let mut merged = Vec::new();
                merge(st.merge, st.nkeys, &st.parts, &replies, &mut merged);
                if let Some(deltas) = &slot.adjust {
                    merged = add_to_counts(&merged, deltas);
                }
                let success = !is_error(&merged) && !replies.iter().any(|r| is_error(r));
                if idx != 0 || held {
                    let len = merged.len();
                    slot.state = SlotState::Ready(merged, success);
                    if held {
                        start_hold(&mut slot.hold);
                        self.writer.notify();
                    }
                    inner.queued = inner.queued.saturating_sub(freed) + len;
                    if let Some(kind) = self.settle(&mut inner) {
                        drop(inner);
                        self.disconnect(kind);
                    }
                    return;
                }
                (Cow::Owned(merged), success)
            }
            SlotState::Ready(..) | SlotState::Push(_) => return,
        };
        let now = clock::now();
        self.complete_head(&mut inner, &head, success, now);
        inner.queued = inner.queued.saturating_sub(freed);
        self.drain_ready(&mut inner, now);
        let broken = self.settle(&mut inner);
        drop(inner);
        if let Some(kind) = broken {
            self.disconnect(kind);
        }
        self.writer.notify();
    }
}

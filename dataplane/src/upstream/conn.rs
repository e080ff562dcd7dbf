//! One pipelined upstream connection shared by all sessions of a worker.
//!
//! Requests from any session are appended to one output buffer and written with one write per
//! flush; replies come back in the order requests were written (Redis answers a connection's
//! commands in order), so they are matched FIFO against the queue of pending targets.
//! While the host holds as many reply bytes for the connection as its window allows, new
//! requests wait in a waiting room ([`super::room`]) and go out in turns, one per client.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use super::backoff::{BACKOFF_CAP, Backoff};
use super::room::Room;
use super::{
    HostState, HostStats, NO_UPSTREAM_HOST, POOL_REPLACED, PoolSettings, Redirect, Retry, Streak,
    Target, UPSTREAM_FAILURE, UPSTREAM_OVERFLOW,
};
use crate::net::BufResult;
use crate::net::{self, Notify, Stream};
use crate::resp::{ReplyScanner, encode};
use crate::stats::Counter;
use crate::stats::clock::{self, BatchClock};
use crate::stats::log_limit::log_limited;
use crate::stats::probe::RequestPath;

/// Buffers grown past this by a huge request or reply are replaced once drained.
const KEEP_CAPACITY: usize = 8 * 1024 * 1024;

/// A read buffer grown past this by large replies is given back once the connection has had
/// nothing to read for [`IDLE_SHRINK_AFTER`]: kept while large replies flow (regrowing it for
/// each would cost an allocation per reply), it would otherwise hold up to [`KEEP_CAPACITY`]
/// per connection for as long as the connection lives, after the load that grew it left.
const IDLE_KEEP: usize = 64 * 1024;
const IDLE_SHRINK_AFTER: Duration = Duration::from_secs(1);

/// Connection life cycle, as seen by request dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connecting or authenticating: requests queue and go out once ready.
    Connecting,
    /// Connected: requests are written as they come.
    Ready,
    /// The last attempt failed; waiting to retry. Requests fail fast with `no upstream host`.
    Backoff,
    /// Removed by a config change; everything fails.
    Closed,
}

/// A request whose reply has not come back yet.
struct Pending {
    /// `None`: the reply is read and dropped (the `ASKING` before an ASK-redirected request).
    target: Option<Target>,
    /// Set when the request is handed to the kernel: op_timeout runs from there.
    deadline: Option<Instant>,
    /// [`Conn::reads`] when the request was handed to the kernel: if it is unchanged when the
    /// request times out, the host has sent nothing since, and the connection is hung.
    reads_at_write: u64,
    /// Redirect state, carried over when the request is sent again after `MOVED`/`ASK`.
    retry: Retry,
    /// Absolute offset of the request's bytes in `Inner::log` (connections with a redirect
    /// handler only).
    log_at: u64,
    /// When the write batch holding the request was handed to the kernel (one clock read per
    /// batch): upstream request times run from here.
    sent: Option<Instant>,
    /// A script whose `op_timeout` passed: counted among the timed-out entries (the expiry walk
    /// moves past it) but still answered by its own reply, or by the connection's loss.
    waived: bool,
    /// The request's bytes in `Inner::out` (until written).
    len: usize,
    /// The reply bytes it was counted for in `Inner::in_flight` when written.
    charge: usize,
}

impl Pending {
    /// A waiting request as a pending one never written (to be answered with the others).
    fn waiting(w: Waiting) -> Pending {
        Pending {
            target: Some(w.target),
            deadline: None,
            reads_at_write: 0,
            retry: w.retry,
            log_at: 0,
            sent: None,
            waived: false,
            len: 0,
            charge: 0,
        }
    }
}

/// A request in the waiting room: its bytes, where its reply goes, its redirect state.
struct Waiting {
    request: Vec<u8>,
    target: Target,
    retry: Retry,
}

/// `ASKING`, sent before a request redirected by `ASK` (Redis Cluster spec, "ASK redirection").
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A retained request log is compacted once its dead prefix passes this many bytes.
const LOG_COMPACT: usize = 64 * 1024;

/// Why a request could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The host is known to be down (in reconnect backoff) or the connection was removed.
    NoHost,
    /// The connection already holds `max_pending_requests` requests not yet written (it is
    /// connecting, or the host stopped reading).
    Overflow,
}

impl SendError {
    /// The error reply the client gets: `-no upstream host` (Envoy) or `-upstream overflow: …`.
    pub fn reply(self) -> &'static [u8] {
        match self {
            SendError::NoHost => NO_UPSTREAM_HOST,
            SendError::Overflow => UPSTREAM_OVERFLOW,
        }
    }
}

struct Inner {
    state: State,
    /// Encoded requests not yet handed to the kernel.
    out: Vec<u8>,
    /// Targets in request order: the first `written` have been written, the rest are in `out`.
    pending: VecDeque<Pending>,
    /// How many leading entries of `pending` have been written (and stamped with a deadline).
    written: usize,
    /// How many leading entries already timed out (answered with an error; their late replies are
    /// discarded when they arrive), [`Pending::waived`] scripts included.
    timed_out: usize,
    /// How many of the `timed_out` leading entries are waived scripts still waiting.
    waived: usize,
    /// When the first byte of `out` was queued (for `buffer_flush_timeout`).
    first_queued: Option<Instant>,
    /// The bytes of every pending request, in order, kept only when a redirect handler is set:
    /// a `MOVED`/`ASK`/`TRYAGAIN` reply sends the request again elsewhere.
    log: Vec<u8>,
    /// Absolute offset of `log[0]`.
    log_base: u64,
    /// Reply bytes asked of the host and not yet read: the `charge` of every written entry of
    /// `pending`, bounded by `max_reply_bytes_in_flight` ([`write_loop`]).
    in_flight: usize,
    /// What the next written request is expected to bring back (bytes): a decaying maximum of
    /// the replies read on this connection ([`next_estimate`]).
    estimate: usize,
    /// Most requests written and not answered ([`Depth`]).
    depth: Depth,
    /// The writer stopped with requests queued because `in_flight` was full: a reply that
    /// makes room wakes it.
    backed_up: bool,
    /// Requests that came while the window could not take them, by client, let into `out`
    /// in turns as replies make room ([`Conn::admit`]).
    room: Room<Waiting>,
}

impl Inner {
    /// True while some request still waits for its reply on this connection.
    fn awaiting(&self) -> bool {
        self.pending.len() > self.timed_out || self.waived > 0 || !self.room.is_empty()
    }

    /// Drops retained request bytes nobody can need any more.
    fn compact_log(&mut self) {
        let end = self.log_base + self.log.len() as u64;
        let keep_from = self.pending.front().map_or(end, |p| p.log_at);
        let dead = (keep_from - self.log_base) as usize;
        if dead == self.log.len() {
            self.log.clear();
            self.log_base = end;
        } else if dead >= LOG_COMPACT && dead * 2 >= self.log.len() {
            self.log.drain(..dead);
            self.log_base = keep_from;
        }
    }
}

/// A pipelined connection to one upstream host, owned by one worker. `H` is the host's
/// process-wide state, kept by the layer that places requests.
pub struct Conn<H: HostState> {
    addr: SocketAddr,
    /// The host as the whole process sees it (health, connection rate limit).
    host: Arc<H>,
    settings: Rc<PoolSettings>,
    inner: RefCell<Inner>,
    /// Wakes the writer (new output, state change).
    write_ready: Notify,
    /// Wakes the timeout task (a deadline was stamped).
    timer_ready: Notify,
    /// Wakes the supervisor from backoff early (shutdown).
    wake_supervisor: Notify,
    stats: HostStats,
    /// Bumped on every new TCP connection so stale tasks of an old one stop.
    generation: Cell<u64>,
    /// The generation [`Conn::close_hung`] last closed: every request on a hung connection
    /// expires at once, and one closing (and one log line) is enough for all of them.
    hung_generation: Cell<u64>,
    /// Reads that returned data, over the connection's whole life (hung-host detection).
    reads: Cell<u64>,
    /// The current TCP connection, while there is one: the timeout task shuts it to close a
    /// hung connection.
    stream: RefCell<Option<Rc<Stream>>>,
    /// Replaced by a config change: close once the last pending reply is in.
    retiring: Cell<bool>,
    /// Redis Cluster connections: where redirects and failures are reported.
    redirect: Option<Weak<dyn Redirect>>,
    /// Send `READONLY` after connecting (a Redis Cluster replica serving reads).
    readonly: bool,
    /// Consecutive failures on this connection, for outlier detection.
    streak: Streak,
}

impl<H: HostState> Conn<H> {
    /// Creates the connection and starts its supervisor task on the current worker.
    pub fn start(host: Arc<H>, settings: Rc<PoolSettings>, stats: HostStats) -> Rc<Conn<H>> {
        Conn::start_cluster(host, settings, stats, None, false)
    }

    /// [`Conn::start`] for a Redis Cluster node: replies that are redirects or retryable errors
    /// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `BUSY`, `MASTERDOWN`: see
    /// [`is_redirect`]) go to `redirect` with the request's bytes instead of to the client, and
    /// so do failures; `readonly` sends `READONLY` after AUTH.
    ///
    /// A connection without a redirect handler (standalone hosts) passes those replies to the
    /// client unchanged once it is up: sending a request again needs a copy of every request
    /// kept until its reply (the request log, kept only here), and a resent request would run
    /// after the ones pipelined behind it, reordering a client's commands. New connections of
    /// both kinds wait for a loading host instead ([`wait_loaded`]).
    pub fn start_cluster(
        host: Arc<H>,
        settings: Rc<PoolSettings>,
        stats: HostStats,
        redirect: Option<Weak<dyn Redirect>>,
        readonly: bool,
    ) -> Rc<Conn<H>> {
        let estimate = initial_estimate(&settings);
        let conn = Rc::new(Conn {
            addr: host.addr(),
            host,
            settings,
            inner: RefCell::new(Inner {
                state: State::Connecting,
                out: Vec::with_capacity(16 * 1024),
                pending: VecDeque::new(),
                written: 0,
                timed_out: 0,
                waived: 0,
                first_queued: None,
                log: Vec::new(),
                log_base: 0,
                in_flight: 0,
                estimate,
                depth: Depth::default(),
                backed_up: false,
                room: Room::default(),
            }),
            write_ready: Notify::default(),
            timer_ready: Notify::default(),
            wake_supervisor: Notify::default(),
            stats,
            generation: Cell::new(0),
            hung_generation: Cell::new(0),
            reads: Cell::new(0),
            stream: RefCell::new(None),
            retiring: Cell::new(false),
            redirect,
            readonly,
            streak: Streak::default(),
        });
        net::spawn(supervise(conn.clone()));
        net::spawn(expire_timeouts(conn.clone()));
        conn
    }

    /// The upstream host's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// False while the host fails its health checks or is ejected (one relaxed load).
    #[inline]
    pub fn healthy(&self) -> bool {
        self.host.is_healthy()
    }

    /// Requests sent on this connection and not yet answered, plus those waiting to be let in:
    /// Envoy's `rq_active` of one connection, for `lb_policy = "least_request"`. Requests that
    /// timed out are answered, so they no longer count.
    #[inline]
    pub fn outstanding(&self) -> usize {
        let inner = self.inner.borrow();
        inner.pending.len().saturating_sub(inner.timed_out) + inner.room.len()
    }

    /// Queues one encoded request of client session `session` whose reply goes to `target`.
    /// The session, not the target, names the sender in the waiting room: a client's own
    /// requests and the mirror copies of its earlier ones (whose target is the mirror's
    /// counters) keep one order, which a switch of a cluster from mirror to primary by a reload
    /// relies on.
    ///
    /// Errors: [`SendError::NoHost`] when the host is in reconnect backoff or removed;
    /// [`SendError::Overflow`] when `max_pending_requests` requests already wait to be written.
    /// The caller answers the request itself ([`SendError::reply`]).
    pub fn send(&self, session: u64, request: &[u8], target: Target) -> Result<(), SendError> {
        self.send_retry(session, request, target, Retry::FIRST, false)
    }

    /// [`Conn::send`] with the redirect state of a request sent again; `asking` sends `ASKING`
    /// (reply dropped) right before it, as an `ASK` redirect requires.
    pub fn send_retry(
        &self,
        session: u64,
        request: &[u8],
        target: Target,
        retry: Retry,
        asking: bool,
    ) -> Result<(), SendError> {
        let mut inner = self.inner.borrow_mut();
        match inner.state {
            State::Backoff | State::Closed => return Err(SendError::NoHost),
            State::Connecting | State::Ready => {}
        }
        let resend = asking || retry.hops > 0 || retry.tries > 0;
        let sender = session as usize;
        // Requests not yet handed to the kernel: bounded, so a host that is connecting or stopped
        // reading makes requests fail at once instead of piling up without limit. At the bound a
        // client waiting less than another takes the newest place of the one waiting most.
        let unwritten = inner.pending.len() - inner.written;
        let mut displaced = None;
        if unwritten + inner.room.len() >= self.settings.max_pending_requests {
            if !resend {
                displaced = inner.room.displace_for(sender).map(|w| w.target);
            }
            if displaced.is_none() {
                drop(inner);
                self.stats.rq_pending_overflow.inc();
                return Err(SendError::Overflow);
            }
        }
        // A request the window could not take now waits in the room, and so does every request
        // once any waits there (a client's own order). Resends (redirects, retries) go straight
        // out: they are late already, and a Redis Cluster pool holds their slot's later
        // requests behind them.
        if !resend && (!inner.room.is_empty() || !self.fits(&inner, unwritten)) {
            let light = target.sink.light();
            let waiting = Waiting {
                request: request.to_vec(),
                target,
                retry,
            };
            inner.room.push(sender, waiting, light);
            let idle = inner.out.is_empty() && !inner.backed_up;
            drop(inner);
            self.stats.rq_total.inc();
            self.stats.upstream_rq_total.inc();
            self.refuse_displaced(displaced);
            if idle {
                self.write_ready.notify();
            }
            return Ok(());
        }
        let first = self.enqueue(&mut inner, request, target, retry, asking);
        self.stats.rq_total.inc();
        self.stats.upstream_rq_total.inc();
        let flush_now = self.settings.max_buffer_size_before_flush == 0
            || inner.out.len() >= self.settings.max_buffer_size_before_flush;
        drop(inner);
        self.refuse_displaced(displaced);
        // Wake the writer for the first queued byte (it arms the flush timer) and when the batch
        // is full; in between it is already awake or waiting on the timer.
        if flush_now || first {
            self.write_ready.notify();
        }
        Ok(())
    }

    /// Answers the request that gave its place in the full room to another client's
    /// ([`super::room::Room::displace_for`]) as a refused one is answered.
    fn refuse_displaced(&self, displaced: Option<Target>) {
        if let Some(target) = displaced {
            self.stats.rq_pending_overflow.inc();
            target.deliver(SendError::Overflow.reply());
        }
    }

    /// Appends one request to the output, and to the request log of a connection that
    /// resends; `asking` puts `ASKING` before it. True when it is the first byte queued.
    fn enqueue(
        &self,
        inner: &mut Inner,
        request: &[u8],
        target: Target,
        retry: Retry,
        asking: bool,
    ) -> bool {
        let first = inner.out.is_empty();
        if first {
            // The batch clock of the session read that sent it (a clock read saved per batch;
            // it is microseconds old at most), or now outside one (a redirect's resend).
            inner.first_queued = Some(clock::now());
        }
        let log_end = inner.log_base + inner.log.len() as u64;
        if asking {
            inner.out.extend_from_slice(ASKING);
            inner.pending.push_back(Pending {
                target: None,
                deadline: None,
                reads_at_write: 0,
                retry,
                log_at: log_end,
                sent: None,
                waived: false,
                len: ASKING.len(),
                charge: 0,
            });
        }
        inner.out.extend_from_slice(request);
        if self.redirect.is_some() {
            inner.log.extend_from_slice(request);
        }
        inner.pending.push_back(Pending {
            target: Some(target),
            deadline: None,
            reads_at_write: 0,
            retry,
            log_at: log_end,
            sent: None,
            waived: false,
            len: request.len(),
            charge: 0,
        });
        first
    }

    /// True when one more request, behind the `unwritten` ones already queued, fits the
    /// window as the writer will charge it: nothing ahead of it (a single request always
    /// goes), or the replies in flight and those of the queue plus its own estimate.
    #[inline]
    fn fits(&self, inner: &Inner, unwritten: usize) -> bool {
        let ahead = inner
            .in_flight
            .saturating_add(unwritten.saturating_mul(inner.estimate));
        ahead == 0
            || (inner.written.saturating_add(unwritten) < inner.depth.limit
                && ahead.saturating_add(inner.estimate) <= self.settings.max_reply_bytes_in_flight)
    }

    /// Lets waiting requests into the output, one client's at a time in turns, while the
    /// window can take them. A request of a client Respite cut off goes into `cancelled`
    /// instead: nobody reads its reply, and Redis would not run it either.
    fn admit(&self, inner: &mut Inner, cancelled: &mut Vec<Target>) {
        while !inner.room.is_empty() && self.fits(inner, inner.pending.len() - inner.written) {
            let Some((sender, w)) = inner.room.pop() else {
                break;
            };
            if w.target.sink.cut_off() {
                // All of that client's waiting requests at once: it is gone for good. The
                // mirror copies among them (their own target) still go, in their order.
                cancelled.push(w.target);
                for w in inner.room.remove(sender) {
                    if w.target.sink.cut_off() {
                        cancelled.push(w.target);
                    } else {
                        inner.room.push(sender, w, false);
                    }
                }
                continue;
            }
            self.enqueue(inner, &w.request, w.target, w.retry, false);
        }
    }

    /// Answers requests of cut-off clients that never went out (counted, Envoy's
    /// `upstream_rq_cancelled`).
    fn cancel(&self, cancelled: Vec<Target>) {
        for target in cancelled {
            self.stats.rq_cancelled.inc();
            target.deliver(UPSTREAM_FAILURE);
        }
    }

    /// Retires the connection after a config change replaced its pool: no session sends to it
    /// any more, requests already sent get their replies (or time out), then it closes. So a
    /// reload never fails a request in flight (Envoy drains replaced connection pools too).
    pub fn retire(&self) {
        self.retiring.set(true);
        self.close_if_retired();
        self.timer_ready.notify();
    }

    /// Closes a retiring connection once nobody waits for a reply on it.
    fn close_if_retired(&self) {
        if !self.retiring.get() {
            return;
        }
        let idle = !self.inner.borrow().awaiting();
        if idle {
            self.shutdown();
        }
    }

    /// Stops the connection for good: pending requests fail.
    pub fn shutdown(&self) {
        self.inner.borrow_mut().state = State::Closed;
        self.write_ready.notify();
        self.wake_supervisor.notify();
        self.timer_ready.notify();
    }

    fn is_closed(&self) -> bool {
        self.inner.borrow().state == State::Closed
    }

    fn set_state(&self, state: State) {
        let mut inner = self.inner.borrow_mut();
        if inner.state != State::Closed {
            inner.state = state;
        }
    }

    /// Answers every pending request with `upstream failure` and forgets queued output.
    fn fail_all(&self) {
        let drained: Vec<Pending> = {
            let mut inner = self.inner.borrow_mut();
            inner.out.clear();
            inner.first_queued = None;
            let timed_out = inner.timed_out;
            inner.written = 0;
            inner.timed_out = 0;
            inner.waived = 0;
            inner.in_flight = 0;
            inner.backed_up = false;
            inner.estimate = initial_estimate(&self.settings);
            inner.depth = Depth::default();
            let mut drained: Vec<Pending> = inner
                .pending
                .drain(..)
                .enumerate()
                .filter(|(i, p)| *i >= timed_out || p.waived)
                .map(|(_, p)| p)
                .collect();
            drained.extend(inner.room.take_all().into_iter().map(Pending::waiting));
            inner.compact_log();
            drained
        };
        if !drained.is_empty() {
            self.note_failure();
        }
        let now = Instant::now();
        for p in drained {
            if let Some(target) = p.target {
                self.stats.rq_error.inc();
                self.record(target.cmd, false, p.sent, now);
                target.deliver(UPSTREAM_FAILURE);
            }
        }
        // Lets the timeout task of a closed connection see that nothing is pending and stop.
        self.timer_ready.notify();
    }

    /// Answers every queued request (none is written: the connection is still connecting)
    /// with `reply`, the host's own `-LOADING …` line ([`wait_loaded`]).
    fn answer_queued(&self, reply: &[u8]) {
        let drained: Vec<Pending> = {
            let mut inner = self.inner.borrow_mut();
            if inner.written > 0 {
                return;
            }
            inner.out.clear();
            inner.first_queued = None;
            let mut drained: Vec<Pending> = inner.pending.drain(..).collect();
            drained.extend(inner.room.take_all().into_iter().map(Pending::waiting));
            inner.compact_log();
            drained
        };
        let now = Instant::now();
        for p in drained {
            if let Some(target) = p.target {
                self.stats.rq_loading.inc();
                self.stats.rq_error.inc();
                self.record(target.cmd, false, None, now);
                target.deliver(reply);
            }
        }
        self.close_if_retired();
    }

    /// Records an upstream request's time (host `rq_time` in µs, cluster `upstream_rq_time` in
    /// ms) and its command outcome (with `enable_command_stats`).
    #[inline]
    fn record(&self, cmd: u16, success: bool, sent: Option<Instant>, now: Instant) {
        if let Some(s) = sent {
            self.stats
                .rq_time
                .record(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.stats.upstream.record(cmd, success, sent, now);
    }

    /// Records the time of a request answered by a redirect (counted by its final reply).
    #[inline]
    fn record_time(&self, sent: Option<Instant>, now: Instant) {
        if let Some(s) = sent {
            let d = now.saturating_duration_since(s);
            self.stats.rq_time.record(d.as_micros() as u64);
            self.stats.upstream.record_time(d);
        }
    }

    /// Matches one reply to the oldest pending request. `false` if nothing was pending (a
    /// desynchronised connection, which the caller closes).
    fn on_reply(&self, reply: &[u8]) -> bool {
        self.streak.success();
        let (p, request) = {
            let mut inner = self.inner.borrow_mut();
            // A reply before any written request is a desynchronised connection.
            if inner.written == 0 {
                return false;
            }
            let Some(p) = inner.pending.pop_front() else {
                return false;
            };
            inner.written -= 1;
            let waiting = inner.backed_up || !inner.room.is_empty() || !inner.out.is_empty();
            let written = inner.written;
            inner.depth.on_reply(written, waiting, clock::now);
            inner.in_flight = inner.in_flight.saturating_sub(p.charge);
            inner.estimate = next_estimate(
                inner.estimate,
                reply.len(),
                self.settings.max_reply_bytes_in_flight,
            );
            if (inner.backed_up || !inner.room.is_empty()) && self.has_room(&inner) {
                inner.backed_up = false;
                self.write_ready.notify();
            }
            if inner.timed_out > 0 {
                inner.timed_out -= 1;
                if !p.waived {
                    inner.compact_log();
                    return true;
                }
                inner.waived -= 1;
            }
            // Only a redirect needs the request again: copy it out before the log moves on.
            let request = match (&self.redirect, &p.target) {
                (Some(_), Some(t)) if is_redirect(reply, t.script) => {
                    let end = inner
                        .pending
                        .front()
                        .map_or(inner.log_base + inner.log.len() as u64, |n| n.log_at);
                    let from = (p.log_at - inner.log_base) as usize;
                    let to = (end - inner.log_base) as usize;
                    inner.log.get(from..to).map(<[u8]>::to_vec)
                }
                _ => None,
            };
            inner.compact_log();
            (p, request)
        };
        let Some(target) = p.target else {
            return true;
        };
        let now = clock::now();
        match (request, self.redirect.as_ref().and_then(Weak::upgrade)) {
            (Some(request), Some(handler)) => {
                self.record_time(p.sent, now);
                handler.redirect(self.addr, reply, request, target, p.retry)
            }
            (Some(_), None) if reply.starts_with(b"-MOVED ") || reply.starts_with(b"-ASK ") => {
                // The pool was replaced by a reload while this request was out: a raw redirect
                // would send a cluster-aware client around the proxy; a retryable error does not.
                self.stats.rq_error.inc();
                self.record(target.cmd, false, p.sent, now);
                target.deliver(POOL_REPLACED);
            }
            _ => {
                let error = reply.first() == Some(&b'-');
                if error {
                    self.stats.rq_error.inc();
                }
                self.record(target.cmd, !error, p.sent, now);
                target.deliver(reply);
            }
        }
        self.close_if_retired();
        true
    }

    /// Closes the current TCP connection because the host sent nothing for op_timeout while a
    /// request waited: the reader wakes with end of stream, and the supervisor fails every
    /// pending request (written or queued) and reconnects with backoff. New requests fail fast
    /// from now on instead of queueing behind the dead connection.
    ///
    /// Once per TCP connection: the requests expiring after the first on the same connection
    /// are failed by the supervisor with the rest.
    fn close_hung(&self) {
        let generation = self.generation.get();
        if self.hung_generation.replace(generation) == generation {
            return;
        }
        log_limited!(WARN, "upstream sent nothing for op_timeout; closing the connection";
            cluster = %self.host.cluster(), upstream = %self.addr);
        self.set_state(State::Backoff);
        if let Some(stream) = self.stream.borrow().as_ref() {
            net::shutdown(stream);
        }
    }

    /// True when one more request may be written: nothing is in flight (a single request
    /// always goes, however large its reply may be), or it fits both the depth and, by its
    /// estimate, the window.
    #[inline]
    fn has_room(&self, inner: &Inner) -> bool {
        inner.in_flight == 0
            || (inner.written < inner.depth.limit
                && inner.in_flight.saturating_add(inner.estimate)
                    <= self.settings.max_reply_bytes_in_flight)
    }

    /// Tells the cluster's topology that this host failed (Redis Cluster pools only).
    fn note_failure(&self) {
        if let Some(handler) = self.redirect.as_ref().and_then(Weak::upgrade) {
            handler.note_failure();
        }
    }
}

/// The estimate a new TCP connection starts with: a sixteenth of the window, so that before
/// any reply has told their size, at most 16 requests are out (what a host might buffer for
/// them is unknown); the estimate then falls to the real reply size within a few round trips.
fn initial_estimate(s: &PoolSettings) -> usize {
    (s.max_reply_bytes_in_flight / 16).max(1)
}

/// A decaying maximum of reply sizes (bytes): a large reply raises the estimate at once, each
/// smaller one lowers it by 1/64, so a run of large values is never hidden by the small replies
/// between them, and the window opens again within a few hundred small replies. It never goes
/// below 1/1024 of the window: however small the replies so far, at most 1024 requests are out
/// on one connection; how many of those a burst may send at once is the [`Depth`]'s to say.
#[inline]
fn next_estimate(estimate: usize, len: usize, window: usize) -> usize {
    len.max(estimate - (estimate >> 6)).max(window >> 10)
}

/// Requests a connection lets out at once before its traffic has shown it needs more.
pub const INITIAL_DEPTH: usize = 64;

/// The most requests a connection ever has out: the estimate's floor allows no more.
pub const MAX_DEPTH: usize = 1024;

/// How many requests a connection may have written and not answered.
///
/// The reply estimate learned from small replies says nothing of the next request's: after a
/// run of one small request at a time (the estimate at its floor), a client pipelining `GET` of a
/// 1 MiB value would make the host buffer 1 024 MiB for a 64 MiB window before the first reply
/// told its size (the attack benchmark saw 1.4 GiB in Redis). So the count is bounded too, the
/// way TCP bounds a congestion window it has not validated (slow start, RFC 5681; a window not
/// used is not kept, RFC 7661): `limit` starts at [`INITIAL_DEPTH`], grows by one per reply while
/// requests wait on it (doubling per round trip), and at the first moment the connection drains
/// after each [`DEPTH_PERIOD`] it halves, but not below twice the most it had out in that period,
/// nor below [`INITIAL_DEPTH`] (never above [`MAX_DEPTH`]). A busy pipeline keeps its depth
/// however often it drains; a connection that carried one request at a time for half a second
/// lets 64 requests for values nothing announced reach the host at once.
#[derive(Debug, Clone, Copy)]
struct Depth {
    /// Requests that may be out at once.
    limit: usize,
    /// The most requests out in the current period.
    peak: usize,
    /// When the current period began.
    since: Instant,
}

/// The period over which a connection's use of its depth is judged ([`Depth`]).
const DEPTH_PERIOD: Duration = Duration::from_millis(100);

impl Default for Depth {
    fn default() -> Self {
        Depth {
            limit: INITIAL_DEPTH,
            peak: 0,
            since: Instant::now(),
        }
    }
}

impl Depth {
    /// After a write: `written` requests are out.
    #[inline]
    fn on_write(&mut self, written: usize) {
        self.peak = self.peak.max(written);
    }

    /// After a reply: `written` requests are still out; `waiting` when requests wait to be
    /// written; `now` is read only when the connection drained.
    #[inline]
    fn on_reply(&mut self, written: usize, waiting: bool, now: impl FnOnce() -> Instant) {
        if written == 0 {
            let now = now();
            if now.saturating_duration_since(self.since) >= DEPTH_PERIOD {
                self.limit = (self.limit / 2)
                    .max(self.peak.saturating_mul(2))
                    .clamp(INITIAL_DEPTH, MAX_DEPTH);
                self.peak = 0;
                self.since = now;
            }
        } else if waiting && written + 1 >= self.limit {
            self.limit = (self.limit + 1).min(MAX_DEPTH);
        }
    }
}

/// True for the replies a Redis Cluster node gives instead of an answer: `MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN` (Redis Cluster spec, "Redirection and resharding"), and the
/// transient states that refuse a command without running it: `LOADING` (the node loads its
/// dataset), `BUSY` (a script or function runs past `busy-reply-threshold`), `MASTERDOWN` (a
/// replica lost its primary with `replica-serve-stale-data no`). `-BUSY` is not one for a
/// script (`script`): a script can raise any error itself, and one that ran must not run twice;
/// `-BUSYKEY`/`-BUSYGROUP` never are (the space after `BUSY` tells them apart).
///
/// Cost: one byte compare for a reply that is not an error.
fn is_redirect(reply: &[u8], script: bool) -> bool {
    reply.first() == Some(&b'-')
        && ([
            &b"-MOVED "[..],
            b"-ASK ",
            b"-TRYAGAIN",
            b"-CLUSTERDOWN",
            b"-LOADING",
            b"-MASTERDOWN",
        ]
        .iter()
        .any(|p| reply.starts_with(p))
            || (!script && reply.starts_with(b"-BUSY ")))
}

/// Connects, authenticates, runs the connection until it fails, then backs off and retries, until
/// the connection is shut down.
///
/// Backoff: exponential from 50 ms to 5 s with full jitter, per connection, so the connections of
/// every worker to a host that restarts come back spread out rather than in one burst. It starts
/// over only once a connection has proved itself (a reply read, or up for the backoff cap): a
/// host that accepts and then hangs or closes at once keeps backing off. On top of that every
/// attempt takes a token from the host's process-wide connection rate limit
/// (`connection_rate_limit_per_sec`); while waiting for it the connection counts as in backoff
/// (requests fail fast with `no upstream host`).
async fn supervise<H: HostState>(conn: Rc<Conn<H>>) {
    let mut backoff = Backoff::reconnect();
    loop {
        if conn.is_closed() {
            conn.fail_all();
            return;
        }
        let wait = conn.host.connects().reserve();
        if !wait.is_zero() {
            conn.stats.cx_connect_rate_limited.inc();
            conn.set_state(State::Backoff);
            conn.fail_all();
            debug!(cluster = %conn.host.cluster(), upstream = %conn.addr, ?wait, "upstream connect rate limited");
            let _ = net::timeout(wait, conn.wake_supervisor.notified()).await;
            if conn.is_closed() {
                continue;
            }
        }
        conn.set_state(State::Connecting);
        match connect(&conn).await {
            Ok(stream) => {
                conn.stats.cx_total.inc();
                conn.stats.cx_active.inc();
                conn.stats.host_cx_total.inc();
                conn.stats.host_cx_active.inc();
                let (up_since, reads_before) = (Instant::now(), conn.reads.get());
                let generation = conn.generation.get() + 1;
                conn.generation.set(generation);
                conn.set_state(State::Ready);
                let stream = Rc::new(stream);
                *conn.stream.borrow_mut() = Some(stream.clone());
                net::spawn(write_loop(conn.clone(), stream.clone(), generation));
                conn.write_ready.notify();
                read_loop(&conn, &stream).await;
                // A close with a request waiting is a failure; an idle one is not (Redis's
                // `timeout` closes idle clients, and the host answered everything it was asked).
                let waiting = conn.inner.borrow().awaiting();
                if waiting && !conn.is_closed() && !conn.retiring.get() {
                    conn.streak.failure(&*conn.host);
                }
                // Stop the writer of this generation before failing its requests.
                conn.generation.set(generation + 1);
                conn.write_ready.notify();
                net::shutdown(&stream);
                conn.stream.borrow_mut().take();
                conn.stats.cx_active.dec();
                conn.stats.host_cx_active.dec();
                if conn.reads.get() != reads_before || up_since.elapsed() >= BACKOFF_CAP {
                    backoff.reset();
                }
                debug!(cluster = %conn.host.cluster(), upstream = %conn.addr, "upstream connection closed");
                // Closed with nobody waiting, after a while up (Redis's `timeout` closing an idle
                // client): reconnect at once, requests queueing meanwhile, rather than failing
                // them fast through a backoff. A host that accepts and closes at once is not
                // idle: it lived less than IDLE_CLOSE_LIFE and backs off as before.
                if !waiting
                    && up_since.elapsed() >= IDLE_CLOSE_LIFE
                    && !conn.is_closed()
                    && !conn.retiring.get()
                {
                    conn.fail_all();
                    conn.set_state(State::Connecting);
                    backoff.reset();
                    continue;
                }
            }
            // Shut down (a reload removed the host) while connecting: nothing failed.
            Err(_) if conn.is_closed() => {}
            Err(e) => {
                conn.stats.cx_connect_fail.inc();
                conn.stats.host_cx_connect_fail.inc();
                if let Some(tls) = &conn.settings.tls {
                    tls.note_refusal(conn.addr, &e);
                }
                conn.note_failure();
                conn.streak.failure(&*conn.host);
                // The first failure of a run is worth an operator's eye (a refused handshake, a
                // bad socket option); the retries after it are not.
                // The other workers' connections to the host fail alike: one line per window.
                if backoff.attempt == 0 {
                    log_limited!(WARN, "upstream connect failed; retrying with backoff";
                        cluster = %conn.host.cluster(), upstream = %conn.addr, error = %e);
                } else {
                    debug!(cluster = %conn.host.cluster(), upstream = %conn.addr, error = %e, "upstream connect failed");
                }
            }
        }
        conn.set_state(State::Backoff);
        conn.fail_all();
        if conn.retiring.get() {
            conn.shutdown();
        }
        if conn.is_closed() {
            return;
        }
        let delay = backoff.next();
        let _ = net::timeout(delay, conn.wake_supervisor.notified()).await;
    }
}

/// A connection closed with no request waiting after at least this long up was closed for
/// being idle: it reconnects without backoff.
const IDLE_CLOSE_LIFE: Duration = Duration::from_millis(500);

/// Opens the TCP connection and runs the handshake, in this order: `HELLO 3 [AUTH user pass]`
/// for RESP3 connections or `AUTH [user] pass` for RESP2 ones when credentials are configured,
/// then `READONLY` for Redis Cluster replicas. Any error reply fails the connection. Then
/// waits while the host loads its dataset ([`wait_loaded`]).
async fn connect<H: HostState>(conn: &Conn<H>) -> std::io::Result<Stream> {
    let stream = open(
        conn.addr,
        &conn.settings,
        conn.readonly,
        conn.host.cluster(),
        conn.settings.connect_timeout,
        Some(&conn.stats.resp3_hello_failure),
    )
    .await?;
    wait_loaded(conn, &stream).await?;
    Ok(stream)
}

/// `PING`, encoded.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
/// The error prefix of a host loading its dataset (Redis `shared.loadingerr`).
const LOADING: &[u8] = b"-LOADING";
/// How often a connection to a loading host asks again whether it is done.
const LOADING_POLL: Duration = Duration::from_millis(100);

/// Holds a new connection back while its host loads its dataset (after a restart, a replica's
/// full sync): Redis answers nearly every command `-LOADING …` until it is done, `PING`
/// included, so the connection sends `PING` every [`LOADING_POLL`] until the reply is anything
/// else. Meanwhile it stays connecting: requests queue (at most `max_pending_requests`) and go
/// out once the host serves, so clients wait instead of seeing `-LOADING`. Loading can take
/// minutes, so the wait is bounded: once the host has been loading for `op_timeout`, every
/// request queued is answered with the host's own `-LOADING …` line, and so is every request
/// queued after that, at the next poll (within 100 ms), until the loading ends.
///
/// Errors: a write or read error, or a `PING` unanswered for `connect_timeout` (the connection
/// is dropped and reconnects with backoff), or the connection shut down meanwhile.
async fn wait_loaded<H: HostState>(conn: &Conn<H>, stream: &Stream) -> std::io::Result<()> {
    let mut since: Option<Instant> = None;
    loop {
        let BufResult(res, _) = net::write_all(stream, PING.to_vec()).await;
        res?;
        let reply = net::timeout(conn.settings.connect_timeout, read_replies(stream, 1))
            .await
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "PING timeout"))??
            .pop()
            .unwrap_or_default();
        if !reply.starts_with(LOADING) {
            if since.is_some() {
                log_limited!(INFO, "upstream finished loading its dataset; sending the queued requests";
                    cluster = %conn.host.cluster(), upstream = %conn.addr);
            }
            return Ok(());
        }
        let began = *since.get_or_insert_with(|| {
            conn.stats.cx_loading.inc();
            log_limited!(WARN, "upstream is loading its dataset; requests wait for it up to op_timeout";
                cluster = %conn.host.cluster(), upstream = %conn.addr);
            Instant::now()
        });
        if began.elapsed() >= conn.settings.op_timeout {
            conn.answer_queued(&reply);
        }
        let _ = net::timeout(LOADING_POLL, conn.wake_supervisor.notified()).await;
        if conn.is_closed() {
            return Err(std::io::Error::other(
                "connection shut down while the host loads",
            ));
        }
    }
}

/// [`connect`] for any connection to `addr` of cluster `cluster` (named in the log line of a
/// refused handshake): the shared ones and the leased ones. The TCP connect is bounded by
/// `connect_timeout`, the handshake's replies by `handshake`. A RESP3 connection whose
/// `HELLO 3` fails once connected (an error reply, a reply that is not a RESP3 map with
/// `proto` 3, a write or read error, a timeout) counts in `hello_failure`
/// (`cluster.<c>.redis_cluster.upstream_resp3_hello_failure`, Envoy's name).
pub(super) async fn open(
    addr: SocketAddr,
    s: &PoolSettings,
    readonly: bool,
    cluster: &str,
    handshake: std::time::Duration,
    hello_failure: Option<&Counter>,
) -> std::io::Result<Stream> {
    let stream = match &s.tls {
        Some(tls) => {
            tls.connect(addr, s.connect_timeout, Some(&s.tcp_keepalive))
                .await?
        }
        None => {
            Stream::plain(net::connect_keepalive(addr, s.connect_timeout, &s.tcp_keepalive).await?)
        }
    };
    // RESP3 connections authenticate inside HELLO; RESP2 ones with AUTH; then SELECT db.
    let mut req = Vec::new();
    let mut replies = super::encode_handshake(&mut req, s.auth_for(addr), s.resp3, s.db);
    if readonly {
        encode::command(&mut req, [&b"READONLY"[..]].into_iter());
        replies += 1;
    }
    if replies == 0 {
        return Ok(stream);
    }
    let hello3_failed = || {
        if s.resp3
            && let Some(c) = hello_failure
        {
            c.inc();
        }
    };
    let BufResult(res, _) = net::write_all(&stream, req).await;
    res.inspect_err(|_| hello3_failed())?;
    let all = net::timeout(handshake, read_replies(&stream, replies))
        .await
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timeout"))
        .and_then(|r| r)
        .inspect_err(|_| hello3_failed())?;
    let hello_ok = !s.resp3 || all.first().is_some_and(|r| hello3_accepted(r));
    if !hello_ok {
        hello3_failed();
    }
    if let Some(reply) = all.iter().find(|r| r.first() == Some(&b'-')) {
        let text = String::from_utf8_lossy(reply).trim_end().to_string();
        log_limited!(WARN, "upstream handshake failed";
            cluster = %cluster, upstream = %addr, reply = %text);
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            text,
        ));
    }
    if !hello_ok {
        log_limited!(WARN, "upstream answered HELLO 3 without RESP3 proto 3";
            cluster = %cluster, upstream = %addr);
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "HELLO 3 was not answered with a RESP3 map with proto 3",
        ));
    }
    Ok(stream)
}

/// Whether `reply` (one whole reply) is a successful `HELLO 3` answer: a RESP3 map (`%`) with
/// the pair `proto` → `:3`, as Redis's `helloCommand` writes it (bulk-string keys).
fn hello3_accepted(reply: &[u8]) -> bool {
    const PROTO3: &[u8] = b"\r\n$5\r\nproto\r\n:3\r\n";
    reply.first() == Some(&b'%') && reply.windows(PROTO3.len()).any(|w| w == PROTO3)
}

/// Reads exactly `n` replies from a connection that is not pipelining (a handshake, a health
/// check): the raw bytes of each.
///
/// Errors: end of stream before `n` replies, a read error, or a malformed reply.
pub(super) async fn read_replies(stream: &Stream, n: usize) -> std::io::Result<Vec<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut start = 0;
    let mut out = Vec::with_capacity(n);
    let mut scanner = ReplyScanner::default();
    loop {
        while out.len() < n {
            let rest = buf.get(start..).unwrap_or_default();
            let Some(len) = scanner
                .scan(rest)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.0))?
            else {
                break;
            };
            out.push(rest.get(..len).unwrap_or_default().to_vec());
            start += len;
        }
        if out.len() == n {
            return Ok(out);
        }
        buf.reserve(512);
        let BufResult(res, b) = net::read_append(stream, buf).await;
        buf = b;
        if res? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// Readies a read buffer whose first `start` bytes were consumed for the next read: drops
/// them (a fully consumed buffer grown past [`KEEP_CAPACITY`] by a huge reply is given back)
/// and makes room for at least 4 KiB more.
pub(super) fn make_room(buf: &mut Vec<u8>, start: &mut usize) {
    if *start == buf.len() {
        if buf.capacity() > KEEP_CAPACITY {
            *buf = Vec::with_capacity(16 * 1024);
        }
        buf.clear();
    } else if *start > 0 {
        buf.drain(..*start);
    }
    *start = 0;
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(buf.capacity().max(16 * 1024));
    }
}

/// Reads replies and hands each to its pending request, until the connection fails.
async fn read_loop<H: HostState>(conn: &Conn<H>, stream: &Stream) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0usize;
    let mut scanner = ReplyScanner::default();
    loop {
        if start == buf.len()
            && buf.capacity() > IDLE_KEEP
            && net::timeout(IDLE_SHRINK_AFTER, net::readable_or_closed(stream))
                .await
                .is_none()
        {
            let grown = std::mem::replace(&mut buf, Vec::with_capacity(16 * 1024));
            start = 0;
            // The allocator keeps what it is given back until asked (or the thread allocates
            // again, which an idle worker does not): worth a collection for a large buffer.
            if grown.capacity() >= 1024 * 1024 {
                drop(grown);
                net::release_free_memory();
            }
        }
        make_room(&mut buf, &mut start);
        let BufResult(res, b) = net::read_append(stream, buf).await;
        buf = b;
        match res {
            Ok(0) => return,
            Ok(_) => conn.reads.set(conn.reads.get() + 1),
            Err(e) => {
                debug!(cluster = %conn.host.cluster(), upstream = %conn.addr, error = %e, "upstream read failed");
                return;
            }
        }
        let _request_path = RequestPath::enter();
        // One clock read per read batch: the end of every upstream request answered in it, and
        // of every client request it completes.
        let _clock = BatchClock::enter(Instant::now());
        loop {
            let rest = buf.get(start..).unwrap_or_default();
            match scanner.scan(rest) {
                Ok(Some(len)) => {
                    if !conn.on_reply(rest.get(..len).unwrap_or_default()) {
                        log_limited!(WARN, "reply with no pending request; closing";
                            cluster = %conn.host.cluster(), upstream = %conn.addr);
                        return;
                    }
                    start += len;
                }
                Ok(None) => break,
                Err(e) => {
                    log_limited!(WARN, "upstream protocol error; closing";
                        cluster = %conn.host.cluster(), upstream = %conn.addr, error = %e);
                    return;
                }
            }
        }
        if conn.is_closed() {
            return;
        }
    }
}

/// Writes queued requests: everything queued goes out in one write per flush.
async fn write_loop<H: HostState>(conn: Rc<Conn<H>>, stream: Rc<Stream>, generation: u64) {
    let mut spare: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        if conn.generation.get() != generation {
            return;
        }
        let (has_output, first_queued) = {
            let inner = conn.inner.borrow();
            if inner.state == State::Closed {
                drop(inner);
                net::shutdown(&stream);
                return;
            }
            (
                !inner.out.is_empty() || !inner.room.is_empty(),
                inner.first_queued,
            )
        };
        if !has_output {
            conn.write_ready.notified().await;
            continue;
        }
        let s = &conn.settings;
        if s.max_buffer_size_before_flush > 0 {
            let queued = conn.inner.borrow().out.len();
            // Nothing queued but the room's: the window decides, not the batching.
            if queued > 0 && queued < s.max_buffer_size_before_flush {
                let deadline = first_queued.unwrap_or_else(Instant::now) + s.buffer_flush_timeout;
                if Instant::now() < deadline {
                    // Woken early by a send that filled the buffer, or flush at the deadline.
                    let _ = net::timeout(
                        deadline.saturating_duration_since(Instant::now()),
                        conn.write_ready.notified(),
                    )
                    .await;
                    continue;
                }
            }
        }
        let (full, empty, cancelled) = {
            let mut inner = conn.inner.borrow_mut();
            let mut cancelled = Vec::new();
            conn.admit(&mut inner, &mut cancelled);
            let full = !conn.has_room(&inner);
            inner.backed_up |= full;
            (full, inner.out.is_empty(), cancelled)
        };
        conn.cancel(cancelled);
        if empty && !full {
            // Everything admitted was cancelled.
            continue;
        }
        if full {
            // The host holds as many reply bytes for us as we allow: the rest waits here
            // (bounded by max_pending_requests) until replies are read.
            conn.stats.flow_control_backed_up.inc();
            conn.write_ready.notified().await;
            continue;
        }
        let buf = {
            let mut inner = conn.inner.borrow_mut();
            // One clock read per write batch: deadlines and upstream request times run from it.
            let now = Instant::now();
            let deadline = now + s.op_timeout;
            let reads = conn.reads.get();
            let window = s.max_reply_bytes_in_flight;
            let Inner {
                pending,
                written,
                in_flight,
                estimate,
                depth,
                ..
            } = &mut *inner;
            let (mut count, mut bytes) = (0, 0);
            for p in pending.iter_mut().skip(*written) {
                if *in_flight > 0
                    && (*written + count >= depth.limit
                        || in_flight.saturating_add(*estimate) > window)
                {
                    break;
                }
                p.charge = *estimate;
                *in_flight += *estimate;
                bytes += p.len;
                count += 1;
                // A redirected request keeps the deadline of its first write: op_timeout bounds
                // the whole request, hops included.
                let started = *p.retry.started.get_or_insert(now);
                p.deadline = Some(deadline.min(started + s.op_timeout));
                p.reads_at_write = reads;
                p.sent = Some(now);
            }
            *written += count;
            depth.on_write(*written);
            if bytes < inner.out.len() {
                // Held back by the window: the rest is written as replies make room.
                let rest = inner.out.split_off(bytes);
                inner.first_queued = Some(now);
                inner.backed_up = true;
                conn.stats.flow_control_backed_up.inc();
                std::mem::replace(&mut inner.out, rest)
            } else {
                inner.first_queued = None;
                std::mem::replace(&mut inner.out, std::mem::take(&mut spare))
            }
        };
        conn.timer_ready.notify();
        conn.stats.flush_total.inc();
        let BufResult(res, mut buf) = net::write_all(&stream, buf).await;
        if let Err(e) = res {
            debug!(cluster = %conn.host.cluster(), upstream = %conn.addr, error = %e, "upstream write failed");
            // Wakes the reader with end of stream; the supervisor fails what is pending.
            net::shutdown(&stream);
            return;
        }
        buf.clear();
        if buf.capacity() > KEEP_CAPACITY {
            buf = Vec::new();
        }
        spare = buf;
    }
}

/// Answers requests whose op_timeout expired with `upstream failure`. A connection that still
/// answers keeps going: late replies are discarded when they arrive (FIFO matching stays
/// aligned). A connection on which nothing at all was read since the expired request was written
/// is hung (a stopped host, or one that stopped reading, behind which queued requests would wait
/// forever): it is closed, so every request on it, written or queued, fails at once, and it
/// reconnects with backoff. So no request waits more than about 2 × op_timeout: up to one
/// op_timeout queued behind a stuck write, then one for that write to expire. Envoy closes an
/// upstream connection on any op timeout; this keeps a slow but live one.
///
/// Scripts (EVAL, FCALL, …) are the exception: Redis runs one until it returns or is killed,
/// however long, so the script's own request is never answered `upstream failure` while it
/// may still run and write; it keeps its place until its reply (or the connection's loss), and
/// a host silent behind it is busy rather than hung.
async fn expire_timeouts<H: HostState>(conn: Rc<Conn<H>>) {
    loop {
        if conn.is_closed() && conn.inner.borrow().pending.is_empty() {
            return;
        }
        let next = {
            let inner = conn.inner.borrow();
            let idx = inner.timed_out;
            if idx < inner.written {
                inner.pending.get(idx).and_then(|p| p.deadline)
            } else {
                None
            }
        };
        let Some(deadline) = next else {
            conn.timer_ready.notified().await;
            continue;
        };
        if Instant::now() < deadline {
            net::sleep_until(deadline).await;
            continue;
        }
        let expired = {
            let mut inner = conn.inner.borrow_mut();
            let idx = inner.timed_out;
            let now = Instant::now();
            let due = idx < inner.written;
            let expired = match inner.pending.get_mut(idx) {
                Some(p) if !due || p.deadline.is_none_or(|d| d > now) => None,
                Some(p) if p.target.as_ref().is_some_and(|t| t.script) => {
                    // A script runs as long as it runs, as at Redis (which only starts
                    // answering others `-BUSY`): its client waits for its reply, so it never
                    // hears `upstream failure` about a script that went on to run.
                    p.waived = true;
                    inner.waived += 1;
                    inner.timed_out += 1;
                    continue;
                }
                Some(p) => {
                    let (target, reads_at_write, sent) =
                        (p.target.clone(), p.reads_at_write, p.sent);
                    // A script still running ahead (EVAL, FCALL) keeps the host silent until it
                    // ends or passes `busy-reply-threshold`: busy, not hung.
                    let busy = inner
                        .pending
                        .iter()
                        .take(idx)
                        .any(|q| q.target.as_ref().is_some_and(|t| t.script));
                    Some((
                        target,
                        !busy && reads_at_write == conn.reads.get(),
                        busy,
                        sent,
                        now,
                    ))
                }
                _ => None,
            };
            if expired.is_some() {
                inner.timed_out += 1;
            }
            expired
        };
        if let Some((target, hung, busy, sent, now)) = expired {
            conn.stats.rq_timeout.inc();
            conn.stats.host_rq_timeout.inc();
            if !busy {
                conn.note_failure();
                conn.streak.failure(&*conn.host);
            }
            if let Some(target) = target {
                conn.stats.rq_error.inc();
                conn.record(target.cmd, false, sent, now);
                target.deliver(UPSTREAM_FAILURE);
            }
            if hung {
                conn.close_hung();
            }
            conn.close_if_retired();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_estimate_jumps_to_a_large_reply_and_decays_to_its_floor() {
        let window = 64 << 20;
        assert_eq!(next_estimate(100, 1 << 20, window), 1 << 20, "at once");
        let mut e = 1 << 20;
        for _ in 0..64 {
            e = next_estimate(e, 10, window);
        }
        assert!(e < 400 << 10 && e > 350 << 10, "about 1/e after 64: {e}");
        for _ in 0..2000 {
            e = next_estimate(e, 10, window);
        }
        assert_eq!(e, window >> 10, "never below 1/1024 of the window");
        // From a new connection's estimate, small replies open the window in a few round
        // trips of the whole window: count them.
        let (mut e, mut trips) = (window / 16, 0);
        while window / e < 1024 {
            for _ in 0..window / e {
                e = next_estimate(e, 10, window);
            }
            trips += 1;
        }
        assert!(trips <= 6, "{trips} round trips to open the window");
    }

    /// Replays a closed-loop pipeline of `n` requests through a [`Depth`], one period after
    /// the last: writes what the limit lets out, answers one, repeats until all are answered.
    /// Returns the most out at once.
    fn pipeline(d: &mut Depth, n: usize) -> usize {
        let at = d.since + DEPTH_PERIOD;
        let (mut queued, mut out, mut most) = (n, 0usize, 0);
        while queued + out > 0 {
            let go = queued.min(d.limit.saturating_sub(out).max(usize::from(out == 0)));
            queued -= go;
            out += go;
            d.on_write(out);
            most = most.max(out);
            out -= 1;
            d.on_reply(out, queued > 0, || at);
        }
        most
    }

    #[test]
    fn depth_grows_only_while_used_and_falls_back_when_not() {
        let mut d = Depth::default();
        // One request at a time, as a probe sends: the depth stays at its start.
        for _ in 0..1000 {
            assert_eq!(pipeline(&mut d, 1), 1);
        }
        assert_eq!(
            d.limit, INITIAL_DEPTH,
            "a burst after that lets 64 out at once"
        );
        assert_eq!(
            pipeline(&mut d, 5000),
            MAX_DEPTH,
            "slow start reaches the cap"
        );
        assert_eq!(d.limit, MAX_DEPTH, "a busy pipeline keeps its depth");
        assert_eq!(pipeline(&mut d, 5000), MAX_DEPTH);
        // Deep pipelines of 300 keep what they use, twice over.
        pipeline(&mut d, 300);
        assert_eq!(d.limit, 600);
        // Back to one at a time: the depth halves at each drain, down to its start.
        pipeline(&mut d, 1);
        assert_eq!(d.limit, 300);
        for _ in 0..3 {
            pipeline(&mut d, 1);
        }
        assert_eq!(d.limit, INITIAL_DEPTH);
        // Drains within one period leave the depth alone.
        pipeline(&mut d, 5000);
        assert_eq!(d.limit, MAX_DEPTH);
        let within = d.since + DEPTH_PERIOD / 2;
        for _ in 0..10 {
            d.on_write(1);
            d.on_reply(0, false, || within);
        }
        assert_eq!(d.limit, MAX_DEPTH);
    }

    #[test]
    fn transient_states_are_retried_but_not_busy_for_scripts() {
        for r in [
            &b"-MOVED 1 127.0.0.1:7000\r\n"[..],
            b"-ASK 1 127.0.0.1:7000\r\n",
            b"-TRYAGAIN x\r\n",
            b"-CLUSTERDOWN x\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
        ] {
            assert!(is_redirect(r, false), "{r:?}");
            assert!(is_redirect(r, true), "{r:?}");
        }
        let busy = b"-BUSY Redis is busy running a script.\r\n";
        assert!(is_redirect(busy, false));
        assert!(!is_redirect(busy, true));
        for r in [
            &b"-BUSYKEY Target key name already exists.\r\n"[..],
            b"-BUSYGROUP Consumer Group name already exists\r\n",
            b"-ERR x\r\n",
            b"+LOADING\r\n",
            b"$8\r\n-LOADING\r\n",
        ] {
            assert!(!is_redirect(r, false), "{r:?}");
        }
    }
}

#[cfg(test)]
mod hello3_tests {
    use super::hello3_accepted;

    #[test]
    fn hello3_reply_shapes() {
        // Redis 7.0.15's answer to `HELLO 3`, byte for byte.
        let redis = b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n\
$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
        assert!(hello3_accepted(redis));
        // The same pairs as a RESP2 array, and a map that says proto 2: not RESP3.
        assert!(!hello3_accepted(
            b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n"
        ));
        assert!(!hello3_accepted(b"%1\r\n$5\r\nproto\r\n:2\r\n"));
        assert!(!hello3_accepted(b"-ERR unknown command 'HELLO'\r\n"));
        assert!(!hello3_accepted(b"+OK\r\n"));
        assert!(!hello3_accepted(b""));
    }
}

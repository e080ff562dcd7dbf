//! Leased upstream connections: held by one client session at a time, for what cannot share a
//! pipelined connection with other clients: a transaction's `WATCH … MULTI … EXEC` (the
//! watched keys and the open `MULTI` are state of the Redis connection), a blocking command
//! (it holds the connection until served), `SCRIPT KILL` and `CLIENT UNBLOCK` (they must not
//! wait behind what they stop).
//!
//! Each worker keeps, per cluster pool, idle leased connections per (host, protocol), up to
//! `max_leased_connections` per host counting those in use, and one idle connection ready once a
//! host has been leased ([`MIN_IDLE`]); idle ones past that close after [`IDLE_TIMEOUT`]. A lease is returned only clean (its
//! holder ended every `MULTI` and `WATCH` it opened, and read every reply), else it is closed:
//! a connection is never handed to the next client with state of the last one.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use super::PoolSettings;
use super::backoff::Backoff;
use super::conn::{open, read_replies};
use crate::net::{self, BufResult, Notify, Stream};
use crate::stats::{Counter, Gauge, Histogram};
use std::sync::Arc;

/// Why no lease was given.
#[derive(Debug)]
pub enum LeaseError {
    /// Every one of the host's `max_leased_connections` stayed in use for `op_timeout`.
    Exhausted,
    /// Connecting or the handshake (AUTH, HELLO) failed.
    Connect(std::io::Error),
}

impl LeaseError {
    /// The reply the client gets.
    pub fn reply(&self) -> &'static [u8] {
        match self {
            LeaseError::Exhausted => LEASE_EXHAUSTED,
            LeaseError::Connect(_) => super::NO_UPSTREAM_HOST,
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Exhausted => f.write_str("every leased connection to the host is in use"),
            LeaseError::Connect(e) => write!(f, "connect: {e}"),
        }
    }
}

/// Why a blocking exchange ([`Lease::exchange_blocking`]) ended without a reply.
#[derive(Debug)]
pub enum BlockedError {
    /// The holder stopped it (its client left, or the worker drains).
    Stopped,
    /// The write or read failed, or the bound passed.
    Io(std::io::Error),
}

/// Bytes of a large request written under one `op_timeout` ([`Lease::exchange_large`]): a
/// host taking less than this per `op_timeout` is hung.
pub const LARGE_PIECE: usize = 1024 * 1024;

/// Idle connections kept ready per (host, protocol) once the host has been leased.
pub const MIN_IDLE: usize = 1;

/// Idle connections past [`MIN_IDLE`] are closed after this long unused, so a burst (many
/// blocked clients at once) does not keep its connections for ever.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// An idle connection, its id at the host, and when it became idle.
struct Idle {
    stream: Stream,
    upstream_id: Option<u64>,
    since: Instant,
}

impl Idle {
    fn new(stream: Stream, upstream_id: Option<u64>) -> Idle {
        Idle {
            stream,
            upstream_id,
            since: Instant::now(),
        }
    }
}

/// Connects a leased connection (handshake as for a shared one) and asks the host for its id
/// (`CLIENT ID`), which `CLIENT UNBLOCK` needs. A host that refuses `CLIENT ID` (an ACL) gives
/// a connection without one: its blocked clients cannot be unblocked through Respite.
///
/// The TCP connect is bounded by `connect_timeout`; the handshake's replies (AUTH or HELLO,
/// then `CLIENT ID`) by `handshake`: what is left of the request's `op_timeout`, so a host
/// that stalls a few seconds (a fork, a slow script) serves a request that needs a new lease
/// as it serves one sent on a connection it already has.
///
/// Errors: as [`open`], and a lost connection or a timeout on `CLIENT ID`.
async fn open_leased(
    addr: SocketAddr,
    settings: &PoolSettings,
    cluster: &str,
    handshake: std::time::Duration,
    hello_failure: &Counter,
) -> std::io::Result<(Stream, Option<u64>)> {
    let stream = open(
        addr,
        settings,
        false,
        cluster,
        handshake,
        Some(hello_failure),
    )
    .await?;
    let BufResult(res, _) = net::write_all(&stream, CLIENT_ID.to_vec()).await;
    res?;
    let reply = net::timeout(handshake, read_replies(&stream, 1))
        .await
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "CLIENT ID timeout"))??;
    let id = reply
        .first()
        .and_then(|r| crate::resp::integer_reply(r))
        .and_then(|n| u64::try_from(n).ok());
    Ok((stream, id))
}

const CLIENT_ID: &[u8] = b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n";

/// Reply when a client waited `op_timeout` for a leased connection in vain.
pub const LEASE_EXHAUSTED: &[u8] = b"-ERR no leased upstream connection became free within \
op_timeout: every one of the host's max_leased_connections is in use\r\n";

/// A cluster's lease counters and gauges on one worker (`cluster.<name>.` in the stats).
#[derive(Clone)]
pub struct LeaseStats {
    /// Leased connections held by a session now.
    pub active: Arc<Gauge>,
    /// Leased connections idle in the pool now.
    pub idle: Arc<Gauge>,
    /// Sessions waiting for a lease now.
    pub waiting: Arc<Gauge>,
    /// Leases given.
    pub total: Arc<Counter>,
    /// New leased connections opened.
    pub connects: Arc<Counter>,
    /// New leased connections that failed (refused, reset, or no handshake within
    /// `connect_timeout`): with reconnect backoff, a few per down host, not one per request.
    pub connect_fail: Arc<Counter>,
    /// Waits that ended at `op_timeout` without a lease.
    pub exhausted: Arc<Counter>,
    /// Leases closed instead of returned (an I/O error, a timeout, a holder that went away).
    pub closed_dirty: Arc<Counter>,
    /// How long each lease waited for its connection (connect included), in ms.
    pub wait_ms: Arc<Histogram>,
    /// RESP3 connections whose `HELLO 3` failed (shared with the pool's
    /// [`super::HostStats::resp3_hello_failure`]).
    pub resp3_hello_failure: Arc<Counter>,
}

impl LeaseStats {
    /// Registers the stats of cluster `cluster` for `worker` in `store`.
    pub fn new(store: &crate::stats::Store, worker: usize, cluster: &str) -> LeaseStats {
        let c = |n: &str| store.counter(&format!("cluster.{cluster}.leased_cx_{n}"), worker);
        let g = |n: &str| store.gauge(&format!("cluster.{cluster}.leased_cx_{n}"), worker);
        LeaseStats {
            active: g("active"),
            idle: g("idle"),
            waiting: g("waiting"),
            total: c("total"),
            connects: c("connect"),
            connect_fail: c("connect_fail"),
            exhausted: c("pool_exhausted"),
            closed_dirty: c("closed_dirty"),
            wait_ms: store.histogram(&format!("cluster.{cluster}.leased_cx_wait_ms"), worker),
            resp3_hello_failure: store.counter(
                &format!("cluster.{cluster}.{}", super::RESP3_HELLO_FAILURE),
                worker,
            ),
        }
    }
}

/// One worker's leased connections to the hosts of one cluster.
pub struct LeasePool {
    cluster: Arc<str>,
    settings: Rc<PoolSettings>,
    max_per_host: usize,
    /// Idle connections per (host, RESP3).
    idle: RefCell<HashMap<(SocketAddr, bool), Vec<Idle>>>,
    /// Connections per host in use or idle (what the bound counts).
    open: RefCell<HashMap<SocketAddr, usize>>,
    /// Sessions waiting for a connection to a host to become free, first come first served.
    waiters: RefCell<HashMap<SocketAddr, VecDeque<Rc<Notify>>>>,
    stats: LeaseStats,
    /// Set by a config change that replaced the pool: returned connections are closed.
    retired: Cell<bool>,
    /// (host, protocol) with a connection being opened by [`LeasePool::keep_warm`].
    warming: RefCell<HashSet<(SocketAddr, bool)>>,
    /// Hosts that have accepted `MULTI` on a leased connection (see [`LeasePool::accepts_multi`]).
    multi_ok: RefCell<HashSet<SocketAddr>>,
    /// Per (host, RESP3), the reconnect backoff of new connections ([`LeasePool::lease`]).
    /// Per protocol: a host that refuses `HELLO 3` (Redis 5) must not lock RESP2 clients out.
    down: RefCell<HashMap<(SocketAddr, bool), Down>>,
}

/// The reconnect backoff of one (host, protocol) for leases.
struct Down {
    /// New connections are not tried before this.
    until: Instant,
    backoff: Backoff,
    /// When the last new connection succeeded: a failure of an attempt started before it is
    /// old news and changes nothing.
    ok_at: Instant,
}

impl LeasePool {
    /// A pool for cluster `cluster` whose connections are made with `settings` (their
    /// `op_timeout` bounds a wait for a lease), at most `max_per_host` per host.
    pub fn new(
        cluster: &str,
        settings: Rc<PoolSettings>,
        max_per_host: usize,
        stats: LeaseStats,
    ) -> Rc<LeasePool> {
        let pool = Rc::new(LeasePool {
            cluster: cluster.into(),
            settings,
            max_per_host: max_per_host.max(1),
            idle: RefCell::default(),
            open: RefCell::default(),
            waiters: RefCell::default(),
            stats,
            retired: Cell::new(false),
            warming: RefCell::default(),
            multi_ok: RefCell::default(),
            down: RefCell::default(),
        });
        let weak = Rc::downgrade(&pool);
        net::spawn(async move {
            loop {
                net::sleep(IDLE_TIMEOUT / 2).await;
                match weak.upgrade() {
                    Some(pool) if !pool.retired.get() => pool.reap_idle(),
                    _ => return,
                }
            }
        });
        pool
    }

    /// Closes the idle connections past [`MIN_IDLE`] per (host, protocol) that have been
    /// unused for [`IDLE_TIMEOUT`] (the oldest are first in each list).
    fn reap_idle(&self) {
        let mut closed = Vec::new();
        for ((addr, _), list) in self.idle.borrow_mut().iter_mut() {
            while list.len() > MIN_IDLE
                && list
                    .first()
                    .is_some_and(|i| i.since.elapsed() >= IDLE_TIMEOUT)
            {
                let old = list.remove(0);
                net::shutdown(&old.stream);
                closed.push(*addr);
            }
        }
        for addr in closed {
            self.stats.idle.dec();
            self.forget(addr);
        }
    }

    /// A connection to `addr` speaking RESP3 when `resp3`: an idle one, else a new one while
    /// the host has fewer than `max_leased_connections`, else the first to be returned within
    /// `op_timeout`.
    ///
    /// A host whose last new connection failed is in reconnect backoff (as a shared connection
    /// is, [`super::backoff`]): until the delay passes, a lease that needs a new connection fails
    /// at once. So a pipeline of requests that each need a lease (large requests, blocking
    /// commands, transactions) to a host that hangs in the handshake costs its client one
    /// wait, not one per request. A new connection's handshake may take what is left of
    /// `op_timeout` (see [`open_leased`]).
    ///
    /// Errors: [`LeaseError::Exhausted`] after `op_timeout`; [`LeaseError::Connect`] (also
    /// at once while the host is in backoff).
    pub async fn lease(
        self: &Rc<Self>,
        addr: SocketAddr,
        resp3: bool,
    ) -> Result<Lease, LeaseError> {
        let started = Instant::now();
        let deadline = started + self.settings.op_timeout;
        loop {
            let idle = self
                .idle
                .borrow_mut()
                .get_mut(&(addr, resp3))
                .and_then(Vec::pop);
            if let Some(Idle {
                stream,
                upstream_id,
                ..
            }) = idle
            {
                self.stats.idle.dec();
                if net::idle_usable(&stream) {
                    return Ok(self.given(addr, resp3, (stream, upstream_id), started));
                }
                // Closed by the host while idle (a restart, its `timeout`): try the next.
                net::shutdown(&stream);
                self.forget(addr);
                continue;
            }
            let opened = self.open.borrow().get(&addr).copied().unwrap_or(0);
            if opened < self.max_per_host {
                if self.in_backoff(addr, resp3) {
                    // A waiter woken for this place fails too: the next one learns it now,
                    // not at op_timeout.
                    self.wake_one(addr);
                    return Err(LeaseError::Connect(std::io::Error::other(
                        "in reconnect backoff after a failed connect",
                    )));
                }
                *self.open.borrow_mut().entry(addr).or_insert(0) += 1;
                let settings = PoolSettings {
                    resp3,
                    ..(*self.settings).clone()
                };
                let left = deadline.saturating_duration_since(Instant::now());
                let handshake = left.max(self.settings.connect_timeout);
                let opened = self.open_noted(addr, &settings, handshake).await;
                return match opened {
                    Ok(conn) => {
                        self.stats.connects.inc();
                        Ok(self.given(addr, resp3, conn, started))
                    }
                    Err(e) => {
                        self.forget(addr);
                        Err(LeaseError::Connect(e))
                    }
                };
            }
            // An idle connection of the other protocol takes a place a waiter may need.
            let other = self
                .idle
                .borrow_mut()
                .get_mut(&(addr, !resp3))
                .and_then(Vec::pop)
                .map(|i| i.stream);
            if let Some(stream) = other {
                self.stats.idle.dec();
                net::shutdown(&stream);
                self.forget(addr);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.stats.exhausted.inc();
                return Err(LeaseError::Exhausted);
            }
            let waiter = Waiter::new(self, addr);
            let _ = net::timeout(left, waiter.me.notified()).await;
            waiter.done();
        }
    }

    /// A connection to `addr` for a request that must not wait for a free one (SCRIPT KILL,
    /// which stops what may be holding them): an idle one, else a new one even past
    /// `max_leased_connections` (closed, not kept, when it comes back over the bound). A new
    /// one may take `patience` longer than `connect_timeout` to connect and shake hands: a host running a
    /// script answers nothing until the script passes Redis's `busy-reply-threshold`. It is
    /// tried even while the host is in reconnect backoff.
    ///
    /// Errors: [`LeaseError::Connect`].
    pub async fn lease_now(
        self: &Rc<Self>,
        addr: SocketAddr,
        resp3: bool,
        patience: std::time::Duration,
    ) -> Result<Lease, LeaseError> {
        let started = Instant::now();
        loop {
            // Popped before the body: the borrow must end before `given` looks at the list.
            let popped = self
                .idle
                .borrow_mut()
                .get_mut(&(addr, resp3))
                .and_then(Vec::pop);
            let Some(Idle {
                stream,
                upstream_id,
                ..
            }) = popped
            else {
                break;
            };
            self.stats.idle.dec();
            if net::idle_usable(&stream) {
                return Ok(self.given(addr, resp3, (stream, upstream_id), started));
            }
            net::shutdown(&stream);
            self.forget(addr);
        }
        *self.open.borrow_mut().entry(addr).or_insert(0) += 1;
        let settings = PoolSettings {
            resp3,
            connect_timeout: self.settings.connect_timeout.saturating_add(patience),
            ..(*self.settings).clone()
        };
        let opened = self
            .open_noted(addr, &settings, settings.connect_timeout)
            .await;
        match opened {
            Ok(conn) => {
                self.stats.connects.inc();
                Ok(self.given(addr, resp3, conn, started))
            }
            Err(e) => {
                self.forget(addr);
                Err(LeaseError::Connect(e))
            }
        }
    }

    fn given(
        self: &Rc<Self>,
        addr: SocketAddr,
        resp3: bool,
        (stream, upstream_id): (Stream, Option<u64>),
        started: Instant,
    ) -> Lease {
        self.stats.total.inc();
        self.stats
            .wait_ms
            .record(started.elapsed().as_millis().try_into().unwrap_or(u64::MAX));
        self.keep_warm(addr, resp3);
        self.stats.active.inc();
        Lease {
            pool: self.clone(),
            addr,
            resp3,
            upstream_id,
            reusable: true,
            stream: Some(stream),
        }
    }

    /// Opens one idle connection to `addr` in the background when the last idle one was just
    /// handed out and the bound has room, so the host's next lease finds one connected
    /// ([`MIN_IDLE`]). Hosts never leased get none.
    fn keep_warm(self: &Rc<Self>, addr: SocketAddr, resp3: bool) {
        let idle = self.idle.borrow().get(&(addr, resp3)).map_or(0, Vec::len);
        let opened = self.open.borrow().get(&addr).copied().unwrap_or(0);
        if idle >= MIN_IDLE
            || opened >= self.max_per_host
            || self.retired.get()
            || self.in_backoff(addr, resp3)
            || !self.warming.borrow_mut().insert((addr, resp3))
        {
            return;
        }
        *self.open.borrow_mut().entry(addr).or_insert(0) += 1;
        let pool = self.clone();
        net::spawn(async move {
            pool.open_warm(addr, resp3).await;
            pool.warming.borrow_mut().remove(&(addr, resp3));
        });
    }

    /// True once `addr` has accepted `MULTI` on a leased connection of this pool: a later
    /// transaction may send `MULTI`, its commands and `EXEC` in one write. Redis refuses
    /// `MULTI` only for the connection's user (ACL `-NOPERM`; it is allowed while loading or
    /// busy with a script), so the first transaction to each host sends `MULTI` alone and
    /// waits for `+OK`: a refused one must not let the queued commands run one by one.
    pub fn accepts_multi(&self, addr: SocketAddr) -> bool {
        self.multi_ok.borrow().contains(&addr)
    }

    /// Records whether `addr` accepted `MULTI` (see [`LeasePool::accepts_multi`]).
    pub fn note_multi(&self, addr: SocketAddr, accepted: bool) {
        if accepted {
            self.multi_ok.borrow_mut().insert(addr);
        } else {
            self.multi_ok.borrow_mut().remove(&addr);
        }
    }

    /// The background connect of [`LeasePool::keep_warm`] (its place in the bound is taken).
    async fn open_warm(self: &Rc<Self>, addr: SocketAddr, resp3: bool) {
        let settings = PoolSettings {
            resp3,
            ..(*self.settings).clone()
        };
        let opened = self
            .open_noted(addr, &settings, settings.connect_timeout)
            .await;
        match opened {
            Ok((stream, upstream_id)) if !self.retired.get() => {
                self.stats.connects.inc();
                self.stats.idle.inc();
                self.idle
                    .borrow_mut()
                    .entry((addr, resp3))
                    .or_default()
                    .push(Idle::new(stream, upstream_id));
                self.wake_one(addr);
            }
            Ok((stream, _)) => {
                net::shutdown(&stream);
                self.forget(addr);
            }
            Err(_) => self.forget(addr),
        }
    }

    /// Opens a leased connection to `addr` with `settings` and records the outcome in the
    /// backoff of (`addr`, `settings.resp3`) ([`LeasePool::note_connect`]).
    async fn open_noted(
        &self,
        addr: SocketAddr,
        settings: &PoolSettings,
        handshake: std::time::Duration,
    ) -> std::io::Result<(Stream, Option<u64>)> {
        let tried = Instant::now();
        let opened = open_leased(
            addr,
            settings,
            &self.cluster,
            handshake,
            &self.stats.resp3_hello_failure,
        )
        .await;
        if opened.is_err() {
            self.stats.connect_fail.inc();
        }
        self.note_connect(addr, settings.resp3, tried, opened.is_ok());
        opened
    }

    /// True while (`addr`, `resp3`) is in reconnect backoff (see [`LeasePool::lease`]).
    fn in_backoff(&self, addr: SocketAddr, resp3: bool) -> bool {
        self.down
            .borrow()
            .get(&(addr, resp3))
            .is_some_and(|d| Instant::now() < d.until)
    }

    /// Records a new connection to `addr` tried at `tried` that succeeded (the backoff starts
    /// over) or failed (the next delay starts). Failures of attempts that ran side by side
    /// count once: one made while a delay runs, or started before the last success, changes
    /// nothing, so a burst of clients failing together does not push the delay to its cap.
    fn note_connect(&self, addr: SocketAddr, resp3: bool, tried: Instant, ok: bool) {
        let now = Instant::now();
        let mut down = self.down.borrow_mut();
        let d = down.entry((addr, resp3)).or_insert_with(|| Down {
            until: now,
            backoff: Backoff::reconnect(),
            ok_at: tried,
        });
        if ok {
            d.backoff.reset();
            d.until = now;
            d.ok_at = now;
        } else if now >= d.until && tried >= d.ok_at {
            d.until = now + d.backoff.next();
        }
    }

    /// A connection to `addr` is gone: its place is free for the next waiter.
    fn forget(&self, addr: SocketAddr) {
        if let Some(n) = self.open.borrow_mut().get_mut(&addr) {
            *n = n.saturating_sub(1);
        }
        self.wake_one(addr);
    }

    fn wake_one(&self, addr: SocketAddr) {
        let next = self
            .waiters
            .borrow_mut()
            .get_mut(&addr)
            .and_then(VecDeque::pop_front);
        if let Some(w) = next {
            w.notify();
        }
    }

    /// Closes the idle connections and every connection returned from now on (the pool was
    /// replaced by a config change).
    pub fn retire(&self) {
        self.retired.set(true);
        let idle = std::mem::take(&mut *self.idle.borrow_mut());
        for ((addr, _), streams) in idle {
            for Idle { stream: s, .. } in streams {
                self.stats.idle.dec();
                net::shutdown(&s);
                self.forget(addr);
            }
        }
    }
}

/// A session waiting for a connection to `addr` to become free, counted in
/// `leased_cx_waiting`. Dropped (its session's future cancelled: the client left) or done, it
/// leaves the queue and the gauge; a wake-up it received and cannot use passes to the next
/// waiter, so a freed connection never waits for nobody.
struct Waiter<'p> {
    pool: &'p LeasePool,
    addr: SocketAddr,
    me: Rc<Notify>,
    done: bool,
}

impl<'p> Waiter<'p> {
    fn new(pool: &'p LeasePool, addr: SocketAddr) -> Waiter<'p> {
        let me = Rc::new(Notify::default());
        pool.waiters
            .borrow_mut()
            .entry(addr)
            .or_default()
            .push_back(me.clone());
        pool.stats.waiting.inc();
        Waiter {
            pool,
            addr,
            me,
            done: false,
        }
    }

    /// The wait is over (woken or timed out): the caller looks for a connection again.
    fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.pool.stats.waiting.dec();
        let mut waiters = self.pool.waiters.borrow_mut();
        let queued = waiters.get_mut(&self.addr).is_some_and(|q| {
            let before = q.len();
            q.retain(|w| !Rc::ptr_eq(w, &self.me));
            q.len() < before
        });
        drop(waiters);
        // Popped by `wake_one` but never to look again: the wake-up is the next waiter's.
        if !queued && !self.done {
            self.pool.wake_one(self.addr);
        }
    }
}

/// A connection held by one session. Dropped without [`Lease::release`] it is closed.
pub struct Lease {
    pool: Rc<LeasePool>,
    addr: SocketAddr,
    resp3: bool,
    upstream_id: Option<u64>,
    /// Cleared by [`Lease::close_on_release`].
    reusable: bool,
    stream: Option<Stream>,
}

impl Lease {
    /// The host the connection goes to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connection's id at its host (Redis `CLIENT ID`); `None` if the host refused to say.
    pub fn upstream_id(&self) -> Option<u64> {
        self.upstream_id
    }

    /// The name of the cluster the connection's host belongs to.
    pub fn cluster(&self) -> &Arc<str> {
        &self.pool.cluster
    }

    /// The connection is closed when released, however clean: its id at the host must not
    /// pass to another client (a `CLIENT UNBLOCK` aimed at it may still be on its way).
    pub fn close_on_release(&mut self) {
        self.reusable = false;
    }

    /// Writes `request` (one or more encoded commands) and reads `replies` replies, the whole
    /// exchange bounded by the cluster's `op_timeout`.
    ///
    /// Errors: a write or read error, a malformed reply, the connection closed or the timeout;
    /// the lease is then unusable (release closes it).
    pub async fn exchange(
        &mut self,
        request: Vec<u8>,
        replies: usize,
    ) -> std::io::Result<Vec<Vec<u8>>> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(std::io::ErrorKind::NotConnected.into());
        };
        let timeout = self.pool.settings.op_timeout;
        let result = net::timeout(timeout, async {
            let BufResult(res, _) = net::write_all(stream, request).await;
            res?;
            read_replies(stream, replies).await
        })
        .await
        .unwrap_or_else(|| Err(std::io::ErrorKind::TimedOut.into()));
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Like [`Lease::exchange`] for one request too large to bound as a whole by `op_timeout`
    /// (hundreds of MiB take seconds to write): `prefix` (`ASKING`, or nothing) goes first,
    /// then the request as `pieces` say, in order: bytes of its own (an array header, a key
    /// rewritten by its route) and ranges of `buffer` (a client's frame: all of it, or the
    /// arguments a sub-request takes from it), the ranges in steps of at most [`LARGE_PIECE`]
    /// bytes, each of which the host must take within `op_timeout` (a host that stops reading
    /// is hung); then the replies to both must come within `op_timeout` of the last byte.
    /// Returns the last reply, and `buffer` back (to send it again after a redirect).
    ///
    /// Errors: as for [`Lease::exchange`]; the lease is then unusable. A range outside
    /// `buffer` is an `InvalidInput` error, before anything is written.
    pub async fn exchange_large(
        &mut self,
        prefix: &[u8],
        buffer: Vec<u8>,
        pieces: &[Piece],
    ) -> (std::io::Result<Vec<u8>>, Vec<u8>) {
        let replies = 1 + usize::from(!prefix.is_empty());
        let (result, buffer) = self
            .exchange_large_replies(prefix, buffer, pieces, replies)
            .await;
        let last = result.and_then(|mut r| {
            r.pop()
                .ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
        });
        (last, buffer)
    }

    /// [`Lease::exchange_large`] reading `replies` replies, all returned.
    async fn exchange_large_replies(
        &mut self,
        prefix: &[u8],
        buffer: Vec<u8>,
        pieces: &[Piece],
        replies: usize,
    ) -> (std::io::Result<Vec<Vec<u8>>>, Vec<u8>) {
        if pieces.iter().any(|p| match p {
            Piece::Frame(r) => r.start > r.end || r.end > buffer.len(),
            Piece::Bytes(_) | Piece::Shared(_) => false,
        }) {
            return (Err(std::io::ErrorKind::InvalidInput.into()), buffer);
        }
        let Some(stream) = self.stream.as_ref() else {
            return (Err(std::io::ErrorKind::NotConnected.into()), buffer);
        };
        let timeout = self.pool.settings.op_timeout;
        let (written, request) = write_large(stream, timeout, prefix, buffer, pieces).await;
        let result = match written {
            Ok(()) => net::timeout(timeout, read_replies(stream, replies))
                .await
                .unwrap_or_else(|| Err(std::io::ErrorKind::TimedOut.into())),
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.close();
        }
        (result, request)
    }

    /// Like [`Lease::exchange`] for requests that may hold large frames ([`Piece::Shared`]; no
    /// [`Piece::Frame`]): each piece is written as [`Lease::exchange_large`] writes, in steps
    /// each within `op_timeout`, then the `replies` replies must come within `op_timeout` of
    /// the last byte.
    ///
    /// Errors: as for [`Lease::exchange`]; the lease is then unusable.
    pub async fn exchange_pieces(
        &mut self,
        pieces: &[Piece],
        replies: usize,
    ) -> std::io::Result<Vec<Vec<u8>>> {
        let (result, _) = self
            .exchange_large_replies(b"", Vec::new(), pieces, replies)
            .await;
        result
    }

    /// Like [`Lease::exchange`] for a request that blocks at the backend (BLPOP & co.) for
    /// `wait`, its own timeout (`None`: until served): bounded by `wait` plus `op_timeout` (the
    /// backend answers a timed-out block itself; past that it is hung), and abandoned as soon
    /// as `stop` completes. Returns the last of the `replies` replies.
    ///
    /// Errors: [`BlockedError::Stopped`] when `stop` came first (the connection is closed, so
    /// Redis frees the blocked client and pops nothing for it); [`BlockedError::Io`] as for
    /// [`Lease::exchange`], `TimedOut` past the bound. The lease is then unusable.
    pub async fn exchange_blocking(
        &mut self,
        request: Vec<u8>,
        replies: usize,
        wait: Option<std::time::Duration>,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Vec<u8>, BlockedError> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(BlockedError::Io(std::io::ErrorKind::NotConnected.into()));
        };
        let exchange = async {
            let BufResult(res, _) = net::write_all(stream, request).await;
            res?;
            read_replies(stream, replies).await
        };
        let op_timeout = self.pool.settings.op_timeout;
        let bounded = async {
            match wait
                .and_then(|w| w.checked_add(op_timeout))
                .filter(|b| Instant::now().checked_add(*b).is_some())
            {
                Some(w) => net::timeout(w, exchange)
                    .await
                    .unwrap_or_else(|| Err(std::io::ErrorKind::TimedOut.into())),
                None => exchange.await,
            }
        };
        let result = match net::unless(bounded, stop).await {
            None => Err(BlockedError::Stopped),
            Some(Ok(mut r)) => r
                .pop()
                .ok_or(BlockedError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Some(Err(e)) => Err(BlockedError::Io(e)),
        };
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Gives the connection back for the next session: `clean` says its holder left no
    /// `MULTI` or `WATCH` open and read every reply. A dirty or broken one is closed.
    pub fn release(mut self, clean: bool) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let pool = self.pool.clone();
        let over = pool.open.borrow().get(&self.addr).copied().unwrap_or(0) > pool.max_per_host;
        if !clean || !self.reusable || pool.retired.get() || over {
            if !clean {
                pool.stats.closed_dirty.inc();
            }
            pool.stats.active.dec();
            net::shutdown(&stream);
            pool.forget(self.addr);
            return;
        }
        pool.stats.active.dec();
        pool.stats.idle.inc();
        pool.idle
            .borrow_mut()
            .entry((self.addr, self.resp3))
            .or_default()
            .push(Idle::new(stream, self.upstream_id));
        pool.wake_one(self.addr);
    }

    fn close(&mut self) {
        if let Some(stream) = self.stream.take() {
            self.pool.stats.closed_dirty.inc();
            self.pool.stats.active.dec();
            net::shutdown(&stream);
            self.pool.forget(self.addr);
        }
    }
}

/// One piece of a request [`Lease::exchange_large`] or [`Lease::exchange_pieces`] sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes of its own: an array header, a key as its route forwards it, encoded commands.
    Bytes(Vec<u8>),
    /// A range of the buffer handed over with the request (the client's frame).
    Frame(Range<usize>),
    /// A client's frame held where more than one send may need it (a transaction's large
    /// command, re-sent if the transaction moves): shared, never copied.
    Shared(bytes::Bytes),
}

/// Writes `prefix`, then `pieces` (each range within `buf`, written [`LARGE_PIECE`] bytes at a
/// time), each write within `timeout`; returns `buf` (empty when a write was cut by the
/// timeout: it keeps its buffer).
async fn write_large(
    stream: &Stream,
    timeout: std::time::Duration,
    prefix: &[u8],
    mut buf: Vec<u8>,
    pieces: &[Piece],
) -> (std::io::Result<()>, Vec<u8>) {
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    let mut own = prefix.to_vec();
    for piece in pieces.iter().map(Some).chain([None]) {
        let range = match piece {
            Some(Piece::Bytes(b)) => {
                own.extend_from_slice(b);
                continue;
            }
            Some(Piece::Frame(r)) => Some(r.clone()),
            Some(Piece::Shared(_)) | None => None,
        };
        // Own bytes run together up to the next range (or the end): one write.
        if !own.is_empty() {
            match net::timeout(timeout, net::write_all(stream, std::mem::take(&mut own))).await {
                Some(BufResult(Ok(()), _)) => {}
                Some(BufResult(Err(e), _)) => return (Err(e), buf),
                None => return (Err(timed_out()), buf),
            }
        }
        if let Some(Piece::Shared(b)) = piece {
            let mut at = 0;
            while at < b.len() {
                let end = at.saturating_add(LARGE_PIECE).min(b.len());
                match net::timeout(timeout, net::write_shared(stream, b.slice(at..end))).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => return (Err(e), buf),
                    None => return (Err(timed_out()), buf),
                }
                at = end;
            }
        }
        let Some(range) = range else { continue };
        let mut at = range.start;
        while at < range.end {
            let end = at.saturating_add(LARGE_PIECE).min(range.end);
            let Some(BufResult(res, b)) =
                net::timeout(timeout, net::write_range(stream, buf, at..end)).await
            else {
                return (Err(timed_out()), Vec::new());
            };
            buf = b;
            if let Err(e) = res {
                return (Err(e), buf);
            }
            at = end;
        }
    }
    (Ok(()), buf)
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.close();
    }
}

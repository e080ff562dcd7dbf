//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`, as Redis answers them.
//!
//! Between MULTI and EXEC the session answers `+QUEUED` itself and keeps the commands, in their
//! forwarded form, with the backend their keys go to (dispatch decides it: one backend, one
//! slot). EXEC sends `MULTI` on a leased connection to that backend, then, once it is
//! accepted, the commands and `EXEC` in one write, and gives the client Redis's reply to EXEC. Nothing is sent before EXEC, so a
//! transaction discarded for any reason (a queue-time error, keys on two backends, DISCARD, the
//! client leaving, a reload) runs nothing.
//!
//! `WATCH` leases a connection to its keys' backend and keeps it until EXEC, DISCARD, UNWATCH or
//! RESET: Redis tracks watched keys per connection, so the transaction must run on the same one.
//!
//! EXEC and WATCH wait for their backend; the session handles no later request of the client
//! until they are answered (a barrier), so a pipelined `GET` after `EXEC` sees the transaction's
//! writes, as it would at Redis.

use std::rc::Rc;

use super::barrier::Barrier;
use super::multi::{self, EXECABORT, Step};
use super::{Mode, Session};
use crate::cluster::ClusterPool;
use crate::command::{CommandSpec, Kind, Request, Transaction};
use crate::engine::sink::{NO_CMD, Sink};
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::router::MirrorStats;
use crate::router::dispatch::{CROSSSLOT, MirrorPlace, Queued, Slots, TxDest, TxMirrors};
use crate::upstream::{Deliver, Lease, LeaseError, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};

/// Where a transaction runs, in the worker's pools.
type Dest = TxDest<ClusterPool>;

const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";
const UNWATCH: &[u8] = b"*1\r\n$7\r\nUNWATCH\r\n";
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// EXEC's reply when a host that accepted MULTI before refused it in the same write as the
/// commands: they ran, one by one, outside a transaction.
const MULTI_LOST: &[u8] = b"-ERR the backend refused MULTI (its user may no longer run it): the \
transaction's commands ran one by one, outside a transaction\r\n";

/// EXEC of a transaction whose listener was reloaded while it was queued: its routes may not
/// exist any more, so nothing of it runs.
const RELOADED: &[u8] = b"-EXECABORT Transaction discarded because the listener's \
configuration was reloaded while it was queued\r\n";

/// The most commands one transaction may queue; past it the transaction is discarded.
pub(super) const MAX_QUEUED: usize = 1 << 20;

/// A transaction being queued (the connection is in [`Mode::Multi`]).
pub(super) struct Tx {
    /// The queued commands, encoded as they are forwarded.
    queued: Vec<u8>,
    count: usize,
    /// The backend of the commands queued so far that have keys.
    dest: Option<Dest>,
    /// A queue-time error: EXEC answers `-EXECABORT`.
    discarded: bool,
    /// The listener's runtime at MULTI: EXEC under another one (a reload) runs nothing.
    runtime: Rc<ListenerRuntime>,
    /// Where a committed copy goes in the mirrors of the transaction's route.
    mirrors: TxMirrors,
    /// The listener was reloaded after MULTI or WATCH: EXEC answers [`RELOADED`].
    stale: bool,
}

/// The WATCH of a connection: the leased connection holding it and its keys' backend.
pub(super) struct Watch {
    pub(super) lease: Lease,
    pub(super) dest: Dest,
    /// The listener's runtime at WATCH: a transaction under another one (a reload) runs
    /// nothing.
    runtime: Rc<ListenerRuntime>,
}

impl Session {
    /// A transaction command outside MULTI (already resolved, counted and past the auth gate).
    pub(super) fn tx_command(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        which: Transaction,
    ) {
        match which {
            Transaction::Multi => {
                self.mode = Mode::Multi(Box::new(Tx {
                    queued: Vec::new(),
                    count: 0,
                    dest: None,
                    discarded: false,
                    runtime: rt.clone(),
                    mirrors: TxMirrors::default(),
                    stale: false,
                }));
                self.sink.push_local(spec.id, b"+OK\r\n");
            }
            Transaction::Exec => self
                .sink
                .push_local(spec.id, b"-ERR EXEC without MULTI\r\n"),
            Transaction::Discard => self
                .sink
                .push_local(spec.id, b"-ERR DISCARD without MULTI\r\n"),
            Transaction::Unwatch => {
                self.end_watch();
                self.sink.push_local(spec.id, b"+OK\r\n");
            }
            Transaction::Watch => self.watch(rt, req, spec),
        }
    }

    /// WATCH: leases a connection to the keys' backend (or uses the one a WATCH already holds)
    /// and sends the WATCH there.
    fn watch(&mut self, rt: &Rc<ListenerRuntime>, req: &Request<'_>, spec: &'static CommandSpec) {
        if self
            .watching
            .as_ref()
            .is_some_and(|w| !Rc::ptr_eq(&w.runtime, rt))
        {
            // A WATCH from before a reload holds; the transaction it guards will not run.
            return self.sink.push_local(spec.id, b"+OK\r\n");
        }
        let mut request = Vec::new();
        let so_far = self.watching.as_ref().map(|w| w.dest.clone());
        let dest = match self
            .dispatch(rt)
            .together(req, spec, so_far.as_ref(), &mut request)
        {
            Queued::No(reply) => {
                if *reply == *CROSSSLOT {
                    rt.stats.tx_cross_slot.inc();
                }
                return self.sink.push_local(spec.id, &reply);
            }
            Queued::Yes { dest: Some(dest) } => dest,
            // WATCH has at least one key (its arity says so): unreachable, answered safely.
            Queued::Yes { dest: None } => return self.sink.push_local(spec.id, NO_UPSTREAM_HOST),
        };
        let held = self.watching.take();
        let Some(addr) = held
            .as_ref()
            .map(|w| w.lease.addr())
            .or_else(|| dest.pool.primary_addr(dest.shard))
        else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        let runtime = rt.clone();
        net::spawn(async move {
            sink.answered_before(seq).await;
            let mut lease = match lease_for(held, &dest, addr, resp3).await {
                Ok(l) => l,
                Err(e) => {
                    sink.deliver(seq, 0, e.reply());
                    return barrier.open(None);
                }
            };
            match lease.exchange(request, 1).await {
                Ok(mut replies) => {
                    let reply = replies.pop().unwrap_or_default();
                    sink.deliver(seq, 0, &reply);
                    // A refused WATCH watches nothing new; what an earlier one watched stays.
                    barrier.open(Some(Watch {
                        lease,
                        dest,
                        runtime,
                    }));
                }
                Err(_) => {
                    // The connection, and every key it watched, is gone: the client cannot
                    // tell a conflict from this, so it gets an error now and EXEC later would
                    // run unwatched. Nothing is kept; the client must WATCH again.
                    sink.deliver(seq, 0, UPSTREAM_FAILURE);
                    barrier.open(None);
                }
            }
        });
    }

    /// Ends the connection's WATCH, if any: UNWATCH on its leased connection, which then goes
    /// back to the pool (or is closed if that fails).
    pub(super) fn end_watch(&mut self) {
        if let Some(mut w) = self.watching.take() {
            net::spawn(async move {
                let ok = w.lease.exchange(UNWATCH.to_vec(), 1).await.is_ok();
                w.lease.release(ok);
            });
        }
    }

    /// A request inside MULTI: queued, answered, or the transaction ends (EXEC, DISCARD, RESET).
    /// Returns the request back when it is to be handled as usual (RESET, QUIT).
    pub(super) fn in_multi<'r>(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: Request<'r>,
    ) -> Option<Request<'r>> {
        let custom = req.argc() >= 2 && rt.custom_command(req.name());
        let count = |cmd: u16| {
            if cmd == NO_CMD {
                rt.stats.rq_total.inc();
            } else {
                rt.stats.request(cmd);
            }
        };
        match multi::step(req.argc(), req.argv(), custom) {
            Step::Answer {
                cmd,
                reply,
                discards,
                ends,
            } => {
                count(cmd);
                if let Mode::Multi(tx) = &mut self.mode {
                    tx.discarded |= discards;
                }
                if ends {
                    self.mode = Mode::Shared;
                    self.end_watch();
                }
                self.sink.push_local(cmd, &reply);
                None
            }
            Step::Run { ends } => {
                if ends {
                    self.mode = Mode::Shared;
                    self.end_watch();
                }
                Some(req)
            }
            Step::Discard(spec) => {
                count(spec.id);
                self.mode = Mode::Shared;
                self.end_watch();
                self.sink.push_local(spec.id, b"+OK\r\n");
                None
            }
            Step::Exec(spec) => {
                count(spec.id);
                self.exec(rt, spec);
                None
            }
            Step::Queue(spec) => {
                count(spec.map_or(NO_CMD, |s| s.id));
                self.queue(rt, &req, spec);
                None
            }
        }
    }

    /// Queues one command of the transaction, or refuses it and flags the transaction.
    fn queue(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: Option<&'static CommandSpec>,
    ) {
        let cmd = spec.map_or(NO_CMD, |s| s.id);
        let Mode::Multi(mut tx) = std::mem::take(&mut self.mode) else {
            return;
        };
        let watch_dest = self.watching.as_ref().map(|w| w.dest.clone());
        let so_far = tx.dest.clone().or(watch_dest);
        let limit = rt.config.max_request_bytes;
        let reloaded = !Rc::ptr_eq(&tx.runtime, rt)
            || self
                .watching
                .as_ref()
                .is_some_and(|w| !Rc::ptr_eq(&w.runtime, rt));
        if reloaded {
            // The routes it was placed by may be gone: queued as nothing, EXEC says why.
            tx.stale = true;
            self.mode = Mode::Multi(tx);
            return self.sink.push_local(cmd, b"+QUEUED\r\n");
        }
        let answer: &[u8] = if tx.count >= MAX_QUEUED || tx.queued.len() >= limit {
            tx.discarded = true;
            b"-ERR transaction too large: too many commands or bytes queued since MULTI\r\n"
        } else if spec.is_some_and(|s| s.kind == Kind::Transaction(Transaction::Unwatch)) {
            // Queued as Redis does; EXEC unwatches anyway.
            tx.queued.extend_from_slice(UNWATCH);
            tx.count += 1;
            b"+QUEUED\r\n"
        } else {
            match self.dispatch(rt).queue(
                req,
                spec,
                so_far.as_ref(),
                &mut tx.queued,
                &mut tx.mirrors,
            ) {
                Queued::Yes { dest } => {
                    if tx.dest.is_none() {
                        tx.dest = dest;
                    }
                    tx.count += 1;
                    b"+QUEUED\r\n"
                }
                Queued::No(reply) => {
                    if *reply == *CROSSSLOT {
                        rt.stats.tx_cross_slot.inc();
                    }
                    tx.discarded = true;
                    self.mode = Mode::Multi(tx);
                    return self.sink.push_local(cmd, &reply);
                }
            }
        };
        self.mode = Mode::Multi(tx);
        self.sink.push_local(cmd, answer);
    }

    /// EXEC inside MULTI: runs the transaction on its backend, or answers why it does not run.
    fn exec(&mut self, rt: &Rc<ListenerRuntime>, spec: &'static CommandSpec) {
        let Mode::Multi(tx) = std::mem::take(&mut self.mode) else {
            return;
        };
        if tx.discarded {
            rt.stats.tx_aborted.inc();
            self.end_watch();
            return self.sink.push_local(spec.id, EXECABORT);
        }
        let watch_reloaded = self
            .watching
            .as_ref()
            .is_some_and(|w| !Rc::ptr_eq(&w.runtime, rt));
        if tx.stale || watch_reloaded || !Rc::ptr_eq(&tx.runtime, rt) {
            rt.stats.tx_aborted.inc();
            self.end_watch();
            return self.sink.push_local(spec.id, RELOADED);
        }
        // Faults apply to EXEC as to one request: an error fault runs nothing.
        if self.fault(rt, spec.id) {
            rt.stats.tx_aborted.inc();
            self.end_watch();
            return;
        }
        let held = self.watching.take();
        if tx.count == 0 && held.is_none() {
            rt.stats.tx_committed.inc();
            return self.sink.push_local(spec.id, b"*0\r\n");
        }
        let dest = tx
            .dest
            .or_else(|| held.as_ref().map(|w| w.dest.clone()))
            .or_else(|| self.dispatch(rt).keyless_dest());
        let addr = held
            .as_ref()
            .map(|w| w.lease.addr())
            .or_else(|| dest.as_ref().and_then(|d| d.pool.primary_addr(d.shard)));
        let (Some(dest), Some(addr)) = (dest, addr) else {
            drop(held);
            rt.stats.tx_aborted.inc();
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let copies = mirror_copies(rt, &dest, &tx.mirrors, &tx.queued);
        let mut request = tx.queued;
        request.extend_from_slice(EXEC);
        let count = tx.count;
        let run = Exec {
            dest,
            watched: held.is_some(),
            request,
            replies: tx.count + 1,
            resp3: self.conn.resp3,
        };
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let stats = (rt.stats.tx_committed.clone(), rt.stats.tx_aborted.clone());
        net::spawn(async move {
            sink.answered_before(seq).await;
            let reply = run.run(held, addr).await;
            if committed(&reply) {
                stats.0.inc();
                for copy in copies {
                    copy.send(count);
                }
            } else {
                stats.1.inc();
            }
            sink.deliver(seq, 0, &reply);
            barrier.open(None);
        });
    }
}

/// The copy of a committed transaction for one mirror of its route.
enum TxCopy {
    /// To this shard of the mirror's pool, these bytes (the queued commands, then EXEC).
    Whole {
        stats: Rc<MirrorStats>,
        pool: Rc<ClusterPool>,
        shard: usize,
        request: Vec<u8>,
    },
    /// Its keys go to several shards of the mirror, or to none: not copied, counted.
    Unsendable(Rc<MirrorStats>),
}

impl TxCopy {
    fn send(self, count: usize) {
        match self {
            TxCopy::Whole {
                stats,
                pool,
                shard,
                request,
            } => stats.send_transaction(&pool, shard, request, count),
            TxCopy::Unsendable(stats) => stats.unsendable(),
        }
    }
}

/// The copies of transaction `queued` (placed in its route's mirrors as `mirrors` says) that
/// go out if it commits: one per mirror that admits it.
fn mirror_copies(
    rt: &ListenerRuntime,
    dest: &Dest,
    mirrors: &TxMirrors,
    queued: &[u8],
) -> Vec<TxCopy> {
    let Some(route) = rt.router.by_id(dest.route) else {
        return Vec::new();
    };
    route
        .mirrors
        .iter()
        .zip(&mirrors.places)
        .filter(|(m, _)| m.admits(!mirrors.writes, mirrors.first_key.as_deref()))
        .filter_map(|(m, place)| match *place {
            MirrorPlace::Open => None,
            MirrorPlace::Shard(shard) => {
                let mut request = queued.to_vec();
                request.extend_from_slice(EXEC);
                Some(TxCopy::Whole {
                    stats: m.stats.clone(),
                    pool: m.pool.clone(),
                    shard,
                    request,
                })
            }
            MirrorPlace::Unsendable => Some(TxCopy::Unsendable(m.stats.clone())),
        })
        .collect()
}

/// True for EXEC's reply when the transaction ran: the array of its replies (not the nil of a
/// WATCH conflict, not an error).
fn committed(reply: &[u8]) -> bool {
    reply.first() == Some(&b'*') && reply.get(1) != Some(&b'-')
}

/// A transaction on its way to its backend.
struct Exec {
    dest: Dest,
    /// A WATCH holds the connection: the transaction runs there or not at all.
    watched: bool,
    /// The queued commands and EXEC.
    request: Vec<u8>,
    replies: usize,
    resp3: bool,
}

impl Exec {
    /// Runs the transaction at `addr` (on the WATCH's connection when `held`); returns EXEC's
    /// reply for the client.
    ///
    /// Redis Cluster: when a queued command met `MOVED`/`ASK` (so EXEC answered `-EXECABORT`
    /// and nothing ran), the transaction runs once more at the node named, with `ASKING` before
    /// its MULTI for `ASK` (the flag lasts the whole transaction). Not with a WATCH: the
    /// watched keys are on the old node, so EXEC answers nil, as for a WATCH conflict.
    async fn run(mut self, held: Option<Watch>, addr: std::net::SocketAddr) -> Vec<u8> {
        let mut lease = match lease_for(held, &self.dest, addr, self.resp3).await {
            Ok(l) => l,
            Err(e) => return e.reply().to_vec(),
        };
        let mut asking = false;
        let mut retried = false;
        loop {
            let leases = &self.dest.pool.leases;
            // A host that accepted MULTI before takes it in the same write as the commands
            // (one round trip); the first transaction to a host waits for MULTI's `+OK`.
            let one_write = !asking && leases.accepts_multi(lease.addr());
            if !one_write {
                let accepted = begin(&mut lease, asking).await;
                match &accepted {
                    Ok(()) => leases.note_multi(lease.addr(), true),
                    Err(Some(_)) => leases.note_multi(lease.addr(), false),
                    Err(None) => {}
                }
                match accepted {
                    Ok(()) => {}
                    Err(Some(reply)) => {
                        // Not in MULTI; a WATCH it held ends as at Redis's EXEC abort.
                        let ok = lease.exchange(UNWATCH.to_vec(), 1).await.is_ok();
                        lease.release(ok);
                        return reply;
                    }
                    Err(None) => return UPSTREAM_FAILURE.to_vec(),
                }
            }
            let again = !self.watched && !retried && self.dest.pool.is_redis_cluster();
            let body = if again {
                self.request.clone()
            } else {
                std::mem::take(&mut self.request)
            };
            let request = if one_write {
                let mut r = Vec::with_capacity(MULTI.len() + body.len());
                r.extend_from_slice(MULTI);
                r.extend_from_slice(&body);
                r
            } else {
                body
            };
            let expected = self.replies + usize::from(one_write);
            let mut replies = match lease.exchange(request, expected).await {
                Ok(r) => r,
                // Whether it ran is unknown, as for any write whose reply was lost.
                Err(_) => return UPSTREAM_FAILURE.to_vec(),
            };
            if one_write {
                let multi = if replies.is_empty() {
                    Vec::new()
                } else {
                    replies.remove(0)
                };
                if multi.as_slice() != b"+OK\r\n" {
                    // The host's user lost MULTI since (an ACL change): its commands ran alone.
                    leases.note_multi(lease.addr(), false);
                    lease.release(false);
                    return MULTI_LOST.to_vec();
                }
            }
            // EXEC ends MULTI and every WATCH of the connection: it is clean.
            let from = lease.addr();
            lease.release(true);
            let aborted = replies.last().is_some_and(|r| r.starts_with(b"-EXECABORT"));
            let moved = |r: &Vec<u8>| matches!(r.get(..4), Some(b"-MOV" | b"-ASK"));
            if aborted && self.watched && replies.iter().any(moved) {
                // The watched keys' slot moved: they may have changed at the new owner unseen,
                // so the transaction is aborted as a WATCH conflict is (nil), and the map is
                // refreshed for the client's retry.
                if let Some(r) = replies.iter().find(|r| moved(r)) {
                    let _ = self.dest.pool.lease_redirect(from, r);
                }
                return if self.resp3 {
                    b"_\r\n".to_vec()
                } else {
                    b"*-1\r\n".to_vec()
                };
            }
            let redirect = (again && aborted)
                .then(|| {
                    replies.iter().find_map(|r| {
                        matches!(r.get(..4), Some(b"-MOV" | b"-ASK"))
                            .then(|| self.dest.pool.lease_redirect(from, r))
                            .flatten()
                    })
                })
                .flatten();
            let Some((to, ask)) = redirect else {
                return replies
                    .into_iter()
                    .last()
                    .unwrap_or_else(|| UPSTREAM_FAILURE.to_vec());
            };
            lease = match self.dest.pool.leases.lease(to, self.resp3).await {
                Ok(l) => l,
                Err(e) => return e.reply().to_vec(),
            };
            asking = ask;
            retried = true;
        }
    }
}

/// Opens the transaction on `lease`: `MULTI` alone (after `ASKING` when `asking`), so a
/// backend that refuses it (`-BUSY` while a script runs, `-LOADING`, …) cannot run the queued
/// commands one by one, as it would if they followed in the same write. `Err(Some(reply))`:
/// MULTI was refused, `reply` is Redis's `-EXECABORT … because of: <error>` for EXEC;
/// `Err(None)`: the exchange failed (the lease is closed).
async fn begin(lease: &mut Lease, asking: bool) -> Result<(), Option<Vec<u8>>> {
    let mut out = Vec::with_capacity(MULTI.len() + ASKING.len());
    if asking {
        out.extend_from_slice(ASKING);
    }
    out.extend_from_slice(MULTI);
    match lease.exchange(out, 1 + usize::from(asking)).await {
        Ok(r) if r.last().is_some_and(|r| r.as_slice() == b"+OK\r\n") => Ok(()),
        Ok(r) => Err(Some(
            r.last()
                .map_or_else(Vec::new, |e| multi::execabort_because(e)),
        )),
        Err(_) => Err(None),
    }
}

/// The connection a WATCH already holds, else a new lease to `addr` from `dest`'s pool.
async fn lease_for(
    held: Option<Watch>,
    dest: &Dest,
    addr: std::net::SocketAddr,
    resp3: bool,
) -> Result<Lease, LeaseError> {
    match held {
        Some(w) => Ok(w.lease),
        None => dest.pool.leases.lease(addr, resp3).await,
    }
}

// Keep the slot trait in scope for `push`.
const _: fn(&Sink) -> u64 = |s| Slots::push(s, NO_CMD);

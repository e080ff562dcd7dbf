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

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::multi::{self, EXECABORT, Step};
use super::{Mode, Session};
use crate::cluster::ClusterPool;
use crate::command::{CommandSpec, Request};
use crate::engine::sink::{NO_CMD, Sink};
use crate::engine::worker::ListenerRuntime;
use crate::net::{self, Notify};
use crate::router::dispatch::{Queued, Slots, TxDest};
use crate::upstream::{Deliver, Lease, LeaseError, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};

/// Where a transaction runs, in the worker's pools.
type Dest = TxDest<ClusterPool>;

const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";
const UNWATCH: &[u8] = b"*1\r\n$7\r\nUNWATCH\r\n";

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
}

/// The WATCH of a connection: the leased connection holding it and its keys' backend.
pub(super) struct Watch {
    lease: Lease,
    dest: Dest,
}

/// Holds the session's next request until an upstream exchange has answered.
#[derive(Default)]
pub(super) struct Barrier {
    done: Cell<bool>,
    notify: Notify,
    /// The WATCH lease coming back from the exchange, to keep.
    watch: RefCell<Option<Watch>>,
}

impl Barrier {
    fn open(&self, watch: Option<Watch>) {
        *self.watch.borrow_mut() = watch;
        self.done.set(true);
        self.notify.notify();
    }

    /// Waits until the exchange has answered; returns the WATCH to keep.
    pub(super) async fn wait(&self) -> Option<Watch> {
        while !self.done.get() {
            self.notify.notified().await;
        }
        self.watch.borrow_mut().take()
    }
}

/// The transaction commands, outside MULTI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxCommand {
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
}

impl TxCommand {
    /// The transaction command named `name` (a table row's name).
    pub(super) fn of(name: &str) -> Option<TxCommand> {
        Some(match name {
            "multi" => TxCommand::Multi,
            "exec" => TxCommand::Exec,
            "discard" => TxCommand::Discard,
            "watch" => TxCommand::Watch,
            "unwatch" => TxCommand::Unwatch,
            _ => return None,
        })
    }
}

impl Session {
    /// A transaction command outside MULTI (already resolved, counted and past the auth gate).
    pub(super) fn tx_command(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        which: TxCommand,
    ) {
        match which {
            TxCommand::Multi => {
                self.mode = Mode::Multi(Box::new(Tx {
                    queued: Vec::new(),
                    count: 0,
                    dest: None,
                    discarded: false,
                    runtime: rt.clone(),
                }));
                self.sink.push_local(spec.id, b"+OK\r\n");
            }
            TxCommand::Exec => self
                .sink
                .push_local(spec.id, b"-ERR EXEC without MULTI\r\n"),
            TxCommand::Discard => self
                .sink
                .push_local(spec.id, b"-ERR DISCARD without MULTI\r\n"),
            TxCommand::Unwatch => {
                self.end_watch();
                self.sink.push_local(spec.id, b"+OK\r\n");
            }
            TxCommand::Watch => self.watch(rt, req, spec),
        }
    }

    /// WATCH: leases a connection to the keys' backend (or uses the one a WATCH already holds)
    /// and sends the WATCH there.
    fn watch(&mut self, rt: &Rc<ListenerRuntime>, req: &Request<'_>, spec: &'static CommandSpec) {
        let mut request = Vec::new();
        let so_far = self.watching.as_ref().map(|w| w.dest.clone());
        let dest = match self
            .dispatch(rt)
            .watch(req, spec, so_far.as_ref(), &mut request)
        {
            Queued::No(reply) => return self.sink.push_local(spec.id, &reply),
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
        let barrier = Rc::new(Barrier::default());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        net::spawn(async move {
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
                    barrier.open(Some(Watch { lease, dest }));
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
        let answer: &[u8] = if tx.count >= MAX_QUEUED || tx.queued.len() >= limit {
            tx.discarded = true;
            b"-ERR transaction too large: too many commands or bytes queued since MULTI\r\n"
        } else if spec.is_some_and(|s| s.name == "unwatch") {
            // Queued as Redis does; EXEC unwatches anyway.
            tx.queued.extend_from_slice(UNWATCH);
            tx.count += 1;
            b"+QUEUED\r\n"
        } else {
            match self
                .dispatch(rt)
                .queue(req, spec, so_far.as_ref(), &mut tx.queued)
            {
                Queued::Yes { dest } => {
                    if tx.dest.is_none() {
                        tx.dest = dest;
                    }
                    tx.count += 1;
                    b"+QUEUED\r\n"
                }
                Queued::No(reply) => {
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
            self.end_watch();
            return self.sink.push_local(spec.id, EXECABORT);
        }
        if !Rc::ptr_eq(&tx.runtime, rt) {
            self.end_watch();
            return self.sink.push_local(spec.id, RELOADED);
        }
        // Faults apply to EXEC as to one request: an error fault runs nothing.
        if self.fault(rt, spec.id) {
            self.end_watch();
            return;
        }
        let held = self.watching.take();
        if tx.count == 0 && held.is_none() {
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
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let mut request = tx.queued;
        request.extend_from_slice(EXEC);
        let replies = tx.count + 1;
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::default());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        net::spawn(async move {
            let mut lease = match lease_for(held, &dest, addr, resp3).await {
                Ok(l) => l,
                Err(e) => {
                    sink.deliver(seq, 0, e.reply());
                    return barrier.open(None);
                }
            };
            // MULTI goes alone first: a backend that refuses it (`-BUSY` while a script runs,
            // `-LOADING`, …) would run the queued commands one by one if they followed in the
            // same write. Redis answers such an EXEC `-EXECABORT … because of: <error>`.
            match lease.exchange(MULTI.to_vec(), 1).await {
                Ok(r) if r.first().is_some_and(|r| r.as_slice() == b"+OK\r\n") => {}
                Ok(r) => {
                    let why = r
                        .first()
                        .map_or_else(Vec::new, |e| multi::execabort_because(e));
                    sink.deliver(seq, 0, &why);
                    // Not in MULTI; a WATCH it held ends as at Redis's EXEC abort.
                    let ok = lease.exchange(UNWATCH.to_vec(), 1).await.is_ok();
                    lease.release(ok);
                    return barrier.open(None);
                }
                Err(_) => {
                    sink.deliver(seq, 0, UPSTREAM_FAILURE);
                    return barrier.open(None);
                }
            }
            deliver_exec(&sink, seq, lease.exchange(request, replies).await);
            // EXEC ends MULTI and every WATCH of the connection: it is clean.
            lease.release(true);
            barrier.open(None);
        });
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

/// Answers EXEC's slot `seq` with the last of the exchange's replies (Redis's reply to EXEC;
/// the ones before are `+QUEUED`s or queue-time errors, after which EXEC answers
/// `-EXECABORT`), or `-upstream failure` when the exchange failed (whether the transaction ran
/// is then unknown, as for any write whose reply was lost).
fn deliver_exec(sink: &Sink, seq: u64, replies: std::io::Result<Vec<Vec<u8>>>) {
    match replies.ok().and_then(|mut r| r.pop()) {
        Some(reply) => sink.deliver(seq, 0, &reply),
        None => sink.deliver(seq, 0, UPSTREAM_FAILURE),
    }
}

// Keep the slot trait in scope for `push`.
const _: fn(&Sink) -> u64 = |s| Slots::push(s, NO_CMD);

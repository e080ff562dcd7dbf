//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`, as Redis answers them.
//!
//! A transaction goes whole to one backend (dispatch decides it: one backend, one slot), on a
//! leased connection that the session holds from its first command with a key until EXEC or
//! DISCARD. Its commands go there as they are queued: at the end of each read of the client's
//! requests (a pipelined transaction is one exchange, `MULTI` … `EXEC` in one write) the
//! session sends what it queued since the last one, after `MULTI` the first time, so each
//! command's reply is the backend's own `+QUEUED` or queue-time error (`-BUSY` of a running
//! script, `-OOM`, `-NOPERM`, a wrong type of `WATCH`ed … whatever Redis says).
//!
//! Until the backend is known (commands without keys before the first with one) the session
//! answers `+QUEUED` itself and sends those commands first, when it is. Errors the session
//! finds itself (keys on two backends: `-CROSSSLOT`; commands that cannot run in a transaction
//! through a proxy; unknown commands, wrong arity) are answered at once and discard the
//! transaction: EXEC answers `-EXECABORT` and `DISCARD`s it at the backend. Nothing runs until
//! EXEC reaches the backend, so a transaction discarded for any reason (those errors, DISCARD,
//! the client leaving, the backend's connection lost, a reload) runs nothing.
//!
//! `WATCH` leases a connection to its keys' backend and keeps it until EXEC, DISCARD, UNWATCH or
//! RESET: Redis tracks watched keys per connection, so the transaction must run on the same one.
//!
//! These exchanges hold the session's later requests until they are answered (a barrier), so a
//! pipelined `GET` after `EXEC` sees the transaction's writes, as it would at Redis.

use std::cell::RefCell;
use std::rc::Rc;

mod commands;
mod exchange;
mod mirror;

use super::barrier::Barrier;
use super::large::{self, LARGE_REQUEST};
use super::multi::{EXECABORT, Step};
use super::{Mode, Session};
use crate::cluster::ClusterPool;
use crate::command::{CommandSpec, Kind, Request, Transaction};
use crate::engine::sink::NO_CMD;
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::router::dispatch::{CROSSSLOT, Client, Queued, Slots, TxDest, TxMirrors};
use crate::upstream::{Deliver, Lease, LeaseError, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};
use commands::Commands;
use exchange::{DISCARD, Exchange, Outcome, UNWATCH};

/// Where a transaction runs, in the worker's pools.
type Dest = TxDest<ClusterPool>;

/// EXEC of a transaction whose listener was reloaded while it was queued: its routes may not
/// exist any more, so nothing of it runs.
const RELOADED: &[u8] = b"-EXECABORT Transaction discarded because the listener's \
configuration was reloaded while it was queued\r\n";

/// A command that would take its transaction past the worker's share of
/// `maxmemory_clients`: the transaction is discarded.
const OVER_BUDGET: &[u8] = b"-ERR transaction too large: its commands would pass the worker's \
share of maxmemory_clients\r\n";

/// The most commands one transaction may queue; past it the transaction is discarded.
pub(super) const MAX_QUEUED: usize = 1 << 20;

/// A transaction being queued (the connection is in [`Mode::Multi`]).
pub(super) struct Tx {
    /// Every command queued, as forwarded: what a mirror copies, and what a move to another
    /// Redis Cluster node re-sends.
    queued: Rc<RefCell<Commands>>,
    count: usize,
    /// The commands queued since the last exchange with the backend…
    unsent: Commands,
    /// …and per command the client's reply slot (`None`: answered `+QUEUED` by the session,
    /// before the backend was known).
    slots: Vec<Option<u64>>,
    /// The backend of the commands queued so far that have keys.
    dest: Option<Dest>,
    /// A queue-time error the session found: EXEC answers `-EXECABORT`.
    discarded: bool,
    /// Some command went to the backend: the transaction is open on the session's held
    /// connection, or was lost with it (EXEC then answers `-EXECABORT`).
    opened: bool,
    /// The listener's runtime at MULTI: EXEC under another one (a reload) runs nothing.
    runtime: Rc<ListenerRuntime>,
    /// Where a committed copy goes in the mirrors of the transaction's route.
    mirrors: TxMirrors,
    /// The listener was reloaded after MULTI or WATCH: EXEC answers [`RELOADED`].
    stale: bool,
}

/// The leased connection a session holds between requests: a WATCH's, a transaction's open at
/// its backend, or both.
pub(super) struct Watch {
    pub(super) lease: Lease,
    /// The backend of its keys.
    pub(super) dest: Dest,
    /// The listener's runtime when it was leased: a transaction under another one (a reload)
    /// runs nothing.
    runtime: Rc<ListenerRuntime>,
    /// A WATCH holds keys on it.
    watched: bool,
    /// MULTI is open on it.
    multi: bool,
    /// A queued command of its watched transaction was redirected: EXEC answers nil.
    moved: bool,
    /// Its transaction was moved here from another Redis Cluster node: it is not moved again.
    retried: bool,
}

impl Tx {
    /// True when the transaction went to its backend and is no longer open there (`held`: the
    /// session's held connection): its connection was lost or its MULTI refused, and the
    /// commands' clients had the error. It must not open again with only the later commands.
    fn lost(&self, held: Option<&Watch>) -> bool {
        self.opened && !held.is_some_and(|w| w.multi)
    }

    /// The transaction ends (or its client does) before its latest commands went to the
    /// backend: they run nowhere, and their clients get the `+QUEUED` the session found valid
    /// (a queue-time error only the backend would give cannot matter to a transaction that
    /// never runs).
    fn answer_unsent(&mut self, sink: &crate::engine::sink::Sink) {
        for seq in self.slots.drain(..).flatten() {
            sink.deliver(seq, 0, b"+QUEUED\r\n");
        }
        self.unsent.clear();
    }
}

impl Watch {
    /// A new lease to `addr` of `dest`'s pool, holding nothing yet.
    ///
    /// Errors: as [`crate::upstream::LeasePool::lease`].
    async fn lease(
        dest: &Dest,
        addr: std::net::SocketAddr,
        resp3: bool,
        runtime: &Rc<ListenerRuntime>,
    ) -> Result<Watch, LeaseError> {
        let lease = dest.pool.leases.lease(addr, resp3).await?;
        Ok(Watch {
            lease,
            dest: dest.clone(),
            runtime: runtime.clone(),
            watched: false,
            multi: false,
            moved: false,
            retried: false,
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
        which: Transaction,
    ) {
        match which {
            Transaction::Multi => {
                self.mode = Mode::Multi(Box::new(Tx {
                    queued: Rc::default(),
                    count: 0,
                    unsent: Commands::default(),
                    slots: Vec::new(),
                    dest: None,
                    discarded: false,
                    opened: false,
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
            let mut w = match held {
                Some(w) => w,
                None => match Watch::lease(&dest, addr, resp3, &runtime).await {
                    Ok(w) => w,
                    Err(e) => {
                        sink.deliver(seq, 0, e.reply());
                        return barrier.open(None);
                    }
                },
            };
            match w.lease.exchange(request, 1).await {
                Ok(mut replies) => {
                    let reply = replies.pop().unwrap_or_default();
                    // A refused WATCH watches nothing new; what an earlier one watched stays.
                    w.watched |= reply.first() == Some(&b'+');
                    sink.deliver(seq, 0, &reply);
                    barrier.open(Some(w));
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

    /// Ends what the connection holds at its backend, if anything: `DISCARD` of an open
    /// transaction (it ends the WATCH too) or `UNWATCH`; the leased connection then goes back
    /// to the pool (or is closed if that fails).
    pub(super) fn end_watch(&mut self) {
        if let Some(mut w) = self.watching.take() {
            let end = if w.multi { DISCARD } else { UNWATCH };
            net::spawn(async move {
                let ok = w.lease.exchange(end.to_vec(), 1).await.is_ok();
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
        match super::multi::step(req.argc(), req.argv(), custom) {
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
                    self.end_tx();
                }
                self.sink.push_local(cmd, &reply);
                None
            }
            Step::Run { ends } => {
                // RESET ends the transaction; QUIT the connection, after its reply.
                self.answer_unsent();
                if ends {
                    self.end_tx();
                }
                Some(req)
            }
            Step::Discard(spec) => {
                count(spec.id);
                self.end_tx();
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

    /// Ends the transaction without running it: the commands not sent yet get their
    /// `+QUEUED`, and what the backend holds (its MULTI, a WATCH) is discarded.
    fn end_tx(&mut self) {
        self.answer_unsent();
        self.mode = Mode::Shared;
        self.end_watch();
    }

    /// The commands queued since the last exchange, if the transaction is still open, are
    /// answered by the session (the transaction or its client is ending).
    pub(super) fn answer_unsent(&mut self) {
        if let Mode::Multi(tx) = &mut self.mode {
            tx.answer_unsent(&self.sink);
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
        if tx.count >= MAX_QUEUED || tx.queued.borrow().len() >= limit {
            tx.discarded = true;
            self.mode = Mode::Multi(tx);
            return self.sink.push_local(
                cmd,
                b"-ERR transaction too large: too many commands or bytes queued since MULTI\r\n",
            );
        }
        // A transaction holds its commands until EXEC, in the worker's memory budget: one
        // that cannot fit in it is refused now, rather than its client evicted for it.
        let budget = self.sink.memory_limit();
        let size = req.frame().map_or(req.bytes().len(), <[u8]>::len);
        if budget > 0 && tx.queued.borrow().len().saturating_add(size) > budget {
            tx.discarded = true;
            self.mode = Mode::Multi(tx);
            return self.sink.push_local(cmd, OVER_BUDGET);
        }
        // A large command (a 256 MiB `SET`) is queued as the client's frame itself, which the
        // read loop hands over (`queue_frame`), with its keys in their forwarded form where its
        // route rewrites them: copied into the queue, and again for the re-send, it stalled
        // the worker's other clients.
        let large = req
            .frame()
            .is_some_and(|f| {
                f.len() >= LARGE_REQUEST && std::ptr::eq(f.as_ptr(), req.bytes().as_ptr())
            })
            .then(|| match spec {
                _ if !rt.router.rewrites() => Some(Vec::new()),
                Some(spec) => self.dispatch(rt).queued_keys_forwarded(req, spec),
                None => None,
            })
            .flatten()
            .and_then(|forwarded| large::whole_pieces(req, &forwarded));
        let from = tx.unsent.own().len();
        let placed = if spec.is_some_and(|s| s.kind == Kind::Transaction(Transaction::Unwatch)) {
            // Queued as Redis does; EXEC unwatches anyway.
            tx.unsent.own().extend_from_slice(UNWATCH);
            Queued::Yes { dest: None }
        } else {
            let out = large.is_none().then(|| tx.unsent.own());
            self.dispatch(rt)
                .queue(req, spec, so_far.as_ref(), out, &mut tx.mirrors)
        };
        match placed {
            Queued::Yes { dest } => {
                if tx.dest.is_none() {
                    tx.dest = dest;
                }
                if large.is_some() {
                    self.multi_frame = large;
                } else {
                    tx.queued
                        .borrow_mut()
                        .own()
                        .extend_from_slice(tx.unsent.tail(from));
                }
                tx.count += 1;
                if tx.dest.is_some() || so_far.is_some() {
                    // Its reply comes from the backend, at the end of this read.
                    tx.slots.push(Some(self.sink.push(cmd)));
                } else {
                    tx.slots.push(None);
                    self.sink.push_local(cmd, b"+QUEUED\r\n");
                }
            }
            Queued::No(reply) => {
                if *reply == *CROSSSLOT {
                    rt.stats.tx_cross_slot.inc();
                }
                tx.discarded = true;
                self.sink.push_local(cmd, &reply);
            }
        }
        self.mode = Mode::Multi(tx);
    }

    /// Queues `frame`, the whole frame of the large command [`Session::queue`] just placed,
    /// as the pieces it cut (`multi_frame`: ranges of the frame, keys as their route rewrites
    /// them): taken, not copied; its memory counts as the session's in the worker's budget
    /// until the transaction and its copies let it go.
    pub(super) fn queue_frame(&mut self, frame: Vec<u8>) {
        let pieces = self.multi_frame.take().unwrap_or_default();
        let Mode::Multi(tx) = &mut self.mode else {
            return;
        };
        match Commands::frame(frame, pieces, &self.sink) {
            Some(frame) => {
                tx.unsent.append(&frame);
                tx.queued.borrow_mut().append(&frame);
            }
            None => {
                // Never sent, so refused as a queue-time error: the transaction is discarded.
                if let Some(Some(seq)) = tx.slots.pop() {
                    self.sink
                        .deliver(seq, 0, b"-ERR the command could not be queued\r\n");
                }
                tx.slots.push(None);
                tx.discarded = true;
            }
        }
    }

    /// At the end of a read inside MULTI: sends the commands queued since the last exchange to
    /// the transaction's backend, so the client gets the backend's reply to each; the session
    /// waits for them (a barrier) before it reads on.
    pub(super) fn send_queued(&mut self) {
        let Mode::Multi(tx) = &mut self.mode else {
            return;
        };
        if !tx.slots.iter().any(Option::is_some) {
            return;
        }
        if tx.lost(self.watching.as_ref()) {
            // Discarded, as at Redis after a queue-time error.
            tx.discarded = true;
            return tx.answer_unsent(&self.sink);
        }
        let held = self.watching.take();
        let Some(dest) = held.as_ref().map(|w| w.dest.clone()).or(tx.dest.clone()) else {
            return;
        };
        let Some(addr) = held
            .as_ref()
            .map(|w| w.lease.addr())
            .or_else(|| dest.pool.primary_addr(dest.shard))
        else {
            for seq in tx.slots.drain(..).flatten() {
                self.sink.deliver(seq, 0, NO_UPSTREAM_HOST);
            }
            tx.unsent.clear();
            tx.discarded = true;
            return;
        };
        tx.opened = true;
        let run = Exchange {
            dest,
            resp3: self.conn.resp3,
            runtime: tx.runtime.clone(),
            unsent: std::mem::take(&mut tx.unsent),
            slots: std::mem::take(&mut tx.slots),
            queued: tx.queued.clone(),
            count: tx.count,
            exec: false,
            sink: self.sink.clone(),
        };
        let first = run.slots.iter().flatten().next().copied();
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        net::spawn(async move {
            if let Some(seq) = first {
                run.sink.answered_before(seq).await;
            }
            match run.run(held, addr).await {
                Outcome::Open(w) => barrier.open(Some(w)),
                Outcome::Lost | Outcome::Exec(_) => barrier.open(None),
            }
        });
    }

    /// EXEC inside MULTI: runs the transaction on its backend, or answers why it does not run.
    fn exec(&mut self, rt: &Rc<ListenerRuntime>, spec: &'static CommandSpec) {
        let Mode::Multi(mut tx) = std::mem::take(&mut self.mode) else {
            return;
        };
        let lost = tx.lost(self.watching.as_ref());
        if tx.discarded || lost {
            rt.stats.tx_aborted.inc();
            tx.answer_unsent(&self.sink);
            self.end_watch();
            return self.sink.push_local(spec.id, EXECABORT);
        }
        let watch_reloaded = self
            .watching
            .as_ref()
            .is_some_and(|w| !Rc::ptr_eq(&w.runtime, rt));
        if tx.stale || watch_reloaded || !Rc::ptr_eq(&tx.runtime, rt) {
            rt.stats.tx_aborted.inc();
            tx.answer_unsent(&self.sink);
            self.end_watch();
            return self.sink.push_local(spec.id, RELOADED);
        }
        // Faults apply to EXEC as to one request: an error fault runs nothing.
        if self.fault(rt, spec.id) {
            rt.stats.tx_aborted.inc();
            tx.answer_unsent(&self.sink);
            self.end_watch();
            return;
        }
        let held = self.watching.take();
        if tx.count == 0 && held.is_none() {
            rt.stats.tx_committed.inc();
            return self.sink.push_local(spec.id, b"*0\r\n");
        }
        let dest = held
            .as_ref()
            .map(|w| w.dest.clone())
            .or(tx.dest)
            .or_else(|| self.dispatch(rt).keyless_dest());
        let addr = held
            .as_ref()
            .map(|w| w.lease.addr())
            .or_else(|| dest.as_ref().and_then(|d| d.pool.primary_addr(d.shard)));
        let (Some(dest), Some(addr)) = (dest, addr) else {
            drop(held);
            rt.stats.tx_aborted.inc();
            for seq in tx.slots.iter().flatten() {
                self.sink.deliver(*seq, 0, NO_UPSTREAM_HOST);
            }
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let copies = mirror::mirror_copies(rt, &dest, &tx.mirrors, &tx.queued.borrow());
        let count = tx.count;
        let run = Exchange {
            dest,
            resp3: self.conn.resp3,
            runtime: tx.runtime,
            unsent: tx.unsent,
            slots: tx.slots,
            queued: tx.queued,
            count,
            exec: true,
            sink: self.sink.clone(),
        };
        let first = run.slots.iter().flatten().next().copied();
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        let stats = (rt.stats.tx_committed.clone(), rt.stats.tx_aborted.clone());
        let client = Client {
            session: self.id,
            resp3: self.conn.resp3,
        };
        self.sink.executing(true);
        net::spawn(async move {
            let sink = run.sink.clone();
            sink.answered_before(first.unwrap_or(seq)).await;
            let reply = match run.run(held, addr).await {
                Outcome::Exec(reply) => reply,
                // An exchange with EXEC always ends with EXEC's reply.
                Outcome::Open(_) | Outcome::Lost => UPSTREAM_FAILURE.to_vec(),
            };
            let committed = mirror::committed(&reply);
            if committed {
                stats.0.inc();
            } else {
                stats.1.inc();
            }
            sink.deliver(seq, 0, &reply);
            // The client has its reply; its next requests wait for the mirrors' copies, so
            // that their own copies cannot overtake them. The replies corked behind this
            // barrier (the `+QUEUED`s and EXEC's array) go out now, not once a slow mirror
            // has answered.
            if committed && !copies.is_empty() {
                sink.uncork();
                for copy in copies {
                    copy.send(count, client).await;
                }
            }
            sink.executing(false);
            barrier.open(None);
        });
    }
}

// Keep the slot trait in scope for `push`.
const _: fn(&crate::engine::sink::Sink) -> u64 = |s| Slots::push(s, NO_CMD);

//! One exchange of a transaction with its backend, on a leased connection: the commands queued
//! since the last one (their replies, `+QUEUED` or the backend's queue-time error, go to the
//! client), after `MULTI` when the transaction is not open there yet, and `EXEC` when the client
//! sent it.
//!
//! Redis Cluster: a queued command answered with `MOVED`/`ASK` (the node flagged the
//! transaction, nothing will run there) moves the whole transaction once to the node named,
//! re-sending every command queued so far (after `ASKING` for `ASK`: inside MULTI the flag lasts
//! until EXEC); the client sees the new node's replies. Not with a WATCH: the watched keys are on
//! the old node, so EXEC answers nil, as for a WATCH conflict, and the map is refreshed for the
//! client's retry.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use super::commands::Commands;
use super::{Dest, Watch};
use crate::engine::session::multi::{self, EXECABORT};
use crate::engine::sink::Sink;
use crate::engine::worker::ListenerRuntime;
use crate::upstream::{Deliver, Lease, Piece, UPSTREAM_FAILURE};

pub(super) const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
pub(super) const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";
pub(super) const DISCARD: &[u8] = b"*1\r\n$7\r\nDISCARD\r\n";
pub(super) const UNWATCH: &[u8] = b"*1\r\n$7\r\nUNWATCH\r\n";
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
const QUEUED: &[u8] = b"+QUEUED\r\n";

/// The reply to every command of a transaction whose host, having accepted MULTI before,
/// refused it in the same write as the commands: they ran, one by one, outside a transaction.
const MULTI_LOST: &[u8] = b"-ERR the backend refused MULTI (its user may no longer run it): the \
transaction's commands ran one by one, outside a transaction\r\n";

/// What a transaction exchange sends, and where its replies go.
pub(super) struct Exchange {
    pub dest: Dest,
    pub resp3: bool,
    /// The listener's runtime of the transaction (kept with the connection it opens).
    pub runtime: Rc<ListenerRuntime>,
    /// The commands to send now, as forwarded…
    pub unsent: Commands,
    /// …and per command the client's reply slot (`None`: answered `+QUEUED` before the
    /// backend was known; its reply is read, not passed on).
    pub slots: Vec<Option<u64>>,
    /// Every command queued so far, `unsent` included, and how many: what a move to another
    /// Redis Cluster node re-sends.
    pub queued: Rc<RefCell<Commands>>,
    pub count: usize,
    /// `EXEC` follows the commands.
    pub exec: bool,
    pub sink: Rc<Sink>,
}

/// How an exchange ended.
pub(super) enum Outcome {
    /// The transaction is open on this connection, waiting for more commands.
    Open(Watch),
    /// The connection is gone (closed: its host discards the transaction, so nothing ran), or
    /// MULTI was refused; the client had its replies.
    Lost,
    /// EXEC's reply for the client; the connection went back to the pool.
    Exec(Vec<u8>),
}

impl Exchange {
    /// Runs the exchange on the connection `held` (a WATCH's, or one where the transaction is
    /// open), else on a new lease to `addr`; delivers each command's reply to its slot.
    pub(super) async fn run(mut self, held: Option<Watch>, addr: SocketAddr) -> Outcome {
        let mut w = match held {
            Some(w) => w,
            None => match Watch::lease(&self.dest, addr, self.resp3, &self.runtime).await {
                Ok(w) => w,
                Err(e) => return self.refuse(e.reply(), false),
            },
        };
        let leases = &self.dest.pool.leases;
        // A host that accepted MULTI before takes it in the same write as the commands (one
        // round trip); the first transaction to a host sends it alone and waits for `+OK`, so
        // a host that refuses it (an ACL) never runs the commands one by one.
        let one_write = !w.multi && leases.accepts_multi(w.lease.addr());
        if !w.multi && !one_write {
            match begin(&mut w.lease, false).await {
                Ok(()) => leases.note_multi(w.lease.addr(), true),
                Err(Some(error)) => {
                    leases.note_multi(w.lease.addr(), false);
                    return self.multi_refused(w, &error).await;
                }
                Err(None) => return self.refuse(UPSTREAM_FAILURE, false),
            }
        }
        let before = if one_write { MULTI } else { b"" };
        let after = if self.exec { EXEC } else { b"" };
        let request = self.unsent.framed(before, after);
        self.unsent.clear();
        let expected = usize::from(one_write) + self.slots.len() + usize::from(self.exec);
        let mut replies = match send(&mut w.lease, request, expected).await {
            Ok(r) => r.into_iter(),
            // Before EXEC, a closed connection discards the transaction at its host; after,
            // whether it ran is unknown, as for any write whose reply was lost.
            Err(_) => return self.refuse(UPSTREAM_FAILURE, true),
        };
        if one_write && replies.next().as_deref() != Some(b"+OK\r\n") {
            // The host's user lost MULTI since (an ACL change): the commands ran alone.
            leases.note_multi(w.lease.addr(), false);
            w.lease.release(false);
            return self.refuse(MULTI_LOST, true);
        }
        w.multi = true;
        let mut replies: Vec<Vec<u8>> = replies.collect();
        let exec_reply = if self.exec { replies.pop() } else { None };
        if let Some(redirect) = replies.iter().find(|r| is_redirect(r)).cloned() {
            let from = w.lease.addr();
            if w.watched {
                // The watched keys' slot moved: they may change at the new owner unseen. The
                // transaction ends as a WATCH conflict does (EXEC nil); the refreshed map sends
                // the client's retry to the new owner.
                let _ = self.dest.pool.lease_redirect(from, &redirect);
                w.moved = true;
                for r in replies.iter_mut().filter(|r| is_redirect(r)) {
                    *r = QUEUED.to_vec();
                }
            } else if !w.retried
                && let Some((to, ask)) = self.dest.pool.lease_redirect(from, &redirect)
            {
                return self.moved(w, to, ask).await;
            }
        }
        self.deliver_each(&replies);
        match exec_reply {
            None => Outcome::Open(w),
            Some(reply) => Outcome::Exec(w.finish(reply, self.resp3)),
        }
    }

    /// Moves the transaction to Redis Cluster node `to` (`ask`: after `ASKING`) once: ends it
    /// at the old node, opens it at `to` and sends every command queued so far.
    async fn moved(self, mut w: Watch, to: SocketAddr, ask: bool) -> Outcome {
        if self.exec {
            // EXEC answered (EXECABORT: a queued command was redirected) and ended it.
            w.lease.release(true);
        } else {
            let ok = w.lease.exchange(DISCARD.to_vec(), 1).await.is_ok();
            w.lease.release(ok);
        }
        let mut w = match Watch::lease(&self.dest, to, self.resp3, &self.runtime).await {
            Ok(w) => w,
            Err(e) => return self.refuse(e.reply(), false),
        };
        w.retried = true;
        match begin(&mut w.lease, ask).await {
            Ok(()) => {}
            Err(Some(error)) => return self.multi_refused(w, &error).await,
            Err(None) => return self.refuse(UPSTREAM_FAILURE, false),
        }
        w.multi = true;
        let after = if self.exec { EXEC } else { b"" };
        let request = self.queued.borrow().framed(b"", after);
        let expected = self.count + usize::from(self.exec);
        let mut replies = match send(&mut w.lease, request, expected).await {
            Ok(r) => r,
            Err(_) => return self.refuse(UPSTREAM_FAILURE, true),
        };
        let exec_reply = if self.exec { replies.pop() } else { None };
        // The commands of earlier exchanges had their `+QUEUED` from the old node; if the new
        // one refuses one of them now, it flags the transaction and EXEC says so.
        let earlier = replies.len().saturating_sub(self.slots.len());
        self.deliver_each(replies.get(earlier..).unwrap_or_default());
        match exec_reply {
            None => Outcome::Open(w),
            Some(reply) => Outcome::Exec(w.finish(reply, self.resp3)),
        }
    }

    /// MULTI was refused with `error` on `w`: it is not in a transaction, so nothing is sent.
    /// Every command gets the refusal, EXEC Redis's `-EXECABORT … because of: <error>`; a
    /// WATCH it held ends, as at Redis's EXEC abort.
    async fn multi_refused(self, mut w: Watch, error: &[u8]) -> Outcome {
        let ok = w.lease.exchange(UNWATCH.to_vec(), 1).await.is_ok();
        w.lease.release(ok);
        self.answer_all(error);
        if self.exec {
            Outcome::Exec(multi::execabort_because(error))
        } else {
            Outcome::Lost
        }
    }

    /// The exchange failed with `reply`: every command gets it. EXEC gets Redis's
    /// `-EXECABORT` when it was never written and a command got the error (a queue-time error:
    /// nothing ran), else `reply` (`sent`: whether it ran is unknown, as for any write whose
    /// reply was lost).
    fn refuse(&self, reply: &[u8], sent: bool) -> Outcome {
        self.answer_all(reply);
        if !self.exec {
            Outcome::Lost
        } else if !sent && self.slots.iter().any(Option::is_some) {
            Outcome::Exec(EXECABORT.to_vec())
        } else {
            Outcome::Exec(reply.to_vec())
        }
    }

    fn answer_all(&self, reply: &[u8]) {
        for seq in self.slots.iter().flatten() {
            self.sink.deliver(*seq, 0, reply);
        }
    }

    /// Delivers `replies[i]` to slot `i` where one waits.
    fn deliver_each(&self, replies: &[Vec<u8>]) {
        for (slot, reply) in self.slots.iter().zip(replies) {
            if let Some(seq) = slot {
                self.sink.deliver(*seq, 0, reply);
            }
        }
        // Fewer replies than slots cannot come from a complete exchange; answered anyway.
        for seq in self.slots.iter().skip(replies.len()).flatten() {
            self.sink.deliver(*seq, 0, UPSTREAM_FAILURE);
        }
    }
}

impl Watch {
    /// EXEC answered `reply` on this connection, ending its MULTI and WATCH: it goes back to the
    /// pool. Returns the client's reply: nil for a transaction whose watched keys moved.
    fn finish(self, reply: Vec<u8>, resp3: bool) -> Vec<u8> {
        let moved = self.moved && reply.starts_with(b"-EXECABORT");
        self.lease.release(true);
        match (moved, resp3) {
            (true, true) => b"_\r\n".to_vec(),
            (true, false) => b"*-1\r\n".to_vec(),
            (false, _) => reply,
        }
    }
}

/// Sends `request` ([`Commands::framed`]: one buffer, or pieces holding large frames) on
/// `lease` and reads `expected` replies.
async fn send(
    lease: &mut Lease,
    request: Result<Vec<Piece>, Vec<u8>>,
    expected: usize,
) -> std::io::Result<Vec<Vec<u8>>> {
    match request {
        Err(bytes) => lease.exchange(bytes, expected).await,
        Ok(pieces) => lease.exchange_pieces(&pieces, expected).await,
    }
}

/// True for a Redis Cluster redirect reply.
fn is_redirect(reply: &[u8]) -> bool {
    matches!(reply.get(..4), Some(b"-MOV" | b"-ASK"))
}

/// Opens the transaction on `lease`: `MULTI` alone (after `ASKING` when `asking`), so a
/// backend that refuses it (`-NOPERM`, `-LOADING`, …) cannot run the queued commands one by
/// one, as it would if they followed in the same write. `Err(Some(error))`: MULTI was refused
/// with `error`; `Err(None)`: the exchange failed (the lease is closed).
async fn begin(lease: &mut Lease, asking: bool) -> Result<(), Option<Vec<u8>>> {
    let mut out = Vec::with_capacity(MULTI.len() + ASKING.len());
    if asking {
        out.extend_from_slice(ASKING);
    }
    out.extend_from_slice(MULTI);
    match lease.exchange(out, 1 + usize::from(asking)).await {
        Ok(mut r) => match r.pop() {
            Some(ok) if ok.as_slice() == b"+OK\r\n" => Ok(()),
            Some(error) => Err(Some(error)),
            None => Err(None),
        },
        Err(_) => Err(None),
    }
}

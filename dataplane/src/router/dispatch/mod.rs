//! Dispatch: where a resolved request goes and in how many pieces. Keyed commands go whole to
//! the shard of their keys, multi-key commands are split per shard and merged, fan-out commands
//! go to every node, SCAN walks the nodes one cursor at a time, and mirrors get their copies.
//!
//! Dispatch decides and hands the work to two small interfaces: the session's reply slots
//! ([`Slots`]: ordered slots a reply fills) and the pools ([`Pool`]: place a key, send to a
//! host). It owns no socket and no task, so every rule here is tested with fakes of both.

mod fanout;
mod fault;
mod keyed;
mod mirror;
mod pool;
mod scan;
mod split;
#[cfg(test)]
mod tests;
mod transaction;

use std::ops::Range;
use std::rc::Rc;
use std::time::Duration;

pub use fault::apply as apply_fault;
pub use keyed::Whole;
pub use mirror::MirrorDest;
pub use split::{MirrorParts, SplitWhole};
pub use transaction::{MirrorPlace, Queued, TxDest, TxMirrors};

use super::Router;
use crate::cluster::{ClusterPool, Dest};
use crate::command::Request;
use crate::command::split::Part;
use crate::command::{CommandSpec, Kind, Merge};
use crate::upstream::{Deliver, SendError, Target};

/// The reply to a command whose keys are on different shards (Redis Cluster's text, which
/// cluster-aware clients already understand).
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// The client a request comes from, as the pools see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The session's id: it picks the session's connection among a host's connections, so its
    /// requests to a host stay in order.
    pub session: u64,
    /// The client speaks RESP3 (`HELLO 3`): its replies must come from RESP3 connections.
    pub resp3: bool,
}

/// The reply slots of a session: one slot per request, in request order; replies fill them in
/// whatever order they come. Implemented by the session's reply queue; replies come back
/// through [`Deliver`] (the slot's `seq`, and the part of a split slot).
pub trait Slots: Deliver + 'static {
    /// Takes the next slot for a request of command `cmd` (its table id); returns its sequence.
    fn push(&self, cmd: u16) -> u64;
    /// Turns slot `seq` into a split slot waiting for one reply per part, merged by `merge`
    /// (`nkeys`: the keys of the client's request).
    fn split(&self, seq: u64, merge: Merge, nkeys: usize, parts: Vec<Part>);
    /// Holds the reply of the next slot pushed for `delay` after it arrives (a fault delay).
    fn hold_next(&self, delay: Duration);
    /// Takes a slot and answers it at once with `reply` (a whole RESP reply).
    fn local(&self, cmd: u16, reply: &[u8]) {
        let seq = self.push(cmd);
        self.deliver(seq, 0, reply);
    }
}

/// The hosts of one cluster as dispatch sees them. Implemented by [`ClusterPool`].
pub trait Pool {
    /// Where `key` (its hashed part: the listener's hash-tag rule is already applied) goes: the
    /// [`Dest::Key`] value, or `None` when no host takes it now.
    fn place(&self, key: &[u8]) -> Option<usize>;
    /// How many nodes a fan-out command goes to ([`Dest::Node`] `0..nodes()`).
    fn nodes(&self) -> usize;
    /// Where every classic pub/sub channel lives when the pool keeps them in one place (a
    /// [`Dest::Key`] value): a Redis Cluster delivers classic messages to every node, so one
    /// node can hold every subscription and take every `PUBLISH`, which then keeps its order
    /// and counts as on one server. `None`: a channel is placed like a key.
    fn classic_pubsub(&self) -> Option<usize> {
        None
    }
    /// Where a `PUBLISH` (`classic`) or `SPUBLISH` goes whatever its channel, where its
    /// subscribers are: [`Pool::classic_pubsub`] for a classic channel by default. `None`: the
    /// channel is placed like a key.
    fn pubsub_home(&self, classic: bool) -> Option<usize> {
        if classic { self.classic_pubsub() } else { None }
    }
    /// Queues `request` for `dest`; its reply goes to `target`. `read`: a read command, which a
    /// pool may send to a replica.
    ///
    /// Errors: the pool cannot take it ([`SendError::reply`] is the client's answer).
    fn send(
        &self,
        dest: Dest,
        client: Client,
        read: bool,
        request: &[u8],
        target: Target,
    ) -> Result<(), SendError>;
}

/// How a command that goes upstream is dispatched (the upstream kinds of [`Kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// Whole, to the shard of its keys.
    Keyed,
    /// Split per shard, replies merged.
    Split(Merge),
    /// To every node, replies merged.
    FanOut(Merge),
    /// To the node the cursor names.
    Scan,
}

impl Upstream {
    /// How a command of `kind` goes upstream; `None` for the kinds the session answers itself
    /// (local, refused, container).
    #[inline]
    pub fn of(kind: Kind) -> Option<Upstream> {
        match kind {
            Kind::Keyed => Some(Upstream::Keyed),
            Kind::Split(m) => Some(Upstream::Split(m)),
            Kind::FanOut(m) => Some(Upstream::FanOut(m)),
            Kind::Scan => Some(Upstream::Scan),
            Kind::Local(_)
            | Kind::Refused(_)
            | Kind::Transaction(_)
            | Kind::Container
            | Kind::Blocking
            | Kind::ScriptControl
            | Kind::ClientUnblock
            | Kind::PubSub(_) => None,
        }
    }
}

/// Buffers a session lends dispatch, reused from request to request so that the steady path
/// allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    /// An inline request re-encoded as RESP.
    encoded: Vec<u8>,
    /// The argument indexes of a request's keys.
    key_idx: Vec<usize>,
    /// A request whose keys a route rewrites: its arguments and their ranges.
    rw_buf: Vec<u8>,
    rw_args: Vec<Range<usize>>,
}

/// One request's dispatch: the listener's routes, its hash-tag rule, the client, the session's
/// reply slots and its scratch buffers. Made per request on the stack.
pub struct Dispatch<'d, S, P = ClusterPool> {
    /// The listener's routing table.
    pub router: &'d Router<P>,
    /// The listener's `hash_tag` (`enable_hashtagging`: `{}`): keys are placed by the part
    /// it delimits ([`crate::cluster::hash_tag`]), else by the whole key.
    pub hash_tag: Option<[u8; 2]>,
    /// Who sends.
    pub client: Client,
    /// The session's reply slots.
    pub slots: &'d Rc<S>,
    /// The session's reused buffers.
    pub scratch: &'d mut Scratch,
}

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// Dispatches `req`, a command of row `spec`, the way `how` says (`how` is
    /// [`Upstream::of`] of `spec.kind`).
    #[inline]
    pub fn run(&mut self, req: &Request<'_>, spec: &'static CommandSpec, how: Upstream) {
        match how {
            Upstream::Keyed => self.keyed(req, spec),
            Upstream::Split(merge) => self.split(req, spec, merge),
            Upstream::FanOut(merge) => self.fan_out(req, spec, merge),
            Upstream::Scan => self.scan(req, spec),
        }
    }

    /// Where `key` goes in `pool`, after the listener's hash-tag rule.
    #[inline]
    fn place(&self, pool: &P, key: &[u8]) -> Option<usize> {
        pool.place(crate::cluster::hash_tag(self.hash_tag, key))
    }

    /// A reply target in this session's slots.
    #[inline]
    fn target(&self, seq: u64, part: u32, cmd: u16) -> Target {
        Target {
            sink: self.slots.clone(),
            seq,
            part,
            cmd,
            script: crate::command::runs_script(cmd),
        }
    }

    /// Sends `parts` (one sub-request each; `dest_of` names each part's pool and destination,
    /// `None`: no host, the part fails with `no upstream host`) and merges their replies into
    /// one slot of command `cmd`.
    fn send_parts<'p>(
        &mut self,
        cmd: u16,
        read: bool,
        merge: Merge,
        nkeys: usize,
        mut parts: Vec<Part>,
        dest_of: impl Fn(&Part) -> Option<(&'p P, Dest)>,
    ) where
        P: 'p,
    {
        let seq = self.slots.push(cmd);
        let mut failed = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let target = self.target(seq, i as u32, cmd);
            let sent = match dest_of(part) {
                Some((pool, dest)) => pool.send(dest, self.client, read, &part.request, target),
                None => Err(SendError::NoHost),
            };
            if let Err(e) = sent {
                failed.push((i as u32, e));
            }
            // The request bytes are in the upstream buffer now; only the key map is kept.
            part.request = Vec::new();
        }
        self.slots.split(seq, merge, nkeys, parts);
        for (i, e) in failed {
            self.slots.deliver(seq, i, e.reply());
        }
    }
}

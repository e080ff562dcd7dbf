//! Keyed commands and a listener's `custom_commands`: routed whole to the shard of their keys.

use super::{CROSSSLOT, Dispatch, MirrorDest, Pool, Slots};
use crate::cluster::Dest;
use crate::command::Request;
use crate::command::{self, CommandSpec};
use crate::router::RouteRuntime;
use crate::upstream::{NO_UPSTREAM_HOST, SendError};

/// The keys of a request are on different shards of a pool.
pub(super) struct CrossSlot;

/// Where [`Dispatch::whole`] sends a request whole.
pub struct Whole<P> {
    /// Its route's primary pool and the shard of its keys.
    pub dest: super::TxDest<P>,
    /// The route's mirrors that admit it, each with the shard of its keys.
    pub mirrors: Vec<MirrorDest<P>>,
    /// Each key's argument index (ascending) and its form as the route forwards it
    /// (`remove_prefix`, `key_formatter`); empty when the route forwards keys as sent.
    pub forwarded: Vec<(usize, Vec<u8>)>,
}

/// A request's keys as their route forwards them: (argument index, forwarded key), ascending.
pub type ForwardedKeys = Vec<(usize, Vec<u8>)>;

/// The most bytes the scratch buffer for rewritten requests keeps between requests.
const REWRITE_KEEP: usize = 64 * 1024;

impl<'d, S: Slots, P: Pool> Dispatch<'d, S, P> {
    /// Routes a command whole to the shard of its keys. Every key must take the same route and
    /// hash to the same shard of its cluster (else `-CROSSSLOT`, as Redis Cluster answers); a
    /// command with no key (EVAL with numkeys 0) takes the catch-all route's shard 0, so scripts
    /// that touch no key always run on the same backend.
    pub fn keyed(&mut self, req: &Request<'_>, spec: &'static CommandSpec) {
        self.keyed_pinned(req, spec, None)
    }

    /// `PUBLISH` (`classic`) and `SPUBLISH`: routed by the channel as [`Dispatch::keyed`] routes
    /// a key, except that classic pub/sub goes where its pool keeps it
    /// ([`Pool::classic_pubsub`]: one node of a Redis Cluster), where its subscribers are.
    pub fn publish(&mut self, req: &Request<'_>, spec: &'static CommandSpec, classic: bool) {
        self.keyed_pinned(req, spec, Some(classic))
    }

    /// [`Dispatch::keyed`]; `publish`: `Some(classic)` for a PUBLISH (`classic`) or SPUBLISH,
    /// placed by [`Pool::pubsub_home`] where the pool has one.
    fn keyed_pinned(
        &mut self,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        publish: Option<bool>,
    ) {
        let arg = req.argv();
        let argc = req.argc();
        self.scratch.key_idx.clear();
        if let Err(reply) = command::keys(spec, argc, arg, &mut self.scratch.key_idx) {
            return self.slots.local(spec.id, &reply);
        }
        let router = self.router;
        let first_key = self.scratch.key_idx.first().map(|&i| arg(i));
        // No key: the route of the empty key, the catch-all (a prefix is never empty).
        let Some((id, route)) = router.route(first_key.unwrap_or_default()) else {
            return self.slots.local(spec.id, NO_UPSTREAM_HOST);
        };
        if router.has_prefixes()
            && self
                .scratch
                .key_idx
                .iter()
                .skip(1)
                .any(|&i| router.route_id(arg(i)) != Some(id))
        {
            return self.slots.local(spec.id, CROSSSLOT);
        }
        let read = command::is_read(spec);
        if !route.rewrites() {
            return self.keyed_to(spec.id, read, route, req, first_key, publish);
        }
        self.rewrite_and_send(spec.id, read, route, req, first_key, publish);
    }

    /// Where a keyed command would go whole, for sending its client's frame on a connection of
    /// its own (a request too large to share one): the primary pool and shard of its keys'
    /// route, the shard of each of the route's mirrors that admits it (Envoy
    /// `request_mirror_policy`, as [`Dispatch::keyed`] would copy it), and each key as the route
    /// forwards it when it rewrites keys. `None` whenever [`Dispatch::keyed`] would do anything
    /// else with it — no key, keys on different routes or shards (of the primary or of a
    /// mirror) — or there is no host: the request then goes the shared way.
    pub fn whole(&mut self, req: &Request<'_>, spec: &'static CommandSpec) -> Option<Whole<P>> {
        let (route_id, route, forwarded) = self.keys_forwarded(req, spec)?;
        let first_key = req.argv()(*self.scratch.key_idx.first()?);
        let shard = self.shard_of_whole(&route.pool, req, &forwarded)?;
        let read = command::is_read(spec);
        let mut mirrors = Vec::new();
        for m in route
            .mirrors
            .iter()
            .filter(|m| m.admits(read, Some(first_key)))
        {
            mirrors.push(MirrorDest {
                shard: self.shard_of_whole(&m.pool, req, &forwarded)?,
                pool: m.pool.clone(),
                stats: m.stats.clone(),
            });
        }
        let dest = super::TxDest {
            route: route_id,
            pool: route.pool.clone(),
            shard,
        };
        Some(Whole {
            dest,
            mirrors,
            forwarded,
        })
    }

    /// The keys of `req` (by `spec`) in the form they are forwarded: each key by argument
    /// index, ascending, as its route rewrites it (`remove_prefix`, `key_formatter`), or none
    /// when the route does not rewrite keys; with the route's id and runtime. `None` when `req`
    /// has no key, its keys take different routes, or no route takes them. The keys' indexes
    /// are left in `scratch.key_idx`.
    fn keys_forwarded(
        &mut self,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) -> Option<(usize, &'d RouteRuntime<P>, ForwardedKeys)> {
        let arg = req.argv();
        self.scratch.key_idx.clear();
        command::keys(spec, req.argc(), arg, &mut self.scratch.key_idx).ok()?;
        let router = self.router;
        let (route_id, route) = router.route(arg(*self.scratch.key_idx.first()?))?;
        if !self.one_route(req, route_id) {
            return None;
        }
        let mut forwarded = Vec::new();
        if route.rewrites() {
            let mut at: Vec<usize> = self.scratch.key_idx.clone();
            at.sort_unstable();
            at.dedup();
            for i in at {
                let mut key = Vec::new();
                route.rewrite(arg(i), &mut key);
                forwarded.push((i, key));
            }
        }
        Some((route_id, route, forwarded))
    }

    /// The forwarded keys of a command queued inside MULTI whose frame goes as sent
    /// ([`Dispatch::keys_forwarded`]): none for a command without keys. `None` when its keys
    /// take no single route (its queueing refuses it).
    pub fn queued_keys_forwarded(
        &mut self,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) -> Option<ForwardedKeys> {
        self.scratch.key_idx.clear();
        command::keys(spec, req.argc(), req.argv(), &mut self.scratch.key_idx).ok()?;
        if self.scratch.key_idx.is_empty() {
            return Some(Vec::new());
        }
        self.keys_forwarded(req, spec).map(|(_, _, f)| f)
    }

    /// The one shard of `pool` the keys of `req` take, as forwarded (`forwarded`, or the keys at
    /// `scratch.key_idx` as sent when it is empty); `None` when they take several, or no host
    /// takes them.
    fn shard_of_whole(
        &self,
        pool: &P,
        req: &Request<'_>,
        forwarded: &[(usize, Vec<u8>)],
    ) -> Option<usize> {
        let Some(((_, first), rest)) = forwarded.split_first() else {
            return self.shard_of_keys(pool, req).ok()?;
        };
        let shard = self.place(pool, first)?;
        rest.iter()
            .all(|(_, k)| self.place(pool, k) == Some(shard))
            .then_some(shard)
    }

    /// True when every key of `req` after the first (at `scratch.key_idx`) takes route
    /// `route_id`, the first key's.
    pub(super) fn one_route(&self, req: &Request<'_>, route_id: usize) -> bool {
        let arg = req.argv();
        self.scratch
            .key_idx
            .iter()
            .skip(1)
            .all(|&i| self.router.route_id(arg(i)) == Some(route_id))
    }

    /// A listener `custom_commands` entry of table id `cmd`: a single-key command routed by
    /// `key`, its argument 1.
    pub fn custom(&mut self, req: &Request<'_>, key: &[u8], cmd: u16) {
        let Some((_, route)) = self.router.route(key) else {
            return self.slots.local(cmd, NO_UPSTREAM_HOST);
        };
        self.scratch.key_idx.clear();
        self.scratch.key_idx.push(1);
        if !route.rewrites() {
            return self.keyed_to(cmd, false, route, req, Some(key), None);
        }
        self.rewrite_and_send(cmd, false, route, req, Some(key), None);
    }

    /// [`Dispatch::keyed_to`] of `req` with its keys (at `scratch.key_idx`) rewritten by
    /// `route` (`remove_prefix`, `key_formatter`).
    fn rewrite_and_send(
        &mut self,
        cmd: u16,
        read: bool,
        route: &RouteRuntime<P>,
        req: &Request<'_>,
        client_key: Option<&[u8]>,
        publish: Option<bool>,
    ) {
        self.with_rewritten(route, req, false, |d, fwd| {
            d.keyed_to(cmd, read, route, fwd, client_key, publish)
        });
    }

    /// Calls `f` with `req` whose keys (at `scratch.key_idx`) `route` rewrites, built in the
    /// scratch buffers (no allocation once they have grown). `keys_only`: the other arguments
    /// are left empty, for placing a request that is sent from its frame (a large value is
    /// not copied, nor kept in the scratch buffers).
    pub(super) fn with_rewritten<R>(
        &mut self,
        route: &RouteRuntime<P>,
        req: &Request<'_>,
        keys_only: bool,
        f: impl FnOnce(&mut Self, &Request<'_>) -> R,
    ) -> R {
        let mut buf = std::mem::take(&mut self.scratch.rw_buf);
        let mut ranges = std::mem::take(&mut self.scratch.rw_args);
        buf.clear();
        ranges.clear();
        for (i, a) in req.args().enumerate() {
            let at = buf.len();
            if self.scratch.key_idx.contains(&i) {
                route.rewrite(a, &mut buf);
            } else if !keys_only {
                buf.extend_from_slice(a);
            }
            ranges.push(at..buf.len());
        }
        let out = f(self, &Request::new(&buf, &ranges, None));
        // A large request's copy (an `MSET` of large values over two routes) is not kept for
        // the rest of the session.
        if buf.capacity() <= REWRITE_KEEP {
            self.scratch.rw_buf = buf;
        }
        self.scratch.rw_args = ranges;
        out
    }

    /// Sends a keyed command (keys at `scratch.key_idx`, already in their forwarded form) to its
    /// shard of `route`'s pool, then its copies to the route's mirrors. `client_key`: the first
    /// key as the client sent it, which decides the mirrors' `runtime_fraction`. `publish`:
    /// `Some(classic)` for a `PUBLISH` (`classic`) or `SPUBLISH`, placed by
    /// [`Pool::pubsub_home`] where the pool has one.
    fn keyed_to(
        &mut self,
        cmd: u16,
        read: bool,
        route: &RouteRuntime<P>,
        req: &Request<'_>,
        client_key: Option<&[u8]>,
        publish: Option<bool>,
    ) {
        let pool = route.pool_for(read);
        let pinned = publish.and_then(|classic| pool.pubsub_home(classic));
        let place = match pinned {
            Some(shard) => Ok(Some(shard)),
            None => self.shard_of_keys(pool, req),
        };
        let Ok(place) = place else {
            return self.slots.local(cmd, CROSSSLOT);
        };
        self.send_one(cmd, read, pool, place, req);
        if !route.mirrors.is_empty() {
            self.mirror_keyed(cmd, read, route, req, client_key);
        }
    }

    /// The shard of `pool` that every key at `scratch.key_idx` goes to (shard 0 with no key;
    /// `None`: no host takes them), or [`CrossSlot`] when they go to different shards.
    pub(super) fn shard_of_keys(
        &self,
        pool: &P,
        req: &Request<'_>,
    ) -> Result<Option<usize>, CrossSlot> {
        let arg = req.argv();
        let Some(&first) = self.scratch.key_idx.first() else {
            return Ok(Some(0));
        };
        let shard = self.place(pool, arg(first));
        let cross = self
            .scratch
            .key_idx
            .iter()
            .skip(1)
            .any(|&i| self.place(pool, arg(i)) != shard);
        if cross { Err(CrossSlot) } else { Ok(shard) }
    }

    /// Sends the whole request to shard `place` of `pool` (`None`: no host, answered
    /// `no upstream host`); `cmd` is its table id for stats; `read`: it only reads.
    fn send_one(
        &mut self,
        cmd: u16,
        read: bool,
        pool: &P,
        place: Option<usize>,
        req: &Request<'_>,
    ) {
        let seq = self.slots.push(cmd);
        let sent = match place {
            Some(shard) => {
                let target = self.target(seq, 0, cmd);
                let request = req.forward(&mut self.scratch.encoded);
                pool.send(Dest::Key(shard), self.client, read, request, target)
            }
            None => Err(SendError::NoHost),
        };
        if let Err(e) = sent {
            self.slots.deliver(seq, 0, e.reply());
        }
    }
}

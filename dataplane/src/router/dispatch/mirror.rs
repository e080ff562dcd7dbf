//! Copies for a route's mirrors (Envoy `request_mirror_policy`): fire and forget, each copy
//! shaped like the request it mirrors, placed by the mirror cluster's own shards.

use std::rc::Rc;

use super::{Dispatch, Pool, Slots};
use crate::cluster::Dest;
use crate::command::Request;
use crate::command::{self, CommandSpec};
use crate::router::{Mirror, RouteRuntime};

/// Where the copy of a request for one mirror goes when the request is sent on a connection of
/// its own ([`Dispatch::whole`]): shard `shard` of the mirror's pool.
pub struct MirrorDest<P> {
    /// The mirror cluster's pool.
    pub pool: Rc<P>,
    /// Where the request's keys are in it.
    pub shard: usize,
    /// The mirror's copy counters and in-flight bound.
    pub stats: Rc<crate::router::MirrorStats>,
}

impl<'d, S: Slots, P: Pool> Dispatch<'d, S, P> {
    /// Copies a keyed command (keys at `scratch.key_idx`, as forwarded) to `route`'s mirrors
    /// that admit it; `client_key`: its first key as the client sent it.
    pub(super) fn mirror_keyed(
        &mut self,
        cmd: u16,
        read: bool,
        route: &RouteRuntime<P>,
        req: &Request<'_>,
        client_key: Option<&[u8]>,
    ) {
        for m in &route.mirrors {
            if !m.admits(read, client_key) {
                continue;
            }
            let Ok(place) = self.shard_of_keys(&m.pool, req) else {
                // The keys share a shard of the primary but not of the mirror: the copy cannot
                // go whole, and splitting it would change what it does.
                m.stats.unsendable();
                continue;
            };
            let request = req.forward(&mut self.scratch.encoded);
            m.stats.send(
                &*m.pool,
                place.map(Dest::Key),
                self.client,
                read,
                request,
                cmd,
            );
        }
    }

    /// Copies a split command to the mirrors of its keys' routes: per mirror cluster, the keys
    /// it admits, split by that cluster's own shards. `client` holds the arguments as sent (for
    /// `runtime_fraction`), `fwd` as forwarded; `keys[k]` is key k's argument index and `ids[k]`
    /// its route. Keys the mirror cluster has no host for are left out of its copies.
    pub(super) fn mirror_split(
        &self,
        spec: &CommandSpec,
        read: bool,
        client: &[&[u8]],
        fwd: &[&[u8]],
        keys: &[usize],
        ids: &[usize],
    ) {
        for target in self.mirrors_of(ids, read) {
            let mut k = 0;
            let parts = command::split::split(spec, fwd, |key| {
                let at = k;
                k += 1;
                self.mirror_place(target, read, client, keys, ids, at, key)
            });
            for part in &parts {
                if let Some(shard) = part.shard {
                    target.stats.send(
                        &*target.pool,
                        Some(Dest::Key(shard)),
                        self.client,
                        read,
                        &part.request,
                        spec.id,
                    );
                }
            }
        }
    }

    /// The distinct mirror clusters of the routes `ids` (few: a handful of mirrors at most),
    /// without those that skip a request that only reads (`read`).
    pub(super) fn mirrors_of(&self, ids: &[usize], read: bool) -> Vec<&'d Mirror<P>> {
        let router = self.router;
        let mut seen: Vec<&Mirror<P>> = Vec::new();
        for &id in ids {
            for m in router.by_id(id).into_iter().flat_map(|r| &r.mirrors) {
                if !m.excludes(read) && !seen.iter().any(|s| Rc::ptr_eq(&s.stats, &m.stats)) {
                    seen.push(m);
                }
            }
        }
        seen
    }

    /// Where key `k` (ordinal; `fwd_key` as forwarded) of a split command goes in mirror
    /// cluster `target`: its shard there, or `None` when its own route's policy for that
    /// mirror does not admit it (none, `runtime_fraction` by the key as the client sent it,
    /// `exclude_read_commands`) or the cluster has no host for it. `client`, `keys`, `ids`: as
    /// [`Dispatch::mirror_split`] takes them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mirror_place(
        &self,
        target: &Mirror<P>,
        read: bool,
        client: &[&[u8]],
        keys: &[usize],
        ids: &[usize],
        k: usize,
        fwd_key: &[u8],
    ) -> Option<usize> {
        let router = self.router;
        let policy = router
            .by_id(*ids.get(k)?)?
            .mirrors
            .iter()
            .find(|m| Rc::ptr_eq(&m.stats, &target.stats))?;
        let key = keys.get(k).and_then(|&a| client.get(a).copied());
        policy
            .admits(read, key)
            .then(|| self.place(&target.pool, fwd_key))
            .flatten()
    }

    /// Copies a fan-out command (`request`, as forwarded) to every node of `route`'s mirrors
    /// that admit it.
    pub(super) fn mirror_fan_out(
        &self,
        spec: &CommandSpec,
        route: &RouteRuntime<P>,
        request: &[u8],
    ) {
        // SCRIPT LOAD counts as a read, but a mirror without the script would fail every EVALSHA.
        let read = command::is_read(spec) && spec.name != "script";
        for m in &route.mirrors {
            if !m.admits(read, None) {
                continue;
            }
            for node in 0..m.pool.nodes() {
                m.stats.send(
                    &*m.pool,
                    Some(Dest::Node(node)),
                    self.client,
                    false,
                    request,
                    spec.id,
                );
            }
        }
    }
}

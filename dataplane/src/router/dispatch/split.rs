//! Multi-key commands split per shard (MGET, MSET, DEL, EXISTS, TOUCH, UNLINK): one
//! sub-request per route, cluster and shard, the replies merged in the client's key order.

use std::rc::Rc;

use super::{Dispatch, Pool, Slots};
use crate::cluster::Dest;
use crate::command::Request;
use crate::command::{self, CommandSpec, Merge};
use crate::router::{CATCH_ALL, MirrorStats};
use crate::upstream::NO_UPSTREAM_HOST;

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// Splits a multi-key command per route, cluster and shard, and merges the replies by
    /// `merge` in the client's key order; then copies it to the mirrors of its routes.
    pub fn split(&mut self, req: &Request<'_>, spec: &'static CommandSpec, merge: Merge) {
        let router = self.router;
        let argv: Vec<&[u8]> = req.args().collect();
        let read = command::is_read(spec);
        if !router.has_prefixes() && !router.rewrites() {
            // One route for every key, keys forwarded as sent: as before prefix routes existed.
            let Some(route) = router.keyless() else {
                return self.slots.local(spec.id, NO_UPSTREAM_HOST);
            };
            let pool = &**route.pool_for(read);
            let parts = command::split::split(spec, &argv, |key| self.place(pool, key));
            let nkeys = parts.iter().map(|p| p.keys.len()).sum();
            self.send_parts(spec.id, read, merge, nkeys, parts, |p| {
                p.shard.map(|s| (pool, Dest::Key(s)))
            });
            if router.mirrors() {
                let keys = split_keys(spec, argv.len());
                let ids = vec![CATCH_ALL; keys.len()];
                self.mirror_split(spec, read, &argv, &argv, &keys, &ids);
            }
            return;
        }
        let keys = split_keys(spec, argv.len());
        let mut ids = Vec::with_capacity(keys.len());
        for &i in &keys {
            match argv.get(i).and_then(|key| router.route_id(key)) {
                Some(id) => ids.push(id),
                None => return self.slots.local(spec.id, NO_UPSTREAM_HOST),
            }
        }
        // The forwarded arguments: each key rewritten by its own route.
        let mut buf = std::mem::take(&mut self.scratch.rw_buf);
        let mut ranges = std::mem::take(&mut self.scratch.rw_args);
        buf.clear();
        ranges.clear();
        let mut next = keys.iter().zip(&ids).peekable();
        for (i, a) in argv.iter().enumerate() {
            let at = buf.len();
            match next.next_if(|(k, _)| **k == i) {
                Some((_, &id)) => match router.by_id(id) {
                    Some(route) => route.rewrite(a, &mut buf),
                    None => buf.extend_from_slice(a),
                },
                None => buf.extend_from_slice(a),
            }
            ranges.push(at..buf.len());
        }
        let fwd: Vec<&[u8]> = Request::new(&buf, &ranges, None).args().collect();
        // Group keys by (pool, shard); the split numbers its parts by group.
        let mut groups: Vec<(&Rc<P>, Option<usize>)> = Vec::new();
        let mut group_of = Vec::with_capacity(keys.len());
        for (&i, &id) in keys.iter().zip(&ids) {
            let Some(route) = router.by_id(id) else {
                drop(fwd);
                self.scratch.rw_buf = buf;
                self.scratch.rw_args = ranges;
                return self.slots.local(spec.id, NO_UPSTREAM_HOST);
            };
            let pool = route.pool_for(read);
            let shard = fwd.get(i).and_then(|key| self.place(pool, key));
            let g = match groups
                .iter()
                .position(|(p, s)| Rc::ptr_eq(p, pool) && *s == shard)
            {
                Some(g) => g,
                None => {
                    groups.push((pool, shard));
                    groups.len() - 1
                }
            };
            group_of.push(g);
        }
        let mut n = 0;
        let parts = command::split::split(spec, &fwd, |_| {
            let g = group_of.get(n).copied();
            n += 1;
            g
        });
        let nkeys = parts.iter().map(|p| p.keys.len()).sum();
        self.send_parts(spec.id, read, merge, nkeys, parts, |p| {
            let (pool, shard) = groups.get(p.shard?)?;
            Some((&**pool, Dest::Key((*shard)?)))
        });
        if router.mirrors() {
            self.mirror_split(spec, read, &argv, &fwd, &keys, &ids);
        }
        drop(fwd);
        self.scratch.rw_buf = buf;
        self.scratch.rw_args = ranges;
    }
}

/// Where [`Dispatch::split_whole`] sends the parts of a split command.
pub struct SplitWhole<P> {
    /// The (pool, shard) of each part, by the part's `shard` (its group): its keys' route's
    /// pool and their shard there.
    pub groups: Vec<(Rc<P>, usize)>,
    /// A group each, no sub-request encoded ([`command::split::group`]); one when every key
    /// lands on one shard of one route.
    pub parts: Vec<command::split::Part>,
    /// Each key's form as its route forwards it (`remove_prefix`, `key_formatter`; as sent on
    /// a route that does not rewrite), by ordinal; empty when no route rewrites a key of it.
    pub forwarded: Vec<Vec<u8>>,
    /// The copies for the mirrors of its routes (Envoy `request_mirror_policy`), as
    /// [`Dispatch::split`] copies it: per mirror cluster, the keys it admits split by its
    /// own shards.
    pub mirrors: Vec<MirrorParts<P>>,
}

/// The parts of a split command one mirror cluster gets (each with a shard: keys the mirror
/// does not admit, or has no host for, are left out).
pub struct MirrorParts<P> {
    pub stats: Rc<MirrorStats>,
    pub pool: Rc<P>,
    pub parts: Vec<command::split::Part>,
}

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// Where the parts of a split command would go, for sending them from the client's frame
    /// on connections of their own (a request too large to share one): grouped by route pool
    /// and shard as [`Dispatch::split`] groups them, each key as its route forwards it, and the
    /// parts its routes' mirrors get. `None` when a key has no route or no host (the shared
    /// way answers it).
    pub fn split_whole(
        &mut self,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) -> Option<SplitWhole<P>> {
        let router = self.router;
        let argv: Vec<&[u8]> = req.args().collect();
        let read = command::is_read(spec);
        let keys = split_keys(spec, argv.len());
        let mut ids = Vec::with_capacity(keys.len());
        for &i in &keys {
            ids.push(router.route_id(argv.get(i)?)?);
        }
        let rewrites = ids
            .iter()
            .any(|&id| router.by_id(id).is_some_and(|r| r.rewrites()));
        let mut forwarded = Vec::new();
        let mut groups: Vec<(Rc<P>, usize)> = Vec::new();
        let mut group_of = Vec::with_capacity(keys.len());
        for (&i, &id) in keys.iter().zip(&ids) {
            let route = router.by_id(id)?;
            let key = argv.get(i)?;
            let fwd = if rewrites {
                let mut fwd = Vec::new();
                route.rewrite(key, &mut fwd);
                forwarded.push(fwd);
                forwarded.last().map_or(*key, Vec::as_slice)
            } else {
                key
            };
            let pool = route.pool_for(read);
            let shard = self.place(pool, fwd)?;
            let g = match groups
                .iter()
                .position(|(p, s)| Rc::ptr_eq(p, pool) && *s == shard)
            {
                Some(g) => g,
                None => {
                    groups.push((pool.clone(), shard));
                    groups.len() - 1
                }
            };
            group_of.push(g);
        }
        let mut n = 0;
        let parts = command::split::group(spec, &argv, |_| {
            n += 1;
            group_of.get(n - 1).copied()
        });
        if parts.is_empty() || parts.iter().any(|p| p.shard.is_none()) {
            return None;
        }
        let mut mirrors = Vec::new();
        for m in self.mirrors_of(&ids, read) {
            let mut k = 0;
            let parts = command::split::group(spec, &argv, |key| {
                let fwd = forwarded.get(k).map_or(key, Vec::as_slice);
                k += 1;
                self.mirror_place(m, read, &argv, &keys, &ids, k - 1, fwd)
            });
            let parts: Vec<_> = parts.into_iter().filter(|p| p.shard.is_some()).collect();
            if !parts.is_empty() {
                mirrors.push(MirrorParts {
                    stats: m.stats.clone(),
                    pool: m.pool.clone(),
                    parts,
                });
            }
        }
        Some(SplitWhole {
            groups,
            parts,
            forwarded,
            mirrors,
        })
    }
}

/// Argument indexes of the keys `command::split::split` takes from a request of `argc`
/// arguments (a key whose values are incomplete is left out, as there).
fn split_keys(spec: &CommandSpec, argc: usize) -> Vec<usize> {
    let step = spec.step.max(1) as usize;
    command::key_indices(spec, argc)
        .take_while(|&i| i + step <= argc)
        .collect()
}

//! Where a transaction runs. A transaction (`WATCH … MULTI … EXEC`) goes whole to one backend:
//! every key of its commands and of its `WATCH` must take one route and land on one shard of
//! that route's cluster (one slot for Redis Cluster, as Redis Cluster itself requires), else
//! the command is refused at queue time with `-CROSSSLOT` and the transaction is discarded. A
//! transaction without keys runs where a keyless command runs: shard 0 of the catch-all route.
//!
//! Dispatch only decides here; the session queues the forwarded bytes and runs them on a
//! leased connection of the chosen pool.

use std::borrow::Cow;
use std::rc::Rc;

use super::{CROSSSLOT, Dispatch, Pool, Slots};
use crate::command::{self, CommandSpec, Kind, Local, PubSub, Request};
use crate::upstream::NO_UPSTREAM_HOST;

/// The backend of a transaction: shard `shard` (a [`crate::cluster::Dest::Key`] value) of
/// route `route`'s primary pool.
pub struct TxDest<P> {
    /// The route the keys took.
    pub route: usize,
    /// The route's pool (never the `read_command_policy` one: reads in a transaction go to the
    /// primary with its writes).
    pub pool: Rc<P>,
    /// Where the keys are in `pool`.
    pub shard: usize,
}

impl<P> Clone for TxDest<P> {
    fn clone(&self) -> Self {
        TxDest {
            route: self.route,
            pool: self.pool.clone(),
            shard: self.shard,
        }
    }
}

impl<P> TxDest<P> {
    /// True when both name the same backend (routes to one cluster share its pool).
    pub fn same(&self, other: &TxDest<P>) -> bool {
        Rc::ptr_eq(&self.pool, &other.pool) && self.shard == other.shard
    }
}

/// What a command sent inside `MULTI` (or a `WATCH`) becomes.
pub enum Queued<P> {
    /// Queue it: its forwarded bytes were appended; `dest`: where its keys are (`None`: it has
    /// none).
    Yes { dest: Option<TxDest<P>> },
    /// Refuse it with this reply; the transaction is discarded (EXEC answers `-EXECABORT`).
    No(Cow<'static, [u8]>),
}

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// Appends `req` (a command of row `spec`, or a listener custom command with its key at
    /// argument 1 when `spec` is `None`) to `out` in its forwarded form (keys rewritten by their
    /// route) and says where its keys go, for a transaction whose backend so far is `so_far`.
    /// Without `out` it only places it: the caller sends the client's frame as it is, which is
    /// its forwarded form when no route rewrites keys ([`crate::router::Router::rewrites`]).
    ///
    /// Refused: commands that go to every backend or that Respite answers itself (except PING,
    /// ECHO and TIME, which the backend answers inside the transaction), refused commands, keys of
    /// one command or of the transaction on different backends (`-CROSSSLOT`), no host.
    pub fn queue(
        &mut self,
        req: &Request<'_>,
        spec: Option<&'static CommandSpec>,
        so_far: Option<&TxDest<P>>,
        out: Option<&mut Vec<u8>>,
        mirrors: &mut TxMirrors,
    ) -> Queued<P> {
        self.scratch.key_idx.clear();
        match spec.map(|s| (s, s.kind)) {
            None => self.scratch.key_idx.push(1),
            // Blocking commands never block inside MULTI (Redis runs them as their non-blocking
            // form), so they are queued like any keyed command.
            Some((_, Kind::Keyed | Kind::Split(_) | Kind::Blocking))
            | Some((_, Kind::PubSub(PubSub::Publish(_))))
            | Some((_, Kind::Local(Local::Ping | Local::Echo | Local::Time))) => {
                if let Some(spec) = spec
                    && let Err(reply) =
                        command::keys(spec, req.argc(), req.argv(), &mut self.scratch.key_idx)
                {
                    return Queued::No(reply.into());
                }
            }
            // Redis's `no-multi` commands (7.0: PSYNC, SAVE, SHUTDOWN, SYNC) get Redis's own
            // queue-time error; Respite refuses them outside MULTI too.
            Some((spec, Kind::Refused(_))) if NO_MULTI.contains(&spec.name) => {
                return Queued::No(
                    (&b"-ERR Command not allowed inside a transaction\r\n"[..]).into(),
                );
            }
            Some((spec, Kind::Refused(reason))) => {
                return Queued::No(command::refused_reply(spec, reason).into());
            }
            Some((spec, _)) => return Queued::No(not_in_multi(spec.name).into()),
        }
        self.append_placed(req, spec, so_far, out, Some(mirrors))
    }

    /// [`Dispatch::queue`] for a request that runs alone on a leased connection: `WATCH key…`
    /// outside MULTI (whose backend must be `so_far`'s when an earlier WATCH holds one) and the
    /// blocking commands. Appends its forwarded form to `out`; its keys must be on one backend.
    pub fn together(
        &mut self,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        so_far: Option<&TxDest<P>>,
        out: &mut Vec<u8>,
    ) -> Queued<P> {
        self.scratch.key_idx.clear();
        if let Err(reply) = command::keys(spec, req.argc(), req.argv(), &mut self.scratch.key_idx) {
            return Queued::No(reply.into());
        }
        self.append_placed(req, Some(spec), so_far, Some(out), None)
    }

    /// Places the keys at `scratch.key_idx` and appends `req` in its forwarded form (keys
    /// rewritten by their route, and placed as rewritten, as a single command's are); with
    /// `mirrors`, records where they go in the route's mirrors too.
    fn append_placed(
        &mut self,
        req: &Request<'_>,
        spec: Option<&'static CommandSpec>,
        so_far: Option<&TxDest<P>>,
        out: Option<&mut Vec<u8>>,
        mirrors: Option<&mut TxMirrors>,
    ) -> Queued<P> {
        let arg = req.argv();
        let router = self.router;
        let Some(&first) = self.scratch.key_idx.first() else {
            if let Some(out) = out {
                out.extend_from_slice(req.forward(&mut self.scratch.encoded));
            }
            return Queued::Yes { dest: None };
        };
        let Some((route_id, route)) = router.route(arg(first)) else {
            return Queued::No(NO_UPSTREAM_HOST.into());
        };
        if !self.one_route(req, route_id) {
            return Queued::No(CROSSSLOT.into());
        }
        if !route.rewrites() {
            return self.append_to(route_id, route, req, req, so_far, out, spec, mirrors);
        }
        // Placed only (`out` is `None`): the frame goes as sent, its keys rewritten there.
        let keys_only = out.is_none();
        self.with_rewritten(route, req, keys_only, |d, fwd| {
            d.append_to(route_id, route, req, fwd, so_far, out, spec, mirrors)
        })
    }

    /// [`Dispatch::append_placed`] once the route is known: `fwd` is `client` as forwarded.
    #[allow(clippy::too_many_arguments)]
    fn append_to(
        &mut self,
        route_id: usize,
        route: &crate::router::RouteRuntime<P>,
        client: &Request<'_>,
        fwd: &Request<'_>,
        so_far: Option<&TxDest<P>>,
        out: Option<&mut Vec<u8>>,
        spec: Option<&'static CommandSpec>,
        mirrors: Option<&mut TxMirrors>,
    ) -> Queued<P> {
        let pool = &route.pool;
        let shard = match self.shard_of_keys(pool, fwd) {
            Ok(Some(shard)) => shard,
            Ok(None) => return Queued::No(NO_UPSTREAM_HOST.into()),
            Err(_) => return Queued::No(CROSSSLOT.into()),
        };
        let dest = TxDest {
            route: route_id,
            pool: pool.clone(),
            shard,
        };
        if so_far.is_some_and(|d| !d.same(&dest)) {
            return Queued::No(CROSSSLOT.into());
        }
        if let Some(mirrors) = mirrors
            && !route.mirrors.is_empty()
        {
            mirrors.writes |= spec.is_none_or(|s| !command::is_read(s));
            if mirrors.first_key.is_none() {
                mirrors.first_key = self
                    .scratch
                    .key_idx
                    .first()
                    .map(|&i| client.argv()(i).to_vec());
            }
            mirrors
                .places
                .resize(route.mirrors.len(), MirrorPlace::Open);
            for (m, place) in route.mirrors.iter().zip(mirrors.places.iter_mut()) {
                *place = match (self.shard_of_keys(&m.pool, fwd), *place) {
                    (Ok(Some(s)), MirrorPlace::Open) => MirrorPlace::Shard(s),
                    (Ok(Some(s)), MirrorPlace::Shard(t)) if s == t => MirrorPlace::Shard(s),
                    _ => MirrorPlace::Unsendable,
                };
            }
        }
        if let Some(out) = out {
            out.extend_from_slice(fwd.forward(&mut self.scratch.encoded));
        }
        Queued::Yes { dest: Some(dest) }
    }

    /// Where a transaction without keys runs: shard 0 of the catch-all route (`None`: the
    /// listener has none).
    pub fn keyless_dest(&self) -> Option<TxDest<P>> {
        let (route, r) = self.router.route(b"")?;
        Some(TxDest {
            route,
            pool: r.pool.clone(),
            shard: 0,
        })
    }
}

/// Where a transaction's copy goes in each mirror of its route (Envoy `request_mirror_policy`):
/// a committed transaction is copied whole, `MULTI` … `EXEC`, to the one shard of the mirror
/// cluster that all its keys go to, or not at all (counted as a failed copy).
#[derive(Debug, Default, Clone)]
pub struct TxMirrors {
    /// Per mirror of the route, in its order.
    pub places: Vec<MirrorPlace>,
    /// Some queued command writes (a read-only transaction skips `exclude_read_commands`
    /// mirrors).
    pub writes: bool,
    /// The first key of the transaction as the client sent it (for `runtime_fraction`).
    pub first_key: Option<Vec<u8>>,
}

/// Where a transaction's keys go in one mirror cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorPlace {
    /// No keyed command yet.
    Open,
    /// Every key so far goes to this shard.
    Shard(usize),
    /// Keys go to different shards, or to none: the transaction cannot be copied whole.
    Unsendable,
}

/// Commands Redis 7.0 flags `no-multi` (`COMMAND INFO`), besides MULTI and WATCH.
const NO_MULTI: [&str; 4] = ["psync", "save", "shutdown", "sync"];

/// The refusal of a command that cannot be part of a transaction through Respite.
fn not_in_multi(name: &str) -> Vec<u8> {
    format!(
        "-ERR '{name}' inside MULTI is not supported by respite: it is answered by the proxy or \
         goes to every backend, and a transaction runs on one backend\r\n"
    )
    .into_bytes()
}

//! Blocking commands: BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, and
//! XREAD / XREADGROUP with `BLOCK`.
//!
//! Each runs alone on a leased connection to its keys' primary (keys on two backends:
//! `-CROSSSLOT`, nothing runs), for the command's own timeout: `op_timeout` does not cut it,
//! it only bounds how long past that timeout a silent backend is waited for. Inside MULTI they
//! do not block (Redis runs them as their non-blocking form) and are queued like any command.
//!
//! - The client's later requests wait behind it (a barrier), so replies stay in order and a
//!   pipelined `GET` sees what the blocking command did, as at Redis.
//! - While it blocks, the session watches its client: when the client leaves, the leased
//!   connection is closed at once, so Redis unblocks it and pops nothing for a client that is
//!   gone (an element popped while the close is on its way is lost with the connection, as
//!   with any client that disconnects). A draining worker stops it the same way and answers
//!   `-UNBLOCKED`, Redis's error for a client unblocked by force.
//! - While it waits it is registered by its client id with its leased connection's id at the
//!   backend (`engine/blocked.rs`), so `CLIENT UNBLOCK` from any worker reaches it
//!   (`session/unblock.rs`); a connection an unblock aimed at is closed, not reused.
//! - Redis Cluster: Redis answers a blocked client `MOVED`/`ASK` when its slot moves away; the
//!   request is sent again to the named node with the rest of its timeout (at most
//!   [`MAX_REDIRECTS`] times). A primary that fails over answers its blocked clients
//!   `-UNBLOCKED …` (it became a replica): that reply is the client's, never re-issued, so an
//!   element is never served twice. A connection lost while blocked answers
//!   `-upstream failure`, like any request whose reply was lost.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Session;
use super::barrier::Barrier;
use super::transaction::Watch;
use crate::cluster::ClusterPool;
use crate::command::{self, BlockTimeout, CommandSpec, Request};
use crate::engine::blocked::{BlockedAt, BlockedClients, Registration};
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::resp::{Limits, Parsed, RequestParser, encode};
use crate::router::dispatch::{Queued, TxDest};
use crate::upstream::{BlockedError, Deliver, Lease, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};

/// Redirects one blocking request follows before the client gets `-TRYAGAIN`.
pub(super) const MAX_REDIRECTS: usize = 3;

const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// The reply of a blocking request stopped because the worker drains (Redis's error code for
/// a client unblocked by force).
const UNBLOCKED: &[u8] =
    b"-UNBLOCKED client unblocked by the proxy: it is shutting down or restarting\r\n";

const TOO_MANY_REDIRECTS: &[u8] =
    b"-TRYAGAIN too many cluster redirects for one blocking request\r\n";

impl Session {
    /// A blocking request outside MULTI (resolved, counted, past the auth gate).
    pub(super) fn blocking(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) {
        let timeout = command::block_timeout(spec, req.argc(), req.argv());
        let mut request = Vec::new();
        let dest = match self.dispatch(rt).together(req, spec, None, &mut request) {
            Queued::No(reply) => return self.sink.push_local(spec.id, &reply),
            Queued::Yes { dest: Some(dest) } => dest,
            // No key found (a bad numkeys): the backend answers the error at once.
            Queued::Yes { dest: None } => match self.dispatch(rt).keyless_dest() {
                Some(dest) => dest,
                None => return self.sink.push_local(spec.id, NO_UPSTREAM_HOST),
            },
        };
        // A WATCH on the same backend lends its connection, as at Redis, where both are one.
        let on_watch = self.watching.as_ref().is_some_and(|w| w.dest.same(&dest));
        let Some(addr) = self
            .watching
            .as_ref()
            .filter(|_| on_watch)
            .map(|w| w.lease.addr())
            .or_else(|| dest.pool.primary_addr(dest.shard))
        else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        if self.fault(rt, spec.id) {
            return;
        }
        let held = if on_watch { self.watching.take() } else { None };
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::blocking());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        let blocked = rt.stats.blocked_clients.clone();
        blocked.inc();
        let (registry, client_id) = (self.blocked_clients.clone(), self.conn.client_id);
        net::spawn(async move {
            sink.answered_before(seq).await;
            let blocked_request = Blocked {
                dest,
                resp3,
                timeout,
                started: Instant::now(),
                registry,
                client_id,
            };
            let (reply, watch) = match held {
                Some(watch) => blocked_request.run_on_watch(watch, request, &barrier).await,
                None => (blocked_request.run(addr, request, &barrier).await, None),
            };
            sink.deliver(seq, 0, &reply);
            blocked.dec();
            barrier.open(watch);
        });
    }
}

/// One blocking request on its way.
struct Blocked {
    dest: TxDest<ClusterPool>,
    resp3: bool,
    timeout: BlockTimeout,
    started: Instant,
    /// Where the request registers while it waits, by its client's id (CLIENT UNBLOCK).
    registry: Arc<BlockedClients>,
    client_id: u64,
}

impl Blocked {
    /// Registers the client as blocked on `lease` (if the host told the connection's id).
    fn register(&self, lease: &Lease) -> Option<Registration> {
        let upstream_id = lease.upstream_id()?;
        let at = BlockedAt {
            cluster: lease.cluster().clone(),
            addr: lease.addr(),
            upstream_id,
        };
        Some(self.registry.register(self.client_id, at))
    }

    /// Ends `registration`; a lease a `CLIENT UNBLOCK` aimed at is not given to another client.
    fn unregister(registration: Option<Registration>, lease: &mut Lease) {
        if registration.is_some_and(Registration::end) {
            lease.close_on_release();
        }
    }

    /// Runs `request` at `addr`, following cluster redirects; returns the client's reply.
    async fn run(
        &self,
        mut addr: std::net::SocketAddr,
        mut request: Vec<u8>,
        barrier: &Barrier,
    ) -> Vec<u8> {
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            let lease = net::unless(
                self.dest.pool.leases.lease(addr, self.resp3),
                barrier.stopped(),
            );
            let mut lease = match lease.await {
                None => return UNBLOCKED.to_vec(),
                Some(Err(e)) => return e.reply().to_vec(),
                Some(Ok(l)) => l,
            };
            let mut out = Vec::with_capacity(request.len() + ASKING.len());
            if asking {
                out.extend_from_slice(ASKING);
            }
            out.extend_from_slice(&request);
            let replies = 1 + usize::from(asking);
            let registration = self.register(&lease);
            let reply = match lease
                .exchange_blocking(out, replies, self.left(), barrier.stopped())
                .await
            {
                Ok(reply) => {
                    Self::unregister(registration, &mut lease);
                    reply
                }
                Err(BlockedError::Stopped) => return UNBLOCKED.to_vec(),
                Err(BlockedError::Io(_)) => return UPSTREAM_FAILURE.to_vec(),
            };
            // The exchange read every reply and nothing else is open on the connection.
            let from = lease.addr();
            lease.release(true);
            let redirect = matches!(reply.get(..4), Some(b"-MOV" | b"-ASK"))
                .then(|| self.dest.pool.lease_redirect(from, &reply))
                .flatten();
            let Some((to, ask)) = redirect else {
                return reply;
            };
            match self.with_time_left(&request) {
                Some(r) => request = r,
                None => return reply,
            }
            addr = to;
            asking = ask;
        }
        TOO_MANY_REDIRECTS.to_vec()
    }

    /// Runs `request` on the connection `watch` holds (no redirects followed: the watched keys
    /// are there); gives the WATCH back unless the connection was lost.
    async fn run_on_watch(
        &self,
        mut watch: Watch,
        request: Vec<u8>,
        barrier: &Barrier,
    ) -> (Vec<u8>, Option<Watch>) {
        let registration = self.register(&watch.lease);
        match watch
            .lease
            .exchange_blocking(request, 1, self.left(), barrier.stopped())
            .await
        {
            Ok(reply) => {
                Self::unregister(registration, &mut watch.lease);
                (reply, Some(watch))
            }
            Err(BlockedError::Stopped) => (UNBLOCKED.to_vec(), None),
            Err(BlockedError::Io(_)) => (UPSTREAM_FAILURE.to_vec(), None),
        }
    }

    /// The rest of the request's own timeout (`None`: it blocks until served).
    fn left(&self) -> Option<Duration> {
        match self.timeout {
            BlockTimeout::For { wait, .. } => Some(wait.saturating_sub(self.started.elapsed())),
            BlockTimeout::Forever | BlockTimeout::Invalid => None,
        }
    }

    /// `request` with its timeout argument set to the time left (at least 1 ms, so Redis
    /// itself answers the timeout), for sending it again; unchanged when it has no finite
    /// timeout. `None` if it cannot be re-encoded (never for bytes dispatch wrote).
    fn with_time_left(&self, request: &[u8]) -> Option<Vec<u8>> {
        let BlockTimeout::For { at, millis, .. } = self.timeout else {
            return Some(request.to_vec());
        };
        let left = self
            .left()
            .unwrap_or_default()
            .max(Duration::from_millis(1));
        let value = if millis {
            left.as_millis().to_string()
        } else {
            format!("{:.3}", left.as_secs_f64())
        };
        let mut parser = RequestParser::new(Limits {
            max_bulk_len: request.len(),
            ..Limits::default()
        });
        let mut args = Vec::new();
        let mut scratch = Vec::new();
        let Ok(Parsed::Resp { .. }) = parser.parse(request, &mut args, &mut scratch) else {
            return None;
        };
        let mut out = Vec::with_capacity(request.len() + 8);
        encode::command(
            &mut out,
            args.iter().enumerate().map(|(i, r)| {
                if i == at {
                    value.as_bytes()
                } else {
                    request.get(r.clone()).unwrap_or_default()
                }
            }),
        );
        Some(out)
    }
}

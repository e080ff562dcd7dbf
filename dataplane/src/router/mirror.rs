//! Request mirroring (Envoy `Route.request_mirror_policy`): fire-and-forget copies whose replies
//! are counted and dropped, bounded per worker and mirror cluster so a slow or dead mirror never
//! holds memory or time of the primary path.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::dispatch::{Client, Pool};
use crate::cluster::{ClusterPool, Dest};
use crate::config::MirrorPolicy;
use crate::net::Notify;
use crate::stats::{Counter, Gauge, Store};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, Piece, Target};

const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// `runtime_fraction` is applied as `hash(key) % FRACTION_SCALE < fraction × 100`, i.e. with a
/// resolution of 0.01%.
const FRACTION_SCALE: u64 = 10_000;

/// This worker's copy counters of one mirror cluster, and its in-flight bound. Shared by every
/// route (of every listener) that mirrors to the cluster, so the bound is per worker and
/// cluster, as the stat names are.
///
/// Stats: `cluster.<c>.mirror_rq_total` (copies handed to the pool), `mirror_rq_success`,
/// `mirror_rq_error` (an error reply, timeout, no host, closed connection), `mirror_rq_overflow`
/// (dropped before sending: `max_pending_requests` copies were already in flight), gauge
/// `mirror_rq_active`.
pub struct MirrorStats {
    total: Arc<Counter>,
    success: Arc<Counter>,
    error: Arc<Counter>,
    overflow: Arc<Counter>,
    active: Arc<Gauge>,
    in_flight: Cell<usize>,
    /// The cluster's `max_pending_requests`; updated when a reload changes it.
    limit: Cell<usize>,
    /// Fences sent and not yet answered ([`MirrorStats::fence`]), by id (a reply's `seq`; copies
    /// have 0), and the next id.
    fences: RefCell<Vec<(u64, Rc<Notify>)>>,
    next_fence: Cell<u64>,
}

impl MirrorStats {
    /// Registers the mirror stats of `cluster` for `worker` (at 0), with at most `limit` copies
    /// in flight.
    pub fn new(store: &Store, worker: usize, cluster: &str, limit: usize) -> Rc<MirrorStats> {
        let c = |n: &str| store.counter(&format!("cluster.{cluster}.{n}"), worker);
        Rc::new(MirrorStats {
            total: c("mirror_rq_total"),
            success: c("mirror_rq_success"),
            error: c("mirror_rq_error"),
            overflow: c("mirror_rq_overflow"),
            active: store.gauge(&format!("cluster.{cluster}.mirror_rq_active"), worker),
            in_flight: Cell::new(0),
            limit: Cell::new(limit),
            fences: RefCell::new(Vec::new()),
            next_fence: Cell::new(1),
        })
    }

    /// Sets the in-flight bound (the mirror cluster's `max_pending_requests`).
    pub fn set_limit(&self, limit: usize) {
        self.limit.set(limit.max(1));
    }

    /// Hands one copy (of command `cmd`, for `client`) to `pool` at `dest` unless the bound is
    /// reached (then it is dropped and counted as overflow); `dest` `None`: the pool has no host
    /// for its keys, and the copy counts as failed. Never waits and never reports to the
    /// caller: the primary reply does not depend on it.
    pub fn send<P: Pool>(
        self: &Rc<Self>,
        pool: &P,
        dest: Option<Dest>,
        client: Client,
        read: bool,
        request: &[u8],
        cmd: u16,
    ) {
        let n = self.in_flight.get();
        if n >= self.limit.get() {
            self.overflow.inc();
            return;
        }
        self.total.inc();
        let Some(dest) = dest else {
            self.error.inc();
            return;
        };
        let target = Target {
            sink: self.clone(),
            seq: 0,
            part: 0,
            cmd,
            script: crate::command::runs_script(cmd),
        };
        match pool.send(dest, client, read, request, target) {
            Ok(()) => {
                self.in_flight.set(n + 1);
                self.active.inc();
            }
            Err(_) => self.error.inc(),
        }
    }
}

impl MirrorStats {
    /// Copies a committed transaction whole to shard `shard` of `pool`: `MULTI` alone, then
    /// `request` (its `count` commands as forwarded, then `EXEC`; a large command's frame held,
    /// not copied: [`crate::upstream::Lease::exchange_pieces`]) on a leased connection of its own, since a
    /// transaction cannot share a pipelined one. One copy in the counters and the
    /// in-flight bound; it succeeds when the mirror's EXEC answers the array of results.
    ///
    /// It keeps its place among `client`'s copies: it goes out once a [`MirrorStats::fence`]
    /// behind the client's earlier copies on its shared connection to the mirror is answered,
    /// and returns once the mirror has answered it, so a caller that holds the client's later
    /// requests until then keeps those copies behind it too. Never reports to the caller.
    pub async fn send_transaction(
        self: &Rc<Self>,
        pool: &ClusterPool,
        shard: usize,
        request: Vec<Piece>,
        count: usize,
        client: Client,
    ) {
        if !self.begin() {
            return;
        }
        if let Some(answered) = self.fence(pool, Dest::Key(shard), client) {
            answered.notified().await;
        }
        let Some(addr) = pool.primary_addr(shard) else {
            self.deliver(0, 0, NO_UPSTREAM_HOST);
            return;
        };
        let ok = match pool.leases.lease(addr, false).await {
            Ok(mut lease) => {
                let multi = lease.exchange(MULTI.to_vec(), 1).await;
                let committed = match multi {
                    Ok(r) if r.first().is_some_and(|r| r.as_slice() == b"+OK\r\n") => lease
                        .exchange_pieces(&request, count + 1)
                        .await
                        .ok()
                        .and_then(|r| r.into_iter().last())
                        .is_some_and(|r| r.first() == Some(&b'*') && r.get(1) != Some(&b'-')),
                    _ => false,
                };
                // EXEC (or a refused MULTI) left nothing open on the connection.
                lease.release(true);
                committed
            }
            Err(_) => false,
        };
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
        self.active.dec();
        if ok {
            self.success.inc();
        } else {
            self.error.inc();
        }
    }

    /// Sends a `PING` to `pool` at `dest` on `client`'s connection, behind the copies sent
    /// there before it (the same sender: a connection's waiting room keeps one sender's
    /// requests in order, and turns between senders could let a `PING` of its own overtake
    /// them). The returned notification fires once it is answered or failed, which says
    /// those copies have run. `None` when the pool refused it (no host: nothing waits there).
    pub fn fence<P: Pool>(
        self: &Rc<Self>,
        pool: &P,
        dest: Dest,
        client: Client,
    ) -> Option<Rc<Notify>> {
        let id = self.next_fence.get();
        self.next_fence.set(id.wrapping_add(1).max(1));
        let target = Target {
            sink: self.clone(),
            seq: id,
            part: 0,
            cmd: u16::MAX,
            script: false,
        };
        let answered = Rc::new(Notify::default());
        self.fences.borrow_mut().push((id, answered.clone()));
        if pool.send(dest, client, false, PING, target).is_err() {
            self.fences.borrow_mut().retain(|(f, _)| *f != id);
            return None;
        }
        Some(answered)
    }

    /// Counts one copy about to be sent on a connection of its own (a large request), if the
    /// in-flight bound allows (else counted as overflow: false). The copy's reply, or the
    /// failure in its place, goes to [`Deliver::deliver`].
    pub fn begin(&self) -> bool {
        let n = self.in_flight.get();
        if n >= self.limit.get() {
            self.overflow.inc();
            return false;
        }
        self.total.inc();
        self.in_flight.set(n + 1);
        self.active.inc();
        true
    }

    /// A copy that could not be made (its keys span shards of the mirror but not of the
    /// primary): counted as handed over and failed.
    pub fn unsendable(&self) {
        self.total.inc();
        self.error.inc();
    }
}

impl Deliver for MirrorStats {
    /// The mirror's reply (or the pool's failure reply): counted, then dropped.
    fn deliver(&self, seq: u64, _part: u32, reply: &[u8]) {
        if seq != 0 {
            let mut fences = self.fences.borrow_mut();
            if let Some(i) = fences.iter().position(|(id, _)| *id == seq) {
                fences.swap_remove(i).1.notify();
            }
            return;
        }
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
        self.active.dec();
        if reply.first() == Some(&b'-') {
            self.error.inc();
        } else {
            self.success.inc();
        }
    }
}

/// `runtime_fraction` (a percentage) as a threshold out of [`FRACTION_SCALE`]; not a number:
/// everything (config validation rejects it anyway).
fn threshold(pct: f64) -> u64 {
    let pct = if pct.is_finite() {
        pct.clamp(0.0, 100.0)
    } else {
        100.0
    };
    (pct * (FRACTION_SCALE as f64 / 100.0)).round() as u64
}

/// Whether a request with `key` (`None`: a keyless command such as FLUSHALL, SCRIPT LOAD or EVAL
/// with no keys) is mirrored. Keyless commands follow a mirror that is on at all: at 0% nothing,
/// not even a FLUSHALL, reaches the mirror.
#[inline]
fn fraction_admits(threshold: u64, key: Option<&[u8]>) -> bool {
    if threshold >= FRACTION_SCALE {
        return true;
    }
    match key {
        Some(k) => crate::cluster::xxh64(k, 0) % FRACTION_SCALE < threshold,
        None => threshold > 0,
    }
}

/// One `request_mirror_policy` entry of a route, resolved for a worker.
pub struct Mirror<P = ClusterPool> {
    /// The mirror cluster's pool.
    pub pool: Rc<P>,
    /// Its copy counters and in-flight bound (shared by every route mirroring to it).
    pub stats: Rc<MirrorStats>,
    exclude_read_commands: bool,
    /// Keys with `xxh64(key) % FRACTION_SCALE` below this are mirrored; `FRACTION_SCALE` or
    /// more: every key, without hashing.
    threshold: u64,
}

impl<P> Mirror<P> {
    /// `policy` resolved to this worker's pool and stats of its cluster.
    pub fn new(policy: &MirrorPolicy, pool: Rc<P>, stats: Rc<MirrorStats>) -> Mirror<P> {
        Mirror {
            pool,
            stats,
            exclude_read_commands: policy.exclude_read_commands,
            threshold: threshold(policy.runtime_fraction),
        }
    }

    /// Whether a request is copied here: `read` (see [`crate::command::is_read`]) unless reads
    /// are excluded, and `key` (as the client sent it) within `runtime_fraction`. A keyless
    /// request passes any fraction above 0: there is nothing to hash, and scripts or FLUSHALL
    /// must reach the mirror for it to stay a faithful copy; at 0% the mirror is off.
    #[inline]
    pub fn admits(&self, read: bool, key: Option<&[u8]>) -> bool {
        if read && self.exclude_read_commands {
            return false;
        }
        self.admits_key(key)
    }

    /// The fraction part of [`Mirror::admits`].
    #[inline]
    pub fn admits_key(&self, key: Option<&[u8]>) -> bool {
        fraction_admits(self.threshold, key)
    }

    /// True when `read` requests are never copied here.
    pub fn excludes(&self, read: bool) -> bool {
        read && self.exclude_read_commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admits(pct: f64, key: &[u8]) -> bool {
        fraction_admits(threshold(pct), Some(key))
    }

    #[test]
    fn fraction_is_deterministic_and_proportional() {
        let n = 4000;
        let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
        let half = keys.iter().filter(|k| admits(50.0, k.as_bytes())).count();
        assert!((1700..2300).contains(&half), "half = {half}");
        let quarter = keys.iter().filter(|k| admits(25.0, k.as_bytes())).count();
        assert!((800..1200).contains(&quarter), "quarter = {quarter}");
        for k in &keys {
            assert_eq!(admits(50.0, k.as_bytes()), admits(50.0, k.as_bytes()));
            // A key mirrored at 25% is mirrored at 50% too: fractions nest.
            assert!(!admits(25.0, k.as_bytes()) || admits(50.0, k.as_bytes()));
        }
        assert!(keys.iter().all(|k| admits(100.0, k.as_bytes())));
        assert!(!keys.iter().any(|k| admits(0.0, k.as_bytes())));
        // Keyless commands (FLUSHALL, …) reach a mirror that is on, and never one at 0%.
        assert!(!fraction_admits(threshold(0.0), None));
        assert!(fraction_admits(threshold(0.01), None));
        assert!(fraction_admits(threshold(50.0), None));
        assert_eq!(threshold(f64::NAN), FRACTION_SCALE);
        assert_eq!(threshold(250.0), FRACTION_SCALE);
    }
}

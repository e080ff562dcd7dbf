//! One worker's pool for a Redis Cluster: the slot map it routes by, its connections to every
//! primary and replica, and the handling of redirects (Redis Cluster spec, "Redirection and
//! resharding"; Envoy `envoy.clusters.redis` and `conn_pool_impl.cc` `doRedirection`).
//!
//! - The map comes from the cluster's [`TopologyCell`]; each request compares the cell's version
//!   with the one this pool holds (one atomic load) and rebuilds the view only when it changed.
//! - `MOVED`: the slot is re-pointed in this worker's view at once and the request is sent to the
//!   new owner; the discovery thread is told, and refreshes the whole map once redirects pile up.
//! - `ASK`: `ASKING` then the request to the named node; the view does not change.
//! - `TRYAGAIN` / `CLUSTERDOWN`, and the transient states `LOADING` (a node loading its
//!   dataset after a restart), `BUSY` (a script past `busy-reply-threshold`; not for a script's
//!   own reply) and `MASTERDOWN`: sent again (to the slot's primary, or to the same node for a
//!   request not sent by key) after a short backoff
//!   (10 ms doubling, at most 200 ms) as long as `op_timeout` from the first write allows; then
//!   the node's error goes to the client. Counted in `redis_cluster.retries`.
//! - At most [`MAX_HOPS`] redirects per request; past that the client gets a `TRYAGAIN` error
//!   instead of a redirect loop.
//! - Order: once a request of slot `s` needs a second trip (any of the above), later requests
//!   of `s` — new ones, and redirects of ones already sent — wait in a per-slot queue and go one
//!   at a time until the queue is empty, so a client's commands to a slot being migrated run in
//!   the order sent. What this cannot order: a request that was already on its way to the old
//!   owner and succeeds there while an earlier one waits for a `TRYAGAIN` retry (the same holds
//!   for cluster-aware clients). A queued request that waited longer than `op_timeout` gets
//!   `upstream failure` when its turn comes.
//! - Hosts named by a redirect but absent from the map get connections too, at most
//!   `max_upstream_unknown_connections` hosts per worker; past that the redirect error goes to
//!   the client (Envoy's rule).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

mod hostname;

use super::CLUSTER_SLOTS;
use super::host::HostRegistry;
use super::pool::{Conn, Dest, PoolContext, session_conn};
use super::read_policy::{candidate, candidates, zoned};
use super::redirection::Redirection;
use super::topology::{SlotMap, TopologyCell, UNASSIGNED};
use crate::config::{ClusterConfig, ReadPolicy};
use crate::net;
use crate::stats::{Counter, Store};
use crate::upstream::{
    Deliver, HostStats, POOL_REPLACED, PoolSettings, Redirect, Retry, SendError, Target,
    UPSTREAM_FAILURE, UpstreamStats,
};

/// Most `MOVED`/`ASK` redirects one request may follow.
pub const MAX_HOPS: u8 = 5;
/// The reply past [`MAX_HOPS`].
const TOO_MANY_REDIRECTS: &[u8] = b"-TRYAGAIN too many cluster redirects for one request\r\n";
const RETRY_BASE: Duration = Duration::from_millis(10);
const RETRY_CAP: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ConnKey {
    addr: SocketAddr,
    /// A replica connection (sends `READONLY`).
    readonly: bool,
    resp3: bool,
}

/// One shard as this worker sees it, with its RESP2 connections at hand.
struct ViewShard {
    primary: SocketAddr,
    replicas: Vec<SocketAddr>,
    primary_conns: Vec<Rc<Conn>>,
    replica_conns: Vec<Vec<Rc<Conn>>>,
    /// The primary is in the listener's `local_zone` (zone read policies only).
    primary_local: bool,
    /// `replica_local[i]`: replica `i` is; same length as `replicas`.
    replica_local: Vec<bool>,
}

struct View {
    /// `slots[s]`: index into `shards`, or [`UNASSIGNED`].
    slots: Vec<u16>,
    shards: Vec<ViewShard>,
    /// Shards of the discovered map (fan-out targets); shards after these were added by `MOVED`.
    mapped: usize,
    /// The mapped shards ordered by primary address: fan-out node `i` is `shards[fanout[i]]`.
    /// Ordering by address rather than by first slot keeps a SCAN cursor's node index valid
    /// when slots move between primaries mid-iteration.
    fanout: Vec<usize>,
}

struct SlotStats {
    redirect_ok: Arc<Counter>,
    redirect_failed: Arc<Counter>,
    unknown_reached: Arc<Counter>,
    unknown_total: Arc<Counter>,
    retries: Arc<Counter>,
}

/// A worker's connections to one Redis Cluster and the slot map it routes by.
pub struct SlotPool {
    name: String,
    cell: Arc<TopologyCell>,
    /// Version of the map `view` was built from.
    seen: Cell<u64>,
    view: RefCell<View>,
    conns: RefCell<HashMap<ConnKey, Vec<Rc<Conn>>>>,
    /// Hosts connected only because a redirect named them.
    unknown: RefCell<HashSet<SocketAddr>>,
    settings: Rc<PoolSettings>,
    per_host: usize,
    store: Arc<Store>,
    /// Process-wide host states, where a node met for the first time is looked up.
    hosts: Arc<HostRegistry>,
    /// The config the pool was built from (the host registry keys hosts by cluster).
    cluster: ClusterConfig,
    worker: usize,
    host_stats: RefCell<HashMap<SocketAddr, HostStats>>,
    /// Request time and per-command stats of the cluster, shared by every node's connections.
    upstream: Rc<UpstreamStats>,
    stats: SlotStats,
    /// Replaced by a config change: no new connections (a redirect or retry finishing late must
    /// not open connections nobody would ever close).
    retired: Cell<bool>,
    /// (session, slot) pairs with a request on a detour, each with that session's requests of
    /// the slot waiting behind it (with when they started waiting). Per session: order is owed
    /// to each client, and one client's retries must not hold up the others.
    detours: RefCell<HashMap<(u64, u16), Waiting>>,
    /// Slots whose detour ended, to start their next request (a queue, not recursion: a start
    /// that fails at once ends the detour again).
    detours_done: RefCell<Vec<(u64, u16)>>,
    draining_detours: Cell<bool>,
    me: Weak<SlotPool>,
}

/// A node to send to: its connections of the right kind (RESP2) and its address.
#[derive(Clone, Copy)]
struct Node<'a> {
    conns: &'a [Rc<Conn>],
    addr: SocketAddr,
    readonly: bool,
}

impl<'a> Node<'a> {
    fn primary(addr: SocketAddr, conns: &'a [Rc<Conn>]) -> Node<'a> {
        Node {
            conns,
            addr,
            readonly: false,
        }
    }
}

/// A request on its way: bytes, reply target, redirect state, and whether `ASKING` goes first.
struct Out<'a> {
    request: &'a [u8],
    target: Target,
    retry: Retry,
    asking: bool,
}

impl<'a> Out<'a> {
    fn new(request: &'a [u8], target: Target, retry: Retry) -> Out<'a> {
        Out {
            request,
            target,
            retry,
            asking: false,
        }
    }
}

/// A session's requests of one slot waiting behind its detour, with when each began to wait.
type Waiting = VecDeque<(Instant, Held)>;

/// A request of a slot waiting behind the slot's detour.
enum Held {
    /// A redirect or retry reply to a request that was already sent.
    Redirect {
        from: SocketAddr,
        reply: Vec<u8>,
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    },
    /// A request that has not been sent yet.
    Fresh {
        session: u64,
        resp3: bool,
        read: bool,
        request: Vec<u8>,
        target: Target,
    },
}

/// The reply target of a slot's detour: hands the reply on, then lets the slot's next waiting
/// request go.
struct DetourEnd {
    target: Target,
    pool: Weak<SlotPool>,
    key: (u64, u16),
    done: Cell<bool>,
}

impl Deliver for DetourEnd {
    fn deliver(&self, _seq: u64, _part: u32, reply: &[u8]) {
        self.target.deliver(reply);
        if !self.done.replace(true)
            && let Some(pool) = self.pool.upgrade()
        {
            pool.detour_done(self.key);
        }
    }
}

impl SlotPool {
    /// A pool for `cluster` that routes by the maps published in `cell`.
    pub fn start(
        cluster: &ClusterConfig,
        settings: Rc<PoolSettings>,
        cell: Arc<TopologyCell>,
        ctx: &PoolContext,
    ) -> Rc<SlotPool> {
        let (store, worker) = (ctx.store.clone(), ctx.worker);
        let name = cluster.name.clone();
        let c = |stat: &str| store.counter(&format!("cluster.{name}.{stat}"), worker);
        let stats = SlotStats {
            redirect_ok: c("upstream_internal_redirect_succeeded_total"),
            redirect_failed: c("upstream_internal_redirect_failed_total"),
            unknown_reached: c("redis_cluster.max_upstream_unknown_connections_reached"),
            unknown_total: c("redis_cluster.upstream_cx_unknown_total"),
            retries: c("redis_cluster.retries"),
        };
        let upstream = ctx.upstream_stats(&name, &settings);
        let pool = Rc::new_cyclic(|me| SlotPool {
            name: name.clone(),
            cell,
            seen: Cell::new(0),
            view: RefCell::new(View {
                slots: vec![UNASSIGNED; CLUSTER_SLOTS as usize],
                shards: Vec::new(),
                mapped: 0,
                fanout: Vec::new(),
            }),
            conns: RefCell::new(HashMap::new()),
            unknown: RefCell::new(HashSet::new()),
            settings,
            per_host: cluster.connections_per_host.max(1),
            store,
            worker,
            hosts: ctx.hosts.clone(),
            cluster: cluster.clone(),
            host_stats: RefCell::new(HashMap::new()),
            upstream,
            stats,
            retired: Cell::new(false),
            detours: RefCell::new(HashMap::new()),
            detours_done: RefCell::new(Vec::new()),
            draining_detours: Cell::new(false),
            me: me.clone(),
        });
        pool.sync();
        pool
    }

    /// Takes the newest map if the discovery thread published one since the last look.
    #[inline]
    fn sync(&self) {
        if self.cell.version() == self.seen.get() || self.retired.get() {
            return;
        }
        if let Some((version, map)) = self.cell.current() {
            self.seen.set(version);
            let zones = self.cell.zones();
            self.rebuild(&map, &zones);
        }
    }

    /// Rebuilds the view from `map`: connections to hosts it still names are kept, the others
    /// retire once their in-flight requests are answered.
    /// `zones`: the nodes' availability zones, compared with the listener's `local_zone`.
    fn rebuild(&self, map: &SlotMap, zones: &HashMap<SocketAddr, String>) {
        let local = |addr: &SocketAddr| {
            self.settings
                .local_zone
                .as_deref()
                .is_some_and(|z| zones.get(addr).is_some_and(|n| n == z))
        };
        let mut live: HashSet<(SocketAddr, bool)> = HashSet::new();
        let shards: Vec<ViewShard> = map
            .shards
            .iter()
            .map(|sh| {
                live.insert((sh.primary, false));
                for r in &sh.replicas {
                    live.insert((*r, true));
                }
                ViewShard {
                    primary: sh.primary,
                    replicas: sh.replicas.clone(),
                    primary_conns: self.conns_for(sh.primary, false, false),
                    replica_conns: sh
                        .replicas
                        .iter()
                        .map(|r| self.conns_for(*r, true, false))
                        .collect(),
                    primary_local: local(&sh.primary),
                    replica_local: sh.replicas.iter().map(local).collect(),
                }
            })
            .collect();
        // Hosts known only from redirects are forgotten with each new map: a host that matters
        // is in it by now, and one that died must not be reconnected to forever.
        self.unknown.borrow_mut().clear();
        self.conns.borrow_mut().retain(|k, conns| {
            let keep = live.contains(&(k.addr, k.readonly));
            if !keep {
                conns.iter().for_each(|c| c.retire());
            }
            keep
        });
        debug!(cluster = %self.name, shards = shards.len(), "slot map applied");
        let mut fanout: Vec<usize> = (0..shards.len()).collect();
        fanout.sort_by_key(|&i| shards.get(i).map(|s| s.primary));
        *self.view.borrow_mut() = View {
            slots: map.slots.clone(),
            mapped: shards.len(),
            shards,
            fanout,
        };
    }

    /// The connections to `addr` of the given kind, started on first use.
    fn conns_for(&self, addr: SocketAddr, readonly: bool, resp3: bool) -> Vec<Rc<Conn>> {
        let key = ConnKey {
            addr,
            readonly,
            resp3,
        };
        if let Some(c) = self.conns.borrow().get(&key) {
            return c.clone();
        }
        if self.retired.get() {
            return Vec::new();
        }
        let stats = self
            .host_stats
            .borrow_mut()
            .entry(addr)
            .or_insert_with(|| {
                HostStats::new(
                    &self.store,
                    self.worker,
                    &self.name,
                    &addr.to_string(),
                    &self.upstream,
                )
            })
            .clone();
        let settings = if resp3 {
            Rc::new(PoolSettings {
                resp3: true,
                ..(*self.settings).clone()
            })
        } else {
            self.settings.clone()
        };
        let me: Weak<dyn Redirect> = self.me.clone();
        let shared = self.hosts.host(&self.cluster, addr);
        let conns: Vec<Rc<Conn>> = (0..self.per_host)
            .map(|_| {
                Conn::start_cluster(
                    shared.clone(),
                    settings.clone(),
                    stats.clone(),
                    Some(me.clone()),
                    readonly,
                )
            })
            .collect();
        self.conns.borrow_mut().insert(key, conns.clone());
        conns
    }

    /// Sends to one node: its RESP2 connection from the view, or a RESP3 one from the map
    /// (`out.retry.resp3`).
    fn send_node(&self, node: Node<'_>, session: u64, out: Out<'_>) -> Result<(), SendError> {
        let Node {
            conns,
            addr,
            readonly,
        } = node;
        let resp3 = out.retry.resp3;
        let pick = |conns: &[Rc<Conn>]| session_conn(conns, session).cloned();
        let conn = if resp3 {
            let key = ConnKey {
                addr,
                readonly,
                resp3,
            };
            let found = self.conns.borrow().get(&key).and_then(|c| pick(c));
            match found {
                Some(c) => Some(c),
                None => pick(&self.conns_for(addr, readonly, true)),
            }
        } else {
            pick(conns)
        };
        conn.ok_or(SendError::NoHost)?.send_retry(
            session,
            out.request,
            out.target,
            out.retry,
            out.asking,
        )
    }

    /// See [`super::ClusterPool::send`]: `dest` is a slot ([`Dest::Key`]) or a fan-out node.
    pub fn send(
        &self,
        dest: Dest,
        session: u64,
        resp3: bool,
        read: bool,
        request: &[u8],
        target: Target,
    ) -> Result<(), SendError> {
        // One map lookup only while some slot is on a detour (a migration in progress).
        if let Dest::Key(s) = dest {
            let mut detours = self.detours.borrow_mut();
            if !detours.is_empty()
                && let Some(queue) = detours.get_mut(&(session, s as u16))
            {
                let held = Held::Fresh {
                    session,
                    resp3,
                    read,
                    request: request.to_vec(),
                    target,
                };
                queue.push_back((Instant::now(), held));
                return Ok(());
            }
        }
        self.send_with(dest, session, resp3, read, request, target, false)
    }

    /// [`SlotPool::send`] without the detour queue; `detour`: the request is its slot's detour.
    #[allow(clippy::too_many_arguments)]
    fn send_with(
        &self,
        dest: Dest,
        session: u64,
        resp3: bool,
        read: bool,
        request: &[u8],
        target: Target,
        detour: bool,
    ) -> Result<(), SendError> {
        self.sync();
        let view = self.view.borrow();
        let (shard, slot) = match dest {
            Dest::Key(s) => (
                *view.slots.get(s).ok_or(SendError::NoHost)? as usize,
                Some(s as u16),
            ),
            Dest::Node(i) => (*view.fanout.get(i).ok_or(SendError::NoHost)?, None),
        };
        let sh = view.shards.get(shard).ok_or(SendError::NoHost)?;
        let retry = Retry {
            slot,
            resp3,
            session,
            detour,
            ..Retry::FIRST
        };
        let policy = if read {
            self.settings.read_policy
        } else {
            ReadPolicy::Primary
        };
        let nrep = sh.replicas.len();
        let count = candidates(policy, nrep);
        // A node failing its health checks or ejected is skipped like one in backoff, but
        // without waiting for a send to find out (a hung replica would hold reads until
        // op_timeout); only backoff hints at a topology change.
        let healthy = |conns: &[Rc<Conn>]| conns.first().is_none_or(|c| c.healthy());
        let mut backoff = false;
        let mut overflow = false;
        for k in 0..count {
            let pick = if policy.zone_aware() {
                zoned(policy, sh.primary_local, &sh.replica_local, session, k)
            } else {
                candidate(policy, nrep, session, k)
            };
            let sent = match pick {
                None if !healthy(&sh.primary_conns) => continue,
                None => self.send_node(
                    Node::primary(sh.primary, &sh.primary_conns),
                    session,
                    Out::new(request, target.clone(), retry),
                ),
                Some(i) => {
                    let (Some(addr), Some(conns)) = (sh.replicas.get(i), sh.replica_conns.get(i))
                    else {
                        continue;
                    };
                    if !healthy(conns) {
                        continue;
                    }
                    let node = Node {
                        conns,
                        addr: *addr,
                        readonly: true,
                    };
                    self.send_node(node, session, Out::new(request, target.clone(), retry))
                }
            };
            match sent {
                Ok(()) => return Ok(()),
                // A full queue is not a sign of a topology change.
                Err(SendError::Overflow) => overflow = true,
                Err(SendError::NoHost) => backoff = true,
            }
        }
        // Some candidate is in reconnect backoff: its node may be gone (failover), which only
        // a topology refresh can tell. (Unhealthy nodes reach discovery through the health
        // thread's degraded-host trigger instead.)
        if backoff {
            self.cell.note_failure();
        }
        Err(if overflow {
            SendError::Overflow
        } else {
            SendError::NoHost
        })
    }

    /// The primary that owns `slot` in the current map, if it is assigned and healthy.
    pub fn primary_of(&self, slot: usize) -> Option<SocketAddr> {
        self.sync();
        let view = self.view.borrow();
        let shard = view.shards.get(*view.slots.get(slot)? as usize)?;
        shard
            .primary_conns
            .first()
            .is_none_or(|c| c.healthy())
            .then_some(shard.primary)
    }

    /// The node to send a request again after `reply` came from `from` on a leased
    /// connection, and whether it needs `ASKING` first. `MOVED` re-points the slot in this
    /// worker's view (and tells the discovery thread, as a followed redirect does); `ASK`
    /// leaves the map unchanged. `None`: not `MOVED`/`ASK`, or the node is past the
    /// unknown-host cap.
    pub fn lease_redirect(&self, from: SocketAddr, reply: &[u8]) -> Option<(SocketAddr, bool)> {
        match Redirection::parse(reply, from)? {
            Redirection::Moved { slot, addr } => {
                self.cell.note_redirect();
                let idx = self.shard_of_primary(addr)?;
                if let Some(s) = self.view.borrow_mut().slots.get_mut(slot as usize) {
                    *s = idx as u16;
                }
                Some((addr, false))
            }
            Redirection::Ask { addr, .. } => {
                self.cell.note_redirect();
                self.admit_unknown(addr).then_some((addr, true))
            }
            Redirection::Retry => None,
        }
    }

    /// The address of every primary in the current map (fan-out order), healthy or not.
    pub fn primary_addrs(&self) -> Vec<SocketAddr> {
        self.sync();
        let view = self.view.borrow();
        view.fanout
            .iter()
            .filter_map(|&i| view.shards.get(i).map(|s| s.primary))
            .collect()
    }

    /// Number of primaries in the current map (fan-out targets).
    pub fn primaries(&self) -> usize {
        self.sync();
        self.view.borrow().mapped
    }

    /// The pool was replaced by a config change: every connection retires.
    pub fn retire(&self) {
        self.retired.set(true);
        for conns in self.conns.borrow_mut().drain().map(|(_, c)| c) {
            conns.iter().for_each(|c| c.retire());
        }
    }

    /// Starts a detour for `slot` if none is running: `target` and `retry` become the detour's
    /// (its end lets the slot's next request go). `None`: another request of the slot is on a
    /// detour, the caller queues this one.
    fn begin_detour(&self, slot: u16, target: Target, retry: Retry) -> Option<(Target, Retry)> {
        let key = (retry.session, slot);
        let mut detours = self.detours.borrow_mut();
        if detours.contains_key(&key) {
            return None;
        }
        detours.insert(key, VecDeque::new());
        let (target_cmd, script) = (target.cmd, target.script);
        let end = DetourEnd {
            target,
            pool: self.me.clone(),
            key,
            done: Cell::new(false),
        };
        let target = Target {
            cmd: target_cmd,
            script,
            sink: Rc::new(end),
            seq: 0,
            part: 0,
        };
        Some((
            target,
            Retry {
                detour: true,
                ..retry
            },
        ))
    }

    /// The detour of `key` (session, slot) ended: the session's next waiting request of the
    /// slot becomes the detour.
    fn detour_done(&self, key: (u64, u16)) {
        self.detours_done.borrow_mut().push(key);
        if self.draining_detours.replace(true) {
            return;
        }
        loop {
            let Some(key) = self.detours_done.borrow_mut().pop() else {
                break;
            };
            let next = {
                let mut detours = self.detours.borrow_mut();
                match detours.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some(next) => Some(next),
                    None => {
                        detours.remove(&key);
                        None
                    }
                }
            };
            let Some((since, held)) = next else {
                continue;
            };
            // Its own op_timeout would have passed while it waited.
            let expired = since.elapsed() > self.settings.op_timeout;
            let end = |target: Target| DetourEnd {
                target,
                pool: self.me.clone(),
                key,
                done: Cell::new(false),
            };
            let wrap = |target: Target| Target {
                cmd: target.cmd,
                script: target.script,
                sink: Rc::new(end(target)),
                seq: 0,
                part: 0,
            };
            match held {
                Held::Redirect { target, .. } | Held::Fresh { target, .. } if expired => {
                    wrap(target).deliver(UPSTREAM_FAILURE);
                }
                Held::Redirect {
                    from,
                    reply,
                    request,
                    target,
                    retry,
                } => {
                    let retry = Retry {
                        detour: true,
                        ..retry
                    };
                    self.follow(from, &reply, request, wrap(target), retry);
                }
                Held::Fresh {
                    session,
                    resp3,
                    read,
                    request,
                    target,
                } => {
                    let target = wrap(target);
                    let dest = Dest::Key(key.1 as usize);
                    let sent =
                        self.send_with(dest, session, resp3, read, &request, target.clone(), true);
                    if let Err(e) = sent {
                        // After a reload the old pool's connections are gone: say so, retryably.
                        let reply = if self.retired.get() {
                            POOL_REPLACED
                        } else {
                            e.reply()
                        };
                        target.deliver(reply);
                    }
                }
            }
        }
        self.draining_detours.set(false);
    }

    /// The view's shard whose primary is `addr`, added (as a host known only from a redirect)
    /// when the map has none; `None` when the unknown-host cap is reached.
    fn shard_of_primary(&self, addr: SocketAddr) -> Option<usize> {
        if let Some(i) = self
            .view
            .borrow()
            .shards
            .iter()
            .position(|s| s.primary == addr)
        {
            return Some(i);
        }
        if !self.admit_unknown(addr) {
            return None;
        }
        let conns = self.conns_for(addr, false, false);
        let mut view = self.view.borrow_mut();
        view.shards.push(ViewShard {
            primary: addr,
            replicas: Vec::new(),
            primary_local: false,
            replica_local: Vec::new(),
            primary_conns: conns,
            replica_conns: Vec::new(),
        });
        Some(view.shards.len() - 1)
    }

    /// True if `addr` may be connected to: it is in the map, already admitted, or the
    /// unknown-host cap has room (then it is admitted).
    fn admit_unknown(&self, addr: SocketAddr) -> bool {
        let known = self
            .view
            .borrow()
            .shards
            .iter()
            .any(|s| s.primary == addr || s.replicas.contains(&addr));
        let mut unknown = self.unknown.borrow_mut();
        if known || unknown.contains(&addr) {
            return true;
        }
        if unknown.len() >= self.settings.max_upstream_unknown_connections {
            self.stats.unknown_reached.inc();
            return false;
        }
        unknown.insert(addr);
        self.stats.unknown_total.inc();
        true
    }

    /// Follows `MOVED`: re-points the slot and sends the request to the new owner.
    fn follow_moved(
        &self,
        slot: u16,
        addr: SocketAddr,
        request: &[u8],
        target: Target,
        retry: Retry,
    ) -> bool {
        let Some(idx) = self.shard_of_primary(addr) else {
            return false;
        };
        if let Some(s) = self.view.borrow_mut().slots.get_mut(slot as usize) {
            *s = idx as u16;
        }
        let view = self.view.borrow();
        let Some(sh) = view.shards.get(idx) else {
            return false;
        };
        self.send_node(
            Node::primary(addr, &sh.primary_conns),
            retry.session,
            Out::new(request, target, retry),
        )
        .is_ok()
    }

    /// Follows `ASK`: `ASKING` and the request to `addr`, the map unchanged.
    fn follow_ask(&self, addr: SocketAddr, request: &[u8], target: Target, retry: Retry) -> bool {
        if !self.admit_unknown(addr) {
            return false;
        }
        let conns = self.conns_for(addr, false, false);
        let out = Out {
            asking: true,
            ..Out::new(request, target, retry)
        };
        self.send_node(Node::primary(addr, &conns), retry.session, out)
            .is_ok()
    }

    /// Sends the request again after a backoff, by slot (or to `from` for a node request),
    /// unless that would pass `op_timeout` from its first write. `false`: give up now.
    fn retry_later(
        &self,
        from: SocketAddr,
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    ) -> bool {
        let delay = RETRY_BASE
            .saturating_mul(1u32 << retry.tries.min(8))
            .min(RETRY_CAP);
        let started = retry.started.unwrap_or_else(Instant::now);
        if started.elapsed() + delay > self.settings.op_timeout {
            return false;
        }
        let Some(me) = self.me.upgrade() else {
            return false;
        };
        self.stats.retries.inc();
        let retry = Retry {
            tries: retry.tries.saturating_add(1),
            started: Some(started),
            ..retry
        };
        net::spawn(async move {
            net::sleep(delay).await;
            let sent = if let Some(slot) = retry.slot {
                me.sync();
                let owner = {
                    let view = me.view.borrow();
                    view.slots
                        .get(slot as usize)
                        .and_then(|&i| view.shards.get(i as usize))
                        .map(|sh| (sh.primary, sh.primary_conns.clone()))
                };
                match owner {
                    Some((addr, conns)) => me.send_node(
                        Node::primary(addr, &conns),
                        retry.session,
                        Out::new(&request, target.clone(), retry),
                    ),
                    None => Err(SendError::NoHost),
                }
            } else {
                let conns = me.conns_for(from, false, false);
                me.send_node(
                    Node::primary(from, &conns),
                    retry.session,
                    Out::new(&request, target.clone(), retry),
                )
            };
            if let Err(e) = sent {
                target.deliver(e.reply());
            }
        });
        true
    }
}

impl SlotPool {
    /// Handles a redirect or retry reply now: follows it, retries later, or answers.
    fn follow(
        &self,
        from: SocketAddr,
        reply: &[u8],
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    ) {
        let parsed = Redirection::parse(reply, from);
        let followed = match parsed {
            Some(Redirection::Moved { slot, addr }) | Some(Redirection::Ask { slot, addr }) => {
                self.cell.note_redirect();
                if retry.hops >= MAX_HOPS {
                    self.stats.redirect_failed.inc();
                    self.final_error(&target);
                    return target.deliver(TOO_MANY_REDIRECTS);
                }
                let next = Retry {
                    hops: retry.hops + 1,
                    slot: Some(slot),
                    ..retry
                };
                match parsed {
                    Some(Redirection::Ask { .. }) => {
                        self.follow_ask(addr, &request, target.clone(), next)
                    }
                    _ => self.follow_moved(slot, addr, &request, target.clone(), next),
                }
            }
            Some(Redirection::Retry) => {
                if self.retry_later(from, request, target.clone(), retry) {
                    return;
                }
                self.final_error(&target);
                return target.deliver(reply);
            }
            None => false,
        };
        if followed {
            self.stats.redirect_ok.inc();
        } else {
            self.stats.redirect_failed.inc();
            self.final_error(&target);
            target.deliver(reply);
        }
    }

    /// A redirect or retry reply ends up as the request's final reply (an error): it counts
    /// as the command's upstream outcome, as a followed one counts by the reply it led to (its
    /// time was recorded by the connection that got it).
    fn final_error(&self, target: &Target) {
        self.upstream
            .record(target.cmd, false, None, crate::stats::clock::now());
    }
}

impl Redirect for SlotPool {
    fn redirect(
        &self,
        from: SocketAddr,
        reply: &[u8],
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    ) {
        let slot = match Redirection::parse(reply, from) {
            Some(Redirection::Moved { slot, .. }) | Some(Redirection::Ask { slot, .. }) => {
                Some(slot)
            }
            Some(Redirection::Retry) => retry.slot,
            None => None,
        };
        if let Some(cache) = self.hostname_cache(reply) {
            return self.follow_hostname(cache, from, reply, request, target, retry);
        }
        // Requests sent to a node rather than by key, and the detour itself, go straight on.
        let Some(slot) = slot.filter(|_| !retry.detour) else {
            return self.follow(from, reply, request, target, retry);
        };
        let (target, retry) = match self.begin_detour(slot, target.clone(), retry) {
            Some(started) => started,
            None => {
                let held = Held::Redirect {
                    from,
                    reply: reply.to_vec(),
                    request,
                    target,
                    retry,
                };
                if let Some(queue) = self.detours.borrow_mut().get_mut(&(retry.session, slot)) {
                    queue.push_back((Instant::now(), held));
                }
                return;
            }
        };
        self.follow(from, reply, request, target, retry)
    }

    fn note_failure(&self) {
        self.cell.note_failure();
    }
}

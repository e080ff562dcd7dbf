//! A worker: one thread, one io_uring runtime, its own listeners (`SO_REUSEPORT`), sessions,
//! upstream pools and stats shards. Workers share nothing mutable; the main thread talks to them
//! only through their control channel.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::accept_backoff::AcceptBackoff;
use super::blocked::BlockedClients;
use super::budget::{self, Budget};
use super::handshake;
use super::observe::Observer;
use super::pubsub::{Counts, Hub};
use super::sink::Sink;
use super::stats::ListenerStats;
use crate::cluster::topology::Registry;
use crate::cluster::{ClusterPool, HostRegistry, PoolContext};
use crate::config::Route;
use crate::config::{Config, ListenerConfig};
use crate::net::{self, TaskHandle, TcpListener};
use crate::router::fault::Faults;
use crate::router::{Mirror, MirrorStats, RouteRuntime, Router};
use crate::stats::Store;
use crate::stats::log_limit::log_limited;
use crate::upstream::PoolSettings;

/// How many sessions must have closed before freed memory is handed back to the kernel, and how
/// often that is checked: keeps the trim rare under ordinary connection churn.
const TRIM_AFTER_CLOSED: usize = 256;
const TRIM_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Messages from the main thread.
pub enum Control {
    /// Apply a new config snapshot; the result goes back on the sender.
    Apply(Arc<Config>, mpsc::Sender<Result<(), String>>),
    /// Stop accepting, answer what was read, close connections gracefully (up to `timeout`),
    /// then stop. `accept_queued`: serve the connections already queued on the listeners rather
    /// than let the kernel reset them (when it cannot migrate them: `tcp_migrate_req = 0`).
    Drain {
        timeout: Duration,
        accept_queued: bool,
    },
}

/// Worker-wide state the sessions see.
pub struct WorkerShared {
    pub id: usize,
    /// Number of workers in the process.
    pub workers: usize,
    /// Requests accepted and not yet fully written back (drain waits for zero).
    pub active: Rc<Cell<i64>>,
    draining: Cell<bool>,
    /// When the drain ends: sessions still open then are closed abruptly.
    drain_deadline: Cell<Option<Instant>>,
    next_session: Cell<u64>,
    /// Downstream sessions closed since freed memory was last handed back to the kernel.
    closed_since_trim: Cell<usize>,
    /// Open downstream sessions by id, with their reply queue, whose `reader` notification a
    /// drain uses to stop their readers. Touched once per connection, not per request.
    sessions: RefCell<HashMap<u64, Weak<Sink>>>,
    /// Accept loops running: a drain waits for them to end, so a connection their last accept
    /// took is served, not dropped with a cancelled accept.
    accepting: Cell<usize>,
    /// The blocked clients of every worker (CLIENT UNBLOCK finds them by client id).
    pub blocked_clients: Arc<BlockedClients>,
    /// This worker's pub/sub: its upstream subscriptions and their local subscribers.
    pub pubsub: Rc<Hub>,
    /// The bytes this worker's clients hold, against its share of `maxmemory_clients`.
    pub budget: Rc<Budget>,
}

/// What the workers of one process share. Each part has its own lock and is touched off the
/// steady path (blocking commands, subscribes, PUBLISH while subscriptions exist).
#[derive(Clone, Default)]
pub struct ProcessWide {
    /// Clients blocked in a blocking command, by client id.
    pub blocked_clients: Arc<BlockedClients>,
    /// Subscription counts, for the counts PUBLISH and PUBSUB NUMSUB answer.
    pub pubsub_counts: Arc<Counts>,
}

impl WorkerShared {
    /// A fresh id for a downstream session (picks its upstream connection when there are many).
    pub fn next_session_id(&self) -> u64 {
        let id = self.next_session.get();
        self.next_session.set(id.wrapping_add(1));
        id
    }

    /// CLIENT ID of session `session`: unique across the process's workers.
    pub fn client_id(&self, session: u64) -> u64 {
        session * self.workers as u64 + self.id as u64 + 1
    }

    /// Session `id` opened; a drain wakes its reader through `sink.reader`.
    pub fn session_opened(&self, id: u64, sink: &Rc<Sink>) {
        self.sessions.borrow_mut().insert(id, Rc::downgrade(sink));
    }

    /// Session `id`'s connection closed (its memory is handed back by [`trim_memory`]).
    pub fn session_closed(&self, id: u64) {
        self.sessions.borrow_mut().remove(&id);
        self.closed_since_trim.set(self.closed_since_trim.get() + 1);
    }

    /// True once SIGTERM asked this worker to drain.
    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    /// When the drain ends (`None` while not draining).
    pub fn drain_deadline(&self) -> Option<Instant> {
        self.drain_deadline.get()
    }

    fn open_sessions(&self) -> usize {
        self.sessions.borrow().len()
    }

    /// Wakes every session's reader so it sees the drain, even while it waits for bytes.
    fn wake_readers(&self) {
        let sinks: Vec<Rc<Sink>> = self
            .sessions
            .borrow()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for sink in sinks {
            sink.reader.notify();
        }
    }
}

/// What a listener's sessions use to serve a request: config, routes and stats of one snapshot.
pub struct ListenerRuntime {
    pub config: ListenerConfig,
    pub router: Router,
    pub stats: Rc<ListenerStats>,
    /// Hot keys, big values, access log; `None` when the listener observes none of them.
    pub observer: Option<Rc<Observer>>,
    /// The listener's `faults` (Envoy `RedisFault`); `None` when it has none.
    pub faults: Option<Faults>,
}

impl ListenerRuntime {
    /// The listener requires RESP3 (`protocol_version = "resp3"`): requests before `HELLO 3`
    /// are refused.
    #[inline]
    pub fn resp3_only(&self) -> bool {
        self.config.protocol_version == Some(crate::config::ProtocolVersion::Resp3)
    }

    /// True if `name` is one of the listener's `custom_commands` (case-insensitive).
    pub fn custom_command(&self, name: &[u8]) -> bool {
        self.config
            .custom_commands
            .iter()
            .any(|c| c.as_bytes().eq_ignore_ascii_case(name))
    }
}

/// A listener's current runtime; swapped on reload, read by sessions once per read batch.
pub struct ListenerHandle {
    current: RefCell<Rc<ListenerRuntime>>,
}

impl ListenerHandle {
    /// The runtime of the newest applied config.
    pub fn current(&self) -> Rc<ListenerRuntime> {
        self.current.borrow().clone()
    }
}

struct ActiveListener {
    address: SocketAddr,
    handle: Rc<ListenerHandle>,
    /// Shared with the accept task, so a drain can empty its queue and stop it listening.
    socket: Rc<TcpListener>,
    _accept: TaskHandle,
}

struct Worker {
    shared: Rc<WorkerShared>,
    store: Arc<Store>,
    /// What the worker's cluster pools are built with.
    pool_ctx: PoolContext,
    listeners: HashMap<String, ActiveListener>,
    /// Keyed by cluster and connection settings: listeners with the same settings share a pool.
    pools: HashMap<(String, PoolSettings), Rc<ClusterPool>>,
    listener_stats: HashMap<String, Rc<ListenerStats>>,
    /// Mirror copy stats and in-flight bound per mirror cluster, kept across reloads (copies in
    /// flight during a reload are still counted against the bound).
    mirror_stats: HashMap<String, Rc<MirrorStats>>,
}

/// Starts worker `id` on its own thread and applies `config`; returns once it is serving or
/// failed to (e.g. a listener address in use).
pub fn spawn(
    id: usize,
    config: Arc<Config>,
    store: Arc<Store>,
    registry: Arc<Registry>,
    hosts: Arc<HostRegistry>,
    process: ProcessWide,
    cpu: Option<usize>,
) -> Result<(async_channel::Sender<Control>, std::thread::JoinHandle<()>), String> {
    let (tx, rx) = async_channel::unbounded::<Control>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let join = std::thread::Builder::new()
        .name(format!("respite-worker-{id}"))
        .spawn(move || {
            let rt = match net::runtime(cpu) {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("worker {id}: io_uring runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let mut worker = Worker {
                    shared: Rc::new(WorkerShared {
                        id,
                        workers: config.runtime.workers.max(1),
                        active: Rc::new(Cell::new(0)),
                        draining: Cell::new(false),
                        drain_deadline: Cell::new(None),
                        next_session: Cell::new(0),
                        closed_since_trim: Cell::new(0),
                        sessions: RefCell::new(HashMap::new()),
                        accepting: Cell::new(0),
                        blocked_clients: process.blocked_clients,
                        pubsub: Hub::new(id, &store, process.pubsub_counts),
                        budget: Rc::new(Budget::default()),
                    }),
                    pool_ctx: PoolContext {
                        store: store.clone(),
                        worker: id,
                        registry,
                        hosts,
                        command_name,
                    },
                    store,
                    listeners: HashMap::new(),
                    pools: HashMap::new(),
                    listener_stats: HashMap::new(),
                    mirror_stats: HashMap::new(),
                };
                net::spawn(trim_memory(worker.shared.clone()));
                net::spawn(evict_clients(worker.shared.clone()));
                net::spawn(flush_stats());
                let first = worker.apply(&config);
                let ok = first.is_ok();
                let _ = ready_tx.send(first);
                if !ok {
                    return;
                }
                while let Ok(msg) = rx.recv().await {
                    match msg {
                        Control::Apply(cfg, reply) => {
                            let _ = reply.send(worker.apply(&cfg));
                        }
                        Control::Drain {
                            timeout,
                            accept_queued,
                        } => {
                            worker.drain(timeout, accept_queued).await;
                            crate::stats::flush_thread_blocking();
                            return;
                        }
                    }
                }
                crate::stats::flush_thread_blocking();
            });
        })
        .map_err(|e| format!("worker {id}: thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok((tx, join)),
        Ok(Err(e)) => {
            let _ = join.join();
            Err(e)
        }
        Err(_) => Err(format!("worker {id} exited during start-up")),
    }
}

/// The name of command table id `id`, for per-command upstream stats.
fn command_name(id: u16) -> Option<&'static str> {
    crate::command::COMMANDS
        .get(usize::from(id))
        .map(|c| c.name)
}

impl Worker {
    /// The routing table of listener `l` over its pools `pools` (by cluster name).
    fn router(
        &mut self,
        l: &ListenerConfig,
        pools: &HashMap<&str, Rc<ClusterPool>>,
    ) -> Result<Router, String> {
        let pool = |name: &str| {
            pools
                .get(name)
                .cloned()
                .ok_or_else(|| format!("listener {}: unknown cluster {name}", l.name))
        };
        let mut build = |r: &Route| -> Result<RouteRuntime, String> {
            let mut mirrors = Vec::with_capacity(r.request_mirror_policy.len());
            for m in &r.request_mirror_policy {
                let mpool = pool(&m.cluster)?;
                let limit = mpool.cluster.max_pending_requests;
                let stats = self
                    .mirror_stats
                    .entry(m.cluster.clone())
                    .or_insert_with(|| {
                        MirrorStats::new(&self.store, self.shared.id, &m.cluster, limit)
                    })
                    .clone();
                stats.set_limit(limit);
                mirrors.push(Mirror::new(m, mpool, stats));
            }
            let read_pool = match &r.read_command_policy {
                Some(c) => Some(pool(c)?),
                None => None,
            };
            let strip = if r.remove_prefix { r.prefix.len() } else { 0 };
            Ok(RouteRuntime::new(
                pool(&r.cluster)?,
                read_pool,
                mirrors,
                strip,
                r.key_formatter.as_deref(),
            ))
        };
        let mut routes = Vec::with_capacity(l.prefix_routes.routes.len());
        for r in &l.prefix_routes.routes {
            routes.push((r.prefix.as_bytes().to_vec(), build(r)?));
        }
        let catch_all = match &l.prefix_routes.catch_all_route {
            Some(r) => Some(build(r)?),
            None => None,
        };
        Ok(Router::new(
            routes,
            catch_all,
            l.prefix_routes.case_insensitive,
        ))
    }

    /// Builds routes and pools for `config`, reusing pools whose cluster and settings did not
    /// change (so they keep their connections), binding new listeners and closing removed ones.
    // Pools are keyed by their settings, whose TLS part holds a rustls config with interior
    // caches; its hash and equality read only the digest of the files it was built from, which
    // never changes, so the key is stable.
    #[allow(clippy::mutable_key_type)]
    fn apply(&mut self, config: &Config) -> Result<(), String> {
        let wid = self.shared.id;
        let mut pools = HashMap::new();
        let mut runtimes = Vec::new();
        for l in &config.listeners {
            // Every cluster the listener uses, one pool each: a route's primary, a read policy
            // and a mirror naming the same cluster share it, so one session keeps one connection
            // per host for all of them and its commands stay in order across a route switch.
            let mut lpools: HashMap<&str, Rc<ClusterPool>> = HashMap::new();
            for name in crate::config::clusters_of(&l.prefix_routes) {
                let cluster = config
                    .clusters
                    .iter()
                    .find(|c| c.name == name)
                    .ok_or_else(|| format!("listener {}: unknown cluster {name}", l.name))?;
                let settings = PoolSettings::new(l, cluster);
                let key = (cluster.name.clone(), settings.clone());
                let pool = match pools.get(&key).or_else(|| self.pools.get(&key)) {
                    Some(p) if p.cluster.same_pool(cluster) => p.clone(),
                    _ => ClusterPool::start(cluster, settings, &self.pool_ctx)
                        .map_err(|e| e.to_string())?,
                };
                pools.insert(key, pool.clone());
                lpools.insert(name, pool);
            }
            let router = self.router(l, &lpools)?;
            let stats = self
                .listener_stats
                .entry(l.stat_prefix.clone())
                .or_insert_with(|| {
                    Rc::new(ListenerStats::new(self.store.clone(), wid, &l.stat_prefix))
                })
                .clone();
            stats.set_latency_in_micros(l.latency_in_micros);
            runtimes.push(Rc::new(ListenerRuntime {
                config: l.clone(),
                router,
                stats,
                observer: Observer::new(&self.store, wid, l),
                faults: Faults::new(&l.faults),
            }));
        }
        // Bind new or moved listeners first, so a bind failure leaves the old config in place.
        let mut bound: HashMap<String, TcpListener> = HashMap::new();
        for rt in &runtimes {
            let c = &rt.config;
            let same = self
                .listeners
                .get(&c.name)
                .is_some_and(|a| a.address == c.address);
            if !same {
                let l = net::bind_listener(c.address)
                    .map_err(|e| format!("listener {}: bind {}: {e}", c.name, c.address))?;
                bound.insert(c.name.clone(), l);
            }
        }
        let mut listeners = HashMap::new();
        for rt in runtimes {
            let name = rt.config.name.clone();
            let address = rt.config.address;
            match (bound.remove(&name), self.listeners.remove(&name)) {
                (None, Some(active)) => {
                    active.handle.current.replace(rt);
                    listeners.insert(name, active);
                }
                (Some(socket), _) => {
                    let handle = Rc::new(ListenerHandle {
                        current: RefCell::new(rt),
                    });
                    let socket = Rc::new(socket);
                    let accept = net::spawn_cancellable(accept_loop(
                        socket.clone(),
                        handle.clone(),
                        self.shared.clone(),
                    ));
                    if wid == 0 {
                        info!(listener = %name, %address, "listening");
                    }
                    listeners.insert(
                        name,
                        ActiveListener {
                            address,
                            handle,
                            socket,
                            _accept: accept,
                        },
                    );
                }
                (None, None) => {}
            }
        }
        // Listeners left in `self.listeners` were removed: dropping them stops accepting.
        self.listeners = listeners;
        self.pools = pools;
        let workers = config.runtime.workers.max(1);
        self.shared
            .budget
            .set_limit(config.runtime.maxmemory_clients / workers);
        Ok(())
    }

    /// Hot-restart drain (docs/hot-restart.md). Every connection closed here has answered
    /// every request it executed, and executed none it did not answer, so its client may resend
    /// whatever got no reply on a new connection (to the process that replaces this one):
    /// 1. with `accept_queued`, accept what is already queued on each listener (those
    ///    connections are drained like the others instead of being reset; without it the kernel
    ///    migrates them to the new process), and stop listening;
    /// 2. wake every reader: it stops reading, so a partial request at the end of its buffer is
    ///    dropped unexecuted; the writer sends every reply, then FIN, then reads and discards
    ///    until the client closes (a close with unread bytes would send RST and drop the replies
    ///    still in the send queue);
    /// 3. wait until every session is closed or `timeout` passes.
    async fn drain(&mut self, timeout: Duration, accept_queued: bool) {
        let deadline = Instant::now() + timeout;
        self.shared.draining.set(true);
        self.shared.drain_deadline.set(Some(deadline));
        let mut queued = 0usize;
        for (name, l) in &self.listeners {
            if accept_queued {
                queued += self.serve_queued(name, l);
            }
            net::stop_listening(&l.socket);
        }
        self.shared.wake_readers();
        info!(
            worker = self.shared.id,
            sessions = self.shared.open_sessions(),
            queued,
            "draining"
        );
        loop {
            net::sleep(Duration::from_millis(5)).await;
            let busy = self.shared.open_sessions() > 0 || self.shared.accepting.get() > 0;
            if !busy || Instant::now() >= deadline {
                break;
            }
        }
        if self.shared.accepting.get() > 0 {
            warn!(
                worker = self.shared.id,
                "drain timeout: an accept loop did not stop"
            );
        }
        if self.shared.open_sessions() > 0 {
            warn!(
                worker = self.shared.id,
                sessions = self.shared.open_sessions(),
                active = self.shared.active.get(),
                "drain timeout: closing connections still open"
            );
        }
        self.listeners.clear();
    }
}

impl Worker {
    /// Accepts, without waiting, every connection queued on `l` and serves it (through the drain
    /// already under way); returns how many.
    fn serve_queued(&self, name: &str, l: &ActiveListener) -> usize {
        let mut n = 0;
        loop {
            match net::accept_queued(&l.socket) {
                Ok(Some(stream)) => {
                    n += 1;
                    let peer = stream.peer_addr().ok();
                    net::spawn(handshake::serve(
                        stream,
                        peer,
                        l.handle.clone(),
                        self.shared.clone(),
                    ));
                }
                Ok(None) => return n,
                Err(e) => {
                    warn!(listener = %name, error = %e, "drain: accepting queued connections failed");
                    return n;
                }
            }
        }
    }
}

/// After many sessions have closed (10 000 idle clients gone), hands the memory their buffers used
/// back to the kernel: glibc keeps freed memory in its per-thread arenas, so RSS would otherwise
/// stay at its peak. Checked off the request path, a moment after the closes.
async fn trim_memory(shared: Rc<WorkerShared>) {
    let mut seen = 0;
    let mut released = 0usize;
    loop {
        net::sleep(TRIM_CHECK_EVERY).await;
        let closed = shared.closed_since_trim.get();
        // Wait for a wave of closes to settle (none in the last period), so one trim catches all
        // of it; under endless churn, trim anyway every 16 thresholds' worth.
        let settled = closed == seen;
        seen = closed;
        // A few clients that held large replies count as many: their buffers were large.
        released = released.saturating_add(shared.budget.take_released());
        let big = released >= TRIM_AFTER_RELEASED && settled;
        if big || (closed >= TRIM_AFTER_CLOSED && (settled || closed >= 16 * TRIM_AFTER_CLOSED)) {
            shared.closed_since_trim.set(0);
            seen = 0;
            released = 0;
            net::release_free_memory();
        }
    }
}

/// Reply bytes of closed sessions (their peaks) after which memory is handed back at once.
const TRIM_AFTER_RELEASED: usize = 8 * 1024 * 1024;

/// Disconnects the clients holding the most whenever this worker's clients hold more than its
/// share of `maxmemory_clients`, or sessions wait for room while it is mostly their replies and
/// they are not draining (less than a sixty-fourth of it written per half [`budget::STALL`], for
/// [`budget::STALL`]) (Redis 7 client eviction): a client that asks and never
/// reads is cut off before the process runs out of memory or other clients wait for room. One
/// log line per wave of evictions.
async fn evict_clients(shared: Rc<WorkerShared>) {
    let tick = budget::STALL / 2;
    let mut written = 0;
    let mut stalled_ticks = 0;
    let (mut unlogged, mut logged) = (0usize, None);
    loop {
        let _ = net::timeout(tick, shared.budget.over.notified()).await;
        let b = &shared.budget;
        // Progress is the held bytes draining, not a light client's few bytes: a sixty-fourth
        // of the limit written per tick.
        let progress = b.written().wrapping_sub(written) >= (b.limit() / 64) as u64;
        written = b.written();
        stalled_ticks = if b.stuck() && !progress {
            stalled_ticks + 1
        } else {
            0
        };
        let stalled = stalled_ticks >= 2;
        // Paused sessions are woken a batch at a time as bytes leave; a batch whose sessions
        // freed nothing would leave the rest waiting: the tick passes the turn on.
        b.wake_if_room();
        if !b.over_limit() && !stalled {
            continue;
        }
        stalled_ticks = 0;
        let sessions: Vec<Rc<Sink>> = shared
            .sessions
            .borrow()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let held = shared.budget.held();
        unlogged += shared.budget.evict(&sessions, stalled);
        // One line for the first eviction, then one summary per interval while they go on.
        if unlogged > 0 && logged.is_none_or(|t: Instant| t.elapsed() >= EVICTION_LOG_EVERY) {
            warn!(
                worker = shared.id,
                evicted = unlogged,
                held_bytes = held,
                limit_bytes = shared.budget.limit(),
                "clients evicted: their replies not read filled maxmemory_clients"
            );
            unlogged = 0;
            logged = Some(Instant::now());
        }
    }
}

/// At most one eviction log line per worker per this interval (the count says how many).
const EVICTION_LOG_EVERY: Duration = Duration::from_secs(10);

/// Publishes this worker's thread-local stats (latency histograms, hot keys) every
/// [`crate::stats::histogram::FLUSH_INTERVAL`] (the staleness of those reads); `try_lock` only,
/// so an admin read never stalls the worker.
async fn flush_stats() {
    loop {
        net::sleep(crate::stats::histogram::FLUSH_INTERVAL).await;
        crate::stats::flush_thread();
    }
}

async fn accept_loop(
    listener: Rc<TcpListener>,
    handle: Rc<ListenerHandle>,
    shared: Rc<WorkerShared>,
) {
    struct Accepting(Rc<WorkerShared>);
    impl Drop for Accepting {
        fn drop(&mut self) {
            self.0.accepting.set(self.0.accepting.get() - 1);
        }
    }
    shared.accepting.set(shared.accepting.get() + 1);
    let _accepting = Accepting(shared.clone());
    let mut backoff = AcceptBackoff::default();
    loop {
        match net::accept(&listener).await {
            Ok((stream, peer)) => {
                backoff.reset();
                net::spawn(handshake::serve(
                    stream,
                    Some(peer),
                    handle.clone(),
                    shared.clone(),
                ))
            }
            // A drain stopped the listener; connections accepted before that are served above.
            Err(_) if shared.is_draining() => return,
            Err(e) => {
                handle.current().stats.cx_accept_error.inc();
                let pause = backoff.on_error(&e);
                log_limited!(WARN, "accept failed; pausing this listener's accepts";
                    error = %e, pause_ms = pause.as_millis() as u64);
                net::sleep(pause).await;
            }
        }
    }
}

//! A worker: one thread, one io_uring runtime, its own listeners (`SO_REUSEPORT`), sessions,
//! upstream pools and stats shards. Workers share nothing mutable; the main thread talks to them
//! only through their control channel.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::session;
use super::stats::ListenerStats;
use crate::cluster::topology::Registry;
use crate::config::{Config, ListenerConfig};
use crate::net::{self, TaskHandle, TcpListener};
use crate::router::Router;
use crate::stats::Store;
use crate::upstream::{ClusterPool, HostRegistry, PoolSettings};

/// How many sessions must have closed before freed memory is handed back to the kernel, and how
/// often that is checked: keeps the trim rare under ordinary connection churn.
const TRIM_AFTER_CLOSED: usize = 256;
const TRIM_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Messages from the main thread.
pub enum Control {
    /// Apply a new config snapshot; the result goes back on the sender.
    Apply(Arc<Config>, mpsc::Sender<Result<(), String>>),
    /// Stop accepting, let in-flight requests finish (up to the timeout), then stop.
    Drain(Duration),
}

/// Worker-wide state the sessions see.
pub struct WorkerShared {
    pub id: usize,
    /// Number of workers in the process.
    pub workers: usize,
    /// Requests accepted and not yet fully written back (drain waits for zero).
    pub active: Rc<Cell<i64>>,
    draining: Cell<bool>,
    next_session: Cell<u64>,
    /// Downstream sessions closed since freed memory was last handed back to the kernel.
    closed_since_trim: Cell<usize>,
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

    /// A downstream session closed (its memory is handed back by [`trim_memory`]).
    pub fn session_closed(&self) {
        self.closed_since_trim.set(self.closed_since_trim.get() + 1);
    }

    /// True once SIGTERM asked this worker to drain.
    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }
}

/// What a listener's sessions use to serve a request: config, routes and stats of one snapshot.
pub struct ListenerRuntime {
    pub config: ListenerConfig,
    pub router: Router,
    pub stats: Rc<ListenerStats>,
}

impl ListenerRuntime {
    /// True if `name` is one of the listener's `custom_commands` (case-insensitive).
    pub fn custom_command(&self, name: &[u8]) -> bool {
        self.config
            .custom_commands
            .iter()
            .any(|c| c.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The part of `key` that is hashed: its hash tag when `enable_hashtagging` is on (Redis
    /// Cluster spec, "Hash tags"), else the whole key.
    #[inline]
    pub fn hash_key<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        if self.config.enable_hashtagging {
            crate::cluster::hashtag(key)
        } else {
            key
        }
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
    _accept: TaskHandle,
}

struct Worker {
    shared: Rc<WorkerShared>,
    store: Arc<Store>,
    registry: Arc<Registry>,
    hosts: Arc<HostRegistry>,
    listeners: HashMap<String, ActiveListener>,
    /// Keyed by cluster and connection settings: listeners with the same settings share a pool.
    pools: HashMap<(String, PoolSettings), Rc<ClusterPool>>,
    listener_stats: HashMap<String, Rc<ListenerStats>>,
}

/// Starts worker `id` on its own thread and applies `config`; returns once it is serving or
/// failed to (e.g. a listener address in use).
pub fn spawn(
    id: usize,
    config: Arc<Config>,
    store: Arc<Store>,
    registry: Arc<Registry>,
    hosts: Arc<HostRegistry>,
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
                        next_session: Cell::new(0),
                        closed_since_trim: Cell::new(0),
                    }),
                    store,
                    registry,
                    hosts,
                    listeners: HashMap::new(),
                    pools: HashMap::new(),
                    listener_stats: HashMap::new(),
                };
                net::spawn(trim_memory(worker.shared.clone()));
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
                        Control::Drain(timeout) => {
                            worker.drain(timeout).await;
                            return;
                        }
                    }
                }
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

impl Worker {
    /// Builds routes and pools for `config`, reusing pools whose cluster and settings did not
    /// change (so they keep their connections), binding new listeners and closing removed ones.
    fn apply(&mut self, config: &Config) -> Result<(), String> {
        let wid = self.shared.id;
        let mut pools = HashMap::new();
        let mut runtimes = Vec::new();
        for l in &config.listeners {
            let catch_all = match &l.prefix_routes.catch_all_route {
                Some(route) => {
                    let cluster = config
                        .clusters
                        .iter()
                        .find(|c| c.name == route.cluster)
                        .ok_or_else(|| {
                            format!("listener {}: unknown cluster {}", l.name, route.cluster)
                        })?;
                    let settings = PoolSettings::new(l, cluster);
                    let key = (cluster.name.clone(), settings.clone());
                    let pool = match pools.get(&key).or_else(|| self.pools.get(&key)) {
                        Some(p) if p.cluster == *cluster => p.clone(),
                        _ => ClusterPool::start(
                            cluster,
                            settings,
                            &self.store,
                            wid,
                            &self.registry,
                            &self.hosts,
                        )?,
                    };
                    pools.insert(key, pool.clone());
                    Some(pool)
                }
                None => None,
            };
            let stats = self
                .listener_stats
                .entry(l.stat_prefix.clone())
                .or_insert_with(|| {
                    Rc::new(ListenerStats::new(self.store.clone(), wid, &l.stat_prefix))
                })
                .clone();
            runtimes.push(Rc::new(ListenerRuntime {
                config: l.clone(),
                router: Router::new(catch_all),
                stats,
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
                    let accept = net::spawn_cancellable(accept_loop(
                        socket,
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
        Ok(())
    }

    /// Stops accepting and waits until every accepted request is answered or `timeout` passes.
    async fn drain(&mut self, timeout: Duration) {
        self.shared.draining.set(true);
        self.listeners.clear();
        let deadline = Instant::now() + timeout;
        while self.shared.active.get() > 0 && Instant::now() < deadline {
            net::sleep(Duration::from_millis(5)).await;
        }
        if self.shared.active.get() > 0 {
            warn!(
                worker = self.shared.id,
                active = self.shared.active.get(),
                "drain timeout with requests in flight"
            );
        }
    }
}

/// After many sessions have closed (10 000 idle clients gone), hands the memory their buffers used
/// back to the kernel: glibc keeps freed memory in its per-thread arenas, so RSS would otherwise
/// stay at its peak. Checked off the request path, a moment after the closes.
async fn trim_memory(shared: Rc<WorkerShared>) {
    let mut seen = 0;
    loop {
        net::sleep(TRIM_CHECK_EVERY).await;
        let closed = shared.closed_since_trim.get();
        // Wait for a wave of closes to settle (none in the last period), so one trim catches all
        // of it; under endless churn, trim anyway every 16 thresholds' worth.
        let settled = closed == seen;
        seen = closed;
        if closed >= TRIM_AFTER_CLOSED && (settled || closed >= 16 * TRIM_AFTER_CLOSED) {
            shared.closed_since_trim.set(0);
            seen = 0;
            net::release_free_memory();
        }
    }
}

async fn accept_loop(listener: TcpListener, handle: Rc<ListenerHandle>, shared: Rc<WorkerShared>) {
    loop {
        match net::accept(&listener).await {
            Ok((stream, _peer)) => net::spawn(session::run(stream, handle.clone(), shared.clone())),
            Err(e) => {
                // EMFILE/ENFILE and friends: back off instead of spinning.
                warn!(error = %e, "accept failed");
                net::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

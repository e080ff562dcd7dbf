//! Workers, listeners and downstream sessions, and the process around them: start-up, SIGHUP
//! reload, configs pushed on the control socket, and SIGTERM drain.

mod accept_backoff;
pub mod access_log;
mod blocked;
mod budget;
mod claim;
pub mod external_auth;
mod handshake;
mod nofile;
mod observe;
mod output;
mod pubsub;
mod session;
mod sink;
pub(crate) mod stats;
mod worker;

use std::path::PathBuf;
use std::sync::{Arc, mpsc};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing::{error, info, warn};

use std::collections::HashMap;
use std::time::Instant;

use crate::admin::AdminContext;
use crate::admin::control_socket::{ControlSocket, Push, PushError};
use crate::cluster::HostRegistry;
use crate::cluster::discovery::Discovery;
use crate::cluster::dns::{self, DnsSpec, Resolved, Resolver};
use crate::cluster::health::Checker;
use crate::cluster::topology::{Registry, TopologyCell};
use crate::config::{self, ClusterConfig, ClusterType, Config};
use crate::stats::Store;

/// Counter of configs pushed on the control socket and applied (process-wide).
pub const PUSH_ACCEPTED: &str = "control_socket.push_accepted";
/// Counter of configs pushed on the control socket and rejected: invalid, or not applicable
/// (process-wide).
pub const PUSH_REJECTED: &str = "control_socket.push_rejected";

/// A running data plane: its workers and their control channels.
pub struct Engine {
    config: Arc<Config>,
    config_path: Option<PathBuf>,
    workers: Vec<(
        async_channel::Sender<worker::Control>,
        std::thread::JoinHandle<()>,
    )>,
    store: Arc<Store>,
    /// Slot maps of `redis_cluster` clusters, shared with the workers.
    registry: Arc<Registry>,
    /// Process-wide state of every upstream host (health, connection rate limits).
    hosts: Arc<HostRegistry>,
    /// One discovery thread per `redis_cluster` cluster, by name, with the config it runs under.
    discoveries: HashMap<String, Running>,
    /// The health thread (active checks, outlier ejections) of the whole process.
    checker: Checker,
    /// `strict_dns` / `logical_dns` clusters: the resolver thread and what it last found.
    dns: DnsState,
    /// The TCP admin endpoint; `None` with `admin.control_socket_only`.
    admin: Option<crate::admin::AdminHandle>,
    admin_ctx: Arc<AdminContext>,
    /// Started with `--hot-restart`: listener addresses the process being replaced listens on
    /// are shared with it while it has not begun to drain (see [`Engine::hand_over`]).
    hot_restart: bool,
}

/// The engine's side of DNS clusters.
struct DnsState {
    resolver: Resolver,
    /// The spec and addresses behind the hosts of each DNS cluster of the running config.
    current: HashMap<String, (DnsSpec, Resolved)>,
    lookup: Arc<dns::Lookup>,
}

/// How often the engine's owner thread looks for host sets the resolver thread found.
const DNS_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// A running discovery thread with the config it runs under and the cell it publishes into.
struct Running {
    config: ClusterConfig,
    cell: Arc<TopologyCell>,
    discovery: Discovery,
}

/// Starts discovery for every `redis_cluster` cluster of `config` not already running under the
/// same settings, registers its cell, and waits (up to each cluster's
/// `cluster_refresh_timeout`) for the first slot maps, so the first requests find them. Returns
/// the discoveries that `config` replaced, to be dropped once the workers run the new config.
fn start_discoveries(
    config: &Config,
    running: &mut HashMap<String, Running>,
    registry: &Registry,
    store: &Arc<Store>,
) -> Vec<Running> {
    let mut replaced = Vec::new();
    let mut started = Vec::new();
    for c in config
        .clusters
        .iter()
        .filter(|c| c.cluster_type == ClusterType::RedisCluster)
    {
        if running.get(&c.name).is_some_and(|r| r.config.same_pool(c)) {
            continue;
        }
        let cell = Arc::new(TopologyCell::default());
        // A changed cluster keeps the map it had: discovery starts from its nodes rather than
        // from the seeds alone (which may be gone), and requests never find no map.
        if let Some((_, map)) = running.get(&c.name).and_then(|r| r.cell.current()) {
            cell.publish(map);
        }
        registry.insert(c, cell.clone());
        let discovery = Discovery::spawn(c.clone(), cell.clone(), store.clone());
        started.push((c.name.clone(), c.redis_cluster.cluster_refresh_timeout));
        let new = Running {
            config: c.clone(),
            cell,
            discovery,
        };
        if let Some(old) = running.insert(c.name.clone(), new) {
            replaced.push(old);
        }
    }
    for (name, timeout) in started {
        let deadline = Instant::now() + timeout;
        if let Some(r) = running.get(&name)
            && !r
                .discovery
                .wait_first(deadline.saturating_duration_since(Instant::now()))
        {
            warn!(cluster = %name, "no slot map yet; requests get errors until discovery succeeds");
        }
    }
    replaced
}

/// Stops discovery of clusters `config` no longer has.
fn stop_removed_discoveries(
    config: &Config,
    running: &mut HashMap<String, Running>,
    registry: &Registry,
) {
    let keep: Vec<&str> = config
        .clusters
        .iter()
        .filter(|c| c.cluster_type == ClusterType::RedisCluster)
        .map(|c| c.name.as_str())
        .collect();
    running.retain(|name, _| keep.contains(&name.as_str()));
    registry.retain(&keep);
}

/// Sets the hosts of every DNS cluster of `config`: from the running state when its spec is
/// unchanged, else from a lookup now (on the calling thread, never a worker; counted in shard
/// 0). Returns the state behind them, to keep once `config` runs.
fn fill_dns(
    state: &DnsState,
    store: &Store,
    config: &mut Config,
) -> HashMap<String, (DnsSpec, Resolved)> {
    let mut out = HashMap::new();
    for c in &mut config.clusters {
        let Some(spec) = DnsSpec::of(c) else {
            continue;
        };
        let resolved = match state.current.get(&c.name) {
            Some((s, r)) if *s == spec => r.clone(),
            _ => dns::resolve_counted(&c.name, &spec, None, &*state.lookup, store, 0),
        };
        c.hosts = dns::hosts(&spec, &resolved);
        // Listed from the start (at 0), so dashboards see them before the first change.
        store.counter(&format!("cluster.{}.membership_change", c.name), 0);
        out.insert(c.name.clone(), (spec, resolved));
    }
    out
}

impl DnsState {
    /// What the resolver thread should re-resolve: every DNS cluster now running.
    fn resolver_list(&self) -> Vec<(String, DnsSpec, Resolved)> {
        self.current
            .iter()
            .map(|(n, (s, r))| (n.clone(), s.clone(), r.clone()))
            .collect()
    }
}

/// `insecure_skip_verify` is a choice the operator made on purpose; it is still said out loud
/// at every start and reload that keeps it, so it cannot go unnoticed.
fn note_insecure_tls(config: &Config) {
    for c in &config.clusters {
        if c.tls.as_ref().is_some_and(|t| t.insecure_skip_verify) {
            warn!(cluster = %c.name,
                "clusters.tls.insecure_skip_verify: the hosts' certificates are not verified \
                 (encrypted, but any host can pose as them)");
        }
    }
}

/// `[sockmap]` is respite-control's (it loads the eBPF programs); the data plane only says so,
/// so that an operator who enabled it here does not wonder why nothing happened.
fn note_sockmap(config: &Config) {
    if config.sockmap.enabled {
        info!("[sockmap] is read by respite-control; the data plane ignores it");
    }
}

impl Engine {
    /// Starts the admin endpoint and `config.runtime.workers` workers, each with its own listeners.
    /// `config_path` is re-read on [`Engine::reload`].
    ///
    /// A listener or admin address another process listens on is an error, unless
    /// `hot_restart` (`respite --hot-restart`, docs/hot-restart.md): this process then replaces
    /// one that still runs, shares its listeners, and binds the admin address once that one
    /// lets go of it.
    ///
    /// Errors: a listener or admin address is in use or cannot be bound (the message names it),
    /// io_uring is unavailable, or the config can hold more file descriptors open than
    /// `RLIMIT_NOFILE` allows (after raising the soft limit up to the hard one). `log` backs the
    /// admin `/logging` endpoint.
    pub fn start(
        mut config: Config,
        config_path: Option<PathBuf>,
        log: Option<crate::admin::LogControl>,
        hot_restart: bool,
    ) -> Result<Engine, String> {
        nofile::ensure(&config, config.runtime.workers)?;
        // Before anything starts: a second respite on the same config fails here, untouched.
        claim::check_listeners(&config.listeners, &[], hot_restart, claim::IN_USE_GRACE)?;
        let store = Store::new();
        let lookup: Arc<dns::Lookup> = Arc::new(dns::system_lookup);
        let mut dns = DnsState {
            resolver: Resolver::spawn(store.clone(), lookup.clone()),
            current: HashMap::new(),
            lookup,
        };
        dns.current = fill_dns(&dns, &store, &mut config);
        dns.resolver.set(dns.resolver_list());
        let registry = Arc::new(Registry::default());
        let hosts = Arc::new(HostRegistry::default());
        let admin_ctx =
            AdminContext::new(store.clone(), Arc::new(config.clone()), hosts.clone(), log);
        let address = config.admin.address;
        let admin = if config.admin.control_socket_only {
            if hot_restart {
                return Err(ONLY_SOCKET_HOT_RESTART.to_string());
            }
            None
        } else if hot_restart {
            // The old process holds the address until it starts draining: retried meanwhile.
            Some(crate::admin::spawn_or_retry(address, admin_ctx.clone()))
        } else {
            Some(crate::admin::spawn_handle(address, admin_ctx.clone()))
        };
        let admin = admin.transpose().map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("admin: bind {address}: {}", claim::IN_USE_HINT)
            }
            _ => format!("admin: bind {address}: {e}"),
        })?;
        let mut discoveries = HashMap::new();
        start_discoveries(&config, &mut discoveries, &registry, &store);
        let checker = Checker::spawn(hosts.clone(), store.clone());
        checker.apply(&config, &registry);
        let config = Arc::new(config);
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut workers = Vec::new();
        let process = worker::ProcessWide::default();
        for id in 0..config.runtime.workers {
            let cpu = config.runtime.pin_workers.then_some(id % ncpu);
            workers.push(worker::spawn(
                id,
                config.clone(),
                store.clone(),
                registry.clone(),
                hosts.clone(),
                process.clone(),
                cpu,
            )?);
        }
        match &admin {
            Some(a) => info!(workers = workers.len(), admin = %a.address(), "respite started"),
            None => info!(
                workers = workers.len(),
                admin = "control socket only",
                "respite started"
            ),
        }
        note_sockmap(&config);
        note_insecure_tls(&config);
        Ok(Engine {
            config,
            config_path,
            workers,
            store,
            registry,
            hosts,
            discoveries,
            checker,
            dns,
            admin,
            admin_ctx,
            hot_restart,
        })
    }

    /// True during a hot restart's hand-over: this process was started with `--hot-restart` and
    /// the process it replaces still holds the admin address, i.e. has not begun to drain (a
    /// draining process lets go of it first). Listener addresses that process listens on may be
    /// shared meanwhile, by the start config and by reloads and pushes alike.
    fn hand_over(&self) -> bool {
        self.hot_restart && self.admin.as_ref().is_some_and(|a| !a.is_bound())
    }

    /// The process-wide stats registry.
    pub fn stats(&self) -> &Arc<Store> {
        &self.store
    }

    /// Re-reads the config file and applies it to every worker. A file that does not load leaves
    /// the running config in place.
    ///
    /// Errors: the file is invalid, or a worker rejected it (e.g. a new address cannot be bound).
    pub fn reload(&mut self) -> Result<(), String> {
        let Some(path) = &self.config_path else {
            return Err("no config file to reload".into());
        };
        let new = config::load(path).map_err(|e| e.to_string())?;
        self.apply(new)
    }

    /// Applies a config pushed over the control socket: `toml` is parsed with
    /// [`config::parse_pushed`] (origin `control socket`), keeps the running `[admin]` and
    /// `[runtime]` (they only change at a restart, and the pusher does not own them), and is
    /// applied with [`Engine::apply`]. Counts `control_socket.push_accepted` or
    /// `control_socket.push_rejected`.
    ///
    /// Errors: [`PushError::Invalid`] (the config error) or [`PushError::NotApplied`] (the apply
    /// error); the running config stays.
    pub fn push(&mut self, toml: &str) -> Result<(), PushError> {
        let outcome = match config::parse_pushed(toml, "control socket") {
            Err(e) => Err(PushError::Invalid(e.to_string())),
            Ok(mut new) => {
                new.admin = self.config.admin.clone();
                new.runtime = self.config.runtime.clone();
                self.apply(new).map_err(PushError::NotApplied)
            }
        };
        // Only this thread (the engine's owner) writes these: shard 0 is theirs alone.
        match &outcome {
            Ok(()) => {
                self.store.counter(PUSH_ACCEPTED, 0).inc();
                info!("pushed config applied");
            }
            Err(e) => {
                self.store.counter(PUSH_REJECTED, 0).inc();
                let (PushError::Invalid(e) | PushError::NotApplied(e)) = e;
                warn!(error = %e, "pushed config rejected; keeping the running config");
            }
        }
        outcome
    }

    /// Applies a new config snapshot to every worker.
    ///
    /// Errors: the config can hold more file descriptors open on the running workers than
    /// `RLIMIT_NOFILE` allows (even raised to the hard limit), a listener the running config
    /// does not have is on an address another process listens on (outside a hot restart's
    /// hand-over), or a worker rejected the config (e.g. an address cannot be bound). The
    /// running config stays.
    pub fn apply(&mut self, new: Config) -> Result<(), String> {
        let mut new = new;
        let dns_current = fill_dns(&self.dns, &self.store, &mut new);
        // The running workers: `runtime.workers` changes only at a restart, and the loader
        // checked the file's own value against the hard limit.
        nofile::ensure(&new, self.config.runtime.workers)?;
        let running: Vec<_> = self.config.listeners.iter().map(|l| l.address).collect();
        claim::check_listeners(
            &new.listeners,
            &running,
            self.hand_over(),
            claim::IN_USE_GRACE,
        )?;
        if new.runtime.workers != self.config.runtime.workers {
            warn!("runtime.workers changed; it takes effect at the next restart");
        }
        if new.admin != self.config.admin {
            warn!("[admin] changed; it takes effect at the next restart");
        }
        let replaced = start_discoveries(&new, &mut self.discoveries, &self.registry, &self.store);
        let new = Arc::new(new);
        let mut results = Vec::new();
        for (tx, _) in &self.workers {
            let (rtx, rrx) = mpsc::channel();
            tx.send_blocking(worker::Control::Apply(new.clone(), rtx))
                .map_err(|_| "a worker has stopped".to_string())?;
            results.push(rrx);
        }
        let mut outcome = Ok(());
        for r in results {
            let r = r.recv().map_err(|_| "a worker has stopped".to_string());
            if let Err(e) = r.and_then(|r| r) {
                outcome = Err(e);
            }
        }
        if let Err(e) = outcome {
            // The old config stays: so do the discoveries its pools read from.
            for old in replaced {
                self.registry.insert(&old.config, old.cell.clone());
                self.discoveries.insert(old.config.name.clone(), old);
            }
            return Err(e);
        }
        stop_removed_discoveries(&new, &mut self.discoveries, &self.registry);
        // Changed clusters' checks restart and removed ones stop; host state stays for hosts
        // the new config still has.
        self.checker.apply(&new, &self.registry);
        let names: Vec<&str> = new.clusters.iter().map(|c| c.name.as_str()).collect();
        self.hosts.retain(&names);
        note_sockmap(&new);
        note_insecure_tls(&new);
        self.admin_ctx.set_config(new.clone());
        self.config = new;
        self.dns.current = dns_current;
        self.dns.resolver.set(self.dns.resolver_list());
        Ok(())
    }

    /// Applies the host sets the resolver thread found since the last call (through
    /// [`Engine::apply`], as a reload), counting `cluster.<name>.membership_change`. An update
    /// for a spec the running config no longer has is dropped.
    pub fn poll_dns(&mut self) {
        for u in self.dns.resolver.updates() {
            let Some((spec, _)) = self.dns.current.get(&u.cluster) else {
                continue;
            };
            if *spec != u.spec {
                continue;
            }
            let old = self
                .dns
                .current
                .insert(u.cluster.clone(), (u.spec.clone(), u.resolved.clone()));
            let hosts = dns::hosts(&u.spec, &u.resolved);
            let list: Vec<String> = hosts.iter().map(|h| h.address_text.clone()).collect();
            match self.apply((*self.config).clone()) {
                Ok(()) => {
                    // Only this thread writes shard 0 of the cluster's DNS stats.
                    self.store
                        .counter(&format!("cluster.{}.membership_change", u.cluster), 0)
                        .inc();
                    info!(cluster = %u.cluster, hosts = ?list, "DNS host set changed; applied");
                }
                Err(e) => {
                    if let Some(old) = old {
                        self.dns.current.insert(u.cluster.clone(), old);
                    }
                    warn!(cluster = %u.cluster, hosts = ?list, error = %e,
                        "DNS host set changed but could not be applied; keeping the running one");
                }
            }
        }
    }

    /// Hot-restart drain (docs/hot-restart.md): releases the admin address (so the process
    /// replacing this one can bind it), stops accepting (queued connections are accepted and
    /// served first), lets every session answer the requests it has read, closes each
    /// connection gracefully once its client has closed or `runtime.drain_timeout` has passed,
    /// and stops every worker.
    pub fn drain(self) {
        if let Some(admin) = &self.admin {
            admin.stop();
        }
        // With migration on, the kernel hands queued connections to the new process as the
        // listeners close: better than accepting them here only to close them.
        let migrate = crate::net::tcp_migrate_req() == Some(true);
        if !migrate {
            warn!(
                "net.ipv4.tcp_migrate_req = 0: connections still in the accept queue when a \
                 listener closes are reset instead of moving to the new process's listener; set \
                 it to 1 for lossless restarts (docs/hot-restart.md)"
            );
        }
        let timeout = self.config.runtime.drain_timeout;
        for (tx, _) in &self.workers {
            let _ = tx.send_blocking(worker::Control::Drain {
                timeout,
                accept_queued: !migrate,
            });
        }
        for (_, join) in self.workers {
            let _ = join.join();
        }
        let total = |suffix: &str| -> u64 {
            self.store
                .counters()
                .iter()
                .filter(|(name, _)| name.ends_with(suffix))
                .map(|(_, v)| v)
                .sum()
        };
        info!(
            downstream_rq_total = total(".downstream_rq_total"),
            downstream_cx_total = total(".downstream_cx_total"),
            downstream_cx_drain_close = total(".downstream_cx_drain_close"),
            "drained"
        );
    }
}

/// Why `--hot-restart` is refused with `admin.control_socket_only`.
const ONLY_SOCKET_HOT_RESTART: &str = "--hot-restart hands over through the admin address, and \
     admin.control_socket_only = true has none: drain the running process, then start this one";

/// What the engine's one owner (the thread in [`run`]) reacts to, in arrival order.
enum Event {
    /// SIGHUP, SIGTERM or SIGINT.
    Signal(i32),
    /// A config pushed over the control socket.
    Push(Push),
}

impl From<Push> for Event {
    fn from(p: Push) -> Event {
        Event::Push(p)
    }
}

/// Runs the data plane until SIGTERM or SIGINT: SIGHUP reloads the config file; with
/// `control_socket`, configs pushed on that socket ([`ControlSocket`]) are applied too.
///
/// One thread owns the [`Engine`]: it takes signals (from a signal thread) and pushes (from the
/// control socket's thread) off one channel, one at a time, so a push and a reload never race
/// and each is applied whole or not at all.
///
/// Errors: the control socket cannot be bound (e.g. a live process answers on it), or start-up
/// failed (see [`Engine::start`]).
/// `log` is the `/logging` control of the process's subscriber, if it installed one.
/// `hot_restart`: this process replaces a running one (`respite --hot-restart`, see
/// [`Engine::start`]).
pub fn run(
    config: Config,
    config_path: Option<PathBuf>,
    log: Option<crate::admin::LogControl>,
    control_socket: Option<PathBuf>,
    hot_restart: bool,
) -> Result<(), String> {
    if config.admin.control_socket_only && control_socket.is_none() {
        return Err(
            "admin.control_socket_only = true needs --control-socket PATH: the admin API \
             answers only there"
                .to_string(),
        );
    }
    // Register before the workers exist, so no signal arrives unhandled.
    let mut signals =
        Signals::new([SIGHUP, SIGTERM, SIGINT]).map_err(|e| format!("signals: {e}"))?;
    // Before any other thread starts (the bind sets the umask for a moment), and before the
    // listeners: a second process on a live socket refuses without touching anything.
    let mut control = control_socket
        .as_deref()
        .map(ControlSocket::bind)
        .transpose()?;
    let mut engine = Engine::start(config, config_path, log, hot_restart)?;
    let (events, rx) = mpsc::channel::<Event>();
    let signal_handle = signals.handle();
    let signal_thread = {
        let events = events.clone();
        std::thread::Builder::new()
            .name("respite-signals".to_owned())
            .spawn(move || {
                // Keeps running (and the signals registered, so a second SIGTERM during the
                // drain is not fatal) until `run` closes it after the drain.
                for sig in signals.forever() {
                    let _ = events.send(Event::Signal(sig));
                }
            })
            .map_err(|e| format!("signal thread: {e}"))?
    };
    if let Some(c) = &mut control {
        c.serve(engine.admin_ctx.clone(), events.clone())
            .map_err(|e| format!("control socket {}: {e}", c.path().display()))?;
        // Listed from the start (at 0), so dashboards and alerts see them before any push.
        engine.store.counter(PUSH_ACCEPTED, 0);
        engine.store.counter(PUSH_REJECTED, 0);
        info!(path = %c.path().display(), "control socket listening");
    }
    drop(events);
    loop {
        engine.poll_dns();
        let event = match rx.recv_timeout(DNS_POLL) {
            Ok(e) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match event {
            Event::Signal(SIGHUP) => match engine.reload() {
                Ok(()) => info!("config reloaded"),
                Err(e) => error!(error = %e, "config reload rejected; keeping the running config"),
            },
            Event::Signal(_) => break,
            Event::Push(push) => {
                let _ = push.reply.send(engine.push(&push.toml));
            }
        }
    }
    info!("draining");
    // Pushes still queued are answered 503 (their reply channels go with the receiver); then
    // the socket closes and its file goes, before the drain that may take `drain_timeout`.
    drop(rx);
    drop(control);
    engine.drain();
    signal_handle.close();
    let _ = signal_thread.join();
    info!("stopped");
    Ok(())
}

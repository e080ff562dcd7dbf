//! The health thread: one per process (`respite-health`), never a worker.
//!
//! It runs its own io_uring runtime (`net::runtime`) with one task per (cluster, host, active
//! check), rather than blocking sockets: a hung host (SIGSTOP, a partition) keeps its check
//! waiting for the whole `timeout`, and with blocking sockets one thread would either check
//! hosts one after another (one hung host delays every other host's check by `timeout`) or need
//! a thread per check. Tasks on one runtime wait concurrently at no cost, and reuse the same
//! `net` module as the workers.
//!
//! A control loop on the same runtime, every [`TICK`]:
//! - takes a new plan from the engine (start or reload): clusters whose config is unchanged keep
//!   their tasks; changed ones restart them (host health state stays in the `HostRegistry`);
//!   removed ones, or ones left without checks and outlier detection, stop and clear their
//!   hosts' state;
//! - follows the slot map of `redis_cluster` clusters (every primary and replica is checked);
//! - enforces outlier ejections that workers asked for, un-ejects expired ones, and lowers
//!   ejection counts every outlier `interval`;
//! - sets the gauges.
//!
//! Stats (stats shard 0; only this thread writes these names), per cluster `c`:
//! `cluster.c.health_check.attempt|success|failure|network_failure` (counters; `failure`
//! counts network failures too, as Envoy does), `cluster.c.health_check.healthy` (gauge: hosts
//! passing every active check), `cluster.c.membership_total|membership_healthy` (gauges;
//! healthy = not failing a check and not ejected), `cluster.c.outlier_detection.
//! ejections_active` (gauge), `ejections_enforced_total`, `ejections_overflow`,
//! `ejections_enforced_consecutive_5xx`, `ejections_detected_consecutive_5xx` (counters). Only
//! clusters with checks or outlier detection have them.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{error, info};

use super::check::{Outcome, Tally};
use super::outlier::{Ejection, Ejector, Verdict};
use super::probe::Probe;
use crate::cluster::host::{HostRegistry, SharedHost};
use crate::cluster::topology::{Registry, SlotMap, TopologyCell};
use crate::config::{ClusterConfig, ClusterType, Config, HealthCheckConfig};
use crate::net::{self, TaskHandle};
use crate::stats::{Counter, Gauge, Store};

/// How often the control loop runs: the delay between a worker's ejection request and the
/// ejection, and between a slot map change and the checks following it.
pub const TICK: Duration = Duration::from_millis(20);

/// How long a cluster's request count read from the stats store stays fresh.
const TRAFFIC_FRESH: Duration = Duration::from_millis(10);

/// What the engine wants checked: the clusters of the running config, with the topology cell
/// of each `redis_cluster` one.
struct Plan {
    config: ClusterConfig,
    cell: Option<Arc<TopologyCell>>,
}

/// The running health thread; dropping it stops the thread within one [`TICK`] (without
/// waiting for it) and closes every check connection.
pub struct Checker {
    pending: Arc<Mutex<Option<Vec<Plan>>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Checker {
    /// Starts the thread. It does nothing until [`Checker::apply`] gives it a config. If the
    /// thread or its runtime cannot be created, the error is logged and every host stays
    /// healthy (as if nothing were configured).
    pub fn spawn(hosts: Arc<HostRegistry>, store: Arc<Store>) -> Checker {
        let pending: Arc<Mutex<Option<Vec<Plan>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (pending.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("respite-health".into())
            .spawn(move || match net::runtime(None) {
                Ok(rt) => rt.block_on(control(p, s, hosts, store)),
                Err(e) => error!("health thread: no io_uring runtime: {e}; health checks off"),
            });
        if let Err(e) = spawned {
            error!("cannot start the health thread: {e}; health checks off");
        }
        Checker { pending, stop }
    }

    /// Makes the thread check what `config` asks for. Call it after the config's topology cells
    /// are in `registry`.
    pub fn apply(&self, config: &Config, registry: &Registry) {
        let plans = config
            .clusters
            .iter()
            .map(|c| Plan {
                config: c.clone(),
                cell: (c.cluster_type == ClusterType::RedisCluster)
                    .then(|| registry.get(c))
                    .flatten(),
            })
            .collect();
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(plans);
    }
}

/// The control loop (see the module docs).
async fn control(
    pending: Arc<Mutex<Option<Vec<Plan>>>>,
    stop: Arc<AtomicBool>,
    hosts: Arc<HostRegistry>,
    store: Arc<Store>,
) {
    let mut runs: HashMap<String, Run> = HashMap::new();
    let mut unchecked: Vec<Membership> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let plans = pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(plans) = plans {
            unchecked = plans
                .iter()
                .filter(|p| {
                    p.config.health_checks.is_empty() && p.config.outlier_detection.is_none()
                })
                .map(|p| Membership::new(p, &store))
                .collect();
            reconcile(&mut runs, plans, &hosts, &store);
        }
        let now = Instant::now();
        for run in runs.values_mut() {
            run.tick(now, &hosts);
        }
        for m in &unchecked {
            m.tick();
        }
        net::sleep(TICK).await;
    }
}

/// Every node of a slot map, primaries and replicas, once each, in map order.
fn nodes(map: &SlotMap) -> Vec<SocketAddr> {
    let mut v: Vec<SocketAddr> = Vec::new();
    for sh in &map.shards {
        for a in std::iter::once(&sh.primary).chain(&sh.replicas) {
            if !v.contains(a) {
                v.push(*a);
            }
        }
    }
    v
}

/// `membership_total|healthy` of a cluster with neither health checks nor outlier detection:
/// every member counts as healthy (Envoy reports both gauges for every cluster).
struct Membership {
    plan: Plan,
    total: Arc<Gauge>,
    healthy: Arc<Gauge>,
}

impl Membership {
    fn new(plan: &Plan, store: &Store) -> Membership {
        let c = &plan.config.name;
        Membership {
            plan: Plan {
                config: plan.config.clone(),
                cell: plan.cell.clone(),
            },
            total: store.gauge(&format!("cluster.{c}.membership_total"), 0),
            healthy: store.gauge(&format!("cluster.{c}.membership_healthy"), 0),
        }
    }

    fn tick(&self) {
        let n = match &self.plan.cell {
            None => self.plan.config.hosts.len(),
            Some(cell) => cell.current().map_or(0, |(_, map)| nodes(&map).len()),
        } as i64;
        self.total.set(n);
        self.healthy.set(n);
    }
}

/// Brings `runs` in line with `plans`.
fn reconcile(
    runs: &mut HashMap<String, Run>,
    plans: Vec<Plan>,
    hosts: &Arc<HostRegistry>,
    store: &Arc<Store>,
) {
    let mut next = HashMap::new();
    for plan in plans {
        let wanted =
            !plan.config.health_checks.is_empty() || plan.config.outlier_detection.is_some();
        let old = runs.remove(&plan.config.name);
        if !wanted {
            if let Some(old) = old {
                old.retire(true);
            }
            continue;
        }
        let same_cell = |old: &Run| match (&old.ctx.cell, &plan.cell) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let run = match old {
            Some(old) if old.ctx.config == plan.config && same_cell(&old) => old,
            old => Run::new(plan, old, hosts, store),
        };
        next.insert(run.ctx.config.name.clone(), run);
    }
    for (_, old) in runs.drain() {
        old.retire(true);
    }
    *runs = next;
}

/// The stats of one cluster's checks and ejections.
struct Stats {
    attempt: Arc<Counter>,
    success: Arc<Counter>,
    failure: Arc<Counter>,
    network_failure: Arc<Counter>,
    healthy: Arc<Gauge>,
    membership_total: Arc<Gauge>,
    membership_healthy: Arc<Gauge>,
    ejections_active: Arc<Gauge>,
    ejections_enforced_total: Arc<Counter>,
    ejections_overflow: Arc<Counter>,
    ejections_enforced_5xx: Arc<Counter>,
    ejections_detected_5xx: Arc<Counter>,
}

impl Stats {
    fn new(store: &Store, c: &str) -> Stats {
        let counter = |n: &str| store.counter(&format!("cluster.{c}.{n}"), 0);
        let gauge = |n: &str| store.gauge(&format!("cluster.{c}.{n}"), 0);
        Stats {
            attempt: counter("health_check.attempt"),
            success: counter("health_check.success"),
            failure: counter("health_check.failure"),
            network_failure: counter("health_check.network_failure"),
            healthy: gauge("health_check.healthy"),
            membership_total: gauge("membership_total"),
            membership_healthy: gauge("membership_healthy"),
            ejections_active: gauge("outlier_detection.ejections_active"),
            ejections_enforced_total: counter("outlier_detection.ejections_enforced_total"),
            ejections_overflow: counter("outlier_detection.ejections_overflow"),
            ejections_enforced_5xx: counter("outlier_detection.ejections_enforced_consecutive_5xx"),
            ejections_detected_5xx: counter("outlier_detection.ejections_detected_consecutive_5xx"),
        }
    }
}

/// What the check tasks of one cluster share.
struct Ctx {
    config: ClusterConfig,
    cell: Option<Arc<TopologyCell>>,
    probes: Vec<Probe>,
    stats: Stats,
    store: Arc<Store>,
    /// Stat names of the members' `rq_total` counters (the cluster's traffic).
    rq_names: RefCell<Vec<String>>,
    /// (when read, requests summed over the members).
    traffic: Cell<Option<(Instant, u64)>>,
}

impl Ctx {
    /// Requests the cluster has sent so far, summed over hosts and workers (read from the stats
    /// store, so the request path writes nothing for this).
    fn traffic(&self, now: Instant) -> u64 {
        if let Some((at, n)) = self.traffic.get()
            && now.saturating_duration_since(at) < TRAFFIC_FRESH
        {
            return n;
        }
        let n = self
            .rq_names
            .borrow()
            .iter()
            .filter_map(|name| self.store.counter_value(name))
            .fold(0u64, u64::wrapping_add);
        self.traffic.set(Some((now, n)));
        n
    }

    /// A host turned unhealthy or was ejected: a Redis Cluster's topology may have changed
    /// (`host_degraded_refresh_threshold`).
    fn degraded(&self) {
        if let Some(cell) = &self.cell {
            cell.note_degraded();
        }
    }
}

/// One watched host: its shared state, its check tasks and its ejection record.
struct Member {
    host: Arc<SharedHost>,
    _tasks: Vec<TaskHandle>,
    ejection: Ejection,
}

/// The checks and ejections of one cluster.
struct Run {
    ctx: Rc<Ctx>,
    ejector: Option<Ejector>,
    members: HashMap<SocketAddr, Member>,
    /// Version of the slot map the members follow (`redis_cluster` only).
    seen_map: u64,
}

impl Run {
    /// Starts checking `plan`'s cluster; `old` is the run of its previous config, whose
    /// ejection records carry over.
    fn new(plan: Plan, old: Option<Run>, hosts: &Arc<HostRegistry>, store: &Arc<Store>) -> Run {
        let c = &plan.config;
        let probes = c
            .health_checks
            .iter()
            .map(|hc| {
                Probe::new(
                    hc.key.as_deref(),
                    crate::upstream::UpstreamAuth::of(c),
                    c.connect_timeout,
                    crate::upstream::TlsSettings::of(c)
                        .map(|t| t.with_stats(store, crate::stats::HEALTH_SHARD)),
                )
            })
            .collect();
        let ctx = Rc::new(Ctx {
            stats: Stats::new(store, &c.name),
            probes,
            store: store.clone(),
            rq_names: RefCell::new(Vec::new()),
            traffic: Cell::new(None),
            cell: plan.cell,
            config: plan.config,
        });
        let mut carried: HashMap<SocketAddr, Ejection> = HashMap::new();
        if let Some(old) = old {
            carried = old
                .members
                .iter()
                .map(|(a, m)| (*a, m.ejection.clone()))
                .collect();
            old.retire(false);
        }
        let ejector = ctx.config.outlier_detection.clone().map(Ejector::new);
        let mut run = Run {
            ctx,
            ejector,
            members: HashMap::new(),
            seen_map: 0,
        };
        let addrs = run.wanted_members();
        run.set_members(addrs, hosts, &mut carried);
        run
    }

    /// The hosts to watch now: the configured hosts, or every node of the current slot map.
    fn wanted_members(&mut self) -> Vec<SocketAddr> {
        match &self.ctx.cell {
            None => self.ctx.config.hosts.iter().map(|h| h.address).collect(),
            Some(cell) => {
                let Some((version, map)) = cell.current() else {
                    return Vec::new();
                };
                self.seen_map = version;
                nodes(&map)
            }
        }
    }

    /// Watches exactly `addrs`: new hosts get check tasks, gone ones are stopped and cleared.
    fn set_members(
        &mut self,
        addrs: Vec<SocketAddr>,
        hosts: &Arc<HostRegistry>,
        carried: &mut HashMap<SocketAddr, Ejection>,
    ) {
        let ctx = self.ctx.clone();
        let c = &ctx.config;
        let c5xx = c
            .outlier_detection
            .as_ref()
            .map_or(0, |o| o.consecutive_5xx);
        self.members.retain(|a, m| {
            let keep = addrs.contains(a);
            if !keep {
                clear(&m.host);
            }
            keep
        });
        for addr in &addrs {
            if self.members.contains_key(addr) {
                continue;
            }
            let host = hosts.host(c, *addr);
            host.health.set_consecutive_5xx(c5xx);
            host.health.clear_checks_from(c.health_checks.len());
            let ejection = carried.remove(addr).unwrap_or_default();
            if ejection.until.is_none() && host.health.is_ejected() {
                host.health.set_ejected(false);
            }
            let tasks = (0..c.health_checks.len())
                .map(|j| net::spawn_cancellable(check_loop(ctx.clone(), j, host.clone())))
                .collect();
            self.members.insert(
                *addr,
                Member {
                    host,
                    _tasks: tasks,
                    ejection,
                },
            );
        }
        *ctx.rq_names.borrow_mut() = addrs
            .iter()
            .map(|a| format!("cluster.{}.host.{a}.rq_total", c.name))
            .collect();
        ctx.traffic.set(None);
    }

    /// One control-loop round for this cluster.
    fn tick(&mut self, now: Instant, hosts: &Arc<HostRegistry>) {
        if let Some(cell) = &self.ctx.cell
            && cell.version() != self.seen_map
        {
            let addrs = self.wanted_members();
            self.set_members(addrs, hosts, &mut HashMap::new());
        }
        self.outliers(now);
        let s = &self.ctx.stats;
        let total = self.members.len() as i64;
        let passing = self
            .members
            .values()
            .filter(|m| m.host.health.passes_checks())
            .count();
        let healthy = self
            .members
            .values()
            .filter(|m| m.host.health.is_healthy())
            .count();
        let ejected = self
            .members
            .values()
            .filter(|m| m.ejection.until.is_some())
            .count();
        s.membership_total.set(total);
        s.membership_healthy.set(healthy as i64);
        s.healthy.set(passing as i64);
        s.ejections_active.set(ejected as i64);
    }

    /// Enforces ejection requests, expires ejections, and runs the `interval` review.
    fn outliers(&mut self, now: Instant) {
        let Some(ej) = &mut self.ejector else {
            return;
        };
        let ctx = &self.ctx;
        let name = &ctx.config.name;
        for m in self.members.values_mut() {
            if ej.expire(&mut m.ejection, now) {
                let (_, healthy) = m.host.health.set_ejected(false);
                info!(cluster = %name, host = %m.host.addr, healthy, "outlier detection: host un-ejected");
            }
        }
        let n = self.members.len();
        let mut ejected = self
            .members
            .values()
            .filter(|m| m.ejection.until.is_some())
            .count();
        let mut addrs: Vec<SocketAddr> = self.members.keys().copied().collect();
        // A fixed order, so that when requests exceed the cap the same hosts win each time.
        addrs.sort();
        for a in addrs {
            let Some(m) = self.members.get_mut(&a) else {
                continue;
            };
            if !m.host.health.take_ejection_request() {
                continue;
            }
            ctx.stats.ejections_detected_5xx.inc();
            match ej.request(&mut m.ejection, ejected, n, now) {
                Verdict::Ejected(d) => {
                    ejected += 1;
                    ctx.stats.ejections_enforced_total.inc();
                    ctx.stats.ejections_enforced_5xx.inc();
                    let (was, _) = m.host.health.set_ejected(true);
                    info!(
                        cluster = %name, host = %a, times = m.ejection.times,
                        "outlier detection: host ejected for {d:?} (consecutive failures)"
                    );
                    if was {
                        ctx.degraded();
                    }
                }
                Verdict::Overflow => {
                    ctx.stats.ejections_overflow.inc();
                    info!(cluster = %name, host = %a, "outlier detection: ejection refused (max_ejection_percent)");
                }
                Verdict::AlreadyEjected => {}
            }
        }
        if ej.review_due(now) {
            for m in self.members.values_mut() {
                ej.review(&mut m.ejection);
            }
        }
    }

    /// Stops the cluster's checks; `clear`: also forget its hosts' health (the cluster is gone
    /// or no longer checked), else a new run of the same cluster takes over.
    fn retire(self, clear_state: bool) {
        if clear_state {
            for m in self.members.values() {
                clear(&m.host);
                m.host.health.set_consecutive_5xx(0);
            }
        }
    }
}

/// Makes `host` healthy again (no failing check, not ejected).
fn clear(host: &SharedHost) {
    host.health.clear_checks_from(0);
    if host.health.is_ejected() {
        host.health.set_ejected(false);
    }
}

/// A uniformly random duration in `[0, max]`.
fn jitter(max: Duration) -> Duration {
    max.mul_f64(fastrand::f64())
}

/// Runs active check `j` of `ctx`'s cluster on `host` until its task handle is dropped.
async fn check_loop(ctx: Rc<Ctx>, j: usize, host: Arc<SharedHost>) {
    let Some(hc) = ctx.config.health_checks.get(j).cloned() else {
        return;
    };
    let Some(probe) = ctx.probes.get(j).cloned() else {
        return;
    };
    let HealthCheckConfig {
        interval,
        interval_jitter,
        timeout,
        unhealthy_threshold,
        healthy_threshold,
        no_traffic_interval,
        ..
    } = hc;
    let name = ctx.config.name.clone();
    let mut tally = Tally::new(!host.health.check_failing(j));
    let mut stream = None;
    // Spread the first checks of many hosts (and proxies started together) over the jitter.
    net::sleep(jitter(interval_jitter)).await;
    let mut last_traffic = ctx.traffic(Instant::now());
    loop {
        ctx.stats.attempt.inc();
        let (outcome, kept) = net::timeout(timeout, probe.run(host.addr, stream.take()))
            .await
            .unwrap_or((Outcome::NetworkFail, None));
        stream = kept;
        match outcome {
            Outcome::Pass => ctx.stats.success.inc(),
            Outcome::Fail => ctx.stats.failure.inc(),
            Outcome::NetworkFail => {
                ctx.stats.failure.inc();
                ctx.stats.network_failure.inc();
            }
        }
        if let Some(ok) = tally.record(outcome, unhealthy_threshold, healthy_threshold) {
            let (was, now_healthy) = host.health.set_check_failing(j, !ok);
            if ok {
                info!(cluster = %name, host = %host.addr, check = j, healthy = now_healthy, "health check passes again");
            } else {
                info!(cluster = %name, host = %host.addr, check = j, ?outcome, "host unhealthy: health check failed");
            }
            if was && !now_healthy {
                ctx.degraded();
            }
        }
        // While the cluster sends nothing, a healthy host is checked every
        // `no_traffic_interval`; the wait looks at the traffic every `interval`, so requests
        // that start again bring the short interval back within one interval. An unhealthy
        // host gets no traffic by our own choice, and a host that failed a check may be hung
        // with its clients stuck behind it (no new traffic until their requests time out): both
        // are checked every `interval` regardless.
        let mut waited = Duration::ZERO;
        loop {
            let step = interval + jitter(interval_jitter);
            net::sleep(step).await;
            waited += step;
            let traffic = ctx.traffic(Instant::now());
            if traffic != last_traffic || !tally.settled() || waited >= no_traffic_interval {
                last_traffic = traffic;
                break;
            }
        }
    }
}

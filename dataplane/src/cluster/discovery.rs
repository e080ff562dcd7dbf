//! Topology discovery of `redis_cluster` clusters: one thread per cluster and process polls
//! `CLUSTER SLOTS` and publishes confirmed maps into the cluster's [`TopologyCell`].
//!
//! Semantics follow Envoy's `envoy.clusters.redis` (`RedisClusterConfig`; see the Envoy
//! `redis_proxy` reference, sections 1.6 and 1.9, and `ClusterRefreshManagerImpl`):
//!
//! - **Thread.** `respite-topo-<cluster>`, blocking std sockets; never a worker. Each request
//!   connects (within `connect_timeout`, at most `cluster_refresh_timeout`), sends `AUTH
//!   [user] pass` when configured and `CLUSTER SLOTS`, reads one reply and closes; the whole
//!   exchange is bounded by `cluster_refresh_timeout`.
//! - **Known nodes** are the seeds (`hosts`) and every node of the current map.
//! - **Periodic refresh** every `cluster_refresh_rate`, from a random known node; when it fails,
//!   the map's other nodes are tried, then the seeds. Until the first map exists the retry
//!   period is at most [`FIRST_MAP_RETRY`], so a proxy started before its cluster gets a map
//!   soon after the cluster is up.
//! - **Triggered refresh.** Every poll tick ([`TICK`]) the thread takes the redirect and
//!   failure counts workers reported to the cell, and the degraded-host count of the health
//!   thread; reaching `redirect_refresh_threshold`, `failure_refresh_threshold` or
//!   `host_degraded_refresh_threshold` (0 = off) refreshes at once, at most once per
//!   `redirect_refresh_interval`; counts inside that gap are dropped, as Envoy does.
//! - **Publishing.** The first usable map is published at once. A map equal to the current one
//!   changes nothing; one that differs only in replicas is published directly.
//! - **Confirmation (our fix of an Envoy weak spot).** Envoy takes any node's answer as the
//!   truth, so one node in a minority partition (or one that has not yet heard of a failover)
//!   can flip the map to stale primaries and back on every refresh that happens to ask it. Here
//!   a map whose primaries differ from the current map's is published only if a *different*
//!   node, preferably a primary of the new map, answers with the same primaries. Otherwise the
//!   current map stays and `refresh_unconfirmed` counts; the next refresh tries again, so a
//!   real change (which the cluster's nodes converge on within a gossip round or two) still
//!   lands, one refresh period later at worst.
//! - **Maps with no slots** (a node that has not joined yet) count as failed answers, as Envoy
//!   treats an empty `CLUSTER SLOTS` reply.
//!
//! - **Zones.** With `zone_discovery`, each refresh is followed by an `INFO server` exchange
//!   with every node of the current map (see `zones`); a changed zone set is published into the
//!   cell, and workers rebuild their views as for a new map.
//!
//! Stats, all under `cluster.<name>.redis_cluster.` in stats shard 0 (only this thread writes
//! them): counters `refresh_periodic`, `refresh_triggered` (refreshes started by each cause),
//! `refresh_failed` (a node did not answer or its reply was unusable; one per node asked),
//! `refresh_unconfirmed` (a primaries change that a second node did not confirm),
//! `refresh_host_degraded` (triggered refreshes caused by hosts the health thread found
//! unhealthy or ejected, `host_degraded_refresh_threshold`),
//! `topology_changed` (maps published after the first); gauge `slots_covered` (slots the
//! current map assigns, 0..=16384).

mod refresh;
mod slots_reply;
mod zones;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::topology::{SlotMap, TopologyCell, UNASSIGNED};
use crate::config::ClusterConfig;
use crate::stats::{Counter, Gauge, Store};
use crate::upstream::ClusterSlotsClient;
use refresh::{Outcome, Refresher, Trigger, TriggerGate};

/// How often the thread looks at the trigger counts and the stop signal.
pub const TICK: Duration = Duration::from_millis(50);

/// Longest wait between attempts while no map has been published yet.
pub const FIRST_MAP_RETRY: Duration = Duration::from_millis(500);

/// How long a warning with the same text stays silenced (logged at debug meanwhile).
const WARN_REPEAT: Duration = Duration::from_secs(60);

/// A running discovery thread; dropping the handle stops it: at once when it is idle, within
/// one [`TICK`] when it is waiting for a reply, and after at most the connect timeout when it
/// is connecting (or as long as a DNS lookup of a hostname endpoint takes). Drop does not wait
/// for the thread to end, and the thread publishes nothing once it has seen the stop.
pub struct Discovery {
    cell: Arc<TopologyCell>,
    stop: Arc<AtomicBool>,
    /// Never sent on: dropping it wakes the thread's tick wait with `Disconnected`.
    _wake: Sender<()>,
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Discovery {
    /// Starts the discovery thread of `cluster` (a `redis_cluster` cluster), publishing into
    /// `cell` and counting into `store` under `cluster.<name>.redis_cluster.`. The first
    /// refresh starts at once. If the thread cannot be created the error is logged and the
    /// handle never sees a map.
    pub fn spawn(cluster: ClusterConfig, cell: Arc<TopologyCell>, store: Arc<Store>) -> Discovery {
        let stop = Arc::new(AtomicBool::new(false));
        let (wake, wait) = mpsc::channel();
        let name = format!("respite-topo-{}", cluster.name);
        let worker = Worker::new(cluster, cell.clone(), &store, stop.clone(), wait);
        if let Err(e) = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || worker.run())
        {
            tracing::error!("cannot start topology thread {name}: {e}");
        }
        Discovery {
            cell,
            stop,
            _wake: wake,
        }
    }

    /// Blocks until the cell holds a map or `timeout` passes; true if a map exists.
    pub fn wait_first(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.cell.version() > 0 {
                return true;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(Duration::from_millis(5)));
        }
    }
}

/// Parses a `CLUSTER SLOTS` reply (RESP2 or RESP3) from node `queried` into a map: one shard
/// per distinct primary in order of its first slot, `slots[s]` the index of slot `s`'s shard,
/// unlisted slots [`UNASSIGNED`].
///
/// Node endpoints (Redis Cluster spec, CLUSTER SLOTS): NULL or `""` means `queried`'s IP; `?`
/// means the node's metadata `ip` if given, else `queried`'s IP; a hostname is resolved with
/// `ToSocketAddrs` (blocking DNS, first address). A replica that does not resolve is left out;
/// a primary that does not resolve is an error.
///
/// Errors (the message says what is wrong): the reply is incomplete, has trailing bytes, is an
/// error reply, is not shaped like a CLUSTER SLOTS reply (wrong types, slot outside
/// `0..16384`, reversed range, port outside `1..=65535`, a slot listed twice), or a primary
/// does not resolve. Never panics, whatever the bytes.
pub fn parse_cluster_slots(reply: &[u8], queried: SocketAddr) -> Result<SlotMap, String> {
    slots_reply::parse(reply, queried)
}

/// The slot map `node` reports: one `CLUSTER SLOTS` exchange, parsed. Errors name the step
/// that failed (connect, write, read, AUTH, parse), for the refresh's warning.
fn slot_map(client: &ClusterSlotsClient, node: SocketAddr) -> Result<SlotMap, String> {
    let reply = client.fetch(node).map_err(|e| e.to_string())?;
    parse_cluster_slots(&reply, node)
}

/// The stats of one cluster's discovery thread.
struct Stats {
    periodic: Arc<Counter>,
    triggered: Arc<Counter>,
    failed: Arc<Counter>,
    unconfirmed: Arc<Counter>,
    changed: Arc<Counter>,
    /// Triggered refreshes caused by hosts turning unhealthy or ejected.
    host_degraded: Arc<Counter>,
    slots_covered: Arc<Gauge>,
}

impl Stats {
    fn new(store: &Store, cluster: &str) -> Stats {
        let counter =
            |stat: &str| store.counter(&format!("cluster.{cluster}.redis_cluster.{stat}"), 0);
        Stats {
            periodic: counter("refresh_periodic"),
            triggered: counter("refresh_triggered"),
            failed: counter("refresh_failed"),
            unconfirmed: counter("refresh_unconfirmed"),
            changed: counter("topology_changed"),
            host_degraded: counter("refresh_host_degraded"),
            slots_covered: store
                .gauge(&format!("cluster.{cluster}.redis_cluster.slots_covered"), 0),
        }
    }
}

/// Why a refresh runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Periodic,
    Triggered,
}

/// The state of the discovery thread.
struct Worker {
    name: String,
    cell: Arc<TopologyCell>,
    stats: Stats,
    refresher: Refresher,
    gate: TriggerGate,
    client: ClusterSlotsClient,
    /// `INFO server` client, with `zone_discovery` only.
    zone_client: Option<ClusterSlotsClient>,
    rate: Duration,
    stop: Arc<AtomicBool>,
    wait: Receiver<()>,
    /// Warning text → when it was last logged at warn level.
    warned: HashMap<String, Instant>,
}

impl Worker {
    fn new(
        cluster: ClusterConfig,
        cell: Arc<TopologyCell>,
        store: &Store,
        stop: Arc<AtomicBool>,
        wait: Receiver<()>,
    ) -> Worker {
        let seeds = cluster.hosts.iter().map(|h| h.address).collect();
        let current = cell.current().map(|(_, map)| map);
        let stats = Stats::new(store, &cluster.name);
        if let Some(map) = &current {
            stats.slots_covered.set(covered(map));
        }
        Worker {
            stats,
            refresher: Refresher::new(seeds, current, fastrand::Rng::new()),
            gate: TriggerGate::new(&cluster.redis_cluster),
            client: ClusterSlotsClient::new(&cluster, stop.clone()).with_stats(store),
            zone_client: cluster
                .redis_cluster
                .zone_discovery
                .then(|| ClusterSlotsClient::info_server(&cluster, stop.clone()).with_stats(store)),
            rate: cluster.redis_cluster.cluster_refresh_rate,
            name: cluster.name,
            cell,
            stop,
            wait,
            warned: HashMap::new(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Ticks until the handle is dropped.
    fn run(mut self) {
        // `None`: a period too long to represent, i.e. never.
        let mut next_periodic = Some(Instant::now());
        loop {
            if self.stopped() {
                return;
            }
            let now = Instant::now();
            let (redirects, failures) = self.cell.take_triggers();
            let degraded = self.cell.take_degraded();
            let trigger = self.gate.observe_all(now, redirects, failures, degraded);
            if trigger == Some(Trigger::HostDegraded) {
                self.stats.host_degraded.inc();
            }
            let cause = if trigger.is_some() {
                Some(Cause::Triggered)
            } else if next_periodic.is_some_and(|at| now >= at) {
                Some(Cause::Periodic)
            } else {
                None
            };
            if let Some(cause) = cause {
                let changed = self.refresh(cause);
                self.refresh_zones();
                if cause == Cause::Triggered {
                    self.gate.refreshed(changed);
                }
                // Any refresh restarts the period, as Envoy re-arms its timer after each one.
                next_periodic = Instant::now().checked_add(self.period());
            }
            match self.wait.recv_timeout(TICK) {
                Err(RecvTimeoutError::Timeout) => {}
                // The handle was dropped (its sender disconnected).
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn period(&self) -> Duration {
        match self.refresher.current() {
            Some(_) => self.rate,
            None => self.rate.min(FIRST_MAP_RETRY),
        }
    }

    /// One refresh: ask, decide, publish, count and log. True if a new map was published.
    fn refresh(&mut self, cause: Cause) -> bool {
        match cause {
            Cause::Periodic => self.stats.periodic.inc(),
            Cause::Triggered => self.stats.triggered.inc(),
        }
        let client = &self.client;
        let report = self.refresher.refresh(&mut |node| slot_map(client, node));
        if self.stopped() {
            // Errors here are most likely "stopped"; nothing of this refresh matters any more.
            return false;
        }
        for (node, error) in report.failures {
            self.stats.failed.inc();
            self.warn(format!(
                "cluster {}: topology request to {node} failed: {error}",
                self.name
            ));
        }
        match report.outcome {
            Outcome::NoAnswer => {
                self.warn(format!(
                    "cluster {}: no node answered CLUSTER SLOTS; keeping the current map",
                    self.name
                ));
                false
            }
            Outcome::Unchanged => false,
            Outcome::First(map) => {
                self.publish(map, "first slot map");
                true
            }
            Outcome::Replicas(map) => {
                self.stats.changed.inc();
                self.publish(map, "replicas changed");
                true
            }
            Outcome::Changed(map) => {
                self.stats.changed.inc();
                self.publish(map, "primaries changed");
                true
            }
            Outcome::Unconfirmed { from, by } => {
                self.stats.unconfirmed.inc();
                let by = by.map_or("no other node answered".to_string(), |b| {
                    format!("{b} disagrees")
                });
                self.warn(format!(
                    "cluster {}: {from} reports other primaries, not confirmed ({by}); keeping \
                     the current map",
                    self.name
                ));
                false
            }
        }
    }

    /// With `zone_discovery`: asks every node of the current map for its zone and publishes
    /// the result if it changed.
    fn refresh_zones(&mut self) {
        let (Some(client), Some(map)) = (&self.zone_client, self.refresher.current()) else {
            return;
        };
        let (found, failed) = zones::discover(client, map, &self.stop);
        if self.stopped() {
            return;
        }
        for (node, error) in failed {
            self.warn(format!(
                "cluster {}: zone request (INFO server) to {node} failed: {error}",
                self.name
            ));
        }
        let known = found.len();
        if self.cell.publish_zones(found) {
            tracing::info!("cluster {}: node zones changed: {known} known", self.name);
        }
    }

    fn publish(&mut self, map: Arc<SlotMap>, what: &str) {
        let covered = covered(&map);
        tracing::info!(
            "cluster {}: {what}: {} shards, {covered} slots covered",
            self.name,
            map.shards.len()
        );
        self.stats.slots_covered.set(covered);
        self.cell.publish(map);
    }

    /// Logs `msg` at warn level unless the same text was warned within [`WARN_REPEAT`] (then
    /// at debug), so a node that stays down does not fill the log every refresh.
    fn warn(&mut self, msg: String) {
        let now = Instant::now();
        self.warned
            .retain(|_, at| now.saturating_duration_since(*at) < WARN_REPEAT);
        match self.warned.entry(msg) {
            Entry::Occupied(e) => tracing::debug!("{}", e.key()),
            Entry::Vacant(e) => {
                tracing::warn!("{}", e.key());
                e.insert(now);
            }
        }
    }
}

/// Number of slots `map` assigns to a shard.
fn covered(map: &SlotMap) -> i64 {
    map.slots.iter().filter(|&&s| s != UNASSIGNED).count() as i64
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod live_tests;

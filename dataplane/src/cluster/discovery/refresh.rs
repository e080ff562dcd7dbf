//! The refresh decisions, free of sockets and clocks: which nodes to ask, whether a new map is
//! published (see the confirmation rule in the parent module), and when worker triggers cause
//! an early refresh. The thread in the parent module feeds them a real fetcher and time; the
//! unit tests a fake one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::topology::SlotMap;
use crate::config::RedisClusterConfig;

/// Fetches and parses `CLUSTER SLOTS` from one node.
pub(super) type Fetch<'a> = dyn FnMut(SocketAddr) -> Result<SlotMap, String> + 'a;

/// What one refresh decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// No node gave a usable map.
    NoAnswer,
    /// The answer equals the current map.
    Unchanged,
    /// The first map: publish it.
    First(Arc<SlotMap>),
    /// Same primaries, other replicas: publish it.
    Replicas(Arc<SlotMap>),
    /// Other primaries, confirmed by a second node: publish it.
    Changed(Arc<SlotMap>),
    /// `from` reported other primaries that `by` (the confirming node, `None` if no other node
    /// answered) did not: the current map stays.
    Unconfirmed {
        from: SocketAddr,
        by: Option<SocketAddr>,
    },
}

/// The result of one refresh: its outcome and every node that failed on the way.
#[derive(Debug)]
pub(super) struct Report {
    pub outcome: Outcome,
    /// Nodes that did not answer or gave an unusable reply, with the reason.
    pub failures: Vec<(SocketAddr, String)>,
}

/// The current map of one cluster and the rules for replacing it.
#[derive(Debug)]
pub(super) struct Refresher {
    seeds: Vec<SocketAddr>,
    current: Option<Arc<SlotMap>>,
    rng: fastrand::Rng,
}

impl Refresher {
    /// `seeds`: the configured hosts; `current`: the map already in the cell, if any (a
    /// restarted discovery thread continues from it, so the confirmation rule still applies).
    pub fn new(seeds: Vec<SocketAddr>, current: Option<Arc<SlotMap>>, rng: fastrand::Rng) -> Self {
        Refresher {
            seeds,
            current,
            rng,
        }
    }

    /// The map published last (or given to [`Refresher::new`]).
    pub fn current(&self) -> Option<&Arc<SlotMap>> {
        self.current.as_ref()
    }

    /// One refresh: asks nodes in [`Refresher::query_order`] until one answers, then
    /// [`Refresher::decide`]s.
    pub fn refresh(&mut self, fetch: &mut Fetch<'_>) -> Report {
        let mut failures = Vec::new();
        let order = self.query_order();
        let outcome = match first_answer(&order, fetch, &mut failures) {
            Some((from, map)) => self.decide(from, map, fetch, &mut failures),
            None => Outcome::NoAnswer,
        };
        Report { outcome, failures }
    }

    /// Whom to ask: a random known node first (known = seeds ∪ nodes of the current map, as
    /// Envoy picks a random node), then the current map's other nodes in random order, then
    /// the seeds in config order (they are the fallback when the whole map went stale).
    pub fn query_order(&mut self) -> Vec<SocketAddr> {
        let mut nodes = self.current.as_deref().map(map_nodes).unwrap_or_default();
        self.rng.shuffle(&mut nodes);
        let mut known = nodes.clone();
        extend_unique(&mut known, &self.seeds);
        let mut order = Vec::with_capacity(known.len());
        if !known.is_empty()
            && let Some(&pick) = known.get(self.rng.usize(..known.len()))
        {
            order.push(pick);
        }
        extend_unique(&mut order, &nodes);
        extend_unique(&mut order, &self.seeds);
        order
    }

    /// Decides what `map` (answered by `from`) does to the current map; asks a second node
    /// through `fetch` when the primaries differ.
    pub fn decide(
        &mut self,
        from: SocketAddr,
        map: SlotMap,
        fetch: &mut Fetch<'_>,
        failures: &mut Vec<(SocketAddr, String)>,
    ) -> Outcome {
        let Some(current) = self.current.clone() else {
            return Outcome::First(self.adopt(map));
        };
        if *current == map {
            return Outcome::Unchanged;
        }
        if current.same_primaries(&map) {
            return Outcome::Replicas(self.adopt(map));
        }
        let order = self.confirm_order(&map, from);
        match first_answer(&order, fetch, failures) {
            // The confirming node's map is the fresher of the two; publish it.
            Some((_, confirmed)) if confirmed.same_primaries(&map) => {
                Outcome::Changed(self.adopt(confirmed))
            }
            Some((by, _)) => Outcome::Unconfirmed { from, by: Some(by) },
            None => Outcome::Unconfirmed { from, by: None },
        }
    }

    /// Who may confirm `map` from `from`: the new map's primaries (they know best whether they
    /// own their slots), then its replicas, then the current map's nodes, then the seeds; never
    /// `from` itself.
    fn confirm_order(&mut self, map: &SlotMap, from: SocketAddr) -> Vec<SocketAddr> {
        let mut primaries: Vec<SocketAddr> = map.shards.iter().map(|s| s.primary).collect();
        let mut replicas: Vec<SocketAddr> = map
            .shards
            .iter()
            .flat_map(|s| s.replicas.iter().copied())
            .collect();
        let mut old = self.current.as_deref().map(map_nodes).unwrap_or_default();
        self.rng.shuffle(&mut primaries);
        self.rng.shuffle(&mut replicas);
        self.rng.shuffle(&mut old);
        let mut order = Vec::new();
        for group in [&primaries, &replicas, &old, &self.seeds] {
            extend_unique(&mut order, group);
        }
        order.retain(|&a| a != from);
        order
    }

    fn adopt(&mut self, map: SlotMap) -> Arc<SlotMap> {
        let map = Arc::new(map);
        self.current = Some(map.clone());
        map
    }
}

/// The first node of `order` that answers with a map serving at least one slot; the others
/// are recorded in `failures`. A map without slots counts as a failure, as Envoy treats an
/// empty `CLUSTER SLOTS` reply (a node that has not joined yet knows no slots).
fn first_answer(
    order: &[SocketAddr],
    fetch: &mut Fetch<'_>,
    failures: &mut Vec<(SocketAddr, String)>,
) -> Option<(SocketAddr, SlotMap)> {
    for &addr in order {
        match fetch(addr) {
            Ok(map) if map.shards.is_empty() => {
                failures.push((addr, "the node serves no slots".into()));
            }
            Ok(map) => return Some((addr, map)),
            Err(e) => failures.push((addr, e)),
        }
    }
    None
}

/// Every primary and replica of `map`, each once, primaries first.
pub(super) fn map_nodes(map: &SlotMap) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for s in &map.shards {
        extend_unique(&mut out, &[s.primary]);
    }
    for s in &map.shards {
        extend_unique(&mut out, &s.replicas);
    }
    out
}

/// Appends the addresses of `more` not yet in `v`, keeping order.
fn extend_unique(v: &mut Vec<SocketAddr>, more: &[SocketAddr]) {
    for &a in more {
        if !v.contains(&a) {
            v.push(a);
        }
    }
}

/// Turns the redirect and failure counts that workers report, and the degraded-host count of
/// the health thread, into triggered refreshes, with Envoy's rules
/// (`ClusterRefreshManagerImpl::onEvent`): a refresh when redirects reach
/// `redirect_refresh_threshold`, failures reach `failure_refresh_threshold` or degraded hosts
/// reach `host_degraded_refresh_threshold` (0 = that kind never triggers), at most one per
/// `redirect_refresh_interval`; events inside that gap are dropped, not saved up; all counts
/// restart after a triggered refresh.
#[derive(Debug)]
pub(super) struct TriggerGate {
    redirect_threshold: u32,
    failure_threshold: u32,
    degraded_threshold: u32,
    interval: Duration,
    redirects: u64,
    failures: u64,
    degraded: u64,
    /// When the last triggered refresh was started.
    last: Option<Instant>,
    /// The last triggered refresh changed nothing: the next may come after [`RETRIGGER_GAP`].
    short: bool,
}

/// Gap after a triggered refresh that found the map unchanged (if shorter than
/// `redirect_refresh_interval`). Failures that start when a primary dies trigger a refresh
/// before the cluster has failed over; waiting a whole interval (Envoy: 5 s) for the next one
/// would keep its slots unreachable that much longer than Redis does.
pub(super) const RETRIGGER_GAP: Duration = Duration::from_millis(500);

impl TriggerGate {
    pub fn new(cfg: &RedisClusterConfig) -> Self {
        TriggerGate {
            redirect_threshold: cfg.redirect_refresh_threshold,
            failure_threshold: cfg.failure_refresh_threshold,
            degraded_threshold: cfg.host_degraded_refresh_threshold,
            interval: cfg.redirect_refresh_interval,
            redirects: 0,
            failures: 0,
            degraded: 0,
            last: None,
            short: false,
        }
    }

    /// Reports whether the triggered refresh the gate last let through changed the map.
    pub fn refreshed(&mut self, changed: bool) {
        self.short = !changed;
    }

    /// Feeds one poll tick's counts (from `TopologyCell::take_triggers`) at time `now`; true if
    /// a triggered refresh is due now (the gate then counts it as started).
    #[cfg(test)]
    pub fn observe(&mut self, now: Instant, redirects: u32, failures: u32) -> bool {
        self.observe_all(now, redirects, failures, 0).is_some()
    }

    /// [`TriggerGate::observe`] with the degraded-host count (`TopologyCell::take_degraded`)
    /// too; `Some(cause)` when a triggered refresh is due now.
    pub fn observe_all(
        &mut self,
        now: Instant,
        redirects: u32,
        failures: u32,
        degraded: u32,
    ) -> Option<Trigger> {
        let gap = if self.short {
            self.interval.min(RETRIGGER_GAP)
        } else {
            self.interval
        };
        if let Some(last) = self.last
            && now.saturating_duration_since(last) < gap
        {
            return None;
        }
        self.redirects = self.redirects.saturating_add(u64::from(redirects));
        self.failures = self.failures.saturating_add(u64::from(failures));
        self.degraded = self.degraded.saturating_add(u64::from(degraded));
        let cause = if reached(self.degraded, self.degraded_threshold) {
            Trigger::HostDegraded
        } else if reached(self.redirects, self.redirect_threshold)
            || reached(self.failures, self.failure_threshold)
        {
            Trigger::Errors
        } else {
            return None;
        };
        self.last = Some(now);
        self.redirects = 0;
        self.failures = 0;
        self.degraded = 0;
        Some(cause)
    }
}

/// Why a triggered refresh is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// Redirects or upstream failures reached their threshold.
    Errors,
    /// Hosts turning unhealthy or ejected reached `host_degraded_refresh_threshold`.
    HostDegraded,
}

fn reached(count: u64, threshold: u32) -> bool {
    threshold > 0 && count >= u64::from(threshold)
}

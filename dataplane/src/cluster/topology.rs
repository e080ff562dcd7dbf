//! The slot map of a Redis Cluster and the cell that carries it from the discovery thread to the
//! workers.
//!
//! One discovery thread per `redis_cluster` cluster and process (not per worker) publishes maps
//! into the cluster's [`TopologyCell`]; workers compare [`TopologyCell::version`] (one relaxed
//! atomic load, no lock, no RMW) with the version they hold and take the new map only when it
//! changed. Workers report redirects and upstream failures back through the cell's trigger
//! counters, which the discovery thread turns into early refreshes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::CLUSTER_SLOTS;
use crate::config::ClusterConfig;

/// `SlotMap::slots` value of a slot no shard serves.
pub const UNASSIGNED: u16 = u16::MAX;

/// A primary and its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotShard {
    pub primary: SocketAddr,
    /// In the order the node reported them.
    pub replicas: Vec<SocketAddr>,
}

/// Which shard serves each of the 16 384 slots (Redis Cluster spec, "Keys distribution model").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// Distinct shards (one per primary), in order of their first slot.
    pub shards: Vec<SlotShard>,
    /// `slots[s]`: index into `shards` of slot `s`'s owner, or [`UNASSIGNED`]. Length 16 384.
    pub slots: Vec<u16>,
}

impl SlotMap {
    /// An empty map: every slot unassigned.
    pub fn empty() -> SlotMap {
        SlotMap {
            shards: Vec::new(),
            slots: vec![UNASSIGNED; CLUSTER_SLOTS as usize],
        }
    }

    /// The shard serving `slot`, if any.
    #[inline]
    pub fn shard(&self, slot: u16) -> Option<&SlotShard> {
        let i = *self.slots.get(slot as usize)?;
        self.shards.get(i as usize)
    }

    /// True if both maps give every slot the same primary (replicas may differ: nodes can
    /// briefly disagree about replica health without that mattering for writes).
    pub fn same_primaries(&self, other: &SlotMap) -> bool {
        (0..CLUSTER_SLOTS)
            .all(|s| self.shard(s).map(|sh| sh.primary) == other.shard(s).map(|sh| sh.primary))
    }
}

/// The live slot map of one `redis_cluster` cluster, shared by its discovery thread and every
/// worker of the process.
#[derive(Debug, Default)]
pub struct TopologyCell {
    /// Bumped on every publish; 0 = no map yet.
    version: AtomicU64,
    map: Mutex<Option<Arc<SlotMap>>>,
    /// `MOVED`/`ASK` replies seen by workers since the discovery thread last looked.
    redirects: AtomicU32,
    /// Upstream failures (connect failure, closed connection, timeout) since then.
    failures: AtomicU32,
    /// Nodes that turned unhealthy (active checks) or were ejected (outlier detection) since
    /// then, reported by the health thread.
    degraded: AtomicU32,
    /// Each node's availability zone (`zone_discovery`); nodes without a known zone are absent.
    zones: Mutex<Arc<HashMap<SocketAddr, String>>>,
}

impl TopologyCell {
    /// Version of the newest map; 0 before the first. One relaxed load: the request path calls
    /// it for every request to a `redis_cluster` cluster.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The newest map and its version (`None` before the first map). Takes a lock: call it only
    /// when [`TopologyCell::version`] changed.
    pub fn current(&self) -> Option<(u64, Arc<SlotMap>)> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.as_ref()
            .map(|m| (self.version.load(Ordering::Acquire), m.clone()))
    }

    /// Replaces the map and bumps the version (discovery thread only).
    pub fn publish(&self, new: Arc<SlotMap>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        *map = Some(new);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The nodes' zones last published (empty without `zone_discovery`). Takes a lock: call it
    /// only when [`TopologyCell::version`] changed.
    pub fn zones(&self) -> Arc<HashMap<SocketAddr, String>> {
        self.zones.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the nodes' zones (discovery thread only); bumps the version, so that workers
    /// rebuild their views, only if they changed and a map exists. True if they changed.
    pub fn publish_zones(&self, new: HashMap<SocketAddr, String>) -> bool {
        let mut zones = self.zones.lock().unwrap_or_else(|p| p.into_inner());
        if **zones == new {
            return false;
        }
        *zones = Arc::new(new);
        drop(zones);
        // Workers rebuild from `current()`; before the first map there is nothing to rebuild
        // and version 0 must keep meaning "no map".
        if self.map.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// A worker followed (or could not follow) a `MOVED`/`ASK` redirect.
    pub fn note_redirect(&self) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
    }

    /// A worker saw an upstream failure on this cluster.
    pub fn note_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The health thread found a node of this cluster unhealthy or ejected it.
    pub fn note_degraded(&self) {
        self.degraded.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes (and resets) the count of [`TopologyCell::note_degraded`] calls.
    pub fn take_degraded(&self) -> u32 {
        self.degraded.swap(0, Ordering::Relaxed)
    }

    /// Takes (and resets) the redirect and failure counts: `(redirects, failures)`.
    pub fn take_triggers(&self) -> (u32, u32) {
        (
            self.redirects.swap(0, Ordering::Relaxed),
            self.failures.swap(0, Ordering::Relaxed),
        )
    }
}

/// The topology cells of the process, by cluster name, each with the config its discovery
/// thread runs under. The engine keeps it in step with the config (starting and stopping
/// discovery); workers look cells up when they build a pool.
#[derive(Debug, Default)]
pub struct Registry {
    cells: Mutex<HashMap<String, (ClusterConfig, Arc<TopologyCell>)>>,
}

impl Registry {
    /// The cell of `cluster` if one is registered under a config that differs at most in health
    /// settings ([`ClusterConfig::same_pool`]: those do not change discovery).
    pub fn get(&self, cluster: &ClusterConfig) -> Option<Arc<TopologyCell>> {
        let cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells
            .get(&cluster.name)
            .filter(|(c, _)| c.same_pool(cluster))
            .map(|(_, cell)| cell.clone())
    }

    /// Registers `cell` for `cluster`, replacing any cell of the same name.
    pub fn insert(&self, cluster: &ClusterConfig, cell: Arc<TopologyCell>) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.insert(cluster.name.clone(), (cluster.clone(), cell));
    }

    /// Forgets every cluster whose name is not in `keep`.
    pub fn retain(&self, keep: &[&str]) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.retain(|name, _| keep.contains(&name.as_str()));
    }
}

//! Placement of a `rehash` cluster (`on_unhealthy = "rehash"`) around its unhealthy hosts.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::LoadBalancer;
use super::health::ClusterVersion;
use super::host::SharedHost;
use crate::config::{HostConfig, KeyHash, LbPolicy};

/// A `rehash` cluster's placement around unhealthy hosts, per worker: rebuilt only when the
/// cluster's health version moves (one relaxed load per request), like `SlotPool`'s map.
/// With no healthy host at all every key fails fast: there is no Envoy "panic mode" that would
/// send to unhealthy hosts anyway.
pub(super) struct Rehash {
    version: Arc<ClusterVersion>,
    /// The version `healthy` was built from; `None` before the first build.
    seen: Cell<Option<u64>>,
    healthy: RefCell<Healthy>,
    policy: LbPolicy,
    /// The cluster's key hash: the rebuilt placement hashes keys as the full one does
    /// (twemproxy's `auto_eject_hosts` rebuilds the same distribution over the live servers).
    hash: KeyHash,
    hosts: Vec<HostConfig>,
}

/// Which hosts a `rehash` cluster places keys on.
enum Healthy {
    /// Every host: the full ring applies.
    All,
    /// Some hosts: a ring over them, and each of its indices' host index in the cluster.
    Some(LoadBalancer, Vec<usize>),
    /// No host is healthy.
    None,
}

impl Rehash {
    /// Placement over `hosts` (the cluster's, in config order) under `policy` and `hash`,
    /// following the cluster's health `version`.
    pub(super) fn new(
        version: Arc<ClusterVersion>,
        policy: LbPolicy,
        hash: KeyHash,
        hosts: Vec<HostConfig>,
    ) -> Rehash {
        Rehash {
            version,
            seen: Cell::new(None),
            healthy: RefCell::new(Healthy::All),
            policy,
            hash,
            hosts,
        }
    }

    /// The host index of `key` (`full`: the ring over every host; `shared[i]`: host `i`'s
    /// state), or `None` when no host is healthy.
    #[inline]
    pub(super) fn pick(
        &self,
        key: &[u8],
        full: &LoadBalancer,
        shared: &[Arc<SharedHost>],
    ) -> Option<usize> {
        let v = self.version.get();
        if self.seen.get() != Some(v) {
            self.rebuild(shared);
            self.seen.set(Some(v));
        }
        match &*self.healthy.borrow() {
            Healthy::All => Some(full.pick(key)),
            Healthy::Some(lb, map) => map.get(lb.pick(key)).copied(),
            Healthy::None => None,
        }
    }

    /// Rebuilds the ring over the hosts healthy now (off the steady path: health changes only).
    fn rebuild(&self, shared: &[Arc<SharedHost>]) {
        let map: Vec<usize> = (0..shared.len())
            .filter(|&i| shared.get(i).is_some_and(|h| h.health.is_healthy()))
            .collect();
        let healthy = if map.len() == shared.len() {
            Healthy::All
        } else if map.is_empty() {
            Healthy::None
        } else {
            let hosts: Vec<HostConfig> = map
                .iter()
                .filter_map(|&i| self.hosts.get(i).cloned())
                .collect();
            Healthy::Some(LoadBalancer::with_hash(self.policy, self.hash, &hosts), map)
        };
        *self.healthy.borrow_mut() = healthy;
    }
}

//! Process-wide state of each upstream host, shared by every worker's connections to it.
//!
//! Per-worker state (connections, per-worker stats shards, consecutive-failure counts) stays in
//! the worker; what must be decided once per process lives here: the host's health (active checks
//! and outlier ejection, [`super::health`]) and its connection rate limit
//! ([`ConnectLimiter`]). Connections see it through [`HostState`]. Workers look
//! a host up once, when they build a pool or meet a new Redis Cluster node, and keep the `Arc`;
//! the request path only does relaxed atomic loads on it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::health::{ClusterVersion, HostHealth};
use crate::config::ClusterConfig;
use crate::upstream::{ConnectLimiter, HostState};

/// One upstream host of one cluster, as the whole process sees it.
pub struct SharedHost {
    /// The cluster's name.
    pub cluster: String,
    pub addr: SocketAddr,
    /// Healthy / unhealthy / ejected, written by the health thread and by outlier reports.
    pub health: HostHealth,
    /// New connections to this host, over all workers.
    pub connects: ConnectLimiter,
}

impl HostState for SharedHost {
    fn cluster(&self) -> &str {
        &self.cluster
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn connects(&self) -> &ConnectLimiter {
        &self.connects
    }

    #[inline]
    fn is_healthy(&self) -> bool {
        self.health.is_healthy()
    }

    fn failure_threshold(&self) -> u32 {
        self.health.consecutive_5xx()
    }

    fn request_ejection(&self) {
        self.health.request_ejection();
    }
}

/// Every host of every cluster the process has seen, by (cluster name, address). Entries stay
/// while any pool holds them and are pruned on reload ([`HostRegistry::retain`]).
#[derive(Default)]
pub struct HostRegistry {
    hosts: Mutex<HashMap<(String, SocketAddr), Arc<SharedHost>>>,
    /// The health version of each cluster, shared by its hosts' [`HostHealth`].
    versions: Mutex<HashMap<String, Arc<ClusterVersion>>>,
}

impl HostRegistry {
    /// The shared state of `addr` in `cluster`, created on first use; an existing host takes the
    /// cluster's current settings (rate limit). Takes a lock: call it off the request path.
    pub fn host(&self, cluster: &ClusterConfig, addr: SocketAddr) -> Arc<SharedHost> {
        let version = self
            .versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(cluster.name.clone())
            .or_default()
            .clone();
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let h = hosts
            .entry((cluster.name.clone(), addr))
            .or_insert_with(|| {
                Arc::new(SharedHost {
                    cluster: cluster.name.clone(),
                    addr,
                    health: HostHealth::new(version),
                    connects: ConnectLimiter::new(cluster.connection_rate_limit_per_sec),
                })
            })
            .clone();
        h.connects.set_rate(cluster.connection_rate_limit_per_sec);
        h
    }

    /// Every host known now, sorted by (cluster, address): a copy, for readers such as the admin
    /// `/clusters` (takes the lock once; never call it on the request path).
    pub fn snapshot(&self) -> Vec<Arc<SharedHost>> {
        let hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<Arc<SharedHost>> = hosts.values().cloned().collect();
        drop(hosts);
        all.sort_by(|a, b| (&a.cluster, a.addr).cmp(&(&b.cluster, b.addr)));
        all
    }

    /// Forgets hosts of clusters not in `keep` that no pool holds any more.
    pub fn retain(&self, keep: &[&str]) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.retain(|(c, _), h| keep.contains(&c.as_str()) || Arc::strong_count(h) > 1);
        let mut versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions.retain(|c, _| keep.contains(&c.as_str()) || hosts.keys().any(|(h, _)| h == c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Streak;

    /// A connection's failure run reaches the health thread as an ejection request once the
    /// cluster's `consecutive_5xx` is set.
    #[test]
    fn streak_requests_ejection_at_consecutive_5xx() {
        let h = SharedHost {
            cluster: "c".into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            health: HostHealth::default(),
            connects: ConnectLimiter::new(0),
        };
        let s = Streak::default();
        for _ in 0..10 {
            s.failure(&h);
        }
        assert!(!h.health.take_ejection_request(), "outlier detection off");
        h.health.set_consecutive_5xx(3);
        s.failure(&h);
        s.failure(&h);
        s.success();
        s.failure(&h);
        s.failure(&h);
        assert!(!h.health.take_ejection_request(), "a reply ends the run");
        s.failure(&h);
        assert!(h.health.take_ejection_request());
        assert!(!h.health.take_ejection_request());
    }
}

//! Host sets and where a request goes in them: the consistent-hash load balancers that map a
//! key to a host, Redis Cluster slot maps and their discovery, host health, and the per-worker
//! pools ([`ClusterPool`]) that combine placement with the worker's upstream connections.
//!
//! [`hashtag`] (Redis Cluster spec, key hash tags), [`crc16`] / [`key_slot`] (Redis Cluster
//! slots) and [`LoadBalancer`] (ketama / ring hash / maglev over a cluster's hosts):
//!
//! - [`LbPolicy::Ketama`]: twemproxy 0.5.0 `distribution: ketama` + `hash: fnv1a_64`, so keys
//!   land on the same server as under nutcracker (see `ketama.rs`).
//! - [`LbPolicy::RingHash`] / [`LbPolicy::Maglev`]: Envoy's RING_HASH and MAGLEV with their
//!   defaults, fed with Envoy redis_proxy's key hash, `MurmurHash2_64(key, 0xc70f6907)`
//!   (`RedisLoadBalancerContextImpl`).
//!
//! The caller applies [`hashtag`] before [`LoadBalancer::pick`] when hashtagging is on.
//! `pick` does not allocate: a binary search over the ring (ketama, ring hash) or one table
//! lookup (maglev).

pub mod discovery;
mod hash;
pub mod health;
mod host;
mod ketama;
mod maglev;
mod pool;
mod read_policy;
mod redirection;
mod rehash;
mod ring_hash;
mod slots;
pub mod topology;

pub use hash::{ENVOY_STD_HASH_SEED, crc16, fnv1a_64_twemproxy, murmur2_64, xxh64};
pub use host::{HostRegistry, SharedHost};
pub use pool::{ClusterPool, Conn, Dest, PoolContext, PoolError};

use crate::config::{HostConfig, LbPolicy};

/// Number of Redis Cluster hash slots.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after it,
/// unless that is empty or absent, in which case the whole key (Redis Cluster spec, "Hash tags").
#[inline]
pub fn hashtag(key: &[u8]) -> &[u8] {
    let Some(start) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let inside = key.get(start + 1..).unwrap_or_default();
    match inside.iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(len) => inside.get(..len).unwrap_or(key),
    }
}

/// The Redis Cluster slot of `key`: `crc16(hashtag(key)) % 16384`.
#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashtag(key)) % CLUSTER_SLOTS
}

#[derive(Debug, Clone)]
enum Inner {
    Ketama(ketama::Ketama),
    RingHash(ring_hash::RingHash),
    Maglev(maglev::Maglev),
}

/// Maps a (hash-tagged) key to an index into the cluster's host list.
///
/// Built once per host set (config snapshot); immutable and cheap to share afterwards.
/// Hosts with weight 0 get no share, unless every host has weight 0, in which case all count
/// as weight 1. With no hosts at all, [`LoadBalancer::pick`] returns 0, which the caller must
/// not use as an index (check the host list first).
#[derive(Debug, Clone)]
pub struct LoadBalancer {
    inner: Inner,
}

impl LoadBalancer {
    /// Builds the ring/table for `hosts` under `policy`.
    pub fn new(policy: LbPolicy, hosts: &[HostConfig]) -> LoadBalancer {
        let mut weights: Vec<u32> = hosts.iter().map(|h| h.weight).collect();
        if weights.iter().all(|&w| w == 0) {
            weights.iter_mut().for_each(|w| *w = 1);
        }
        let inner = match policy {
            LbPolicy::Ketama => Inner::Ketama(ketama::Ketama::new(hosts, &weights)),
            LbPolicy::RingHash => Inner::RingHash(ring_hash::RingHash::new(hosts, &weights)),
            LbPolicy::Maglev => Inner::Maglev(maglev::Maglev::new(hosts, &weights)),
        };
        LoadBalancer { inner }
    }

    /// Index into the `hosts` slice given to [`LoadBalancer::new`].
    #[inline]
    pub fn pick(&self, key: &[u8]) -> usize {
        match &self.inner {
            Inner::Ketama(k) => k.pick(key),
            Inner::RingHash(r) => r.pick_hash(murmur2_64(key, ENVOY_STD_HASH_SEED)),
            Inner::Maglev(m) => m.pick_hash(murmur2_64(key, ENVOY_STD_HASH_SEED)),
        }
    }
}

#[cfg(test)]
mod tests;

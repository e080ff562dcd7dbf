//! Host sets and where a request goes in them: the load balancers that map a key to a host,
//! Redis Cluster slot maps and their discovery, host health, and the per-worker pools
//! ([`ClusterPool`]) that combine placement with the worker's upstream connections.
//!
//! [`hashtag`] (Redis Cluster spec, key hash tags), [`hash_tag`] (twemproxy's `hash_tag`),
//! [`crc16`] / [`key_slot`] (Redis Cluster slots) and [`LoadBalancer`] over a cluster's hosts:
//!
//! - [`LbPolicy::Ketama`], [`LbPolicy::Modula`], [`LbPolicy::Random`]: twemproxy 0.5.0's
//!   `distribution`s (`ketama.rs`, `modula.rs`, `random.rs`) with its `hash`es
//!   (`hashkit.rs`), so keys land on the same server as under nutcracker.
//! - [`LbPolicy::RingHash`] / [`LbPolicy::Maglev`]: Envoy's RING_HASH and MAGLEV with their
//!   defaults, fed with Envoy redis_proxy's key hash, `MurmurHash2_64(key, 0xc70f6907)`
//!   (`RedisLoadBalancerContextImpl`).
//!
//! The caller applies the listener's hash tag before [`LoadBalancer::pick`].
//! `pick` does not allocate: a binary search over the ring (ketama, ring hash) or the hosts
//! (modula), one table lookup (maglev), or the thread's random draw (random).

pub mod discovery;
pub mod dns;
mod hash;
pub mod hashkit;
pub mod health;
mod host;
pub mod hostname_cache;
mod ketama;
mod least_request;
mod maglev;
mod modula;
mod pool;
pub mod random;
mod read_policy;
mod redirection;
mod rehash;
mod ring_hash;
mod slots;
pub mod topology;

pub use hash::{ENVOY_STD_HASH_SEED, crc16, fnv1a_64_twemproxy, murmur2_64, xxh64};
pub use host::{HostRegistry, SharedHost};
pub use pool::{ClusterPool, Conn, Dest, PoolContext, PoolError};

use crate::config::{HostConfig, KeyHash, LbPolicy, LeastRequestConfig};

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

/// twemproxy's `hash_tag` (src/nc_server.c `server_pool_idx`): with `Some([open, close])`, the
/// bytes between the first `open` and the first `close` after it, unless that is empty or
/// absent, in which case the whole key; `None`: the whole key. `"{}"` is [`hashtag`].
/// `open == close` works as in twemproxy: the text between the first two occurrences.
#[inline]
pub fn hash_tag(tag: Option<[u8; 2]>, key: &[u8]) -> &[u8] {
    let Some([open, close]) = tag else {
        return key;
    };
    let Some(start) = key.iter().position(|&b| b == open) else {
        return key;
    };
    let inside = key.get(start + 1..).unwrap_or_default();
    match inside.iter().position(|&b| b == close) {
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
    Modula(modula::Modula),
    Random(random::Random),
    LeastRequest(least_request::LeastRequest),
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
    /// Builds the ring/table for `hosts` under `policy`, with twemproxy's default key hash
    /// (`fnv1a_64`) for ketama and modula.
    pub fn new(policy: LbPolicy, hosts: &[HostConfig]) -> LoadBalancer {
        LoadBalancer::with_hash(policy, KeyHash::default(), hosts)
    }

    /// Builds the ring/table for `hosts` under `policy`; `hash` is the key hash of ketama and
    /// modula (ignored by random, ring hash and maglev).
    pub fn with_hash(policy: LbPolicy, hash: KeyHash, hosts: &[HostConfig]) -> LoadBalancer {
        LoadBalancer::with_settings(policy, hash, LeastRequestConfig::default(), hosts)
    }

    /// [`LoadBalancer::with_hash`] with the settings of `least_request` (`least_request`).
    pub fn with_settings(
        policy: LbPolicy,
        hash: KeyHash,
        least_request: LeastRequestConfig,
        hosts: &[HostConfig],
    ) -> LoadBalancer {
        let mut weights: Vec<u32> = hosts.iter().map(|h| h.weight).collect();
        if weights.iter().all(|&w| w == 0) {
            weights.iter_mut().for_each(|w| *w = 1);
        }
        let inner = match policy {
            LbPolicy::Ketama => Inner::Ketama(ketama::Ketama::new(hosts, &weights, hash)),
            LbPolicy::Modula => Inner::Modula(modula::Modula::new(hosts, &weights, hash)),
            LbPolicy::Random => Inner::Random(random::Random::new(&weights)),
            LbPolicy::RoundRobin => Inner::Random(random::Random::round_robin(&weights)),
            LbPolicy::LeastRequest => {
                Inner::LeastRequest(least_request::LeastRequest::new(&weights, least_request))
            }
            LbPolicy::RingHash => Inner::RingHash(ring_hash::RingHash::new(hosts, &weights)),
            LbPolicy::Maglev => Inner::Maglev(maglev::Maglev::new(hosts, &weights)),
        };
        LoadBalancer { inner }
    }

    /// Index into the `hosts` slice given to [`LoadBalancer::new`]. Random: the host of this
    /// thread's current draw ([`random::set_draw`]), whatever the key.
    #[inline]
    pub fn pick(&self, key: &[u8]) -> usize {
        match &self.inner {
            Inner::Ketama(k) => k.pick(key),
            Inner::Modula(m) => m.pick(key),
            Inner::Random(r) => r.pick(),
            // No load known here: every host counts as idle.
            Inner::LeastRequest(l) => l.pick(|_| Some(0)).unwrap_or(0),
            Inner::RingHash(r) => r.pick_hash(murmur2_64(key, ENVOY_STD_HASH_SEED)),
            Inner::Maglev(m) => m.pick_hash(murmur2_64(key, ENVOY_STD_HASH_SEED)),
        }
    }

    /// Whether a key has no fixed host ([`LbPolicy::Random`], [`LbPolicy::RoundRobin`],
    /// [`LbPolicy::LeastRequest`]).
    #[inline]
    pub fn is_non_hashing(&self) -> bool {
        matches!(self.inner, Inner::Random(_) | Inner::LeastRequest(_))
    }

    /// The least-request picker, for a caller that knows each host's load.
    #[inline]
    pub(super) fn least_request(&self) -> Option<&least_request::LeastRequest> {
        match &self.inner {
            Inner::LeastRequest(l) => Some(l),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_twemproxy;

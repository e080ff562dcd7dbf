//! Host sets and the consistent-hash load balancers that map a key to a host.
//!
//! CONTRACT (skeleton): [`hashtag`] (Redis Cluster spec, key hash tags) and [`LoadBalancer`].

use crate::config::{HostConfig, LbPolicy};

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after it,
/// unless that is empty or absent, in which case the whole key (Redis Cluster spec, "Hash tags").
pub fn hashtag(key: &[u8]) -> &[u8] {
    key
}

/// Maps a (hash-tagged) key to an index into the cluster's host list.
#[derive(Debug, Clone)]
pub struct LoadBalancer {}

impl LoadBalancer {
    /// Builds the ring/table for `hosts` under `policy`.
    pub fn new(_policy: LbPolicy, _hosts: &[HostConfig]) -> LoadBalancer {
        LoadBalancer {}
    }
    /// Index into the `hosts` slice given to [`LoadBalancer::new`].
    pub fn pick(&self, _key: &[u8]) -> usize {
        0
    }
}

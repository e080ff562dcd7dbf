//! Envoy RING_HASH (`source/extensions/load_balancing_policies/ring_hash/ring_hash_lb.cc`,
//! formerly `source/common/upstream/ring_hash_lb.cc`) with its defaults.
//!
//! - Weights are normalized to sum 1 (`thread_aware_lb_impl.cc` `normalizeHostWeights`).
//! - `scale = min(ceil(min_w * min_ring_size) / min_w, max_ring_size)`; ring entries are made
//!   per host in host order while `current_hashes < target_hashes`, where `target_hashes` is the
//!   running sum of `scale * w`. Entry `i` of a host hashes `"<ip:port>_<i>"` with xxHash64
//!   (seed 0). The ring is sorted by hash.
//! - `Ring::chooseHost` is libketama's binary search (ported below as written, signed indices).

use super::hash::xxh64;
use crate::config::HostConfig;

/// Envoy `DefaultMinRingSize`.
pub(super) const MIN_RING_SIZE: u64 = 1024;
/// Envoy `DefaultMaxRingSize`.
pub(super) const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
pub(super) struct RingHash {
    hashes: Vec<u64>,
    hosts: Vec<u32>,
}

impl RingHash {
    pub(super) fn new(hosts: &[HostConfig], weights: &[u32]) -> RingHash {
        Self::with_sizes(hosts, weights, MIN_RING_SIZE, MAX_RING_SIZE)
    }

    /// Envoy's `Ring` constructor with explicit `minimum_ring_size` / `maximum_ring_size`.
    pub(super) fn with_sizes(
        hosts: &[HostConfig],
        weights: &[u32],
        min_ring_size: u64,
        max_ring_size: u64,
    ) -> RingHash {
        let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        if sum == 0 {
            return RingHash {
                hashes: Vec::new(),
                hosts: Vec::new(),
            };
        }
        // Only hosts with a weight take part (Envoy rejects weight 0).
        let normalized: Vec<(usize, f64)> = weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0)
            .map(|(i, &w)| (i, f64::from(w) / sum as f64))
            .collect();
        let min_w = normalized.iter().map(|e| e.1).fold(1.0f64, f64::min);
        let scale = ((min_w * min_ring_size as f64).ceil() / min_w).min(max_ring_size as f64);
        let ring_size = scale.ceil() as usize;

        let mut ring: Vec<(u64, u32)> = Vec::with_capacity(ring_size);
        let mut key = Vec::with_capacity(64);
        let mut current_hashes = 0.0f64;
        let mut target_hashes = 0.0f64;
        for &(idx, w) in &normalized {
            let Some(host) = hosts.get(idx) else { continue };
            let addr = host.address.to_string();
            key.clear();
            key.extend_from_slice(addr.as_bytes());
            key.push(b'_');
            let prefix = key.len();
            target_hashes += scale * w;
            let mut i: u64 = 0;
            while current_hashes < target_hashes {
                key.truncate(prefix);
                key.extend_from_slice(i.to_string().as_bytes());
                ring.push((xxh64(&key, 0), idx as u32));
                i += 1;
                current_hashes += 1.0;
            }
        }
        ring.sort_by_key(|&(h, _)| h);
        RingHash {
            hashes: ring.iter().map(|e| e.0).collect(),
            hosts: ring.iter().map(|e| e.1).collect(),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Envoy `RingHashLoadBalancer::Ring::chooseHost` (attempt 0).
    #[inline]
    pub(super) fn pick_hash(&self, h: u64) -> usize {
        let ring = &self.hashes;
        if ring.is_empty() {
            return 0;
        }
        let n = ring.len() as i64;
        let mut lowp: i64 = 0;
        let mut highp: i64 = n;
        let midp = loop {
            let midp = (lowp + highp) / 2;
            if midp == n {
                break 0;
            }
            let midval = ring.get(midp as usize).copied().unwrap_or(0);
            let midval1 = match midp {
                0 => 0,
                m => ring.get(m as usize - 1).copied().unwrap_or(0),
            };
            if h <= midval && h > midval1 {
                break midp;
            }
            if midval < h {
                lowp = midp + 1;
            } else {
                highp = midp - 1;
            }
            if lowp > highp {
                break 0;
            }
        };
        self.hosts.get(midp as usize).map_or(0, |&h| h as usize)
    }
}

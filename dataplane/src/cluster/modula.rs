//! twemproxy 0.5.0 `distribution: modula`, bit for bit.
//!
//! Source: twitter/twemproxy `src/hashkit/nc_modula.c`. `modula_update` lays the live servers
//! out in the pool's server order, each repeated `weight` times (one continuum entry per unit
//! of weight), and `modula_dispatch` takes entry `hash % ncontinuum`. That order is not the
//! config's: `src/nc_conf.c` `conf_validate_server` sorts a pool's servers by name
//! (`conf_server_name_cmp`, i.e. `string_compare`: shorter names first, then bytewise) to find
//! duplicates, and the pool keeps the sorted array. The name is the one ketama hashes
//! ([`super::ketama::server_name`]). `src/nc_server.c` `server_pool_idx` / `server_pool_hash`: a
//! one-server pool always picks it, and an empty key hashes to 0.
//!
//! Instead of one entry per unit of weight (a weight of 10^9 would be 4 GB), Respite keeps each
//! host's cumulative weight and finds the host whose run holds `hash % total_weight`: the same
//! answer, one binary search over the hosts.

use super::hashkit::key_hash;
use super::ketama::server_name;
use crate::config::{HostConfig, KeyHash};

/// `ends[i]`: the continuum position past host `hosts[i]`'s run (cumulative weights).
#[derive(Debug, Clone)]
pub(super) struct Modula {
    ends: Vec<u64>,
    hosts: Vec<u32>,
    nhosts: usize,
    hash: KeyHash,
}

impl Modula {
    /// `weights[i]` is host `hosts[i]`'s weight; hosts of weight 0 have no entries.
    pub(super) fn new(hosts_in: &[HostConfig], weights: &[u32], hash: KeyHash) -> Modula {
        let mut ends = Vec::new();
        let mut hosts = Vec::new();
        let mut total = 0u64;
        let mut order: Vec<usize> = (0..weights.len()).collect();
        order.sort_by(|&a, &b| {
            let name = |i: usize| hosts_in.get(i).map(server_name).unwrap_or_default();
            let (a, b) = (name(a), name(b));
            (a.len(), a.as_bytes()).cmp(&(b.len(), b.as_bytes()))
        });
        for (i, w) in order
            .into_iter()
            .filter_map(|i| Some((i, *weights.get(i)?)))
        {
            if w == 0 {
                continue;
            }
            total += u64::from(w);
            ends.push(total);
            hosts.push(i as u32);
        }
        Modula {
            ends,
            hosts,
            nhosts: weights.len(),
            hash,
        }
    }

    #[inline]
    pub(super) fn pick(&self, key: &[u8]) -> usize {
        if self.nhosts == 1 {
            return 0;
        }
        let Some(&total) = self.ends.last() else {
            return 0;
        };
        let hash = if key.is_empty() {
            0
        } else {
            key_hash(self.hash, key)
        };
        // twemproxy's ncontinuum is a uint32_t total weight.
        let at = u64::from(hash) % (total as u32).max(1) as u64;
        let i = self.ends.partition_point(|&end| end <= at);
        self.hosts.get(i).map_or(0, |&h| h as usize)
    }
}

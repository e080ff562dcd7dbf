//! Envoy MAGLEV (`source/extensions/load_balancing_policies/maglev/maglev_lb.cc`, formerly
//! `source/common/upstream/maglev_lb.cc`), `OriginalMaglevTable` with the default table size.
//!
//! - Hosts are sorted by their hash key (`"ip:port"`) before the table is filled.
//! - `offset = xxHash64(key, 0) % M`, `skip = xxHash64(key, 1) % (M - 1) + 1`,
//!   `permutation = (offset + skip * next) % M`.
//! - Weighted fill: iteration `1, 2, ...`; an entry takes a slot in an iteration when
//!   `iteration * weight >= target_weight`, then `target_weight += max_normalized_weight`.
//! - Lookup: `table[hash % M]`.

use super::hash::xxh64;
use crate::config::HostConfig;

/// Envoy `MaglevTable::DefaultTableSize` (prime).
pub(super) const TABLE_SIZE: u64 = 65537;

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(super) struct Maglev {
    table: Vec<u32>,
    size: u64,
}

struct BuildEntry {
    host: u32,
    offset: u64,
    skip: u64,
    weight: f64,
    target_weight: f64,
    next: u64,
}

impl Maglev {
    pub(super) fn new(hosts: &[HostConfig], weights: &[u32]) -> Maglev {
        Self::with_table_size(hosts, weights, TABLE_SIZE)
    }

    /// `OriginalMaglevTable` with an explicit (prime) `table_size`.
    pub(super) fn with_table_size(hosts: &[HostConfig], weights: &[u32], size: u64) -> Maglev {
        let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        if sum == 0 {
            return Maglev {
                table: Vec::new(),
                size,
            };
        }
        let mut sorted: Vec<(String, usize, f64)> = weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0)
            .filter_map(|(i, &w)| {
                let host = hosts.get(i)?;
                Some((host.address.to_string(), i, f64::from(w) / sum as f64))
            })
            .collect();
        let max_w = sorted.iter().map(|e| e.2).fold(0.0f64, f64::max);
        sorted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));

        let mut entries: Vec<BuildEntry> = sorted
            .iter()
            .map(|(key, idx, w)| BuildEntry {
                host: *idx as u32,
                offset: xxh64(key.as_bytes(), 0) % size,
                skip: xxh64(key.as_bytes(), 1) % (size - 1) + 1,
                weight: *w,
                target_weight: 0.0,
                next: 0,
            })
            .collect();

        let mut table = vec![EMPTY; size as usize];
        let mut filled: u64 = 0;
        let mut iteration: u32 = 1;
        while filled < size {
            for entry in entries.iter_mut() {
                if filled >= size {
                    break;
                }
                if f64::from(iteration) * entry.weight < entry.target_weight {
                    continue;
                }
                entry.target_weight += max_w;
                // `c < size == table.len()`, and a free entry remains while `filled < size`.
                let mut c = (entry.offset + entry.skip * entry.next) % size;
                while table.get(c as usize).is_some_and(|&e| e != EMPTY) {
                    entry.next += 1;
                    c = (entry.offset + entry.skip * entry.next) % size;
                }
                if let Some(e) = table.get_mut(c as usize) {
                    *e = entry.host;
                }
                entry.next += 1;
                filled += 1;
            }
            iteration += 1;
        }
        Maglev { table, size }
    }

    /// Envoy `OriginalMaglevTable::chooseHost` (attempt 0).
    #[inline]
    pub(super) fn pick_hash(&self, h: u64) -> usize {
        // `size` is the table's length, so the entry is always there; an empty table picks 0.
        self.table
            .get((h % self.size.max(1)) as usize)
            .map_or(0, |&e| e as usize)
    }
}

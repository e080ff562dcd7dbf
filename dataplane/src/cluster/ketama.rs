//! twemproxy 0.5.0 ketama (`distribution: ketama`, any `hash:`), bit-for-bit.
//!
//! Sources (twitter/twemproxy):
//! - `src/hashkit/nc_ketama.c` `ketama_update`: per live server,
//!   `pct = (float)weight / (float)total_weight;`
//!   `pointer_per_server = (uint32_t)((floorf((float)(pct * 160 / 4 * (float)nlive_server +
//!   0.0000000001))) * 4);` then for `pointer_index` in `1..=pointer_per_server / 4` the string
//!   `"%.*s-%u"` of (server name, `pointer_index - 1`) is MD5-hashed into a `char host[86]`
//!   (`KETAMA_MAX_HOSTLEN`) and each of its 4 little-endian u32 words is a point
//!   (`ketama_hash(host, hostlen, x)`). The continuum is `qsort`ed by value.
//! - `ketama_dispatch`: first point with `value >= hash`, wrapping to the first point.
//! - `src/nc_conf.c` `conf_add_server`: without an explicit name, the server name is
//!   `"host:port"` as written (the `:weight` suffix is not part of it), except that port 11211
//!   (`CONF_DEFAULT_KETAMA_PORT`, libmemcached compatibility) hashes `"host"` alone.
//! - `src/nc_server.c` `server_pool_idx` / `server_pool_hash`: a pool with one server always
//!   picks it, and an empty key hashes to 0.

#[cfg(test)]
use super::hash::fnv1a_64_twemproxy;
use super::hash::ketama_md5_points;
use super::hashkit::key_hash;
use crate::config::{HostConfig, KeyHash};

const KETAMA_POINTS_PER_SERVER: u32 = 160;
const KETAMA_POINTS_PER_HASH: u32 = 4;
const KETAMA_MAX_HOSTLEN: usize = 86;
const CONF_DEFAULT_KETAMA_PORT: u16 = 11211;

/// Bits of a hash that index [`Ketama::buckets`].
const BUCKET_BITS: u32 = 10;

/// The sorted continuum: `values[i]` is a point, `hosts[i]` the host index that owns it.
#[derive(Debug, Clone)]
pub(super) struct Ketama {
    values: Vec<u32>,
    hosts: Vec<u32>,
    nhosts: usize,
    /// `buckets[b]` = index of the first point `>= b << (32 - BUCKET_BITS)`, for `b` in
    /// `0..=2^BUCKET_BITS`: a hash's top bits narrow the search to the few points of its bucket,
    /// instead of a binary search over the whole continuum on every request.
    buckets: Vec<u32>,
    /// The key hash (twemproxy `hash:`); the continuum's points are MD5 whatever it is.
    hash: KeyHash,
}

/// The string twemproxy hashes for a server (see module docs).
pub(super) fn server_name(host: &HostConfig) -> &str {
    if let Some(name) = &host.name {
        return name;
    }
    let text = host.address_text.as_str();
    match text.rsplit_once(':') {
        Some((addr, port)) if port.parse::<u16>() == Ok(CONF_DEFAULT_KETAMA_PORT) => addr,
        _ => text,
    }
}

/// twemproxy's points for one server of `weight` out of `total_weight` among `nlive` servers,
/// with its float arithmetic: `pct` and the product are `float`; the `+ 1e-10` is a double add
/// whose result `floorf` takes back as a float.
pub(super) fn points_per_server(weight: u32, total_weight: u32, nlive: u32) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let t = pct * KETAMA_POINTS_PER_SERVER as f32 / 4.0 * nlive as f32;
    let t = (f64::from(t) + 0.000_000_000_1) as f32;
    (t.floor() as u32) * 4
}

impl Ketama {
    pub(super) fn new(hosts: &[HostConfig], weights: &[u32], hash: KeyHash) -> Ketama {
        let nlive = weights.iter().filter(|&&w| w > 0).count() as u32;
        let total_weight = weights
            .iter()
            .map(|&w| u64::from(w))
            .sum::<u64>()
            .min(u64::from(u32::MAX)) as u32;
        let mut points: Vec<(u32, u32)> = Vec::new();
        let mut buf = Vec::with_capacity(KETAMA_MAX_HOSTLEN + 16);
        for (idx, (host, &weight)) in hosts.iter().zip(weights.iter()).enumerate() {
            if weight == 0 {
                continue;
            }
            let name = server_name(host).as_bytes();
            let pps = points_per_server(weight, total_weight, nlive);
            for pointer_index in 1..=pps / KETAMA_POINTS_PER_HASH {
                buf.clear();
                buf.extend_from_slice(name);
                buf.push(b'-');
                buf.extend_from_slice((pointer_index - 1).to_string().as_bytes());
                // snprintf into char host[86] = "": at most 85 bytes are kept, the rest of the
                // buffer is zero, and the returned (untruncated) length is what gets hashed.
                if buf.len() >= KETAMA_MAX_HOSTLEN {
                    let n = buf.len();
                    buf.truncate(KETAMA_MAX_HOSTLEN - 1);
                    buf.resize(n, 0);
                }
                for value in ketama_md5_points(&buf) {
                    points.push((value, idx as u32));
                }
            }
        }
        // Stable: equal values keep server/point order (glibc qsort is a merge sort).
        points.sort_by_key(|&(v, _)| v);
        let values: Vec<u32> = points.iter().map(|p| p.0).collect();
        let buckets = (0..=1u64 << BUCKET_BITS)
            .map(|b| {
                let start = b << (32 - BUCKET_BITS);
                values.partition_point(|&v| u64::from(v) < start) as u32
            })
            .collect();
        Ketama {
            values,
            hosts: points.iter().map(|p| p.1).collect(),
            nhosts: hosts.len(),
            buckets,
            hash,
        }
    }

    /// Number of points on the continuum.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Host owning the lowest continuum point.
    #[cfg(test)]
    pub(super) fn first_host(&self) -> usize {
        self.hosts[0] as usize
    }

    #[inline]
    pub(super) fn pick(&self, key: &[u8]) -> usize {
        if self.nhosts == 1 || self.values.is_empty() {
            return 0;
        }
        let hash = if key.is_empty() {
            0
        } else {
            key_hash(self.hash, key)
        };
        self.pick_hash(hash)
    }

    /// The host of the first point `>= hash`, wrapping to the first point (ketama_dispatch).
    #[inline]
    fn pick_hash(&self, hash: u32) -> usize {
        let b = (hash >> (32 - BUCKET_BITS)) as usize;
        let (lo, hi) = match (self.buckets.get(b), self.buckets.get(b + 1)) {
            (Some(&lo), Some(&hi)) => (lo as usize, hi as usize),
            _ => (0, self.values.len()),
        };
        let i = lo
            + self
                .values
                .get(lo..hi)
                .map_or(0, |s| s.partition_point(|&v| v < hash));
        // Past the last point the continuum wraps to the first (ketama_dispatch).
        let i = if i >= self.values.len() { 0 } else { i };
        self.hosts.get(i).map_or(0, |&h| h as usize)
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    /// `n` hosts with distinct addresses; every 7th on port 11211 (hashed by host alone).
    fn hosts(n: u16) -> Vec<HostConfig> {
        (0..n)
            .map(|i| {
                let port = if i % 7 == 0 { 11211 } else { 6379 + i };
                let text = format!("10.{}.{}.1:{port}", i / 256, i % 256);
                crate::config::HostConfig {
                    address: text.parse().expect("addr"),
                    address_text: text,
                    weight: 1,
                    name: None,
                }
            })
            .collect()
    }

    /// The bucketed search must pick exactly what a binary search over the whole continuum
    /// (ketama_dispatch) picks: random hashes, every point ±1, every bucket edge ±1, the
    /// wrap-around, and keys through `pick`.
    fn check(k: &Ketama, seed: u64) {
        let full = |hash: u32| {
            let i = k.values.partition_point(|&v| v < hash);
            let i = if i == k.values.len() { 0 } else { i };
            k.hosts.get(i).map_or(0, |&h| h as usize)
        };
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut probes: Vec<u32> = (0..20_000).map(|_| rng.u32(..)).collect();
        probes.extend(
            k.values
                .iter()
                .flat_map(|&v| [v.wrapping_sub(1), v, v.wrapping_add(1)]),
        );
        for b in 0..=(1u64 << BUCKET_BITS) {
            let s = (b << (32 - BUCKET_BITS)) as u32;
            probes.extend([s, s.wrapping_sub(1), s.wrapping_add(1)]);
        }
        probes.extend([0, 1, u32::MAX, u32::MAX - 1]);
        for h in probes {
            assert_eq!(k.pick_hash(h), full(h), "hash={h}");
        }
        for i in 0..5000u32 {
            let key = format!("key:{i}");
            let hash = fnv1a_64_twemproxy(key.as_bytes());
            if k.nhosts != 1 && !k.values.is_empty() {
                assert_eq!(k.pick(key.as_bytes()), full(hash));
            }
        }
    }

    #[test]
    fn bucketed_pick_equals_full_binary_search() {
        let mut rng = fastrand::Rng::with_seed(99);
        for n in [1u16, 2, 5, 33, 200, 1000] {
            let mut hs = hosts(n);
            for (i, h) in hs.iter_mut().enumerate() {
                if i % 3 == 0 {
                    h.name = Some(format!(
                        "server-{i}-with-a-fairly-long-name-{}",
                        "z".repeat(i % 90)
                    ));
                }
            }
            for trial in 0..4 {
                let weights: Vec<u32> = (0..hs.len())
                    .map(|i| match trial {
                        0 => 1,
                        1 => rng.u32(0..5),
                        2 => {
                            if i == 0 {
                                1
                            } else {
                                0
                            }
                        }
                        _ => rng.u32(1..1000),
                    })
                    .collect();
                let k = Ketama::new(&hs, &weights, KeyHash::Fnv1a64);
                check(&k, u64::from(n) * 10 + trial);
                // chosen host must have non-zero weight
                if n > 1 && !k.values.is_empty() {
                    for i in 0..2000u32 {
                        let h = k.pick(format!("k{i}").as_bytes());
                        assert!(weights[h] > 0, "picked zero-weight host {h}");
                    }
                }
            }
            // all zero weights
            let k = Ketama::new(&hs, &vec![0; hs.len()], KeyHash::Fnv1a64);
            assert!(k.values.is_empty());
            assert_eq!(k.pick(b"x"), 0);
            assert_eq!(k.pick_hash(12345), 0);
        }
    }
}

//! twemproxy 0.5.0 ketama (`distribution: ketama`, `hash: fnv1a_64`), bit-for-bit.
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

use super::hash::{fnv1a_64_twemproxy, ketama_md5_points};
use crate::config::HostConfig;

const KETAMA_POINTS_PER_SERVER: u32 = 160;
const KETAMA_POINTS_PER_HASH: u32 = 4;
const KETAMA_MAX_HOSTLEN: usize = 86;
const CONF_DEFAULT_KETAMA_PORT: u16 = 11211;

/// The sorted continuum: `values[i]` is a point, `hosts[i]` the host index that owns it.
#[derive(Debug, Clone)]
pub(super) struct Ketama {
    values: Vec<u32>,
    hosts: Vec<u32>,
    nhosts: usize,
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
    pub(super) fn new(hosts: &[HostConfig], weights: &[u32]) -> Ketama {
        let nlive = weights.iter().filter(|&&w| w > 0).count() as u32;
        let total_weight = weights
            .iter()
            .map(|&w| u64::from(w))
            .sum::<u64>()
            .min(u64::from(u32::MAX)) as u32;
        let mut points: Vec<(u32, u32)> = Vec::new();
        let mut buf = Vec::with_capacity(KETAMA_MAX_HOSTLEN + 16);
        for (idx, host) in hosts.iter().enumerate() {
            let weight = weights[idx];
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
        Ketama {
            values: points.iter().map(|p| p.0).collect(),
            hosts: points.iter().map(|p| p.1).collect(),
            nhosts: hosts.len(),
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
            fnv1a_64_twemproxy(key)
        };
        let i = self.values.partition_point(|&v| v < hash);
        let i = if i == self.values.len() { 0 } else { i };
        self.hosts[i] as usize
    }
}

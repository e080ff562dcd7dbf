//! Zone discovery (Envoy `RedisClusterConfig.enable_zone_discovery`): after each topology
//! refresh the discovery thread asks every node of the map `INFO server` and reads its
//! `availability_zone:` field (Valkey 8+, set with `--availability-zone`; Redis has no such
//! field). A node that does not answer, answers with an error, or has no (or an empty) field
//! has no known zone, which the zone read policies treat as "not local".

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::topology::SlotMap;
use crate::upstream::ClusterSlotsClient;

/// The `availability_zone` of an `INFO` reply (a RESP bulk string of `field:value` lines), if
/// it has a non-empty one. An error reply or anything else yields `None`.
pub(super) fn availability_zone(reply: &[u8]) -> Option<String> {
    if reply.first() == Some(&b'-') {
        return None;
    }
    reply
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"availability_zone:"))
        .map(|v| String::from_utf8_lossy(v).trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The zone of every node of `map` (primaries and replicas) that has one, asking each node in
/// turn; each exchange is bounded by the client's timeout (`cluster_refresh_timeout`). Stops
/// early, with what it has, when `stop` is set. Also returns the nodes that did not answer.
pub(super) fn discover(
    client: &ClusterSlotsClient,
    map: &SlotMap,
    stop: &AtomicBool,
) -> (HashMap<SocketAddr, String>, Vec<(SocketAddr, String)>) {
    let mut zones = HashMap::new();
    let mut failed = Vec::new();
    let nodes = map
        .shards
        .iter()
        .flat_map(|s| std::iter::once(s.primary).chain(s.replicas.iter().copied()));
    for node in nodes {
        if stop.load(Ordering::Acquire) {
            break;
        }
        if zones.contains_key(&node) {
            continue;
        }
        match client.fetch(node) {
            Ok(reply) => {
                if let Some(z) = availability_zone(&reply) {
                    zones.insert(node, z);
                }
            }
            Err(e) => failed.push((node, e.to_string())),
        }
    }
    (zones, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_zone_is_read_from_the_server_section() {
        let reply = b"$80\r\n# Server\r\nredis_version:7.2.4\r\navailability_zone:us-east-1a\r\n\
                      tcp_port:7000\r\n\r\n";
        assert_eq!(availability_zone(reply).as_deref(), Some("us-east-1a"));
        // Valkey's default is the empty string: no zone.
        assert_eq!(
            availability_zone(b"$40\r\n# Server\r\navailability_zone:\r\n\r\n"),
            None
        );
        // Redis: no field at all.
        assert_eq!(
            availability_zone(b"$30\r\n# Server\r\nredis_version:7.0.15\r\n\r\n"),
            None
        );
        assert_eq!(
            availability_zone(b"-NOAUTH Authentication required.\r\n"),
            None
        );
    }
}

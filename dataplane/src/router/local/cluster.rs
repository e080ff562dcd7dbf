//! `CLUSTER INFO|SLOTS|SHARDS|NODES|MYID|KEYSLOT` answered by the proxy: Respite presents itself
//! as a one-node Redis Cluster that owns all 16 384 slots at the address the client connected to,
//! so a client that insists on cluster mode sends everything to Respite, which does the real
//! routing. Reply shapes are Redis 7.0's (`cluster.c`: `clusterReplyShards`, `clusterGenNodeDescription`).

use std::net::SocketAddr;

use crate::cluster::{CLUSTER_SLOTS, key_slot, xxh64};
use crate::resp::encode;

/// The 40-hex-digit node id Respite reports for `addr` (stable for an address, so clients that
/// cache node ids see the same node across reconnects).
pub fn node_id(addr: SocketAddr) -> String {
    let text = addr.to_string();
    let a = xxh64(text.as_bytes(), 0);
    let b = xxh64(text.as_bytes(), 1);
    format!("{a:016x}{b:016x}{:08x}", (a ^ b) as u32)
}

/// Appends the reply to `CLUSTER <sub> …` (`sub` is the table row name, `cluster|info` …);
/// `addr` is the listener address the client reached; `resp3` picks map replies for SHARDS.
pub fn answer<'a>(
    sub: &str,
    arg: impl Fn(usize) -> &'a [u8],
    addr: SocketAddr,
    resp3: bool,
    out: &mut Vec<u8>,
) {
    let last = i64::from(CLUSTER_SLOTS) - 1;
    let id = node_id(addr);
    let ip = addr.ip().to_string();
    let port = i64::from(addr.port());
    match sub {
        "cluster|keyslot" => encode::integer(out, i64::from(key_slot(arg(2)))),
        "cluster|myid" => encode::bulk(out, id.as_bytes()),
        "cluster|info" => {
            let text = format!(
                "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:{n}\r\n\
                 cluster_slots_ok:{n}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n\
                 cluster_known_nodes:1\r\ncluster_size:1\r\ncluster_current_epoch:1\r\n\
                 cluster_my_epoch:1\r\ncluster_stats_messages_sent:0\r\n\
                 cluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
                n = CLUSTER_SLOTS
            );
            encode::bulk(out, text.as_bytes());
        }
        "cluster|nodes" => {
            let line = format!(
                "{id} {ip}:{port}@{cport} myself,master - 0 0 1 connected 0-{last}\n",
                cport = port + 10000
            );
            encode::bulk(out, line.as_bytes());
        }
        "cluster|slots" => {
            encode::array_header(out, 1);
            encode::array_header(out, 3);
            encode::integer(out, 0);
            encode::integer(out, last);
            encode::array_header(out, 3);
            encode::bulk(out, ip.as_bytes());
            encode::integer(out, port);
            encode::bulk(out, id.as_bytes());
        }
        "cluster|shards" => {
            let map = |out: &mut Vec<u8>, n: usize| {
                if resp3 {
                    out.push(b'%');
                    out.extend_from_slice(n.to_string().as_bytes());
                    out.extend_from_slice(b"\r\n");
                } else {
                    encode::array_header(out, 2 * n);
                }
            };
            encode::array_header(out, 1);
            map(out, 2);
            encode::bulk(out, b"slots");
            encode::array_header(out, 2);
            encode::integer(out, 0);
            encode::integer(out, last);
            encode::bulk(out, b"nodes");
            encode::array_header(out, 1);
            map(out, 7);
            for (k, v) in [("id", id.as_str()), ("ip", &ip), ("endpoint", &ip)] {
                encode::bulk(out, k.as_bytes());
                encode::bulk(out, v.as_bytes());
            }
            encode::bulk(out, b"port");
            encode::integer(out, port);
            for (k, v) in [("role", "master"), ("health", "online")] {
                encode::bulk(out, k.as_bytes());
                encode::bulk(out, v.as_bytes());
            }
            encode::bulk(out, b"replication-offset");
            encode::integer(out, 0);
        }
        other => {
            let text = format!("ERR unknown subcommand '{other}'");
            encode::error(out, text.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::ReplyScanner;

    fn reply(sub: &str, key: &[u8], resp3: bool) -> Vec<u8> {
        let addr: SocketAddr = "127.0.0.1:7000".parse().expect("test value");
        let mut out = Vec::new();
        answer(
            sub,
            |i| if i == 2 { key } else { b"" },
            addr,
            resp3,
            &mut out,
        );
        let len = ReplyScanner::default().scan(&out).expect("test value");
        assert_eq!(len, Some(out.len()), "{sub}: one complete reply");
        out
    }

    #[test]
    fn one_node_owning_every_slot() {
        assert_eq!(reply("cluster|keyslot", b"foo", false), b":12182\r\n");
        assert_eq!(
            reply("cluster|keyslot", b"{user1}.a", false),
            reply("cluster|keyslot", b"user1", false)
        );
        let id = node_id("127.0.0.1:7000".parse().expect("test value"));
        assert_eq!(id.len(), 40);
        let slots = reply("cluster|slots", b"", false);
        let want = format!(
            "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n{id}\r\n"
        );
        assert_eq!(String::from_utf8(slots).expect("test value"), want);
        let nodes = String::from_utf8(reply("cluster|nodes", b"", false)).expect("test value");
        assert!(nodes.contains(&format!(
            "{id} 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-16383\n"
        )));
        let info = String::from_utf8(reply("cluster|info", b"", false)).expect("test value");
        assert!(info.contains("cluster_state:ok\r\n") && info.contains("cluster_size:1\r\n"));
        let shards = String::from_utf8(reply("cluster|shards", b"", false)).expect("test value");
        assert!(shards.starts_with("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"));
        let shards3 = String::from_utf8(reply("cluster|shards", b"", true)).expect("test value");
        assert!(shards3.starts_with("*1\r\n%2\r\n"));
        assert_eq!(
            reply("cluster|myid", b"", false),
            format!("$40\r\n{id}\r\n").into_bytes()
        );
    }
}

//! Cluster-aware load (`run --cluster SEED`): what a cluster-aware client does. The slot map is
//! fetched once with `CLUSTER SLOTS` from the seed; every client connection of the closed loop
//! keeps one connection per primary, and each pipeline batch is split by the primary owning each
//! request's key slot ([`respite::cluster::key_slot`]): one write per node, and the batch
//! completes when every node's replies are in (read concurrently, so each reply's time is when
//! its own node's read completed). No redirects are followed: the slot map must stay put during
//! the run (a MOVED reply counts as an error reply).
//!
//! [`Batch`] is also what the single-target loop uses, with one node and no slot map.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::task::Poll;

use respite::cluster::key_slot;
use respite::cluster::topology::{SlotMap, UNASSIGNED};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::load::{Conn, connect, roundtrip};
use crate::resp::ReplyKind;

/// The primaries of a Redis Cluster and which one owns each slot.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Every slot assigned (checked by [`Topology::discover`]); shard `i` is primary `i`.
    map: SlotMap,
}

impl Topology {
    /// Fetches `CLUSTER SLOTS` from `seed` (after `AUTH` if given) and builds the slot map.
    ///
    /// Errors: connection failures, an error reply (e.g. cluster support disabled), a reply not
    /// shaped like CLUSTER SLOTS, or a slot that no primary serves.
    pub fn discover(seed: SocketAddr, auth: Option<&str>) -> io::Result<Topology> {
        let mut s = connect(seed, auth)?;
        let reply = roundtrip(&mut s, &crate::resp::command(&[b"CLUSTER", b"SLOTS"]))
            .map_err(|e| io::Error::new(e.kind(), format!("CLUSTER SLOTS from {seed}: {e}")))?;
        let map = parse_cluster_slots(&reply, seed).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("CLUSTER SLOTS from {seed}: {e}"),
            )
        })?;
        Ok(Topology { map })
    }

    /// The primaries' addresses; connection `i` of a client goes to primary `i`.
    pub fn primaries(&self) -> Vec<SocketAddr> {
        self.map.shards.iter().map(|s| s.primary).collect()
    }

    /// Index of the primary serving `key` (primary 0 for keyless commands such as PING).
    #[inline]
    pub fn node(&self, key: Option<&[u8]>) -> usize {
        key.map_or(0, |k| usize::from(self.map.slots[usize::from(key_slot(k))]))
    }
}

/// Parses `CLUSTER SLOTS` with the data plane's own parser
/// ([`respite::cluster::discovery::parse_cluster_slots`]) and requires every slot to be served.
pub fn parse_cluster_slots(reply: &[u8], queried: SocketAddr) -> Result<SlotMap, String> {
    let map = respite::cluster::discovery::parse_cluster_slots(reply, queried)?;
    if let Some(s) = map.slots.iter().position(|&s| s == UNASSIGNED) {
        return Err(format!(
            "slot {s} is served by no node (is the cluster fully set up?)"
        ));
    }
    Ok(map)
}

/// One pipeline batch split by node: a write buffer and a request count per node.
pub(crate) struct Batch {
    bufs: Vec<Vec<u8>>,
    counts: Vec<u64>,
    /// Where a routed request is encoded before it is copied to its node's buffer.
    scratch: Vec<u8>,
}

impl Batch {
    /// An empty batch over `nodes` connections.
    pub(crate) fn new(nodes: usize, capacity: usize) -> Batch {
        Batch {
            bufs: (0..nodes).map(|_| Vec::with_capacity(capacity)).collect(),
            counts: vec![0; nodes],
            scratch: Vec::new(),
        }
    }

    /// Empties every node's buffer and count for the next batch.
    pub(crate) fn clear(&mut self) {
        self.bufs.iter_mut().for_each(Vec::clear);
        self.counts.fill(0);
    }

    /// Appends one request written by `encode` (which returns the range of its first key, if
    /// any): to node 0 without a topology, else to the primary of the key's slot.
    #[inline]
    pub(crate) fn push(
        &mut self,
        topology: Option<&Topology>,
        encode: impl FnOnce(&mut Vec<u8>) -> Option<Range<usize>>,
    ) {
        let node = match topology {
            None => {
                encode(&mut self.bufs[0]);
                0
            }
            Some(t) => {
                self.scratch.clear();
                let key = encode(&mut self.scratch);
                let node = t.node(key.map(|k| &self.scratch[k]));
                self.bufs[node].extend_from_slice(&self.scratch);
                node
            }
        };
        self.counts[node] += 1;
    }

    /// Writes each node's share of the batch to its connection (`conns[i]` is node `i`).
    pub(crate) async fn send<S: AsyncWrite + Unpin>(
        &self,
        conns: &mut [Conn<S>],
    ) -> io::Result<()> {
        for ((conn, buf), &n) in conns.iter_mut().zip(&self.bufs).zip(&self.counts) {
            if n > 0 {
                conn.stream.write_all(buf).await?;
                // A TLS stream may keep records the socket did not take yet (a no-op on TCP).
                conn.stream.flush().await?;
            }
        }
        Ok(())
    }

    /// Reads every reply of the batch, calling `on_reply(conn, offset, kind)` for each, the
    /// nodes read concurrently.
    pub(crate) async fn replies<S: AsyncRead + Unpin>(
        &self,
        conns: &mut [Conn<S>],
        on_reply: &dyn Fn(&Conn<S>, usize, ReplyKind),
    ) -> io::Result<()> {
        if self.counts.iter().filter(|&&n| n > 0).count() <= 1 {
            for (conn, &n) in conns.iter_mut().zip(&self.counts) {
                drain(conn, n, on_reply).await?;
            }
            return Ok(());
        }
        type Pending<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + 'a>>;
        let mut pending: Vec<Pending> = conns
            .iter_mut()
            .zip(&self.counts)
            .filter(|(_, n)| **n > 0)
            .map(|(conn, &n)| Box::pin(drain(conn, n, on_reply)) as Pending)
            .collect();
        std::future::poll_fn(|cx| {
            let mut i = 0;
            while i < pending.len() {
                match pending[i].as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => drop(pending.swap_remove(i)),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => i += 1,
                }
            }
            if pending.is_empty() {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// Reads `n` replies from `conn`.
async fn drain<S: AsyncRead + Unpin>(
    conn: &mut Conn<S>,
    n: u64,
    on_reply: &dyn Fn(&Conn<S>, usize, ReplyKind),
) -> io::Result<()> {
    for _ in 0..n {
        let (at, kind) = conn.next_reply().await?;
        on_reply(conn, at, kind);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ip: &str, port: u16) -> String {
        format!("*3\r\n${}\r\n{ip}\r\n:{port}\r\n$2\r\nid\r\n", ip.len())
    }

    #[test]
    fn parses_cluster_slots() {
        let seed: SocketAddr = "10.0.0.9:7000".parse().unwrap();
        let reply = format!(
            "*3\r\n*4\r\n:0\r\n:5460\r\n{}{}*3\r\n:5461\r\n:10922\r\n{}*4\r\n:10923\r\n:16383\r\n{}{}",
            node("127.0.0.1", 7001),
            node("127.0.0.1", 7004),
            node("", 7002),
            node("127.0.0.1", 7003),
            node("?", 7006),
        );
        let map = parse_cluster_slots(reply.as_bytes(), seed).unwrap();
        let t = Topology { map };
        let p: Vec<String> = t.primaries().iter().map(|a| a.to_string()).collect();
        assert_eq!(p, ["127.0.0.1:7001", "10.0.0.9:7002", "127.0.0.1:7003"]);
        assert_eq!(t.map.shards[2].replicas[0].to_string(), "10.0.0.9:7006");
        // key_slot("foo") = 12182, key_slot("bar") = 5061.
        assert_eq!(t.node(Some(b"foo")), 2);
        assert_eq!(t.node(Some(b"bar")), 0);
        assert_eq!(t.node(Some(b"{bar}x")), 0);
        assert_eq!(t.node(None), 0);
    }

    #[test]
    fn rejects_bad_replies() {
        let seed: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let partial = format!("*1\r\n*3\r\n:0\r\n:100\r\n{}", node("127.0.0.1", 1));
        for bad in [
            "-ERR This instance has cluster support disabled\r\n".to_string(),
            ":1\r\n".into(),
            "*1\r\n:1\r\n".into(),
            "*1\r\n*3\r\n:5\r\n:2\r\n*0\r\n".into(),
            format!("*1\r\n*3\r\n:0\r\n:16384\r\n{}", node("127.0.0.1", 1)),
            format!("*1\r\n*3\r\n:0\r\n:16383\r\n{}", node("not-an-ip", 1)),
            format!(
                "*1\r\n*3\r\n:0\r\n:16383\r\n{}",
                node("127.0.0.1", 0).replace(":0", ":70000")
            ),
            "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0".into(),
            partial,
        ] {
            assert!(
                parse_cluster_slots(bad.as_bytes(), seed).is_err(),
                "{bad:?}"
            );
        }
    }
}

//! A blocking one-shot topology client: connect, `AUTH` if configured, `CLUSTER SLOTS`, close.
//! Runs on the discovery thread only (std sockets with timeouts, never on a worker's ring).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::topology::SlotMap;
use crate::config::ClusterConfig;
use crate::resp::{ReplyScanner, encode, is_error};

/// Longest read wait before the stop flag is looked at again, so that dropping the
/// `Discovery` handle ends a thread that is waiting for a slow node within about a tick.
const READ_SLICE: Duration = Duration::from_millis(50);

/// Largest reply accepted: a `CLUSTER SLOTS` reply of a 1000-node cluster with every slot in
/// its own range is still far below this; a node sending more is broken.
const MAX_REPLY: usize = 64 * 1024 * 1024;

/// Asks nodes of one cluster for their slot map.
#[derive(Debug)]
pub(super) struct Client {
    connect_timeout: Duration,
    timeout: Duration,
    /// `AUTH …` (if configured) and `CLUSTER SLOTS`, pipelined in one write.
    request: Vec<u8>,
    auth: bool,
    stop: Arc<AtomicBool>,
}

impl Client {
    /// Timeouts from `cluster`: the whole exchange is bounded by `cluster_refresh_timeout`, the
    /// connect by `connect_timeout` too. `stop` aborts a pending read.
    pub fn new(cluster: &ClusterConfig, stop: Arc<AtomicBool>) -> Client {
        let timeout = cluster.redis_cluster.cluster_refresh_timeout;
        let mut request = Vec::new();
        let auth = cluster.auth_password.is_some();
        if let Some(pass) = &cluster.auth_password {
            match &cluster.auth_username {
                Some(user) => encode::command(
                    &mut request,
                    [b"AUTH".as_slice(), user.as_bytes(), pass.as_bytes()].into_iter(),
                ),
                None => encode::command(
                    &mut request,
                    [b"AUTH".as_slice(), pass.as_bytes()].into_iter(),
                ),
            }
        }
        encode::command(&mut request, [b"CLUSTER".as_slice(), b"SLOTS"].into_iter());
        Client {
            connect_timeout: cluster.connect_timeout.min(timeout),
            timeout,
            request,
            auth,
            stop,
        }
    }

    /// `CLUSTER SLOTS` of `node`, parsed. Errors say which step failed (connect, write, read,
    /// AUTH, parse).
    pub fn fetch(&self, node: SocketAddr) -> Result<SlotMap, String> {
        // A timeout too long to represent (not rejected by config validation) is no deadline.
        let deadline = Instant::now().checked_add(self.timeout);
        let mut stream = TcpStream::connect_timeout(&node, self.connect_timeout)
            .map_err(|e| format!("connect: {e}"))?;
        // Small request, one reply: no point waiting for Nagle.
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(|e| format!("socket: {e}"))?;
        stream
            .write_all(&self.request)
            .map_err(|e| format!("write: {e}"))?;
        let mut reader = Reader::default();
        if self.auth {
            let reply = reader.next(&mut stream, deadline, &self.stop)?;
            if is_error(&reply) {
                let text = String::from_utf8_lossy(&reply);
                return Err(format!("AUTH failed: {}", text.trim_end()));
            }
        }
        let reply = reader.next(&mut stream, deadline, &self.stop)?;
        super::parse_cluster_slots(&reply, node)
    }
}

/// Reads whole replies off a blocking stream.
#[derive(Debug, Default)]
struct Reader {
    buf: Vec<u8>,
    scanner: ReplyScanner,
}

impl Reader {
    /// The next complete reply, or an error when `deadline` (if any) passes, `stop` is set, the peer
    /// closes or sends something that is not RESP.
    fn next(
        &mut self,
        stream: &mut TcpStream,
        deadline: Option<Instant>,
        stop: &AtomicBool,
    ) -> Result<Vec<u8>, String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let scanned = self
                .scanner
                .scan(&self.buf)
                .map_err(|e| format!("protocol error: {e}"))?;
            if let Some(n) = scanned {
                return Ok(self.buf.drain(..n).collect());
            }
            if self.buf.len() > MAX_REPLY {
                return Err(format!("reply larger than {MAX_REPLY} bytes"));
            }
            if stop.load(Ordering::Acquire) {
                return Err("stopped".into());
            }
            let left = deadline.map_or(READ_SLICE, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Err("timed out".into());
            }
            stream
                .set_read_timeout(Some(left.min(READ_SLICE)))
                .map_err(|e| format!("socket: {e}"))?;
            match stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self
                    .buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

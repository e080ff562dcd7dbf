//! Proxy memory per idle client connection: RSS before and after opening N connections.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde::Serialize;

use super::sysstat::rss_kib;

/// RSS of one proxy around opening `connections` idle clients.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryResult {
    pub target: String,
    pub connections: usize,
    /// VmRSS before connecting, KiB.
    pub rss_before_kib: u64,
    /// VmRSS with all connections open and idle for 1 s, KiB.
    pub rss_after_kib: u64,
    /// (after − before) / connections, KiB.
    pub kib_per_connection: f64,
}

/// Opens `n` connections to `port`, has each answer one PING, waits 1 s idle, measures `pid`.
pub fn probe(target: &str, port: u16, pid: u32, n: usize) -> Result<MemoryResult, String> {
    let before = rss_kib(pid)?;
    let conns = open_idle(target, port, n)?;
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid)?;
    drop(conns);
    Ok(MemoryResult {
        target: target.to_string(),
        connections: n,
        rss_before_kib: before,
        rss_after_kib: after,
        kib_per_connection: after.saturating_sub(before) as f64 / n.max(1) as f64,
    })
}

/// Opens `n` connections to `port` (`target` names it in errors), each answering one PING
/// before the next is opened; they have a 5 s read timeout.
pub fn open_idle(target: &str, port: u16, n: usize) -> Result<Vec<TcpStream>, String> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("{target}: connection {i}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| format!("{target}: {e}"))?;
        let mut buf = [0u8; 7];
        s.write_all(b"*1\r\n$4\r\nPING\r\n")
            .and_then(|()| s.read_exact(&mut buf))
            .map_err(|e| format!("{target}: PING on connection {i}: {e}"))?;
        if &buf != b"+PONG\r\n" {
            return Err(format!(
                "{target}: unexpected PING reply {:?}",
                String::from_utf8_lossy(&buf)
            ));
        }
        conns.push(s);
    }
    Ok(conns)
}

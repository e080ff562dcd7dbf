//! The large-request phase: a few clients each SET one very large value at the same time. The
//! value is streamed from one 1 MiB buffer, so the load generator's own memory stays small while
//! Respite and Redis carry the whole request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One large SET.
#[derive(Debug, Clone, Serialize)]
pub struct LargeSet {
    pub key: String,
    pub mib: u64,
    /// From connect to reply.
    pub elapsed_ms: u64,
    /// The reply's first line (`+OK`, or the error), or what went wrong on the connection.
    pub outcome: String,
    pub ok: bool,
}

/// The key of client `i`.
pub fn key(i: usize) -> String {
    format!("attack:large:{i}")
}

/// Runs `clients` concurrent SETs of `mib` MiB each to `addr`.
pub fn run(addr: SocketAddr, clients: usize, mib: u64) -> Vec<LargeSet> {
    let threads: Vec<_> = (0..clients)
        .map(|i| std::thread::spawn(move || one(addr, &key(i), mib)))
        .collect();
    threads
        .into_iter()
        .zip(0..)
        .map(|(t, i)| {
            t.join().unwrap_or_else(|_| LargeSet {
                key: key(i),
                mib,
                elapsed_ms: 0,
                outcome: "client thread panicked".into(),
                ok: false,
            })
        })
        .collect()
}

fn one(addr: SocketAddr, key: &str, mib: u64) -> LargeSet {
    let start = Instant::now();
    let outcome = send(addr, key, mib);
    let (outcome, ok) = match outcome {
        Ok(line) => {
            let ok = line == "+OK";
            (line, ok)
        }
        Err(e) => (e, false),
    };
    LargeSet {
        key: key.to_string(),
        mib,
        elapsed_ms: start.elapsed().as_millis() as u64,
        outcome,
        ok,
    }
}

fn send(addr: SocketAddr, key: &str, mib: u64) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(300)))
        .map_err(|e| e.to_string())?;
    let len = mib << 20;
    let header = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${len}\r\n", key.len());
    s.write_all(header.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let chunk = vec![b'L'; 1 << 20];
    for _ in 0..mib {
        s.write_all(&chunk).map_err(|e| format!("write: {e}"))?;
    }
    s.write_all(b"\r\n").map_err(|e| format!("write: {e}"))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") && line.len() < 4096 {
        match s.read(&mut b) {
            Ok(0) => return Err("connection closed before the reply".into()),
            Ok(_) => line.push(b[0]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    Ok(String::from_utf8_lossy(line.strip_suffix(b"\r\n").unwrap_or(&line)).into_owned())
}

//! Helpers shared by the integration test binaries (each includes this with `mod common;`).

#![allow(dead_code)]

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use respite::cluster::{LoadBalancer, hashtag};
use respite::config::{HostConfig, LbPolicy};
use respite_tests::{RawClient, RedisServer};

/// A `HostConfig` as respite builds it for a `hosts = ["127.0.0.1:PORT"]` entry.
pub fn host(addr: &str) -> HostConfig {
    HostConfig {
        address: addr.parse().unwrap(),
        address_text: addr.to_string(),
        weight: 1,
        name: None,
    }
}

/// Respite's placement over `addrs` (ketama, hash tags on): key → index into `addrs`.
pub struct Placement(LoadBalancer);

impl Placement {
    pub fn new(addrs: &[String]) -> Placement {
        let hosts: Vec<HostConfig> = addrs.iter().map(|a| host(a)).collect();
        Placement(LoadBalancer::new(LbPolicy::Ketama, &hosts))
    }

    pub fn owner(&self, key: &[u8]) -> usize {
        self.0.pick(hashtag(key))
    }
}

/// Addresses of `servers`.
pub fn addrs(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.addr()).collect()
}

/// Starts `n` redis-servers.
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// RESP bulk string reply.
pub fn bulk(v: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

/// RESP integer reply.
pub fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

/// RESP nil bulk reply.
pub const NIL: &[u8] = b"$-1\r\n";
/// RESP `+OK`.
pub const OK: &[u8] = b"+OK\r\n";

/// Printable form of reply bytes for assertion messages.
pub fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

/// Sends `commands` in pipelined batches of `batch` and returns every reply.
pub fn pipelined(client: &mut RawClient, commands: &[Vec<Vec<u8>>], batch: usize) -> Vec<Vec<u8>> {
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(batch) {
        replies.extend(client.pipeline(chunk));
    }
    replies
}

/// `args` as owned byte vectors.
pub fn cmd(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// Splits a buffer of complete RESP values into them; the remainder (an incomplete value or
/// garbage) is returned second.
pub fn split_replies(mut buf: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut out = Vec::new();
    while let Some(n) = respite_tests::resp_len(buf) {
        out.push(buf[..n].to_vec());
        buf = &buf[n..];
    }
    (out, buf.to_vec())
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes; returns the last result.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `EXISTS key` on a backend directly: 0 or 1.
pub fn exists_on(server: &mut RawClient, key: &[u8]) -> bool {
    match server.cmd(&[b"EXISTS", key]).as_slice() {
        b":1\r\n" => true,
        b":0\r\n" => false,
        other => panic!("EXISTS answered {}", show(other)),
    }
}

/// Sends a signal with kill(1) to `pid`.
pub fn kill_sig(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Keeps a process SIGSTOPped; SIGCONTs it on drop (also when a test panics).
pub struct Stopped(pub u32);

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        kill_sig("STOP", pid);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.0.to_string())
            .status();
    }
}

/// Whether something accepts on 127.0.0.1:port.
pub fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

//! Which addresses each DNS name of a `strict_dns`/`logical_dns` cluster resolved to last: how
//! a connection, which knows only its host's `ip:port`, finds the name that host came from, so
//! that `[[clusters.credentials]]` entries written by name match it as Envoy matches them (by
//! the host's hostname, `config/credentials.rs`).
//!
//! Written by `cluster::dns::resolve` (the engine and the resolver thread), read on connect;
//! one process-wide map behind a mutex held for a lookup only. Its size is bounded by the
//! names of the configs the process ran (each name keeps only its last answer).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

type Names = HashMap<(String, u16), Vec<SocketAddr>>;

fn names() -> &'static Mutex<Names> {
    static NAMES: OnceLock<Mutex<Names>> = OnceLock::new();
    NAMES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Records that `host:port` resolved to `addrs` (its last answer replaces the previous one).
pub fn record(host: &str, port: u16, addrs: &[SocketAddr]) {
    let mut m = names().lock().unwrap_or_else(|p| p.into_inner());
    m.insert((host.to_ascii_lowercase(), port), addrs.to_vec());
}

/// Whether `host:port`'s last answer held `addr`.
pub fn resolved_to(host: &str, port: u16, addr: SocketAddr) -> bool {
    let m = names().lock().unwrap_or_else(|p| p.into_inner());
    m.get(&(host.to_ascii_lowercase(), port))
        .is_some_and(|a| a.contains(&addr))
}

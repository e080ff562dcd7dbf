//! Bounds on the values that multiply threads, connections, file descriptors or memory, and
//! the file-descriptor budget a whole config implies.
//!
//! A single value is bounded where it is read (`validate`), with these maxima. The budget is a
//! product over the whole config (workers × listeners × clusters × hosts × connections), so it
//! is checked once the config is built ([`fd_need`], [`check_fds`]): against the hard
//! `RLIMIT_NOFILE` when a file is loaded (`respite check-config`, start, SIGHUP), since the
//! data plane raises its soft limit up to the hard one when a config needs it; and against the
//! soft limit the data plane actually has, when it applies a config (`engine`).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use super::{ClusterType, Config};

/// Most `runtime.workers`: one thread and one io_uring ring each. Far above any core count a
/// worker per core is useful for; a ceiling only, more workers than cores is allowed.
pub const MAX_WORKERS: usize = 1024;

/// Most `connections_per_host` (per host and per worker). Every connection holds a file
/// descriptor and its buffers from the start (about 60 KiB), and Redis serves each host on one
/// thread: beyond a few per worker, more connections only cost memory.
pub const MAX_CONNECTIONS_PER_HOST: usize = 256;

/// Most `max_leased_connections` (per host and per worker).
pub const MAX_LEASED_CONNECTIONS: usize = 1024;

/// Fewest `max_reply_bytes_in_flight`, bytes: below a few large replies' worth, a connection
/// would carry one request at a time.
pub const MIN_REPLY_BYTES_IN_FLIGHT: usize = 64 * 1024;

/// Most `max_reply_bytes_in_flight` (per host and per worker), bytes: what a host may buffer
/// for each of Respite's connections is bounded by it, and Redis's own memory pays for it.
pub const MAX_REPLY_BYTES_IN_FLIGHT: usize = 1 << 30;

/// Most `max_upstream_unknown_connections` (per worker).
pub const MAX_UPSTREAM_UNKNOWN_CONNECTIONS: usize = 1024;

/// Most `max_buffer_size_before_flush`, bytes: the requests an upstream connection holds
/// before writing them.
pub const MAX_BUFFER_SIZE_BEFORE_FLUSH: usize = 64 * 1024 * 1024;

/// Longest `buffer_flush_timeout`: requests wait (and their bytes stay buffered) that long at
/// most before being written; Envoy's default is 3ms.
pub const MAX_BUFFER_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest name that becomes part of stat names (`stat_prefix`, a cluster's `name`), bytes:
/// it is stored in every stat it scopes.
pub const MAX_STAT_NAME_LEN: usize = 255;

/// Descriptors of one worker apart from its sockets: its io_uring ring, the eventfd that wakes
/// it, and spare for the runtime's own.
const WORKER_FDS: u64 = 4;

/// Descriptors of the process apart from the config's: standard streams, the admin listener
/// and its connections, the control socket, the signal pipe, the health thread's ring, log
/// files, and spare.
const PROCESS_FDS: u64 = 64;

/// What a config can hold open at once, in file descriptors; each part is a worst case (every
/// lease taken, every RESP3 pool opened), summed over the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdNeed {
    /// Everything below.
    pub total: u64,
    /// The workers this was counted for.
    pub workers: usize,
    /// The config key that accounts for the most descriptors, and how many.
    pub largest: (String, u64),
}

/// How many descriptors `config` can hold open when it runs on `workers` workers (the running
/// count for a reload, since `runtime.workers` changes only at a restart).
///
/// Per worker: one listening socket per listener; per listener and cluster it routes to (a
/// route, a read policy, a mirror), one pool: `connections_per_host` connections to every host
/// for RESP2 clients and as many for RESP3 clients, and up to `max_leased_connections` per
/// host for transactions and blocking commands; per `redis_cluster` cluster of a listener, up
/// to `max_upstream_unknown_connections` to nodes known only from redirects (a Redis Cluster's
/// hosts are counted as its seeds); one subscriber connection per distinct host. Per process:
/// one connection per host and health check, one per `redis_cluster` discovery, an access log
/// file per listener, and a fixed share. Listeners whose settings match share a pool at run
/// time, so the count is an upper bound.
pub fn fd_need(config: &Config, workers: usize) -> FdNeed {
    let w = workers as u64;
    let mut parts: Vec<(String, u64)> = Vec::new();
    let mut per_worker = WORKER_FDS + config.listeners.len() as u64;
    let mut process = PROCESS_FDS;

    let users = |name: &str| {
        config
            .listeners
            .iter()
            .filter(|l| super::clusters_of(&l.prefix_routes).contains(&name))
            .count() as u64
    };
    for (i, c) in config.clusters.iter().enumerate() {
        let pools = users(&c.name);
        let hosts = c.hosts.len() as u64;
        let pipelined = pools
            .saturating_mul(hosts)
            .saturating_mul(c.connections_per_host as u64)
            .saturating_mul(2);
        let leased = pools
            .saturating_mul(hosts)
            .saturating_mul(c.max_leased_connections as u64);
        per_worker = per_worker.saturating_add(pipelined).saturating_add(leased);
        parts.push((
            format!("clusters[{i}].connections_per_host"),
            pipelined.saturating_mul(w),
        ));
        parts.push((
            format!("clusters[{i}].max_leased_connections"),
            leased.saturating_mul(w),
        ));
        let checks = hosts.saturating_mul(c.health_checks.len() as u64);
        process = process.saturating_add(checks);
        parts.push((format!("clusters[{i}].health_checks"), checks));
        if c.cluster_type == ClusterType::RedisCluster {
            process += 1;
        }
    }
    for (i, l) in config.listeners.iter().enumerate() {
        let redis_clusters = super::clusters_of(&l.prefix_routes)
            .into_iter()
            .filter(|name| {
                config
                    .clusters
                    .iter()
                    .any(|c| c.name == *name && c.cluster_type == ClusterType::RedisCluster)
            })
            .count() as u64;
        let unknown = redis_clusters.saturating_mul(l.max_upstream_unknown_connections as u64);
        per_worker = per_worker.saturating_add(unknown);
        parts.push((
            format!("listeners[{i}].max_upstream_unknown_connections"),
            unknown.saturating_mul(w),
        ));
        if l.access_log.as_ref().is_some_and(|a| a.path != "stderr") {
            process += 1;
        }
    }
    let hosts: HashSet<SocketAddr> = config
        .clusters
        .iter()
        .flat_map(|c| c.hosts.iter().map(|h| h.address))
        .collect();
    per_worker = per_worker.saturating_add(hosts.len() as u64);

    let total = per_worker.saturating_mul(w).saturating_add(process);
    let largest = parts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .filter(|(_, n)| *n > 0)
        .unwrap_or_else(|| ("runtime.workers".to_owned(), per_worker.saturating_mul(w)));
    FdNeed {
        total,
        workers,
        largest,
    }
}

/// The most descriptors a config may need under a limit of `limit`: three quarters of it, the
/// last quarter being kept for client connections.
pub fn fd_allowance(limit: u64) -> u64 {
    limit - limit / 4
}

/// Checks `need` against a `RLIMIT_NOFILE` of `limit` (`which` names it in the message:
/// "hard", "soft").
///
/// # Errors
/// The key that needs the most descriptors, and why: the need, the limit and what to change.
pub fn check_fds(need: &FdNeed, limit: u64, which: &str) -> Result<(), (String, String)> {
    let allowed = fd_allowance(limit);
    if need.total <= allowed {
        return Ok(());
    }
    let (key, part) = &need.largest;
    Err((
        key.clone(),
        format!(
            "the config can hold {} file descriptors open on {} worker(s) ({part} of them for \
             this key), more than the {allowed} it may use: the {which} RLIMIT_NOFILE is \
             {limit} and a quarter of it is kept for client connections. Lower this value or \
             runtime.workers, or raise the limit (LimitNOFILE= in the systemd unit, ulimit -n)",
            need.total, need.workers
        ),
    ))
}

/// This process's `RLIMIT_NOFILE` as (soft, hard); `None` if it cannot be read. An unlimited
/// value reads as `u64::MAX`.
pub fn nofile() -> Option<(u64, u64)> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()
}

//! Resolution of `strict_dns` / `logical_dns` clusters (Envoy STRICT_DNS / LOGICAL_DNS): the
//! resolver thread that looks every name up again each `dns_refresh_rate`, and the rules that
//! turn the addresses found into a cluster's hosts.
//!
//! Nothing here runs on a worker. The engine resolves a cluster's names once when a config
//! brings it (start, reload, push), then hands it to the [`Resolver`] thread, which reports a
//! [`DnsUpdate`] whenever a cluster's host set changes; the engine applies that as it applies
//! a reload (the same per-worker path EDS updates take), so clients stay connected.
//!
//! - **A name that does not resolve** contributes no host; at start the cluster may thus have
//!   no host at all, and its requests get `no upstream host`, as a cluster with no healthy
//!   host does. A name that resolved before and fails now keeps its last addresses (Envoy
//!   keeps the hosts of a target whose resolution fails).
//! - **Address families** follow `dns_lookup_family` ([`pick_family`]).
//! - **Hosts.** `strict_dns`: every address of every name, each with its name's weight, in
//!   address order (so a resolver that rotates its answers changes nothing), an address found
//!   under two names once (the first name's weight). `logical_dns`: the first address.
//!   A host's `address_text`, which ketama hashes, is its `ip:port`.
//!
//! Stats, counters under `cluster.<name>.` (Envoy's names): `update_attempt` (one per name
//! looked up), `update_success` (a lookup that gave at least one address of the family),
//! `update_failure` (one that did not). `membership_change` is counted by the engine when it
//! applies a changed host set. The resolver thread writes them in [`DNS_SHARD`], the engine's
//! own lookups in shard 0.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use crate::config::{ClusterConfig, ClusterType, DnsConfig, DnsLookupFamily, HostConfig};
use crate::stats::Store;

/// The resolver thread's stats shard.
pub const DNS_SHARD: usize = crate::stats::DISCOVERY_SHARD - 1;

/// A name lookup: `(host, port)` → its addresses in resolver order. The system resolver
/// ([`system_lookup`]) outside unit tests.
pub type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// getaddrinfo through std's `ToSocketAddrs` (blocking).
pub fn system_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// What decides a DNS cluster's hosts: its type and DNS settings. Two configs with equal
/// specs share resolution state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSpec {
    /// `StrictDns` or `LogicalDns`.
    pub cluster_type: ClusterType,
    /// The names and settings.
    pub dns: DnsConfig,
}

impl DnsSpec {
    /// The spec of `c`, `None` unless it is a DNS cluster.
    pub fn of(c: &ClusterConfig) -> Option<DnsSpec> {
        c.dns.as_ref().map(|dns| DnsSpec {
            cluster_type: c.cluster_type,
            dns: dns.clone(),
        })
    }
}

/// The last addresses of each target of a spec (same order as `DnsConfig::targets`), after
/// the family rule; empty for a name that never resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolved(pub Vec<Vec<SocketAddr>>);

/// `addrs` narrowed to `family` (Envoy `DnsLookupFamily`), resolver order kept.
pub fn pick_family(family: DnsLookupFamily, addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    let v4: Vec<SocketAddr> = addrs.iter().copied().filter(SocketAddr::is_ipv4).collect();
    let v6: Vec<SocketAddr> = addrs.iter().copied().filter(SocketAddr::is_ipv6).collect();
    match family {
        DnsLookupFamily::V4Only => v4,
        DnsLookupFamily::V6Only => v6,
        DnsLookupFamily::Auto if v6.is_empty() => v4,
        DnsLookupFamily::Auto => v6,
        DnsLookupFamily::V4Preferred if v4.is_empty() => v6,
        DnsLookupFamily::V4Preferred => v4,
        DnsLookupFamily::All => addrs.to_vec(),
    }
}

/// Looks up every name of `spec` once. A name that fails, or has no address of the family,
/// keeps its addresses in `prev` (none if `prev` is `None`). Returns the new state and, per
/// name, `Err(reason)` for those that failed.
pub fn resolve(
    spec: &DnsSpec,
    prev: Option<&Resolved>,
    lookup: &Lookup,
) -> (Resolved, Vec<Result<(), String>>) {
    let mut out = Vec::with_capacity(spec.dns.targets.len());
    let mut outcomes = Vec::with_capacity(spec.dns.targets.len());
    for (i, t) in spec.dns.targets.iter().enumerate() {
        let found = lookup(&t.host, t.port)
            .map_err(|e| e.to_string())
            .map(|a| pick_family(spec.dns.dns_lookup_family, &a))
            .and_then(|a| {
                if a.is_empty() {
                    Err(format!(
                        "no address of family {:?}",
                        spec.dns.dns_lookup_family
                    ))
                } else {
                    Ok(a)
                }
            });
        match found {
            Ok(a) => {
                crate::config::dns_names::record(&t.host, t.port, &a);
                out.push(a);
                outcomes.push(Ok(()));
            }
            Err(e) => {
                let last = prev.and_then(|p| p.0.get(i)).cloned().unwrap_or_default();
                out.push(last);
                outcomes.push(Err(format!("{}:{}: {e}", t.host, t.port)));
            }
        }
    }
    (Resolved(out), outcomes)
}

/// The hosts `resolved` gives `spec` (see the module doc).
pub fn hosts(spec: &DnsSpec, resolved: &Resolved) -> Vec<HostConfig> {
    let host = |address: SocketAddr, weight: u32| HostConfig {
        address,
        address_text: address.to_string(),
        weight,
        name: None,
    };
    if spec.cluster_type == ClusterType::LogicalDns {
        let first = resolved.0.first().and_then(|a| a.first());
        let weight = spec.dns.targets.first().map_or(1, |t| t.weight);
        return first.map(|a| vec![host(*a, weight)]).unwrap_or_default();
    }
    let mut out: Vec<HostConfig> = Vec::new();
    for (t, addrs) in spec.dns.targets.iter().zip(&resolved.0) {
        for a in addrs {
            if !out.iter().any(|h| h.address == *a) {
                out.push(host(*a, t.weight));
            }
        }
    }
    out.sort_by_key(|h| h.address);
    out
}

/// Looks up `spec`'s names for cluster `name` and counts the outcome in `store` (shard
/// `shard`), logging failures. Returns the new state.
pub fn resolve_counted(
    name: &str,
    spec: &DnsSpec,
    prev: Option<&Resolved>,
    lookup: &Lookup,
    store: &Store,
    shard: usize,
) -> Resolved {
    let (resolved, outcomes) = resolve(spec, prev, lookup);
    let counter = |stat: &str| store.counter(&format!("cluster.{name}.{stat}"), shard);
    for o in outcomes {
        counter("update_attempt").inc();
        match o {
            Ok(()) => counter("update_success").inc(),
            Err(e) => {
                counter("update_failure").inc();
                tracing::warn!(cluster = %name, "DNS resolution failed: {e}");
            }
        }
    }
    resolved
}

/// A changed host set found by the [`Resolver`] thread.
#[derive(Debug, Clone)]
pub struct DnsUpdate {
    /// The cluster's name.
    pub cluster: String,
    /// The spec it was resolved under: the engine ignores an update whose spec is no longer
    /// the cluster's.
    pub spec: DnsSpec,
    /// The new state.
    pub resolved: Resolved,
}

/// One cluster the thread re-resolves.
struct Entry {
    spec: DnsSpec,
    resolved: Resolved,
    due: Option<Instant>,
}

/// The resolver thread; dropping the handle stops it (within one lookup).
pub struct Resolver {
    set: Sender<Vec<(String, DnsSpec, Resolved)>>,
    updates: Receiver<DnsUpdate>,
}

impl Resolver {
    /// Starts the thread `respite-dns` with no clusters. If the thread cannot be created the
    /// error is logged and no cluster is ever re-resolved.
    pub fn spawn(store: Arc<Store>, lookup: Arc<Lookup>) -> Resolver {
        let (set, set_rx) = mpsc::channel();
        let (upd_tx, updates) = mpsc::channel();
        if let Err(e) = std::thread::Builder::new()
            .name("respite-dns".to_owned())
            .spawn(move || run(set_rx, upd_tx, &store, &*lookup))
        {
            tracing::error!("cannot start the DNS resolver thread: {e}");
        }
        Resolver { set, updates }
    }

    /// Makes the thread re-resolve exactly `clusters` (name, spec, current state). A cluster
    /// already there under the same spec keeps its timer.
    pub fn set(&self, clusters: Vec<(String, DnsSpec, Resolved)>) {
        let _ = self.set.send(clusters);
    }

    /// The updates found since the last call, oldest first.
    pub fn updates(&self) -> Vec<DnsUpdate> {
        self.updates.try_iter().collect()
    }
}

fn run(
    set: Receiver<Vec<(String, DnsSpec, Resolved)>>,
    updates: Sender<DnsUpdate>,
    store: &Store,
    lookup: &Lookup,
) {
    let mut entries: HashMap<String, Entry> = HashMap::new();
    loop {
        let now = Instant::now();
        for (name, e) in &mut entries {
            if e.due.is_none_or(|d| d > now) {
                continue;
            }
            let before = hosts(&e.spec, &e.resolved);
            e.resolved =
                resolve_counted(name, &e.spec, Some(&e.resolved), lookup, store, DNS_SHARD);
            e.due = Instant::now().checked_add(e.spec.dns.dns_refresh_rate);
            if hosts(&e.spec, &e.resolved) != before {
                let sent = updates.send(DnsUpdate {
                    cluster: name.clone(),
                    spec: e.spec.clone(),
                    resolved: e.resolved.clone(),
                });
                if sent.is_err() {
                    return;
                }
            }
        }
        let next = entries.values().filter_map(|e| e.due).min();
        let wait = next.map_or(std::time::Duration::from_secs(3600), |d| {
            d.saturating_duration_since(Instant::now())
        });
        match set.recv_timeout(wait) {
            Ok(list) => {
                let mut old = std::mem::take(&mut entries);
                for (name, spec, resolved) in list {
                    let entry = match old.remove(&name) {
                        Some(e) if e.spec == spec => Entry { resolved, ..e },
                        _ => Entry {
                            due: Instant::now().checked_add(spec.dns.dns_refresh_rate),
                            spec,
                            resolved,
                        },
                    };
                    entries.insert(name, entry);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests;

//! `/clusters`: every upstream host with its health and counts (Envoy admin `/clusters`).
//!
//! Hosts: a static cluster's configured hosts, in config order; a Redis Cluster's nodes as the
//! [`HostRegistry`] knows them (every node a worker's pool has met), sorted by address.
//! Per-host numbers are the store's `cluster.<c>.host.<ip:port>.<stat>` (summed over workers);
//! [`HOST_STATS`] are always shown (0 when never recorded), any other stat under the host's
//! prefix (e.g. `flush_total`) too. Health comes from the host's shared [`HostHealth`]
//! (a host no pool has built yet is healthy: hosts start healthy).
//!
//! Text, one fact per line, as Envoy prints it:
//!
//! ```text
//! cache::127.0.0.1:7001::cx_active::1
//! cache::127.0.0.1:7001::cx_connect_fail::0
//! …
//! cache::127.0.0.1:7001::hostname::
//! cache::127.0.0.1:7001::health_flags::/failed_active_hc/failed_outlier_check
//! cache::127.0.0.1:7001::weight::1
//! ```
//!
//! `health_flags` is `healthy`, or each failing flag prefixed with `/` (Envoy's
//! `HostUtility::healthFlagsToString`): `/failed_active_hc` while an active check fails,
//! `/failed_outlier_check` while outlier detection ejects the host.
//!
//! JSON (`?format=json`) is Envoy's `admin.v3.Clusters`: `{"cluster_statuses":[{"name",
//! "added_via_api":false,"host_statuses":[{"address":{"socket_address":{"address","port_value"}},
//! "stats":[{"name","value","type"}],"health_status":{"eds_health_status":"HEALTHY",
//! "failed_active_health_check","failed_outlier_check"},"weight","hostname"}]}]}`; stat values
//! are strings, as protobuf's JSON mapping writes Envoy's uint64 fields; `type` is `COUNTER` or
//! `GAUGE`.
//!
//! [`HostHealth`]: crate::cluster::health::HostHealth

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::cluster::HostRegistry;
use crate::config::{ClusterType, Config};
use crate::stats::Store;

/// Per-host stats always shown, with their kind (Envoy's host stats of the same names).
pub const HOST_STATS: [(&str, StatKind); 6] = [
    ("cx_active", StatKind::Gauge),
    ("cx_connect_fail", StatKind::Counter),
    ("cx_total", StatKind::Counter),
    ("rq_error", StatKind::Counter),
    ("rq_timeout", StatKind::Counter),
    ("rq_total", StatKind::Counter),
];

/// Counter or gauge (Envoy's `SimpleMetric.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    Counter,
    Gauge,
}

impl StatKind {
    fn as_str(self) -> &'static str {
        match self {
            StatKind::Counter => "COUNTER",
            StatKind::Gauge => "GAUGE",
        }
    }
}

/// One host as `/clusters` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostView {
    pub addr: SocketAddr,
    /// The DNS name the host was configured with; empty for an IP literal or a discovered node.
    pub hostname: String,
    pub weight: u32,
    /// An active health check fails (Envoy `FAILED_ACTIVE_HC`).
    pub failed_active_hc: bool,
    /// Outlier detection ejects the host (Envoy `FAILED_OUTLIER_CHECK`).
    pub failed_outlier_check: bool,
    /// (stat name without the host prefix, value, kind), sorted by name.
    pub stats: Vec<(String, i64, StatKind)>,
}

impl HostView {
    /// Envoy's `health_flags` value.
    pub fn health_flags(&self) -> String {
        let mut flags = String::new();
        if self.failed_active_hc {
            flags.push_str("/failed_active_hc");
        }
        if self.failed_outlier_check {
            flags.push_str("/failed_outlier_check");
        }
        if flags.is_empty() {
            flags.push_str("healthy");
        }
        flags
    }
}

/// One cluster and its hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    pub name: String,
    pub hosts: Vec<HostView>,
}

/// Gathers what `/clusters` shows, clusters in config order.
pub fn collect(config: &Config, registry: &HostRegistry, store: &Store) -> Vec<ClusterView> {
    let known: HashMap<(String, SocketAddr), _> = registry
        .snapshot()
        .into_iter()
        .map(|h| ((h.cluster.clone(), h.addr), h))
        .collect();
    let stats: BTreeMap<String, (i64, StatKind)> = store
        .counters()
        .into_iter()
        .map(|(n, v)| (n, (i64::try_from(v).unwrap_or(i64::MAX), StatKind::Counter)))
        .chain(
            store
                .gauges()
                .into_iter()
                .map(|(n, v)| (n, (v, StatKind::Gauge))),
        )
        .collect();
    config
        .clusters
        .iter()
        .map(|c| {
            // (address, hostname, weight)
            let hosts: Vec<(SocketAddr, String, u32)> = match c.cluster_type {
                ClusterType::Static
                | ClusterType::Eds
                | ClusterType::StrictDns
                | ClusterType::LogicalDns => c
                    .hosts
                    .iter()
                    .map(|h| (h.address, dns_name(&h.address_text), h.weight))
                    .collect(),
                ClusterType::RedisCluster => known
                    .keys()
                    .filter(|(cluster, _)| *cluster == c.name)
                    .map(|(_, addr)| (*addr, String::new(), 1))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            };
            let hosts = hosts
                .into_iter()
                .map(|(addr, hostname, weight)| {
                    let shared = known.get(&(c.name.clone(), addr));
                    let prefix = format!("cluster.{}.host.{addr}.", c.name);
                    let mut host_stats: BTreeMap<String, (i64, StatKind)> = HOST_STATS
                        .iter()
                        .map(|(n, k)| ((*n).to_owned(), (0, *k)))
                        .collect();
                    for (name, v) in stats.range(prefix.clone()..) {
                        let Some(stat) = name.strip_prefix(&prefix) else {
                            break;
                        };
                        host_stats.insert(stat.to_owned(), *v);
                    }
                    HostView {
                        addr,
                        hostname,
                        weight,
                        failed_active_hc: shared.is_some_and(|h| !h.health.passes_checks()),
                        failed_outlier_check: shared.is_some_and(|h| h.health.is_ejected()),
                        stats: host_stats
                            .into_iter()
                            .map(|(n, (v, k))| (n, v, k))
                            .collect(),
                    }
                })
                .collect();
            ClusterView {
                name: c.name.clone(),
                hosts,
            }
        })
        .collect()
}

/// The host part of `host:port` when it is a DNS name, else empty (Envoy's `hostname` is empty
/// for hosts given as IP addresses).
fn dns_name(address_text: &str) -> String {
    let host = address_text
        .rsplit_once(':')
        .map_or(address_text, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_ok() {
        String::new()
    } else {
        host.to_owned()
    }
}

/// The text form (module docs).
pub fn render_text(clusters: &[ClusterView]) -> String {
    let mut out = String::new();
    for c in clusters {
        for h in &c.hosts {
            let p = format!("{}::{}", c.name, h.addr);
            for (name, value, _) in &h.stats {
                let _ = writeln!(out, "{p}::{name}::{value}");
            }
            let _ = writeln!(out, "{p}::hostname::{}", h.hostname);
            let _ = writeln!(out, "{p}::health_flags::{}", h.health_flags());
            let _ = writeln!(out, "{p}::weight::{}", h.weight);
        }
    }
    out
}

/// The JSON form (module docs).
pub fn render_json(clusters: &[ClusterView]) -> Value {
    let statuses: Vec<Value> = clusters
        .iter()
        .map(|c| {
            let hosts: Vec<Value> = c
                .hosts
                .iter()
                .map(|h| {
                    let stats: Vec<Value> = h
                        .stats
                        .iter()
                        .map(|(n, v, k)| {
                            json!({"name": n, "value": v.to_string(), "type": k.as_str()})
                        })
                        .collect();
                    json!({
                        "address": {"socket_address": {
                            "address": h.addr.ip().to_string(),
                            "port_value": h.addr.port(),
                        }},
                        "stats": stats,
                        "health_status": {
                            "eds_health_status": "HEALTHY",
                            "failed_active_health_check": h.failed_active_hc,
                            "failed_outlier_check": h.failed_outlier_check,
                        },
                        "weight": h.weight,
                        "hostname": h.hostname,
                    })
                })
                .collect();
            json!({"name": c.name, "added_via_api": false, "host_statuses": hosts})
        })
        .collect();
    json!({ "cluster_statuses": statuses })
}

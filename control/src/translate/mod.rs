//! Envoy resources → Respite config tables (DESIGN.md "Config model": Envoy resources translate
//! into the one model). Each resource translates alone, so one bad resource is rejected by name
//! while the others apply (xDS: a NACK names each rejected resource).
//!
//! A field that changes behaviour and that Respite does not implement (e.g.
//! `external_auth_provider`, AWS IAM auth, a second network filter, TLS) makes the resource
//! invalid with a reason naming the field; fields with no effect on a Redis proxy are ignored.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;

/// A translated Listener: one `[[listeners]]` table and the clusters its routes and mirrors name
/// (what warming waits for).
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerDraft {
    pub name: String,
    /// The `[[listeners]]` table, keys as in `deploy/examples/respite.toml`.
    pub table: toml::Table,
    pub clusters: BTreeSet<String>,
}

/// A translated Cluster: its `[[clusters]]` table without `hosts`, and where the hosts come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterDraft {
    pub name: String,
    /// The `[[clusters]]` table without `hosts`.
    pub table: toml::Table,
    pub hosts: HostSource,
}

/// Where a cluster's hosts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum HostSource {
    /// The cluster's inline `load_assignment` (STATIC, STRICT_DNS, redis cluster seeds): `hosts`
    /// items, each `"host:port"` or `{ address = "host:port", weight = N }`.
    Inline(Vec<toml::Value>),
    /// `type: EDS`: the ClusterLoadAssignment of this name (`eds_cluster_config.service_name`,
    /// or the cluster name); the table has `type = "eds"`.
    Eds(String),
}

/// Translates a Listener carrying `envoy.filters.network.redis_proxy`.
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn listener(_l: &Listener) -> Result<ListenerDraft, String> {
    Err("listener translation is not implemented yet".into())
}

/// Translates a Cluster.
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn cluster(_c: &Cluster) -> Result<ClusterDraft, String> {
    Err("cluster translation is not implemented yet".into())
}

/// Translates a ClusterLoadAssignment into `hosts` items (healthy and unknown-health endpoints;
/// weights from `load_balancing_weight`).
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn endpoints(_cla: &ClusterLoadAssignment) -> Result<Vec<toml::Value>, String> {
    Err("endpoint translation is not implemented yet".into())
}

/// Renders a whole config as TOML text for [`respite::config::parse_pushed`]: every listener,
/// and every cluster with its `hosts` filled in, in the order given.
pub fn render(
    listeners: &[&ListenerDraft],
    clusters: &[(&ClusterDraft, &[toml::Value])],
) -> String {
    let mut root = toml::Table::new();
    let ls: Vec<toml::Value> = listeners
        .iter()
        .map(|l| toml::Value::Table(l.table.clone()))
        .collect();
    let cs: Vec<toml::Value> = clusters
        .iter()
        .map(|(c, hosts)| {
            let mut t = c.table.clone();
            t.insert("hosts".into(), toml::Value::Array(hosts.to_vec()));
            toml::Value::Table(t)
        })
        .collect();
    root.insert("listeners".into(), toml::Value::Array(ls));
    root.insert("clusters".into(), toml::Value::Array(cs));
    toml::to_string(&root).unwrap_or_default()
}

/// TEMPORARY stub until the translator lands.
pub fn static_config(
    _listeners: &[envoy_types::pb::envoy::config::listener::v3::Listener],
    _clusters: &[envoy_types::pb::envoy::config::cluster::v3::Cluster],
) -> Result<String, String> {
    Err("not implemented".into())
}

//! Envoy resources → the data plane's config file model ([`respite::config::raw`]), serialized
//! into the TOML the data plane parses. Each resource translates alone, so one bad resource is
//! rejected by name while the others apply (xDS: a NACK names each rejected resource).
//!
//! A field that changes behaviour and that Respite does not implement (e.g. AWS IAM auth, a second network filter, SDS) makes the resource
//! invalid with a reason naming the field; fields with no effect on a Redis proxy are ignored.
//!
//! Choices where Envoy and Respite differ (each documented where it is made):
//! - `connection_rate_limit` (listener): copied onto every cluster the listener names; several
//!   listeners disagreeing on one cluster give it the lowest value, with a warning; unset keeps
//!   the data plane's default of 100/s per host where Envoy is unlimited ([`render`]).
//! - `enable_redirection`: ignored; redirects are always followed on `redis_cluster` clusters.
//! - `latency_in_micros`: copied (the data plane has the same switch).
//! - `runtime_fraction` / `fault_enabled`: the default value only, no runtime layer
//!   (`fields::runtime_percent`).
//! - RANDOM / ROUND_ROBIN: the data plane's `random` / `round_robin`, per client command and
//!   transaction, equal weights only (`lb.rs`); LEAST_REQUEST only on a one-host static
//!   cluster, on several hosts "not supported by respite yet".
//! - Typed configs (agree): every `typed_config` may be the message, a `Struct` of its fields
//!   or a `TypedStruct` naming it; one rule, `fields::decode`.
//! - `typed_extension_protocol_options` (agree): an entry is `RedisProtocolOptions` by its type
//!   under any key (a bare `Struct` by the key `envoy.filters.network.redis_proxy` or the legacy
//!   `envoy.redis_proxy`); any other entry is refused naming the key (`cluster.rs`). `metadata`
//!   maps (`filter_metadata`, `typed_filter_metadata`, keyed by filter name) have no effect on
//!   a Redis proxy and are ignored, as Envoy ignores metadata no filter reads.
//! - `cluster_type` (agree): envoy.clusters.redis by its typed_config type, else by name.
//! - `redirect_refresh_interval: 0s` (agree): no minimum gap between triggered refreshes.
//! - A mirror onto the route's own cluster (agree): accepted, every mirrored command reaches
//!   the cluster twice (a mirrored write is applied twice); logged as a warning naming the route
//!   (`listener.rs`).
//! - Ring and Maglev sizes: Envoy's defaults only (`lb.rs`).
//! - `max_pending_requests`: per host and worker here (`cluster.rs`).
//! - EDS priorities above 0: invalid (`endpoints.rs`).
//! - Redis Cluster refresh thresholds: Envoy's defaults (0 = off) when absent
//!   (`redis_cluster.rs`).
//! - TLS transport sockets (`tls.rs`): one certificate per listener (no SNI filter chains); an
//!   upstream context without `trusted_ca` verifies nothing, as in Envoy (logged as a warning);
//!   one with it also checks the host name; inline certificates become private files
//!   (`files.rs`); `alpn_protocols` is ignored.

use std::collections::{BTreeMap, BTreeSet};

mod cluster;
mod dns;
mod endpoints;
pub mod external_auth;
pub mod fields;
pub mod files;
mod health;
mod lb;
mod listener;
mod redis_cluster;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cluster;
#[cfg(test)]
mod tests_dns;
#[cfg(test)]
mod tests_external_auth;
#[cfg(test)]
mod tests_golden;
#[cfg(test)]
mod tests_protocol;
#[cfg(test)]
mod tests_support;
#[cfg(test)]
mod tests_tls;
#[cfg(test)]
mod tests_zone;
pub mod tls;
mod zone;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use respite::config::ClusterType;
use respite::config::raw::{RawCluster, RawConfig, RawHost, RawListener, unspanned};

/// The redis_proxy network filter's name.
pub const REDIS_PROXY_FILTER: &str = "envoy.filters.network.redis_proxy";
/// The redis_proxy filter config's type URL; the filter is matched by it (as Envoy picks the
/// filter factory).
pub const REDIS_PROXY_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy";
/// Upstream AUTH options in `Cluster.typed_extension_protocol_options`.
pub const REDIS_PROTOCOL_OPTIONS_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions";
/// `Cluster.cluster_type.name` of a Redis Cluster upstream.
pub const REDIS_CLUSTER_TYPE_NAME: &str = "envoy.clusters.redis";
/// The redis health checker's config type URL.
pub const REDIS_HEALTH_CHECK_TYPE: &str =
    "type.googleapis.com/envoy.extensions.health_checkers.redis.v3.Redis";

/// A translated Listener: one `[[listeners]]` entry and the clusters its routes and mirrors name
/// (what warming waits for).
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerDraft {
    /// The Listener's name (also `listener.name`).
    pub name: String,
    /// The `[[listeners]]` entry.
    pub listener: RawListener,
    /// Every cluster its routes, read policies and mirrors name.
    pub clusters: BTreeSet<String>,
    /// `settings.connection_rate_limit.connection_rate_limit_per_sec`: new connections per second
    /// to one host of each of `clusters` ([`render`] copies it onto them).
    pub connection_rate_limit_per_sec: Option<u32>,
    /// The gRPC cluster of its `external_auth_provider` (`envoy_grpc.cluster_name`): not a
    /// Redis cluster, [`render`] takes the service's address from its one endpoint.
    pub external_auth_cluster: Option<String>,
}

/// A translated Cluster: its `[[clusters]]` entry without `hosts`, and where the hosts come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterDraft {
    /// The Cluster's name (also `cluster.name`).
    pub name: String,
    /// The `[[clusters]]` entry; its `hosts` stay empty, [`render`] fills them in.
    pub cluster: RawCluster,
    /// Where the hosts come from.
    pub hosts: HostSource,
}

/// Where a cluster's hosts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum HostSource {
    /// The cluster's inline `load_assignment` (STATIC, STRICT_DNS, redis cluster seeds): `hosts`
    /// items, each `"host:port"` or `{ address = "host:port", weight = N }`.
    Inline(Vec<RawHost>),
    /// `type: EDS`: the ClusterLoadAssignment of this name (`eds_cluster_config.service_name`,
    /// or the cluster name); the table has `type = "eds"`.
    Eds(String),
}

pub use zone::set_local_zone;

/// Translates a Listener carrying `envoy.filters.network.redis_proxy` (rules: `listener.rs`).
/// The table is checked alone by the data plane's parser (against stand-in clusters), so a
/// value the data plane refuses (a zero delay fault, an empty password, ...) rejects this
/// Listener by name instead of the whole config later.
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn listener(l: &Listener) -> Result<ListenerDraft, String> {
    let draft = listener::translate(l)?;
    check_listener(&draft)?;
    Ok(draft)
}

/// Translates a Cluster (rules: `cluster.rs`, `lb.rs`, `health.rs`, `redis_cluster.rs`). The
/// table is checked alone by the data plane's parser (with a stand-in host).
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn cluster(c: &Cluster) -> Result<ClusterDraft, String> {
    let draft = cluster::translate(c)?;
    check_cluster(&draft)?;
    Ok(draft)
}

/// Translates a ClusterLoadAssignment into `hosts` items (UNKNOWN, HEALTHY and DEGRADED
/// endpoints; weights from `load_balancing_weight`; rules: `endpoints.rs`). An empty assignment
/// is valid and gives no hosts.
///
/// Errors: the reason the resource is invalid, naming the field.
pub fn endpoints(cla: &ClusterLoadAssignment) -> Result<Vec<RawHost>, String> {
    endpoints::translate(cla)
}

/// Renders a whole config as TOML text for [`respite::config::parse_pushed`]: every listener,
/// and every cluster with its `hosts` filled in, in the order given.
///
/// A listener none of whose clusters is a `redis_cluster` loses `read_policy` and
/// `max_upstream_unknown_connections`: Envoy ignores them there ("Redis Cluster only"), while
/// the data plane refuses them as settings without effect.
///
/// A cluster gets `connection_rate_limit_per_sec` from the listeners naming it (Envoy sets the
/// limit on each listener's own pools; Respite's limit is per host over all listeners, so the
/// lowest value wins, logged as a warning when listeners disagree). Named by none: the data
/// plane's default (100/s), where Envoy's unset is unlimited, since a reconnect storm is worth
/// damping by default.
pub fn render(listeners: &[&ListenerDraft], clusters: &[(&ClusterDraft, &[RawHost])]) -> String {
    let listeners_in = listeners;
    let redis_clusters: BTreeSet<&str> = clusters
        .iter()
        .filter(|(c, _)| c.cluster.cluster_type == ClusterType::RedisCluster)
        .map(|(c, _)| c.name.as_str())
        .collect();
    let routed: BTreeSet<&str> = listeners
        .iter()
        .flat_map(|l| l.clusters.iter().map(String::as_str))
        .collect();
    let auth_only: BTreeSet<&str> = listeners
        .iter()
        .filter_map(|l| l.external_auth_cluster.as_deref())
        .filter(|c| !routed.contains(c))
        .collect();
    let listeners = listeners
        .iter()
        .map(|l| {
            let mut raw = l.listener.clone();
            if let (Some(auth), Some(name)) = (raw.external_auth.as_mut(), &l.external_auth_cluster)
                && let Some(address) = single_endpoint(clusters, name)
            {
                auth.get_mut().address = unspanned(address);
            }
            if !l
                .clusters
                .iter()
                .any(|c| redis_clusters.contains(c.as_str()))
            {
                raw.read_policy = None;
                raw.local_zone = None;
                raw.max_upstream_unknown_connections = None;
            }
            unspanned(raw)
        })
        .collect();
    let rate_limits = rate_limits(listeners_in);
    // A gRPC cluster of external auth only is not one the data plane serves.
    let clusters = clusters
        .iter()
        .filter(|(c, _)| !auth_only.contains(c.name.as_str()))
        .map(|(c, hosts)| {
            let mut raw = c.cluster.clone();
            if let Some(limit) = rate_limits.get(c.name.as_str()) {
                raw.connection_rate_limit_per_sec = Some(unspanned(*limit));
            }
            raw.hosts = unspanned(hosts.iter().cloned().map(unspanned).collect());
            unspanned(raw)
        })
        .collect();
    let file = RawConfig {
        listeners,
        clusters,
        ..RawConfig::default()
    };
    // Every number translated fits TOML's i64, the only thing serialization can fail on.
    let text = file.to_toml().unwrap_or_default();
    #[cfg(test)]
    tests_golden::check(&text);
    text
}

/// Each cluster named by a listener with a connection rate limit → the lowest such limit;
/// a warning names the cluster when its listeners disagree.
fn rate_limits<'a>(listeners: &[&'a ListenerDraft]) -> BTreeMap<&'a str, u32> {
    let mut seen: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for l in listeners {
        if let Some(limit) = l.connection_rate_limit_per_sec {
            for c in &l.clusters {
                seen.entry(c.as_str()).or_default().insert(limit);
            }
        }
    }
    seen.into_iter()
        .filter_map(|(cluster, limits)| {
            let lowest = *limits.first()?;
            if limits.len() > 1 {
                tracing::warn!(
                    cluster,
                    ?limits,
                    lowest,
                    "listeners routing to this cluster set different \
                     connection_rate_limit_per_sec values; the lowest applies"
                );
            }
            Some((cluster, lowest))
        })
        .collect()
}

/// Translates a whole Envoy `static_resources` (bootstrap file: `respite-control translate`,
/// `--envoy-config`) and renders it, validated by [`respite::config::parse_pushed`].
///
/// Errors: the first invalid resource, named (`listener "redis": ...`, `cluster "cache": ...`);
/// an EDS cluster (its endpoints need an xDS server); or the data plane's rejection of the whole
/// config (e.g. a route naming a cluster that does not exist).
pub fn static_config(listeners: &[Listener], clusters: &[Cluster]) -> Result<String, String> {
    static_config_in_zone(listeners, clusters, None)
}

/// [`static_config`] for a proxy in availability zone `local_zone` (the file's
/// `node.locality.zone`), which `LOCAL_ZONE_AFFINITY*` read policies need
/// ([`set_local_zone`]).
pub fn static_config_in_zone(
    listeners: &[Listener],
    clusters: &[Cluster],
    local_zone: Option<&str>,
) -> Result<String, String> {
    let mut ls = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            listener(l)
                .and_then(|mut d| set_local_zone(&mut d, local_zone).map(|()| d))
                .map_err(|e| format!("{}: {e}", resource("listener", i, &l.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The gRPC clusters of external auth are read for their endpoint only; one that a route
    // names too is also a Redis cluster.
    let routed: BTreeSet<String> = ls.iter().flat_map(|l| l.clusters.clone()).collect();
    let mut auth_only = BTreeSet::new();
    for (i, l) in ls.iter_mut().enumerate() {
        let Some(name) = l.external_auth_cluster.take() else {
            continue;
        };
        let address = grpc_endpoint(clusters, &name).map_err(|e| {
            format!(
                "{}: redis_proxy.external_auth_provider.grpc_service.envoy_grpc.cluster_name: {e}",
                resource("listener", i, &l.name)
            )
        })?;
        if let Some(auth) = l.listener.external_auth.as_mut() {
            auth.get_mut().address = unspanned(address);
        }
        if !routed.contains(&name) {
            auth_only.insert(name);
        }
    }
    let mut cs = Vec::new();
    for (i, c) in clusters.iter().enumerate() {
        if auth_only.contains(&c.name) {
            continue;
        }
        let name = resource("cluster", i, &c.name);
        let d = cluster(c).map_err(|e| format!("{name}: {e}"))?;
        let hosts = match &d.hosts {
            HostSource::Inline(h) => h.clone(),
            HostSource::Eds(_) => {
                return Err(format!(
                    "{name}: type EDS needs an xDS server for its endpoints; use --bootstrap, or \
                     STATIC/STRICT_DNS with a load_assignment"
                ));
            }
        };
        cs.push((d, hosts));
    }
    let lrefs: Vec<&ListenerDraft> = ls.iter().collect();
    let crefs: Vec<(&ClusterDraft, &[RawHost])> =
        cs.iter().map(|(d, h)| (d, h.as_slice())).collect();
    let text = render(&lrefs, &crefs);
    respite::config::parse_pushed(&text, "translated config").map_err(|e| e.to_string())?;
    Ok(text)
}

/// The address of the one endpoint of cluster `name` (a gRPC service's), from its inline
/// `load_assignment`.
///
/// Errors: no such cluster, or not exactly one endpoint given inline.
fn grpc_endpoint(clusters: &[Cluster], name: &str) -> Result<String, String> {
    let c = clusters
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("no cluster \"{name}\""))?;
    let Some(cla) = &c.load_assignment else {
        return Err(format!(
            "cluster \"{name}\" must have exactly one endpoint in its load_assignment (it has no \
             load_assignment)"
        ));
    };
    let hosts = endpoints::translate(cla).map_err(|e| format!("cluster \"{name}\": {e}"))?;
    match hosts.as_slice() {
        [RawHost::Short(a)] => Ok(a.clone()),
        [RawHost::Full(t)] => Ok(t.address.get_ref().clone()),
        other => Err(format!(
            "cluster \"{name}\" must have exactly one endpoint in its load_assignment (it has {})",
            other.len()
        )),
    }
}

/// The address of `name`'s one endpoint, if `clusters` has it with exactly one.
fn single_endpoint(clusters: &[(&ClusterDraft, &[RawHost])], name: &str) -> Option<String> {
    let (_, hosts) = clusters.iter().find(|(c, _)| c.name == name)?;
    match hosts {
        [RawHost::Short(a)] => Some(a.clone()),
        [RawHost::Full(t)] => Some(t.address.get_ref().clone()),
        _ => None,
    }
}

/// `listener "name"`, or `listeners[i]` for a nameless one.
fn resource(kind: &str, i: usize, name: &str) -> String {
    if name.is_empty() {
        format!("{kind}s[{i}]")
    } else {
        format!("{kind} \"{name}\"")
    }
}

/// Where the stand-in configs point their hosts: never connected to, never resolved. Each
/// stand-in cluster gets its own port, since the data plane refuses a mirror that shares a host
/// with its route's cluster.
fn stand_in_host(i: usize) -> RawHost {
    RawHost::Short(format!("127.0.0.1:{}", 1 + i % 65535))
}

/// Parses `draft` with stand-in `redis_cluster` clusters (so cluster-only listener settings are
/// allowed), returning the data plane's message without its location.
fn check_listener(draft: &ListenerDraft) -> Result<(), String> {
    // The node's zone is set later ([`set_local_zone`]); the check needs one.
    let mut zoned = draft.clone();
    set_local_zone(&mut zoned, Some(zone::STAND_IN_ZONE))?;
    let draft = &zoned;
    let zone_policy = draft.listener.local_zone.is_some();
    let stand_ins: Vec<(ClusterDraft, [RawHost; 1])> = draft
        .clusters
        .iter()
        .chain(
            draft
                .external_auth_cluster
                .iter()
                .filter(|c| !draft.clusters.contains(*c)),
        )
        .enumerate()
        .map(|(i, name)| {
            let mut cluster = RawCluster::new(name.clone(), ClusterType::RedisCluster);
            // A zone read policy needs its clusters' zone discovery; the real clusters are
            // checked with the whole config.
            if zone_policy {
                cluster.zone_discovery = Some(unspanned(true));
            }
            let c = ClusterDraft {
                name: name.clone(),
                cluster,
                hosts: HostSource::Inline(Vec::new()),
            };
            (c, [stand_in_host(i)])
        })
        .collect();
    let cs: Vec<(&ClusterDraft, &[RawHost])> = stand_ins.iter().map(|(c, h)| (c, &h[..])).collect();
    check(&render(&[draft], &cs))
}

/// Parses `draft` alone with one stand-in host.
fn check_cluster(draft: &ClusterDraft) -> Result<(), String> {
    let host = [stand_in_host(0)];
    check(&render(&[], &[(draft, &host[..])]))
}

/// The data plane's verdict on a stand-in config, without the error's line and column: they
/// are of the stand-in text, meaningless to the resource's author.
fn check(text: &str) -> Result<(), String> {
    respite::config::parse_pushed(text, "translated")
        .map(|_| ())
        .map_err(|e| e.reason())
}

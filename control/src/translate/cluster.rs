//! Envoy `Cluster` → one `[[clusters]]` entry (without `hosts`) and where its hosts come from.
//! Field semantics: Envoy's `cluster.proto` and its redis docs (`redis.rst` "Configuration").

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisProtocolOptions;
use envoy_types::pb::google::protobuf::Any;

use respite::config::ClusterType;
use respite::config::credentials::RawCredential;
use respite::config::raw::{RawCluster, RawDuration, RawTcpKeepalive, unspanned};

use super::fields::{count, data_source, decode, positive_duration, seconds, socket_address};
use super::{ClusterDraft, HostSource, REDIS_CLUSTER_TYPE_NAME, REDIS_PROTOCOL_OPTIONS_TYPE};

/// Envoy's `connect_timeout` default (cluster.proto: "If not set, a default value of 5s will be
/// used"); written explicitly because Respite's own default is 1s.
const ENVOY_CONNECT_TIMEOUT: &str = "5s";

/// The `typed_extension_protocol_options` key of the Redis protocol options (redis_proxy.proto,
/// comment on `RedisProtocolOptions`).
const REDIS_PROTOCOL_OPTIONS_KEY: &str = "envoy.filters.network.redis_proxy";
/// Keys that name the redis_proxy filter: the current name and the legacy one (Envoy's
/// `extensions/filters/network/well_known_names` kept `envoy.redis_proxy` as a deprecated
/// alias; its docs and older configs use it).
const REDIS_PROTOCOL_OPTIONS_KEYS: [&str; 2] = [REDIS_PROTOCOL_OPTIONS_KEY, "envoy.redis_proxy"];

/// What kind of cluster the discovery settings make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// STATIC / STRICT_DNS / LOGICAL_DNS: inline hosts (names resolved by the data plane).
    Static,
    /// EDS: hosts from a ClusterLoadAssignment.
    Eds,
    /// `envoy.clusters.redis`: seeds inline, slots from CLUSTER SLOTS.
    RedisCluster,
}

/// See [`super::cluster`].
pub fn translate(c: &Cluster) -> Result<ClusterDraft, String> {
    if c.name.is_empty() {
        return Err("name: required".into());
    }
    if !c.transport_socket_matches.is_empty() {
        return Err(format!(
            "transport_socket_matches: {} (one transport_socket for every host)",
            super::tls::NOT_SUPPORTED
        ));
    }
    let mut t = RawCluster::new(c.name.clone(), ClusterType::Static);
    if let Some(ts) = &c.transport_socket {
        t.tls = super::tls::upstream(ts, "transport_socket", &c.name)?.map(unspanned);
    }
    let kind = discovery(c, &mut t)?;
    let timeout = match &c.connect_timeout {
        Some(d) => positive_duration(d, "connect_timeout")?,
        None => RawDuration::Text(ENVOY_CONNECT_TIMEOUT.into()),
    };
    t.connect_timeout = Some(unspanned(timeout));
    super::lb::policy(c, kind, &mut t)?;
    super::health::health_checks(c, &mut t)?;
    super::health::outlier_detection(c, &mut t)?;
    protocol_options(c, &mut t)?;
    limits(c, &mut t)?;

    let hosts = match kind {
        Kind::Eds => {
            let service = c
                .eds_cluster_config
                .as_ref()
                .map(|e| e.service_name.as_str())
                .filter(|n| !n.is_empty())
                .unwrap_or(&c.name);
            HostSource::Eds(service.to_owned())
        }
        Kind::Static | Kind::RedisCluster => {
            let Some(cla) = &c.load_assignment else {
                return Err("load_assignment: required (the cluster's hosts)".into());
            };
            let hosts =
                super::endpoints::translate(cla).map_err(|e| format!("load_assignment.{e}"))?;
            if hosts.is_empty() {
                return Err(
                    "load_assignment: no usable endpoint (a static cluster needs at least \
                            one host)"
                        .into(),
                );
            }
            if t.cluster_type == ClusterType::LogicalDns && hosts.len() != 1 {
                return Err(format!(
                    "load_assignment: {} endpoints; a LOGICAL_DNS cluster takes exactly one host \
                     (as in Envoy)",
                    hosts.len()
                ));
            }
            HostSource::Inline(hosts)
        }
    };
    Ok(ClusterDraft {
        name: c.name.clone(),
        cluster: t,
        hosts,
    })
}

/// Discovery type → `type`. STRICT_DNS and LOGICAL_DNS become `strict_dns` / `logical_dns`,
/// which the data plane resolves and re-resolves itself ([`super::dns`]).
fn discovery(c: &Cluster, t: &mut RawCluster) -> Result<Kind, String> {
    match &c.cluster_discovery_type {
        // The proto default of `type` is STATIC.
        None => {
            t.cluster_type = ClusterType::Static;
            Ok(Kind::Static)
        }
        Some(ClusterDiscoveryType::Type(v)) => match DiscoveryType::try_from(*v) {
            Ok(DiscoveryType::Static) => {
                t.cluster_type = ClusterType::Static;
                Ok(Kind::Static)
            }
            Ok(DiscoveryType::StrictDns) => {
                t.cluster_type = ClusterType::StrictDns;
                super::dns::settings(c, t)?;
                Ok(Kind::Static)
            }
            Ok(DiscoveryType::LogicalDns) => {
                t.cluster_type = ClusterType::LogicalDns;
                super::dns::settings(c, t)?;
                Ok(Kind::Static)
            }
            Ok(DiscoveryType::Eds) => {
                t.cluster_type = ClusterType::Eds;
                Ok(Kind::Eds)
            }
            Ok(other) => Err(format!(
                "type: {} is not supported (STATIC, STRICT_DNS, LOGICAL_DNS, EDS or \
                 cluster_type envoy.clusters.redis)",
                other.as_str_name()
            )),
            Err(_) => Err(format!("type: unknown value {v}")),
        },
        Some(ClusterDiscoveryType::ClusterType(ct)) => {
            // Envoy picks the cluster factory by the typed_config type or by the name; a
            // redis name with another type is refused by `redis_cluster::config`, naming it.
            let by_type = ct.typed_config.as_ref().and_then(super::fields::inner_type);
            let redis = ct.name == REDIS_CLUSTER_TYPE_NAME
                || by_type.as_deref() == Some(super::redis_cluster::REDIS_CLUSTER_CONFIG_TYPE);
            if !redis {
                return Err(format!(
                    "cluster_type.name: \"{}\" is not supported (only {REDIS_CLUSTER_TYPE_NAME})",
                    ct.name
                ));
            }
            t.cluster_type = ClusterType::RedisCluster;
            super::redis_cluster::config(ct.typed_config.as_ref(), t)?;
            Ok(Kind::RedisCluster)
        }
    }
}

/// `typed_extension_protocol_options` → upstream AUTH. Envoy picks the options' factory by the
/// value's type, so an entry is the Redis protocol options when its (possibly `TypedStruct`-
/// wrapped) type is `RedisProtocolOptions`, whatever its key, or when its key is a redis_proxy
/// name (the current one or the legacy `envoy.redis_proxy`; a bare `Struct` names no type).
/// Any other entry is refused by key: options Respite does not understand must not vanish
/// (Envoy rejects an unknown key too), and a dropped AUTH would answer every command NOAUTH.
fn protocol_options(c: &Cluster, t: &mut RawCluster) -> Result<(), String> {
    let mut keys: Vec<&String> = c.typed_extension_protocol_options.keys().collect();
    keys.sort();
    let mut found: Option<String> = None;
    for key in keys {
        let Some(any) = c.typed_extension_protocol_options.get(key) else {
            continue;
        };
        let p = format!("typed_extension_protocol_options[\"{key}\"]");
        let inner = super::fields::inner_type(any);
        let redis = match inner.as_deref() {
            Some(ty) => ty == REDIS_PROTOCOL_OPTIONS_TYPE,
            None => REDIS_PROTOCOL_OPTIONS_KEYS.contains(&key.as_str()),
        };
        if !redis {
            return Err(format!(
                "{p}: protocol options of type \"{}\" are not supported by respite (only \
                 RedisProtocolOptions, under {REDIS_PROTOCOL_OPTIONS_KEY})",
                inner.as_deref().unwrap_or(&any.type_url)
            ));
        }
        if let Some(first) = &found {
            return Err(format!(
                "{p}: RedisProtocolOptions are already given under \"{first}\" (one set per \
                 cluster)"
            ));
        }
        found = Some(key.clone());
        redis_options(any, &p, t)?;
    }
    Ok(())
}

/// One `RedisProtocolOptions` entry (at `p`) → the cluster's AUTH keys, and its
/// `credentials` → `[[clusters.credentials]]` in order (the data plane takes the first entry
/// matching a host, as Envoy does; it refuses a DNS name on a cluster whose hosts are matched
/// by IP).
fn redis_options(any: &Any, p: &str, t: &mut RawCluster) -> Result<(), String> {
    let o: RedisProtocolOptions = decode(any, REDIS_PROTOCOL_OPTIONS_TYPE, p)?;
    if o.aws_iam.is_some() {
        return Err(format!(
            "{p}.aws_iam: AWS IAM authentication is not supported"
        ));
    }
    if !o.credentials.is_empty() {
        let mut out = Vec::with_capacity(o.credentials.len());
        for (i, c) in o.credentials.iter().enumerate() {
            let cp = format!("{p}.credentials[{i}]");
            let address = socket_address(c.address.as_ref(), &format!("{cp}.address"))?;
            let auth_password = match &c.auth_password {
                Some(ds) => Some(unspanned(data_source(ds, &format!("{cp}.auth_password"))?)),
                None => None,
            };
            let auth_username = match &c.auth_username {
                Some(ds) => Some(unspanned(data_source(ds, &format!("{cp}.auth_username"))?)),
                None => None,
            };
            out.push(unspanned(RawCredential {
                address: unspanned(address),
                auth_username,
                auth_password,
            }));
        }
        t.credentials = Some(unspanned(out));
    }
    if let Some(ds) = &o.auth_password {
        let password = data_source(ds, &format!("{p}.auth_password"))?;
        t.auth_password = Some(unspanned(password));
    }
    if let Some(ds) = &o.auth_username {
        let user = data_source(ds, &format!("{p}.auth_username"))?;
        t.auth_username = Some(unspanned(user));
    }
    Ok(())
}

/// `circuit_breakers` and `upstream_connection_options`.
///
/// `circuit_breakers.thresholds[0].max_pending_requests` → `max_pending_requests`, which Respite
/// counts per host and worker (no shared counter), where Envoy counts per cluster: the same
/// number admits up to workers × hosts times as many queued requests. The other thresholds
/// (connections, requests, retries) have no Respite counterpart and are ignored: Respite opens a
/// fixed `connections_per_host` and does not retry.
fn limits(c: &Cluster, t: &mut RawCluster) -> Result<(), String> {
    if let Some(n) = c
        .circuit_breakers
        .as_ref()
        .and_then(|cb| cb.thresholds.first())
        .and_then(|th| th.max_pending_requests)
    {
        if n.value == 0 {
            return Err(
                "circuit_breakers.thresholds[0].max_pending_requests: must be at least 1".into(),
            );
        }
        t.max_pending_requests = Some(unspanned(count(n.value)));
    }
    if let Some(ka) = c
        .upstream_connection_options
        .as_ref()
        .and_then(|o| o.tcp_keepalive.as_ref())
    {
        t.tcp_keepalive = Some(unspanned(RawTcpKeepalive {
            keepalive_time: ka.keepalive_time.map(|v| unspanned(seconds(v.value))),
            keepalive_interval: ka.keepalive_interval.map(|v| unspanned(seconds(v.value))),
            keepalive_probes: ka.keepalive_probes.map(|v| unspanned(v.value)),
        }));
    }
    Ok(())
}

//! Envoy `Listener` with the `envoy.filters.network.redis_proxy` filter → one `[[listeners]]`
//! entry. Field semantics: Envoy's `redis_proxy.proto`.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::listener::v3::{Listener, filter, listener_filter};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisProxy;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::{
    ConnPoolSettings, PrefixRoutes, ProtocolVersion, RedisFault, conn_pool_settings::ReadPolicy,
    prefix_routes, redis_fault::RedisFaultType,
};
use respite::config::raw::{
    RawDownstreamTls, RawFault, RawListener, RawMirrorPolicy, RawPrefixRoutes,
    RawReadCommandPolicy, RawRoute, unspanned,
};
use respite::config::{
    FaultType, ProtocolVersion as DataPlaneProtocolVersion, ReadPolicy as DataPlaneReadPolicy,
};

use super::fields::{count, data_source, decode, positive_duration, socket_address};
use super::{ListenerDraft, REDIS_PROXY_FILTER, REDIS_PROXY_TYPE};

/// See [`super::listener`].
pub fn translate(l: &Listener) -> Result<ListenerDraft, String> {
    if l.name.is_empty() {
        return Err("name: required".into());
    }
    unsupported_listener_fields(l)?;
    listener_filters(l)?;
    let address = socket_address(l.address.as_ref(), "address")?;
    let (proxy, tls) = redis_proxy(l)?;

    let mut clusters = BTreeSet::new();
    let mut listener = proxy_fields(&proxy, &l.name, address, &mut clusters)?;
    listener.tls = tls.map(unspanned);
    let connection_rate_limit_per_sec = connection_rate_limit(&proxy)?;
    let external_auth_cluster = match &proxy.external_auth_provider {
        Some(e) => {
            let (raw, target) =
                super::external_auth::translate(e, "redis_proxy.external_auth_provider")?;
            listener.external_auth = Some(unspanned(raw));
            match target {
                super::external_auth::AuthTarget::Cluster(c) => Some(c),
                super::external_auth::AuthTarget::Address(_) => None,
            }
        }
        None => None,
    };
    Ok(ListenerDraft {
        name: l.name.clone(),
        listener,
        clusters,
        connection_rate_limit_per_sec,
        external_auth_cluster,
    })
}

/// `settings.connection_rate_limit.connection_rate_limit_per_sec`, carried to the clusters by
/// [`super::render`]. Envoy's proto requires it above 0 (`gt: 0`); the data plane would read 0
/// as unlimited, so it is refused instead.
fn connection_rate_limit(proxy: &RedisProxy) -> Result<Option<u32>, String> {
    let Some(r) = proxy
        .settings
        .as_ref()
        .and_then(|s| s.connection_rate_limit)
    else {
        return Ok(None);
    };
    if r.connection_rate_limit_per_sec == 0 {
        return Err(
            "redis_proxy.settings.connection_rate_limit.connection_rate_limit_per_sec: must be \
             above 0"
                .into(),
        );
    }
    Ok(Some(r.connection_rate_limit_per_sec))
}

/// Listener-level features that change what the listener accepts and that Respite does not have.
fn unsupported_listener_fields(l: &Listener) -> Result<(), String> {
    let checks: [(bool, &str); 7] = [
        (
            !l.additional_addresses.is_empty(),
            "additional_addresses: one address per listener",
        ),
        (
            l.default_filter_chain.is_some(),
            "default_filter_chain: filter chain matching is not supported",
        ),
        (
            l.filter_chain_matcher.is_some(),
            "filter_chain_matcher: filter chain matching is not supported",
        ),
        (
            l.fcds_config.is_some(),
            "fcds_config: filter chain discovery is not supported",
        ),
        (l.api_listener.is_some(), "api_listener: not a TCP listener"),
        (
            l.listener_specifier.is_some(),
            "internal_listener: internal listeners are not supported",
        ),
        (
            l.udp_listener_config.is_some(),
            "udp_listener_config: Redis runs over TCP",
        ),
    ];
    match checks.into_iter().find(|(bad, _)| *bad) {
        Some((_, reason)) => Err(reason.into()),
        None => Ok(()),
    }
}

/// Envoy's `tls_inspector` type and its names (the current one and the deprecated one).
const TLS_INSPECTOR_TYPE: &str = "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";
const TLS_INSPECTOR_NAMES: [&str; 2] = [
    "envoy.filters.listener.tls_inspector",
    "envoy.listener.tls_inspector",
];

/// `listener_filters`: only Envoy's `tls_inspector` is accepted, and ignored (logged). It reads
/// the ClientHello so that a filter chain can be chosen by SNI or ALPN; Respite has one chain
/// and its TLS reads the SNI itself, so the inspector would choose nothing (real Envoy TLS
/// configs carry it out of habit). Every other listener filter (proxy_protocol, original_dst,
/// ...) changes what the listener accepts: refused by name. A filter is recognised by its
/// `typed_config` type, else by its name.
fn listener_filters(l: &Listener) -> Result<(), String> {
    for (i, f) in l.listener_filters.iter().enumerate() {
        let p = format!("listener_filters[{i}]");
        let inspector = match &f.config_type {
            Some(listener_filter::ConfigType::TypedConfig(any)) => {
                any.type_url.rsplit('/').next() == Some(TLS_INSPECTOR_TYPE)
            }
            Some(listener_filter::ConfigType::ConfigDiscovery(_)) => {
                return Err(format!(
                    "{p}.config_discovery: listener filter discovery is not supported by respite"
                ));
            }
            None => TLS_INSPECTOR_NAMES.contains(&f.name.as_str()),
        };
        if !inspector {
            return Err(format!(
                "{p} ({}): listener filters are not supported by respite (only \
                 envoy.filters.listener.tls_inspector, which is ignored)",
                f.name
            ));
        }
        tracing::info!(
            listener = %l.name,
            "{p} ({}): ignored (one filter chain; respite's TLS reads the SNI itself)",
            f.name
        );
    }
    Ok(())
}

/// The one filter chain's one filter, decoded, and the chain's TLS (`transport_socket`,
/// [`super::tls::downstream`]). The filter is matched by its `typed_config` type URL (what Envoy
/// itself uses to pick the factory); the filter name is only checked for a helpful message.
///
/// Chains chosen by SNI (`filter_chain_match.server_names`) are refused rather than folded into
/// `[[listeners.tls.sni]]`: Respite takes one chain, and Envoy's SNI chains also need the
/// `tls_inspector` listener filter, which Respite accepts only because it then chooses nothing.
#[allow(deprecated)] // use_proxy_proto: still sent by older control planes.
fn redis_proxy(l: &Listener) -> Result<(RedisProxy, Option<RawDownstreamTls>), String> {
    let sni_chain = l.filter_chains.iter().position(|c| {
        c.filter_chain_match
            .as_ref()
            .is_some_and(|m| !m.server_names.is_empty())
    });
    if let Some(i) = sni_chain {
        return Err(format!(
            "filter_chains[{i}].filter_chain_match.server_names: choosing a filter chain (or \
             its certificate) by SNI is not supported by respite (one filter chain with one \
             certificate per listener)"
        ));
    }
    let chain = match l.filter_chains.as_slice() {
        [c] => c,
        [] => return Err("filter_chains: required (one chain with the redis_proxy filter)".into()),
        _ => {
            return Err(format!(
                "filter_chains: {} chains; Respite takes exactly one (no filter chain matching)",
                l.filter_chains.len()
            ));
        }
    };
    let f = "filter_chains[0]";
    if chain.filter_chain_match.is_some() {
        return Err(format!(
            "{f}.filter_chain_match: filter chain matching is not supported"
        ));
    }
    let tls = match &chain.transport_socket {
        Some(ts) => super::tls::downstream(ts, &format!("{f}.transport_socket"))?,
        None => None,
    };
    // Without TLS the timeout bounds a connect that is already done: no effect.
    if tls.is_some()
        && chain
            .transport_socket_connect_timeout
            .is_some_and(|d| d.seconds != 0 || d.nanos != 0)
    {
        return Err(format!(
            "{f}.transport_socket_connect_timeout: not supported by respite (the data plane's \
             TLS handshake timeout is fixed)"
        ));
    }
    if chain.use_proxy_proto.is_some_and(|v| v.value) {
        return Err(format!(
            "{f}.use_proxy_proto: PROXY protocol is not supported"
        ));
    }
    let filter = match chain.filters.as_slice() {
        [one] => one,
        [] => return Err(format!("{f}.filters: required (the redis_proxy filter)")),
        many => {
            let names: Vec<&str> = many.iter().map(|x| x.name.as_str()).collect();
            return Err(format!(
                "{f}.filters: only {REDIS_PROXY_FILTER} is supported, alone (got {names:?})"
            ));
        }
    };
    let proxy = match &filter.config_type {
        Some(filter::ConfigType::TypedConfig(any))
            if super::fields::inner_type(any).as_deref() == Some(REDIS_PROXY_TYPE) =>
        {
            decode(
                any,
                REDIS_PROXY_TYPE,
                &format!("{f}.filters[0].typed_config"),
            )
        }
        Some(filter::ConfigType::TypedConfig(any)) => Err(format!(
            "{f}.filters[0]: network filter \"{}\" ({}) is not supported; only \
             {REDIS_PROXY_FILTER}",
            filter.name, any.type_url
        )),
        Some(filter::ConfigType::ConfigDiscovery(_)) => Err(format!(
            "{f}.filters[0].config_discovery: extension config discovery is not supported"
        )),
        None => Err(format!(
            "{f}.filters[0].typed_config: required ({REDIS_PROXY_TYPE})"
        )),
    }?;
    Ok((proxy, tls))
}

/// `RedisProxy` → the listener. The deprecated single `downstream_auth_password` is still read
/// (older configs) and comes first in `downstream_auth_passwords`.
#[allow(deprecated)]
fn proxy_fields(
    proxy: &RedisProxy,
    name: &str,
    address: String,
    clusters: &mut BTreeSet<String>,
) -> Result<RawListener, String> {
    let p = "redis_proxy";
    if proxy.stat_prefix.is_empty() {
        return Err(format!("{p}.stat_prefix: required"));
    }
    let Some(settings) = &proxy.settings else {
        return Err(format!("{p}.settings: required (op_timeout)"));
    };
    let mut t = settings_fields(settings, name, address)?;
    t.stat_prefix = Some(unspanned(proxy.stat_prefix.clone()));
    // Only the unit of command.<cmd>.latency changes; the data plane has the same switch.
    t.latency_in_micros = proxy.latency_in_micros;
    // RESP2 (0) is also the proto default, so it cannot be told from unset: it leaves the key
    // unset (per-connection HELLO negotiation, which accepts HELLO 3 where Envoy refuses it).
    t.protocol_version = match ProtocolVersion::try_from(proxy.protocol_version) {
        Ok(ProtocolVersion::Resp2) => None,
        Ok(ProtocolVersion::Resp3) => Some(unspanned(DataPlaneProtocolVersion::Resp3)),
        Err(_) => {
            return Err(format!(
                "{p}.protocol_version: unknown value {}",
                proxy.protocol_version
            ));
        }
    };

    if let Some(ds) = &proxy.downstream_auth_password {
        let password = data_source(ds, &format!("{p}.downstream_auth_password"))?;
        t.downstream_auth_passwords.push(unspanned(password));
    }
    for (i, ds) in proxy.downstream_auth_passwords.iter().enumerate() {
        let password = data_source(ds, &format!("{p}.downstream_auth_passwords[{i}]"))?;
        t.downstream_auth_passwords.push(unspanned(password));
    }
    if let Some(ds) = &proxy.downstream_auth_username {
        let user = data_source(ds, &format!("{p}.downstream_auth_username"))?;
        t.downstream_auth_username = Some(unspanned(user));
    }
    t.custom_commands = proxy
        .custom_commands
        .iter()
        .map(|c| unspanned(c.clone()))
        .collect();
    t.faults = proxy
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| fault(f, &format!("{p}.faults[{i}]")).map(unspanned))
        .collect::<Result<Vec<_>, _>>()?;
    match &proxy.prefix_routes {
        Some(pr) => {
            let routes = routes(pr, &format!("{p}.prefix_routes"), clusters)?;
            t.prefix_routes = Some(unspanned(routes));
        }
        None => {
            return Err(format!(
                "{p}.prefix_routes: required (Respite needs routes or a catch_all_route; the \
                 removed top-level cluster field is not supported)"
            ));
        }
    }
    Ok(t)
}

/// `ConnPoolSettings` → the listener `name` on `address`, with its connection settings.
///
/// - `enable_redirection` is accepted either way: Respite always follows `MOVED`/`ASK` on a
///   `redis_cluster` cluster (what Envoy's Redis Cluster docs require the flag for) and never
///   on other clusters.
/// - `dns_cache_config` → `[listeners.dns_cache]` ([`super::dns::cache`]).
/// - `connection_rate_limit` is not a listener key: [`translate`] carries it to the clusters.
/// - `LOCAL_ZONE_AFFINITY*` map to `local_zone_affinity*`; the listener's `local_zone` comes
///   from the node (`super::zone::set_local_zone`), not from the Listener.
/// - `read_policy` and `max_upstream_unknown_connections` are written only when set (non-MASTER,
///   present); [`super::render`] drops them from a listener that reaches no `redis_cluster`
///   cluster, where Envoy ignores them too.
fn settings_fields(
    c: &ConnPoolSettings,
    name: &str,
    address: String,
) -> Result<RawListener, String> {
    let p = "redis_proxy.settings";
    let Some(op) = &c.op_timeout else {
        return Err(format!("{p}.op_timeout: required"));
    };
    let op_timeout = positive_duration(op, &format!("{p}.op_timeout"))?;
    let mut t = RawListener::new(name.to_owned(), address, op_timeout);
    if let Some(d) = &c.dns_cache_config {
        t.dns_cache = Some(unspanned(super::dns::cache(
            d,
            &format!("{p}.dns_cache_config"),
        )?));
    }
    t.enable_hashtagging = c.enable_hashtagging;
    t.max_buffer_size_before_flush = count(c.max_buffer_size_before_flush);
    if let Some(d) = &c.buffer_flush_timeout {
        let timeout = super::fields::duration(d, &format!("{p}.buffer_flush_timeout"))?;
        t.buffer_flush_timeout = Some(unspanned(timeout));
    }
    if let Some(n) = &c.max_upstream_unknown_connections {
        t.max_upstream_unknown_connections = Some(unspanned(count(n.value)));
    }
    t.enable_command_stats = c.enable_command_stats;
    let policy = match ReadPolicy::try_from(c.read_policy) {
        Ok(ReadPolicy::Master) => None,
        Ok(ReadPolicy::PreferMaster) => Some(DataPlaneReadPolicy::PreferPrimary),
        Ok(ReadPolicy::Replica) => Some(DataPlaneReadPolicy::Replica),
        Ok(ReadPolicy::PreferReplica) => Some(DataPlaneReadPolicy::PreferReplica),
        Ok(ReadPolicy::Any) => Some(DataPlaneReadPolicy::Any),
        // The proxy's zone (`node.locality.zone`) is set by [`super::zone::set_local_zone`].
        Ok(ReadPolicy::LocalZoneAffinity) => Some(DataPlaneReadPolicy::LocalZoneAffinity),
        Ok(ReadPolicy::LocalZoneAffinityReplicasAndPrimary) => {
            Some(DataPlaneReadPolicy::LocalZoneAffinityReplicasAndPrimary)
        }
        Err(_) => {
            return Err(format!("{p}.read_policy: unknown value {}", c.read_policy));
        }
    };
    t.read_policy = policy.map(unspanned);
    Ok(t)
}

/// `RedisFault` → one `[[listeners.faults]]` entry; `fault_enabled`'s runtime key is ignored
/// (see [`super::fields::runtime_percent`]).
fn fault(f: &RedisFault, p: &str) -> Result<RawFault, String> {
    let fault_type = match RedisFaultType::try_from(f.fault_type) {
        Ok(RedisFaultType::Delay) => FaultType::Delay,
        Ok(RedisFaultType::Error) => FaultType::Error,
        Err(_) => return Err(format!("{p}.fault_type: unknown value {}", f.fault_type)),
    };
    let Some(enabled) = &f.fault_enabled else {
        return Err(format!("{p}.fault_enabled: required"));
    };
    let pct = super::fields::runtime_percent(Some(enabled), &format!("{p}.fault_enabled"))?;
    let delay = match &f.delay {
        Some(d) => Some(unspanned(super::fields::duration(
            d,
            &format!("{p}.delay"),
        )?)),
        None => None,
    };
    Ok(RawFault {
        fault_type: unspanned(fault_type),
        fault_enabled: unspanned(pct),
        delay,
        commands: f.commands.iter().map(|c| unspanned(c.clone())).collect(),
    })
}

/// `PrefixRoutes` → `[listeners.prefix_routes]`, collecting every cluster named.
fn routes(
    pr: &PrefixRoutes,
    p: &str,
    clusters: &mut BTreeSet<String>,
) -> Result<RawPrefixRoutes, String> {
    let routes = pr
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| route(r, &format!("{p}.routes[{i}]"), false, clusters).map(unspanned))
        .collect::<Result<Vec<_>, _>>()?;
    let catch_all_route = match &pr.catch_all_route {
        Some(r) => Some(unspanned(route(
            r,
            &format!("{p}.catch_all_route"),
            true,
            clusters,
        )?)),
        None if pr.routes.is_empty() => {
            return Err(format!(
                "{p}: needs routes or a catch_all_route (Envoy requires catch_all_route when \
                 routes is empty)"
            ));
        }
        None => None,
    };
    Ok(RawPrefixRoutes {
        routes,
        case_insensitive: pr.case_insensitive,
        catch_all_route,
    })
}

/// One `Route`. The catch-all route has no prefix to match or remove, so its `prefix` and
/// `remove_prefix` are not copied (Envoy ignores them there too).
fn route(
    r: &prefix_routes::Route,
    p: &str,
    catch_all: bool,
    clusters: &mut BTreeSet<String>,
) -> Result<RawRoute, String> {
    if r.cluster.is_empty() {
        return Err(format!("{p}.cluster: required"));
    }
    clusters.insert(r.cluster.clone());
    let mut t = RawRoute::new(r.cluster.clone());
    if !catch_all {
        t.prefix = Some(unspanned(r.prefix.clone()));
        t.remove_prefix = Some(unspanned(r.remove_prefix));
    }
    if !r.key_formatter.is_empty() {
        t.key_formatter = Some(unspanned(r.key_formatter.clone()));
    }
    if let Some(rc) = &r.read_command_policy {
        if rc.cluster.is_empty() {
            return Err(format!("{p}.read_command_policy.cluster: required"));
        }
        clusters.insert(rc.cluster.clone());
        t.read_command_policy = Some(unspanned(RawReadCommandPolicy {
            cluster: unspanned(rc.cluster.clone()),
        }));
    }
    for (i, m) in r.request_mirror_policy.iter().enumerate() {
        let mp = format!("{p}.request_mirror_policy[{i}]");
        if m.cluster.is_empty() {
            return Err(format!("{mp}.cluster: required"));
        }
        if m.cluster == r.cluster {
            // Envoy accepts it and sends each mirrored command to the cluster a second time.
            tracing::warn!(
                route = %p,
                prefix = %r.prefix,
                cluster = %m.cluster,
                "request_mirror_policy mirrors the route onto its own cluster: every mirrored \
                 command is sent to it twice (a mirrored write is applied twice)"
            );
        }
        clusters.insert(m.cluster.clone());
        let pct = super::fields::runtime_percent(
            m.runtime_fraction.as_ref(),
            &format!("{mp}.runtime_fraction"),
        )?;
        t.request_mirror_policy.push(unspanned(RawMirrorPolicy {
            cluster: unspanned(m.cluster.clone()),
            exclude_read_commands: m.exclude_read_commands,
            runtime_fraction: Some(unspanned(pct)),
        }));
    }
    Ok(t)
}

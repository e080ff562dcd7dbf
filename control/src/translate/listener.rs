//! Envoy `Listener` with the `envoy.filters.network.redis_proxy` filter → one `[[listeners]]`
//! table. Field semantics: `redis_proxy.proto` (envoy-redis-proxy.md §1.1–1.4) and xds-client.md
//! §3.2.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisProxy;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::redis_proxy::{
    ConnPoolSettings, PrefixRoutes, RedisFault, conn_pool_settings::ReadPolicy, prefix_routes,
    redis_fault::RedisFaultType,
};

use super::fields::{data_source, decode, int, positive_duration, s, socket_address};
use super::{ListenerDraft, REDIS_PROXY_FILTER, REDIS_PROXY_TYPE};

/// See [`super::listener`].
pub fn translate(l: &Listener) -> Result<ListenerDraft, String> {
    if l.name.is_empty() {
        return Err("name: required".into());
    }
    unsupported_listener_fields(l)?;
    let address = socket_address(l.address.as_ref(), "address")?;
    let proxy = redis_proxy(l)?;

    let mut t = toml::Table::new();
    let mut clusters = BTreeSet::new();
    t.insert("name".into(), s(&l.name));
    t.insert("address".into(), s(address));
    proxy_fields(&proxy, &mut t, &mut clusters)?;
    Ok(ListenerDraft {
        name: l.name.clone(),
        table: t,
        clusters,
    })
}

/// Listener-level features that change what the listener accepts and that Respite does not have.
fn unsupported_listener_fields(l: &Listener) -> Result<(), String> {
    let checks: [(bool, &str); 8] = [
        (
            !l.additional_addresses.is_empty(),
            "additional_addresses: one address per listener",
        ),
        (
            !l.listener_filters.is_empty(),
            "listener_filters: listener filters are not supported",
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

/// The one filter chain's one filter, decoded. Matched by its `typed_config` type URL (what Envoy
/// itself uses to pick the factory); the filter name is only checked for a helpful message.
#[allow(deprecated)] // use_proxy_proto: still sent by older control planes.
fn redis_proxy(l: &Listener) -> Result<RedisProxy, String> {
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
    if chain.transport_socket.is_some() {
        return Err(format!(
            "{f}.transport_socket: downstream TLS is not supported"
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
    match &filter.config_type {
        Some(filter::ConfigType::TypedConfig(any)) if any.type_url == REDIS_PROXY_TYPE => decode(
            any,
            REDIS_PROXY_TYPE,
            &format!("{f}.filters[0].typed_config"),
        ),
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
    }
}

/// `RedisProxy` → listener keys. The deprecated single `downstream_auth_password` is still read
/// (older configs) and comes first in `downstream_auth_passwords`.
#[allow(deprecated)]
fn proxy_fields(
    proxy: &RedisProxy,
    t: &mut toml::Table,
    clusters: &mut BTreeSet<String>,
) -> Result<(), String> {
    let p = "redis_proxy";
    if proxy.stat_prefix.is_empty() {
        return Err(format!("{p}.stat_prefix: required"));
    }
    t.insert("stat_prefix".into(), s(&proxy.stat_prefix));
    let Some(settings) = &proxy.settings else {
        return Err(format!("{p}.settings: required (op_timeout)"));
    };
    settings_fields(settings, t)?;
    // Only the unit of command.<cmd>.latency changes; the data plane has the same switch.
    t.insert(
        "latency_in_micros".into(),
        toml::Value::Boolean(proxy.latency_in_micros),
    );
    if proxy.external_auth_provider.is_some() {
        return Err(format!(
            "{p}.external_auth_provider: external (gRPC) AUTH is not supported; use \
             downstream_auth_passwords"
        ));
    }
    // RESP2 (0, the default) is what Respite speaks to upstreams; RESP3 enforcement (every
    // client must HELLO 3 first) is not implemented.
    if proxy.protocol_version != 0 {
        return Err(format!(
            "{p}.protocol_version: enforced RESP3 is not supported (Respite negotiates per \
             connection with HELLO)"
        ));
    }

    let mut passwords = Vec::new();
    if let Some(ds) = &proxy.downstream_auth_password {
        passwords.push(s(data_source(
            ds,
            &format!("{p}.downstream_auth_password"),
        )?));
    }
    for (i, ds) in proxy.downstream_auth_passwords.iter().enumerate() {
        passwords.push(s(data_source(
            ds,
            &format!("{p}.downstream_auth_passwords[{i}]"),
        )?));
    }
    if !passwords.is_empty() {
        t.insert(
            "downstream_auth_passwords".into(),
            toml::Value::Array(passwords),
        );
    }
    if let Some(ds) = &proxy.downstream_auth_username {
        let user = data_source(ds, &format!("{p}.downstream_auth_username"))?;
        t.insert("downstream_auth_username".into(), s(user));
    }
    if !proxy.custom_commands.is_empty() {
        t.insert(
            "custom_commands".into(),
            toml::Value::Array(proxy.custom_commands.iter().map(s).collect()),
        );
    }
    if !proxy.faults.is_empty() {
        let faults = proxy
            .faults
            .iter()
            .enumerate()
            .map(|(i, f)| fault(f, &format!("{p}.faults[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        t.insert("faults".into(), toml::Value::Array(faults));
    }
    match &proxy.prefix_routes {
        Some(pr) => {
            let table = routes(pr, &format!("{p}.prefix_routes"), clusters)?;
            t.insert("prefix_routes".into(), toml::Value::Table(table));
        }
        None => {
            return Err(format!(
                "{p}.prefix_routes: required (Respite needs routes or a catch_all_route; the \
                 removed top-level cluster field is not supported)"
            ));
        }
    }
    Ok(())
}

/// `ConnPoolSettings` → listener keys.
///
/// - `enable_redirection` is accepted either way: Respite always follows `MOVED`/`ASK` on a
///   `redis_cluster` cluster (what Envoy's Redis Cluster docs require the flag for) and never
///   on other clusters.
/// - `connection_rate_limit` is accepted and not copied: Respite limits reconnects per upstream
///   host on the cluster (`connection_rate_limit_per_sec`, default 100/s over all workers), which
///   a listener cannot set, because one host may serve several listeners.
/// - `read_policy` and `max_upstream_unknown_connections` are written only when set (non-MASTER,
///   present); [`super::render`] drops them from a listener that reaches no `redis_cluster`
///   cluster, where Envoy ignores them too.
fn settings_fields(c: &ConnPoolSettings, t: &mut toml::Table) -> Result<(), String> {
    let p = "redis_proxy.settings";
    let Some(op) = &c.op_timeout else {
        return Err(format!("{p}.op_timeout: required"));
    };
    t.insert(
        "op_timeout".into(),
        s(positive_duration(op, &format!("{p}.op_timeout"))?),
    );
    if c.dns_cache_config.is_some() {
        return Err(format!(
            "{p}.dns_cache_config: resolving hostnames in MOVED/ASK through a DNS cache is not \
             supported"
        ));
    }
    t.insert(
        "enable_hashtagging".into(),
        toml::Value::Boolean(c.enable_hashtagging),
    );
    t.insert(
        "max_buffer_size_before_flush".into(),
        int(c.max_buffer_size_before_flush),
    );
    if let Some(d) = &c.buffer_flush_timeout {
        t.insert(
            "buffer_flush_timeout".into(),
            s(super::fields::duration(
                d,
                &format!("{p}.buffer_flush_timeout"),
            )?),
        );
    }
    if let Some(n) = &c.max_upstream_unknown_connections {
        t.insert("max_upstream_unknown_connections".into(), int(n.value));
    }
    t.insert(
        "enable_command_stats".into(),
        toml::Value::Boolean(c.enable_command_stats),
    );
    let policy = match ReadPolicy::try_from(c.read_policy) {
        Ok(ReadPolicy::Master) => None,
        Ok(ReadPolicy::PreferMaster) => Some("prefer_primary"),
        Ok(ReadPolicy::Replica) => Some("replica"),
        Ok(ReadPolicy::PreferReplica) => Some("prefer_replica"),
        Ok(ReadPolicy::Any) => Some("any"),
        Ok(
            other @ (ReadPolicy::LocalZoneAffinity
            | ReadPolicy::LocalZoneAffinityReplicasAndPrimary),
        ) => {
            return Err(format!(
                "{p}.read_policy: {} is not supported (availability-zone routing)",
                other.as_str_name()
            ));
        }
        Err(_) => {
            return Err(format!("{p}.read_policy: unknown value {}", c.read_policy));
        }
    };
    if let Some(policy) = policy {
        t.insert("read_policy".into(), s(policy));
    }
    Ok(())
}

/// `RedisFault` → one `[[listeners.faults]]` table; `fault_enabled`'s runtime key is ignored
/// (see [`super::fields::runtime_percent`]).
fn fault(f: &RedisFault, p: &str) -> Result<toml::Value, String> {
    let mut t = toml::Table::new();
    let kind = match RedisFaultType::try_from(f.fault_type) {
        Ok(RedisFaultType::Delay) => "delay",
        Ok(RedisFaultType::Error) => "error",
        Err(_) => return Err(format!("{p}.fault_type: unknown value {}", f.fault_type)),
    };
    t.insert("fault_type".into(), s(kind));
    let Some(enabled) = &f.fault_enabled else {
        return Err(format!("{p}.fault_enabled: required"));
    };
    let pct = super::fields::runtime_percent(Some(enabled), &format!("{p}.fault_enabled"))?;
    t.insert("fault_enabled".into(), toml::Value::Float(pct));
    if let Some(d) = &f.delay {
        t.insert(
            "delay".into(),
            s(super::fields::duration(d, &format!("{p}.delay"))?),
        );
    }
    if !f.commands.is_empty() {
        t.insert(
            "commands".into(),
            toml::Value::Array(f.commands.iter().map(s).collect()),
        );
    }
    Ok(toml::Value::Table(t))
}

/// `PrefixRoutes` → `[listeners.prefix_routes]`, collecting every cluster named.
fn routes(
    pr: &PrefixRoutes,
    p: &str,
    clusters: &mut BTreeSet<String>,
) -> Result<toml::Table, String> {
    let mut t = toml::Table::new();
    t.insert(
        "case_insensitive".into(),
        toml::Value::Boolean(pr.case_insensitive),
    );
    if !pr.routes.is_empty() {
        let rs = pr
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| route(r, &format!("{p}.routes[{i}]"), false, clusters))
            .collect::<Result<Vec<_>, _>>()?;
        t.insert("routes".into(), toml::Value::Array(rs));
    }
    match &pr.catch_all_route {
        Some(r) => {
            let c = route(r, &format!("{p}.catch_all_route"), true, clusters)?;
            t.insert("catch_all_route".into(), c);
        }
        None if pr.routes.is_empty() => {
            return Err(format!(
                "{p}: needs routes or a catch_all_route (Envoy requires catch_all_route when \
                 routes is empty)"
            ));
        }
        None => {}
    }
    Ok(t)
}

/// One `Route`. The catch-all route has no prefix to match or remove, so its `prefix` and
/// `remove_prefix` are not copied (Envoy ignores them there too).
fn route(
    r: &prefix_routes::Route,
    p: &str,
    catch_all: bool,
    clusters: &mut BTreeSet<String>,
) -> Result<toml::Value, String> {
    let mut t = toml::Table::new();
    if !catch_all {
        t.insert("prefix".into(), s(&r.prefix));
        t.insert(
            "remove_prefix".into(),
            toml::Value::Boolean(r.remove_prefix),
        );
    }
    if r.cluster.is_empty() {
        return Err(format!("{p}.cluster: required"));
    }
    clusters.insert(r.cluster.clone());
    t.insert("cluster".into(), s(&r.cluster));
    if !r.key_formatter.is_empty() {
        t.insert("key_formatter".into(), s(&r.key_formatter));
    }
    if let Some(rc) = &r.read_command_policy {
        if rc.cluster.is_empty() {
            return Err(format!("{p}.read_command_policy.cluster: required"));
        }
        clusters.insert(rc.cluster.clone());
        let mut rt = toml::Table::new();
        rt.insert("cluster".into(), s(&rc.cluster));
        t.insert("read_command_policy".into(), toml::Value::Table(rt));
    }
    if !r.request_mirror_policy.is_empty() {
        let mut ms = Vec::new();
        for (i, m) in r.request_mirror_policy.iter().enumerate() {
            let mp = format!("{p}.request_mirror_policy[{i}]");
            if m.cluster.is_empty() {
                return Err(format!("{mp}.cluster: required"));
            }
            clusters.insert(m.cluster.clone());
            let mut mt = toml::Table::new();
            mt.insert("cluster".into(), s(&m.cluster));
            mt.insert(
                "exclude_read_commands".into(),
                toml::Value::Boolean(m.exclude_read_commands),
            );
            let pct = super::fields::runtime_percent(
                m.runtime_fraction.as_ref(),
                &format!("{mp}.runtime_fraction"),
            )?;
            mt.insert("runtime_fraction".into(), toml::Value::Float(pct));
            ms.push(toml::Value::Table(mt));
        }
        t.insert("request_mirror_policy".into(), toml::Value::Array(ms));
    }
    Ok(toml::Value::Table(t))
}

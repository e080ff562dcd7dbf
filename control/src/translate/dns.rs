//! Envoy STRICT_DNS / LOGICAL_DNS clusters → `type = "strict_dns"` / `"logical_dns"` with
//! `dns_refresh_rate` and `dns_lookup_family` (Envoy `cluster.proto`). Names are never resolved
//! here: the data plane resolves them, at start and every `dns_refresh_rate`.
//!
//! The other DNS fields of a Cluster:
//! - `dns_jitter`: ignored with a warning (refreshes are not spread; harmless).
//! - `respect_dns_ttl`, `use_tcp_for_dns_lookups` (when true), `dns_failure_refresh_rate`,
//!   `dns_resolvers`, `dns_resolution_config`, `typed_dns_resolver_config` (when set): refused
//!   by name, "not supported by respite": the data plane looks names up through the system
//!   resolver (getaddrinfo, /etc/resolv.conf), which gives no TTL and takes no per-cluster
//!   resolver, and retries a failed name on `dns_refresh_rate`.
//!
//! On other cluster types these fields do nothing in Envoy either, and are left out.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::DnsLookupFamily as EnvoyFamily;

use envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig;
use respite::config::DnsLookupFamily;
use respite::config::raw::{RawCluster, RawDnsCache, unspanned};

use super::fields::positive_duration;

/// Why the resolver-related fields cannot be honoured.
const SYSTEM_RESOLVER: &str = "not supported by respite (names are looked up through the \
                               system resolver, getaddrinfo)";

/// Sets the DNS keys of `t` (a `strict_dns` / `logical_dns` cluster) from `c`.
///
/// Errors: a field named above as refused, a zero `dns_refresh_rate`, an unknown
/// `dns_lookup_family` value.
#[allow(deprecated)]
pub(super) fn settings(c: &Cluster, t: &mut RawCluster) -> Result<(), String> {
    if c.respect_dns_ttl {
        return Err(
            "respect_dns_ttl: not supported by respite (the system resolver, \
                    getaddrinfo, reports no TTL; names are resolved again every \
                    dns_refresh_rate)"
                .into(),
        );
    }
    if c.dns_failure_refresh_rate.is_some() {
        return Err(
            "dns_failure_refresh_rate: not supported by respite (a name that fails is \
                    retried every dns_refresh_rate)"
                .into(),
        );
    }
    if !c.dns_resolvers.is_empty() {
        return Err(format!("dns_resolvers: {SYSTEM_RESOLVER}"));
    }
    if c.use_tcp_for_dns_lookups {
        return Err(format!("use_tcp_for_dns_lookups: {SYSTEM_RESOLVER}"));
    }
    if c.dns_resolution_config.is_some() {
        return Err(format!("dns_resolution_config: {SYSTEM_RESOLVER}"));
    }
    if c.typed_dns_resolver_config.is_some() {
        return Err(format!("typed_dns_resolver_config: {SYSTEM_RESOLVER}"));
    }
    if c.dns_jitter.is_some() {
        tracing::warn!(
            cluster = %c.name,
            "dns_jitter: not supported by respite (ignored: refreshes are not spread)"
        );
    }
    if let Some(d) = &c.dns_refresh_rate {
        t.dns_refresh_rate = Some(unspanned(positive_duration(d, "dns_refresh_rate")?));
    }
    // Written always: the data plane's default is Envoy's (AUTO), but an explicit key says
    // what the import decided.
    t.dns_lookup_family = Some(unspanned(family(c.dns_lookup_family, "dns_lookup_family")?));
    Ok(())
}

/// Envoy's `DnsLookupFamily` value `v` (of field `field`) → the data plane's.
fn family(v: i32, field: &str) -> Result<DnsLookupFamily, String> {
    Ok(match EnvoyFamily::try_from(v) {
        Ok(EnvoyFamily::Auto) => DnsLookupFamily::Auto,
        Ok(EnvoyFamily::V4Only) => DnsLookupFamily::V4Only,
        Ok(EnvoyFamily::V6Only) => DnsLookupFamily::V6Only,
        Ok(EnvoyFamily::V4Preferred) => DnsLookupFamily::V4Preferred,
        Ok(EnvoyFamily::All) => DnsLookupFamily::All,
        Err(_) => return Err(format!("{field}: unknown value {v}")),
    })
}

/// `ConnPoolSettings.dns_cache_config` (at path `p`) → `[listeners.dns_cache]`: `name` is
/// taken (it only names the cache), `dns_refresh_rate`, `max_hosts` and `dns_lookup_family`
/// are mapped; every other field, when set, is refused by name: `host_ttl` (cached names are
/// never dropped while the cache has room), `dns_min_refresh_rate`, `dns_failure_refresh_rate`,
/// `disable_dns_refresh_on_failure`, `dns_query_timeout`, `dns_cache_circuit_breaker`,
/// `preresolve_hostnames`, `key_value_config`, `resolved_address_filter` and the resolver
/// fields (the system resolver is used).
#[allow(deprecated)]
pub(super) fn cache(d: &DnsCacheConfig, p: &str) -> Result<RawDnsCache, String> {
    let refused: [(&str, bool); 12] = [
        ("dns_min_refresh_rate", d.dns_min_refresh_rate.is_some()),
        ("host_ttl", d.host_ttl.is_some()),
        (
            "disable_dns_refresh_on_failure",
            d.disable_dns_refresh_on_failure,
        ),
        (
            "dns_failure_refresh_rate",
            d.dns_failure_refresh_rate.is_some(),
        ),
        (
            "dns_cache_circuit_breaker",
            d.dns_cache_circuit_breaker.is_some(),
        ),
        ("use_tcp_for_dns_lookups", d.use_tcp_for_dns_lookups),
        ("dns_resolution_config", d.dns_resolution_config.is_some()),
        (
            "typed_dns_resolver_config",
            d.typed_dns_resolver_config.is_some(),
        ),
        ("preresolve_hostnames", !d.preresolve_hostnames.is_empty()),
        ("dns_query_timeout", d.dns_query_timeout.is_some()),
        ("key_value_config", d.key_value_config.is_some()),
        (
            "resolved_address_filter",
            d.resolved_address_filter.is_some(),
        ),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(format!(
            "{p}.{field}: not supported by respite (the DNS cache takes dns_refresh_rate, \
             max_hosts and dns_lookup_family)"
        ));
    }
    let mut out = RawDnsCache::default();
    if let Some(r) = &d.dns_refresh_rate {
        out.dns_refresh_rate = Some(unspanned(positive_duration(
            r,
            &format!("{p}.dns_refresh_rate"),
        )?));
    }
    if let Some(n) = &d.max_hosts {
        if n.value == 0 {
            return Err(format!("{p}.max_hosts: must be at least 1"));
        }
        out.max_hosts = Some(unspanned(n.value as usize));
    }
    out.dns_lookup_family = Some(unspanned(family(
        d.dns_lookup_family,
        &format!("{p}.dns_lookup_family"),
    )?));
    Ok(out)
}

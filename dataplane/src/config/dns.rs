//! `type = "strict_dns"` / `"logical_dns"` clusters: the model of their names and DNS settings,
//! and the load-time checks. Names are never resolved here: the engine's resolver does it
//! (`cluster::dns`), so a name that does not resolve yet does not fail a load.

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::locate::Source;
use super::raw::{RawCluster, RawDuration};
use super::{ClusterType, ConfigError, dump};

/// Envoy's default `dns_refresh_rate` (`Cluster.dns_refresh_rate`, 5000 ms).
pub const DEFAULT_DNS_REFRESH_RATE: Duration = Duration::from_secs(5);

/// Envoy `Cluster.DnsLookupFamily`: which address families a name's addresses are taken from.
/// TOML: `dns_lookup_family = "auto" | "v4_only" | "v6_only" | "v4_preferred" | "all"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum DnsLookupFamily {
    /// IPv6 addresses if the name has any, else IPv4 (Envoy's default, `AUTO`).
    #[default]
    Auto,
    /// IPv4 addresses only.
    V4Only,
    /// IPv6 addresses only.
    V6Only,
    /// IPv4 addresses if the name has any, else IPv6.
    V4Preferred,
    /// Every address of both families, in resolver order.
    All,
}

/// One configured `host:port` of a DNS cluster, not resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct DnsTarget {
    /// The name (or IP literal, without brackets) to resolve.
    pub host: String,
    /// The port every address of `host` gets.
    pub port: u16,
    /// The weight every address of `host` gets (Envoy: the endpoint's `load_balancing_weight`).
    pub weight: u32,
}

/// The DNS part of a `strict_dns` / `logical_dns` cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct DnsConfig {
    /// The configured hosts, in file order. `logical_dns`: exactly one.
    pub targets: Vec<DnsTarget>,
    /// How often every name is resolved again. Non-zero; default 5s (Envoy's).
    #[serde(serialize_with = "dump::duration")]
    pub dns_refresh_rate: Duration,
    /// Which addresses of a name count. Default `auto`.
    pub dns_lookup_family: DnsLookupFamily,
}

/// True for the two DNS cluster types.
pub fn is_dns(t: ClusterType) -> bool {
    matches!(t, ClusterType::StrictDns | ClusterType::LogicalDns)
}

/// The `dns_refresh_rate` and `dns_lookup_family` of `c` (`targets` left empty for the caller),
/// or `None` for a cluster of another type.
///
/// Errors: either key on a type other than `strict_dns` / `logical_dns` ("applies only to
/// ..."), a zero or malformed `dns_refresh_rate`.
pub(super) fn settings(
    src: &Source<'_>,
    path: &str,
    c: &RawCluster,
) -> Result<Option<DnsConfig>, ConfigError> {
    if !is_dns(c.cluster_type) {
        let span = c
            .dns_refresh_rate
            .as_ref()
            .map(|v| ("dns_refresh_rate", v.span()))
            .or_else(|| {
                c.dns_lookup_family
                    .as_ref()
                    .map(|v| ("dns_lookup_family", v.span()))
            });
        if let Some((key, span)) = span {
            return Err(src.error(
                Some(span),
                &format!("{path}.{key}"),
                "applies only to type = \"strict_dns\" or \"logical_dns\"",
            ));
        }
        return Ok(None);
    }
    let rate = match &c.dns_refresh_rate {
        Some(v) => refresh_rate(src, &format!("{path}.dns_refresh_rate"), v)?,
        None => DEFAULT_DNS_REFRESH_RATE,
    };
    Ok(Some(DnsConfig {
        targets: Vec::new(),
        dns_refresh_rate: rate,
        dns_lookup_family: c
            .dns_lookup_family
            .as_ref()
            .map_or_else(DnsLookupFamily::default, |f| *f.get_ref()),
    }))
}

fn refresh_rate(
    src: &Source<'_>,
    path: &str,
    v: &Spanned<RawDuration>,
) -> Result<Duration, ConfigError> {
    let d = super::validate::duration(src, path, v)?;
    if d.is_zero() {
        return Err(src.error(Some(v.span()), path, "must be greater than zero"));
    }
    Ok(d)
}

/// Splits `text` (`host:port`, `[v6]:port` or `v4:port`) into what a DNS cluster resolves,
/// with the same spelling rules as a static host; nothing is resolved.
///
/// Errors: the message for the key (no port, port 0 or out of range, an unbracketed IPv6
/// address, a character no DNS name holds).
pub(super) fn target_text(text: &str) -> Result<(String, u16), String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        if a.port() == 0 {
            return Err(format!("invalid address \"{text}\": port 0"));
        }
        return Ok((a.ip().to_string(), a.port()));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "invalid address \"{text}\": expected host:port, e.g. \"redis.example:6379\""
        ));
    };
    if host.contains(':') || host.starts_with('[') {
        return Err(format!(
            "invalid address \"{text}\": write IPv6 addresses in brackets, e.g. \"[::1]:6379\""
        ));
    }
    if let Some(bad) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(format!(
            "invalid address {text:?}: {bad:?} is not allowed in a hostname (letters, digits, \
             '.', '-', '_')"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 && !host.is_empty() => Ok((host.to_owned(), p)),
        _ => Err(format!(
            "invalid address \"{text}\": expected host:port with a port in 1-65535"
        )),
    }
}

/// Envoy's `DnsCacheConfig.dns_refresh_rate` default (60s).
pub const DEFAULT_DNS_CACHE_REFRESH_RATE: Duration = Duration::from_secs(60);
/// Envoy's `DnsCacheConfig.max_hosts` default.
pub const DEFAULT_DNS_CACHE_MAX_HOSTS: usize = 1024;

/// `[listeners.dns_cache]` (Envoy `ConnPoolSettings.dns_cache_config`, a dynamic forward proxy
/// `DnsCacheConfig`): `MOVED` / `ASK` redirections naming a hostname are followed, the name
/// resolved off the workers through a bounded cache while the redirected request waits (within
/// `op_timeout`). Without it such a redirection goes to the client unchanged, as in Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct DnsCacheConfig {
    /// How often a cached name is resolved again. Non-zero; default 60s (Envoy's).
    #[serde(serialize_with = "dump::duration")]
    pub dns_refresh_rate: Duration,
    /// The most names the cache holds; a redirection to a further name goes to the client.
    /// At least 1; default 1024 (Envoy's).
    pub max_hosts: usize,
    /// Which address of a name is used (the first of the family). Default `auto`.
    pub dns_lookup_family: DnsLookupFamily,
}

/// `[listeners.dns_cache]`.
///
/// Errors: a zero or malformed `dns_refresh_rate`, `max_hosts = 0`.
pub(super) fn cache(
    src: &Source<'_>,
    path: &str,
    raw: super::raw::RawDnsCache,
) -> Result<DnsCacheConfig, ConfigError> {
    let dns_refresh_rate = match &raw.dns_refresh_rate {
        Some(v) => refresh_rate(src, &format!("{path}.dns_refresh_rate"), v)?,
        None => DEFAULT_DNS_CACHE_REFRESH_RATE,
    };
    let max_hosts = match raw.max_hosts {
        Some(n) if *n.get_ref() == 0 => {
            return Err(src.error(
                Some(n.span()),
                &format!("{path}.max_hosts"),
                "must be at least 1",
            ));
        }
        Some(n) => n.into_inner(),
        None => DEFAULT_DNS_CACHE_MAX_HOSTS,
    };
    Ok(DnsCacheConfig {
        dns_refresh_rate,
        max_hosts,
        dns_lookup_family: raw
            .dns_lookup_family
            .map_or_else(DnsLookupFamily::default, Spanned::into_inner),
    })
}

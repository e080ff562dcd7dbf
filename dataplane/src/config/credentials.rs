//! `[[clusters.credentials]]`: upstream `AUTH` per host address (Envoy
//! `RedisProtocolOptions.credentials`), and the one rule every upstream connection takes its
//! credentials by ([`auth_for`]).
//!
//! The rule is Envoy's (`ProtocolOptionsConfigImpl::getCredential`, source
//! `source/extensions/filters/network/redis_proxy/config.h`): the first entry whose address is
//! the host's wins, else the cluster's `auth_username`/`auth_password` apply. A host of a
//! `strict_dns`/`logical_dns` cluster is matched by the name (and port) it was resolved from,
//! any other host (static, EDS, Redis Cluster nodes from `CLUSTER SLOTS` and redirections) by
//! its `ip:port`.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::locate::Source;
use super::{ClusterType, ConfigError};

/// The most entries one cluster takes: each is a linear scan on every connect.
pub const MAX_CREDENTIALS: usize = 1024;

/// What an entry's address is matched against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialAddress {
    /// An IP literal and port: matched against a host's address.
    Ip(SocketAddr),
    /// A DNS name and port (DNS clusters only): matched against the name a host was resolved
    /// from.
    Name {
        /// The name as written (lowercase compare).
        host: String,
        /// The port.
        port: u16,
    },
}

impl std::fmt::Display for CredentialAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialAddress::Ip(a) => write!(f, "{a}"),
            CredentialAddress::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl Serialize for CredentialAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One `[[clusters.credentials]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct CredentialConfig {
    /// The host this entry is for (`"ip:port"`, or `"name:port"` on DNS clusters).
    pub address: CredentialAddress,
    /// ACL user; requires `auth_password`.
    pub auth_username: Option<String>,
    /// `AUTH` password; none: connections to this host send no `AUTH` at all.
    #[serde(serialize_with = "super::dump::redact_option")]
    pub auth_password: Option<String>,
}

/// `[[clusters.credentials]]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    /// `"host:port"`.
    pub address: Spanned<String>,
    /// ACL user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_username: Option<Spanned<String>>,
    /// Password (in clear: this is the file, not the dump).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_password: Option<Spanned<String>>,
}

/// The credentials one connection authenticates with: `password` none means no `AUTH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Auth<'a> {
    /// ACL user (`None`: `AUTH <password>`, the `default` user).
    pub username: Option<&'a str>,
    /// Password.
    pub password: Option<&'a str>,
}

/// The credentials for a connection to `addr`: the first of `entries` matching it, else
/// `default`. `hostname`: the DNS name (and port, `addr`'s) the address was resolved from, for
/// hosts of DNS clusters; `None` for the others. Without a `hostname`, a
/// [`CredentialAddress::Name`] entry matches when the DNS resolver last found `addr` under
/// that name ([`super::dns_names`]), which is how connections, which know only their
/// address, find the name of a DNS host.
pub fn auth_for<'a>(
    entries: &'a [CredentialConfig],
    default: Auth<'a>,
    addr: SocketAddr,
    hostname: Option<&str>,
) -> Auth<'a> {
    let hit = entries.iter().find(|e| match &e.address {
        CredentialAddress::Ip(a) => *a == addr,
        CredentialAddress::Name { host, port } => {
            *port == addr.port()
                && match hostname {
                    Some(h) => h.eq_ignore_ascii_case(host),
                    None => super::dns_names::resolved_to(host, *port, addr),
                }
        }
    });
    match hit {
        Some(e) => Auth {
            username: e.auth_username.as_deref(),
            password: e.auth_password.as_deref(),
        },
        None => default,
    }
}

/// Checks `raw` (the entries at `path`, `clusters[i].credentials`) for a cluster of `kind`.
///
/// Errors, each naming its key: more than [`MAX_CREDENTIALS`] entries; an address that is not
/// `host:port`; a DNS name on a cluster that is not `strict_dns`/`logical_dns` (its hosts are
/// matched by IP); the same address twice; `auth_username` without `auth_password`.
pub(super) fn validate(
    src: &Source<'_>,
    path: &str,
    raw: Option<Spanned<Vec<Spanned<RawCredential>>>>,
    kind: ClusterType,
) -> Result<Vec<CredentialConfig>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let span = raw.span();
    let raw = raw.into_inner();
    if raw.len() > MAX_CREDENTIALS {
        return Err(src.error(
            Some(span),
            path,
            &format!("at most {MAX_CREDENTIALS} entries"),
        ));
    }
    let dns = matches!(kind, ClusterType::StrictDns | ClusterType::LogicalDns);
    let mut out: Vec<CredentialConfig> = Vec::with_capacity(raw.len());
    for (i, e) in raw.into_iter().enumerate() {
        let e = e.into_inner();
        let apath = format!("{path}[{i}].address");
        let err = |m: &str| src.error(Some(e.address.span()), &apath, m);
        let address = match e.address.get_ref().parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => return Err(err("port 0")),
            Ok(a) => CredentialAddress::Ip(a),
            Err(_) => {
                let (host, port) =
                    super::dns::target_text(e.address.get_ref()).map_err(|m| err(&m))?;
                if !dns {
                    return Err(err(
                        "a DNS name matches hosts of type \"strict_dns\" or \"logical_dns\" \
                         only (other hosts are matched by ip:port)",
                    ));
                }
                CredentialAddress::Name {
                    host: host.to_ascii_lowercase(),
                    port,
                }
            }
        };
        if let Some(j) = out.iter().position(|c| c.address == address) {
            return Err(err(&format!(
                "duplicate address {address} (also {path}[{j}].address)"
            )));
        }
        if let (Some(u), None) = (&e.auth_username, &e.auth_password) {
            return Err(src.error(
                Some(u.span()),
                &format!("{path}[{i}].auth_username"),
                "requires auth_password",
            ));
        }
        out.push(CredentialConfig {
            address,
            auth_username: e.auth_username.map(Spanned::into_inner),
            auth_password: e.auth_password.map(Spanned::into_inner),
        });
    }
    Ok(out)
}

/// Checks a cluster's `db` at `path` (`clusters[i].db`); 0 when absent.
///
/// Errors: a non-zero `db` on a `redis_cluster` cluster (Redis Cluster has database 0 only).
pub(super) fn db(
    src: &Source<'_>,
    path: &str,
    raw: Option<Spanned<u32>>,
    kind: ClusterType,
) -> Result<u32, ConfigError> {
    match raw {
        Some(n) if kind == ClusterType::RedisCluster && *n.get_ref() != 0 => Err(src.error(
            Some(n.span()),
            path,
            "does not apply to type \"redis_cluster\": Redis Cluster has database 0 only",
        )),
        Some(n) => Ok(n.into_inner()),
        None => Ok(0),
    }
}

impl super::ClusterConfig {
    /// The credentials of a connection to `addr` (see [`auth_for`]): the matching
    /// `[[clusters.credentials]]` entry, else `auth_username`/`auth_password`.
    pub fn auth_for(&self, addr: SocketAddr, hostname: Option<&str>) -> Auth<'_> {
        auth_for(
            &self.credentials,
            Auth {
                username: self.auth_username.as_deref(),
                password: self.auth_password.as_deref(),
            },
            addr,
            hostname,
        )
    }
}

/// The database a client of `listener` may `SELECT` ([`super::ListenerConfig::select_db`]):
/// the `db` of every cluster it routes to (routes, read policies, mirrors) when they agree,
/// else `None`. Its clusters each have their own connections, so a client cannot be given
/// one database over two clusters that `SELECT` different ones.
pub(super) fn listener_db(
    listener: &super::ListenerConfig,
    clusters: &[super::ClusterConfig],
) -> Option<u32> {
    let mut dbs = super::clusters_of(&listener.prefix_routes)
        .into_iter()
        .filter_map(|n| clusters.iter().find(|c| c.name == n))
        .map(|c| c.db);
    let first = dbs.next().unwrap_or(0);
    dbs.all(|d| d == first).then_some(first)
}

//! `RedisProxy.external_auth_provider` → `[listeners.external_auth]`.
//!
//! - `grpc_service.envoy_grpc.cluster_name`: the service is that cluster's one endpoint. The
//!   cluster is not a Redis cluster: [`super::render`] takes its address from it and leaves
//!   it out of the data plane's clusters (unless a route also names it). It must have exactly
//!   one endpoint given inline (STATIC / STRICT_DNS `load_assignment`); else the listener is
//!   refused, naming why.
//! - `grpc_service.google_grpc.target_uri`: `host:port` (optionally `dns:///host:port` or
//!   `ipv4:host:port`), taken as the address.
//! - `grpc_service.timeout` → `timeout` (the data plane's default when absent: Envoy has none).
//! - `enable_auth_expiration` → `enable_auth_expiration`.
//! - Channel credentials (TLS), call credentials, `initial_metadata`, `retry_policy`,
//!   `envoy_grpc.authority`: refused, "not supported by respite": the data plane's client is
//!   plaintext HTTP/2, without metadata or retries.

use envoy_types::pb::envoy::config::core::v3::grpc_service::TargetSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::RedisExternalAuthProvider;
use respite::config::external_auth::RawExternalAuth;
use respite::config::raw::unspanned;

use super::fields::positive_duration;

/// Where the address of `[listeners.external_auth]` comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthTarget {
    /// `envoy_grpc.cluster_name`: the named cluster's one endpoint, filled in by
    /// [`super::render`].
    Cluster(String),
    /// `google_grpc.target_uri`: this address.
    Address(String),
}

/// The address placed in the table until [`super::render`] resolves a cluster's endpoint;
/// left there (a cluster missing, or not of one endpoint) it makes the data plane refuse the
/// listener, naming the key.
pub fn unresolved(cluster: &str) -> String {
    format!("the one endpoint of cluster {cluster}")
}

/// Translates `e` (the proxy's `external_auth_provider`; `p` is its path).
///
/// Errors: the first field that is missing or not supported, named.
pub fn translate(
    e: &RedisExternalAuthProvider,
    p: &str,
) -> Result<(RawExternalAuth, AuthTarget), String> {
    let Some(g) = &e.grpc_service else {
        return Err(format!("{p}.grpc_service: required"));
    };
    let gp = format!("{p}.grpc_service");
    if !g.initial_metadata.is_empty() {
        return Err(format!(
            "{gp}.initial_metadata: not supported by respite (calls carry no metadata)"
        ));
    }
    if g.retry_policy.is_some() {
        return Err(format!(
            "{gp}.retry_policy: not supported by respite (a failed call fails the AUTH)"
        ));
    }
    let target = match &g.target_specifier {
        Some(TargetSpecifier::EnvoyGrpc(eg)) => {
            if eg.cluster_name.is_empty() {
                return Err(format!("{gp}.envoy_grpc.cluster_name: required"));
            }
            if !eg.authority.is_empty() {
                return Err(format!(
                    "{gp}.envoy_grpc.authority: not supported by respite (the :authority is \
                     the endpoint's address)"
                ));
            }
            if eg.retry_policy.is_some() {
                return Err(format!(
                    "{gp}.envoy_grpc.retry_policy: not supported by respite (a failed call \
                     fails the AUTH)"
                ));
            }
            AuthTarget::Cluster(eg.cluster_name.clone())
        }
        Some(TargetSpecifier::GoogleGrpc(gg)) => {
            let gg_p = format!("{gp}.google_grpc");
            if gg.channel_credentials.is_some() || !gg.channel_credentials_plugin.is_empty() {
                return Err(format!(
                    "{gg_p}.channel_credentials: not supported by respite (the client is \
                     plaintext HTTP/2)"
                ));
            }
            if !gg.call_credentials.is_empty() || !gg.call_credentials_plugin.is_empty() {
                return Err(format!("{gg_p}.call_credentials: not supported by respite"));
            }
            let uri = gg.target_uri.as_str();
            let addr = uri
                .strip_prefix("dns:///")
                .or_else(|| uri.strip_prefix("ipv4:"))
                .unwrap_or(uri);
            if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
                return Err(format!(
                    "{gg_p}.target_uri: \"{uri}\" is not host:port (other gRPC name schemes are \
                     not supported by respite)"
                ));
            }
            AuthTarget::Address(addr.to_owned())
        }
        None => {
            return Err(format!("{gp}: envoy_grpc or google_grpc required"));
        }
    };
    let timeout = match &g.timeout {
        Some(t) => Some(unspanned(positive_duration(t, &format!("{gp}.timeout"))?)),
        None => None,
    };
    let address = match &target {
        AuthTarget::Cluster(c) => unresolved(c),
        AuthTarget::Address(a) => a.clone(),
    };
    Ok((
        RawExternalAuth {
            address: unspanned(address),
            timeout,
            enable_auth_expiration: e.enable_auth_expiration,
        },
        target,
    ))
}

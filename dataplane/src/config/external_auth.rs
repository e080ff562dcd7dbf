//! `[listeners.external_auth]`: AUTH and `HELLO … AUTH` checked by a gRPC service (Envoy
//! `RedisProxy.external_auth_provider`), instead of `downstream_auth_passwords`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::ConfigError;
use super::locate::Source;
use super::raw::RawDuration;

/// The call timeout when `timeout` is absent. Envoy sets none when `grpc_service.timeout` is
/// unset (the call may wait forever, and the client's commands behind it); a client waits at
/// most this long for its AUTH here.
pub const DEFAULT_EXTERNAL_AUTH_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest `timeout` accepted: every command the client pipelined after its AUTH waits
/// for the answer.
pub const MAX_EXTERNAL_AUTH_TIMEOUT: Duration = Duration::from_secs(60);

/// `[listeners.external_auth]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawExternalAuth {
    /// `"host:port"` of the gRPC service (plaintext HTTP/2).
    pub address: Spanned<String>,
    /// The call's timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Spanned<RawDuration>>,
    /// Refuse the client's commands past the expiration the service returns.
    #[serde(default)]
    pub enable_auth_expiration: bool,
}

/// A listener's external AUTH check: every AUTH and `HELLO … AUTH` of its clients is a call of
/// `envoy.service.redis_auth.v3.RedisProxyExternalAuth/Authenticate` at `address`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalAuthConfig {
    /// `host:port` of the service, plaintext HTTP/2 (h2c); a host name is resolved at connect.
    pub address: String,
    /// How long one call may take; past it the AUTH fails with
    /// `-ERR external authentication failed`. Default [`DEFAULT_EXTERNAL_AUTH_TIMEOUT`], at most
    /// [`MAX_EXTERNAL_AUTH_TIMEOUT`].
    #[serde(serialize_with = "super::dump::duration")]
    pub timeout: Duration,
    /// Envoy `enable_auth_expiration`: past the `expiration` an accepting answer carried, the
    /// client's commands get `-NOAUTH Authentication required.` until it authenticates again.
    pub enable_auth_expiration: bool,
}

/// Checks `[listeners.external_auth]` (`path` is its key).
pub(super) fn validate(
    src: &Source<'_>,
    path: &str,
    raw: RawExternalAuth,
) -> Result<ExternalAuthConfig, ConfigError> {
    let addr = raw.address.get_ref();
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok || addr.contains('/') || addr.chars().any(char::is_whitespace) {
        return Err(src.error(
            Some(raw.address.span()),
            &format!("{path}.address"),
            &format!("\"{addr}\" is not \"host:port\" (a port from 1 to 65535)"),
        ));
    }
    let timeout = match &raw.timeout {
        Some(t) => {
            let key = format!("{path}.timeout");
            let v = super::validate::duration(src, &key, t)?;
            if v.is_zero() || v > MAX_EXTERNAL_AUTH_TIMEOUT {
                return Err(src.error(
                    Some(t.span()),
                    &key,
                    "must be more than 0s and at most 60s (the client's commands after its \
                     AUTH wait for the answer)",
                ));
            }
            v
        }
        None => DEFAULT_EXTERNAL_AUTH_TIMEOUT,
    };
    Ok(ExternalAuthConfig {
        address: raw.address.into_inner(),
        timeout,
        enable_auth_expiration: raw.enable_auth_expiration,
    })
}

//! The tonic [`Endpoint`] for the management server, from the bootstrap's `xds_servers[0]`.

use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::source::bootstrap::{ChannelCreds, XdsServer};

/// Connect timeout: gRPC's 20 s minimum connect timeout (connection-backoff.md).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// HTTP/2 PING interval, so a dead management server is noticed (xds_protocol.rst ADS example
/// uses keepalives).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a PING may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The URI tonic dials for `server_uri`: `host:port` and `dns:///host:port` become
/// `http://host:port` (`https://` with `tls` creds); `http://` and `https://` are kept.
///
/// Errors: an unsupported scheme (e.g. `unix:`, `xds:`), an empty authority.
pub fn uri(server: &XdsServer) -> Result<String, String> {
    let raw = server.server_uri.trim();
    let tls = matches!(server.channel_creds, ChannelCreds::Tls { .. });
    let scheme = if tls { "https" } else { "http" };
    let authority = if let Some(rest) = raw.strip_prefix("dns:///") {
        rest
    } else if let Some(rest) = raw.strip_prefix("dns:") {
        // dns://resolver/host:port: the resolver authority is not supported; plain dns:host:port is.
        if rest.starts_with("//") {
            return Err(format!(
                "server_uri {raw:?}: a DNS resolver authority is not supported"
            ));
        }
        rest
    } else if raw.starts_with("http://") || raw.starts_with("https://") {
        if raw.starts_with("http://") && tls {
            return Err(format!(
                "server_uri {raw:?}: http:// with `tls` channel_creds"
            ));
        }
        return Ok(raw.to_string());
    } else if raw.contains("://") || raw.starts_with("unix:") {
        return Err(format!(
            "server_uri {raw:?}: unsupported scheme (use host:port, dns:///host:port, http:// or https://)"
        ));
    } else {
        raw
    };
    if authority.is_empty() || authority.contains('/') {
        return Err(format!("server_uri {raw:?}: expected host:port"));
    }
    Ok(format!("{scheme}://{authority}"))
}

/// The endpoint: connect timeout, HTTP/2 keepalive, TCP_NODELAY, and TLS when asked for
/// (`https://` or `tls` channel_creds: the CA file or the system roots, optional client cert).
///
/// Errors: a bad URI, unreadable certificate files.
pub fn endpoint(server: &XdsServer) -> Result<Endpoint, String> {
    let uri = uri(server)?;
    let mut ep = Endpoint::from_shared(uri.clone())
        .map_err(|e| format!("server_uri {:?}: {e}", server.server_uri))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if uri.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        match &server.channel_creds {
            ChannelCreds::Tls {
                ca_certificate_file,
                certificate_file,
                private_key_file,
            } => {
                tls = match ca_certificate_file {
                    Some(ca) => tls.ca_certificate(Certificate::from_pem(read(ca)?)),
                    None => tls.with_native_roots(),
                };
                if let (Some(c), Some(k)) = (certificate_file, private_key_file) {
                    tls = tls.identity(Identity::from_pem(read(c)?, read(k)?));
                }
            }
            ChannelCreds::Insecure => tls = tls.with_native_roots(),
        }
        ep = ep
            .tls_config(tls)
            .map_err(|e| format!("server_uri {:?}: TLS: {e}", server.server_uri))?;
    }
    Ok(ep)
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(uri: &str, tls: bool) -> XdsServer {
        XdsServer {
            server_uri: uri.into(),
            channel_creds: if tls {
                ChannelCreds::Tls {
                    ca_certificate_file: None,
                    certificate_file: None,
                    private_key_file: None,
                }
            } else {
                ChannelCreds::Insecure
            },
            server_features: vec![],
            delta: false,
        }
    }

    #[test]
    fn uri_forms() {
        assert_eq!(
            uri(&server("127.0.0.1:18000", false)).as_deref(),
            Ok("http://127.0.0.1:18000")
        );
        assert_eq!(
            uri(&server("dns:///xds.local:1", false)).as_deref(),
            Ok("http://xds.local:1")
        );
        assert_eq!(
            uri(&server("dns:xds.local:1", true)).as_deref(),
            Ok("https://xds.local:1")
        );
        assert_eq!(
            uri(&server("http://h:1", false)).as_deref(),
            Ok("http://h:1")
        );
        assert_eq!(
            uri(&server("https://h:1", false)).as_deref(),
            Ok("https://h:1")
        );
        assert_eq!(uri(&server("h:1", true)).as_deref(), Ok("https://h:1"));
        assert!(uri(&server("unix:/tmp/s", false)).is_err());
        assert!(uri(&server("xds:///x", false)).is_err());
        assert!(uri(&server("dns://8.8.8.8/h:1", false)).is_err());
        assert!(uri(&server("http://h:1", true)).is_err());
    }

    #[test]
    fn endpoint_builds_and_missing_ca_is_an_error() {
        assert!(endpoint(&server("127.0.0.1:1", false)).is_ok());
        let mut s = server("h:1", true);
        s.channel_creds = ChannelCreds::Tls {
            ca_certificate_file: Some("/nonexistent/ca.pem".into()),
            certificate_file: None,
            private_key_file: None,
        };
        let e = endpoint(&s).expect_err("missing CA");
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}

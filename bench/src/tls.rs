//! The load generator's TLS client (rustls through tokio-rustls, the ring provider, as in the
//! data plane): a connector and the server name certificates are verified as. A load run with
//! [`crate::load::LoadConfig::tls`] does the handshake (and AUTH) on every connection before
//! the barrier, then runs the same closed loop, generic over the stream, as over plain TCP.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS client setup shared by every connection of a run.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    /// Client certificate presented.
    mutual: bool,
    /// Sessions are resumed when the server allows it.
    resumption: bool,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .field("client_certificate", &self.mutual)
            .field("resumption", &self.resumption)
            .finish()
    }
}

impl TlsClient {
    /// Trusts the PEM CA certificates in `ca`, presents the PEM chain `cert` with the key `key`
    /// when given, verifies the server as `server_name` (a DNS name or an IP address). With
    /// `resume` false every handshake is a full one (no session cache, no tickets).
    pub fn from_files(
        ca: &Path,
        client: Option<(&Path, &Path)>,
        server_name: &str,
        resume: bool,
    ) -> Result<TlsClient, String> {
        let mut roots = rustls::RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("{}: {e}", ca.display()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: no PEM certificate", ca.display()));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_root_certificates(roots);
        let mut config = match client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| format!("{}: {e}", cert.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("{}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        if !resume {
            config.resumption = rustls::client::Resumption::disabled();
        }
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|e| format!("TLS server name `{server_name}`: {e}"))?;
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            mutual: client.is_some(),
            resumption: resume,
        })
    }

    /// The handshake over `tcp`.
    pub async fn connect(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.connector
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))
    }
}

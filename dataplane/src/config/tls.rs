//! TLS settings of a listener (`[listeners.tls]`) and of a cluster (`[clusters.tls]`): the PEM
//! files are read and the rustls configs built here, at load, so a bad file is a config error
//! naming it, and the data plane's `net` layer only runs handshakes with what this built.
//!
//! Names follow Envoy's `DownstreamTlsContext` / `UpstreamTlsContext` (`certificate_chain`,
//! `private_key`, `trusted_ca`, `require_client_certificate`, `sni`). TLS 1.2 and 1.3, rustls's
//! default cipher suites (ring provider).
//!
//! A config snapshot compares equal to another only when the bytes of every file it read are
//! equal (a SHA-256 of them): a reload after a certificate file was rotated in place is a
//! change, even when the config text is not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};

/// `[listeners.tls]`: the listener speaks TLS only (a plain listener is another listener).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DownstreamTls {
    /// PEM certificate chain, leaf first (Envoy `tls_certificates[0].certificate_chain`).
    pub certificate_chain: PathBuf,
    /// PEM private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// PEM CA bundle that client certificates are verified against (Envoy
    /// `validation_context.trusted_ca`). Absent: clients are not asked for a certificate.
    pub trusted_ca: Option<PathBuf>,
    /// With `trusted_ca`: a client without a valid certificate is refused at the handshake.
    /// Without it, a client may present none, but one it presents must verify. Default false
    /// (Envoy's).
    pub require_client_certificate: bool,
    /// `[[listeners.tls.sni]]`: certificates chosen by the name the client asks for (SNI);
    /// any other name, or none, gets the listener's own certificate.
    pub sni: Vec<SniCertificate>,
    /// The rustls server config built from the files.
    #[serde(skip)]
    pub server: Built<ServerConfig>,
}

/// One `[[listeners.tls.sni]]` entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SniCertificate {
    /// Names this certificate serves: exact (`redis.example.com`) or one leading wildcard label
    /// (`*.example.com`, which matches `a.example.com` but not `example.com`). Lowercase.
    pub server_names: Vec<String>,
    /// PEM certificate chain.
    pub certificate_chain: PathBuf,
    /// PEM private key.
    pub private_key: PathBuf,
}

/// `[clusters.tls]`: every connection to the cluster's hosts is TLS (shared, leased and
/// subscriber connections, health checks, Redis Cluster discovery).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpstreamTls {
    /// PEM CA bundle the hosts' certificates are verified against. Absent: the system's roots.
    pub trusted_ca: Option<PathBuf>,
    /// The name sent in SNI and that every host's certificate is verified against (Envoy
    /// `UpstreamTlsContext.sni`). Absent: the host's own name from its address (`host:port`
    /// as written), or its IP when it has none (Redis Cluster nodes discovered by IP, then
    /// verified against an IP address SAN).
    pub sni: Option<String>,
    /// PEM client certificate chain presented to the hosts (Redis's `tls-auth-clients`).
    pub certificate_chain: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub private_key: Option<PathBuf>,
    /// Accept any certificate the hosts present (no chain or name check): encryption without
    /// authentication, logged at load as a warning. Default false.
    pub insecure_skip_verify: bool,
    /// The rustls client config built from the files.
    #[serde(skip)]
    pub client: Built<ClientConfig>,
}

impl UpstreamTls {
    /// The name a host's certificate is verified against: `sni`, else the host part of
    /// `address_text` when it is a DNS name, else `ip`.
    pub fn server_name(
        &self,
        address_text: Option<&str>,
        ip: std::net::IpAddr,
    ) -> ServerName<'static> {
        let named = self
            .sni
            .as_deref()
            .or_else(|| address_text.map(host_part))
            .and_then(|h| ServerName::try_from(h.to_owned()).ok());
        named.unwrap_or(ServerName::IpAddress(ip.into()))
    }
}

/// `host` of `host:port` (`[v6]:port` without its brackets).
fn host_part(text: &str) -> &str {
    let host = text.rsplit_once(':').map_or(text, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A rustls config built at load, compared by the SHA-256 of every byte it was built from.
#[derive(Clone)]
pub struct Built<T> {
    /// The config handed to rustls for each new connection.
    pub config: Arc<T>,
    digest: [u8; 32],
}

impl<T> PartialEq for Built<T> {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}
impl<T> Eq for Built<T> {}

impl<T> std::fmt::Debug for Built<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Built({:02x}{:02x}…)", self.digest[0], self.digest[1])
    }
}

/// Why a TLS table could not be built: `key` is the TOML key under the table (`private_key`),
/// `message` names the file and what is wrong with it.
#[derive(Debug)]
pub struct TlsError {
    /// Key under `[listeners.tls]` / `[clusters.tls]`.
    pub key: &'static str,
    /// What is wrong, naming the file.
    pub message: String,
}

fn err(key: &'static str, message: String) -> TlsError {
    TlsError { key, message }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The largest PEM file read: a system CA bundle is a few hundred KiB; anything much larger
/// (or a device such as /dev/zero) is a mistake that would otherwise take the memory of a
/// running process on reload.
pub const MAX_PEM_BYTES: u64 = 4 << 20;

/// Reads `path`, adding its bytes to `digest`. Only a regular file (symlinks followed) of at
/// most [`MAX_PEM_BYTES`]: a FIFO would block the reload, a device never end.
fn read(key: &'static str, path: &Path, digest: &mut Sha256) -> Result<Vec<u8>, TlsError> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| err(key, format!("cannot read {}: {e}", path.display()));
    let meta = std::fs::metadata(path).map_err(cannot)?;
    if !meta.is_file() {
        return Err(err(key, format!("{}: not a regular file", path.display())));
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(err(
            key,
            format!(
                "{}: {} bytes, more than a PEM file holds (at most {MAX_PEM_BYTES})",
                path.display(),
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(err(
            key,
            format!(
                "{}: grew past {MAX_PEM_BYTES} bytes while read",
                path.display()
            ),
        ));
    }
    digest.update(path.as_os_str().as_encoded_bytes());
    digest.update((bytes.len() as u64).to_le_bytes());
    digest.update(&bytes);
    Ok(bytes)
}

fn certs(
    key: &'static str,
    path: &Path,
    d: &mut Sha256,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(key, path, d)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            err(
                key,
                format!("{}: not a PEM certificate file: {e}", path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(err(
            key,
            format!("{}: no CERTIFICATE block in the file", path.display()),
        ));
    }
    Ok(certs)
}

fn private_key(path: &Path, d: &mut Sha256) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read("private_key", path, d)?;
    // PKCS#8 `ENCRYPTED PRIVATE KEY` or a legacy `Proc-Type: 4,ENCRYPTED` PEM: say so, rather
    // than that no key was found.
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || text.contains("4,ENCRYPTED") {
        return Err(err(
            "private_key",
            format!(
                "{}: the key is encrypted; respite reads unencrypted keys only (decrypt it \
                 with `openssl pkey -in <key> -out <new key>` into a file only respite can read)",
                path.display()
            ),
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        err(
            "private_key",
            format!(
                "{}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file: {e}",
                path.display()
            ),
        )
    })
}

fn roots(path: &Path, d: &mut Sha256) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for c in certs("trusted_ca", path, d)? {
        store
            .add(c)
            .map_err(|e| err("trusted_ca", format!("{}: {e}", path.display())))?;
    }
    Ok(store)
}

/// The leaf and key as rustls signs with them, checked to belong together.
fn certified_key(chain: &Path, key: &Path, d: &mut Sha256) -> Result<CertifiedKey, TlsError> {
    let certs = certs("certificate_chain", chain, d)?;
    let der = private_key(key, d)?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| err("private_key", format!("{}: {e}", key.display())))?;
    let ck = CertifiedKey::new(certs, signing);
    // Only a proven mismatch is refused: a certificate webpki cannot parse for the check (an
    // X.509 v1 client certificate, as `openssl x509 -req` makes without extensions) is the
    // peer's to judge.
    if let Err(e @ rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        ck.keys_match()
    {
        return Err(err(
            "private_key",
            format!(
                "{} is not the key of {}: {e}",
                key.display(),
                chain.display()
            ),
        ));
    }
    Ok(ck)
}

/// Builds the server config of `[listeners.tls]` (the files are read now).
///
/// # Errors
/// A file that cannot be read or holds no usable PEM, a key that is not the certificate's, a
/// CA bundle with no usable certificate; `require_client_certificate` without `trusted_ca`.
pub fn downstream(
    certificate_chain: PathBuf,
    private_key: PathBuf,
    trusted_ca: Option<PathBuf>,
    require_client_certificate: bool,
    sni: Vec<SniCertificate>,
) -> Result<DownstreamTls, TlsError> {
    let mut d = Sha256::new();
    let default = Arc::new(certified_key(&certificate_chain, &private_key, &mut d)?);
    let mut by_name = Vec::new();
    for s in &sni {
        let ck = Arc::new(certified_key(&s.certificate_chain, &s.private_key, &mut d)?);
        for n in &s.server_names {
            by_name.push((n.clone(), ck.clone()));
        }
    }
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("certificate_chain", e.to_string()))?;
    let builder = match &trusted_ca {
        Some(ca) => {
            let roots = Arc::new(roots(ca, &mut d)?);
            let mut v = WebPkiClientVerifier::builder_with_provider(roots, provider());
            if !require_client_certificate {
                v = v.allow_unauthenticated();
            }
            let v = v
                .build()
                .map_err(|e| err("trusted_ca", format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(v)
        }
        None if require_client_certificate => {
            return Err(err(
                "require_client_certificate",
                "needs trusted_ca: the CA bundle client certificates are verified against".into(),
            ));
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SniResolver { default, by_name }));
    // No session resumption state kept per listener: a proxy's clients are few long-lived
    // connections, and a resumption cache is memory a client could fill.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(DownstreamTls {
        certificate_chain,
        private_key,
        trusted_ca,
        require_client_certificate,
        sni,
        server: Built {
            config: Arc::new(config),
            digest: d.finalize().into(),
        },
    })
}

/// Builds the client config of `[clusters.tls]` (the files, or the system roots, are read
/// now).
///
/// # Errors
/// As [`downstream`]; a client certificate without its key (or the other way round); no
/// `trusted_ca` and no system root could be loaded.
pub fn upstream(
    trusted_ca: Option<PathBuf>,
    sni: Option<String>,
    certificate_chain: Option<PathBuf>,
    private_key: Option<PathBuf>,
    insecure_skip_verify: bool,
) -> Result<UpstreamTls, TlsError> {
    let mut d = Sha256::new();
    d.update([u8::from(insecure_skip_verify)]);
    let roots = match &trusted_ca {
        Some(ca) => roots(ca, &mut d)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            let mut store = RootCertStore::empty();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 && !insecure_skip_verify {
                return Err(err(
                    "trusted_ca",
                    "absent, and no system root certificate could be loaded (install \
                     ca-certificates or name a CA bundle)"
                        .into(),
                ));
            }
            store
        }
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("trusted_ca", e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (&certificate_chain, &private_key) {
        (Some(chain), Some(key)) => {
            let ck = certified_key(chain, key, &mut d)?;
            builder.with_client_cert_resolver(Arc::new(ClientCertificate(Arc::new(ck))))
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => {
            return Err(err("private_key", "needed with certificate_chain".into()));
        }
        (None, Some(_)) => {
            return Err(err("certificate_chain", "needed with private_key".into()));
        }
    };
    if insecure_skip_verify {
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(danger::AnyCertificate(provider())));
    }
    config.enable_sni = true;
    Ok(UpstreamTls {
        trusted_ca,
        sni,
        certificate_chain,
        private_key,
        insecure_skip_verify,
        client: Built {
            config: Arc::new(config),
            digest: d.finalize().into(),
        },
    })
}

/// The one client certificate of a cluster, presented to every host that asks.
#[derive(Debug)]
struct ClientCertificate(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for ClientCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Picks the certificate for the name a client asked for: an exact name first, then a
/// `*.suffix` name one label deep, then the listener's own.
#[derive(Debug)]
struct SniResolver {
    default: Arc<CertifiedKey>,
    by_name: Vec<(String, Arc<CertifiedKey>)>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name() else {
            return Some(self.default.clone());
        };
        let name = name.to_ascii_lowercase();
        let wildcard = name.split_once('.').map(|(_, rest)| format!("*.{rest}"));
        let find = |want: &str| {
            self.by_name
                .iter()
                .find(|(n, _)| n == want)
                .map(|(_, ck)| ck.clone())
        };
        find(&name)
            .or_else(|| wildcard.as_deref().and_then(find))
            .or_else(|| Some(self.default.clone()))
    }
}

/// `insecure_skip_verify`: a verifier that accepts every certificate, but still checks that
/// the handshake's signatures are made with the presented certificate's key (so the
/// connection is at least encrypted to whoever holds that key) when webpki can read the key
/// out of the certificate. One it cannot parse (X.509 v1, as `openssl x509 -req` makes without
/// extensions, and Redis's own test certificates are) is accepted unchecked: that is what the
/// option asks for.
mod danger {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

    #[derive(Debug)]
    pub(super) struct AnyCertificate(pub(super) Arc<CryptoProvider>);

    /// A signature check that failed only because the certificate could not be parsed counts
    /// as passed; a signature that does not verify still fails.
    pub(super) fn unparsed_is_valid(
        r: Result<HandshakeSignatureValid, Error>,
    ) -> Result<HandshakeSignatureValid, Error> {
        match r {
            Err(Error::InvalidCertificate(
                CertificateError::BadEncoding | CertificateError::Other(_),
            )) => Ok(HandshakeSignatureValid::assertion()),
            r => r,
        }
    }

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            unparsed_is_valid(verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            ))
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            unparsed_is_valid(verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            ))
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    #[test]
    fn only_an_unparsed_certificate_skips_the_signature_check() {
        let unparsed = [
            CertificateError::BadEncoding,
            CertificateError::Other(rustls::OtherError(Arc::new(std::fmt::Error))),
        ];
        for e in unparsed {
            assert!(unparsed_is_valid(Err(Error::InvalidCertificate(e))).is_ok());
        }
        let refused = [
            Error::InvalidCertificate(CertificateError::BadSignature),
            Error::PeerMisbehaved(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme),
        ];
        for e in refused {
            assert!(unparsed_is_valid(Err(e)).is_err());
        }
    }
}

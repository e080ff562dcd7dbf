//! Envoy transport sockets → the data plane's TLS tables: a filter chain's
//! `envoy.transport_sockets.tls` with a `DownstreamTlsContext` → `[listeners.tls]`, a cluster's
//! with an `UpstreamTlsContext` → `[clusters.tls]`; `raw_buffer` (Envoy's default) → no table.
//! Field semantics: Envoy's `tls.proto`, `common.proto` and `secret.proto`
//! (`extensions/transport_sockets/tls/v3`).
//!
//! Mapped: `tls_certificates[0]` (`certificate_chain`, `private_key`),
//! `validation_context.trusted_ca`, `require_client_certificate` (downstream), `sni`
//! (upstream). Every other field that changes behaviour is refused by name ("not supported by
//! respite"; SDS: "SDS is not supported by respite"). Accepted without a table key, each
//! because Respite already behaves as asked or the field has no effect on Redis:
//! - `alpn_protocols`: ignored, logged (Redis does not negotiate ALPN).
//! - `tls_params` versions: a minimum up to TLSv1_2 and a maximum of TLSv1_2, TLSv1_3 or AUTO.
//!   Respite speaks TLS 1.2 and 1.3: a lower minimum is raised, and with a TLSv1_2 maximum (also
//!   Envoy's own default for upstreams) a peer that offers 1.3 gets 1.3.
//! - `disable_stateful_session_resumption`, `disable_stateless_session_resumption`: Respite keeps
//!   no session cache and issues no tickets on listeners anyway.
//! - `prefer_client_ciphers`: rustls follows the client's order; Envoy's default (server order)
//!   cannot be had either, and only TLS 1.2 suites are affected.
//! - Upstream `auto_host_sni` (without `sni`) and `auto_sni_san_validation`: without `sni`
//!   Respite sends each host's own name (its address as written, else its IP) and always
//!   verifies the certificate against the name it sends.
//!
//! Where Envoy and Respite differ:
//! - Upstream without `validation_context` (or without its `trusted_ca`, or with
//!   `trust_chain_verification: ACCEPT_UNTRUSTED`): Envoy verifies nothing, so the cluster gets
//!   `insecure_skip_verify = true`, with a warning logged.
//! - Upstream with `trusted_ca`: Envoy checks the chain only (unless SAN matchers are set);
//!   Respite also checks the host name (`sni`, else the host's name or IP), which is stricter.
//!
//! Inline `DataSource`s (`inline_string`, `inline_bytes`) are written to private files
//! ([`super::files`]): the data plane takes file paths.

use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
use envoy_types::pb::envoy::config::core::v3::{DataSource, TransportSocket, data_source};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, TlsParameters,
    UpstreamTlsContext, certificate_validation_context::TrustChainVerification,
    common_tls_context::ValidationContextType, downstream_tls_context::OcspStaplePolicy,
    downstream_tls_context::SessionTicketKeysType, tls_parameters::TlsProtocol,
};
use respite::config::raw::{RawDownstreamTls, RawUpstreamTls, unspanned};

use super::fields::decode;

/// The TLS transport socket's name (`TransportSocket.name`).
pub const TLS_SOCKET: &str = "envoy.transport_sockets.tls";
/// The raw_buffer (plain TCP) transport socket's name: Envoy's default.
pub const RAW_BUFFER_SOCKET: &str = "envoy.transport_sockets.raw_buffer";
/// A listener's TLS context type URL (`TransportSocket.typed_config`).
pub const DOWNSTREAM_TLS_TYPE: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
/// A cluster's TLS context type URL (`TransportSocket.typed_config`).
pub const UPSTREAM_TLS_TYPE: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
/// The raw_buffer transport socket's config type URL.
pub const RAW_BUFFER_TYPE: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
/// The reason given for a TLS field Respite does not implement.
pub const NOT_SUPPORTED: &str = "not supported by respite";
/// The reason given for an SDS field (`*_sds_secret_config*`, and the `sds_config` in them).
pub const SDS_NOT_SUPPORTED: &str =
    "SDS is not supported by respite (give the certificates as files or inline)";

/// A listener filter chain's `transport_socket` (at `field`) → its `[listeners.tls]` table;
/// `None` for raw_buffer.
///
/// Errors: another transport socket, a `DownstreamTlsContext` field Respite does not implement
/// (named), no certificate or more than one, `require_client_certificate` without
/// `trusted_ca`, an inline certificate that cannot be written.
pub fn downstream(ts: &TransportSocket, field: &str) -> Result<Option<RawDownstreamTls>, String> {
    let Some(any) = tls_config(ts, field, DOWNSTREAM_TLS_TYPE)? else {
        return Ok(None);
    };
    let p = format!("{field}.typed_config");
    let ctx: DownstreamTlsContext = decode(any, DOWNSTREAM_TLS_TYPE, &p)?;
    downstream_context(&ctx, &p).map(Some)
}

/// A cluster's `transport_socket` → its `[clusters.tls]` table; `None` for raw_buffer. A
/// context that verifies nothing (see the module doc) logs a warning naming `cluster`.
///
/// Errors: another transport socket, an `UpstreamTlsContext` field Respite does not implement
/// (named), more than one client certificate, an inline certificate that cannot be written.
pub fn upstream(
    ts: &TransportSocket,
    field: &str,
    cluster: &str,
) -> Result<Option<RawUpstreamTls>, String> {
    let Some(any) = tls_config(ts, field, UPSTREAM_TLS_TYPE)? else {
        return Ok(None);
    };
    let p = format!("{field}.typed_config");
    let ctx: UpstreamTlsContext = decode(any, UPSTREAM_TLS_TYPE, &p)?;
    let t = upstream_context(&ctx, &p)?;
    if let Some(why) = &t.unverified {
        tracing::warn!(
            cluster,
            "{field}: {why}: as Envoy does, the hosts' certificates are not verified \
             (insecure_skip_verify = true; encrypted, not authenticated)"
        );
    }
    Ok(Some(t.tls))
}

/// The TLS context `Any` of a transport socket, `None` for raw_buffer. Matched by the type URL,
/// as Envoy picks the transport socket factory; the name only helps the message.
fn tls_config<'a>(
    ts: &'a TransportSocket,
    field: &str,
    tls_type: &str,
) -> Result<Option<&'a envoy_types::pb::google::protobuf::Any>, String> {
    match &ts.config_type {
        Some(ConfigType::TypedConfig(any)) if any.type_url == RAW_BUFFER_TYPE => Ok(None),
        Some(ConfigType::TypedConfig(any))
            if super::fields::inner_type(any).as_deref() == Some(tls_type) =>
        {
            Ok(Some(any))
        }
        Some(ConfigType::TypedConfig(any)) => Err(format!(
            "{field}: transport socket \"{}\" ({}) is {NOT_SUPPORTED} (only {TLS_SOCKET} with \
             {tls_type}, or raw_buffer)",
            ts.name, any.type_url
        )),
        None if ts.name == RAW_BUFFER_SOCKET => Ok(None),
        None => Err(format!(
            "{field}.typed_config: required ({tls_type} for {TLS_SOCKET})"
        )),
    }
}

/// `DownstreamTlsContext` (at `p`) → `[listeners.tls]`.
pub(super) fn downstream_context(
    ctx: &DownstreamTlsContext,
    p: &str,
) -> Result<RawDownstreamTls, String> {
    if ctx.require_sni.is_some_and(|v| v.value) {
        return Err(format!(
            "{p}.require_sni: {NOT_SUPPORTED} (a client without SNI gets the listener's \
             certificate)"
        ));
    }
    if ctx.session_timeout.is_some() {
        return Err(format!(
            "{p}.session_timeout: {NOT_SUPPORTED} (listeners do no session resumption)"
        ));
    }
    if ctx.ocsp_staple_policy != OcspStaplePolicy::LenientStapling as i32 {
        let name = OcspStaplePolicy::try_from(ctx.ocsp_staple_policy).map_or_else(
            |_| ctx.ocsp_staple_policy.to_string(),
            |v| v.as_str_name().into(),
        );
        return Err(format!(
            "{p}.ocsp_staple_policy: {name} is {NOT_SUPPORTED} (no OCSP stapling)"
        ));
    }
    if ctx.full_scan_certs_on_sni_mismatch.is_some_and(|v| v.value) {
        return Err(format!(
            "{p}.full_scan_certs_on_sni_mismatch: {NOT_SUPPORTED} (one certificate per listener)"
        ));
    }
    match &ctx.session_ticket_keys_type {
        Some(SessionTicketKeysType::SessionTicketKeys(_)) => {
            return Err(format!(
                "{p}.session_ticket_keys: {NOT_SUPPORTED} (listeners issue no session tickets)"
            ));
        }
        Some(SessionTicketKeysType::SessionTicketKeysSdsSecretConfig(_)) => {
            return Err(format!(
                "{p}.session_ticket_keys_sds_secret_config: {SDS_NOT_SUPPORTED}"
            ));
        }
        Some(SessionTicketKeysType::DisableStatelessSessionResumption(_)) | None => {}
    }
    let Some(common) = &ctx.common_tls_context else {
        return Err(format!(
            "{p}.common_tls_context: required (the listener's tls_certificates)"
        ));
    };
    let cp = format!("{p}.common_tls_context");
    common_fields(common, &cp)?;
    let Some((certificate_chain, private_key)) = certificate(common, &cp)? else {
        return Err(format!(
            "{cp}.tls_certificates: required (the listener's certificate_chain and private_key)"
        ));
    };
    let mut trusted_ca = None;
    if let Some((v, vp)) = validation_context(common, &cp)? {
        validation_fields(v, &vp)?;
        if v.trust_chain_verification != TrustChainVerification::VerifyTrustChain as i32 {
            return Err(format!(
                "{vp}.trust_chain_verification: accepting untrusted client certificates is \
                 {NOT_SUPPORTED}"
            ));
        }
        trusted_ca = pem_file(v.trusted_ca.as_ref(), &format!("{vp}.trusted_ca"))?;
    }
    let require_client_certificate = ctx.require_client_certificate.is_some_and(|v| v.value);
    if require_client_certificate && trusted_ca.is_none() {
        return Err(format!(
            "{p}.require_client_certificate: needs {cp}.validation_context.trusted_ca (Respite \
             verifies every client certificate against a CA; accepting any certificate is \
             {NOT_SUPPORTED})"
        ));
    }
    Ok(RawDownstreamTls {
        certificate_chain: unspanned(certificate_chain),
        private_key: unspanned(private_key),
        trusted_ca: trusted_ca.map(unspanned),
        require_client_certificate,
        sni: Vec::new(),
    })
}

/// A translated `UpstreamTlsContext`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Upstream {
    /// The `[clusters.tls]` table.
    pub tls: RawUpstreamTls,
    /// Why the hosts' certificates are not verified, when they are not.
    pub unverified: Option<String>,
}

/// `UpstreamTlsContext` (at `p`) → `[clusters.tls]`.
#[allow(deprecated)] // enforce_rsa_key_usage: still sent by older control planes.
pub(super) fn upstream_context(ctx: &UpstreamTlsContext, p: &str) -> Result<Upstream, String> {
    if ctx.allow_renegotiation {
        return Err(format!(
            "{p}.allow_renegotiation: {NOT_SUPPORTED} (rustls never renegotiates)"
        ));
    }
    if ctx.max_session_keys.is_some() {
        return Err(format!(
            "{p}.max_session_keys: {NOT_SUPPORTED} (rustls's own session cache is used)"
        ));
    }
    if ctx.enforce_rsa_key_usage.is_some_and(|v| v.value) {
        return Err(format!("{p}.enforce_rsa_key_usage: {NOT_SUPPORTED}"));
    }
    if ctx.auto_host_sni && !ctx.sni.is_empty() {
        return Err(format!(
            "{p}.auto_host_sni: with sni, {NOT_SUPPORTED} (Respite sends sni to every host; \
             without sni it sends each host's own name, as auto_host_sni does)"
        ));
    }
    let mut tls = RawUpstreamTls {
        sni: (!ctx.sni.is_empty()).then(|| unspanned(ctx.sni.clone())),
        ..RawUpstreamTls::default()
    };
    let Some(common) = &ctx.common_tls_context else {
        tls.insecure_skip_verify = true;
        return Ok(Upstream {
            tls,
            unverified: Some(format!("{p}.common_tls_context is absent")),
        });
    };
    let cp = format!("{p}.common_tls_context");
    common_fields(common, &cp)?;
    if let Some((chain, key)) = certificate(common, &cp)? {
        tls.certificate_chain = Some(unspanned(chain));
        tls.private_key = Some(unspanned(key));
    }
    let unverified = match validation_context(common, &cp)? {
        None => Some(format!("{cp}.validation_context is absent")),
        Some((v, vp)) => {
            validation_fields(v, &vp)?;
            let trusted_ca = pem_file(v.trusted_ca.as_ref(), &format!("{vp}.trusted_ca"))?;
            match TrustChainVerification::try_from(v.trust_chain_verification) {
                Ok(TrustChainVerification::VerifyTrustChain) => match trusted_ca {
                    Some(ca) => {
                        tls.trusted_ca = Some(unspanned(ca));
                        None
                    }
                    None => Some(format!("{vp}.trusted_ca is absent")),
                },
                // The CA is moot once any chain is accepted.
                Ok(TrustChainVerification::AcceptUntrusted) => {
                    Some(format!("{vp}.trust_chain_verification is ACCEPT_UNTRUSTED"))
                }
                Err(_) => {
                    return Err(format!(
                        "{vp}.trust_chain_verification: unknown value {}",
                        v.trust_chain_verification
                    ));
                }
            }
        }
    };
    tls.insecure_skip_verify = unverified.is_some();
    Ok(Upstream { tls, unverified })
}

/// The `CommonTlsContext` fields both sides refuse or ignore (everything but the certificate
/// and the validation context).
#[allow(deprecated)] // the certificate provider fields: still sent by older control planes.
fn common_fields(c: &CommonTlsContext, p: &str) -> Result<(), String> {
    if let Some(t) = &c.tls_params {
        tls_params(t, &format!("{p}.tls_params"))?;
    }
    if !c.tls_certificate_sds_secret_configs.is_empty() {
        return Err(format!(
            "{p}.tls_certificate_sds_secret_configs: {SDS_NOT_SUPPORTED}"
        ));
    }
    let refused: [(bool, &str); 6] = [
        (
            c.tls_certificate_provider_instance.is_some(),
            "tls_certificate_provider_instance",
        ),
        (
            c.custom_tls_certificate_selector.is_some(),
            "custom_tls_certificate_selector",
        ),
        (
            c.tls_certificate_certificate_provider.is_some(),
            "tls_certificate_certificate_provider",
        ),
        (
            c.tls_certificate_certificate_provider_instance.is_some(),
            "tls_certificate_certificate_provider_instance",
        ),
        (c.custom_handshaker.is_some(), "custom_handshaker"),
        (c.key_log.is_some(), "key_log"),
    ];
    if let Some((_, name)) = refused.into_iter().find(|(set, _)| *set) {
        return Err(format!("{p}.{name}: {NOT_SUPPORTED}"));
    }
    if !c.alpn_protocols.is_empty() {
        tracing::info!(
            alpn_protocols = ?c.alpn_protocols,
            "{p}.alpn_protocols: ignored (Redis does not negotiate ALPN)"
        );
    }
    Ok(())
}

/// `TlsParameters`: protocol versions Respite covers; no cipher, curve, signature or
/// compliance choices.
fn tls_params(t: &TlsParameters, p: &str) -> Result<(), String> {
    let version = |v: i32, key: &str| {
        TlsProtocol::try_from(v).map_err(|_| format!("{p}.{key}: unknown value {v}"))
    };
    let min = version(
        t.tls_minimum_protocol_version,
        "tls_minimum_protocol_version",
    )?;
    if min == TlsProtocol::TlSv13 {
        return Err(format!(
            "{p}.tls_minimum_protocol_version: TLSv1_3 is {NOT_SUPPORTED} (Respite also accepts \
             TLS 1.2)"
        ));
    }
    let max = version(
        t.tls_maximum_protocol_version,
        "tls_maximum_protocol_version",
    )?;
    if matches!(max, TlsProtocol::TlSv10 | TlsProtocol::TlSv11) {
        return Err(format!(
            "{p}.tls_maximum_protocol_version: {} is {NOT_SUPPORTED} (TLS 1.2 and 1.3 only)",
            max.as_str_name()
        ));
    }
    let lists: [(bool, &str); 4] = [
        (!t.cipher_suites.is_empty(), "cipher_suites"),
        (!t.ecdh_curves.is_empty(), "ecdh_curves"),
        (!t.signature_algorithms.is_empty(), "signature_algorithms"),
        (!t.compliance_policies.is_empty(), "compliance_policies"),
    ];
    match lists.into_iter().find(|(set, _)| *set) {
        Some((_, name)) => Err(format!(
            "{p}.{name}: {NOT_SUPPORTED} (rustls's defaults are used)"
        )),
        None => Ok(()),
    }
}

/// `tls_certificates`: none, or the one certificate's (chain, key) file paths.
fn certificate(c: &CommonTlsContext, p: &str) -> Result<Option<(String, String)>, String> {
    let cert = match c.tls_certificates.as_slice() {
        [] => return Ok(None),
        [one] => one,
        many => {
            return Err(format!(
                "{p}.tls_certificates: {} certificates; Envoy chooses among several by key type \
                 and the peer's support, which is {NOT_SUPPORTED} (give exactly one)",
                many.len()
            ));
        }
    };
    let cp = format!("{p}.tls_certificates[0]");
    let refused: [(bool, &str); 7] = [
        (cert.pkcs12.is_some(), "pkcs12"),
        (cert.password.is_some(), "password"),
        (cert.private_key_provider.is_some(), "private_key_provider"),
        (cert.watched_directory.is_some(), "watched_directory"),
        (cert.ocsp_staple.is_some(), "ocsp_staple"),
        (
            !cert.signed_certificate_timestamp.is_empty(),
            "signed_certificate_timestamp",
        ),
        (cert.tls_params.is_some(), "tls_params"),
    ];
    if let Some((_, name)) = refused.into_iter().find(|(set, _)| *set) {
        return Err(format!(
            "{cp}.{name}: {NOT_SUPPORTED} (an unencrypted PEM certificate_chain and private_key)"
        ));
    }
    let chain = pem_file(
        cert.certificate_chain.as_ref(),
        &format!("{cp}.certificate_chain"),
    )?
    .ok_or_else(|| format!("{cp}.certificate_chain: required"))?;
    let key = pem_file(cert.private_key.as_ref(), &format!("{cp}.private_key"))?
        .ok_or_else(|| format!("{cp}.private_key: required"))?;
    Ok(Some((chain, key)))
}

/// The plain `validation_context` and its path; the other members of the oneof are refused.
#[allow(deprecated)] // the certificate provider members: still sent by older control planes.
fn validation_context<'a>(
    c: &'a CommonTlsContext,
    p: &str,
) -> Result<Option<(&'a CertificateValidationContext, String)>, String> {
    match &c.validation_context_type {
        None => Ok(None),
        Some(ValidationContextType::ValidationContext(v)) => {
            Ok(Some((v, format!("{p}.validation_context"))))
        }
        Some(ValidationContextType::ValidationContextSdsSecretConfig(_)) => Err(format!(
            "{p}.validation_context_sds_secret_config: {SDS_NOT_SUPPORTED}"
        )),
        Some(ValidationContextType::CombinedValidationContext(cv)) => {
            if cv.validation_context_sds_secret_config.is_some() {
                Err(format!(
                    "{p}.combined_validation_context.validation_context_sds_secret_config: \
                     {SDS_NOT_SUPPORTED}"
                ))
            } else {
                Err(format!(
                    "{p}.combined_validation_context: {NOT_SUPPORTED} (use validation_context)"
                ))
            }
        }
        Some(ValidationContextType::ValidationContextCertificateProvider(_)) => Err(format!(
            "{p}.validation_context_certificate_provider: {NOT_SUPPORTED}"
        )),
        Some(ValidationContextType::ValidationContextCertificateProviderInstance(_)) => Err(
            format!("{p}.validation_context_certificate_provider_instance: {NOT_SUPPORTED}"),
        ),
    }
}

/// The `CertificateValidationContext` fields both sides refuse: everything but `trusted_ca`
/// and `trust_chain_verification` (each side decides on that one).
#[allow(deprecated)] // match_subject_alt_names: still sent by older control planes.
fn validation_fields(v: &CertificateValidationContext, p: &str) -> Result<(), String> {
    let refused: [(bool, &str); 14] = [
        (
            v.ca_certificate_provider_instance.is_some(),
            "ca_certificate_provider_instance",
        ),
        (v.system_root_certs.is_some(), "system_root_certs"),
        (v.watched_directory.is_some(), "watched_directory"),
        (
            !v.verify_certificate_spki.is_empty(),
            "verify_certificate_spki",
        ),
        (
            !v.verify_certificate_hash.is_empty(),
            "verify_certificate_hash",
        ),
        (
            !v.match_typed_subject_alt_names.is_empty(),
            "match_typed_subject_alt_names",
        ),
        (
            !v.match_subject_alt_names.is_empty(),
            "match_subject_alt_names",
        ),
        (
            v.require_signed_certificate_timestamp
                .is_some_and(|b| b.value),
            "require_signed_certificate_timestamp",
        ),
        (v.crl.is_some(), "crl"),
        (v.allow_expired_certificate, "allow_expired_certificate"),
        (
            v.custom_validator_config.is_some(),
            "custom_validator_config",
        ),
        (v.only_verify_leaf_cert_crl, "only_verify_leaf_cert_crl"),
        (v.max_verify_depth.is_some(), "max_verify_depth"),
        (v.suppress_client_ca_list, "suppress_client_ca_list"),
    ];
    match refused.into_iter().find(|(set, _)| *set) {
        Some((_, name)) => Err(format!("{p}.{name}: {NOT_SUPPORTED}")),
        None => Ok(()),
    }
}

/// A TLS `DataSource` → the path the data plane reads: `filename` as written; `inline_string`
/// / `inline_bytes` written to a private file named by their hash ([`super::files`]). `None`
/// when absent.
///
/// Errors: `environment_variable` or `watched_directory` (not supported), an empty
/// `filename` or DataSource, a file that cannot be written.
pub fn pem_file(ds: Option<&DataSource>, field: &str) -> Result<Option<String>, String> {
    let Some(ds) = ds else {
        return Ok(None);
    };
    if ds.watched_directory.is_some() {
        return Err(format!(
            "{field}.watched_directory: {NOT_SUPPORTED} (the files are read at each config load)"
        ));
    }
    let (bytes, key) = match &ds.specifier {
        Some(data_source::Specifier::Filename(f)) if f.is_empty() => {
            return Err(format!("{field}.filename: empty"));
        }
        Some(data_source::Specifier::Filename(f)) => return Ok(Some(f.clone())),
        Some(data_source::Specifier::InlineString(s)) => (s.as_bytes(), "inline_string"),
        Some(data_source::Specifier::InlineBytes(b)) => (b.as_slice(), "inline_bytes"),
        Some(data_source::Specifier::EnvironmentVariable(_)) => {
            return Err(format!(
                "{field}.environment_variable: {NOT_SUPPORTED} for TLS files (use filename, \
                 inline_string or inline_bytes)"
            ));
        }
        None => {
            return Err(format!(
                "{field}: empty DataSource (filename, inline_string or inline_bytes)"
            ));
        }
    };
    let path = super::files::write(bytes).map_err(|e| format!("{field}.{key}: {e}"))?;
    path.into_os_string()
        .into_string()
        .map(Some)
        .map_err(|p| format!("{field}.{key}: the file's path {p:?} is not UTF-8"))
}

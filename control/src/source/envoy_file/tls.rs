//! The TLS transport socket messages (`extensions/transport_sockets/tls/v3`): `DownstreamTlsContext`
//! and `UpstreamTlsContext` with their `CommonTlsContext`, `TlsCertificate`, `TlsParameters` and
//! `CertificateValidationContext`.
//!
//! Scalar and `DataSource` fields are mapped, so the translator decides on their values (and
//! names them when it refuses them). Fields that are large messages of their own (SDS configs,
//! certificate providers, extension configs, SAN matchers, key logs) are refused here, by path,
//! with the translator's reason: mapping them only to refuse them later would add nothing.

use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use serde_json::Value;

use super::core::data_source;
use super::reader::{MapErr, Obj, Res, enum_value, oneof};
use crate::translate::tls::{NOT_SUPPORTED, SDS_NOT_SUPPORTED};

/// Refuses `name` when present, with `reason`.
fn refuse(o: &mut Obj, name: &str, reason: &str) -> Res<()> {
    o.msg::<()>(name, |_, p| Err(MapErr::new(p, reason)))
        .map(|_| ())
}

/// `DownstreamTlsContext` (the fields of an `Any`, `@type` already taken by the caller).
pub fn downstream_tls_context(o: &mut Obj, p: &str) -> Res<tls::DownstreamTlsContext> {
    use tls::downstream_tls_context::{OcspStaplePolicy, SessionTicketKeysType as K};
    refuse(
        o,
        "session_ticket_keys_sds_secret_config",
        SDS_NOT_SUPPORTED,
    )?;
    let keys = o
        .msg("session_ticket_keys", |v, p| {
            let mut k = Obj::new(v, p)?;
            let r = tls::TlsSessionTicketKeys {
                keys: k.list("keys", data_source)?,
            };
            k.done(r)
        })?
        .map(K::SessionTicketKeys);
    let disable = o
        .opt_bool("disable_stateless_session_resumption")?
        .map(K::DisableStatelessSessionResumption);
    Ok(tls::DownstreamTlsContext {
        common_tls_context: o.msg("common_tls_context", common_tls_context)?,
        require_client_certificate: o.boolw("require_client_certificate")?,
        require_sni: o.boolw("require_sni")?,
        disable_stateful_session_resumption: o.bool("disable_stateful_session_resumption")?,
        session_timeout: o.dur("session_timeout")?,
        ocsp_staple_policy: o.enm("ocsp_staple_policy", OcspStaplePolicy::from_str_name)?,
        full_scan_certs_on_sni_mismatch: o.boolw("full_scan_certs_on_sni_mismatch")?,
        prefer_client_ciphers: o.bool("prefer_client_ciphers")?,
        session_ticket_keys_type: oneof(
            p,
            vec![
                ("session_ticket_keys", keys),
                ("disable_stateless_session_resumption", disable),
            ],
        )?,
    })
}

/// `UpstreamTlsContext` (the fields of an `Any`, `@type` already taken by the caller).
#[allow(deprecated)] // enforce_rsa_key_usage is deprecated, still accepted by Envoy
pub fn upstream_tls_context(o: &mut Obj) -> Res<tls::UpstreamTlsContext> {
    Ok(tls::UpstreamTlsContext {
        common_tls_context: o.msg("common_tls_context", common_tls_context)?,
        sni: o.string("sni")?,
        auto_host_sni: o.bool("auto_host_sni")?,
        auto_sni_san_validation: o.bool("auto_sni_san_validation")?,
        allow_renegotiation: o.bool("allow_renegotiation")?,
        max_session_keys: o.u32w("max_session_keys")?,
        enforce_rsa_key_usage: o.boolw("enforce_rsa_key_usage")?,
    })
}

/// `CommonTlsContext`.
fn common_tls_context(v: &Value, p: &str) -> Res<tls::CommonTlsContext> {
    use tls::common_tls_context::ValidationContextType as V;
    let mut o = Obj::new(v, p)?;
    refuse(
        &mut o,
        "tls_certificate_sds_secret_configs",
        SDS_NOT_SUPPORTED,
    )?;
    refuse(
        &mut o,
        "validation_context_sds_secret_config",
        SDS_NOT_SUPPORTED,
    )?;
    o.msg::<()>("combined_validation_context", |v, p| {
        let mut c = Obj::new(v, p)?;
        refuse(
            &mut c,
            "validation_context_sds_secret_config",
            SDS_NOT_SUPPORTED,
        )?;
        Err(MapErr::new(
            p,
            format!("{NOT_SUPPORTED} (use validation_context)"),
        ))
    })?;
    for name in [
        "tls_certificate_provider_instance",
        "custom_tls_certificate_selector",
        "tls_certificate_certificate_provider",
        "tls_certificate_certificate_provider_instance",
        "validation_context_certificate_provider",
        "validation_context_certificate_provider_instance",
        "custom_handshaker",
        "key_log",
    ] {
        refuse(&mut o, name, NOT_SUPPORTED)?;
    }
    let r = tls::CommonTlsContext {
        tls_params: o.msg("tls_params", tls_params)?,
        tls_certificates: o.list("tls_certificates", tls_certificate)?,
        alpn_protocols: o.strings("alpn_protocols")?,
        validation_context_type: o
            .msg("validation_context", validation_context)?
            .map(V::ValidationContext),
        ..Default::default()
    };
    o.done(r)
}

/// `TlsParameters`.
fn tls_params(v: &Value, p: &str) -> Res<tls::TlsParameters> {
    use tls::tls_parameters::{CompliancePolicy, TlsProtocol};
    let mut o = Obj::new(v, p)?;
    let r = tls::TlsParameters {
        tls_minimum_protocol_version: o
            .enm("tls_minimum_protocol_version", TlsProtocol::from_str_name)?,
        tls_maximum_protocol_version: o
            .enm("tls_maximum_protocol_version", TlsProtocol::from_str_name)?,
        cipher_suites: o.strings("cipher_suites")?,
        ecdh_curves: o.strings("ecdh_curves")?,
        signature_algorithms: o.strings("signature_algorithms")?,
        compliance_policies: o.list("compliance_policies", |v, p| {
            enum_value(v, p, CompliancePolicy::from_str_name)
        })?,
    };
    o.done(r)
}

/// `TlsCertificate`.
fn tls_certificate(v: &Value, p: &str) -> Res<tls::TlsCertificate> {
    let mut o = Obj::new(v, p)?;
    refuse(&mut o, "private_key_provider", NOT_SUPPORTED)?;
    refuse(&mut o, "watched_directory", NOT_SUPPORTED)?;
    let r = tls::TlsCertificate {
        certificate_chain: o.msg("certificate_chain", data_source)?,
        private_key: o.msg("private_key", data_source)?,
        pkcs12: o.msg("pkcs12", data_source)?,
        password: o.msg("password", data_source)?,
        ocsp_staple: o.msg("ocsp_staple", data_source)?,
        signed_certificate_timestamp: o.list("signed_certificate_timestamp", data_source)?,
        tls_params: o.msg("tls_params", tls_params)?,
        ..Default::default()
    };
    o.done(r)
}

/// `CertificateValidationContext`.
#[allow(deprecated)] // match_subject_alt_names is deprecated, still accepted by Envoy
fn validation_context(v: &Value, p: &str) -> Res<tls::CertificateValidationContext> {
    use tls::certificate_validation_context::{SystemRootCerts, TrustChainVerification};
    let mut o = Obj::new(v, p)?;
    for name in [
        "ca_certificate_provider_instance",
        "watched_directory",
        "match_typed_subject_alt_names",
        "match_subject_alt_names",
        "custom_validator_config",
    ] {
        refuse(&mut o, name, NOT_SUPPORTED)?;
    }
    let r = tls::CertificateValidationContext {
        trusted_ca: o.msg("trusted_ca", data_source)?,
        system_root_certs: o.msg("system_root_certs", |v, p| {
            Obj::new(v, p)?.finish().map(|()| SystemRootCerts {})
        })?,
        verify_certificate_spki: o.strings("verify_certificate_spki")?,
        verify_certificate_hash: o.strings("verify_certificate_hash")?,
        require_signed_certificate_timestamp: o.boolw("require_signed_certificate_timestamp")?,
        crl: o.msg("crl", data_source)?,
        allow_expired_certificate: o.bool("allow_expired_certificate")?,
        trust_chain_verification: o.enm(
            "trust_chain_verification",
            TrustChainVerification::from_str_name,
        )?,
        only_verify_leaf_cert_crl: o.bool("only_verify_leaf_cert_crl")?,
        max_verify_depth: o.u32w("max_verify_depth")?,
        suppress_client_ca_list: o.bool("suppress_client_ca_list")?,
        ..Default::default()
    };
    o.done(r)
}

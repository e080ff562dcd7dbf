//! TLS transport sockets: each mapping checked through the data plane's parser (which reads the
//! PEM files, so the tests make real ones), each refusal with the field it names.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
use envoy_types::pb::envoy::config::core::v3::{DataSource, TransportSocket, data_source};
use envoy_types::pb::envoy::config::listener::v3::{
    FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
    TlsCertificate, TlsParameters, UpstreamTlsContext, common_tls_context::ValidationContextType,
    downstream_tls_context::SessionTicketKeysType, tls_parameters::TlsProtocol,
};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::tests_support::*;

/// A CA, a server certificate for `localhost` and a client certificate it signed (PEM files).
struct Pki {
    _dir: tempfile::TempDir,
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
    /// The server certificate's PEM text, for the inline tests.
    server_pem: String,
    server_key_pem: String,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf("localhost");
    let (client, client_key) = leaf("client");
    let write = |name: &str, text: &str| -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    Pki {
        ca: write("ca.pem", &ca.pem()),
        server_cert: write("server.pem", &server),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client),
        client_key: write("client.key", &client_key),
        server_pem: server,
        server_key_pem: server_key,
        _dir: dir,
    }
}

fn file(path: &str) -> DataSource {
    DataSource {
        specifier: Some(data_source::Specifier::Filename(path.into())),
        ..Default::default()
    }
}

fn cert(chain: DataSource, key: DataSource) -> TlsCertificate {
    TlsCertificate {
        certificate_chain: Some(chain),
        private_key: Some(key),
        ..Default::default()
    }
}

fn verify_with(ca: DataSource) -> Option<ValidationContextType> {
    Some(ValidationContextType::ValidationContext(
        CertificateValidationContext {
            trusted_ca: Some(ca),
            ..Default::default()
        },
    ))
}

fn tls_socket<M: prost::Message + prost::Name>(ctx: &M) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(any(ctx))),
    }
}

/// A listener serving `pki`'s server certificate.
fn downstream(pki: &Pki) -> DownstreamTlsContext {
    DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificates: vec![cert(file(&pki.server_cert), file(&pki.server_key))],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tls_listener(ctx: &DownstreamTlsContext) -> Listener {
    let mut l = listener_with(&proxy());
    l.filter_chains[0].transport_socket = Some(tls_socket(ctx));
    l
}

fn tls_cluster(ctx: &UpstreamTlsContext) -> Cluster {
    let mut c = static_cluster("cache", &[7000]);
    c.transport_socket = Some(tls_socket(ctx));
    c
}

/// The listener's translation error (without the data plane's check, which would read files).
fn downstream_err(ctx: &DownstreamTlsContext) -> String {
    listener_err(&tls_listener(ctx))
}

fn upstream_err(ctx: &UpstreamTlsContext) -> String {
    cluster_err(&tls_cluster(ctx))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn downstream_files_client_ca_and_required_client_certificate() {
    let pki = pki();
    let mut ctx = downstream(&pki);
    ctx.require_client_certificate = Some(BoolValue { value: true });
    if let Some(c) = ctx.common_tls_context.as_mut() {
        c.validation_context_type = verify_with(file(&pki.ca));
        c.alpn_protocols = vec!["redis".into()]; // ignored, logged
    }
    let cfg = parse_listener(&tls_listener(&ctx));
    let tls = cfg.listeners[0].tls.as_ref().expect("[listeners.tls]");
    assert_eq!(tls.certificate_chain, PathBuf::from(&pki.server_cert));
    assert_eq!(tls.private_key, PathBuf::from(&pki.server_key));
    assert_eq!(tls.trusted_ca, Some(PathBuf::from(&pki.ca)));
    assert!(tls.require_client_certificate);
    assert!(tls.sni.is_empty());

    // Without require_client_certificate: the CA still verifies a certificate a client sends.
    let mut ctx = ctx.clone();
    ctx.require_client_certificate = None;
    let cfg = parse_listener(&tls_listener(&ctx));
    let tls = cfg.listeners[0].tls.as_ref().expect("[listeners.tls]");
    assert!(!tls.require_client_certificate);
    assert_eq!(tls.trusted_ca, Some(PathBuf::from(&pki.ca)));
}

/// The `tls_inspector` listener filter real Envoy TLS configs carry (typed or by name only):
/// accepted and ignored, the listener's TLS as without it.
#[test]
fn tls_inspector_is_accepted_and_ignored() {
    let pki = pki();
    let mut l = tls_listener(&downstream(&pki));
    l.listener_filters = vec![
        ListenerFilter {
            name: "envoy.filters.listener.tls_inspector".into(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(any(
                &TlsInspector::default(),
            ))),
            ..Default::default()
        },
        ListenerFilter {
            name: "envoy.listener.tls_inspector".into(),
            ..Default::default()
        },
    ];
    let cfg = parse_listener(&l);
    let tls = cfg.listeners[0].tls.as_ref().expect("[listeners.tls]");
    assert_eq!(tls.certificate_chain, PathBuf::from(&pki.server_cert));
}

#[test]
fn upstream_sni_trusted_ca_and_client_certificate() {
    let pki = pki();
    let ctx = UpstreamTlsContext {
        sni: "redis.internal".into(),
        common_tls_context: Some(CommonTlsContext {
            tls_certificates: vec![cert(file(&pki.client_cert), file(&pki.client_key))],
            validation_context_type: verify_with(file(&pki.ca)),
            tls_params: Some(TlsParameters {
                tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
                tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let c = parse_cluster(&tls_cluster(&ctx));
    let tls = c.tls.expect("[clusters.tls]");
    assert_eq!(tls.sni.as_deref(), Some("redis.internal"));
    assert_eq!(tls.trusted_ca, Some(PathBuf::from(&pki.ca)));
    assert_eq!(tls.certificate_chain, Some(PathBuf::from(&pki.client_cert)));
    assert_eq!(tls.private_key, Some(PathBuf::from(&pki.client_key)));
    assert!(!tls.insecure_skip_verify);
}

#[test]
fn upstream_without_validation_context_verifies_nothing() {
    // Envoy's semantics: no validation_context (or no trusted_ca in it) = no verification.
    let bare = UpstreamTlsContext::default();
    let c = parse_cluster(&tls_cluster(&bare));
    let tls = c.tls.expect("[clusters.tls]");
    assert!(tls.insecure_skip_verify);
    assert_eq!(tls.trusted_ca, None);

    let no_ca = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext::default(),
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(
        parse_cluster(&tls_cluster(&no_ca))
            .tls
            .unwrap()
            .insecure_skip_verify
    );

    let t = super::tls::upstream_context(&no_ca, "typed_config").unwrap();
    assert_mentions(
        t.unverified.as_deref().unwrap(),
        &["typed_config.common_tls_context.validation_context.trusted_ca is absent"],
    );
}

#[test]
fn inline_certificates_become_private_files_named_by_their_bytes() {
    let pki = pki();
    let inline = |s: &str| DataSource {
        specifier: Some(data_source::Specifier::InlineString(s.into())),
        ..Default::default()
    };
    let mut ctx = downstream(&pki);
    if let Some(c) = ctx.common_tls_context.as_mut() {
        c.tls_certificates = vec![cert(inline(&pki.server_pem), inline(&pki.server_key_pem))];
    }
    let l = tls_listener(&ctx);
    let cfg = parse_listener(&l);
    let tls = cfg.listeners[0].tls.as_ref().expect("[listeners.tls]");
    let dir = super::files::dir();
    for p in [&tls.certificate_chain, &tls.private_key] {
        assert_eq!(p.parent(), Some(dir.as_path()), "{}", p.display());
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(
        std::fs::read_to_string(&tls.private_key).unwrap(),
        pki.server_key_pem
    );
    // The same bytes again (a re-sent resource): the same paths, so the same draft.
    assert_eq!(super::listener(&l).unwrap(), super::listener(&l).unwrap());
    let again = parse_listener(&l);
    assert_eq!(again.listeners[0].tls, cfg.listeners[0].tls);

    // inline_bytes of the same text is the same file.
    let bytes = DataSource {
        specifier: Some(data_source::Specifier::InlineBytes(
            pki.server_key_pem.clone().into_bytes(),
        )),
        ..Default::default()
    };
    let path = super::tls::pem_file(Some(&bytes), "k").unwrap().unwrap();
    assert_eq!(PathBuf::from(path), tls.private_key);
}

#[test]
fn sds_is_refused_naming_the_field() {
    let pki = pki();
    let sds = SdsSecretConfig {
        name: "server-cert".into(),
        sds_config: None,
    };
    let mut ctx = downstream(&pki);
    if let Some(c) = ctx.common_tls_context.as_mut() {
        c.tls_certificate_sds_secret_configs = vec![sds.clone()];
    }
    assert_mentions(
        &downstream_err(&ctx),
        &[
            "filter_chains[0].transport_socket.typed_config.common_tls_context.\
             tls_certificate_sds_secret_configs",
            "SDS is not supported by respite",
        ],
    );

    let mut ctx = downstream(&pki);
    if let Some(c) = ctx.common_tls_context.as_mut() {
        c.validation_context_type = Some(ValidationContextType::ValidationContextSdsSecretConfig(
            sds.clone(),
        ));
    }
    assert_mentions(
        &downstream_err(&ctx),
        &[
            "validation_context_sds_secret_config",
            "SDS is not supported by respite",
        ],
    );

    let mut ctx = downstream(&pki);
    ctx.session_ticket_keys_type = Some(SessionTicketKeysType::SessionTicketKeysSdsSecretConfig(
        sds.clone(),
    ));
    assert_mentions(
        &downstream_err(&ctx),
        &[
            "session_ticket_keys_sds_secret_config",
            "SDS is not supported by respite",
        ],
    );

    let up = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![sds],
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_mentions(
        &upstream_err(&up),
        &[
            "transport_socket.typed_config.common_tls_context.tls_certificate_sds_secret_configs",
            "SDS is not supported by respite",
        ],
    );
}

#[test]
#[allow(deprecated)] // match_subject_alt_names
fn unsupported_fields_are_refused_by_name() {
    let pki = pki();
    let down = |edit: &dyn Fn(&mut DownstreamTlsContext)| {
        let mut ctx = downstream(&pki);
        edit(&mut ctx);
        downstream_err(&ctx)
    };
    let common = |edit: &dyn Fn(&mut CommonTlsContext)| {
        down(&|ctx| {
            if let Some(c) = ctx.common_tls_context.as_mut() {
                edit(c);
            }
        })
    };
    let validation = |edit: &dyn Fn(&mut CertificateValidationContext)| {
        common(&|c| {
            let mut v = CertificateValidationContext {
                trusted_ca: Some(file(&pki.ca)),
                ..Default::default()
            };
            edit(&mut v);
            c.validation_context_type = Some(ValidationContextType::ValidationContext(v));
        })
    };
    let refused = |err: String, field: &str| {
        assert_mentions(&err, &[field, "not supported by respite"]);
    };

    refused(
        common(&|c| {
            c.tls_params = Some(TlsParameters {
                cipher_suites: vec!["ECDHE-RSA-AES128-GCM-SHA256".into()],
                ..Default::default()
            })
        }),
        "common_tls_context.tls_params.cipher_suites",
    );
    refused(
        common(&|c| {
            c.tls_params = Some(TlsParameters {
                tls_maximum_protocol_version: TlsProtocol::TlSv11 as i32,
                ..Default::default()
            })
        }),
        "tls_params.tls_maximum_protocol_version: TLSv1_1",
    );
    refused(
        common(&|c| {
            c.tls_params = Some(TlsParameters {
                tls_minimum_protocol_version: TlsProtocol::TlSv13 as i32,
                ..Default::default()
            })
        }),
        "tls_params.tls_minimum_protocol_version: TLSv1_3",
    );
    refused(
        common(&|c| c.tls_certificates.push(c.tls_certificates[0].clone())),
        "common_tls_context.tls_certificates: 2 certificates",
    );
    refused(
        common(&|c| c.tls_certificates[0].password = Some(file("/pw"))),
        "tls_certificates[0].password",
    );
    refused(
        common(&|c| {
            c.tls_certificates[0].private_key = Some(DataSource {
                specifier: Some(data_source::Specifier::EnvironmentVariable("KEY".into())),
                ..Default::default()
            })
        }),
        "tls_certificates[0].private_key.environment_variable",
    );
    refused(
        validation(&|v| v.match_subject_alt_names = vec![Default::default()]),
        "validation_context.match_subject_alt_names",
    );
    refused(
        validation(&|v| v.match_typed_subject_alt_names = vec![Default::default()]),
        "validation_context.match_typed_subject_alt_names",
    );
    refused(
        validation(&|v| v.crl = Some(file("/crl.pem"))),
        "validation_context.crl",
    );
    refused(
        validation(&|v| v.verify_certificate_spki = vec!["x".into()]),
        "validation_context.verify_certificate_spki",
    );
    refused(
        validation(&|v| v.verify_certificate_hash = vec!["x".into()]),
        "validation_context.verify_certificate_hash",
    );
    refused(
        validation(&|v| v.custom_validator_config = Some(Default::default())),
        "validation_context.custom_validator_config",
    );
    refused(
        validation(&|v| v.trust_chain_verification = 1),
        "validation_context.trust_chain_verification",
    );
    refused(
        down(&|ctx| ctx.ocsp_staple_policy = 2),
        "typed_config.ocsp_staple_policy: MUST_STAPLE",
    );
    refused(
        down(&|ctx| {
            ctx.session_ticket_keys_type =
                Some(SessionTicketKeysType::SessionTicketKeys(Default::default()))
        }),
        "typed_config.session_ticket_keys",
    );
    refused(
        down(&|ctx| ctx.require_sni = Some(BoolValue { value: true })),
        "typed_config.require_sni",
    );
    refused(
        down(&|ctx| ctx.require_client_certificate = Some(BoolValue { value: true })),
        "typed_config.require_client_certificate",
    );

    let up = |edit: &dyn Fn(&mut UpstreamTlsContext)| {
        let mut ctx = UpstreamTlsContext::default();
        edit(&mut ctx);
        upstream_err(&ctx)
    };
    refused(
        up(&|c| c.allow_renegotiation = true),
        "transport_socket.typed_config.allow_renegotiation",
    );
    refused(
        up(&|c| c.max_session_keys = Some(UInt32Value { value: 0 })),
        "transport_socket.typed_config.max_session_keys",
    );
    refused(
        up(&|c| {
            c.sni = "a".into();
            c.auto_host_sni = true;
        }),
        "typed_config.auto_host_sni",
    );

    let mut c = static_cluster("cache", &[7000]);
    c.transport_socket_matches = vec![TransportSocketMatch::default()];
    refused(cluster_err(&c), "transport_socket_matches");

    // SNI filter chains are refused by server_names, not folded into [[listeners.tls.sni]].
    let mut l = tls_listener(&downstream(&pki));
    l.filter_chains[0].filter_chain_match = Some(FilterChainMatch {
        server_names: vec!["a.example.com".into()],
        ..Default::default()
    });
    l.filter_chains.push(l.filter_chains[0].clone());
    refused(
        listener_err(&l),
        "filter_chains[0].filter_chain_match.server_names",
    );

    let mut l = tls_listener(&downstream(&pki));
    l.filter_chains[0].transport_socket_connect_timeout = Some(dur(5, 0));
    refused(
        listener_err(&l),
        "filter_chains[0].transport_socket_connect_timeout",
    );

    // Another transport socket, by its type.
    let mut l = listener_with(&proxy());
    l.filter_chains[0].transport_socket = Some(TransportSocket {
        name: "envoy.transport_sockets.alts".into(),
        config_type: Some(ConfigType::TypedConfig(any(&BoolValue { value: true }))),
    });
    refused(
        listener_err(&l),
        "filter_chains[0].transport_socket: transport socket \"envoy.transport_sockets.alts\"",
    );

    // An upstream context on a listener is the wrong type.
    let mut l = listener_with(&proxy());
    l.filter_chains[0].transport_socket = Some(tls_socket(&UpstreamTlsContext::default()));
    assert_mentions(
        &listener_err(&l),
        &["UpstreamTlsContext", "DownstreamTlsContext"],
    );
}

#[test]
fn raw_buffer_is_plain_tcp() {
    let mut l = listener_with(&proxy());
    l.filter_chains[0].transport_socket = Some(TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: Some(ConfigType::TypedConfig(any(&RawBuffer {}))),
    });
    assert_eq!(parse_listener(&l).listeners[0].tls, None);

    let mut c = static_cluster("cache", &[7000]);
    c.transport_socket = Some(TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: None,
    });
    assert_eq!(parse_cluster(&c).tls, None);
}

#[test]
fn accepted_version_ranges() {
    use TlsProtocol::*;
    let ok = [
        (TlsAuto, TlsAuto),
        (TlSv10, TlSv13),
        (TlSv11, TlsAuto),
        (TlSv12, TlSv12),
        (TlSv12, TlSv13),
    ];
    for (min, max) in ok {
        let ctx = UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                tls_params: Some(TlsParameters {
                    tls_minimum_protocol_version: min as i32,
                    tls_maximum_protocol_version: max as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(
            super::tls::upstream_context(&ctx, "t").is_ok(),
            "{min:?}..{max:?}"
        );
    }
}

//! `external_auth_provider` → `[listeners.external_auth]`: both gRPC targets, the timeout, the
//! gRPC cluster kept out of the data plane's clusters, and what is refused.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::GrpcService;
use envoy_types::pb::envoy::config::core::v3::grpc_service::{
    EnvoyGrpc, GoogleGrpc, TargetSpecifier, google_grpc::ChannelCredentials,
};
use envoy_types::pb::envoy::extensions::filters::network::redis_proxy::v3::{
    RedisExternalAuthProvider, RedisProxy,
};
use respite::config::ExternalAuthConfig;

use super::tests_support::*;

fn with_auth(target: TargetSpecifier, timeout_ms: Option<i64>, expiration: bool) -> RedisProxy {
    let mut p = proxy();
    p.external_auth_provider = Some(RedisExternalAuthProvider {
        grpc_service: Some(GrpcService {
            target_specifier: Some(target),
            timeout: timeout_ms.map(ms),
            ..Default::default()
        }),
        enable_auth_expiration: expiration,
    });
    p
}

fn google(uri: &str) -> TargetSpecifier {
    TargetSpecifier::GoogleGrpc(GoogleGrpc {
        target_uri: uri.into(),
        ..Default::default()
    })
}

fn envoy(cluster: &str) -> TargetSpecifier {
    TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
        cluster_name: cluster.into(),
        ..Default::default()
    })
}

#[test]
fn google_grpc_target_timeout_and_expiration_map() {
    let l = listener_with(&with_auth(google("127.0.0.1:9100"), Some(250), true));
    let cfg = parse_listener(&l);
    assert_eq!(
        cfg.listeners[0].external_auth,
        Some(ExternalAuthConfig {
            address: "127.0.0.1:9100".into(),
            timeout: Duration::from_millis(250),
            enable_auth_expiration: true,
        })
    );
    let l = listener_with(&with_auth(google("dns:///auth.local:81"), None, false));
    let cfg = parse_listener(&l);
    let auth = cfg.listeners[0].external_auth.clone().unwrap();
    assert_eq!(auth.address, "auth.local:81");
    assert_eq!(
        auth.timeout,
        Duration::from_secs(1),
        "the data plane's default"
    );
    assert!(!auth.enable_auth_expiration);
}

#[test]
fn envoy_grpc_cluster_gives_its_one_endpoint_and_is_no_redis_cluster() {
    let l = listener_with(&with_auth(envoy("authsvc"), Some(500), false));
    let text = super::static_config(
        std::slice::from_ref(&l),
        &[
            static_cluster("cache", &[7001]),
            static_cluster("authsvc", &[9100]),
        ],
    )
    .unwrap();
    let cfg = respite::config::parse_pushed(&text, "t").unwrap();
    let auth = cfg.listeners[0].external_auth.clone().unwrap();
    assert_eq!(auth.address, "127.0.0.1:9100");
    assert_eq!(auth.timeout, Duration::from_millis(500));
    let names: Vec<&str> = cfg.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cache"]);

    let err = super::static_config(
        std::slice::from_ref(&l),
        &[
            static_cluster("cache", &[7001]),
            static_cluster("authsvc", &[9100, 9101]),
        ],
    )
    .unwrap_err();
    assert_mentions(
        &err,
        &["envoy_grpc.cluster_name", "exactly one endpoint", "has 2"],
    );
    let err = super::static_config(&[l], &[static_cluster("cache", &[7001])]).unwrap_err();
    assert_mentions(&err, &["envoy_grpc.cluster_name", "no cluster \"authsvc\""]);
}

#[test]
fn credentials_and_bad_targets_are_refused_by_name() {
    let creds = TargetSpecifier::GoogleGrpc(GoogleGrpc {
        target_uri: "127.0.0.1:9100".into(),
        channel_credentials: Some(ChannelCredentials::default()),
        ..Default::default()
    });
    assert_mentions(
        &listener_err(&listener_with(&with_auth(creds, None, false))),
        &[
            "google_grpc.channel_credentials",
            "not supported by respite",
        ],
    );
    assert_mentions(
        &listener_err(&listener_with(&with_auth(
            google("unix:/tmp/s"),
            None,
            false,
        ))),
        &["google_grpc.target_uri", "not host:port"],
    );
    // With passwords too: the data plane takes one check or the other.
    let mut p = with_auth(google("127.0.0.1:9100"), None, false);
    p.downstream_auth_passwords = vec![inline("pw")];
    assert_mentions(
        &listener_err(&listener_with(&p)),
        &["external_auth", "downstream_auth_passwords"],
    );
}

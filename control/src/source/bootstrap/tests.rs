use super::*;

const GOOD: &str = r#"{
  "xds_servers": [
    {"server_uri": "dns:///xds.example:15010",
     "channel_creds": [{"type": "google_default"},
                       {"type": "tls", "config": {"ca_certificate_file": "/etc/xds/ca.pem"}},
                       {"type": "insecure"}],
     "server_features": ["xds_v3", "something_new"],
     "api_type": "DELTA_GRPC"},
    {"server_uri": "ignored:1", "channel_creds": [{"type": "insecure"}]}
  ],
  "node": {"id": "proxy-1", "cluster": "resp", "user_agent_name": "ignored",
           "locality": {"region": "eu", "zone": "eu-b"},
           "metadata": {"ROLE": "redis-proxy", "n": 2, "l": [true, null]}},
  "respite": {"listener_names": ["l1"], "resource_timeout": "3s",
              "max_message_bytes": 1048576, "warming_timeout": "500ms"},
  "unknown_field": 1
}"#;

#[test]
fn good_file() {
    let b = parse(GOOD).expect("parses");
    assert_eq!(b.server.server_uri, "dns:///xds.example:15010");
    assert_eq!(
        b.server.channel_creds,
        ChannelCreds::Tls {
            ca_certificate_file: Some("/etc/xds/ca.pem".into()),
            certificate_file: None,
            private_key_file: None
        }
    );
    assert_eq!(b.server.server_features, vec!["xds_v3", "something_new"]);
    assert!(b.server.delta);
    assert_eq!(b.node.id, "proxy-1");
    assert_eq!(b.node.cluster, "resp");
    assert_eq!(b.node.user_agent_name, "");
    let loc = b.node.locality.as_ref().expect("locality");
    assert_eq!(
        (
            loc.region.as_str(),
            loc.zone.as_str(),
            loc.sub_zone.as_str()
        ),
        ("eu", "eu-b", "")
    );
    let md = b.node.metadata.as_ref().expect("metadata");
    assert_eq!(
        md.fields["ROLE"].kind,
        Some(Kind::StringValue("redis-proxy".into()))
    );
    assert_eq!(md.fields["n"].kind, Some(Kind::NumberValue(2.0)));
    assert_eq!(b.listener_names, vec!["l1"]);
    assert_eq!(b.resource_timeout, Duration::from_secs(3));
    assert_eq!(b.max_message_bytes, 1 << 20);
    assert_eq!(b.warming_timeout, Duration::from_millis(500));
}

#[test]
fn defaults() {
    let b = parse(
        r#"{"xds_servers":[{"server_uri":"127.0.0.1:1","channel_creds":[{"type":"insecure"}]}]}"#,
    )
    .expect("parses");
    assert_eq!(b.server.channel_creds, ChannelCreds::Insecure);
    assert!(!b.server.delta);
    assert_eq!(b.node, Node::default());
    assert!(b.listener_names.is_empty());
    assert_eq!(b.resource_timeout, Duration::from_secs(15));
    assert_eq!(b.max_message_bytes, 64 << 20);
    assert_eq!(b.warming_timeout, Duration::from_secs(15));
}

fn err(json: &str) -> String {
    parse(json).expect_err("must fail")
}

#[test]
fn errors_name_the_field() {
    assert!(err("{").contains("bad JSON"));
    assert!(err("{}").contains("`xds_servers` is missing"));
    assert!(err(r#"{"xds_servers": []}"#).contains("`xds_servers` is empty"));
    assert!(
        err(r#"{"xds_servers": [{"channel_creds":[{"type":"insecure"}]}]}"#).contains("server_uri")
    );
    assert!(
        err(
            r#"{"xds_servers": [{"server_uri":"a:1","channel_creds":[{"type":"google_default"}]}]}"#
        )
        .contains("no supported type")
    );
    assert!(
        err(r#"{"xds_servers": [{"server_uri":"a:1"}]}"#).contains("channel_creds` is missing")
    );
    assert!(
        err(r#"{"xds_servers": [{"server_uri":"a:1","channel_creds":[{"type":"insecure"}],"api_type":"REST"}]}"#)
            .contains("api_type")
    );
    assert!(
        err(r#"{"xds_servers": [{"server_uri":"a:1","channel_creds":[{"type":"tls","config":{"certificate_file":"c"}}]}]}"#)
            .contains("go together")
    );
    let base = r#"{"xds_servers": [{"server_uri":"a:1","channel_creds":[{"type":"insecure"}]}], "#;
    assert!(
        err(&format!(
            r#"{base}"respite": {{"resource_timeout": "soon"}}}}"#
        ))
        .contains("respite.resource_timeout")
    );
    assert!(
        err(&format!(
            r#"{base}"respite": {{"resource_timeout": "0s"}}}}"#
        ))
        .contains("greater than zero")
    );
    assert!(
        err(&format!(
            r#"{base}"respite": {{"max_message_bytes": -1}}}}"#
        ))
        .contains("max_message_bytes")
    );
    assert!(err(&format!(r#"{base}"node": {{"id": 5}}}}"#)).contains("node.id"));
    // A typo in Respite's own object is an error, not a silent default.
    assert!(
        err(&format!(r#"{base}"respite": {{"warming_timout": "1s"}}}}"#))
            .contains("`respite.warming_timout`: unknown key")
    );
    assert!(
        err(&format!(r#"{base}"respite": {{"listener_names": [1]}}}}"#)).contains("listener_names")
    );
}

#[test]
fn env_path_then_inline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b.json");
    std::fs::write(&path, GOOD).expect("write");
    let inline =
        r#"{"xds_servers":[{"server_uri":"inline:1","channel_creds":[{"type":"insecure"}]}]}"#;
    let p = path.to_string_lossy().to_string();
    // The path wins over the inline JSON (C-core GetBootstrapContents order).
    let both = from_lookup(|k| match k {
        "GRPC_XDS_BOOTSTRAP" => Some(p.clone()),
        "GRPC_XDS_BOOTSTRAP_CONFIG" => Some(inline.into()),
        _ => None,
    })
    .expect("ok")
    .expect("some");
    assert_eq!(both.server.server_uri, "dns:///xds.example:15010");
    let only_inline = from_lookup(|k| match k {
        "GRPC_XDS_BOOTSTRAP" => Some(String::new()),
        "GRPC_XDS_BOOTSTRAP_CONFIG" => Some(inline.into()),
        _ => None,
    })
    .expect("ok")
    .expect("some");
    assert_eq!(only_inline.server.server_uri, "inline:1");
    assert_eq!(from_lookup(|_| None), Ok(None));
    let missing =
        from_lookup(|k| (k == "GRPC_XDS_BOOTSTRAP").then(|| "/nonexistent/b.json".into()))
            .expect_err("unreadable file");
    assert!(missing.contains("/nonexistent/b.json"), "{missing}");
    let bad =
        from_lookup(|k| (k == "GRPC_XDS_BOOTSTRAP_CONFIG").then(|| "{}".into())).expect_err("bad");
    assert!(bad.starts_with("GRPC_XDS_BOOTSTRAP_CONFIG:"), "{bad}");
}

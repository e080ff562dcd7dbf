//! `RedisProxy.protocol_version`: RESP3 maps to the listener key; RESP2, the proto default,
//! leaves it unset.

use respite::config::ProtocolVersion;

use super::tests_support::*;
use crate::source::envoy_file;

/// A bootstrap with one redis_proxy listener whose typed_config ends with `extra`.
fn yaml(extra: &str) -> String {
    format!(
        "static_resources:
  listeners:
  - name: l
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 6379 }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: r
          settings: {{ op_timeout: 1s }}
          prefix_routes: {{ catch_all_route: {{ cluster: cache }} }}
{extra}"
    )
}

fn translated(extra: &str) -> Option<ProtocolVersion> {
    let sr = envoy_file::parse(&yaml(extra), true).unwrap();
    let l = &sr.listeners[0];
    let d = super::listener(l).unwrap();
    let key = d.listener.protocol_version.clone().map(|v| v.into_inner());
    // What the data plane makes of the rendered listener.
    assert_eq!(parse_listener(l).listeners[0].protocol_version, key);
    key
}

#[test]
fn resp3_maps_to_the_key() {
    assert_eq!(
        translated("          protocol_version: RESP3\n"),
        Some(ProtocolVersion::Resp3)
    );
}

#[test]
fn resp2_and_unset_leave_the_key_unset() {
    assert_eq!(translated("          protocol_version: RESP2\n"), None);
    assert_eq!(translated(""), None);
}

#[test]
fn resp3_renders_as_the_toml_value() {
    assert_eq!(
        toml::Value::try_from(ProtocolVersion::Resp3)
            .unwrap()
            .as_str(),
        Some("resp3")
    );
}

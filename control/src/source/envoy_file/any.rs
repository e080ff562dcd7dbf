//! `google.protobuf.Any` in proto3 JSON: `{"@type": "type.googleapis.com/<full name>", ...the
//! message's fields}`. The fields are mapped by the message the type URL names, then encoded
//! into `Any.value` — the same bytes an xDS server would send, so the translator reads an
//! imported resource and a pushed one the same way.

use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::load_balancing_policies as lbp;
use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use serde_json::{Map, Value};

use super::reader::{MapErr, Obj, Res, kind, structure};
use super::redis;
use super::tls;

/// The full message names an `@type` may name; anything else is an error naming it.
pub const KNOWN: &[&str] = &[
    "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
    "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions",
    "envoy.extensions.clusters.redis.v3.RedisClusterConfig",
    "envoy.extensions.health_checkers.redis.v3.Redis",
    "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer",
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
    "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
    "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
    "envoy.extensions.load_balancing_policies.maglev.v3.Maglev",
    "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
    "envoy.extensions.load_balancing_policies.random.v3.Random",
    "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
    "envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided",
    "google.protobuf.Struct",
    "udpa.type.v1.TypedStruct",
    "xds.type.v3.TypedStruct",
];

/// Maps an `Any` (`v` is the whole object, `@type` included).
///
/// `TypedStruct` (`udpa.type.v1` / `xds.type.v3`: `{type_url, value}`) is unwrapped into the
/// message it names, as Envoy does for extension configs.
#[allow(deprecated)] // RingHash's deprecated fields are still accepted by Envoy
pub fn any(v: &Value, p: &str) -> Res<Any> {
    let mut o = Obj::new(v, p)?;
    let type_url = match o.opt_string("@type")? {
        Some(t) => t,
        None => {
            return Err(MapErr::new(
                p,
                "missing \"@type\" (an Any needs its type URL)",
            ));
        }
    };
    let name = type_url.rsplit('/').next().unwrap_or_default();
    let value = match name {
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy" => {
            redis::proxy(&mut o)?.encode_to_vec()
        }
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions" => {
            redis::protocol_options(&mut o)?.encode_to_vec()
        }
        "envoy.extensions.clusters.redis.v3.RedisClusterConfig" => {
            redis::cluster_config(&mut o)?.encode_to_vec()
        }
        "envoy.extensions.health_checkers.redis.v3.Redis" => {
            redis::health_checker(&mut o)?.encode_to_vec()
        }
        "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer" => {
            RawBuffer {}.encode_to_vec()
        }
        "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext" => {
            tls::downstream_tls_context(&mut o, p)?.encode_to_vec()
        }
        "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext" => {
            tls::upstream_tls_context(&mut o)?.encode_to_vec()
        }
        "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector" => TlsInspector {
            enable_ja3_fingerprinting: o.boolw("enable_ja3_fingerprinting")?,
            enable_ja4_fingerprinting: o.boolw("enable_ja4_fingerprinting")?,
            initial_read_buffer_size: o.u32w("initial_read_buffer_size")?,
            ..Default::default()
        }
        .encode_to_vec(),
        "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash" => {
            lbp::ring_hash::v3::RingHash {
                hash_function: o.enm(
                    "hash_function",
                    lbp::ring_hash::v3::ring_hash::HashFunction::from_str_name,
                )?,
                minimum_ring_size: o.u64w("minimum_ring_size")?,
                maximum_ring_size: o.u64w("maximum_ring_size")?,
                use_hostname_for_hashing: o.bool("use_hostname_for_hashing")?,
                hash_balance_factor: o.u32w("hash_balance_factor")?,
                ..Default::default()
            }
            .encode_to_vec()
        }
        "envoy.extensions.load_balancing_policies.maglev.v3.Maglev" => lbp::maglev::v3::Maglev {
            table_size: o.u64w("table_size")?,
            ..Default::default()
        }
        .encode_to_vec(),
        "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin" => {
            lbp::round_robin::v3::RoundRobin::default().encode_to_vec()
        }
        "envoy.extensions.load_balancing_policies.random.v3.Random" => {
            lbp::random::v3::Random::default().encode_to_vec()
        }
        "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest" => {
            lbp::least_request::v3::LeastRequest {
                choice_count: o.u32w("choice_count")?,
                active_request_bias: o.msg("active_request_bias", super::core::runtime_double)?,
                ..Default::default()
            }
            .encode_to_vec()
        }
        "envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided" => {
            lbp::cluster_provided::v3::ClusterProvided {}.encode_to_vec()
        }
        // Well-known type in an Any: the JSON form is `{"@type": ..., "value": <struct>}`.
        "google.protobuf.Struct" => match o.get("value")? {
            Some((v, vp)) => structure(v, &vp)?.encode_to_vec(),
            None => Vec::new(),
        },
        "udpa.type.v1.TypedStruct" | "xds.type.v3.TypedStruct" => {
            let inner_url = o.string("type_url")?;
            let (fields, fp) = match o.get("value")? {
                Some((Value::Object(m), fp)) => (m.clone(), fp),
                Some((other, fp)) => {
                    return Err(MapErr::new(
                        &fp,
                        format!("expected an object, got {}", kind(other)),
                    ));
                }
                None => (Map::new(), format!("{p}.value")),
            };
            o.finish()?;
            let mut inner = fields;
            inner.insert("@type".into(), Value::String(inner_url));
            return any(&Value::Object(inner), &fp);
        }
        // Envoy's v2 API (`envoy.config.filter.network.redis_proxy.v2.RedisProxy`, the form of
        // older docs and examples) was removed from Envoy itself.
        _ if name.contains(".v2.") || name.contains(".v2alpha.") => {
            let (_, tp) = o.get("@type")?.unwrap_or((&Value::Null, p.to_string()));
            return Err(MapErr::new(
                &tp,
                format!(
                    "\"{type_url}\": Envoy's v2 API is not supported by respite (use the v3 \
                     type, e.g. envoy.extensions.filters.network.redis_proxy.v3.RedisProxy)"
                ),
            ));
        }
        _ => {
            let (_, tp) = o.get("@type")?.unwrap_or((&Value::Null, p.to_string()));
            return Err(MapErr::new(
                &tp,
                format!(
                    "unsupported type \"{type_url}\" (the Envoy import maps {})",
                    known()
                ),
            ));
        }
    };
    o.finish_message(name)?;
    Ok(Any { type_url, value })
}

fn known() -> String {
    KNOWN
        .iter()
        .filter_map(|n| n.rsplit('.').next())
        .collect::<Vec<_>>()
        .join(", ")
}

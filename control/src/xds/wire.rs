//! Reading resources out of xDS messages and building the NACK `error_detail`.

use envoy_types::pb::envoy::service::discovery::v3::Resource;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc;
use prost::Message;

/// Type URL of the `Resource` wrapper (discovery.proto; xds_protocol.rst "Resource wrapper").
pub const RESOURCE_WRAPPER_TYPE: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";
/// `google.rpc.Code.INVALID_ARGUMENT`, the code gRPC puts in a NACK.
pub const INVALID_ARGUMENT: i32 = 3;
/// `google.rpc.Code.NOT_FOUND`: a Delta `resource_errors` entry meaning "does not exist" (xRFC TP3).
pub const NOT_FOUND: i32 = 5;
/// Bound on the NACK message: oversized error strings have broken servers (envoy #9785).
pub const MAX_ERROR_BYTES: usize = 4096;

/// Field 1 of Listener (`name`), Cluster (`name`) and ClusterLoadAssignment (`cluster_name`):
/// decoding only it reads a resource's name without decoding the whole resource.
#[derive(Clone, PartialEq, prost::Message)]
struct NameOnly {
    #[prost(string, tag = "1")]
    name: String,
}

/// One resource of a SotW response: its name and its body (unwrapped from a `Resource` wrapper if
/// the server used one), or why it cannot be read.
pub fn sotw_resource(any: Any) -> Result<(String, Option<Any>), String> {
    if any.type_url == RESOURCE_WRAPPER_TYPE {
        let r = Resource::decode(any.value.as_slice())
            .map_err(|e| format!("cannot decode the Resource wrapper: {e}"))?;
        return Ok((r.name, r.resource));
    }
    let n = NameOnly::decode(any.value.as_slice())
        .map_err(|e| format!("cannot decode {}: {e}", any.type_url))?;
    Ok((n.name, Some(any)))
}

/// The `error_detail` of a NACK: INVALID_ARGUMENT, a message naming each rejected resource and
/// why (gRFC A46), cut at [`MAX_ERROR_BYTES`].
pub fn error_detail(
    type_url: &str,
    version: &str,
    rejected: &[(String, String)],
    error: Option<&str>,
) -> rpc::Status {
    let mut msg = format!("{} rejected, version {version:?}:", short(type_url));
    if let Some(e) = error {
        msg.push(' ');
        msg.push_str(e);
        msg.push(';');
    }
    for (name, why) in rejected {
        msg.push_str(&format!(" {name}: {why};"));
    }
    if msg.ends_with(';') {
        msg.pop();
    }
    rpc::Status {
        code: INVALID_ARGUMENT,
        message: bound(msg, MAX_ERROR_BYTES),
        details: vec![],
    }
}

/// `msg` cut to at most `max` bytes on a char boundary, marked when cut.
pub fn bound(mut msg: String, max: usize) -> String {
    if msg.len() <= max {
        return msg;
    }
    const MARK: &str = " …(truncated)";
    let mut cut = max.saturating_sub(MARK.len());
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    msg.truncate(cut);
    msg.push_str(MARK);
    msg
}

/// "Listener", "Cluster", "ClusterLoadAssignment" from a type URL.
pub fn short(type_url: &str) -> &str {
    type_url.rsplit('.').next().unwrap_or(type_url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;

    #[test]
    fn names_and_wrapper() {
        let c = Cluster {
            name: "c1".into(),
            ..Default::default()
        };
        let any = Any {
            type_url: crate::xds::CLUSTER_TYPE.into(),
            value: c.encode_to_vec(),
        };
        let (name, body) = sotw_resource(any.clone()).expect("reads");
        assert_eq!(name, "c1");
        assert_eq!(body, Some(any.clone()));
        let wrapped = Resource {
            name: "w".into(),
            resource: Some(any.clone()),
            ..Default::default()
        };
        let w = Any {
            type_url: RESOURCE_WRAPPER_TYPE.into(),
            value: wrapped.encode_to_vec(),
        };
        assert_eq!(
            sotw_resource(w).expect("reads"),
            ("w".to_string(), Some(any))
        );
        let junk = Any {
            type_url: crate::xds::CLUSTER_TYPE.into(),
            value: vec![0xff, 0xff],
        };
        assert!(sotw_resource(junk).is_err());
    }

    #[test]
    fn error_detail_is_bounded_and_names_resources() {
        let rejected: Vec<(String, String)> = (0..1000)
            .map(|i| (format!("cluster-{i}"), "bad lb_policy".to_string()))
            .collect();
        let s = error_detail(crate::xds::CLUSTER_TYPE, "v2", &rejected[..2], None);
        assert_eq!(s.code, 3);
        assert_eq!(
            s.message,
            "Cluster rejected, version \"v2\": cluster-0: bad lb_policy; cluster-1: bad lb_policy"
        );
        let big = error_detail(crate::xds::CLUSTER_TYPE, "v2", &rejected, Some("whole"));
        assert!(
            big.message.len() <= MAX_ERROR_BYTES,
            "{}",
            big.message.len()
        );
        assert!(big.message.ends_with("(truncated)"));
        assert!(big.message.contains("whole; cluster-0"));
    }
}

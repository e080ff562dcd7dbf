//! Envoy value types shared by the listener, cluster and endpoint translations: durations,
//! fractional percents, socket addresses, `DataSource`s and typed `Any`s, each turned into the
//! value of the data plane's file model, with errors naming the field.

use envoy_types::pb::envoy::config::core::v3::{
    Address, DataSource, RuntimeFractionalPercent, address, data_source, socket_address,
};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent};
use envoy_types::pb::google::protobuf::{Any, Duration, Struct, Value as PbValue, value::Kind};
use prost::Message;
use respite::config::raw::RawDuration;

/// A protobuf `Duration` as a data-plane duration string (`"1s"`, `"500ms"`, `"20us"`), in the
/// largest unit that keeps it exact, so `/config_dump` shows the value as the operator wrote it.
///
/// Errors: negative or out-of-range durations (protobuf `Duration` allows nanos in ±999,999,999
/// with the sign of seconds; Envoy's `validate.rules` require non-negative values).
pub fn duration(d: &Duration, field: &str) -> Result<RawDuration, String> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos > 999_999_999 {
        return Err(format!(
            "{field}: invalid duration {}s {}ns: must be non-negative",
            d.seconds, d.nanos
        ));
    }
    let nanos =
        u128::from(d.seconds.unsigned_abs()) * 1_000_000_000 + d.nanos.unsigned_abs() as u128;
    Ok(RawDuration::Text(nanos_text(nanos)))
}

/// [`duration`] that must also be greater than zero (Envoy `gt: {}` rules such as `op_timeout`).
pub fn positive_duration(d: &Duration, field: &str) -> Result<RawDuration, String> {
    if d.seconds == 0 && d.nanos == 0 {
        return Err(format!("{field}: must be greater than zero"));
    }
    duration(d, field)
}

/// A duration in whole seconds (Envoy `TcpKeepalive` counts seconds as plain integers).
pub fn seconds(s: u32) -> RawDuration {
    RawDuration::Text(format!("{s}s"))
}

fn nanos_text(n: u128) -> String {
    if n == 0 {
        "0s".into()
    } else if n.is_multiple_of(1_000_000_000) {
        format!("{}s", n / 1_000_000_000)
    } else if n.is_multiple_of(1_000_000) {
        format!("{}ms", n / 1_000_000)
    } else if n.is_multiple_of(1_000) {
        format!("{}us", n / 1_000)
    } else {
        format!("{n}ns")
    }
}

/// Envoy `FractionalPercent{numerator, denominator}` → a percentage 0.0–100.0
/// (numerator / denominator × 100). A numerator above its denominator counts as 100 %, as
/// Envoy's `ProtobufPercentHelper::evaluateFractionalPercent` does.
///
/// Errors: an unknown denominator enum value.
pub fn percent(p: &FractionalPercent, field: &str) -> Result<f64, String> {
    use fractional_percent::DenominatorType;
    let denominator: u32 = match DenominatorType::try_from(p.denominator) {
        Ok(DenominatorType::Hundred) => 100,
        Ok(DenominatorType::TenThousand) => 10_000,
        Ok(DenominatorType::Million) => 1_000_000,
        Err(_) => {
            return Err(format!(
                "{field}.denominator: unknown value {} (HUNDRED, TEN_THOUSAND or MILLION)",
                p.denominator
            ));
        }
    };
    let n = p.numerator.min(denominator);
    Ok(f64::from(n) / f64::from(denominator) * 100.0)
}

/// Envoy `RuntimeFractionalPercent` → a percentage 0.0–100.0 from its `default_value`.
///
/// Respite has no runtime layer: `runtime_key` is ignored and the default always applies (as
/// in an Envoy whose runtime never sets the key). Absent (`None`) means 100 %, the Envoy
/// default of `RequestMirrorPolicy.runtime_fraction`.
///
/// Errors: a present value without `default_value` (required by Envoy's proto validation).
pub fn runtime_percent(p: Option<&RuntimeFractionalPercent>, field: &str) -> Result<f64, String> {
    match p {
        None => Ok(100.0),
        Some(r) => match &r.default_value {
            Some(v) => percent(v, &format!("{field}.default_value")),
            None => Err(format!("{field}.default_value: required")),
        },
    }
}

/// An Envoy `Address` that must be a TCP `socket_address` with a numeric port → `"host:port"`
/// (IPv6 literals in brackets), the data plane's address text.
///
/// Errors: absent, a pipe or internal address, a named port, UDP, a custom resolver, or an
/// empty host.
pub fn socket_address(a: Option<&Address>, field: &str) -> Result<String, String> {
    let Some(a) = a else {
        return Err(format!("{field}: required"));
    };
    let sa = match &a.address {
        Some(address::Address::SocketAddress(sa)) => sa,
        Some(address::Address::Pipe(_)) => {
            return Err(format!(
                "{field}: pipe (Unix socket) addresses are not supported; use socket_address"
            ));
        }
        Some(address::Address::EnvoyInternalAddress(_)) => {
            return Err(format!(
                "{field}: envoy_internal_address (internal listeners) is not supported; use \
                 socket_address"
            ));
        }
        None => return Err(format!("{field}: required (socket_address)")),
    };
    if sa.protocol != 0 {
        return Err(format!(
            "{field}.socket_address.protocol: only TCP is supported (Redis runs over TCP)"
        ));
    }
    if !sa.resolver_name.is_empty() {
        return Err(format!(
            "{field}.socket_address.resolver_name: custom resolvers are not supported"
        ));
    }
    if sa.address.is_empty() {
        return Err(format!("{field}.socket_address.address: required"));
    }
    let port = match &sa.port_specifier {
        Some(socket_address::PortSpecifier::PortValue(p)) if *p <= 65535 => *p,
        Some(socket_address::PortSpecifier::PortValue(p)) => {
            return Err(format!(
                "{field}.socket_address.port_value: {p} is not a TCP port"
            ));
        }
        Some(socket_address::PortSpecifier::NamedPort(n)) => {
            return Err(format!(
                "{field}.socket_address.named_port: named ports (\"{n}\") are not supported; \
                 use port_value"
            ));
        }
        None => return Err(format!("{field}.socket_address.port_value: required")),
    };
    if sa.address.contains(':') && !sa.address.starts_with('[') {
        Ok(format!("[{}]:{port}", sa.address))
    } else {
        Ok(format!("{}:{port}", sa.address))
    }
}

/// An Envoy `DataSource` (passwords, usernames) → its text, read now: `inline_string`,
/// `inline_bytes` (UTF-8), `filename` (the whole file, read at translation) or
/// `environment_variable` (read from this process's environment). Envoy reads it at config
/// load too; a later change of the file or variable takes effect at the next translation.
///
/// Errors: no specifier, bytes that are not UTF-8, an unreadable file, an unset variable.
pub fn data_source(ds: &DataSource, field: &str) -> Result<String, String> {
    match &ds.specifier {
        Some(data_source::Specifier::InlineString(s)) => Ok(s.clone()),
        Some(data_source::Specifier::InlineBytes(b)) => String::from_utf8(b.clone())
            .map_err(|_| format!("{field}.inline_bytes: not UTF-8 text")),
        Some(data_source::Specifier::Filename(f)) => std::fs::read_to_string(f)
            .map_err(|e| format!("{field}.filename: cannot read \"{f}\": {e}")),
        Some(data_source::Specifier::EnvironmentVariable(v)) => std::env::var(v).map_err(|_| {
            format!("{field}.environment_variable: \"{v}\" is not set (or not UTF-8)")
        }),
        None => Err(format!(
            "{field}: empty DataSource (inline_string, inline_bytes, filename or \
             environment_variable)"
        )),
    }
}

/// `google.protobuf.Struct`: a config given as plain JSON fields of the expected message.
pub const STRUCT_TYPE: &str = "type.googleapis.com/google.protobuf.Struct";
/// The two `TypedStruct`s (`{type_url, value: Struct}`): a config as JSON fields with its type.
pub const TYPED_STRUCT_TYPES: [&str; 2] = [
    "type.googleapis.com/udpa.type.v1.TypedStruct",
    "type.googleapis.com/xds.type.v3.TypedStruct",
];

/// `udpa.type.v1.TypedStruct` / `xds.type.v3.TypedStruct` (same fields, same tags); envoy-types
/// generates neither.
#[derive(Clone, PartialEq, prost::Message)]
struct TypedStruct {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(message, optional, tag = "2")]
    value: Option<Struct>,
}

/// The type URL of the message `any` carries, looking through a `TypedStruct` (a bare `Struct`
/// names no type: `None`). How an extension is recognised by its config type, as Envoy picks
/// an extension factory by the `typed_config` type.
pub fn inner_type(any: &Any) -> Option<String> {
    if TYPED_STRUCT_TYPES.contains(&any.type_url.as_str()) {
        return TypedStruct::decode(any.value.as_slice())
            .ok()
            .map(|t| t.type_url);
    }
    (any.type_url != STRUCT_TYPE).then(|| any.type_url.clone())
}

/// Decodes a typed `Any` after checking its type URL. The one rule for every `typed_config`
/// Respite reads: the message itself, or its fields wrapped in a `google.protobuf.Struct` or a
/// `TypedStruct` naming `type_url` (Envoy accepts all three for any extension config), read
/// with the file import's proto3 JSON mapping.
///
/// Errors: another type URL (named), bytes that do not decode, or wrapped fields that do not
/// map onto the message (named by path).
pub fn decode<M: prost::Message + Default>(
    any: &Any,
    type_url: &str,
    field: &str,
) -> Result<M, String> {
    let unwrapped;
    let any = if any.type_url == STRUCT_TYPE || TYPED_STRUCT_TYPES.contains(&any.type_url.as_str())
    {
        unwrapped = unwrap_struct(any, type_url, field)?;
        &unwrapped
    } else {
        any
    };
    if any.type_url != type_url {
        return Err(format!(
            "{field}: type \"{}\" is not supported (expected \"{type_url}\")",
            any.type_url
        ));
    }
    M::decode(any.value.as_slice()).map_err(|e| format!("{field}: cannot decode {type_url}: {e}"))
}

/// A `Struct` or `TypedStruct` `Any` → the `Any` of `type_url` its fields make.
fn unwrap_struct(any: &Any, type_url: &str, field: &str) -> Result<Any, String> {
    let bad = |e: prost::DecodeError| format!("{field}: cannot decode {}: {e}", any.type_url);
    let (inner, fields) = if any.type_url == STRUCT_TYPE {
        let st = Struct::decode(any.value.as_slice()).map_err(bad)?;
        (type_url.to_string(), st)
    } else {
        let ts = TypedStruct::decode(any.value.as_slice()).map_err(bad)?;
        (ts.type_url, ts.value.unwrap_or_default())
    };
    if inner != type_url {
        return Err(format!(
            "{field}: type \"{inner}\" (in {}) is not supported (expected \"{type_url}\")",
            any.type_url
        ));
    }
    let mut obj = struct_json(&fields);
    obj.insert("@type".into(), serde_json::Value::String(inner));
    crate::source::envoy_file::any_from_json(&serde_json::Value::Object(obj), field)
}

fn struct_json(st: &Struct) -> serde_json::Map<String, serde_json::Value> {
    st.fields
        .iter()
        .map(|(k, v)| (k.clone(), value_json(v)))
        .collect()
}

fn value_json(v: &PbValue) -> serde_json::Value {
    use serde_json::Value as J;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::BoolValue(b)) => J::Bool(*b),
        // Integral numbers as integers: the mapping reads counts from them.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => J::from(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        Some(Kind::StringValue(s)) => J::String(s.clone()),
        Some(Kind::ListValue(l)) => J::Array(l.values.iter().map(value_json).collect()),
        Some(Kind::StructValue(s)) => J::Object(struct_json(s)),
    }
}

/// An Envoy `uint32` count as the data plane's `usize` (always fits on the 64-bit targets
/// Respite builds for; saturates elsewhere).
pub fn count(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

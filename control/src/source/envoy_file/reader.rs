//! Reading one JSON object as one proto message under the proto3 JSON mapping
//! (https://protobuf.dev/programming-guides/json/): fields by their proto name or lowerCamelCase
//! JSON name, `null` = the default, wrappers as bare values, durations as `"1.5s"`, enums by name
//! (or number), 64-bit integers as numbers or strings. Every key must be consumed: what is left
//! is an unknown field, an error as in Envoy's strict bootstrap validation.

use std::collections::{BTreeSet, HashMap};

use envoy_types::pb::google::protobuf::{
    BoolValue, Duration, ListValue, Struct, UInt32Value, UInt64Value, Value as PbValue, value::Kind,
};
use serde_json::{Map, Value};

/// A mapping error: where (the path of the field as written in the file, e.g.
/// `static_resources.clusters[1].lb_policy`) and what.
#[derive(Debug, Clone, PartialEq)]
pub struct MapErr {
    /// Dotted path with `[i]` list indices; empty for the document itself.
    pub path: String,
    /// What is wrong there.
    pub msg: String,
}

impl MapErr {
    pub fn new(path: &str, msg: impl Into<String>) -> Self {
        MapErr {
            path: path.to_string(),
            msg: msg.into(),
        }
    }
}

/// A mapping result.
pub type Res<T> = Result<T, MapErr>;

/// `foo_bar_baz` → `fooBarBaz` (protoc's default json_name).
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut up = false;
    for c in name.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// One JSON object read as one message; [`Obj::finish`] reports the keys no field took.
pub struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
    seen: BTreeSet<&'a str>,
}

impl<'a> Obj<'a> {
    /// Errors: `v` is not an object.
    pub fn new(v: &'a Value, path: &str) -> Res<Self> {
        match v {
            Value::Object(map) => Ok(Obj {
                path: path.to_string(),
                map,
                seen: BTreeSet::new(),
            }),
            other => Err(MapErr::new(
                path,
                format!("expected an object, got {}", kind(other)),
            )),
        }
    }

    /// Marks `key` as consumed without reading it (e.g. `@type` of an `Any`).
    pub fn skip(&mut self, key: &str) {
        if let Some((k, _)) = self.map.get_key_value(key) {
            self.seen.insert(k.as_str());
        }
    }

    /// The value of field `name` (proto name or JSON name) and its path; `None` when absent or
    /// `null`. Both spellings at once is an error (protobuf's JSON parser refuses it too).
    pub fn get(&mut self, name: &str) -> Res<Option<(&'a Value, String)>> {
        let json = camel(name);
        let a = self.map.get_key_value(name);
        let b = if json != name {
            self.map.get_key_value(json.as_str())
        } else {
            None
        };
        let (k, v) = match (a, b) {
            (Some(_), Some(_)) => {
                return Err(MapErr::new(
                    &self.path,
                    format!("both {name} and {json} are set (one field)"),
                ));
            }
            (Some(kv), None) | (None, Some(kv)) => kv,
            (None, None) => return Ok(None),
        };
        self.seen.insert(k.as_str());
        if v.is_null() {
            return Ok(None);
        }
        Ok(Some((v, join(&self.path, k))))
    }

    /// Whether field `name` is present and not null (without consuming it).
    pub fn has(&self, name: &str) -> bool {
        let json = camel(name);
        [name, json.as_str()]
            .iter()
            .any(|k| self.map.get(*k).is_some_and(|v| !v.is_null()))
    }

    /// A `string` field (default "").
    pub fn string(&mut self, name: &str) -> Res<String> {
        Ok(self.opt_string(name)?.unwrap_or_default())
    }

    /// A `string` field, `None` when absent.
    pub fn opt_string(&mut self, name: &str) -> Res<Option<String>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => string(v, &p).map(Some),
        }
    }

    /// A `bytes` field: base64 in proto3 JSON.
    pub fn bytes(&mut self, name: &str) -> Res<Option<Vec<u8>>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => base64(&string(v, &p)?)
                .map(Some)
                .ok_or_else(|| MapErr::new(&p, "invalid base64")),
        }
    }

    /// A `bool` field (default false).
    pub fn bool(&mut self, name: &str) -> Res<bool> {
        Ok(self.opt_bool(name)?.unwrap_or_default())
    }

    /// A `bool` field, `None` when absent.
    pub fn opt_bool(&mut self, name: &str) -> Res<Option<bool>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => boolean(v, &p).map(Some),
        }
    }

    /// A `uint32` field (default 0).
    pub fn u32(&mut self, name: &str) -> Res<u32> {
        Ok(self.opt_u32(name)?.unwrap_or_default())
    }

    /// A `uint32` field, `None` when absent.
    pub fn opt_u32(&mut self, name: &str) -> Res<Option<u32>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => uint32(v, &p).map(Some),
        }
    }

    /// A `uint64` field (number or decimal string), `None` when absent.
    pub fn opt_u64(&mut self, name: &str) -> Res<Option<u64>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => uint(v, &p).map(Some),
        }
    }

    /// A `double` field (default 0).
    pub fn f64(&mut self, name: &str) -> Res<f64> {
        match self.get(name)? {
            None => Ok(0.0),
            Some((v, p)) => float(v, &p),
        }
    }

    /// `google.protobuf.UInt32Value`: a bare number.
    pub fn u32w(&mut self, name: &str) -> Res<Option<UInt32Value>> {
        Ok(self.opt_u32(name)?.map(|value| UInt32Value { value }))
    }

    /// `google.protobuf.UInt64Value`: a bare number (or string).
    pub fn u64w(&mut self, name: &str) -> Res<Option<UInt64Value>> {
        Ok(self.opt_u64(name)?.map(|value| UInt64Value { value }))
    }

    /// `google.protobuf.BoolValue`: a bare bool.
    pub fn boolw(&mut self, name: &str) -> Res<Option<BoolValue>> {
        Ok(self.opt_bool(name)?.map(|value| BoolValue { value }))
    }

    /// `google.protobuf.Duration`: `"1.5s"`.
    pub fn dur(&mut self, name: &str) -> Res<Option<Duration>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => duration(v, &p).map(Some),
        }
    }

    /// An enum field: by value name (`from_str_name` of the prost enum) or by number.
    pub fn enm<E: Into<i32>>(&mut self, name: &str, from: fn(&str) -> Option<E>) -> Res<i32> {
        match self.get(name)? {
            None => Ok(0),
            Some((v, p)) => enum_value(v, &p, from),
        }
    }

    /// A message field read by `f` (given the value and its path).
    pub fn msg<T>(&mut self, name: &str, f: impl FnOnce(&Value, &str) -> Res<T>) -> Res<Option<T>> {
        match self.get(name)? {
            None => Ok(None),
            Some((v, p)) => f(v, &p).map(Some),
        }
    }

    /// A repeated field, each item read by `f` (paths `field[i]`). A single value where the list
    /// belongs is a one-element list (path `field`), as Envoy's YAML loader reads it
    /// (`MessageUtil::loadFromYaml` turns a scalar or map for a repeated field into a list).
    pub fn list<T>(&mut self, name: &str, f: impl Fn(&Value, &str) -> Res<T>) -> Res<Vec<T>> {
        match self.get(name)? {
            None => Ok(Vec::new()),
            Some((Value::Array(items), p)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| f(item, &format!("{p}[{i}]")))
                .collect(),
            Some((single, p)) => Ok(vec![f(single, &p)?]),
        }
    }

    /// A `repeated string` field.
    pub fn strings(&mut self, name: &str) -> Res<Vec<String>> {
        self.list(name, string)
    }

    /// A `map<string, T>` field: a JSON object, each value read by `f` (paths `field.key`).
    pub fn map<T>(
        &mut self,
        name: &str,
        f: impl Fn(&Value, &str) -> Res<T>,
    ) -> Res<HashMap<String, T>> {
        match self.get(name)? {
            None => Ok(HashMap::new()),
            Some((Value::Object(m), p)) => m
                .iter()
                .map(|(k, v)| Ok((k.clone(), f(v, &join(&p, k))?)))
                .collect(),
            Some((other, p)) => Err(MapErr::new(
                &p,
                format!("expected an object (a map), got {}", kind(other)),
            )),
        }
    }

    /// Ends an object that is no proto message of its own (the bootstrap's top level, an empty
    /// config): the first key no field took is an unknown field.
    pub fn finish(self) -> Res<()> {
        self.finish_message("")
    }

    /// Ends the message `r` was read into: the keys no field took are judged against `T`'s
    /// fields in Envoy's proto ([`finish_message`](Obj::finish_message)).
    pub fn done<T: prost::Name>(self, r: T) -> Res<T> {
        self.finish_message(&T::full_name())?;
        Ok(r)
    }

    /// Ends message `full_name` (e.g. `envoy.config.cluster.v3.Cluster`; "" for none). A key
    /// no field took is, by Envoy's proto (`envoy_fields.txt`): a field with no effect on a
    /// Redis proxy → logged, "not supported by respite (ignored: why)"; another field of the
    /// message → an error, "not supported by respite (refused)"; no field of it → "unknown
    /// field" (a typo, or a field of another message or Envoy version).
    pub fn finish_message(self, full_name: &str) -> Res<()> {
        for k in self.map.keys().filter(|k| !self.seen.contains(k.as_str())) {
            let path = join(&self.path, k);
            let field = snake(k);
            if let Some(why) = ignored(full_name, &field) {
                tracing::warn!(field = %path, "not supported by respite (ignored: {why})");
                continue;
            }
            if proto_has(full_name, &field) {
                return Err(MapErr::new(&path, "not supported by respite (refused)"));
            }
            return Err(MapErr::new(&path, "unknown field"));
        }
        Ok(())
    }
}

/// Field names of the Envoy messages the import reads, one message a line: its full name, then
/// its fields' proto names. Generated by `control/tools/envoy_fields.py` from the descriptor set
/// envoy-types ships (`src/generated/types.bin`), so it follows the protos the import is built
/// on.
const ENVOY_FIELDS: &str = include_str!("envoy_fields.txt");

/// Whether Envoy's message `full_name` has a field `field` (proto name).
fn proto_has(full_name: &str, field: &str) -> bool {
    !full_name.is_empty()
        && ENVOY_FIELDS.lines().any(|line| {
            let mut words = line.split(' ');
            words.next() == Some(full_name) && words.any(|w| w == field)
        })
}

/// Envoy fields the import leaves out because they change nothing a Redis proxy does: (message,
/// field, why). Each is logged when present, never silently dropped.
const IGNORED: &[(&str, &str, &str)] = &[
    (
        "envoy.config.listener.v3.Listener",
        "access_log",
        "Envoy access logs; Respite logs through its own logger",
    ),
    (
        "envoy.config.cluster.v3.Cluster",
        "track_cluster_stats",
        "Envoy stats options; Respite's stats are fixed",
    ),
    (
        "envoy.config.cluster.v3.Cluster",
        "lrs_server",
        "load reports to an Envoy management server",
    ),
];

/// Why `field` of `full_name` is ignored, if it is one of [`IGNORED`].
fn ignored(full_name: &str, field: &str) -> Option<&'static str> {
    IGNORED
        .iter()
        .find(|(m, f, _)| *m == full_name && *f == field)
        .map(|(_, _, why)| *why)
}

/// `fooBar` → `foo_bar` (a JSON name back to its proto name).
pub fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// At most one member of a oneof may be set (proto3 JSON: "multiple values for oneof").
pub fn oneof<T>(path: &str, members: Vec<(&str, Option<T>)>) -> Res<Option<T>> {
    let mut set = members.into_iter().filter(|(_, v)| v.is_some());
    match (set.next(), set.next()) {
        (Some((a, _)), Some((b, _))) => Err(MapErr::new(
            path,
            format!("{a} and {b} are set, but only one of them may be"),
        )),
        (Some((_, v)), None) => Ok(v),
        _ => Ok(None),
    }
}

/// Path of `key` under `parent` (no leading dot at the root).
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The JSON type of `v`, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A `string` (a YAML number where a string is expected is its text).
pub fn string(v: &Value, path: &str) -> Res<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        // YAML users write `address: 127.0.0.1`-like scalars unquoted; a YAML number where a
        // string is expected is still the text they wrote (e.g. `prefix: 1`).
        Value::Number(n) => Ok(n.to_string()),
        other => Err(MapErr::new(
            path,
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// A `uint32`.
pub fn uint32(v: &Value, path: &str) -> Res<u32> {
    let n = uint(v, path)?;
    u32::try_from(n).map_err(|_| MapErr::new(path, format!("{n} is out of range for uint32")))
}

fn boolean(v: &Value, path: &str) -> Res<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(MapErr::new(
            path,
            format!("expected true or false, got {}", kind(other)),
        )),
    }
}

/// An unsigned integer: a JSON number or a decimal string (proto3 JSON allows both).
fn uint(v: &Value, path: &str) -> Res<u64> {
    let bad = || MapErr::new(path, format!("expected an unsigned integer, got {v}"));
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(u) => Ok(u),
            // 1e3 or 5.0 are integral values in proto3 JSON.
            None => n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
                .map(|f| f as u64)
                .ok_or_else(bad),
        },
        Value::String(s) => s.trim().parse::<u64>().map_err(|_| bad()),
        _ => Err(bad()),
    }
}

fn float(v: &Value, path: &str) -> Res<f64> {
    let bad = || MapErr::new(path, format!("expected a number, got {v}"));
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(bad),
        Value::String(s) => s.trim().parse::<f64>().map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// An enum value by name (via the prost enum's `from_str_name`) or by number. Names match
/// case-insensitively, as in Envoy's YAML/JSON loading (its docs write `strict_dns`,
/// `ring_hash`): proto enum value names are upper case, so the upper-cased text is tried too.
pub fn enum_value<E: Into<i32>>(v: &Value, path: &str, from: fn(&str) -> Option<E>) -> Res<i32> {
    match v {
        Value::String(s) => from(s)
            .or_else(|| from(&s.to_ascii_uppercase()))
            .map(Into::into)
            .ok_or_else(|| MapErr::new(path, format!("unknown enum value \"{s}\""))),
        Value::Number(n) => n
            .as_i64()
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| MapErr::new(path, format!("bad enum number {n}"))),
        other => Err(MapErr::new(
            path,
            format!("expected an enum value name, got {}", kind(other)),
        )),
    }
}

/// `google.protobuf.Duration` in proto3 JSON: decimal seconds with an `s` suffix, up to 9
/// fractional digits (`"0.5s"`, `"-1.000340012s"`).
pub fn duration(v: &Value, path: &str) -> Res<Duration> {
    let s = match v {
        Value::String(s) => s.trim(),
        other => {
            return Err(MapErr::new(
                path,
                format!(
                    "expected a duration string like \"0.5s\", got {}",
                    kind(other)
                ),
            ));
        }
    };
    let bad = || {
        MapErr::new(
            path,
            format!("bad duration \"{s}\" (seconds with an \"s\" suffix, e.g. \"0.5s\")"),
        )
    };
    let body = s.strip_suffix('s').ok_or_else(bad)?;
    let (neg, body) = match body.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if !digits(int) || !digits(frac) || frac.len() > 9 {
        return Err(bad());
    }
    let secs: i64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    // Protobuf's documented range: ±10000 years.
    if secs > 315_576_000_000 {
        return Err(bad());
    }
    let nanos: i32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().map_err(|_| bad())?
    };
    Ok(if neg {
        Duration {
            seconds: -secs,
            nanos: -nanos,
        }
    } else {
        Duration {
            seconds: secs,
            nanos,
        }
    })
}

/// `google.protobuf.Struct`: any JSON object.
pub fn structure(v: &Value, path: &str) -> Res<Struct> {
    match v {
        Value::Object(m) => Ok(Struct {
            fields: m.iter().map(|(k, v)| (k.clone(), pb_value(v))).collect(),
        }),
        other => Err(MapErr::new(
            path,
            format!("expected an object, got {}", kind(other)),
        )),
    }
}

fn pb_value(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(pb_value).collect(),
        }),
        Value::Object(_) => Kind::StructValue(structure(v, "").unwrap_or_default()),
    };
    PbValue { kind: Some(kind) }
}

/// Standard or URL-safe base64, padding optional (proto3 JSON accepts both alphabets).
fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let d = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(d);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_follow_proto3_json() {
        let d = |s: &str| duration(&json!(s), "x");
        assert_eq!(
            d("0.5s"),
            Ok(Duration {
                seconds: 0,
                nanos: 500_000_000
            })
        );
        assert_eq!(
            d("3s"),
            Ok(Duration {
                seconds: 3,
                nanos: 0
            })
        );
        assert_eq!(
            d("1.000000001s"),
            Ok(Duration {
                seconds: 1,
                nanos: 1
            })
        );
        assert_eq!(
            d("-1.5s"),
            Ok(Duration {
                seconds: -1,
                nanos: -500_000_000
            })
        );
        for bad in ["5", "5ms", "s", "1.0000000001s", "1,5s", "x1s"] {
            let e = d(bad).unwrap_err();
            assert_eq!(e.path, "x", "{bad}");
            assert!(e.msg.contains("bad duration"), "{bad}: {}", e.msg);
        }
        assert!(
            duration(&json!(5), "x")
                .unwrap_err()
                .msg
                .contains("duration string")
        );
    }

    #[test]
    fn camel_case_names_and_unknown_fields() {
        let v = json!({"statPrefix": "a", "op_timeout": "1s", "bogus": 1});
        let mut o = Obj::new(&v, "p").unwrap();
        assert_eq!(o.string("stat_prefix").unwrap(), "a");
        assert_eq!(
            o.dur("op_timeout").unwrap(),
            Some(Duration {
                seconds: 1,
                nanos: 0
            })
        );
        assert_eq!(o.finish(), Err(MapErr::new("p.bogus", "unknown field")));

        let both = json!({"statPrefix": "a", "stat_prefix": "b"});
        let mut o = Obj::new(&both, "p").unwrap();
        assert!(o.string("stat_prefix").unwrap_err().msg.contains("both"));
    }

    #[test]
    fn numbers_accept_strings_and_reject_out_of_range() {
        let v = json!({"a": "7", "b": 4294967296u64, "c": -1, "d": 2.0});
        let mut o = Obj::new(&v, "").unwrap();
        assert_eq!(o.u32("a").unwrap(), 7);
        assert!(o.u32("b").unwrap_err().msg.contains("out of range"));
        assert_eq!(o.u32("c").unwrap_err().path, "c");
        assert_eq!(o.u32("d").unwrap(), 2);
    }

    #[test]
    fn base64_decodes_both_alphabets() {
        assert_eq!(base64("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64("-_8"), Some(vec![0xfb, 0xff]));
        assert_eq!(base64("a b"), None);
    }

    #[test]
    fn oneof_refuses_two_members() {
        let e = oneof("p", vec![("a", Some(1)), ("b", Some(2))]).unwrap_err();
        assert_eq!(e.path, "p");
        assert!(e.msg.contains("a and b"));
        assert_eq!(oneof("p", vec![("a", None), ("b", Some(2))]), Ok(Some(2)));
    }
}

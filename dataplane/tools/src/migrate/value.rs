//! Reading one key completely (type, PTTL, contents) into a comparable snapshot.

use std::collections::{BTreeMap, BTreeSet};

use redis::{ErrorKind, RedisResult, Value};

use super::endpoint::KeyClient;

/// Elements per LRANGE / XRANGE call: bounds each reply on large keys.
const CHUNK: usize = 1000;

/// A key as read from one side.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// `TYPE` (`string`, `hash`, … or a module type's name).
    pub kind: String,
    /// `PTTL` in milliseconds; -1 when the key has no TTL.
    pub pttl: i64,
    /// The contents.
    pub data: Data,
}

/// One stream entry: id and field/value pairs in order.
pub type StreamEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// Key contents by type.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// `GET`.
    String(Vec<u8>),
    /// `HGETALL`.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// `LRANGE` in chunks.
    List(Vec<Vec<u8>>),
    /// `SMEMBERS`.
    Set(BTreeSet<Vec<u8>>),
    /// `ZRANGE 0 -1 WITHSCORES`: member → score.
    ZSet(BTreeMap<Vec<u8>, f64>),
    /// `XRANGE` in chunks.
    Stream(Vec<StreamEntry>),
    /// Any other type: the `DUMP` payload (same-version servers serialise equal values alike).
    Dump(Vec<u8>),
}

/// Reads `key`: `None` when it does not exist. A key whose type changes while it is read is
/// read again (up to three times); network and other server errors are returned.
pub fn fetch(c: &mut KeyClient, key: &[u8]) -> RedisResult<Option<Snapshot>> {
    let mut attempt = 0;
    loop {
        match fetch_once(c, key) {
            Err(e) if e.code() == Some("WRONGTYPE") && attempt < 3 => attempt += 1,
            other => return other,
        }
    }
}

fn fetch_once(c: &mut KeyClient, key: &[u8]) -> RedisResult<Option<Snapshot>> {
    let head = c.pipe(&[cmd1("TYPE", key), cmd1("PTTL", key)])?;
    let kind = match head.first() {
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::BulkString(s)) => String::from_utf8_lossy(s).into_owned(),
        Some(Value::Okay) => "ok".to_string(),
        other => return Err(unexpected("TYPE", other)),
    };
    if kind == "none" {
        return Ok(None);
    }
    let pttl = match head.get(1) {
        Some(Value::Int(n)) => *n,
        other => return Err(unexpected("PTTL", other)),
    };
    let data = match kind.as_str() {
        "string" => Data::String(bytes(c.query(&cmd1("GET", key))?)),
        "hash" => Data::Hash(pairs(c.query(&cmd1("HGETALL", key))?).into_iter().collect()),
        "list" => Data::List(list(c, key)?),
        "set" => Data::Set(
            items(c.query(&cmd1("SMEMBERS", key))?)
                .into_iter()
                .collect(),
        ),
        "zset" => {
            let mut cmd = cmd1("ZRANGE", key);
            cmd.arg(0).arg(-1).arg("WITHSCORES");
            let mut z = BTreeMap::new();
            for (m, s) in pairs(c.query(&cmd)?) {
                let score = std::str::from_utf8(&s)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .unwrap_or(f64::NAN);
                z.insert(m, score);
            }
            Data::ZSet(z)
        }
        "stream" => Data::Stream(stream(c, key)?),
        _ => Data::Dump(bytes(c.query(&cmd1("DUMP", key))?)),
    };
    Ok(Some(Snapshot { kind, pttl, data }))
}

/// `name key`.
pub fn cmd1(name: &str, key: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd(name);
    c.arg(key);
    c
}

fn unexpected(what: &str, v: Option<&Value>) -> redis::RedisError {
    redis::RedisError::from((
        ErrorKind::ResponseError,
        "unexpected reply",
        format!("{what}: {v:?}"),
    ))
}

fn list(c: &mut KeyClient, key: &[u8]) -> RedisResult<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    loop {
        let start = out.len();
        let mut cmd = cmd1("LRANGE", key);
        cmd.arg(start).arg(start + CHUNK - 1);
        let chunk = items(c.query(&cmd)?);
        let n = chunk.len();
        out.extend(chunk);
        if n < CHUNK {
            return Ok(out);
        }
    }
}

fn stream(c: &mut KeyClient, key: &[u8]) -> RedisResult<Vec<StreamEntry>> {
    let mut out: Vec<StreamEntry> = Vec::new();
    loop {
        let start = out
            .last()
            .map_or_else(|| "-".to_string(), |(id, _)| format!("({id}"));
        let mut cmd = cmd1("XRANGE", key);
        cmd.arg(start).arg("+").arg("COUNT").arg(CHUNK);
        let Value::Array(entries) = c.query(&cmd)? else {
            return Ok(out);
        };
        let n = entries.len();
        for e in entries {
            let Value::Array(mut parts) = e else { continue };
            if parts.len() < 2 {
                continue;
            }
            let fields = pairs(parts.pop().unwrap_or(Value::Nil));
            let id = String::from_utf8_lossy(&bytes(parts.swap_remove(0))).into_owned();
            out.push((id, fields));
        }
        if n < CHUNK {
            return Ok(out);
        }
    }
}

/// A bulk reply's bytes (nil: empty).
fn bytes(v: Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

/// An array reply's elements as bytes.
fn items(v: Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(a) | Value::Set(a) => a.into_iter().map(bytes).collect(),
        _ => Vec::new(),
    }
}

/// A flat `[k1, v1, k2, v2, …]` (or map) reply as pairs.
fn pairs(v: Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    match v {
        Value::Map(m) => m.into_iter().map(|(k, v)| (bytes(k), bytes(v))).collect(),
        v => {
            let flat = items(v);
            let mut it = flat.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            out
        }
    }
}

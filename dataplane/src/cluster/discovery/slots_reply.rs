//! `CLUSTER SLOTS` reply → [`SlotMap`].
//!
//! Reply shape (redis.io, CLUSTER SLOTS; Redis 7.0 `cluster.c` `clusterReplyMultiBulkSlots`):
//! an array of `[start, end, node, node...]` entries, the first node the range's primary and
//! the rest its replicas; each node `[endpoint, port, id, metadata]`, where Redis < 7 omits the
//! metadata and Redis < 4 the id. The metadata is a flat array of key/value pairs in RESP2 and a
//! map in RESP3 (`hostname`, `ip`); everything else is the same in both protocols.
//!
//! The endpoint is an IP, a hostname (`cluster-preferred-endpoint-type hostname`), NULL
//! (`unknown-endpoint`), `""` (the node does not know its own IP) or `?` (hostname preferred but
//! none configured). The spec says NULL and `""` mean "the endpoint the command was sent to";
//! `?` is an unknown node, so for it the metadata's `ip` is used when present and the queried
//! node's IP otherwise.
//!
//! The reply comes from the network: nothing here may panic on any input.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::cluster::CLUSTER_SLOTS;
use crate::cluster::topology::{SlotMap, SlotShard, UNASSIGNED};
use crate::resp::{array_elements, integer_reply, is_error, is_null, reply_len};

/// One `[start, end, primary, replica...]` entry with its nodes resolved.
struct Range {
    start: u16,
    end: u16,
    primary: SocketAddr,
    replicas: Vec<SocketAddr>,
}

/// How a node entry names its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint<'a> {
    /// NULL or `""`: the host the command was sent to.
    Queried,
    /// `?`: unknown; the metadata `ip` if any, else the queried host.
    Unknown,
    /// An IP literal or a hostname.
    Name(&'a [u8]),
}

/// The fields of one node entry, before resolution.
struct NodeFields<'a> {
    endpoint: Endpoint<'a>,
    port: u16,
    /// The `ip` value of the metadata, if present.
    meta_ip: Option<&'a [u8]>,
}

/// See [`super::parse_cluster_slots`].
pub(super) fn parse(reply: &[u8], queried: SocketAddr) -> Result<SlotMap, String> {
    match reply_len(reply) {
        Ok(Some(n)) if n == reply.len() => {}
        Ok(Some(_)) => return Err("trailing bytes after the reply".into()),
        Ok(None) => return Err("incomplete reply".into()),
        Err(e) => return Err(format!("malformed reply: {e}")),
    }
    if is_error(reply) {
        return Err(format!("error reply: {}", printable(reply)));
    }
    let entries =
        array_elements(reply).ok_or_else(|| format!("expected an array, got {}", kind(reply)))?;
    let mut ranges = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let entry = reply.get(e).unwrap_or_default();
        ranges.push(parse_entry(entry, queried).map_err(|m| format!("entry {i}: {m}"))?);
    }
    build(ranges)
}

/// `[start, end, primary, replica...]`.
fn parse_entry(entry: &[u8], queried: SocketAddr) -> Result<Range, String> {
    let items = children(entry).ok_or_else(|| format!("expected an array, got {}", kind(entry)))?;
    let [start, end, primary, replicas @ ..] = items.as_slice() else {
        return Err(format!(
            "expected start, end and a primary, got {} elements",
            items.len()
        ));
    };
    let (start, end) = (slot(start)?, slot(end)?);
    if start > end {
        return Err(format!("slot range {start}-{end} is reversed"));
    }
    let primary = node_fields(primary)
        .and_then(|f| resolve(&f, queried))
        .map_err(|m| format!("primary: {m}"))?;
    let mut resolved = Vec::with_capacity(replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        let fields = node_fields(r).map_err(|m| format!("replica {i}: {m}"))?;
        // A replica that does not resolve is left out rather than failing the map (Envoy
        // redis.rst: "a replica whose hostname does not resolve is skipped").
        match resolve(&fields, queried) {
            Ok(a) if a != primary && !resolved.contains(&a) => resolved.push(a),
            Ok(_) => {}
            Err(m) => tracing::debug!("CLUSTER SLOTS replica {i} of {primary} skipped: {m}"),
        }
    }
    Ok(Range {
        start,
        end,
        primary,
        replicas: resolved,
    })
}

/// A slot number: an integer in `0..16384`.
fn slot(v: &[u8]) -> Result<u16, String> {
    let n = integer_reply(v).ok_or_else(|| format!("expected a slot number, got {}", kind(v)))?;
    u16::try_from(n)
        .ok()
        .filter(|&s| s < CLUSTER_SLOTS)
        .ok_or_else(|| format!("slot {n} out of range"))
}

/// `[endpoint, port, id?, metadata?]`.
fn node_fields(v: &[u8]) -> Result<NodeFields<'_>, String> {
    let items = children(v).ok_or_else(|| format!("expected a node array, got {}", kind(v)))?;
    let [endpoint, port, rest @ ..] = items.as_slice() else {
        return Err(format!(
            "expected endpoint and port, got {} elements",
            items.len()
        ));
    };
    let endpoint = match string(endpoint)? {
        None | Some(b"") => Endpoint::Queried,
        Some(b"?") => Endpoint::Unknown,
        Some(name) => Endpoint::Name(name),
    };
    let port =
        integer_reply(port).ok_or_else(|| format!("expected a port number, got {}", kind(port)))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("port {port} out of range"))?;
    let meta_ip = match rest.get(1) {
        Some(meta) => metadata_ip(meta)?,
        None => None,
    };
    Ok(NodeFields {
        endpoint,
        port,
        meta_ip,
    })
}

/// The `ip` entry of a node's metadata (RESP2 flat pairs or RESP3 map).
fn metadata_ip(meta: &[u8]) -> Result<Option<&[u8]>, String> {
    let items = children(meta).ok_or_else(|| format!("expected metadata, got {}", kind(meta)))?;
    for pair in items.chunks(2) {
        if let [k, v] = pair
            && string(k)? == Some(b"ip".as_slice())
        {
            return string(v);
        }
    }
    Ok(None)
}

/// The address a node entry names. Hostnames are resolved (blocking DNS; first result).
fn resolve(f: &NodeFields<'_>, queried: SocketAddr) -> Result<SocketAddr, String> {
    let name = match f.endpoint {
        Endpoint::Queried => return Ok(SocketAddr::new(queried.ip(), f.port)),
        Endpoint::Unknown => match f.meta_ip {
            Some(ip) if !ip.is_empty() => ip,
            _ => return Ok(SocketAddr::new(queried.ip(), f.port)),
        },
        Endpoint::Name(name) => name,
    };
    let name = std::str::from_utf8(name).map_err(|_| "endpoint is not UTF-8".to_string())?;
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, f.port));
    }
    (name, f.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {name:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{name:?} resolves to no address"))
}

/// Assigns the ranges to shards, one shard per distinct primary in order of first slot.
fn build(mut ranges: Vec<Range>) -> Result<SlotMap, String> {
    // Redis 7 lists ranges by slot, older versions by node: sort so shard order is by slot.
    ranges.sort_by_key(|r| r.start);
    let mut map = SlotMap::empty();
    for r in ranges {
        let index = match map.shards.iter().position(|s| s.primary == r.primary) {
            Some(i) => i,
            None => {
                map.shards.push(SlotShard {
                    primary: r.primary,
                    replicas: r.replicas,
                });
                map.shards.len() - 1
            }
        };
        let index = u16::try_from(index)
            .ok()
            .filter(|&i| i != UNASSIGNED)
            .ok_or("too many shards")?;
        for s in r.start..=r.end {
            match map.slots.get_mut(usize::from(s)) {
                Some(owner) if *owner == UNASSIGNED => *owner = index,
                Some(_) => return Err(format!("slot {s} is listed twice")),
                None => return Err(format!("slot {s} out of range")),
            }
        }
    }
    Ok(map)
}

/// Elements of an array (`*`) or, for RESP3 maps (`%`), keys and values in turn.
fn children(v: &[u8]) -> Option<Vec<&[u8]>> {
    if v.first() == Some(&b'%') {
        return map_items(v);
    }
    let ranges = array_elements(v)?;
    ranges.into_iter().map(|r| v.get(r)).collect()
}

/// Keys and values of a complete RESP3 map `%<n>` (each a complete sub-reply).
fn map_items(v: &[u8]) -> Option<Vec<&[u8]>> {
    let cr = v.iter().position(|&b| b == b'\r')?;
    let n: usize = std::str::from_utf8(v.get(1..cr)?).ok()?.parse().ok()?;
    let mut pos = cr + 2;
    let mut out = Vec::new();
    for _ in 0..n.checked_mul(2)? {
        let rest = v.get(pos..)?;
        let len = reply_len(rest).ok()??;
        out.push(rest.get(..len)?);
        pos += len;
    }
    (pos == v.len()).then_some(out)
}

/// The bytes of a bulk (`$`) or simple (`+`) string; `None` for a null.
fn string(v: &[u8]) -> Result<Option<&[u8]>, String> {
    if is_null(v) {
        return Ok(None);
    }
    let body_end = v.len().saturating_sub(2);
    let body = match v.first() {
        Some(b'+') => v.get(1..body_end),
        // `$<len>\r\n<data>\r\n` (a complete element, so the length matches); not `$?` chunks.
        Some(b'$') if v.get(1) != Some(&b'?') => v
            .iter()
            .position(|&b| b == b'\r')
            .and_then(|cr| v.get(cr + 2..body_end)),
        _ => None,
    };
    body.map(Some)
        .ok_or_else(|| format!("expected a string, got {}", kind(v)))
}

/// A short description of a value's type for error messages.
fn kind(v: &[u8]) -> &'static str {
    match v.first() {
        Some(b'*') => "an array",
        Some(b'%') => "a map",
        Some(b'$') => "a bulk string",
        Some(b'+') => "a simple string",
        Some(b'-') | Some(b'!') => "an error",
        Some(b':') => "an integer",
        Some(b'_') => "a null",
        Some(_) => "another type",
        None => "nothing",
    }
}

/// An error reply's text, CRLF stripped, at most 200 bytes.
fn printable(reply: &[u8]) -> String {
    let text = reply.get(1..).unwrap_or_default();
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    let text = text.get(..200).unwrap_or(text);
    String::from_utf8_lossy(text).into_owned()
}

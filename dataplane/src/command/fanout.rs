//! Merging the replies of commands sent to every shard (FLUSHALL, DBSIZE, KEYS, INFO, …) and
//! SCAN's cursor rewrite.

use super::{Merge, scan};
use crate::resp::{self, encode};

const PROTOCOL_ERROR: &[u8] = b"-upstream protocol error\r\n";
const NO_REPLY: &[u8] = b"-ERR no reply\r\n";

/// Merges one reply per shard (shard order) into the client's reply, appended to `out`.
///
/// - `AllOk`: `+OK` if every shard said OK; else the first error, else the first other reply.
/// - `Sum`: integers summed; the first error passes through; a non-integer is a protocol error.
/// - `Concat`: arrays concatenated in shard order; the first error passes through.
/// - `FirstNonNil`: the first reply that is neither nil nor an error; nil if there is none and
///   some shard said nil; the first error if every shard failed.
/// - `MinInteger`, `MinLastSave`: the smallest integer; the first error passes through.
/// - `Info`: see [`merge_info`].
/// - `AndArrays`: element-wise AND of integer arrays of equal length (`:1` only if every shard
///   said 1); the first error passes through.
/// - `Same`: the reply, once, if every shard gave the same bytes; the first error passes
///   through; else `-ERR shards gave different replies`.
/// - `Union`: arrays joined, each element once, in first-seen order (PUBSUB CHANNELS); the
///   first error passes through.
/// - `MaxInteger`: the largest integer (PUBSUB NUMPAT); the first error passes through.
/// - `SumPairs`: `[name, count, …]` arrays of one layout, counts summed by position (PUBSUB
///   NUMSUB); the first error passes through.
/// - `ScanCursor`: the single reply of one shard, cursor rewritten (see [`scan_cursor`]).
/// - `Mget`/`Mset`/`SumIntegers` belong to [`super::split::merge`]; here the first reply passes.
pub fn merge(merge: Merge, replies: &[&[u8]], out: &mut Vec<u8>) {
    let Some(&first) = replies.first() else {
        return out.extend_from_slice(NO_REPLY);
    };
    let first_error = replies.iter().copied().find(|r| resp::is_error(r));
    match merge {
        Merge::AllOk => {
            let reply = first_error
                .or_else(|| replies.iter().copied().find(|r| !resp::is_ok(r)))
                .unwrap_or(b"+OK\r\n");
            out.extend_from_slice(reply);
        }
        Merge::Sum => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            let sum = replies
                .iter()
                .try_fold(0i64, |a, r| Some(a.saturating_add(resp::integer_reply(r)?)));
            match sum {
                Some(n) => encode::integer(out, n),
                None => out.extend_from_slice(PROTOCOL_ERROR),
            }
        }
        Merge::MinInteger | Merge::MinLastSave | Merge::MaxInteger => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            let pick = |a: i64, b: i64| {
                if merge == Merge::MaxInteger {
                    a.max(b)
                } else {
                    a.min(b)
                }
            };
            let start = if merge == Merge::MaxInteger {
                i64::MIN
            } else {
                i64::MAX
            };
            match replies
                .iter()
                .try_fold(start, |a, r| Some(pick(a, resp::integer_reply(r)?)))
            {
                Some(n) => encode::integer(out, n),
                None => out.extend_from_slice(PROTOCOL_ERROR),
            }
        }
        Merge::Union => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            let mut seen: Vec<&[u8]> = Vec::new();
            for r in replies {
                let Some(elems) = resp::array_elements(r) else {
                    return out.extend_from_slice(PROTOCOL_ERROR);
                };
                for e in elems {
                    let Some(elem) = r.get(e) else {
                        return out.extend_from_slice(PROTOCOL_ERROR);
                    };
                    if !seen.contains(&elem) {
                        seen.push(elem);
                    }
                }
            }
            encode::array_header(out, seen.len());
            for e in seen {
                out.extend_from_slice(e);
            }
        }
        Merge::SumPairs => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            match sum_pairs(replies) {
                Some(v) => {
                    encode::array_header(out, v.len() * 2);
                    for (name, n) in v {
                        out.extend_from_slice(name);
                        encode::integer(out, n);
                    }
                }
                None => out.extend_from_slice(PROTOCOL_ERROR),
            }
        }
        Merge::Concat => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            let mut total = 0;
            let mut bodies: Vec<&[u8]> = Vec::with_capacity(replies.len());
            for r in replies {
                let (Some(n), Some(body)) = (resp::array_len(r), array_body(r)) else {
                    if r.starts_with(b"*-1\r\n") {
                        continue;
                    }
                    return out.extend_from_slice(PROTOCOL_ERROR);
                };
                total += n;
                bodies.push(body);
            }
            encode::array_header(out, total);
            for b in bodies {
                out.extend_from_slice(b);
            }
        }
        Merge::FirstNonNil => {
            let reply = replies
                .iter()
                .copied()
                .find(|r| !resp::is_error(r) && !resp::is_null(r))
                .or_else(|| replies.iter().copied().find(|r| resp::is_null(r)))
                .unwrap_or(first);
            out.extend_from_slice(reply);
        }
        Merge::AndArrays => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            match and_arrays(replies) {
                Some(v) => {
                    encode::array_header(out, v.len());
                    for b in v {
                        encode::integer(out, i64::from(b));
                    }
                }
                None => out.extend_from_slice(PROTOCOL_ERROR),
            }
        }
        Merge::Same => {
            if let Some(e) = first_error {
                return out.extend_from_slice(e);
            }
            if replies.iter().all(|r| *r == first) {
                out.extend_from_slice(first);
            } else {
                out.extend_from_slice(b"-ERR shards gave different replies\r\n");
            }
        }
        Merge::Info => merge_info(replies, out),
        Merge::ScanCursor { shard, shards } => {
            scan_cursor(shard as usize, shards as usize, first, out)
        }
        Merge::Mget | Merge::Mset | Merge::SumIntegers => out.extend_from_slice(first),
    }
}

/// The bytes of an array reply after its `*<n>\r\n` header.
fn array_body(reply: &[u8]) -> Option<&[u8]> {
    let end = reply.windows(2).position(|w| w == b"\r\n")?;
    reply.get(end + 2..)
}

/// `[name, count, …]` replies of one layout with the counts summed by position; `None` when a
/// reply is not such an array or the layouts differ.
fn sum_pairs<'r>(replies: &[&'r [u8]]) -> Option<Vec<(&'r [u8], i64)>> {
    let mut acc: Option<Vec<(&[u8], i64)>> = None;
    for r in replies {
        let elems = resp::array_elements(r)?;
        let mut v = Vec::with_capacity(elems.len() / 2);
        for pair in elems.chunks(2) {
            let [name, count] = pair else {
                return None;
            };
            v.push((
                r.get(name.clone())?,
                resp::integer_reply(r.get(count.clone())?)?,
            ));
        }
        acc = Some(match acc {
            None => v,
            Some(a) if a.len() == v.len() && a.iter().zip(&v).all(|(x, y)| x.0 == y.0) => a
                .iter()
                .zip(&v)
                .map(|(x, y)| (x.0, x.1.saturating_add(y.1)))
                .collect(),
            Some(_) => return None,
        });
    }
    acc
}

fn and_arrays(replies: &[&[u8]]) -> Option<Vec<bool>> {
    let mut acc: Option<Vec<bool>> = None;
    for r in replies {
        let elems = resp::array_elements(r)?;
        let v = elems
            .into_iter()
            .map(|e| resp::integer_reply(r.get(e)?).map(|n| n != 0))
            .collect::<Option<Vec<bool>>>()?;
        acc = Some(match acc {
            None => v,
            Some(a) if a.len() == v.len() => a.iter().zip(&v).map(|(x, y)| *x && *y).collect(),
            Some(_) => return None,
        });
    }
    acc
}

/// SCAN's reply from shard `shard` of `shards` (`*2 $cursor *k keys…`) with the cursor
/// rewritten for the client: a shard cursor of 0 moves on to shard `shard+1` at cursor 0 (0 when
/// it was the last shard); any other cursor `c` becomes `scan::encode(shard, c)`. The keys array
/// is forwarded byte for byte. Errors pass through; any other shape is a protocol error.
pub fn scan_cursor(shard: usize, shards: usize, reply: &[u8], out: &mut Vec<u8>) {
    if resp::is_error(reply) {
        return out.extend_from_slice(reply);
    }
    let parsed = (|| {
        if resp::array_len(reply)? != 2 {
            return None;
        }
        let elems = resp::array_elements(reply)?;
        let cursor = reply.get(elems.first()?.clone())?;
        let keys = reply.get(elems.get(1)?.start..)?;
        // `$<n>\r\n<digits>\r\n`
        let text = cursor.strip_prefix(b"$")?;
        let nl = text.windows(2).position(|w| w == b"\r\n")?;
        let digits = text.get(nl + 2..text.len().checked_sub(2)?)?;
        let c: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        keys.starts_with(b"*").then_some((c, keys))
    })();
    let Some((c, keys)) = parsed else {
        return out.extend_from_slice(PROTOCOL_ERROR);
    };
    let next = if c != 0 {
        scan::encode(shard, c)
    } else if shard + 1 < shards {
        scan::encode(shard + 1, 0)
    } else {
        0
    };
    let text = next.to_string();
    encode::array_header(out, 2);
    encode::bulk(out, text.as_bytes());
    out.extend_from_slice(keys);
}

/// The text of a bulk string, or of a RESP3 verbatim string (`=<len>\r\ntxt:<text>`, what INFO
/// answers a RESP3 connection).
fn bulk_text(reply: &[u8]) -> Option<&[u8]> {
    match reply.first()? {
        b'$' => resp::bulk_body(reply),
        b'=' => {
            let rest = reply.get(1..)?;
            let nl = rest.windows(2).position(|w| w == b"\r\n")?;
            let n: usize = std::str::from_utf8(rest.get(..nl)?).ok()?.parse().ok()?;
            rest.get(nl + 2..nl + 2 + n)?.get(4..)
        }
        _ => None,
    }
}

/// `k:v` fields of a section, in order.
struct Section<'a> {
    name: &'a [u8],
    lines: Vec<&'a [u8]>,
}

fn sections(text: &[u8]) -> Vec<Section<'_>> {
    let mut out: Vec<Section<'_>> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(name) = line.strip_prefix(b"# ") {
            out.push(Section {
                name,
                lines: Vec::new(),
            });
        } else if !line.is_empty() {
            match out.last_mut() {
                Some(s) => s.lines.push(line),
                None => out.push(Section {
                    name: b"",
                    lines: vec![line],
                }),
            }
        }
    }
    out
}

fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b':') {
        Some(p) => (
            line.get(..p).unwrap_or_default(),
            line.get(p + 1..).unwrap_or_default(),
        ),
        None => (line, b""),
    }
}

fn int(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Fields of `# Clients` that are summed; the others come from the first shard.
const CLIENT_SUMS: &[&[u8]] = &[
    b"connected_clients",
    b"blocked_clients",
    b"tracking_clients",
    b"clients_in_timeout_table",
];

/// Integer fields of `# Stats` that are not summed (taken from the first shard).
const STATS_KEEP: &[&[u8]] = &[b"latest_fork_usec"];

/// INFO: each shard's bulk text is split into sections; the output has the first shard's
/// sections in order, with
/// - `# Keyspace`: one `dbN:keys=…,expires=…,avg_ttl=…` line per database any shard has, keys
///   and expires summed, avg_ttl the average weighted by each shard's `expires`;
/// - `# Stats`: every integer field summed across shards (except `latest_fork_usec`);
/// - `# Clients`: `connected_clients`, `blocked_clients`, `tracking_clients`,
///   `clients_in_timeout_table` summed;
/// - `# Errorstats`, `# Commandstats`: one line per error code or command any shard has,
///   counts summed (see [`counted`]): an error a keyless script met on one shard shows, as it
///   would on one server;
/// - every other field from the first shard;
///
/// then `# Proxy` (`proxy:respite`, `proxy_version`, `shards`). One bulk string. An error from
/// any shard passes through (the first one); a non-bulk reply is a protocol error.
pub fn merge_info(replies: &[&[u8]], out: &mut Vec<u8>) {
    if let Some(e) = replies.iter().find(|r| resp::is_error(r)) {
        return out.extend_from_slice(e);
    }
    let Some(texts) = replies
        .iter()
        .map(|r| bulk_text(r))
        .collect::<Option<Vec<_>>>()
    else {
        return out.extend_from_slice(PROTOCOL_ERROR);
    };
    let parsed: Vec<Vec<Section<'_>>> = texts.iter().map(|t| sections(t)).collect();
    let field = |shard: &[Section<'_>], section: &[u8], key: &[u8]| -> Option<i64> {
        let s = shard
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(section))?;
        s.lines.iter().find_map(|l| {
            let (k, v) = split_field(l);
            (k == key).then(|| int(v)).flatten()
        })
    };
    let sum = |section: &[u8], key: &[u8], first: &[u8]| -> Vec<u8> {
        let total = parsed
            .iter()
            .map(|p| field(p, section, key))
            .try_fold(0i64, |a, v| Some(a.saturating_add(v?)));
        match total {
            Some(t) => t.to_string().into_bytes(),
            None => first.to_vec(),
        }
    };
    let mut text: Vec<u8> = Vec::with_capacity(texts.first().map_or(0, |t| t.len()) + 128);
    for (n, s) in parsed
        .first()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if n > 0 {
            text.extend_from_slice(b"\r\n");
        }
        if !s.name.is_empty() {
            text.extend_from_slice(b"# ");
            text.extend_from_slice(s.name);
            text.extend_from_slice(b"\r\n");
        }
        if s.name.eq_ignore_ascii_case(b"keyspace") {
            keyspace(&parsed, &mut text);
            continue;
        }
        if s.name.eq_ignore_ascii_case(b"errorstats") {
            counted(&parsed, s.name, true, &mut text);
            continue;
        }
        if s.name.eq_ignore_ascii_case(b"commandstats") {
            counted(&parsed, s.name, false, &mut text);
            continue;
        }
        for line in &s.lines {
            let (k, v) = split_field(line);
            let summed = if s.name.eq_ignore_ascii_case(b"stats") {
                int(v).is_some() && !STATS_KEEP.contains(&k)
            } else if s.name.eq_ignore_ascii_case(b"clients") {
                CLIENT_SUMS.contains(&k)
            } else {
                false
            };
            if summed {
                text.extend_from_slice(k);
                text.push(b':');
                text.extend_from_slice(&sum(s.name, k, v));
            } else {
                text.extend_from_slice(line);
            }
            text.extend_from_slice(b"\r\n");
        }
    }
    if !text.is_empty() {
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"# Proxy\r\nproxy:respite\r\nproxy_version:");
    text.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
    text.extend_from_slice(b"\r\nshards:");
    encode::decimal(&mut text, replies.len() as i64);
    text.extend_from_slice(b"\r\n");
    encode::bulk(out, &text);
}

/// The merged `dbN:` lines of every shard's `# Keyspace`, by database number.
/// One `name:field=value,…` line per name that any shard's `section` lists, each integer field
/// summed across shards and `usec_per_call` recomputed from the summed `usec` and `calls`
/// (Redis `INFO commandstats` prints it with `%.2f`); other fields from the first shard that
/// has the name. `sorted`: names in byte order, as Redis lists error codes (`INFO errorstats`
/// walks a radix tree); else in the order first seen (commandstats follow Redis's command
/// table order).
fn counted(parsed: &[Vec<Section<'_>>], section: &[u8], sorted: bool, text: &mut Vec<u8>) {
    /// A field: its name, the first shard's raw value, the sum while every value is an integer.
    type Field<'a> = (&'a [u8], &'a [u8], Option<i64>);
    let mut rows: Vec<(&[u8], Vec<Field<'_>>)> = Vec::new();
    for shard in parsed {
        let Some(s) = shard.iter().find(|s| s.name.eq_ignore_ascii_case(section)) else {
            continue;
        };
        for line in &s.lines {
            let (name, values) = split_field(line);
            let row = match rows.iter().position(|r| r.0 == name) {
                Some(i) => rows.get_mut(i),
                None => {
                    rows.push((name, Vec::new()));
                    rows.last_mut()
                }
            };
            let Some((_, fields)) = row else { continue };
            for kv in values.split(|&b| b == b',') {
                let Some(p) = kv.iter().position(|&b| b == b'=') else {
                    continue;
                };
                let (f, raw) = (
                    kv.get(..p).unwrap_or_default(),
                    kv.get(p + 1..).unwrap_or_default(),
                );
                match fields.iter_mut().find(|x| x.0 == f) {
                    Some(x) => x.2 = x.2.zip(int(raw)).map(|(a, b)| a.saturating_add(b)),
                    None => fields.push((f, raw, int(raw))),
                }
            }
        }
    }
    if sorted {
        rows.sort_by(|a, b| a.0.cmp(b.0));
    }
    for (name, fields) in rows {
        let sum = |f: &[u8]| fields.iter().find(|x| x.0 == f).and_then(|x| x.2);
        text.extend_from_slice(name);
        text.push(b':');
        for (i, (f, raw, total)) in fields.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            text.extend_from_slice(f);
            text.push(b'=');
            match (*f, total) {
                (b"usec_per_call", _) => {
                    let (usec, calls) = (sum(b"usec").unwrap_or(0), sum(b"calls").unwrap_or(0));
                    let per = if calls > 0 {
                        usec as f64 / calls as f64
                    } else {
                        0.0
                    };
                    text.extend_from_slice(format!("{per:.2}").as_bytes());
                }
                (_, Some(t)) => encode::decimal(text, *t),
                (_, None) => text.extend_from_slice(raw),
            }
        }
        text.extend_from_slice(b"\r\n");
    }
}

fn keyspace(parsed: &[Vec<Section<'_>>], text: &mut Vec<u8>) {
    // db → (keys, expires, sum of avg_ttl * expires)
    let mut dbs: Vec<(u64, i64, i64, i128)> = Vec::new();
    for shard in parsed {
        let Some(s) = shard
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(b"keyspace"))
        else {
            continue;
        };
        for line in &s.lines {
            let (k, v) = split_field(line);
            let Some(db) = k
                .strip_prefix(b"db")
                .and_then(|d| std::str::from_utf8(d).ok()?.parse::<u64>().ok())
            else {
                continue;
            };
            let (mut keys, mut expires, mut ttl) = (0i64, 0i64, 0i64);
            for kv in v.split(|&b| b == b',') {
                let (name, value) = match kv.iter().position(|&b| b == b'=') {
                    Some(p) => (kv.get(..p).unwrap_or_default(), kv.get(p + 1..)),
                    None => continue,
                };
                let value = value.and_then(int).unwrap_or(0);
                match name {
                    b"keys" => keys = value,
                    b"expires" => expires = value,
                    b"avg_ttl" => ttl = value,
                    _ => {}
                }
            }
            let weighted = i128::from(ttl) * i128::from(expires);
            match dbs.iter_mut().find(|d| d.0 == db) {
                Some(d) => {
                    d.1 = d.1.saturating_add(keys);
                    d.2 = d.2.saturating_add(expires);
                    d.3 += weighted;
                }
                None => dbs.push((db, keys, expires, weighted)),
            }
        }
    }
    dbs.sort_by_key(|d| d.0);
    for (db, keys, expires, weighted) in dbs {
        let avg = if expires > 0 {
            (weighted / i128::from(expires)) as i64
        } else {
            0
        };
        text.extend_from_slice(
            format!("db{db}:keys={keys},expires={expires},avg_ttl={avg}\r\n").as_bytes(),
        );
    }
}

//! Splitting of multi-key commands across shards and merging of their replies.
//!
//! Semantics follow Envoy `redis_proxy` `command_splitter_impl.cc` (`MGETRequest`,
//! `MSETRequest`, `SplitKeysSumResultRequest`), except that each shard gets one sub-request of
//! the same command carrying all of its keys (Envoy sends one request per key).

use super::{CommandSpec, Merge, key_indices};
use crate::resp::{self, encode};

/// One sub-request of a split command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// What `shard_of` gave this part's keys: where the sub-request goes, or `None` when no
    /// host takes them (the part fails with `no upstream host`, or a copy is not made).
    pub shard: Option<usize>,
    /// The encoded RESP sub-request (same command, this shard's keys [and values]).
    pub request: Vec<u8>,
    /// Ordinal (0-based, in the original request) of each key in this part, in order.
    pub keys: Vec<u32>,
}

/// Groups the keys of `args` (args[0] is the command name) by `shard_of(key)`, keeping each
/// shard's keys in request order; parts are ordered by first appearance.
///
/// Keys are found with the spec's `first_key`/`last_key`/`step`; each key travels with the
/// `step - 1` arguments after it (MSET's value). An incomplete trailing group is ignored: check
/// [`super::keys_complete`] first.
pub fn split(
    spec: &CommandSpec,
    args: &[&[u8]],
    shard_of: impl FnMut(&[u8]) -> Option<usize>,
) -> Vec<Part> {
    let step = spec.step.max(1) as usize;
    let mut parts = group(spec, args, shard_of);
    let first = spec.first_key.max(0) as usize;
    let name = args.first().copied().unwrap_or_default();
    for part in &mut parts {
        let mut req = Vec::with_capacity(16 + name.len() + part.keys.len() * 24);
        encode::array_header(&mut req, 1 + part.keys.len() * step);
        encode::bulk(&mut req, name);
        for &o in &part.keys {
            let at = first + o as usize * step;
            for a in args.get(at..at + step).unwrap_or_default() {
                encode::bulk(&mut req, a);
            }
        }
        part.request = req;
    }
    parts
}

/// [`split`]'s grouping alone: the parts with their shards and keys, and no sub-request
/// encoded (`request` empty), for a caller that sends each part's arguments from the client's
/// own frame.
pub fn group(
    spec: &CommandSpec,
    args: &[&[u8]],
    mut shard_of: impl FnMut(&[u8]) -> Option<usize>,
) -> Vec<Part> {
    let step = spec.step.max(1) as usize;
    let mut parts: Vec<Part> = Vec::new();
    for (ordinal, i) in key_indices(spec, args.len()).enumerate() {
        if i + step > args.len() {
            break;
        }
        let Some(key) = args.get(i) else { break };
        let shard = shard_of(key);
        let p = match parts.iter().position(|p| p.shard == shard) {
            Some(p) => p,
            None => {
                parts.push(Part {
                    shard,
                    request: Vec::new(),
                    keys: Vec::new(),
                });
                parts.len() - 1
            }
        };
        if let Some(part) = parts.get_mut(p) {
            part.keys.push(ordinal as u32);
        }
    }
    parts
}

const PROTOCOL_ERROR: &[u8] = b"-upstream protocol error\r\n";

fn finished_with_errors(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(b"-finished with ");
    encode::decimal(out, n as i64);
    out.extend_from_slice(b" error(s)\r\n");
}

/// Merges one reply per part (same order as `parts`) into the client's reply, appended to
/// `out`. `nkeys` is the number of keys of the original request.
///
/// - `Mget`: `*nkeys` with each element in original key order, taken from the part's array
///   reply; an error reply of a part goes inline in each of its slots (Envoy: per-key errors
///   inline); a non-array reply, an array of the wrong length, or an element that is not a bulk
///   string (or error), gives `-upstream protocol error` in its slot(s).
/// - `Mset`: `+OK` if every part replied `+OK`, else `-finished with N error(s)` (N failed parts).
/// - `SumIntegers`: `:<sum>` if every part replied an integer, else `-finished with N error(s)`.
///
/// A missing reply (fewer replies than parts) counts as a failure.
pub fn merge(merge: Merge, nkeys: usize, parts: &[Part], replies: &[&[u8]], out: &mut Vec<u8>) {
    match merge {
        Merge::Mget => merge_mget(nkeys, parts, replies, out),
        Merge::Mset => {
            let failed = (0..parts.len())
                .filter(|&i| !replies.get(i).is_some_and(|r| resp::is_ok(r)))
                .count();
            if failed == 0 {
                encode::simple(out, b"OK");
            } else {
                finished_with_errors(out, failed);
            }
        }
        Merge::SumIntegers => {
            let mut sum: i64 = 0;
            let mut failed = 0;
            for i in 0..parts.len() {
                match replies.get(i).and_then(|r| resp::integer_reply(r)) {
                    Some(n) => sum = sum.saturating_add(n),
                    None => failed += 1,
                }
            }
            if failed == 0 {
                encode::integer(out, sum);
            } else {
                finished_with_errors(out, failed);
            }
        }
        other => super::fanout::merge(other, replies, out),
    }
}

fn merge_mget(nkeys: usize, parts: &[Part], replies: &[&[u8]], out: &mut Vec<u8>) {
    let mut slots: Vec<&[u8]> = vec![PROTOCOL_ERROR; nkeys];
    for (i, part) in parts.iter().enumerate() {
        let reply = replies.get(i).copied().unwrap_or(PROTOCOL_ERROR);
        if resp::is_error(reply) {
            for &o in &part.keys {
                if let Some(s) = slots.get_mut(o as usize) {
                    *s = reply;
                }
            }
            continue;
        }
        let whole = resp::array_len(reply) == Some(part.keys.len());
        let mut elems = resp::elements(reply).filter(|_| whole);
        for &o in &part.keys {
            let elem = elems
                .as_mut()
                .and_then(|e| e.next())
                .and_then(|r| reply.get(r))
                // Envoy MGETRequest: a non-bulk element (int, array, status, RESP3) is a
                // protocol error in its slot; errors stay inline.
                .filter(|e| matches!(e.first(), Some(b'$') | Some(b'-')) || *e == b"_\r\n")
                .unwrap_or(PROTOCOL_ERROR);
            if let Some(s) = slots.get_mut(o as usize) {
                *s = elem;
            }
        }
    }
    encode::array_header(out, nkeys);
    for s in slots {
        out.extend_from_slice(s);
    }
}

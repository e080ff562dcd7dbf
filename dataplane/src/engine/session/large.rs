//! Large requests: a request of at least [`LARGE_REQUEST`] bytes (a big `SET`, `APPEND`,
//! `RESTORE`) goes to its backend on a leased connection of its own, written straight from
//! the session's read buffer, instead of into a shared connection's output.
//!
//! - Other clients do not wait behind it: on a shared connection every request queued after
//!   it waits until the host has read all of it (seconds for hundreds of MiB), while on its
//!   own connection Redis reads it between serving the others, as it does a direct client's.
//! - It is never copied: the session hands its read buffer over (only what was read behind
//!   the request is copied, into a fresh buffer), so a 512 MiB `SET` costs the worker no
//!   512 MiB memcpy (hundreds of milliseconds in which no other client of the worker is served),
//!   and its bytes stay counted in the worker's budget (`budget::Budget::receiving`) until
//!   the reply is in: Respite holds at most one copy of it.
//! - The client's later requests wait behind it (a barrier), as behind a blocking command,
//!   so replies stay in order; it goes out once the client's earlier requests are answered.
//! - Outside MULTI and WATCH, a request goes this way when
//!   [`crate::router::dispatch::Dispatch::whole`] places it whole and unchanged (a keyed one,
//!   or a multi-key one such as `MSET` whose keys all land on one shard), or when
//!   [`crate::router::dispatch::Dispatch::split_whole`] splits it per shard with every key's
//!   arguments forwarded as sent (an `MSET` whose keys land on several shards, on a route
//!   without mirrors for it): each part then goes to its shard in turn, on a connection of its
//!   own, as its own array header followed by the ranges of the client's frame that hold its
//!   command name and its keys and values, so no part is copied either; the parts' replies
//!   are merged as on the shared path, at most [`MAX_FRAME_RANGES`] ranges in all (many small
//!   keys, such as an MGET of a million, are cheap to copy). Anything else (a route that
//!   rewrites keys, a split command with mirrors) takes the shared path, copied as before.
//! - Mirrors (Envoy `request_mirror_policy`) get their copy the same way, from the same
//!   buffer, once the primary has answered: on a shared connection the copy would cost a
//!   copy of the bytes and hold every other copy to that mirror behind it (a 256 MiB mirrored
//!   `SET` stalled the worker's other clients for 2.2 s). The client's earlier copies to that
//!   mirror went on the session's shared connection to it: a `PING` sent on that connection
//!   behind them (`MirrorStats::fence`), and answered, says they have run, so the large copy
//!   cannot overtake them; the client's later requests wait until the mirror has answered it,
//!   so they cannot overtake it either. A copy the mirror fails is counted, as any mirror
//!   copy, and changes nothing for the client.
//! - Redis Cluster: `MOVED`/`ASK` are followed on another lease (at most [`MAX_REDIRECTS`]).

use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;

use super::Session;
use super::barrier::Barrier;
use super::blocking::MAX_REDIRECTS;
use crate::cluster::{ClusterPool, Dest};
use crate::command::split::{Part, merge};
use crate::command::{self, CommandSpec, Merge, Request};
use crate::engine::budget::Budget;
use crate::engine::sink::Sink;
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::resp::encode;
use crate::router::dispatch::{Client, MirrorDest, TxDest, Upstream};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};

/// Requests of at least this many bytes (the whole RESP frame) go on a connection of their own:
/// behind 1 MiB a shared connection's other requests wait about a millisecond, and a lease's
/// round trip is small beside writing it.
pub(super) const LARGE_REQUEST: usize = 1024 * 1024;

/// The most ranges of the client's frame a split large request may be sent as, over all its
/// parts (each range is at least one write): a split command of more goes the shared way.
const MAX_FRAME_RANGES: usize = 64;

const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

const TOO_MANY_REDIRECTS: &[u8] = b"-TRYAGAIN too many cluster redirects for one request\r\n";

/// A large request placed by [`Session::large`], waiting for the read loop to hand its frame
/// over ([`Large::send`]).
pub(super) struct Large {
    to: To,
    seq: u64,
    session: u64,
    resp3: bool,
    barrier: Rc<Barrier>,
}

/// Where a large request goes.
enum To {
    /// Whole and unchanged to one shard of `dest` (at `addr`), then to each mirror. A split
    /// command (an `MSET` whose keys all land on one shard) has its reply merged as one part
    /// (`merged`), so it answers as the shared path would (`-finished with 1 error(s)`, an
    /// `MGET`'s error inline per key).
    Whole {
        dest: TxDest<ClusterPool>,
        addr: SocketAddr,
        mirrors: Vec<MirrorDest<ClusterPool>>,
        merged: Option<(Merge, Part)>,
    },
    /// Split per shard of `pool` into `parts` (their keys, for the merge), each sent from the
    /// frame as `framed` says (same order); the replies merged by `merge` over `nkeys` keys.
    Split {
        pool: Rc<ClusterPool>,
        merge: Merge,
        nkeys: usize,
        parts: Vec<Part>,
        framed: Vec<FramePart>,
    },
}

/// How one part of a split large request is sent: its own array header, then ranges of the
/// client's frame.
struct FramePart {
    addr: SocketAddr,
    head: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl Session {
    /// Takes `req` (a keyed or split command whose frame is at least [`LARGE_REQUEST`] bytes,
    /// past the auth gate and faults) for a connection of its own: its reply slot is taken and
    /// the session set to wait for it. False when it must go the shared way.
    pub(super) fn large(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) -> bool {
        if !self.mode.is_shared() || self.watching.is_some() || self.barrier.is_some() {
            return false;
        }
        let whole = self.dispatch(rt).whole(req, spec);
        let to = match whole {
            Some((dest, mirrors)) => {
                let Some(addr) = dest.pool.primary_addr(dest.shard) else {
                    return false;
                };
                let merged = match Upstream::of(spec.kind) {
                    Some(Upstream::Split(how)) => {
                        let argv: Vec<&[u8]> = req.args().collect();
                        let mut parts = command::split::group(spec, &argv, |_| Some(dest.shard));
                        let Some(part) = parts.pop().filter(|_| parts.is_empty()) else {
                            return false;
                        };
                        Some((how, part))
                    }
                    _ => None,
                };
                To::Whole {
                    dest,
                    addr,
                    mirrors,
                    merged,
                }
            }
            None => {
                let Some(Upstream::Split(merge)) = Upstream::of(spec.kind) else {
                    return false;
                };
                let Some((pool, parts)) = self.dispatch(rt).split_whole(req, spec) else {
                    return false;
                };
                let nkeys = parts.iter().map(|p| p.keys.len()).sum();
                let mut framed = Vec::with_capacity(parts.len());
                for part in &parts {
                    let addr = part.shard.and_then(|s| pool.primary_addr(s));
                    let (Some(addr), Some((head, ranges))) = (addr, frame_ranges(req, spec, part))
                    else {
                        return false;
                    };
                    framed.push(FramePart { addr, head, ranges });
                }
                // Many small keys (an MGET of a million) are cheap to copy and would cost a
                // write per range: that is the shared path's job.
                if framed.iter().map(|p| p.ranges.len()).sum::<usize>() > MAX_FRAME_RANGES {
                    return false;
                }
                To::Split {
                    pool,
                    merge,
                    nkeys,
                    parts,
                    framed,
                }
            }
        };
        // It may take long: what came before it is written at once, and the session watches its
        // client meanwhile (the request still runs if the client leaves, as a request Redis
        // has read does).
        let barrier = Rc::new(Barrier::blocking());
        self.barrier = Some(barrier.clone());
        self.large = Some(Large {
            to,
            seq: self.sink.push(spec.id),
            session: self.id,
            resp3: self.conn.resp3,
            barrier,
        });
        true
    }
}

impl Large {
    /// Sends `frame` (the request's whole frame, owned) once the client's earlier requests are
    /// answered, delivers its reply into `sink`, sends the mirrors' copies, and lets the
    /// session go on. The frame's memory is given back (`budget`'s trim) as soon as the hosts
    /// have it all.
    pub(super) fn send(self, frame: Vec<u8>, sink: Rc<Sink>, budget: Rc<Budget>) {
        net::spawn(async move {
            sink.answered_before(self.seq).await;
            let capacity = frame.capacity();
            let frame = match &self.to {
                To::Whole {
                    dest,
                    addr,
                    mirrors,
                    merged,
                } => {
                    let all = [Range {
                        start: 0,
                        end: frame.len(),
                    }];
                    let (reply, mut frame) =
                        exchange(&dest.pool, *addr, self.resp3, b"", frame, &all).await;
                    match merged {
                        Some((how, part)) => {
                            let mut out = Vec::new();
                            let parts = std::slice::from_ref(part);
                            merge(*how, part.keys.len(), parts, &[&reply], &mut out);
                            sink.deliver(self.seq, 0, &out);
                        }
                        None => sink.deliver(self.seq, 0, &reply),
                    }
                    for m in mirrors {
                        frame = self.copy(m, frame).await;
                    }
                    frame
                }
                To::Split {
                    pool,
                    merge: how,
                    nkeys,
                    parts,
                    framed,
                } => {
                    let mut frame = frame;
                    let mut replies = Vec::with_capacity(framed.len());
                    for p in framed {
                        let (reply, back) =
                            exchange(pool, p.addr, self.resp3, &p.head, frame, &p.ranges).await;
                        frame = back;
                        replies.push(reply);
                    }
                    let replies: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
                    let mut reply = Vec::new();
                    merge(*how, *nkeys, parts, &replies, &mut reply);
                    sink.deliver(self.seq, 0, &reply);
                    frame
                }
            };
            drop(frame);
            budget.released(capacity);
            self.barrier.open(None);
        });
    }

    /// Sends `frame` to mirror `m` (see the module's doc) and counts its reply; returns the
    /// frame.
    async fn copy(&self, m: &MirrorDest<ClusterPool>, frame: Vec<u8>) -> Vec<u8> {
        if !m.stats.begin() {
            return frame;
        }
        let client = Client {
            session: self.session,
            resp3: self.resp3,
        };
        if let Some(answered) = m.stats.fence(&*m.pool, Dest::Key(m.shard), client) {
            answered.notified().await;
        }
        let Some(addr) = m.pool.primary_addr(m.shard) else {
            m.stats.deliver(0, 0, NO_UPSTREAM_HOST);
            return frame;
        };
        let all = [Range {
            start: 0,
            end: frame.len(),
        }];
        let (reply, frame) = exchange(&m.pool, addr, self.resp3, b"", frame, &all).await;
        m.stats.deliver(0, 0, &reply);
        frame
    }
}

/// Runs the request `head` then the `ranges` of `frame` at `addr` of `pool` on a leased
/// connection, following cluster redirects; returns the reply (or the failure in its place)
/// and the frame.
async fn exchange(
    pool: &ClusterPool,
    mut addr: SocketAddr,
    resp3: bool,
    head: &[u8],
    mut frame: Vec<u8>,
    ranges: &[Range<usize>],
) -> (Vec<u8>, Vec<u8>) {
    let mut asking = false;
    for _ in 0..=MAX_REDIRECTS {
        let mut lease = match pool.leases.lease(addr, resp3).await {
            Ok(lease) => lease,
            Err(e) => return (e.reply().to_vec(), frame),
        };
        let prefix = if asking { ASKING } else { b"" };
        let (reply, back) = lease.exchange_large(prefix, head, frame, ranges).await;
        frame = back;
        let Ok(reply) = reply else {
            return (UPSTREAM_FAILURE.to_vec(), frame);
        };
        let from = lease.addr();
        lease.release(true);
        let redirect = matches!(reply.get(..4), Some(b"-MOV" | b"-ASK"))
            .then(|| pool.lease_redirect(from, &reply))
            .flatten();
        let Some((to, ask)) = redirect else {
            return (reply, frame);
        };
        addr = to;
        asking = ask;
    }
    (TOO_MANY_REDIRECTS.to_vec(), frame)
}

/// The sub-request of `part` of `req` as sent from its frame: its array header, and the ranges
/// of the frame that hold the command name and each of its keys with the arguments that travel
/// with it (MSET's value), each with its bulk header, adjacent ranges joined. `None` when `req`
/// has no frame its arguments index (an inline request) or a range falls outside it.
///
/// A frame is `*<n>\r\n`, then each argument as `$<len>\r\n<bytes>\r\n`: argument `i`'s
/// bulk header starts two bytes past argument `i - 1`'s end, and the command name's right
/// after the array header's line.
fn frame_ranges(
    req: &Request<'_>,
    spec: &CommandSpec,
    part: &Part,
) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    let frame = req.frame()?;
    if !std::ptr::eq(req.bytes().as_ptr(), frame.as_ptr()) {
        return None;
    }
    let args = req.ranges();
    let step = spec.step.max(1) as usize;
    let first = spec.first_key.max(0) as usize;
    // The array header's line ends at its first `\r` and one byte more, as the parser reads it.
    let name_start = frame.iter().position(|&b| b == b'\r')? + 2;
    let mut ranges = Vec::with_capacity(1 + part.keys.len());
    ranges.push(name_start..args.first()?.end + 2);
    for &ordinal in &part.keys {
        let at = first + ordinal as usize * step;
        let start = args.get(at.checked_sub(1)?)?.end + 2;
        let end = args.get(at + step - 1)?.end + 2;
        match ranges.last_mut() {
            Some(last) if last.end == start => last.end = end,
            _ => ranges.push(start..end),
        }
    }
    if ranges
        .iter()
        .any(|r| r.start > r.end || r.end > frame.len())
    {
        return None;
    }
    let mut head = Vec::new();
    encode::array_header(&mut head, 1 + part.keys.len() * step);
    Some((head, ranges))
}

/// Takes the frame of `consumed` bytes at `*start` out of `buf`, moving `*start` past it. At
/// the front of `buf` (a large request always is, unless it arrived in one read with the
/// requests before it) the buffer itself is the frame and what follows moves to a new one;
/// elsewhere the frame is copied.
pub(super) fn take_frame(buf: &mut Vec<u8>, start: &mut usize, consumed: usize) -> Vec<u8> {
    if *start == 0 && consumed <= buf.len() {
        let rest = buf.split_off(consumed);
        return std::mem::replace(buf, rest);
    }
    let end = start.saturating_add(consumed);
    let frame = buf.get(*start..end).unwrap_or_default().to_vec();
    *start = end;
    frame
}

#[cfg(test)]
mod tests {
    use super::{frame_ranges, take_frame};
    use crate::command::{self, Request};
    use crate::resp::{Limits, Parsed, RequestParser, encode};

    /// What a split part sent from the client's frame carries.
    fn sent(frame: &[u8], head: &[u8], ranges: &[std::ops::Range<usize>]) -> Vec<u8> {
        let mut out = head.to_vec();
        for r in ranges {
            out.extend_from_slice(&frame[r.clone()]);
        }
        out
    }

    /// The arguments of the one request in `bytes`.
    fn parsed(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut parser = RequestParser::new(Limits::default());
        let (mut args, mut scratch) = (Vec::new(), Vec::new());
        let Ok(Parsed::Resp { consumed }) = parser.parse(bytes, &mut args, &mut scratch) else {
            panic!("not one request: {:?}", String::from_utf8_lossy(bytes));
        };
        assert_eq!(
            consumed,
            bytes.len(),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
        args.iter().map(|r| bytes[r.clone()].to_vec()).collect()
    }

    /// For MSETs of 1 to 6 pairs (empty, short and long values) and any placement of their keys
    /// on 3 shards, each part sent from the client's frame is the sub-request the shared path
    /// encodes for it: byte for byte for a well-formed frame, argument for argument for one
    /// written as leniently as Redis reads (any byte after a line's `\r`, any two bytes after
    /// a bulk string).
    #[test]
    fn parts_sent_from_the_frame_equal_the_encoded_sub_requests() {
        let spec = command::lookup(b"MSET").unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..500 {
            let lenient = round % 3 == 0;
            let pairs = rng.usize(1..=6);
            let mut argv: Vec<Vec<u8>> = vec![b"mset".to_vec()];
            for i in 0..pairs {
                argv.push(format!("k{round}:{i}").into_bytes());
                let len = [0, 1, 3, 200][rng.usize(0..4)];
                argv.push((0..len).map(|_| rng.alphanumeric() as u8).collect());
            }
            let mut frame = Vec::new();
            if lenient {
                let mut any = || [b'x', b'\n', b'\r', b' '][rng.usize(0..4)];
                frame.extend_from_slice(format!("*{}\r", argv.len()).as_bytes());
                frame.push(any());
                for a in &argv {
                    frame.extend_from_slice(format!("${}\r", a.len()).as_bytes());
                    frame.push(any());
                    frame.extend_from_slice(a);
                    frame.extend_from_slice(&[any(), any()]);
                }
            } else {
                encode::command(&mut frame, argv.iter().map(Vec::as_slice));
            }
            let mut parser = RequestParser::new(Limits::default());
            let (mut args, mut scratch) = (Vec::new(), Vec::new());
            let Ok(Parsed::Resp { consumed }) = parser.parse(&frame, &mut args, &mut scratch)
            else {
                panic!(
                    "round {round}: not parsed: {:?}",
                    String::from_utf8_lossy(&frame)
                );
            };
            let req = Request::new(&frame, &args, frame.get(..consumed));
            let shards: Vec<usize> = (0..pairs).map(|_| rng.usize(0..3)).collect();
            let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            let mut key = 0;
            let parts = command::split::split(spec, &borrowed, |_| {
                key += 1;
                shards.get(key - 1).copied()
            });
            for part in &parts {
                let (head, ranges) = frame_ranges(&req, spec, part).unwrap();
                let sent = sent(&frame, &head, &ranges);
                if lenient {
                    assert_eq!(
                        parsed(&sent),
                        parsed(&part.request),
                        "round {round}, shards {shards:?}"
                    );
                } else {
                    assert_eq!(
                        String::from_utf8_lossy(&sent),
                        String::from_utf8_lossy(&part.request),
                        "round {round}, shards {shards:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_frame_at_the_front_is_the_buffer_itself_and_the_rest_stays() {
        let mut buf = b"*1\r\n$4\r\nPING\r\n*1\r\n".to_vec();
        buf.reserve(1 << 20);
        let cap = buf.capacity();
        let mut start = 0;
        let frame = take_frame(&mut buf, &mut start, 14);
        assert_eq!(frame, b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(frame.capacity(), cap, "not copied");
        assert_eq!(buf, b"*1\r\n");
        assert_eq!(start, 0);
    }

    #[test]
    fn a_frame_behind_others_is_copied_and_start_moves_past_it() {
        let mut buf = b"+x*1\r\n$4\r\nPING\r\ntail".to_vec();
        let mut start = 2;
        let frame = take_frame(&mut buf, &mut start, 14);
        assert_eq!(frame, b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(start, 16);
        assert_eq!(buf.get(start..), Some(&b"tail"[..]));
    }
}

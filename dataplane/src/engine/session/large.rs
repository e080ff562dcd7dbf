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
//!   [`crate::router::dispatch::Dispatch::whole`] places a keyed one whole, or when
//!   [`crate::router::dispatch::Dispatch::split_whole`] splits a split one (`MSET`, `MGET`,
//!   `DEL` …) per route pool and shard, one part when its keys all land on one shard: each part then goes to
//!   its shard in turn, on a connection of its own, as its own array header followed by the
//!   ranges of the client's frame that hold its command name and its keys and values, so no
//!   part is copied either; the parts' replies are merged as on the shared path, at most
//!   [`MAX_FRAME_RANGES`] pieces in all (many small keys, such as an MGET of a million, are
//!   cheap to copy). On a route that rewrites keys (`remove_prefix`, `key_formatter`) each key
//!   goes in its forwarded form, written from bytes of its own between ranges of the frame.
//!   A split one's mirrors get their copies part by part the same way, each part split by the
//!   mirror cluster's own shards. Inside MULTI a large command is queued as its frame instead,
//!   its keys rewritten the same way ([`whole_pieces`], `transaction::commands`).
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
use crate::command::{CommandSpec, Merge, Request};
use crate::engine::budget::Budget;
use crate::engine::sink::Sink;
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::resp::encode;
use crate::router::dispatch::{Client, MirrorDest, SplitWhole, TxDest, Upstream, Whole};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, Piece, UPSTREAM_FAILURE};

/// Requests of at least this many bytes (the whole RESP frame) go on a connection of their own:
/// behind 1 MiB a shared connection's other requests wait about a millisecond, and a lease's
/// round trip is small beside writing it.
pub(super) const LARGE_REQUEST: usize = 1024 * 1024;

/// The most pieces (ranges of the client's frame, runs of bytes of its own) a split large
/// request may be sent as, over all its parts (each is at least one write): a split command of
/// more goes the shared way.
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
    /// Whole to one shard of `dest` (at `addr`), then to each mirror.
    Whole {
        dest: TxDest<ClusterPool>,
        addr: SocketAddr,
        mirrors: Vec<MirrorDest<ClusterPool>>,
        /// The request as sent: the frame, each key rewritten by its route if it rewrites.
        pieces: Vec<Piece>,
    },
    /// Split per route pool and shard into `parts` (their keys, for the merge; one when they
    /// all land on one shard), each sent from the frame as `framed` says (same order); the replies
    /// merged by `merge` over `nkeys` keys, so it answers as the shared path would
    /// (`-finished with 1 error(s)`, an `MGET`'s error inline per key).
    Split {
        merge: Merge,
        nkeys: usize,
        parts: Vec<Part>,
        framed: Vec<FramePart>,
        /// The mirrors' copies, part by part (each its own shard of a mirror cluster).
        mirrors: Vec<(MirrorDest<ClusterPool>, Vec<Piece>)>,
    },
}

/// How one part of a split large request is sent: its own array header, then ranges of the
/// client's frame (and its keys as their route forwards them, if it rewrites).
struct FramePart {
    pool: Rc<ClusterPool>,
    addr: SocketAddr,
    pieces: Vec<Piece>,
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
        // A split command always goes the split way, whatever shards its keys land on: its
        // mirrors admit key by key (`runtime_fraction`) and place keys by their own shards,
        // and its reply is merged, as on the shared path.
        let split = match Upstream::of(spec.kind) {
            Some(Upstream::Split(merge)) => Some(merge),
            _ => None,
        };
        let whole = if split.is_some() {
            None
        } else {
            self.dispatch(rt).whole(req, spec)
        };
        let to = match whole {
            Some(Whole {
                dest,
                mirrors,
                forwarded,
            }) => {
                let Some(addr) = dest.pool.primary_addr(dest.shard) else {
                    return false;
                };
                let Some(pieces) = whole_pieces(req, &forwarded) else {
                    return false;
                };
                To::Whole {
                    dest,
                    addr,
                    mirrors,
                    pieces,
                }
            }
            None => {
                let Some(merge) = split else {
                    return false;
                };
                let Some(SplitWhole {
                    groups,
                    parts,
                    forwarded,
                    mirrors: mirror_parts,
                }) = self.dispatch(rt).split_whole(req, spec)
                else {
                    return false;
                };
                let nkeys = parts.iter().map(|p| p.keys.len()).sum();
                let mut framed = Vec::with_capacity(parts.len());
                for part in &parts {
                    let group = part.shard.and_then(|g| groups.get(g));
                    let addr =
                        group.and_then(|(pool, shard)| Some((pool, pool.primary_addr(*shard)?)));
                    let pieces = part_pieces(req, spec, part, &forwarded);
                    let (Some((pool, addr)), Some(pieces)) = (addr, pieces) else {
                        return false;
                    };
                    framed.push(FramePart {
                        pool: pool.clone(),
                        addr,
                        pieces,
                    });
                }
                let mut mirrors = Vec::new();
                for m in mirror_parts {
                    for part in &m.parts {
                        let shard = part.shard;
                        let pieces = part_pieces(req, spec, part, &forwarded);
                        let (Some(shard), Some(pieces)) = (shard, pieces) else {
                            return false;
                        };
                        let dest = MirrorDest {
                            pool: m.pool.clone(),
                            shard,
                            stats: m.stats.clone(),
                        };
                        mirrors.push((dest, pieces));
                    }
                }
                // Many small keys (an MGET of a million) are cheap to copy and would cost a
                // write per piece: that is the shared path's job.
                let pieces = framed.iter().map(|p| p.pieces.len()).sum::<usize>()
                    + mirrors.iter().map(|(_, p)| p.len()).sum::<usize>();
                if pieces > MAX_FRAME_RANGES {
                    return false;
                }
                To::Split {
                    merge,
                    nkeys,
                    parts,
                    framed,
                    mirrors,
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
                    pieces,
                } => {
                    let (reply, mut frame) =
                        exchange(&dest.pool, *addr, self.resp3, frame, pieces).await;
                    sink.deliver(self.seq, 0, &reply);
                    for m in mirrors {
                        frame = self.copy(m, frame, pieces).await;
                    }
                    frame
                }
                To::Split {
                    merge: how,
                    nkeys,
                    parts,
                    framed,
                    mirrors,
                } => {
                    let mut frame = frame;
                    let mut replies = Vec::with_capacity(framed.len());
                    for p in framed {
                        let (reply, back) =
                            exchange(&p.pool, p.addr, self.resp3, frame, &p.pieces).await;
                        frame = back;
                        replies.push(reply);
                    }
                    let replies: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
                    let mut reply = Vec::new();
                    merge(*how, *nkeys, parts, &replies, &mut reply);
                    sink.deliver(self.seq, 0, &reply);
                    for (m, pieces) in mirrors {
                        frame = self.copy(m, frame, pieces).await;
                    }
                    frame
                }
            };
            drop(frame);
            budget.released(capacity);
            self.barrier.open(None);
        });
    }

    /// Sends `frame` as `pieces` say to mirror `m` (see the module's doc) and counts its reply;
    /// returns the frame.
    async fn copy(&self, m: &MirrorDest<ClusterPool>, frame: Vec<u8>, pieces: &[Piece]) -> Vec<u8> {
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
        let (reply, frame) = exchange(&m.pool, addr, self.resp3, frame, pieces).await;
        m.stats.deliver(0, 0, &reply);
        frame
    }
}

/// Runs the request `pieces` make of `frame` at `addr` of `pool` on a leased connection,
/// following cluster redirects; returns the reply (or the failure in its place) and the frame.
async fn exchange(
    pool: &ClusterPool,
    mut addr: SocketAddr,
    resp3: bool,
    mut frame: Vec<u8>,
    pieces: &[Piece],
) -> (Vec<u8>, Vec<u8>) {
    let mut asking = false;
    for _ in 0..=MAX_REDIRECTS {
        let mut lease = match pool.leases.lease(addr, resp3).await {
            Ok(lease) => lease,
            Err(e) => return (e.reply().to_vec(), frame),
        };
        let prefix = if asking { ASKING } else { b"" };
        let (reply, back) = lease.exchange_large(prefix, frame, pieces).await;
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

/// Pieces of a request as it is sent, built in order: adjacent ranges of the frame joined, and
/// adjacent bytes of its own.
#[derive(Default)]
struct Pieces {
    pieces: Vec<Piece>,
    backwards: bool,
}

impl Pieces {
    fn frame(&mut self, r: Range<usize>) {
        if r.start >= r.end {
            self.backwards |= r.start > r.end;
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::Frame(last)) if last.end == r.start => last.end = r.end,
            _ => self.pieces.push(Piece::Frame(r)),
        }
    }

    /// A bulk string of its own (a key as its route forwards it), or an array header.
    fn own(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        if let Some(Piece::Bytes(last)) = self.pieces.last_mut() {
            return write(last);
        }
        let mut bytes = Vec::new();
        write(&mut bytes);
        self.pieces.push(Piece::Bytes(bytes));
    }

    /// The pieces, `None` when a range falls outside `frame` or runs backwards.
    fn within(self, frame: &[u8]) -> Option<Vec<Piece>> {
        let inside = self.pieces.iter().all(|p| match p {
            Piece::Frame(r) => r.end <= frame.len(),
            Piece::Bytes(_) | Piece::Shared(_) => true,
        });
        (inside && !self.backwards).then_some(self.pieces)
    }
}

/// The frame of `req` with its keys at the argument indexes of `forwarded` (ascending)
/// replaced by their forwarded forms: the whole frame when there are none. `None` when `req`
/// has no frame its arguments index (an inline request) or the indexes do not ascend.
///
/// A frame is `*<n>\r\n`, then each argument as `$<len>\r\n<bytes>\r\n`: argument `i`'s
/// bulk header starts two bytes past argument `i - 1`'s end (Redis reads any two bytes there).
pub(super) fn whole_pieces(
    req: &Request<'_>,
    forwarded: &[(usize, Vec<u8>)],
) -> Option<Vec<Piece>> {
    let frame = req.frame()?;
    if !std::ptr::eq(req.bytes().as_ptr(), frame.as_ptr()) {
        return None;
    }
    let args = req.ranges();
    let mut pieces = Pieces::default();
    let mut at = 0;
    for (i, key) in forwarded {
        pieces.frame(at..args.get(i.checked_sub(1)?)?.end + 2);
        pieces.own(|out| encode::bulk(out, key));
        at = args.get(*i)?.end + 2;
    }
    pieces.frame(at..frame.len());
    pieces.within(frame)
}

/// The sub-request of `part` of `req` as sent from its frame: its array header, then the
/// ranges of the frame that hold the command name and each of its keys with the arguments
/// that travel with it (MSET's value), each with its bulk header; a key whose route rewrites
/// it (`forwarded`, by ordinal, when not empty) goes in its forwarded form instead. `None` when
/// `req` has no frame its arguments index (an inline request) or a range falls outside it.
///
/// The command name's bulk header starts right after the array header's line, which ends at
/// its first `\r` and one byte more, as the parser reads it; see [`whole_pieces`] for the rest.
fn part_pieces(
    req: &Request<'_>,
    spec: &CommandSpec,
    part: &Part,
    forwarded: &[Vec<u8>],
) -> Option<Vec<Piece>> {
    let frame = req.frame()?;
    if !std::ptr::eq(req.bytes().as_ptr(), frame.as_ptr()) {
        return None;
    }
    let args = req.ranges();
    let step = spec.step.max(1) as usize;
    let first = spec.first_key.max(0) as usize;
    let mut pieces = Pieces::default();
    pieces.own(|out| encode::array_header(out, 1 + part.keys.len() * step));
    let name_start = frame.iter().position(|&b| b == b'\r')? + 2;
    pieces.frame(name_start..args.first()?.end + 2);
    for &ordinal in &part.keys {
        let at = first + ordinal as usize * step;
        let end = args.get(at + step - 1)?.end + 2;
        match forwarded.get(ordinal as usize) {
            Some(key) => {
                pieces.own(|out| encode::bulk(out, key));
                pieces.frame(args.get(at)?.end + 2..end);
            }
            None if forwarded.is_empty() => {
                pieces.frame(args.get(at.checked_sub(1)?)?.end + 2..end)
            }
            None => return None,
        }
    }
    pieces.within(frame)
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
    use super::{Piece, part_pieces, take_frame, whole_pieces};
    use crate::command::{self, Request};
    use crate::resp::{Limits, Parsed, RequestParser, encode};

    /// What a request sent as `pieces` of the client's frame carries.
    fn sent(frame: &[u8], pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Frame(r) => out.extend_from_slice(&frame[r.clone()]),
                Piece::Shared(b) => out.extend_from_slice(b),
            }
        }
        out
    }

    /// `argv` framed as a client would send it: well-formed, or (`lenient`) as leniently as
    /// Redis reads (any byte after a line's `\r`, any two bytes after a bulk string).
    fn framed(argv: &[Vec<u8>], lenient: bool, rng: &mut fastrand::Rng) -> Vec<u8> {
        let mut frame = Vec::new();
        if lenient {
            let mut any = || [b'x', b'\n', b'\r', b' '][rng.usize(0..4)];
            frame.extend_from_slice(format!("*{}\r", argv.len()).as_bytes());
            frame.push(any());
            for a in argv {
                frame.extend_from_slice(format!("${}\r", a.len()).as_bytes());
                frame.push(any());
                frame.extend_from_slice(a);
                frame.extend_from_slice(&[any(), any()]);
            }
        } else {
            encode::command(&mut frame, argv.iter().map(Vec::as_slice));
        }
        frame
    }

    /// A route's rewrite of `key` for the tests: `remove_prefix` of 2 bytes, a `key_formatter`
    /// that makes it longer, or one that makes it shorter (`fmt` 0, 1, 2).
    fn rewritten(key: &[u8], fmt: usize) -> Vec<u8> {
        match fmt {
            0 => key.get(2..).unwrap_or_default().to_vec(),
            1 => [b"{tenant-a}:".as_slice(), key, b":suffix"].concat(),
            _ => key.get(..1).unwrap_or_default().to_vec(),
        }
    }

    /// Sent as `sent` and as `want` (the shared path's encoding), the same request: byte for
    /// byte, or argument for argument for a `lenient` frame.
    fn same(sent: &[u8], want: &[u8], lenient: bool, what: &str) {
        if lenient {
            assert_eq!(parsed(sent), parsed(want), "{what}");
        } else {
            assert_eq!(
                String::from_utf8_lossy(sent),
                String::from_utf8_lossy(want),
                "{what}"
            );
        }
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

    /// For MSETs of 1 to 6 pairs (empty, short and long values), any placement of their keys
    /// on 3 shards, keys forwarded as sent or rewritten by their route, each part sent from the
    /// client's frame is the sub-request the shared path encodes for it: byte for byte for a
    /// well-formed frame, argument for argument for a lenient one.
    #[test]
    fn parts_sent_from_the_frame_equal_the_encoded_sub_requests() {
        let spec = command::lookup(b"MSET").unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..1000usize {
            let lenient = round % 3 == 0;
            let rewrite = (round % 4).checked_sub(1);
            let pairs = rng.usize(1..=6);
            let mut argv: Vec<Vec<u8>> = vec![b"mset".to_vec()];
            for i in 0..pairs {
                argv.push(format!("k{round}:{i}").into_bytes());
                let len = [0, 1, 3, 200][rng.usize(0..4)];
                argv.push((0..len).map(|_| rng.alphanumeric() as u8).collect());
            }
            let frame = framed(&argv, lenient, &mut rng);
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
            // The shared path splits the request as its route forwards it.
            let mut fwd = argv.clone();
            let mut forwarded = Vec::new();
            if let Some(fmt) = rewrite {
                for i in 0..pairs {
                    fwd[1 + 2 * i] = rewritten(&argv[1 + 2 * i], fmt);
                    forwarded.push(fwd[1 + 2 * i].clone());
                }
            }
            let borrowed: Vec<&[u8]> = fwd.iter().map(Vec::as_slice).collect();
            let mut key = 0;
            let parts = command::split::split(spec, &borrowed, |_| {
                key += 1;
                shards.get(key - 1).copied()
            });
            for part in &parts {
                let pieces = part_pieces(&req, spec, part, &forwarded).unwrap();
                let what = format!("round {round}, shards {shards:?}, rewrite {rewrite:?}");
                same(&sent(&frame, &pieces), &part.request, lenient, &what);
            }
        }
    }

    /// A keyed request sent whole from its frame, its keys rewritten by their route (or not),
    /// is the request the shared path encodes: `SET`, `GETSET`, `MSET` of 1 to 4 pairs and
    /// `LMOVE` (keys at the start, in the middle, and last), well-formed and lenient frames.
    #[test]
    fn a_whole_request_with_its_keys_rewritten_equals_the_encoded_one() {
        let mut rng = fastrand::Rng::with_seed(11);
        for round in 0..1000usize {
            let lenient = round % 3 == 0;
            let rewrite = (round % 4).checked_sub(1);
            let value = |rng: &mut fastrand::Rng| -> Vec<u8> {
                let len = [0, 1, 3, 300][rng.usize(0..4)];
                (0..len).map(|_| rng.alphanumeric() as u8).collect()
            };
            let (argv, keys): (Vec<Vec<u8>>, Vec<usize>) = match round % 4 {
                0 => (
                    vec![b"SET".to_vec(), b"k:a".to_vec(), value(&mut rng)],
                    vec![1],
                ),
                1 => (
                    vec![b"GETSET".to_vec(), b"kk".to_vec(), value(&mut rng)],
                    vec![1],
                ),
                2 => {
                    let pairs = rng.usize(1..=4);
                    let mut argv = vec![b"MSET".to_vec()];
                    for i in 0..pairs {
                        argv.push(format!("k{i}:x").into_bytes());
                        argv.push(value(&mut rng));
                    }
                    (argv, (0..pairs).map(|i| 1 + 2 * i).collect())
                }
                _ => (
                    [&b"LMOVE"[..], b"src:1", b"dst:2", b"LEFT", b"RIGHT"]
                        .map(<[u8]>::to_vec)
                        .to_vec(),
                    vec![1, 2],
                ),
            };
            let frame = framed(&argv, lenient, &mut rng);
            let mut parser = RequestParser::new(Limits::default());
            let (mut args, mut scratch) = (Vec::new(), Vec::new());
            let Ok(Parsed::Resp { consumed }) = parser.parse(&frame, &mut args, &mut scratch)
            else {
                panic!("round {round}: not parsed");
            };
            let req = Request::new(&frame, &args, frame.get(..consumed));
            let mut fwd = argv.clone();
            let mut forwarded = Vec::new();
            if let Some(fmt) = rewrite {
                for &i in &keys {
                    fwd[i] = rewritten(&argv[i], fmt);
                    forwarded.push((i, fwd[i].clone()));
                }
            }
            let mut want = Vec::new();
            encode::command(&mut want, fwd.iter().map(Vec::as_slice));
            let pieces = whole_pieces(&req, &forwarded).unwrap();
            if rewrite.is_none() {
                assert_eq!(pieces, vec![Piece::Frame(0..frame.len())], "round {round}");
            }
            let what = format!("round {round}, rewrite {rewrite:?}");
            same(&sent(&frame, &pieces), &want, lenient, &what);
        }
        // Keys out of order (no command's key spec gives them so) are refused.
        let mut frame = Vec::new();
        encode::command(
            &mut frame,
            [&b"LMOVE"[..], b"a", b"b", b"LEFT", b"LEFT"].into_iter(),
        );
        let mut parser = RequestParser::new(Limits::default());
        let (mut args, mut scratch) = (Vec::new(), Vec::new());
        let Ok(Parsed::Resp { consumed }) = parser.parse(&frame, &mut args, &mut scratch) else {
            panic!("not parsed");
        };
        let req = Request::new(&frame, &args, frame.get(..consumed));
        let backwards = [(2, b"y".to_vec()), (1, b"x".to_vec())];
        assert_eq!(whole_pieces(&req, &backwards), None);
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

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
//! - Only a request that [`crate::router::dispatch::Dispatch::whole`] places whole and
//!   unchanged goes this way, outside MULTI and WATCH: a keyed one, or a multi-key one (`MSET`)
//!   whose keys all land on one shard, where its single part would be the client's frame
//!   rebuilt. Anything else (keys on several shards, a route that rewrites keys) takes the
//!   shared path, copied as before.
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

use std::rc::Rc;

use super::Session;
use super::barrier::Barrier;
use super::blocking::MAX_REDIRECTS;
use crate::cluster::{ClusterPool, Dest};
use crate::command::{CommandSpec, Request};
use crate::engine::budget::Budget;
use crate::engine::sink::Sink;
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::router::dispatch::{Client, MirrorDest, TxDest};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, UPSTREAM_FAILURE};

/// Requests of at least this many bytes (the whole RESP frame) go on a connection of their own:
/// behind 1 MiB a shared connection's other requests wait about a millisecond, and a lease's
/// round trip is small beside writing it.
pub(super) const LARGE_REQUEST: usize = 1024 * 1024;

const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

const TOO_MANY_REDIRECTS: &[u8] = b"-TRYAGAIN too many cluster redirects for one request\r\n";

/// A large request placed by [`Session::large`], waiting for the read loop to hand its frame
/// over ([`Large::send`]).
pub(super) struct Large {
    dest: TxDest<ClusterPool>,
    addr: std::net::SocketAddr,
    /// Where its mirrors' copies go.
    mirrors: Vec<MirrorDest<ClusterPool>>,
    seq: u64,
    session: u64,
    resp3: bool,
    barrier: Rc<Barrier>,
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
        let Some((dest, mirrors)) = self.dispatch(rt).whole(req, spec) else {
            return false;
        };
        let Some(addr) = dest.pool.primary_addr(dest.shard) else {
            return false;
        };
        // It may take long: what came before it is written at once, and the session watches its
        // client meanwhile (the request still runs if the client leaves, as a request Redis
        // has read does).
        let barrier = Rc::new(Barrier::blocking());
        self.barrier = Some(barrier.clone());
        self.large = Some(Large {
            dest,
            addr,
            mirrors,
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
            let (reply, mut frame) = exchange(&self.dest.pool, self.addr, self.resp3, frame).await;
            sink.deliver(self.seq, 0, &reply);
            for m in &self.mirrors {
                frame = self.copy(m, frame).await;
            }
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
        let (reply, frame) = exchange(&m.pool, addr, self.resp3, frame).await;
        m.stats.deliver(0, 0, &reply);
        frame
    }
}

/// Runs `frame` at `addr` of `pool` on a leased connection, following cluster redirects;
/// returns the reply for the client (or the failure in its place) and the frame.
async fn exchange(
    pool: &ClusterPool,
    mut addr: std::net::SocketAddr,
    resp3: bool,
    mut frame: Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    let mut asking = false;
    for _ in 0..=MAX_REDIRECTS {
        let mut lease = match pool.leases.lease(addr, resp3).await {
            Ok(lease) => lease,
            Err(e) => return (e.reply().to_vec(), frame),
        };
        let prefix = if asking { ASKING } else { b"" };
        let (reply, back) = lease.exchange_large(prefix, frame).await;
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
    use super::take_frame;

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

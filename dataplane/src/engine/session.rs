//! One downstream (client) connection: read requests, answer or route them, write replies in
//! request order.

use std::future::Future;
use std::ops::Range;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use tracing::debug;

use super::local::{self, ConnState};
use super::refused_multi::{self, Step};
use super::sink::{NO_CMD, Sink};
use super::stats::CUSTOM_CMD;
use super::worker::{ListenerHandle, ListenerRuntime, WorkerShared};
use crate::cluster::{ClusterPool, Dest};
use crate::command::{self, CommandSpec, Kind, Local, ResolveError, split};
use crate::net::{self, BufResult, TcpStream};
use crate::resp::{Limits, Parsed, RequestParser, encode};
use crate::router::fault::{FAULT_ERROR_REPLY, Fault};
use crate::router::{Mirror, RouteRuntime};
use crate::stats::clock::BatchClock;
use crate::stats::probe::RequestPath;
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, Target};

/// Growth step of a session's read buffer; a new connection starts with `READ_INITIAL`, so an idle
/// connection holds little memory, and a buffer grown by a burst is given back once drained.
const READ_CHUNK: usize = 16 * 1024;
const READ_INITIAL: usize = 2048;
const READ_KEEP: usize = 256 * 1024;

/// The reply to a command whose keys are on different shards (Redis Cluster's text, which
/// cluster-aware clients already understand).
const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// What the connection is in, as far as the requests it may run are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Requests go over the worker's shared pipelined upstream connections.
    Shared,
    /// The client sent MULTI, which was refused: nothing runs until EXEC, DISCARD or RESET
    /// (see [`refused_multi`]).
    RefusedMulti,
}

/// Session state the request handler needs besides the request itself.
struct Session {
    id: u64,
    sink: Rc<Sink>,
    /// Connection-level state answered locally (auth, name, QUIT).
    conn: ConnState,
    /// Reused buffer for re-encoding inline requests.
    encoded: Vec<u8>,
    /// Reused buffer for a request's key positions.
    key_idx: Vec<usize>,
    /// Reused buffers for a request whose keys a route rewrites: its arguments and their ranges.
    rw_buf: Vec<u8>,
    rw_args: Vec<Range<usize>>,
    /// The client's address, learned when the listener has an access log.
    peer: Option<std::net::SocketAddr>,
    mode: Mode,
}

/// Keeps a session registered with its worker until both its reader and its writer are done
/// with the connection: a drain waits for that.
struct Open {
    worker: Rc<WorkerShared>,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.worker.session_closed(self.id);
    }
}

/// Serves one client connection until it closes.
pub async fn run(stream: TcpStream, handle: Rc<ListenerHandle>, worker: Rc<WorkerShared>) {
    let stream = Rc::new(stream);
    let first = handle.current();
    let stats = first.stats.clone();
    stats.cx_total.inc();
    stats.cx_active.inc();
    let sink = Rc::new(Sink::new(stats.clone(), worker.active.clone()));
    let id = worker.next_session_id();
    worker.session_opened(id, &sink);
    let open = Rc::new(Open {
        worker: worker.clone(),
        id,
    });
    net::spawn(write_loop(
        stream.clone(),
        sink.clone(),
        stats.clone(),
        open.clone(),
    ));
    let mut session = Session {
        id,
        sink: sink.clone(),
        conn: ConnState::new(
            worker.client_id(id),
            &first.config,
            stream.local_addr().ok(),
        ),
        encoded: Vec::new(),
        key_idx: Vec::new(),
        rw_buf: Vec::new(),
        rw_args: Vec::new(),
        peer: first
            .observer
            .as_ref()
            .filter(|o| o.wants_peer())
            .and_then(|_| stream.peer_addr().ok()),
        mode: Mode::Shared,
    };
    let mut parser = RequestParser::new(Limits {
        max_bulk_len: first.config.max_request_bytes,
        ..Limits::default()
    });
    drop(first);
    let mut args: Vec<Range<usize>> = Vec::with_capacity(8);
    let mut scratch: Vec<u8> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_INITIAL);
    let mut start = 0usize;
    // Unparsed bytes of this session counted in `downstream_cx_rx_bytes_buffered`.
    let mut rx_held = 0usize;

    'conn: loop {
        while !sink.has_capacity() && !sink.is_closed() && !worker.is_draining() {
            sink.pause_reader();
            sink.reader.notified().await;
        }
        if sink.is_closed() || worker.is_draining() {
            break;
        }
        if start == buf.len() {
            if buf.capacity() > READ_KEEP {
                buf = Vec::with_capacity(READ_INITIAL);
            }
            buf.clear();
            start = 0;
        } else if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if buf.capacity() - buf.len() < READ_INITIAL / 2 {
            buf.reserve(buf.len().max(READ_CHUNK));
        }
        // A drain stops the read: bytes the kernel still holds are never executed (the client
        // resends them elsewhere), and only a partial request can be left in `buf`.
        let Some(BufResult(res, b)) = read_unless_stopped(&stream, buf, &sink, &worker).await
        else {
            break;
        };
        buf = b;
        let n = match res {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                debug!(
                    listener = %handle.current().config.name,
                    peer = %peer_text(&stream),
                    session = id,
                    error = %e,
                    "downstream read failed"
                );
                break;
            }
        };
        stats.rx_bytes.add(n as u64);
        let rt = handle.current();
        let _request_path = RequestPath::enter();
        // One clock read per read batch: every request parsed from it starts its latency here.
        let _clock = BatchClock::enter(Instant::now());
        loop {
            match parser.parse(&buf[start..], &mut args, &mut scratch) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => start += consumed,
                Ok(Parsed::Resp { consumed }) => {
                    let frame = &buf[start..start + consumed];
                    session.handle(&rt, &buf[start..], &args, Some(frame));
                    start += consumed;
                }
                Ok(Parsed::Inline { consumed }) => {
                    session.handle(&rt, &scratch, &args, None);
                    start += consumed;
                }
                Err(e) => {
                    // Envoy counts a request its decoder rejects here only (`invalid_request`
                    // is the splitter's count of well-framed requests it cannot run).
                    stats.cx_protocol_error.inc();
                    debug!(
                        listener = %rt.config.name,
                        peer = %peer_text(&stream),
                        session = id,
                        error = %e,
                        "downstream protocol error; closing the connection"
                    );
                    let msg = format!("ERR Protocol error: {e}");
                    let mut reply = Vec::new();
                    encode::error(&mut reply, msg.as_bytes());
                    sink.push_local(NO_CMD, &reply);
                    break 'conn;
                }
            }
            if session.conn.quit {
                break 'conn;
            }
        }
        rx_held = move_gauge(&stats.rx_buffered, rx_held, buf.len() - start);
    }
    move_gauge(&stats.rx_buffered, rx_held, 0);
    if worker.is_draining() {
        stats.cx_drain_close.inc();
    }
    sink.reader_done();
}

/// Moves `gauge` from this session's contribution `held` to `now`; returns `now`.
fn move_gauge(gauge: &crate::stats::Gauge, held: usize, now: usize) -> usize {
    if now != held {
        gauge.add(now as i64 - held as i64);
    }
    now
}

/// Reads like [`net::read_append`], unless the worker starts draining or the client connection
/// is closed first (`None`: the read is abandoned and whatever it may have read is never
/// executed). Both wake the reader through `sink.reader`; other wake-ups of it are ignored, so a
/// read is only ever abandoned when the session ends.
async fn read_unless_stopped(
    stream: &TcpStream,
    buf: Vec<u8>,
    sink: &Sink,
    worker: &WorkerShared,
) -> Option<BufResult<usize, Vec<u8>>> {
    let mut read = pin!(net::read_append(stream, buf));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = read.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        loop {
            match pin!(sink.reader.notified()).poll(cx) {
                Poll::Ready(()) if worker.is_draining() || sink.is_closed() => {
                    return Poll::Ready(None);
                }
                // A stale wake-up (back-pressure lifted earlier): re-arm the wait.
                Poll::Ready(()) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// After the last reply of a drained connection: FIN, then read and discard until the client
/// closes or `deadline` passes. Closing with unread bytes makes Linux send RST at once, dropping
/// the replies still in this socket's send queue (a slow reader then sees a cut reply and
/// `connection reset`).
async fn linger(stream: &TcpStream, deadline: Instant) {
    net::shutdown_write(stream);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match net::timeout(left, net::read_append(stream, buf)).await {
            Some(BufResult(Ok(n), b)) if n > 0 => {
                buf = b;
                buf.clear();
            }
            _ => return,
        }
    }
}

impl Session {
    /// Handles one request. `base` holds the bytes `args` index; `frame` is the request's raw
    /// RESP encoding when it came as RESP (forwarded as is), `None` for inline requests.
    fn handle(
        &mut self,
        rt: &ListenerRuntime,
        base: &[u8],
        args: &[Range<usize>],
        frame: Option<&[u8]>,
    ) {
        if let Some(obs) = &rt.observer
            && let Some(p) = obs.request(base, args, self.peer)
        {
            self.sink.observe_next(p);
        }
        let arg = |i: usize| args.get(i).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        let argc = args.len();
        if self.mode == Mode::RefusedMulti && self.refused_multi(rt, argc, arg) {
            return;
        }
        let spec = match command::resolve(argc, arg) {
            Ok(spec) => spec,
            Err(ResolveError::Unknown(reply)) => {
                if rt.custom_command(arg(0)) && argc >= 2 {
                    if self.fault(rt, CUSTOM_CMD) {
                        rt.stats.custom_request();
                        return self.sink.push_local(CUSTOM_CMD, FAULT_ERROR_REPLY);
                    }
                    return self.custom(rt, args, base, frame);
                }
                // Unknown commands are answered before the auth gate, as Envoy does; like every
                // decoded request they count in downstream_rq_total (Envoy's PendingRequest).
                rt.stats.rq_total.inc();
                rt.stats.unsupported_command.inc();
                return self.sink.push_local(NO_CMD, &reply);
            }
            Err(ResolveError::Invalid(reply)) => {
                // Wrong number of arguments (Envoy: `splitter.invalid_request`); a known command
                // also counts as its own request and error, so total = success + error holds.
                rt.stats.invalid_request.inc();
                if let Some(spec) = command::lookup(arg(0)) {
                    rt.stats.request(spec.id);
                    return self.sink.push_local(spec.id, &reply);
                }
                rt.stats.rq_total.inc();
                return self.sink.push_local(NO_CMD, &reply);
            }
        };
        rt.stats.request(spec.id);
        let gate_exempt = matches!(
            spec.kind,
            Kind::Local(Local::Auth | Local::Quit | Local::Hello | Local::Reset)
        );
        if !self.conn.authed && !gate_exempt {
            return self
                .sink
                .push_local(spec.id, b"-NOAUTH Authentication required.\r\n");
        }
        // Faults hit only what goes upstream (docs/faults.md): never AUTH, PING or any other
        // command answered locally, nor requests rejected before this point.
        let upstream = matches!(
            spec.kind,
            Kind::Keyed | Kind::Split(_) | Kind::FanOut(_) | Kind::Scan
        );
        if upstream && self.fault(rt, spec.id) {
            return self.sink.push_local(spec.id, FAULT_ERROR_REPLY);
        }
        match spec.kind {
            Kind::Local(local) => {
                let mut reply = Vec::new();
                local::answer(&mut self.conn, rt, spec, local, argc, arg, &mut reply);
                self.sink.push_local(spec.id, &reply);
            }
            Kind::Keyed => self.keyed(rt, spec, args, base, frame),
            Kind::Split(merge) => self.split(rt, spec, merge, args, base),
            Kind::FanOut(merge) => self.fan_out(rt, spec, merge, args, base, frame),
            Kind::Scan => self.scan(rt, spec, args, base),
            Kind::Refused(reason) => {
                if spec.name == "multi" {
                    self.mode = Mode::RefusedMulti;
                }
                self.sink
                    .push_local(spec.id, &command::refused_reply(spec, reason));
            }
            // `resolve` never returns a container row.
            Kind::Container => self.sink.push_local(spec.id, &command::arity_error(spec)),
        }
    }

    /// Answers a request that arrives after a refused MULTI without running it (see
    /// [`refused_multi`]); false for the requests handled as usual in that state (RESET, which
    /// also ends it, and QUIT).
    fn refused_multi<'a>(
        &mut self,
        rt: &ListenerRuntime,
        argc: usize,
        arg: impl Fn(usize) -> &'a [u8] + Copy,
    ) -> bool {
        let custom = argc >= 2 && rt.custom_command(arg(0));
        match refused_multi::step(argc, arg, custom) {
            Step::Run { ends } => {
                if ends {
                    self.mode = Mode::Shared;
                }
                false
            }
            Step::Answer { cmd, reply, ends } => {
                if cmd == NO_CMD {
                    rt.stats.rq_total.inc();
                } else {
                    rt.stats.request(cmd);
                }
                if ends {
                    self.mode = Mode::Shared;
                }
                self.sink.push_local(cmd, &reply);
                true
            }
        }
    }

    /// Draws the listener's faults for a request of command `cmd` (Envoy `getFaultForCommand`,
    /// one draw per request) and applies what it can here: counts the fault and holds the reply
    /// of a delayed request. True for an ERROR fault: the caller answers [`FAULT_ERROR_REPLY`]
    /// instead of forwarding (held too when the fault has a delay).
    #[inline]
    fn fault(&self, rt: &ListenerRuntime, cmd: u16) -> bool {
        let Some(fault) = rt.faults.as_ref().and_then(|f| f.pick(cmd)) else {
            return false;
        };
        let error = matches!(fault, Fault::Error { .. });
        let delay = fault.delay();
        rt.stats.fault(cmd, error, delay.is_some());
        if let Some(d) = delay {
            self.sink.hold_next(d);
        }
        error
    }

    /// The request as RESP: the client's own bytes, or the inline request re-encoded.
    fn request_bytes<'b>(
        encoded: &'b mut Vec<u8>,
        frame: Option<&'b [u8]>,
        args: &[Range<usize>],
        base: &'b [u8],
    ) -> &'b [u8] {
        match frame {
            Some(f) => f,
            None => {
                encoded.clear();
                encode::command(
                    encoded,
                    args.iter().map(|r| base.get(r.clone()).unwrap_or(&[])),
                );
                encoded
            }
        }
    }

    /// Routes a command whole to the shard of its keys. Every key must take the same route and
    /// hash to the same shard of its cluster (else `-CROSSSLOT`, as Redis Cluster answers); a
    /// command with no key (EVAL with numkeys 0) takes the catch-all route's shard 0, so scripts
    /// that touch no key always run on the same backend.
    fn keyed(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
    ) {
        let arg = |i: usize| args.get(i).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        if command::is_blocking(spec, args.len(), arg) {
            let mut reply = Vec::new();
            encode::error(
                &mut reply,
                format!(
                    "ERR '{}' with BLOCK is not supported by respite: blocking commands would \
                     hold a shared upstream connection",
                    spec.name
                )
                .as_bytes(),
            );
            return self.sink.push_local(spec.id, &reply);
        }
        self.key_idx.clear();
        if let Err(reply) = command::keys(spec, args.len(), arg, &mut self.key_idx) {
            return self.sink.push_local(spec.id, &reply);
        }
        let first_key = self.key_idx.first().map(|&i| arg(i));
        let Some((id, route)) = rt.router.route(first_key.unwrap_or(&[])) else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        if rt.router.has_prefixes()
            && self
                .key_idx
                .iter()
                .skip(1)
                .any(|&i| rt.router.route_id(arg(i)) != Some(id))
        {
            return self.sink.push_local(spec.id, CROSSSLOT);
        }
        if !route.rewrites() {
            return self.keyed_to(
                rt,
                spec.id,
                command::is_read(spec),
                route,
                args,
                base,
                frame,
                first_key,
            );
        }
        let key_idx = std::mem::take(&mut self.key_idx);
        let (rbuf, rargs) = self.rewrite(route, args, base, &key_idx);
        self.key_idx = key_idx;
        self.keyed_to(
            rt,
            spec.id,
            command::is_read(spec),
            route,
            &rargs,
            &rbuf,
            None,
            first_key,
        );
        self.give_back(rbuf, rargs);
    }

    /// Sends a keyed command (keys at `self.key_idx`, already in their forwarded form) to its
    /// shard of `route`'s pool, then its copies to the route's mirrors. `client_key`: the first
    /// key as the client sent it, which decides the mirrors' `runtime_fraction`.
    #[allow(clippy::too_many_arguments)]
    fn keyed_to(
        &mut self,
        rt: &ListenerRuntime,
        cmd: u16,
        read: bool,
        route: &RouteRuntime,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
        client_key: Option<&[u8]>,
    ) {
        let pool = route.pool_for(read);
        let Some(shard) = self.shard_of_keys(rt, pool, args, base) else {
            return self.sink.push_local(cmd, CROSSSLOT);
        };
        self.send_one(cmd, read, pool, shard, args, base, frame);
        if route.mirrors.is_empty() {
            return;
        }
        for m in &route.mirrors {
            if !m.admits(read, client_key) {
                continue;
            }
            let Some(shard) = self.shard_of_keys(rt, &m.pool, args, base) else {
                // The keys share a shard of the primary but not of the mirror: the copy cannot
                // go whole, and splitting it would change what it does.
                m.stats.unsendable();
                continue;
            };
            let request = Self::request_bytes(&mut self.encoded, frame, args, base);
            m.stats.send(
                &m.pool,
                Dest::Key(shard),
                self.id,
                self.conn.resp3,
                read,
                request,
                cmd,
            );
        }
    }

    /// The shard of `pool` that every key at `self.key_idx` hashes to (0 with no key), or
    /// `None` when they hash to different shards.
    fn shard_of_keys(
        &self,
        rt: &ListenerRuntime,
        pool: &ClusterPool,
        args: &[Range<usize>],
        base: &[u8],
    ) -> Option<usize> {
        let arg = |i: usize| args.get(i).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        let Some(&first) = self.key_idx.first() else {
            return Some(0);
        };
        let shard = no_host_shard(pool, rt.hash_key(arg(first)));
        let cross = self
            .key_idx
            .iter()
            .skip(1)
            .any(|&i| no_host_shard(pool, rt.hash_key(arg(i))) != shard);
        (!cross).then_some(shard)
    }

    /// The request with the arguments at `keys` rewritten by `route` (`remove_prefix`,
    /// `key_formatter`), as new argument bytes and ranges (reused buffers: hand them back with
    /// [`Session::give_back`]).
    fn rewrite(
        &mut self,
        route: &RouteRuntime,
        args: &[Range<usize>],
        base: &[u8],
        keys: &[usize],
    ) -> (Vec<u8>, Vec<Range<usize>>) {
        let mut buf = std::mem::take(&mut self.rw_buf);
        let mut ranges = std::mem::take(&mut self.rw_args);
        buf.clear();
        ranges.clear();
        for (i, r) in args.iter().enumerate() {
            let a = base.get(r.clone()).unwrap_or(&[]);
            let at = buf.len();
            if keys.contains(&i) {
                route.rewrite(a, &mut buf);
            } else {
                buf.extend_from_slice(a);
            }
            ranges.push(at..buf.len());
        }
        (buf, ranges)
    }

    /// Returns the buffers [`Session::rewrite`] lent.
    fn give_back(&mut self, buf: Vec<u8>, ranges: Vec<Range<usize>>) {
        self.rw_buf = buf;
        self.rw_args = ranges;
    }

    /// A listener `custom_commands` entry: a single-key command routed by argv[1].
    fn custom(
        &mut self,
        rt: &ListenerRuntime,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
    ) {
        let key = args.get(1).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        rt.stats.custom_request();
        let Some((_, route)) = rt.router.route(key) else {
            return self.sink.push_local(CUSTOM_CMD, NO_UPSTREAM_HOST);
        };
        self.key_idx.clear();
        self.key_idx.push(1);
        if !route.rewrites() {
            return self.keyed_to(rt, CUSTOM_CMD, false, route, args, base, frame, Some(key));
        }
        let (rbuf, rargs) = self.rewrite(route, args, base, &[1]);
        self.keyed_to(rt, CUSTOM_CMD, false, route, &rargs, &rbuf, None, Some(key));
        self.give_back(rbuf, rargs);
    }

    /// Sends the whole request to one shard; `cmd` is its table id for stats (`CUSTOM_CMD` for
    /// custom commands); `read`: it only reads (see [`command::is_read`]).
    #[allow(clippy::too_many_arguments)]
    fn send_one(
        &mut self,
        cmd: u16,
        read: bool,
        pool: &ClusterPool,
        shard: usize,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
    ) {
        let seq = self.sink.push(cmd);
        let target = Target {
            sink: self.sink.clone(),
            seq,
            part: 0,
            cmd,
        };
        let request = Self::request_bytes(&mut self.encoded, frame, args, base);
        let sent = pool.send(
            Dest::Key(shard),
            self.id,
            self.conn.resp3,
            read,
            request,
            target,
        );
        if let Err(e) = sent {
            self.sink.deliver(seq, 0, e.reply());
        }
    }

    /// Sends `parts` (one sub-request each, part `i` to `pools(i)`) and merges their replies into
    /// one slot. `by_node`: each part's `shard` is a fan-out node index rather than a key's shard.
    #[allow(clippy::too_many_arguments)]
    fn send_parts<'p>(
        &mut self,
        spec: &CommandSpec,
        pools: impl Fn(usize) -> Option<&'p ClusterPool>,
        merge: command::Merge,
        nkeys: usize,
        mut parts: Vec<split::Part>,
        by_node: bool,
    ) {
        // Fan-out commands (SCRIPT LOAD, DBSIZE, SCAN, WAIT, …) address every primary.
        let read = !by_node && command::is_read(spec);
        let seq = self.sink.push(spec.id);
        let mut failed = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let target = Target {
                sink: self.sink.clone(),
                seq,
                part: i as u32,
                cmd: spec.id,
            };
            let dest = if by_node {
                Dest::Node(part.shard)
            } else {
                Dest::Key(part.shard)
            };
            let sent = match pools(i) {
                Some(pool) => {
                    pool.send(dest, self.id, self.conn.resp3, read, &part.request, target)
                }
                None => Err(crate::upstream::SendError::NoHost),
            };
            if let Err(e) = sent {
                failed.push((i as u32, e));
            }
            // The request bytes are in the upstream buffer now; only the key map is kept.
            part.request = Vec::new();
        }
        self.sink.make_split(seq, merge, nkeys, parts);
        for (i, e) in failed {
            self.sink.deliver(seq, i, e.reply());
        }
    }

    /// Splits a multi-key command per route, cluster and host, and merges the replies in the
    /// client's key order (MGET, MSET, DEL, …).
    fn split(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        merge: command::Merge,
        args: &[Range<usize>],
        base: &[u8],
    ) {
        let argv: Vec<&[u8]> = args
            .iter()
            .map(|r| base.get(r.clone()).unwrap_or(&[]))
            .collect();
        let read = command::is_read(spec);
        if !rt.router.has_prefixes() && !rt.router.rewrites() {
            // One route for every key, keys forwarded as sent: as before prefix routes existed.
            let Some(route) = rt.router.keyless() else {
                return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
            };
            let pool = route.pool_for(read);
            let parts = split::split(spec, &argv, &mut |key| {
                no_host_shard(pool, rt.hash_key(key))
            });
            let nkeys = parts.iter().map(|p| p.keys.len()).sum();
            self.send_parts(spec, |_| Some(&**pool), merge, nkeys, parts, false);
            if rt.router.mirrors() {
                let keys = split_keys(spec, argv.len());
                let ids = vec![crate::router::CATCH_ALL; keys.len()];
                self.mirror_split(rt, spec, read, &argv, &argv, &keys, &ids);
            }
            return;
        }
        let keys = split_keys(spec, argv.len());
        let mut ids = Vec::with_capacity(keys.len());
        for &i in &keys {
            match rt.router.route_id(argv.get(i).copied().unwrap_or(&[])) {
                Some(id) => ids.push(id),
                None => return self.sink.push_local(spec.id, NO_UPSTREAM_HOST),
            }
        }
        // The forwarded arguments: each key rewritten by its own route.
        let mut buf = std::mem::take(&mut self.rw_buf);
        let mut ranges = std::mem::take(&mut self.rw_args);
        buf.clear();
        ranges.clear();
        let mut next = keys.iter().zip(&ids).peekable();
        for (i, a) in argv.iter().enumerate() {
            let at = buf.len();
            match next.next_if(|(k, _)| **k == i) {
                Some((_, &id)) => match rt.router.by_id(id) {
                    Some(route) => route.rewrite(a, &mut buf),
                    None => buf.extend_from_slice(a),
                },
                None => buf.extend_from_slice(a),
            }
            ranges.push(at..buf.len());
        }
        let fwd: Vec<&[u8]> = ranges
            .iter()
            .map(|r| buf.get(r.clone()).unwrap_or(&[]))
            .collect();
        // Group keys by (pool, shard); `split` numbers parts by group.
        let mut groups: Vec<(&Rc<ClusterPool>, usize)> = Vec::new();
        let mut group_of = Vec::with_capacity(keys.len());
        for (&i, &id) in keys.iter().zip(&ids) {
            let Some(route) = rt.router.by_id(id) else {
                return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
            };
            let pool = route.pool_for(read);
            let shard = no_host_shard(pool, rt.hash_key(fwd.get(i).copied().unwrap_or(&[])));
            let g = match groups
                .iter()
                .position(|(p, s)| Rc::ptr_eq(p, pool) && *s == shard)
            {
                Some(g) => g,
                None => {
                    groups.push((pool, shard));
                    groups.len() - 1
                }
            };
            group_of.push(g);
        }
        let mut n = 0;
        let mut parts = split::split(spec, &fwd, &mut |_| {
            let g = group_of.get(n).copied().unwrap_or(usize::MAX);
            n += 1;
            g
        });
        let mut part_pools = Vec::with_capacity(parts.len());
        for part in &mut parts {
            let (pool, shard) = groups.get(part.shard).copied().unzip();
            part_pools.push(pool);
            part.shard = shard.unwrap_or(usize::MAX);
        }
        let nkeys = parts.iter().map(|p| p.keys.len()).sum();
        self.send_parts(
            spec,
            |i| part_pools.get(i).copied().flatten().map(|p| &**p),
            merge,
            nkeys,
            parts,
            false,
        );
        if rt.router.mirrors() {
            self.mirror_split(rt, spec, read, &argv, &fwd, &keys, &ids);
        }
        drop(fwd);
        self.give_back(buf, ranges);
    }

    /// Copies a split command to the mirrors of its keys' routes: per mirror cluster, the keys
    /// it admits, split by that cluster's own shards. `client` holds the arguments as sent (for
    /// `runtime_fraction`), `fwd` as forwarded; `keys[k]` is key k's argument index and `ids[k]`
    /// its route.
    #[allow(clippy::too_many_arguments)]
    fn mirror_split(
        &self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        read: bool,
        client: &[&[u8]],
        fwd: &[&[u8]],
        keys: &[usize],
        ids: &[usize],
    ) {
        // Distinct mirror clusters of the routes used (few: a handful of mirrors at most).
        let mut seen: Vec<&Mirror> = Vec::new();
        for &id in ids {
            for m in rt.router.by_id(id).into_iter().flat_map(|r| &r.mirrors) {
                if !m.excludes(read) && !seen.iter().any(|s| Rc::ptr_eq(&s.stats, &m.stats)) {
                    seen.push(m);
                }
            }
        }
        for target in seen {
            let mut k = 0;
            let parts = split::split(spec, fwd, &mut |key| {
                let id = ids.get(k).copied().unwrap_or(usize::MAX);
                let at = keys.get(k).copied().unwrap_or(0);
                k += 1;
                let policy = rt.router.by_id(id).and_then(|r| {
                    r.mirrors
                        .iter()
                        .find(|m| Rc::ptr_eq(&m.stats, &target.stats))
                });
                match policy {
                    Some(m) if m.admits(read, client.get(at).copied()) => {
                        no_host_shard(&target.pool, rt.hash_key(key))
                    }
                    _ => usize::MAX,
                }
            });
            for part in parts.iter().filter(|p| p.shard != usize::MAX) {
                target.stats.send(
                    &target.pool,
                    Dest::Key(part.shard),
                    self.id,
                    self.conn.resp3,
                    read,
                    &part.request,
                    spec.id,
                );
            }
        }
    }

    /// Sends the request unchanged to every shard and merges the replies (FLUSHALL, DBSIZE, …).
    fn fan_out(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        merge: command::Merge,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
    ) {
        let Some(route) = rt.router.keyless() else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let pool = &route.pool;
        if pool.fanout_len() == 0 {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        }
        let request = Self::request_bytes(&mut self.encoded, frame, args, base).to_vec();
        let parts = (0..pool.fanout_len())
            .map(|shard| split::Part {
                shard,
                request: request.clone(),
                keys: Vec::new(),
            })
            .collect();
        self.send_parts(spec, |_| Some(&**pool), merge, 0, parts, true);
        // SCRIPT LOAD counts as a read, but a mirror without the script would fail every EVALSHA.
        let read = command::is_read(spec) && spec.name != "script";
        for m in &route.mirrors {
            if !m.admits(read, None) {
                continue;
            }
            for node in 0..m.pool.fanout_len() {
                m.stats.send(
                    &m.pool,
                    Dest::Node(node),
                    self.id,
                    self.conn.resp3,
                    false,
                    &request,
                    spec.id,
                );
            }
        }
    }

    /// SCAN: the client's cursor names a shard and that shard's cursor; the reply's cursor is
    /// rewritten so that a full iteration walks every shard in turn.
    fn scan(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        args: &[Range<usize>],
        base: &[u8],
    ) {
        let Some(route) = rt.router.keyless() else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let pool = &route.pool;
        let cursor = args.get(1).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        let shards = pool.fanout_len();
        if shards == 0 {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        }
        let Some((shard, shard_cursor)) = command::scan::decode(cursor, shards) else {
            return self.sink.push_local(spec.id, b"-ERR invalid cursor\r\n");
        };
        let mut request = Vec::new();
        let c = shard_cursor.to_string();
        let rest = args
            .iter()
            .skip(2)
            .map(|r| base.get(r.clone()).unwrap_or(&[]));
        encode::command(
            &mut request,
            [&b"SCAN"[..], c.as_bytes()]
                .into_iter()
                .chain(rest)
                .collect::<Vec<_>>()
                .into_iter(),
        );
        let merge = command::Merge::ScanCursor {
            shard: shard as u32,
            shards: shards as u32,
        };
        let part = split::Part {
            shard,
            request,
            keys: Vec::new(),
        };
        self.send_parts(spec, |_| Some(&**pool), merge, 0, vec![part], true);
    }
}

/// `pool`'s shard of `key`, or a shard no host has when no host can take the key: its send
/// then fails with `no upstream host`.
fn no_host_shard(pool: &ClusterPool, key: &[u8]) -> usize {
    pool.shard_of(key).unwrap_or(usize::MAX)
}

/// Writes completed replies to the client; closes the connection when the reader is done and
/// every reply is written, or when a write fails.
async fn write_loop(
    stream: Rc<TcpStream>,
    sink: Rc<Sink>,
    stats: Rc<super::stats::ListenerStats>,
    open: Rc<Open>,
) {
    let mut spare: Vec<u8> = Vec::new();
    let mut failed = false;
    loop {
        match sink.take_output(spare) {
            Ok((buf, n)) => {
                let len = buf.len();
                let BufResult(res, mut buf) = net::write_all(&stream, buf).await;
                if let Err(e) = res {
                    debug!(peer = %peer_text(&stream), error = %e, "downstream write failed");
                    sink.written(n, len);
                    sink.close();
                    failed = true;
                    break;
                }
                stats.tx_bytes.add(len as u64);
                sink.written(n, len);
                buf.clear();
                if buf.capacity() > READ_KEEP {
                    buf = Vec::new();
                }
                spare = buf;
            }
            Err(s) => {
                spare = s;
                if sink.finished() || sink.is_closed() {
                    break;
                }
                sink.wait_output().await;
            }
        }
    }
    sink.close();
    match open.worker.drain_deadline() {
        Some(deadline) if !failed => linger(&stream, deadline).await,
        _ => net::shutdown(&stream),
    }
    stats.cx_active.dec();
}

// Keep Rc<Sink> coercible to Rc<dyn Deliver>.
const _: fn(Rc<Sink>) -> Rc<dyn crate::upstream::Deliver> = |s| s;

/// The client's address for a log line ("?" once the socket has lost it): error paths only.
fn peer_text(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string())
}

/// Argument indexes of the keys `split::split` takes from a request of `argc` arguments (a key
/// whose values are incomplete is left out, as there).
fn split_keys(spec: &CommandSpec, argc: usize) -> Vec<usize> {
    let step = spec.step.max(1) as usize;
    command::key_indices(spec, argc)
        .take_while(|&i| i + step <= argc)
        .collect()
}

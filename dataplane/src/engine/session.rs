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
use super::sink::{NO_CMD, Sink};
use super::stats::{BatchClock, CUSTOM_CMD};
use super::worker::{ListenerHandle, ListenerRuntime, WorkerShared};
use crate::command::{self, CommandSpec, Kind, Local, ResolveError, split};
use crate::net::{self, BufResult, TcpStream};
use crate::resp::{Limits, Parsed, RequestParser, encode};
use crate::router::fault::{FAULT_ERROR_REPLY, Fault};
use crate::upstream::{ClusterPool, Deliver, Dest, NO_UPSTREAM_HOST, Target};

/// Growth step of a session's read buffer; a new connection starts with `READ_INITIAL`, so an idle
/// connection holds little memory, and a buffer grown by a burst is given back once drained.
const READ_CHUNK: usize = 16 * 1024;
const READ_INITIAL: usize = 2048;
const READ_KEEP: usize = 256 * 1024;

/// The reply to a command whose keys are on different shards (Redis Cluster's text, which
/// cluster-aware clients already understand).
const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

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
    /// The client's address, learned when the listener has an access log.
    peer: Option<std::net::SocketAddr>,
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
        peer: first
            .observer
            .as_ref()
            .filter(|o| o.wants_peer())
            .and_then(|_| stream.peer_addr().ok()),
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
        let _request_path = super::probe::RequestPath::enter();
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
                let mut reply = Vec::new();
                encode::error(&mut reply, reason.as_bytes());
                self.sink.push_local(spec.id, &reply);
            }
            // `resolve` never returns a container row.
            Kind::Container => self.sink.push_local(spec.id, &command::arity_error(spec)),
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

    /// Routes a command whole to the shard of its keys. Every key must hash to the same shard
    /// (else `-CROSSSLOT`, as Redis Cluster answers); a command with no key (EVAL with numkeys 0)
    /// goes to shard 0, so scripts that touch no key always run on the same backend.
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
        let first_key = self.key_idx.first().map(|&i| arg(i)).unwrap_or(&[]);
        let Some(pool) = rt.router.route(first_key) else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let shard = match self.key_idx.first() {
            Some(_) => pool.shard_of(rt.hash_key(first_key)),
            None => 0,
        };
        let cross = self
            .key_idx
            .iter()
            .skip(1)
            .any(|&i| pool.shard_of(rt.hash_key(arg(i))) != shard);
        if cross {
            return self.sink.push_local(spec.id, CROSSSLOT);
        }
        self.send_one(
            spec.id,
            command::is_read(spec),
            pool,
            shard,
            args,
            base,
            frame,
        );
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
        let Some(pool) = rt.router.route(key) else {
            return self.sink.push_local(CUSTOM_CMD, NO_UPSTREAM_HOST);
        };
        let shard = pool.shard_of(rt.hash_key(key));
        self.send_one(CUSTOM_CMD, false, pool, shard, args, base, frame);
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

    /// Sends `parts` (one sub-request each) and merges their replies into one slot. `by_node`:
    /// each part's `shard` is a fan-out node index rather than a key's shard.
    fn send_parts(
        &mut self,
        spec: &CommandSpec,
        pool: &ClusterPool,
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
            if let Err(e) = pool.send(dest, self.id, self.conn.resp3, read, &part.request, target) {
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

    /// Splits a multi-key command per host and merges the replies (MGET, MSET, DEL, …).
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
        let Some(pool) = rt.router.route(argv.get(1).copied().unwrap_or(&[])) else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
        let parts = split::split(spec, &argv, &mut |key| pool.shard_of(rt.hash_key(key)));
        let nkeys = parts.iter().map(|p| p.keys.len()).sum();
        let pool = pool.clone();
        self.send_parts(spec, &pool, merge, nkeys, parts, false);
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
        let Some(pool) = rt.router.route(&[]).cloned() else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
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
        self.send_parts(spec, &pool, merge, 0, parts, true);
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
        let Some(pool) = rt.router.route(&[]).cloned() else {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        };
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
        self.send_parts(spec, &pool, merge, 0, vec![part], true);
    }
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

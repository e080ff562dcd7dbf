//! One downstream (client) connection: read requests, answer or route them, write replies in
//! request order.

use std::future::Future;
use std::ops::Range;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use tracing::debug;

mod barrier;
mod blocking;
mod external_auth;
mod large;
mod mode;
mod multi;
mod protocol;
mod script_control;
mod subscribe;
mod transaction;
mod unblock;

use barrier::Barrier;
use mode::Mode;
use subscribe::Subscriptions;
use transaction::Watch;

use super::blocked::BlockedClients;
use super::budget;
use super::pubsub::Hub;
use super::sink::{NO_CMD, Sink};
use super::stats::CUSTOM_CMD;
use super::worker::{ListenerHandle, ListenerRuntime, WorkerShared};
use crate::command::Request;
use crate::command::{self, Kind, Local, PubSub, ResolveError};
use crate::net::{self, BufResult, Stream};
use crate::resp::{Limits, Parsed, RequestParser, encode};
use crate::router::dispatch::{self, Client, Dispatch, Scratch, Upstream};
use crate::router::fault::Fault;
use crate::router::local::{self, ConnState};
use crate::stats::clock::BatchClock;
use crate::stats::probe::RequestPath;
use crate::upstream::Piece;

/// Growth step of a session's read buffer; a new connection starts with `READ_INITIAL`, so an idle
/// connection holds little memory, and a buffer grown by a burst is given back once drained.
const READ_CHUNK: usize = 16 * 1024;
const READ_INITIAL: usize = 2048;
const READ_KEEP: usize = 256 * 1024;
/// Room reserved past an announced large value for the arguments after it (`MSET`'s next keys
/// and values): growing a buffer of hundreds of MiB for them would copy it into fresh pages,
/// which stalled every client of the worker for 0.6 s behind a 256 MiB `MSET`.
const LARGE_TAIL: usize = 64 * 1024;

/// A buffer of at least this many bytes, outgrown by a large value, grows by a copy in
/// [`COPY_STEP`] steps, the worker's other clients served between them.
const COPY_IN_STEPS: usize = 8 * 1024 * 1024;
const COPY_STEP: usize = 4 * 1024 * 1024;

/// `buf` with room for at least `room` more bytes. A request announcing a large value behind
/// another (an `MSET` of two 256 MiB values) outgrows the buffer sized for the first: moving
/// hundreds of MiB in one copy stalled every other client of the worker for about 100 ms, so a
/// buffer that large is copied a few MiB at a time, yielding between steps (only this session
/// waits for it). The old buffer's memory is counted for the worker's trim.
///
/// Small arguments after a large value (an `MSET` of a 200 MiB value and 24 MiB of small
/// pairs) grow it [`LARGE_TAIL`] at a time: left to the allocator, which extends a large block
/// in place as a rule, where a copy each time took seven times as long.
async fn grow(mut buf: Vec<u8>, room: usize, budget: &budget::Budget) -> Vec<u8> {
    if buf.len() < COPY_IN_STEPS || room < large::LARGE_REQUEST {
        buf.reserve_exact(room);
        return buf;
    }
    let mut fresh = Vec::with_capacity(buf.len().saturating_add(room));
    for step in buf.chunks(COPY_STEP) {
        fresh.extend_from_slice(step);
        net::yield_to_others().await;
    }
    budget.released(buf.capacity());
    fresh
}

/// Session state the request handler needs besides the request itself.
struct Session {
    id: u64,
    sink: Rc<Sink>,
    /// Connection-level state answered locally (auth, name, QUIT).
    conn: ConnState,
    /// Buffers dispatch reuses from request to request.
    scratch: Scratch,
    /// The client's address, learned when the listener has an access log.
    peer: Option<std::net::SocketAddr>,
    /// The one place that says what the connection's requests may do.
    mode: Mode,
    /// The connection's WATCH: the leased upstream connection holding it.
    watching: Option<Watch>,
    /// Set by a request whose reply must come before the next request is handled (EXEC,
    /// WATCH, a blocking command); the read loop waits on it.
    barrier: Option<Rc<Barrier>>,
    /// The process's blocked clients, where a blocking request registers.
    blocked_clients: std::sync::Arc<BlockedClients>,
    /// The client's channels, patterns and shard channels (`None`: it never subscribed).
    subs: Option<Box<Subscriptions>>,
    /// The worker's pub/sub, which holds them upstream.
    hub: Rc<Hub>,
    /// A large request just placed, whose frame the read loop hands over.
    large: Option<large::Large>,
    /// A large command just queued inside MULTI, whose frame the read loop hands over
    /// ([`Session::queue_frame`]): the pieces it is sent as (ranges of the frame, and its keys
    /// as their route rewrites them).
    /// The random number an `lb_policy = "random"` cluster places this session's current
    /// command by: drawn anew per command in shared mode, kept through a transaction (and any
    /// other mode that holds a connection), so one command or transaction stays on one host.
    draw: Rc<crate::cluster::random::Draw>,
    multi_frame: Option<Vec<Piece>>,
    /// An AUTH sent to the listener's external auth service, answered once its barrier opens.
    external_pending: Option<Rc<external_auth::Pending>>,
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

/// Serves one client connection, from `peer` (as accept gave it), until it closes.
pub async fn run(
    stream: Stream,
    peer: Option<std::net::SocketAddr>,
    handle: Rc<ListenerHandle>,
    worker: Rc<WorkerShared>,
) {
    let stream = Rc::new(stream);
    let first = handle.current();
    let stats = first.stats.clone();
    stats.cx_total.inc();
    stats.cx_active.inc();
    let sink = Rc::new(Sink::new(
        stats.clone(),
        worker.active.clone(),
        worker.budget.clone(),
    ));
    sink.attach(&stream, first.config.client_output_buffer_limit);
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
            peer.map(|p| p.ip()),
        ),
        scratch: Scratch::default(),
        peer: first.observer.as_ref().filter(|o| o.wants_peer()).and(peer),
        mode: Mode::Shared,
        watching: None,
        barrier: None,
        blocked_clients: worker.blocked_clients.clone(),
        subs: None,
        hub: worker.pubsub.clone(),
        large: None,
        multi_frame: None,
        draw: Rc::default(),
        external_pending: None,
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
    // Set after a barrier: parse what is already buffered before reading more.
    let mut resume = false;
    // This session's incomplete request counted in the worker's budget (bytes).
    let mut rx_share = 0usize;

    'conn: loop {
        while !sink.has_capacity() && !sink.is_closed() && !worker.is_draining() {
            sink.pause_reader();
            sink.reader.notified().await;
        }
        if sink.is_closed() || (worker.is_draining() && !resume) {
            break;
        }
        if start == buf.len() {
            if buf.capacity() > READ_KEEP {
                // A large request went through: its buffer's memory goes back to the kernel
                // once the worker's trim task sees enough of it released.
                worker.budget.released(buf.capacity());
                buf = Vec::with_capacity(READ_INITIAL);
            }
            buf.clear();
            start = 0;
        } else if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if !std::mem::take(&mut resume) {
            // A large request on its way in is read on only with the worker budget's leave
            // (`start` is 0 here: what is buffered is one incomplete request), and counts for
            // the whole value its header announced: its buffer is sized for it at once, rather
            // than doubled step by step (each step a copy, old and new both resident).
            let share = if buf.len() > budget::RECEIVE_FREE {
                parser.needs().unwrap_or(0).max(buf.len())
            } else {
                0
            };
            rx_share = worker.budget.receiving(id, rx_share, share);
            if share > 0 {
                if !worker.budget.may_receive(id, &sink) {
                    sink.reader.notified().await;
                    continue;
                }
                let room = share - buf.len() + LARGE_TAIL;
                if buf.capacity() - buf.len() < room {
                    buf = grow(buf, room, &worker.budget).await;
                }
            }
            // Sized for an announced value: its last bytes are read into what is left.
            let want_free = if share > buf.len() {
                1
            } else {
                READ_INITIAL / 2
            };
            if buf.capacity() - buf.len() < want_free {
                buf.reserve(buf.len().max(READ_CHUNK));
            }
            // A drain stops the read: bytes the kernel still holds are never executed (the
            // client resends them elsewhere), and only a partial request can be left in `buf`.
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
        }
        let rt = handle.current();
        let request_path = RequestPath::enter();
        // One clock read per read batch: every request parsed from it starts its latency here.
        let clock = BatchClock::enter(Instant::now());
        let mut wait = None;
        loop {
            // `start` never passes the end: it moves by what the parser consumed of `rest`.
            let rest = buf.get(start..).unwrap_or_default();
            match parser.parse(rest, &mut args, &mut scratch) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => start += consumed,
                Ok(Parsed::Resp { consumed }) => {
                    // The frame is the `consumed` bytes the parser took (always there).
                    session.handle(&rt, Request::new(rest, &args, rest.get(..consumed)));
                    match session.large.take() {
                        Some(large) => {
                            let frame = large::take_frame(&mut buf, &mut start, consumed);
                            large.send(frame, sink.clone(), worker.budget.clone());
                        }
                        None if session.multi_frame.is_some() => {
                            let frame = large::take_frame(&mut buf, &mut start, consumed);
                            session.queue_frame(frame);
                        }
                        None => start += consumed,
                    }
                }
                Ok(Parsed::Inline { consumed }) => {
                    session.handle(&rt, Request::new(&scratch, &args, None));
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
            if let Some(b) = session.barrier.take() {
                wait = Some(b);
                break;
            }
            if !sink.has_capacity() {
                // The rest of the batch waits for room (replies written, the worker's budget):
                // one read of pipelined requests must not ask for more than the limits allow.
                resume = true;
                break;
            }
        }
        if wait.is_none() && !session.mode.is_shared() {
            // Inside MULTI: what this read queued goes to the backend now, which answers it.
            session.send_queued();
            wait = session.barrier.take();
        }
        rx_held = move_gauge(&stats.rx_buffered, rx_held, buf.len() - start);
        if let Some(barrier) = wait {
            // Other tasks run while this one waits: the batch's clock and probe scope end here.
            drop(clock);
            drop(request_path);
            // A short exchange's reply comes within one round trip: the replies before it go
            // out with it, in one write (a transaction's `+QUEUED`s with EXEC's array). A
            // blocking one may take long, so what came before it is written at once.
            let cork = !barrier.is_blocking();
            if cork {
                sink.cork();
            }
            let gone = barrier.is_blocking()
                && !watch_client(&stream, &barrier, &mut buf, &sink, &worker, &stats).await;
            // An exchange that took the WATCH's connection gives it back here; one that did not
            // (SCRIPT KILL, a blocking command elsewhere) leaves the WATCH as it is.
            if let Some(watch) = barrier.wait().await {
                session.watching = Some(watch);
            }
            session.finish_external_auth(&handle.current());
            if cork {
                sink.uncork();
            }
            if gone {
                break;
            }
            // Draining too: what was read behind the request is still answered.
            resume = true;
        }
    }
    // A transaction's commands still unsent will not go out: their slots are answered.
    session.answer_unsent();
    session.unsubscribe_all(&handle.current());
    move_gauge(&stats.rx_buffered, rx_held, 0);
    worker.budget.receiving(id, rx_share, 0);
    if worker.is_draining() {
        stats.cx_drain_close.inc();
    }
    sink.reader_done();
}

/// While a blocking request of this session waits at the backend: reads what the client sends
/// meanwhile into `buf` (up to [`READ_KEEP`]; past that the client is no longer watched), and
/// stops the request when the client closes the connection (false: the session ends, its
/// output dropped, as Redis drops a client that closed) or the worker drains (its reply is
/// then `-UNBLOCKED`, and what was read behind it is still answered).
async fn watch_client(
    stream: &Stream,
    barrier: &Barrier,
    buf: &mut Vec<u8>,
    sink: &Sink,
    worker: &WorkerShared,
    stats: &super::stats::ListenerStats,
) -> bool {
    enum Event {
        Answered,
        Readable(bool),
        Woken,
    }
    if worker.is_draining() {
        barrier.stop();
        return true;
    }
    while buf.len() < READ_KEEP {
        let event = {
            let mut answered = pin!(barrier.opened());
            let mut readable = pin!(net::readable_or_closed(stream));
            let mut woken = pin!(sink.reader.notified());
            std::future::poll_fn(|cx| {
                if answered.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::Answered);
                }
                if let Poll::Ready(r) = readable.as_mut().poll(cx) {
                    return Poll::Ready(Event::Readable(r));
                }
                woken.as_mut().poll(cx).map(|()| Event::Woken)
            })
            .await
        };
        match event {
            Event::Answered => return true,
            Event::Readable(true) => {
                // Bytes are there: this read completes at once, and they wait in `buf`.
                if buf.capacity() - buf.len() < READ_INITIAL / 2 {
                    buf.reserve(READ_CHUNK);
                }
                let BufResult(res, b) = net::read_append(stream, std::mem::take(buf)).await;
                *buf = b;
                match res {
                    Ok(n) if n > 0 => stats.rx_bytes.add(n as u64),
                    _ => {
                        client_gone(barrier, sink);
                        return false;
                    }
                }
            }
            Event::Readable(false) => {
                client_gone(barrier, sink);
                return false;
            }
            Event::Woken if sink.is_closed() => {
                client_gone(barrier, sink);
                return false;
            }
            Event::Woken if worker.is_draining() => {
                barrier.stop();
                return true;
            }
            // Back-pressure lifted: nothing to do here.
            Event::Woken => {}
        }
    }
    true
}

/// The client of a blocked session left: stop its request, and write nothing more to it.
fn client_gone(barrier: &Barrier, sink: &Sink) {
    barrier.stop();
    sink.close();
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
    stream: &Stream,
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
async fn linger(stream: &Stream, deadline: Instant) {
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
    /// Handles one request: the connection's mode first, then resolution against the command
    /// table, the auth gate, local answers, faults, and dispatch of what goes upstream.
    fn handle(&mut self, rt: &Rc<ListenerRuntime>, req: Request<'_>) {
        if let Some(obs) = &rt.observer
            && let Some(p) = obs.request(req.bytes(), req.ranges(), self.peer)
        {
            self.sink.observe_next(p);
        }
        // CLIENT REPLY OFF or SKIP: the reply takes its turn but is not written.
        let silent = self.conn.replies.silences_next_command();
        if silent {
            self.sink.silence_next(true);
        }
        if rt.resp3_only() && !self.conn.resp3 && self.refused_before_hello3(rt, req.name()) {
            return;
        }
        let req = if self.mode.is_shared() {
            self.draw.renew();
            req
        } else {
            match self.in_multi(rt, req) {
                Some(req) => req,
                None => return,
            }
        };
        let spec = match command::resolve(req.argc(), req.argv()) {
            Ok(spec) => spec,
            Err(ResolveError::Unknown(reply)) => {
                if let Some(key) = req.arg(1).filter(|_| rt.custom_command(req.name())) {
                    rt.stats.custom_request();
                    if self.fault(rt, CUSTOM_CMD) {
                        return;
                    }
                    return self.dispatch(rt).custom(&req, key, CUSTOM_CMD);
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
                if let Some(spec) = command::lookup(req.name()) {
                    rt.stats.request(spec.id);
                    return self.sink.push_local(spec.id, &reply);
                }
                rt.stats.rq_total.inc();
                return self.sink.push_local(NO_CMD, &reply);
            }
        };
        let req = req.with_spec(spec);
        rt.stats.request(spec.id);
        // Pub/sub confirmations are written whatever CLIENT REPLY says (Redis pushes them), and
        // CLIENT REPLY ON answers.
        if silent
            && (matches!(
                spec.kind,
                Kind::PubSub(PubSub::Subscribe(_) | PubSub::Unsubscribe(_))
            ) || spec.name == "client|reply")
        {
            self.sink.silence_next(false);
        }
        let gate_exempt = matches!(
            spec.kind,
            Kind::Local(Local::Auth | Local::Quit | Local::Hello | Local::Reset)
        );
        self.check_auth_expiry();
        if !self.conn.authed && !gate_exempt {
            return self
                .sink
                .push_local(spec.id, b"-NOAUTH Authentication required.\r\n");
        }
        if let Some(reply) = self.refused_while_subscribed(spec) {
            return self.sink.push_local(spec.id, &reply);
        }
        if let Kind::PubSub(which) = spec.kind {
            return self.pubsub(rt, &req, spec, which);
        }
        if command::is_blocking(spec, req.argc(), req.argv()) {
            return self.blocking(rt, &req, spec);
        }
        if spec.kind == Kind::ScriptControl {
            return self.script_control(rt, &req, spec);
        }
        if spec.kind == Kind::ClientUnblock {
            return self.client_unblock(rt, &req, spec);
        }
        if let Some(how) = Upstream::of(spec.kind) {
            // Faults hit only what goes upstream (docs/faults.md): never AUTH, PING or any
            // other command answered locally, nor requests rejected before this point.
            if self.fault(rt, spec.id) {
                return;
            }
            // A split command (MSET, DEL…) whose keys all land on one shard goes whole too: its
            // one part would be the client's frame, rebuilt, and its merge that part's reply.
            if matches!(how, Upstream::Keyed | Upstream::Split(_))
                && req.frame().is_some_and(|f| f.len() >= large::LARGE_REQUEST)
                && self.large(rt, &req, spec)
            {
                return;
            }
            return self.dispatch(rt).run(&req, spec, how);
        }
        match spec.kind {
            Kind::Local(which) => {
                if matches!(which, Local::Auth | Local::Hello)
                    && rt.config.external_auth.is_some()
                    && self.external_auth(rt, &req, spec, which)
                {
                    return;
                }
                if which == Local::Reset {
                    // RESET ends a WATCH (and a MULTI, which ended before this) and every
                    // subscription.
                    self.end_watch();
                    self.unsubscribe_all(rt);
                }
                let mut reply = Vec::new();
                let outcome = local::answer(
                    &mut self.conn,
                    &rt.config,
                    spec,
                    which,
                    req.argc(),
                    req.argv(),
                    &mut reply,
                );
                match outcome {
                    local::Outcome::Answered => {}
                    local::Outcome::AuthFailed => rt.stats.auth_failure.inc(),
                    local::Outcome::AuthThrottled => rt.stats.auth_throttled.inc(),
                }
                self.sink.push_local(spec.id, &reply);
                if matches!(which, Local::Hello | Local::Reset) {
                    self.protocol_changed();
                }
            }
            Kind::Transaction(which) => self.tx_command(rt, &req, spec, which),
            Kind::Refused(reason) => self
                .sink
                .push_local(spec.id, &command::refused_reply(spec, reason)),
            // `resolve` never returns a container row; the upstream kinds were dispatched.
            _ => self.sink.push_local(spec.id, &command::arity_error(spec)),
        }
    }

    /// Draws the listener's faults for a request of command `cmd` (Envoy `getFaultForCommand`,
    /// one draw per request), counts what it drew and applies it. True when the request got an
    /// ERROR fault and is answered: it is not forwarded.
    #[inline]
    fn fault(&self, rt: &ListenerRuntime, cmd: u16) -> bool {
        let Some(fault) = rt.faults.as_ref().and_then(|f| f.pick(cmd)) else {
            return false;
        };
        rt.stats.fault(
            cmd,
            matches!(fault, Fault::Error { .. }),
            fault.delay().is_some(),
        );
        dispatch::apply_fault(fault, cmd, &*self.sink)
    }

    /// The dispatch of one request over `rt`'s routes, into this session's reply slots.
    #[inline]
    fn dispatch<'d>(&'d mut self, rt: &'d ListenerRuntime) -> Dispatch<'d, Sink> {
        crate::cluster::random::set_session_draw(&self.draw);
        Dispatch {
            router: &rt.router,
            hash_tag: rt.config.hash_tag,
            client: Client {
                session: self.id,
                resp3: self.conn.resp3,
            },
            slots: &self.sink,
            scratch: &mut self.scratch,
        }
    }
}

/// Writes completed replies to the client; closes the connection when the reader is done and
/// every reply is written, or when a write fails.
async fn write_loop(
    stream: Rc<Stream>,
    sink: Rc<Sink>,
    stats: Rc<super::stats::ListenerStats>,
    open: Rc<Open>,
) {
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut spare: Vec<u8> = Vec::new();
    let mut failed = false;
    loop {
        let Some((len, n)) = sink.take_output(&mut batch, &mut spare) else {
            if sink.finished() || sink.is_closed() {
                break;
            }
            sink.wait_output().await;
            continue;
        };
        let BufResult(res, mut bufs) = net::write_all_bufs(&stream, batch).await;
        sink.written(n, len);
        if let Err(e) = res {
            debug!(peer = %peer_text(&stream), error = %e, "downstream write failed");
            sink.close();
            failed = true;
            break;
        }
        stats.tx_bytes.add(len as u64);
        // The last buffer (the tail, or a chunk) is kept for the next tail; the others go.
        if let Some(mut last) = bufs.pop()
            && last.capacity() <= READ_KEEP
        {
            last.clear();
            spare = last;
        }
        bufs.clear();
        batch = bufs;
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
fn peer_text(stream: &Stream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string())
}

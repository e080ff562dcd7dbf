//! One downstream (client) connection: read requests, answer or route them, write replies in
//! request order.

use std::ops::Range;
use std::rc::Rc;

use tracing::debug;

use super::sink::{NO_CMD, Sink};
use super::worker::{ListenerHandle, ListenerRuntime, WorkerShared};
use crate::command::{self, CommandSpec, Kind, Local, split};
use crate::net::{self, BufResult, TcpStream};
use crate::resp::{Limits, Parsed, RequestParser, encode};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST, Target};

const READ_CHUNK: usize = 16 * 1024;

/// Session state the request handler needs besides the request itself.
struct Session {
    id: u64,
    sink: Rc<Sink>,
    authed: bool,
    /// Stop reading after the current batch (QUIT).
    quit: bool,
    /// Reused buffer for re-encoding inline requests.
    encoded: Vec<u8>,
}

/// Serves one client connection until it closes.
pub async fn run(stream: TcpStream, handle: Rc<ListenerHandle>, worker: Rc<WorkerShared>) {
    let stream = Rc::new(stream);
    let first = handle.current();
    let stats = first.stats.clone();
    stats.cx_total.inc();
    stats.cx_active.inc();
    let sink = Rc::new(Sink::new(stats.clone(), worker.active.clone()));
    net::spawn(write_loop(stream.clone(), sink.clone(), stats.clone()));

    let mut session = Session {
        id: worker.next_session_id(),
        sink: sink.clone(),
        authed: first.config.downstream_auth_passwords.is_empty(),
        quit: false,
        encoded: Vec::new(),
    };
    drop(first);
    let mut parser = RequestParser::new(Limits::default());
    let mut args: Vec<Range<usize>> = Vec::with_capacity(8);
    let mut scratch: Vec<u8> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut start = 0usize;

    'conn: loop {
        while !sink.has_capacity() && !sink.is_closed() {
            sink.pause_reader();
            sink.reader.notified().await;
        }
        if sink.is_closed() || worker.is_draining() {
            break;
        }
        if start == buf.len() {
            buf.clear();
            start = 0;
        } else if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(buf.len().max(READ_CHUNK));
        }
        let BufResult(res, b) = net::read_append(&stream, buf).await;
        buf = b;
        let n = match res {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                debug!(error = %e, "downstream read failed");
                break;
            }
        };
        stats.rx_bytes.add(n as u64);
        let rt = handle.current();
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
                    stats.cx_protocol_error.inc();
                    stats.invalid_request.inc();
                    let msg = format!("ERR Protocol error: {e}");
                    let mut reply = Vec::new();
                    encode::error(&mut reply, msg.as_bytes());
                    sink.push_local(NO_CMD, &reply);
                    break 'conn;
                }
            }
            if session.quit {
                break 'conn;
            }
        }
    }
    if worker.is_draining() {
        stats.cx_drain_close.inc();
    }
    sink.reader_done();
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
        let arg = |i: usize| args.get(i).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        let Some(spec) = command::lookup(arg(0)) else {
            // Unknown commands are answered before the auth gate, as Envoy does.
            rt.stats.unsupported_command.inc();
            let argv: Vec<&[u8]> = (0..args.len()).map(arg).collect();
            self.sink
                .push_local(NO_CMD, &command::unknown_command_error(&argv));
            return;
        };
        rt.stats.request(spec.id);
        if !spec.arity_ok(args.len()) {
            self.sink.push_local(spec.id, &command::arity_error(spec));
            return;
        }
        if !self.authed
            && spec.kind != Kind::Local(Local::Auth)
            && spec.kind != Kind::Local(Local::Quit)
        {
            self.sink
                .push_local(spec.id, b"-NOAUTH Authentication required.\r\n");
            return;
        }
        match spec.kind {
            Kind::Local(local) => self.local(rt, spec, local, args.len(), arg),
            Kind::Keyed => self.keyed(rt, spec, args, base, frame),
            Kind::Split(merge) => self.split(rt, spec, merge, args, base),
            _ => self.sink.push_local(spec.id, b"-ERR not supported yet\r\n"),
        }
    }

    /// Routes a single-key command whole.
    fn keyed(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        args: &[Range<usize>],
        base: &[u8],
        frame: Option<&[u8]>,
    ) {
        let key = args
            .get(spec.first_key.max(0) as usize)
            .and_then(|r| base.get(r.clone()))
            .unwrap_or(&[]);
        let Some(pool) = rt.router.route(key) else {
            self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
            return;
        };
        let Some(conn) = pool.conn(pool.shard_of(rt.hash_key(key)), self.id) else {
            self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
            return;
        };
        let seq = self.sink.push(spec.id);
        let target = Target {
            sink: self.sink.clone(),
            seq,
            part: 0,
        };
        let request = match frame {
            Some(f) => f,
            None => {
                self.encoded.clear();
                encode::command(&mut self.encoded, args.iter().map(|r| &base[r.clone()]));
                &self.encoded
            }
        };
        if conn.send(request, target).is_err() {
            self.sink.deliver(seq, 0, NO_UPSTREAM_HOST);
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
            self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
            return;
        };
        let mut parts = split::split(spec, &argv, &mut |key| pool.shard_of(rt.hash_key(key)));
        let nkeys = parts.iter().map(|p| p.keys.len()).sum();
        let seq = self.sink.push(spec.id);
        let mut failed = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let target = Target {
                sink: self.sink.clone(),
                seq,
                part: i as u32,
            };
            let sent = pool
                .conn(part.shard, self.id)
                .is_some_and(|c| c.send(&part.request, target).is_ok());
            if !sent {
                failed.push(i as u32);
            }
            // The request bytes are in the upstream buffer now; only the key map is kept.
            part.request = Vec::new();
        }
        self.sink.make_split(seq, merge, nkeys, parts);
        for i in failed {
            self.sink.deliver(seq, i, NO_UPSTREAM_HOST);
        }
    }

    /// Commands answered by the proxy.
    fn local<'a>(
        &mut self,
        rt: &ListenerRuntime,
        spec: &CommandSpec,
        local: Local,
        argc: usize,
        arg: impl Fn(usize) -> &'a [u8],
    ) {
        let mut reply = Vec::new();
        match local {
            Local::Ping => match argc {
                1 => reply.extend_from_slice(b"+PONG\r\n"),
                2 => encode::bulk(&mut reply, arg(1)),
                _ => reply = command::arity_error(spec),
            },
            Local::Echo => encode::bulk(&mut reply, arg(1)),
            Local::Quit => {
                reply.extend_from_slice(b"+OK\r\n");
                self.quit = true;
            }
            Local::Select => match std::str::from_utf8(arg(1))
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(0) => reply.extend_from_slice(b"+OK\r\n"),
                Some(_) => reply.extend_from_slice(b"-ERR DB index is out of range\r\n"),
                None => {
                    reply.extend_from_slice(b"-ERR value is not an integer or out of range\r\n")
                }
            },
            Local::Auth => reply = self.auth(rt, argc, arg),
            _ => reply.extend_from_slice(b"-ERR not supported yet\r\n"),
        }
        self.sink.push_local(spec.id, &reply);
    }

    /// `AUTH [username] password` against the listener's downstream credentials (Envoy
    /// `downstream_auth_passwords` / `downstream_auth_username`).
    fn auth<'a>(
        &mut self,
        rt: &ListenerRuntime,
        argc: usize,
        arg: impl Fn(usize) -> &'a [u8],
    ) -> Vec<u8> {
        let cfg = &rt.config;
        if cfg.downstream_auth_passwords.is_empty() {
            return b"-ERR Client sent AUTH, but no password is set\r\n".to_vec();
        }
        let password_ok = |p: &[u8]| {
            cfg.downstream_auth_passwords
                .iter()
                .any(|x| x.as_bytes() == p)
        };
        match argc {
            2 => {
                if password_ok(arg(1)) {
                    self.authed = true;
                    b"+OK\r\n".to_vec()
                } else {
                    b"-ERR invalid password\r\n".to_vec()
                }
            }
            3 => {
                let user_ok =
                    cfg.downstream_auth_username.as_deref().map(str::as_bytes) == Some(arg(1));
                if user_ok && password_ok(arg(2)) {
                    self.authed = true;
                    b"+OK\r\n".to_vec()
                } else {
                    b"-WRONGPASS invalid username-password pair\r\n".to_vec()
                }
            }
            _ => b"-ERR syntax error\r\n".to_vec(),
        }
    }
}

/// Writes completed replies to the client; closes the connection when the reader is done and
/// every reply is written, or when a write fails.
async fn write_loop(stream: Rc<TcpStream>, sink: Rc<Sink>, stats: Rc<super::stats::ListenerStats>) {
    let mut spare: Vec<u8> = Vec::with_capacity(4096);
    loop {
        match sink.take_output(spare) {
            Ok((buf, n)) => {
                let len = buf.len();
                let BufResult(res, mut buf) = net::write_all(&stream, buf).await;
                if let Err(e) = res {
                    debug!(error = %e, "downstream write failed");
                    sink.written(n);
                    sink.close();
                    break;
                }
                stats.tx_bytes.add(len as u64);
                sink.written(n);
                buf.clear();
                if buf.capacity() > 1024 * 1024 {
                    buf = Vec::with_capacity(4096);
                }
                spare = buf;
            }
            Err(s) => {
                spare = s;
                if sink.finished() || sink.is_closed() {
                    break;
                }
                sink.writer.notified().await;
            }
        }
    }
    sink.close();
    stats.cx_active.dec();
    net::shutdown(&stream);
}

// Keep Rc<Sink> coercible to Rc<dyn Deliver>.
const _: fn(Rc<Sink>) -> Rc<dyn crate::upstream::Deliver> = |s| s;

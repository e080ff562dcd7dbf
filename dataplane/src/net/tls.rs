//! TLS record I/O over a ring socket: rustls does the handshake state and the cryptography
//! (on buffers), this module moves the ciphertext with the same io_uring reads and writes as a
//! plain socket. Not compio's own TLS stream: Respite reads and writes one connection from two
//! tasks at once (a session's reader and writer, an upstream connection's read and write
//! loops), which a `&mut` stream cannot do; here the two directions share one rustls
//! connection, borrowed only between awaits, and writes are serialized by a small lock so
//! records go out whole and in order.
//!
//! Closing sends no `close_notify`: Redis does not wait for one, and a connection is only
//! closed here when it is done or broken.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::task::{Poll, Waker};

use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use rustls::pki_types::ServerName;

/// Room for one full record (16 KiB of plaintext plus the record's overhead): what an idle
/// connection keeps for its next read.
const RX_MIN: usize = 16 * 1024 + 512;
/// Room for four full records: what a busy connection reads into (its reads filled the room
/// they had, so the next one gets twice as much, up to this).
const RX_MAX: usize = 4 * RX_MIN;
/// A send scratch buffer larger than this is not kept between writes (a connection writing
/// large values allocates per flush; one writing small replies reuses it).
const TX_KEEP: usize = 32 * 1024;
/// Plaintext offered to rustls per step (it takes up to its send buffer limit, 64 KiB).
const TX_STEP: usize = 256 * 1024;

/// One TLS connection's state, beside its socket.
pub(crate) struct Tls {
    conn: RefCell<rustls::Connection>,
    /// Ciphertext read and not yet given to rustls: `buf[start..]`.
    rx: RefCell<Rx>,
    /// Room the next socket read gets, [`RX_MIN`] to [`RX_MAX`].
    rx_room: Cell<usize>,
    /// Decrypted bytes rustls holds for the reader.
    plain: Cell<usize>,
    /// The peer sent `close_notify`, or its end of the socket closed.
    closed: Cell<bool>,
    /// A task is writing records to the socket; others wait in `tx_waiters`.
    tx_held: Cell<bool>,
    tx_waiters: RefCell<VecDeque<Waker>>,
    tx_spare: RefCell<Vec<u8>>,
}

#[derive(Default)]
struct Rx {
    buf: Vec<u8>,
    start: usize,
}

/// What a handshake learned, for the stats.
#[derive(Debug, Clone, Copy)]
pub struct Handshake {
    /// The peer presented a certificate (a client, on a listener that asks for one).
    pub peer_certificate: bool,
}

/// Why a handshake failed, in Envoy's `ssl.*` terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The peer's certificate did not verify (chain, expiry, usage): `ssl.fail_verify_error`.
    Verify,
    /// The certificate is not for the name asked: `ssl.fail_verify_san`.
    VerifyName,
    /// A certificate was required and none was presented: `ssl.fail_verify_no_cert`.
    NoCertificate,
    /// Anything else (protocol, alert from the peer, I/O, timeout): `ssl.connection_error` only.
    Other,
}

/// Classifies a handshake error returned by [`accept`] or [`connect`].
pub fn failure(e: &io::Error) -> Failure {
    use rustls::{CertificateError as C, Error as E};
    match e.get_ref().and_then(|inner| inner.downcast_ref::<E>()) {
        Some(E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. })) => {
            Failure::VerifyName
        }
        Some(E::InvalidCertificate(_)) => Failure::Verify,
        Some(E::NoCertificatesPresented) => Failure::NoCertificate,
        _ => Failure::Other,
    }
}

/// True when `e` is a TLS alert the peer sent: under TLS 1.3 a server that refuses the
/// client's certificate says so only after the client's side of the handshake is done, on the
/// first read.
pub fn is_peer_alert(e: &io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::AlertReceived(_))
    )
}

impl Tls {
    fn new(conn: rustls::Connection) -> Tls {
        Tls {
            conn: RefCell::new(conn),
            rx: RefCell::new(Rx::default()),
            rx_room: Cell::new(RX_MIN),
            plain: Cell::new(0),
            closed: Cell::new(false),
            tx_held: Cell::new(false),
            tx_waiters: RefCell::new(VecDeque::new()),
            tx_spare: RefCell::new(Vec::new()),
        }
    }

    /// True when a read would find bytes without waiting for the socket: decrypted ones, or
    /// ciphertext not yet given to rustls.
    pub(crate) fn has_buffered(&self) -> bool {
        let rx = self.rx.borrow();
        self.plain.get() > 0 || rx.start < rx.buf.len()
    }

    /// Gives buffered ciphertext to rustls: `Ok(true)` when some was taken or plaintext is
    /// waiting (the caller goes round again rather than waiting for the socket).
    fn feed(&self) -> io::Result<bool> {
        let mut rx = self.rx.borrow_mut();
        let Rx { buf, start } = &mut *rx;
        let Some(pending) = buf.get(*start..).filter(|p| !p.is_empty()) else {
            return Ok(false);
        };
        let mut conn = self.conn.borrow_mut();
        let mut src = pending;
        let n = conn.read_tls(&mut src)?;
        *start += n;
        let state = conn
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.plain.set(state.plaintext_bytes_to_read());
        if state.peer_has_closed() {
            self.closed.set(true);
        }
        Ok(n > 0 || self.plain.get() > 0)
    }

    /// Reads ciphertext from the socket into the receive buffer: `Ok(0)` at end of stream.
    async fn fill(&self, tcp: &TcpStream) -> io::Result<usize> {
        let mut buf = {
            let mut rx = self.rx.borrow_mut();
            let start = std::mem::take(&mut rx.start);
            let mut buf = std::mem::take(&mut rx.buf);
            if start >= buf.len() {
                buf.clear();
            } else {
                buf.drain(..start);
            }
            buf
        };
        let room = self.rx_room.get();
        if buf.is_empty() && buf.capacity() > 2 * room {
            // A busy spell is over: the next read gets a small buffer again.
            buf = Vec::new();
        }
        if buf.capacity() - buf.len() < room / 2 {
            buf.reserve(room);
        }
        let offered = buf.capacity() - buf.len();
        let mut s = tcp;
        let BufResult(res, b) = s.append(buf).await;
        buf = b;
        self.rx_room.set(match res {
            Ok(n) if n >= offered => (room * 2).min(RX_MAX),
            Ok(n) if n < RX_MIN / 2 => RX_MIN,
            _ => room,
        });
        let mut rx = self.rx.borrow_mut();
        rx.buf = buf;
        res
    }

    /// Moves decrypted bytes into `buf`'s spare room (growing it if it has none).
    fn take_plain(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let want = self.plain.get();
        let len = buf.len();
        let room = (buf.capacity() - len).max(4096);
        let n = want.min(room);
        buf.resize(len + n, 0);
        let got = match buf.get_mut(len..) {
            Some(dst) => self.conn.borrow_mut().reader().read(dst),
            None => Ok(0),
        };
        let got = match got {
            Ok(g) => g,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        };
        buf.truncate(len + got);
        self.plain.set(want.saturating_sub(got));
        Ok(got)
    }

    /// Reads decrypted bytes, appending them to `buf`: `Ok(0)` at end of stream.
    pub(crate) async fn read_append(
        &self,
        tcp: &TcpStream,
        mut buf: Vec<u8>,
    ) -> BufResult<usize, Vec<u8>> {
        loop {
            if self.plain.get() > 0 {
                match self.take_plain(&mut buf) {
                    Ok(0) => {}
                    r => return BufResult(r, buf),
                }
            }
            match self.feed() {
                Ok(true) => {
                    // A peer's KeyUpdate or an alert rustls wants to answer.
                    if let Err(e) = self.flush_if_free(tcp).await {
                        return BufResult(Err(e), buf);
                    }
                    continue;
                }
                Ok(false) => {}
                Err(e) => return BufResult(Err(e), buf),
            }
            if self.closed.get() {
                return BufResult(Ok(0), buf);
            }
            match self.fill(tcp).await {
                Ok(0) => {
                    self.closed.set(true);
                    return BufResult(Ok(0), buf);
                }
                Ok(_) => {}
                Err(e) => return BufResult(Err(e), buf),
            }
        }
    }

    /// Encrypts `parts` in order and writes the records, whole, before any other writer's.
    pub(crate) async fn write_parts(&self, tcp: &TcpStream, parts: &[&[u8]]) -> io::Result<()> {
        let _held = self.lock().await;
        for part in parts {
            let mut off = 0;
            while off < part.len() {
                let end = part.len().min(off + TX_STEP);
                let chunk = part.get(off..end).unwrap_or_default();
                let n = self.conn.borrow_mut().writer().write(chunk)?;
                off += n;
                // rustls takes less than offered when its send buffer is full.
                if n < chunk.len() {
                    self.flush_locked(tcp).await?;
                }
            }
        }
        self.flush_locked(tcp).await
    }

    /// Writes out the records rustls has queued when no other task is writing (else that
    /// task's flush takes them).
    async fn flush_if_free(&self, tcp: &TcpStream) -> io::Result<()> {
        if !self.conn.borrow().wants_write() || self.tx_held.get() {
            return Ok(());
        }
        let _held = self.lock().await;
        self.flush_locked(tcp).await
    }

    /// Writes every record rustls has queued; the caller holds the write lock.
    async fn flush_locked(&self, tcp: &TcpStream) -> io::Result<()> {
        loop {
            let mut out = std::mem::take(&mut *self.tx_spare.borrow_mut());
            out.clear();
            {
                let mut conn = self.conn.borrow_mut();
                while conn.wants_write() {
                    conn.write_tls(&mut out)?;
                }
            }
            if out.is_empty() {
                *self.tx_spare.borrow_mut() = out;
                return Ok(());
            }
            let mut s = tcp;
            let BufResult(res, out) = s.write_all(out).await;
            if out.capacity() <= TX_KEEP {
                *self.tx_spare.borrow_mut() = out;
            }
            res?;
        }
    }

    async fn lock(&self) -> TxGuard<'_> {
        poll_fn(|cx| {
            if self.tx_held.get() {
                self.tx_waiters.borrow_mut().push_back(cx.waker().clone());
                Poll::Pending
            } else {
                self.tx_held.set(true);
                Poll::Ready(())
            }
        })
        .await;
        TxGuard(self)
    }

    /// Runs the handshake to its end: records out, records in, until rustls is done.
    async fn handshake(&self, tcp: &TcpStream) -> io::Result<()> {
        loop {
            {
                let _held = self.lock().await;
                self.flush_locked(tcp).await?;
            }
            if !self.conn.borrow().is_handshaking() {
                return Ok(());
            }
            match self.feed() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    // The alert rustls queued tells the peer why (best effort).
                    let _held = self.lock().await;
                    let _ = self.flush_locked(tcp).await;
                    return Err(e);
                }
            }
            if self.fill(tcp).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection during the TLS handshake",
                ));
            }
        }
    }

    fn handshake_info(&self) -> Handshake {
        Handshake {
            peer_certificate: self
                .conn
                .borrow()
                .peer_certificates()
                .is_some_and(|c| !c.is_empty()),
        }
    }
}

struct TxGuard<'a>(&'a Tls);

impl Drop for TxGuard<'_> {
    fn drop(&mut self) {
        self.0.tx_held.set(false);
        if let Some(w) = self.0.tx_waiters.borrow_mut().pop_front() {
            w.wake();
        }
    }
}

/// Server side: runs the handshake on an accepted socket with the listener's config.
///
/// # Errors
/// The handshake failed (see [`failure`]) or the socket did.
pub(crate) async fn accept(
    tcp: &TcpStream,
    config: Arc<rustls::ServerConfig>,
) -> io::Result<(Tls, Handshake)> {
    let conn = rustls::ServerConnection::new(config)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let tls = Tls::new(conn.into());
    tls.handshake(tcp).await?;
    let info = tls.handshake_info();
    Ok((tls, info))
}

/// Client side: runs the handshake on a connected socket, verifying the server as `name`.
///
/// # Errors
/// The handshake failed (see [`failure`]) or the socket did.
pub(crate) async fn connect(
    tcp: &TcpStream,
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<Tls> {
    let conn = rustls::ClientConnection::new(config, name)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let tls = Tls::new(conn.into());
    tls.handshake(tcp).await?;
    Ok(tls)
}

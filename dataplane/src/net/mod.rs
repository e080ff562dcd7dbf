//! The thin layer over the io_uring runtime (compio) through which the data plane makes sockets,
//! spawns tasks, sleeps and wakes tasks. Nothing else names compio, so the runtime can be swapped.
//! A connection is a [`Stream`]: a TCP socket, plain or with TLS ([`tls`]) over the same ring.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

pub use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

pub use compio::net::{TcpListener, TcpStream};

pub mod tls;
#[cfg(test)]
mod tls_tests;

/// A connection: a TCP socket, with TLS records on it or not. Every read and write of the data
/// plane goes through the functions of this module, which encrypt and decrypt when it is TLS;
/// above this layer the two are the same.
pub struct Stream {
    tcp: TcpStream,
    tls: Option<Box<tls::Tls>>,
}

impl Stream {
    /// A plain TCP connection.
    pub fn plain(tcp: TcpStream) -> Stream {
        Stream { tcp, tls: None }
    }

    /// True when the connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The local address of the socket.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.peer_addr()
    }
}

/// Server side of TLS on an accepted socket: runs the handshake with the listener's config.
///
/// # Errors
/// The handshake failed ([`tls::failure`] says why, in `ssl.*` terms) or the socket did.
pub async fn tls_accept(
    tcp: TcpStream,
    config: std::sync::Arc<rustls::ServerConfig>,
) -> io::Result<(Stream, tls::Handshake)> {
    let (state, info) = tls::accept(&tcp, config).await?;
    // A TLS 1.3 server sends nothing after the client's Finished (Respite issues no session
    // tickets), so the kernel delays its ACK (up to 40 ms), and a client whose socket has Nagle
    // on holds its first request until that ACK: every new connection would wait 40 ms. Acking
    // now costs one setsockopt per connection. Failure only costs that latency.
    let _ = SockRef::from(&tcp).set_tcp_quickack(true);
    Ok((
        Stream {
            tcp,
            tls: Some(Box::new(state)),
        },
        info,
    ))
}

/// Client side of TLS on a connected socket: runs the handshake, verifying the server's
/// certificate as `name` (the config's verifier decides what that means).
///
/// # Errors
/// As [`tls_accept`].
pub async fn tls_connect(
    tcp: TcpStream,
    config: std::sync::Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
) -> io::Result<Stream> {
    let state = tls::connect(&tcp, config, name).await?;
    Ok(Stream {
        tcp,
        tls: Some(Box::new(state)),
    })
}

/// Builds a per-worker io_uring runtime. `COOP_TASKRUN` + `TASKRUN_FLAG` cut proxy CPU per request
/// by a third or more against compio's defaults at pipeline 1 (measured with a multiplexing
/// prototype on a 2-core VM: 5.2–6.0 µs/request with COOP_TASKRUN or DEFER_TASKRUN, 8.7–9.7 with
/// compio's defaults).
/// `cpu`: pin the worker thread to this CPU.
///
/// Errors: the kernel refuses io_uring or the flags (kernels before 5.19 lack `TASKRUN_FLAG`).
pub fn runtime(cpu: Option<usize>) -> io::Result<compio::runtime::Runtime> {
    let mut proactor = compio::driver::ProactorBuilder::new();
    proactor
        .capacity(4096)
        .coop_taskrun(true)
        .taskrun_flag(true);
    let mut builder = compio::runtime::RuntimeBuilder::new();
    builder.with_proactor(proactor);
    if let Some(cpu) = cpu {
        builder.thread_affinity(std::iter::once(cpu).collect());
    }
    builder.build()
}

/// Binds a listening socket with `SO_REUSEPORT` so that every worker owns its own accept queue
/// for the same address (the kernel spreads connections over them). Backlog 1024.
pub fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Checks that no socket listens on `addr`, by binding a probe socket there without
/// `SO_REUSEPORT` and closing it at once. [`bind_listener`] cannot tell: with `SO_REUSEPORT` the
/// kernel lets it join another process's listeners on the same address (same uid), and the two
/// processes then split the connections. Linux refuses the probe with `EADDRINUSE` when any
/// socket listens on `addr` or on an address that covers it (`0.0.0.0`, `[::]` on the port, and
/// the other way round), whoever owns it. `SO_REUSEADDR` is set as on the listeners, so
/// connections of a process that has exited (`TIME_WAIT`) do not count.
///
/// Port 0 is not probed (`Ok`): the kernel picks a free port for each bind. The check and the
/// bind that follows are two steps; a process binding the address in between is not seen.
///
/// Errors: `AddrInUse` when something listens there; any other bind error as is.
pub fn probe_unshared(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())
}

/// Accepts one connection already waiting in `listener`'s accept queue, without waiting:
/// `Ok(None)` when the queue is empty. Used at drain, so connections the kernel queued for this
/// process are served rather than reset when the listener closes.
pub fn accept_queued(listener: &TcpListener) -> io::Result<Option<TcpStream>> {
    match SockRef::from(listener).accept() {
        Ok((socket, _peer)) => {
            let stream = TcpStream::from_std(socket.into())?;
            downstream_options(&stream)?;
            Ok(Some(stream))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Stops `listener` listening, as closing it would (the kernel takes it out of its
/// `SO_REUSEPORT` group, and with `net.ipv4.tcp_migrate_req = 1` moves its queued connections to
/// another listener of the group; otherwise it resets them), but keeps the descriptor, so an
/// accept waiting on it wakes with an error instead of being cancelled mid-flight (a cancelled
/// accept may have taken a connection nobody would serve).
pub fn stop_listening(listener: &TcpListener) {
    let _ = SockRef::from(listener).shutdown(std::net::Shutdown::Read);
}

/// `net.ipv4.tcp_migrate_req` of this network namespace (Linux ≥ 5.14): `Some(true)` when a
/// closing `SO_REUSEPORT` listener's queued connections move to another listener of its group;
/// `None` when the kernel does not have the setting.
pub fn tcp_migrate_req() -> Option<bool> {
    let v = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_migrate_req").ok()?;
    Some(v.trim() != "0")
}

/// Accepts one downstream connection, with [`downstream_options`].
pub async fn accept(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (stream, peer) = listener.accept().await?;
    downstream_options(&stream)?;
    Ok((stream, peer))
}

/// Unsent bytes a downstream socket accepts before a write waits (`TCP_NOTSENT_LOWAT`).
pub const DOWNSTREAM_NOTSENT_LOWAT: u32 = 256 * 1024;

/// `TCP_NODELAY`, and [`DOWNSTREAM_NOTSENT_LOWAT`]: replies a client has not read stay in
/// Respite's output buffer, where its output-buffer limit and the worker's budget count them,
/// rather than in the kernel's send queue (up to `tcp_wmem`'s 4 MiB per socket), where they
/// count against the host's TCP memory (`tcp_mem`): a few thousand clients that do not read
/// would push it into memory pressure, and every connection of the host, the upstream ones
/// included, would then drop packets and wait for retransmits. The mark does not limit what is
/// in flight to a client that reads, so throughput is unchanged.
pub fn downstream_options(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    SockRef::from(stream).set_tcp_notsent_lowat(DOWNSTREAM_NOTSENT_LOWAT)
}

/// Connects to `addr` within `timeout`, with `TCP_NODELAY` and TCP keepalive on (the kernel's
/// default timings; see [`connect_keepalive`] for chosen ones).
pub async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = connect_nodelay(addr, timeout).await?;
    SockRef::from(&stream).set_keepalive(true)?;
    Ok(stream)
}

/// [`connect`] with keepalive timings (the cluster's `tcp_keepalive`, Envoy
/// `core.v3.TcpKeepalive`): after `keepalive_time` idle the kernel probes every
/// `keepalive_interval`, and `keepalive_probes` unanswered probes fail the connection with
/// `ETIMEDOUT`, so a host that vanished is noticed while the connection is idle.
pub async fn connect_keepalive(
    addr: SocketAddr,
    timeout: Duration,
    keepalive: &crate::config::TcpKeepalive,
) -> io::Result<TcpStream> {
    let stream = connect_nodelay(addr, timeout).await?;
    let ka = socket2::TcpKeepalive::new()
        .with_time(keepalive.keepalive_time)
        .with_interval(keepalive.keepalive_interval)
        .with_retries(keepalive.keepalive_probes);
    SockRef::from(&stream).set_tcp_keepalive(&ka)?;
    Ok(stream)
}

async fn connect_nodelay(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = compio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timeout"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads into the spare capacity of `buf` (appending). `Ok(0)` means end of stream.
pub async fn read_append(stream: &Stream, buf: Vec<u8>) -> BufResult<usize, Vec<u8>> {
    if let Some(tls) = &stream.tls {
        return tls.read_append(&stream.tcp, buf).await;
    }
    let mut s = &stream.tcp;
    s.append(buf).await
}

/// Writes all of `buf`, returning it for reuse.
pub async fn write_all(stream: &Stream, buf: Vec<u8>) -> BufResult<(), Vec<u8>> {
    if let Some(tls) = &stream.tls {
        let res = tls.write_parts(&stream.tcp, &[&buf]).await;
        return BufResult(res, buf);
    }
    let mut s = &stream.tcp;
    s.write_all(buf).await
}

/// Writes all of `bufs`, in order: one write for one buffer, one vectored write for several
/// (a large output in chunks goes out in one system call, as one buffer would).
pub async fn write_all_bufs(
    stream: &Stream,
    mut bufs: Vec<Vec<u8>>,
) -> BufResult<(), Vec<Vec<u8>>> {
    if let Some(tls) = &stream.tls {
        let parts: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let res = tls.write_parts(&stream.tcp, &parts).await;
        drop(parts);
        return BufResult(res, bufs);
    }
    if bufs.len() == 1
        && let Some(one) = bufs.pop()
    {
        let BufResult(res, one) = write_all(stream, one).await;
        bufs.push(one);
        return BufResult(res, bufs);
    }
    let mut s = &stream.tcp;
    s.write_vectored_all(bufs).await
}

/// Writes all of `buf[range]` (a range past its end writes what is there), returning `buf`:
/// a large buffer written piece by piece, each piece under its own deadline.
pub async fn write_range(
    stream: &Stream,
    buf: Vec<u8>,
    range: std::ops::Range<usize>,
) -> BufResult<(), Vec<u8>> {
    use compio::buf::{IntoInner, IoBuf};
    let end = range.end.min(buf.len());
    let start = range.start.min(end);
    if let Some(tls) = &stream.tls {
        let res = tls
            .write_parts(&stream.tcp, &[buf.get(start..end).unwrap_or_default()])
            .await;
        return BufResult(res, buf);
    }
    let mut s = &stream.tcp;
    let BufResult(res, slice) = s.write_all(buf.slice(start..end)).await;
    BufResult(res, slice.into_inner())
}

/// Writes all of `bytes` (a shared buffer: a clone of it costs no copy).
pub async fn write_shared(stream: &Stream, bytes: bytes::Bytes) -> io::Result<()> {
    if let Some(tls) = &stream.tls {
        return tls.write_parts(&stream.tcp, &[&bytes]).await;
    }
    let mut s = &stream.tcp;
    s.write_all(bytes).await.0
}

/// True when an idle connection can still be used: nothing is waiting to be read and the peer
/// has not closed it (a non-blocking `MSG_PEEK`; a Redis that restarted or closed an idle
/// client has sent FIN or RST by now). Bytes waiting on a connection that expects none mean
/// it is out of step: not usable either (on TLS, records that decrypt to nothing, such as a
/// late session ticket, count as bytes too: the connection is then let go, never misread).
pub fn idle_usable(stream: &Stream) -> bool {
    if stream.tls.as_ref().is_some_and(|t| t.has_buffered()) {
        return false;
    }
    let stream = &stream.tcp;
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match SockRef::from(stream).recv_with_flags(&mut probe, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        Ok(_) => false,
    }
}

/// Waits until `stream` has bytes to read or its peer has closed it, taking none of them
/// (`MSG_PEEK`): `true` when bytes wait, `false` at end of stream or on an error. Dropping it
/// loses nothing, so it can watch a connection whose bytes are read elsewhere later. On TLS,
/// bytes already received and not yet read count at once; otherwise ciphertext waiting counts
/// (a read may then still wait for the rest of a record).
pub async fn readable_or_closed(stream: &Stream) -> bool {
    if stream.tls.as_ref().is_some_and(|t| t.has_buffered()) {
        return true;
    }
    let stream = &stream.tcp;
    let BufResult(res, _) = stream.peek(Vec::with_capacity(1)).await;
    matches!(res, Ok(n) if n > 0)
}

/// Runs `fut` unless `stop` completes first: `None` then (and `fut` is dropped).
pub async fn unless<F: Future, S: Future<Output = ()>>(fut: F, stop: S) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut stop = std::pin::pin!(stop);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        stop.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Shuts both directions of a stream so a task blocked reading it wakes with end of stream.
pub fn shutdown(stream: &Stream) {
    let _ = SockRef::from(&stream.tcp).shutdown(std::net::Shutdown::Both);
}

/// Shuts the sending direction only: the peer reads end of stream after the last byte written,
/// while this side can still read (and discard) what the peer sends.
pub fn shutdown_write(stream: &Stream) {
    let _ = SockRef::from(&stream.tcp).shutdown(std::net::Shutdown::Write);
}

/// Runs `fut` in the background on the current worker.
pub fn spawn<F: Future<Output = ()> + 'static>(fut: F) {
    compio::runtime::spawn(fut).detach();
}

/// A handle to a background task that is cancelled when dropped.
pub struct TaskHandle(#[allow(dead_code)] compio::runtime::JoinHandle<()>);

/// Runs `fut` in the background until the returned handle is dropped.
pub fn spawn_cancellable<F: Future<Output = ()> + 'static>(fut: F) -> TaskHandle {
    TaskHandle(compio::runtime::spawn(fut))
}

/// Hands memory that the allocator holds free back to the kernel: mimalloc's (the `respite`
/// binary's global allocator) `mi_collect(true)` for the calling thread's heap, and glibc's
/// `malloc_trim(0)` for whatever went through glibc (a library embedding the data plane with the
/// system allocator). Takes time proportional to the heap: call it after large drops in use, on
/// the worker thread whose sessions closed.
pub fn release_free_memory() {
    // SAFETY: both only walk their allocator's own free lists; neither has preconditions.
    unsafe {
        libmimalloc_sys::mi_collect(true);
        libc::malloc_trim(0);
    }
}

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`), as Redis
/// does by default (`disable-thp yes`), for the process's whole life and its children's.
///
/// Why: mimalloc asks for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), and the kernel
/// then zeroes a whole 2 MiB page on the first touch of any of its 4 KiB pages. When clients
/// that never read grow their output buffers until they are evicted and the memory goes back
/// to the kernel, each new 64 KiB output chunk faulted a fresh 2 MiB page: the worker spent
/// 94% of its time in the kernel's page clearing (perf), read replies at about 130 MiB/s
/// instead of gigabytes, and a well-behaved client of the same backend waited about 0.5 s per
/// `GET`. With 4 KiB pages a chunk costs the pages it uses.
///
/// # Errors
/// The kernel refused the `prctl` (older than Linux 3.15, or seccomp): the caller logs it and
/// runs on.
pub fn disable_transparent_huge_pages() -> io::Result<()> {
    nix::sys::prctl::set_thp_disable(true).map_err(io::Error::from)
}

/// Sleeps for `d`.
pub async fn sleep(d: Duration) {
    compio::time::sleep(d).await
}

/// Lets the worker's other tasks, and the ring's completions, run before the caller goes on:
/// a long computation (a copy of hundreds of MiB) calls it between steps. A timer rather than
/// a self-wake: the executor may poll a task that wakes itself again in the same turn, before
/// it has looked at the ring.
pub async fn yield_to_others() {
    compio::time::sleep(Duration::from_micros(10)).await
}

/// Sleeps until `deadline`.
pub async fn sleep_until(deadline: Instant) {
    compio::time::sleep_until(deadline).await
}

/// Runs `fut` with a time limit; `None` when it expired.
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Option<F::Output> {
    compio::time::timeout(d, fut).await.ok()
}

/// A single-threaded, single-waiter notification: `notify()` wakes the task waiting in
/// `notified()`, or makes its next `notified()` return at once. Not `Sync`: worker-local only.
#[derive(Default)]
pub struct Notify {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    /// Wakes the waiter (or arms the next wait).
    pub fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Waits until `notify()` has been called since the last wait returned.
    pub fn notified(&self) -> Notified<'_> {
        Notified(self)
    }
}

/// Future returned by [`Notify::notified`].
pub struct Notified<'a>(&'a Notify);

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.set.replace(false) {
            return Poll::Ready(());
        }
        let mut w = self.0.waker.borrow_mut();
        match w.as_ref() {
            Some(old) if old.will_wake(cx.waker()) => {}
            _ => *w = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// Shared handle type for a [`Notify`].
pub type SharedNotify = Rc<Notify>;

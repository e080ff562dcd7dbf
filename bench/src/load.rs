//! The load generator: threads × current_thread tokio runtimes × connections. Closed-loop: each
//! connection keeps `pipeline` requests in flight. Open-loop (`rate`): each connection sends on a
//! fixed schedule whatever is outstanding (see [`crate::openloop`]). With `cluster`, each
//! connection is a cluster-aware client: one socket per primary, requests routed by key slot
//! (see [`crate::cluster`]). With `tls`, every connection does a TLS handshake first and the
//! closed loop runs over the TLS stream (the loop is generic over the stream: the plain path is
//! the same code as without TLS support); open loop and cluster routing are plain TCP only.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::cluster::{Batch, Topology};
use crate::mix::{Mix, OpKind};
use crate::procstat::{self, PidSpec};
use crate::report::{CpuUsage, Report};
use crate::resp::{ReplyKind, parse_reply};
use crate::tls::TlsClient;

/// When the measured phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Requests(u64),
    Duration(Duration),
}

/// Everything one load run needs (resolved from the CLI).
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: String,
    pub addr: SocketAddr,
    pub connections: usize,
    pub pipeline: usize,
    pub threads: usize,
    pub mix: Mix,
    pub keyspace: u64,
    pub value_size: usize,
    pub stop: Stop,
    pub warmup: Option<Duration>,
    pub prefill: bool,
    pub auth: Option<String>,
    pub pids: Vec<PidSpec>,
    /// Open-loop target rate in requests/second over all connections; `None` = closed loop.
    pub rate: Option<f64>,
    /// Keys are `key:<key_offset + n>`, n in `0..keyspace` (lets two keyspaces coexist).
    pub key_offset: u64,
    /// No progress messages on stderr.
    pub quiet: bool,
    /// `addr` is a Redis Cluster seed: fetch CLUSTER SLOTS once and send each request to the
    /// primary of its key's slot (single-key commands and PING only; closed loop only).
    pub cluster: bool,
    /// Connect with TLS (closed loop, one target only): handshake, then AUTH, on every
    /// connection before the load starts.
    pub tls: Option<Arc<TlsClient>>,
}

pub(crate) const WARMUP: u8 = 0;
pub(crate) const MEASURE: u8 = 1;
pub(crate) const DONE: u8 = 2;

/// Prefill batch size (SETs per write).
const PREFILL_BATCH: u64 = 512;

pub(crate) struct Shared {
    pub(crate) phase: AtomicU8,
    claimed: AtomicU64,
    limit: u64,
}

impl Shared {
    /// Claims up to `want` requests of the measured budget; 0 when it is exhausted.
    pub(crate) fn claim(&self, want: u64) -> u64 {
        if self.limit == u64::MAX {
            return want;
        }
        let prev = self.claimed.fetch_add(want, Ordering::Relaxed);
        if prev >= self.limit {
            0
        } else {
            want.min(self.limit - prev)
        }
    }
}

/// Pre-built request pieces; encoding a request only copies bytes and formats key numbers.
pub(crate) struct Encoder {
    ops: Vec<EncOp>,
    /// Cumulative weights, same order as `ops`.
    cumulative: Vec<u64>,
    total: u64,
    keyspace: u64,
    key_offset: u64,
    /// `$<len>\r\n<value>\r\n`
    value: Vec<u8>,
}

struct EncOp {
    header: Vec<u8>,
    keys: u32,
    with_value: bool,
}

impl Encoder {
    fn new(mix: &Mix, keyspace: u64, key_offset: u64, value_size: usize) -> Self {
        let mut ops = Vec::new();
        let mut cumulative = Vec::new();
        let mut total = 0u64;
        for &(op, w) in &mix.entries {
            ops.push(EncOp::new(op));
            total += u64::from(w);
            cumulative.push(total);
        }
        debug_assert_eq!(total, mix.total_weight());
        Encoder {
            ops,
            cumulative,
            total,
            keyspace,
            key_offset,
            value: bulk_value(value_size),
        }
    }

    /// Appends one request; returns the range of its first key in `out` (`None` for PING).
    pub(crate) fn encode(
        &self,
        rng: &mut fastrand::Rng,
        out: &mut Vec<u8>,
    ) -> Option<Range<usize>> {
        let idx = if self.ops.len() == 1 {
            0
        } else {
            let r = rng.u64(0..self.total);
            self.cumulative.iter().position(|&c| r < c).unwrap_or(0)
        };
        let op = &self.ops[idx];
        out.extend_from_slice(&op.header);
        let mut first = None;
        for _ in 0..op.keys {
            let key = write_key(out, self.key_offset + rng.u64(0..self.keyspace));
            first.get_or_insert(key);
            if op.with_value {
                out.extend_from_slice(&self.value);
            }
        }
        first
    }
}

impl EncOp {
    fn new(op: OpKind) -> Self {
        let keys = op.keys();
        let with_value = op.with_value();
        let argc = 1 + keys as usize * if with_value { 2 } else { 1 };
        let name = op.name();
        let header = format!("*{argc}\r\n${}\r\n{name}\r\n", name.len()).into_bytes();
        EncOp {
            header,
            keys,
            with_value,
        }
    }
}

fn bulk_value(size: usize) -> Vec<u8> {
    let mut v = format!("${size}\r\n").into_bytes();
    v.extend(std::iter::repeat_n(b'x', size));
    v.extend_from_slice(b"\r\n");
    v
}

/// Appends `$<len>\r\nkey:<n>\r\n` without allocating; returns the range of `key:<n>`.
fn write_key(out: &mut Vec<u8>, n: u64) -> Range<usize> {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let nd = digits.len() - i;
    let len = 4 + nd; // "key:" + digits
    out.push(b'$');
    if len >= 10 {
        out.push(b'0' + (len / 10) as u8);
    }
    out.push(b'0' + (len % 10) as u8);
    out.extend_from_slice(b"\r\n");
    let start = out.len();
    out.extend_from_slice(b"key:");
    out.extend_from_slice(&digits[i..]);
    let key = start..out.len();
    out.extend_from_slice(b"\r\n");
    key
}

/// A connection with a reply buffer.
pub(crate) struct Conn<S = TcpStream> {
    pub(crate) stream: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// When the last read completed (the reply time of every reply it completed).
    pub(crate) last_read: Instant,
}

impl<S: tokio::io::AsyncRead + Unpin> Conn<S> {
    pub(crate) fn new(stream: S) -> Self {
        Conn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            last_read: Instant::now(),
        }
    }

    /// The next complete reply: its offset in `buf` and its kind (offsets relative to it).
    pub(crate) async fn next_reply(&mut self) -> io::Result<(usize, ReplyKind)> {
        loop {
            if self.start < self.end {
                match parse_reply(&self.buf[self.start..self.end]) {
                    Ok(Some(r)) => {
                        let at = self.start;
                        self.start += r.len;
                        return Ok((at, r.kind));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                }
            }
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.end == self.buf.len() {
                if self.start > 0 {
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                } else {
                    let n = self.buf.len() * 2;
                    self.buf.resize(n, 0);
                }
            }
            let n = self.stream.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.end += n;
            self.last_read = Instant::now();
        }
    }

    /// The bytes of the reply [`Conn::next_reply`] just returned at `at` (valid until the next
    /// call).
    pub(crate) fn reply_bytes(&self, at: usize) -> &[u8] {
        &self.buf[at..self.start]
    }

    pub(crate) fn error_text(&self, at: usize, kind: ReplyKind) -> Option<String> {
        match kind {
            ReplyKind::Error { start, end } => {
                Some(String::from_utf8_lossy(&self.buf[at + start..at + end]).into_owned())
            }
            _ => None,
        }
    }
}

/// Per-thread measurements, merged at the end.
pub(crate) struct ThreadStats {
    pub(crate) hist: Histogram<u64>,
    /// Open loop: how late requests were written versus their intended time, ns.
    pub(crate) send_lag: Histogram<u64>,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) nils: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) conn_errors: Vec<String>,
    pub(crate) finished: Option<Instant>,
    prefill_errors: u64,
    prefill_first_error: Option<String>,
}

impl ThreadStats {
    pub(crate) fn new() -> Self {
        ThreadStats {
            // Nanoseconds, 1ns..1h, 3 significant digits; auto-resize beyond that.
            hist: {
                let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                    .expect("valid histogram bounds");
                h.auto(true);
                h
            },
            send_lag: {
                let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 2)
                    .expect("valid histogram bounds");
                h.auto(true);
                h
            },
            requests: 0,
            errors: 0,
            nils: 0,
            first_error: None,
            conn_errors: Vec::new(),
            finished: None,
            prefill_errors: 0,
            prefill_first_error: None,
        }
    }
}

/// Opens one connection (blocking), sets TCP_NODELAY and authenticates.
pub(crate) fn connect(addr: SocketAddr, auth: Option<&str>) -> io::Result<StdTcpStream> {
    let mut s = StdTcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_nodelay(true)?;
    if let Some(pw) = auth {
        roundtrip(&mut s, &crate::resp::command(&[b"AUTH", pw.as_bytes()]))
            .map_err(|e| io::Error::new(e.kind(), format!("AUTH failed: {e}")))?;
    }
    Ok(s)
}

/// Sends `cmd` on a blocking connection and reads one whole reply (5 s timeout); an error reply
/// becomes an error with its text.
pub(crate) fn roundtrip(s: &mut StdTcpStream, cmd: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(cmd)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_reply(&buf) {
            Ok(Some(r)) => {
                if let ReplyKind::Error { start, end } = r.kind {
                    return Err(io::Error::other(
                        String::from_utf8_lossy(&buf[start..end]).into_owned(),
                    ));
                }
                buf.truncate(r.len);
                s.set_read_timeout(None)?;
                return Ok(buf);
            }
            Ok(None) => continue,
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

/// SETs keys `index, index + stride, ...` below `keyspace`, pipelined, not measured.
/// `conns[i]` is primary `i` of `topology`, or the one target without it.
#[allow(clippy::too_many_arguments)]
async fn prefill_conn<S: AsyncRead + AsyncWrite + Unpin>(
    conns: &mut [Conn<S>],
    topology: Option<&Topology>,
    index: u64,
    stride: u64,
    keyspace: u64,
    key_offset: u64,
    value: &[u8],
    stats: &RefCell<ThreadStats>,
) -> io::Result<()> {
    let mut batch = Batch::new(conns.len(), 64 * 1024);
    let on_reply = |conn: &Conn<S>, at: usize, kind: ReplyKind| {
        if let ReplyKind::Error { .. } = kind {
            let mut st = stats.borrow_mut();
            st.prefill_errors += 1;
            if st.prefill_first_error.is_none() {
                st.prefill_first_error = conn.error_text(at, kind);
            }
        }
    };
    let mut key = index;
    while key < keyspace {
        batch.clear();
        let mut n = 0;
        while key < keyspace && n < PREFILL_BATCH {
            batch.push(topology, |out| {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                let k = write_key(out, key_offset + key);
                out.extend_from_slice(value);
                Some(k)
            });
            key += stride;
            n += 1;
        }
        batch.send(conns).await?;
        batch.replies(conns, &on_reply).await?;
    }
    Ok(())
}

/// The closed loop of one client connection: batches of `pipeline` requests, split by node
/// when there is a `topology` (`conns[i]` is primary `i`), else all to `conns[0]`.
async fn run_conn<S: AsyncRead + AsyncWrite + Unpin>(
    conns: &mut [Conn<S>],
    topology: Option<&Topology>,
    enc: &Encoder,
    pipeline: u64,
    seed: u64,
    shared: &Shared,
    stats: &RefCell<ThreadStats>,
) -> io::Result<()> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut batch = Batch::new(conns.len(), 16 * 1024);
    loop {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == DONE {
            break;
        }
        let measure = phase == MEASURE;
        let n = if measure {
            shared.claim(pipeline)
        } else {
            pipeline
        };
        if n == 0 {
            break;
        }
        batch.clear();
        for _ in 0..n {
            batch.push(topology, |out| enc.encode(&mut rng, out));
        }
        let sent = Instant::now();
        batch.send(conns).await?;
        if !measure {
            batch.replies(conns, &|_, _, _| {}).await?;
            continue;
        }
        batch
            .replies(conns, &|conn, at, kind| {
                let mut st = stats.borrow_mut();
                let ns = conn.last_read.duration_since(sent).as_nanos() as u64;
                st.hist.saturating_record(ns.max(1));
                match kind {
                    ReplyKind::Value => {}
                    ReplyKind::Nil => st.nils += 1,
                    ReplyKind::Error { .. } => {
                        st.errors += 1;
                        if st.first_error.is_none() {
                            st.first_error = conn.error_text(at, kind);
                        }
                    }
                }
            })
            .await?;
        stats.borrow_mut().requests += n;
    }
    Ok(())
}

/// The connections of one client thread: `(connection index, one socket per node)`.
type Conns<S> = Vec<(u64, Vec<Conn<S>>)>;

/// One thread's connections, over plain TCP or TLS.
enum ThreadConns {
    Plain(Conns<TcpStream>),
    Tls(Conns<TlsStream<TcpStream>>),
}

/// What every task of a client thread shares.
struct ThreadCtx {
    cfg: Arc<LoadConfig>,
    shared: Arc<Shared>,
    topology: Option<Arc<Topology>>,
    stats: Rc<RefCell<ThreadStats>>,
    enc: Rc<Encoder>,
    seed: u64,
}

/// Sends `AUTH pw` on `conn` and reads its reply; an error reply is an error.
async fn auth<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>, pw: &str) -> io::Result<()> {
    conn.stream
        .write_all(&crate::resp::command(&[b"AUTH", pw.as_bytes()]))
        .await?;
    conn.stream.flush().await?;
    let (at, kind) = conn.next_reply().await?;
    match conn.error_text(at, kind) {
        Some(e) => Err(io::Error::other(format!("AUTH failed: {e}"))),
        None => Ok(()),
    }
}

/// The TLS handshake (then AUTH) of every connection, concurrently; failed connections are
/// left out and counted in `stats.conn_errors`.
fn tls_handshakes(
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    ctx: &ThreadCtx,
    tls: &Arc<TlsClient>,
    conns: Conns<TcpStream>,
) -> Conns<TlsStream<TcpStream>> {
    local.block_on(rt, async {
        let mut handles = Vec::new();
        for (i, socks) in conns {
            let tls = tls.clone();
            let auth_pw = ctx.cfg.auth.clone();
            handles.push((
                i,
                tokio::task::spawn_local(async move {
                    let mut out = Vec::with_capacity(socks.len());
                    for c in socks {
                        let mut conn = Conn::new(tls.connect(c.stream).await?);
                        if let Some(pw) = &auth_pw {
                            auth(&mut conn, pw).await?;
                        }
                        out.push(conn);
                    }
                    Ok::<_, io::Error>(out)
                }),
            ));
        }
        let mut out = Vec::new();
        for (i, h) in handles {
            match h.await.expect("TLS handshake task") {
                Ok(c) => out.push((i, c)),
                Err(e) => ctx
                    .stats
                    .borrow_mut()
                    .conn_errors
                    .push(format!("connection {i} (TLS): {e}")),
            }
        }
        out
    })
}

/// Prefill (each connection a slice of the keyspace), not measured; connections that failed
/// are left out and counted in `stats.conn_errors`.
fn prefill_all<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    ctx: &ThreadCtx,
    conns: Conns<S>,
) -> Conns<S> {
    local.block_on(rt, async {
        let mut handles = Vec::new();
        for (i, mut conn) in conns {
            let stats = ctx.stats.clone();
            let cfg = ctx.cfg.clone();
            let enc = ctx.enc.clone();
            let topology = ctx.topology.clone();
            handles.push(tokio::task::spawn_local(async move {
                let stride = cfg.connections as u64;
                let r = prefill_conn(
                    &mut conn,
                    topology.as_deref(),
                    i,
                    stride,
                    cfg.keyspace,
                    cfg.key_offset,
                    &enc.value,
                    &stats,
                )
                .await;
                (i, conn, r)
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            let (i, conn, r) = h.await.expect("prefill task");
            match r {
                Ok(()) => out.push((i, conn)),
                Err(e) => ctx
                    .stats
                    .borrow_mut()
                    .conn_errors
                    .push(format!("connection {i} (prefill): {e}")),
            }
        }
        out
    })
}

/// The closed loop of every connection until the measured phase ends.
fn closed_loop_all<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    ctx: &ThreadCtx,
    conns: Conns<S>,
) {
    local.block_on(rt, async {
        let mut handles = Vec::new();
        for (i, mut conn) in conns {
            let stats = ctx.stats.clone();
            let shared = ctx.shared.clone();
            let enc = ctx.enc.clone();
            let pipeline = ctx.cfg.pipeline as u64;
            let conn_seed = ctx.seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let topology = ctx.topology.clone();
            handles.push(tokio::task::spawn_local(async move {
                let r = run_conn(
                    &mut conn,
                    topology.as_deref(),
                    &enc,
                    pipeline,
                    conn_seed,
                    &shared,
                    &stats,
                )
                .await;
                let now = Instant::now();
                let mut st = stats.borrow_mut();
                st.finished = Some(st.finished.map_or(now, |f| f.max(now)));
                if let Err(e) = r {
                    st.conn_errors.push(format!("connection {i}: {e}"));
                }
            }));
        }
        for h in handles {
            h.await.expect("connection task");
        }
    });
}

fn thread_main(
    cfg: Arc<LoadConfig>,
    shared: Arc<Shared>,
    barrier: Arc<Barrier>,
    streams: Vec<(u64, Vec<StdTcpStream>)>,
    topology: Option<Arc<Topology>>,
    seed: u64,
) -> ThreadStats {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current_thread runtime");
    let local = tokio::task::LocalSet::new();
    let ctx = ThreadCtx {
        enc: Rc::new(Encoder::new(
            &cfg.mix,
            cfg.keyspace,
            cfg.key_offset,
            cfg.value_size,
        )),
        cfg,
        shared,
        topology,
        stats: Rc::new(RefCell::new(ThreadStats::new())),
        seed,
    };

    let plain: Conns<TcpStream> = {
        let _guard = rt.enter();
        streams
            .into_iter()
            .map(|(i, socks)| {
                let conns = socks
                    .into_iter()
                    .map(|s| Conn::new(TcpStream::from_std(s).expect("register socket with tokio")))
                    .collect();
                (i, conns)
            })
            .collect()
    };
    // TLS handshakes and the prefill happen before the barrier: not measured.
    let mut conns = match &ctx.cfg.tls {
        None => ThreadConns::Plain(plain),
        Some(tls) => ThreadConns::Tls(tls_handshakes(&rt, &local, &ctx, tls, plain)),
    };
    if ctx.cfg.prefill {
        conns = match conns {
            ThreadConns::Plain(c) => ThreadConns::Plain(prefill_all(&rt, &local, &ctx, c)),
            ThreadConns::Tls(c) => ThreadConns::Tls(prefill_all(&rt, &local, &ctx, c)),
        };
    }
    if !ctx.stats.borrow().conn_errors.is_empty() {
        ctx.shared.phase.store(DONE, Ordering::Relaxed);
    }

    barrier.wait();

    match conns {
        ThreadConns::Plain(conns) => match ctx.cfg.rate {
            Some(rate) => {
                let sched = crate::openloop::Schedule::new(rate, ctx.cfg.connections);
                // The open loop runs its own epoll loop on this thread: hand the sockets back.
                let mut socks = Vec::with_capacity(conns.len());
                {
                    let _guard = rt.enter();
                    let mut st = ctx.stats.borrow_mut();
                    // One socket per connection: `run` refuses `cluster` with `rate`.
                    for (i, conn) in conns
                        .into_iter()
                        .flat_map(|(i, c)| c.into_iter().map(move |c| (i, c)))
                    {
                        match conn.stream.into_std() {
                            Ok(s) => socks.push((i, s)),
                            Err(e) => st.conn_errors.push(format!("connection {i}: {e}")),
                        }
                    }
                }
                crate::openloop::run_thread(
                    socks,
                    &ctx.enc,
                    sched,
                    &ctx.shared,
                    &mut ctx.stats.borrow_mut(),
                );
            }
            None => closed_loop_all(&rt, &local, &ctx, conns),
        },
        ThreadConns::Tls(conns) => closed_loop_all(&rt, &local, &ctx, conns),
    }
    let ThreadCtx { stats, enc, .. } = ctx;
    drop(enc);
    Rc::try_unwrap(stats)
        .ok()
        .expect("all tasks finished")
        .into_inner()
}

/// CPU time of this process and of every `cfg.pids` process (`None`: unreadable), in that order.
pub(crate) fn cpu_snapshot(cfg: &LoadConfig) -> Vec<Option<Duration>> {
    let mut v = vec![procstat::cpu_time("self").ok()];
    for p in &cfg.pids {
        v.push(procstat::cpu_time(&p.pid.to_string()).ok());
    }
    v
}

/// Runs one load and returns its report. Progress messages go to stderr.
pub fn run(cfg: LoadConfig) -> io::Result<Report> {
    let cfg = Arc::new(cfg);
    let threads = cfg.threads.clamp(1, cfg.connections);
    if cfg.tls.is_some() && (cfg.rate.is_some() || cfg.cluster) {
        return Err(io::Error::other(
            "TLS runs closed-loop against one target only (no --rate, no --cluster)",
        ));
    }
    let topology = if cfg.cluster {
        if cfg.rate.is_some() {
            return Err(io::Error::other(
                "a cluster target runs closed-loop only (no --rate)",
            ));
        }
        let t = Topology::discover(cfg.addr, cfg.auth.as_deref())?;
        if !cfg.quiet {
            eprintln!(
                "cluster: {} primaries ({})",
                t.primaries().len(),
                t.primaries()
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Some(Arc::new(t))
    } else {
        None
    };
    let nodes = topology.as_ref().map_or(vec![cfg.addr], |t| t.primaries());

    // Connect everything up front so that failures are reported before any load.
    let mut per_thread: Vec<Vec<(u64, Vec<StdTcpStream>)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for i in 0..cfg.connections {
        let socks = nodes
            .iter()
            .map(|&addr| {
                // Over TLS, AUTH follows the handshake (in the client thread).
                let auth = cfg.auth.as_deref().filter(|_| cfg.tls.is_none());
                let s = connect(addr, auth)?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e: io::Error| {
                io::Error::new(
                    e.kind(),
                    format!("connecting to {} (connection {i}): {e}", cfg.target),
                )
            })?;
        per_thread[i % threads].push((i as u64, socks));
    }

    let shared = Arc::new(Shared {
        phase: AtomicU8::new(if cfg.warmup.is_some() {
            WARMUP
        } else {
            MEASURE
        }),
        claimed: AtomicU64::new(0),
        limit: match cfg.stop {
            Stop::Requests(n) => n,
            Stop::Duration(_) => u64::MAX,
        },
    });
    let barrier = Arc::new(Barrier::new(threads + 1));
    let base_seed = fastrand::u64(..);
    let prefill_started = Instant::now();
    if cfg.prefill && !cfg.quiet {
        eprintln!(
            "prefilling {} keys ({}-byte values) over {} connections...",
            cfg.keyspace, cfg.value_size, cfg.connections
        );
    }
    let handles: Vec<_> = per_thread
        .into_iter()
        .enumerate()
        .map(|(t, streams)| {
            let cfg = cfg.clone();
            let shared = shared.clone();
            let barrier = barrier.clone();
            let seed = base_seed.wrapping_add(t as u64);
            let topology = topology.clone();
            std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn(move || thread_main(cfg, shared, barrier, streams, topology, seed))
                .expect("spawn bench thread")
        })
        .collect();

    barrier.wait();
    let aborted = shared.phase.load(Ordering::Relaxed) == DONE;
    if cfg.prefill && !aborted && !cfg.quiet {
        eprintln!(
            "prefill done in {:.2} s",
            prefill_started.elapsed().as_secs_f64()
        );
    }
    if !aborted && let Some(w) = cfg.warmup {
        if !cfg.quiet {
            eprintln!("warming up for {}...", humantime::format_duration(w));
        }
        std::thread::sleep(w);
    }
    let cpu_before = cpu_snapshot(&cfg);
    let machine_before = procstat::machine_busy().ok();
    let start = Instant::now();
    if !aborted {
        shared.phase.store(MEASURE, Ordering::Relaxed);
        if let Stop::Duration(d) = cfg.stop {
            // Sleep in slices so that a run whose connections all failed ends early.
            let deadline = start + d;
            loop {
                let now = Instant::now();
                if now >= deadline || handles.iter().all(|h| h.is_finished()) {
                    break;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
            }
            shared.phase.store(DONE, Ordering::Relaxed);
        }
    }

    let mut results = Vec::new();
    for h in handles {
        match h.join() {
            Ok(r) => results.push(r),
            Err(_) => return Err(io::Error::other("a bench thread panicked")),
        }
    }
    let mut report = finish_report(&cfg, threads, results, start, cpu_before, machine_before);
    if cfg.cluster {
        report.target = format!(
            "{} (Redis Cluster seed; {} primaries)",
            cfg.target,
            nodes.len()
        );
    }
    Ok(report)
}

/// The report of a run whose threads returned `results`, measured from `start` (when the
/// measured phase began) with CPU snapshots `cpu_before` ([`cpu_snapshot`]) and
/// `machine_before` taken then; CPU and machine counters are read again now.
pub(crate) fn finish_report(
    cfg: &LoadConfig,
    threads: usize,
    results: Vec<ThreadStats>,
    start: Instant,
    cpu_before: Vec<Option<Duration>>,
    machine_before: Option<Duration>,
) -> Report {
    let end = results
        .iter()
        .filter_map(|r| r.finished)
        .max()
        .unwrap_or_else(Instant::now);
    let cpu_after = cpu_snapshot(cfg);
    let machine_after = procstat::machine_busy().ok();
    let elapsed = end.saturating_duration_since(start);

    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    hist.auto(true);
    let mut lag =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid histogram bounds");
    lag.auto(true);
    let mut report = Report::new(cfg, threads);
    for r in results {
        hist.add(&r.hist).expect("histogram merge");
        lag.add(&r.send_lag).expect("histogram merge");
        report.requests += r.requests;
        report.errors += r.errors;
        report.nil_replies += r.nils;
        report.prefill_errors += r.prefill_errors;
        if report.first_error.is_none() {
            report.first_error = r.first_error;
        }
        if report.prefill_first_error.is_none() {
            report.prefill_first_error = r.prefill_first_error;
        }
        report.connection_errors.extend(r.conn_errors);
    }
    report.set_timing(elapsed, &hist);
    if cfg.rate.is_some() && !lag.is_empty() {
        report.send_lag_us = Some(crate::report::SendLag {
            p50: lag.value_at_quantile(0.5) as f64 / 1000.0,
            p99: lag.value_at_quantile(0.99) as f64 / 1000.0,
            max: lag.max() as f64 / 1000.0,
        });
    }
    if let (Some(b), Some(a)) = (machine_before, machine_after) {
        report.machine_busy_us = Some(a.saturating_sub(b).as_micros() as u64);
    }

    let labels = std::iter::once(("respite-bench".to_string(), Some(std::process::id())))
        .chain(cfg.pids.iter().map(|p| (p.label.clone(), Some(p.pid))));
    for ((label, pid), (before, after)) in labels.zip(cpu_before.into_iter().zip(cpu_after)) {
        let cpu = match (before, after) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        report
            .cpu
            .push(CpuUsage::new(label, pid, cpu, report.requests, elapsed));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mix::parse_mix;

    #[test]
    fn key_encoding() {
        for n in [0u64, 7, 10, 99_999, 123_456_789, u64::MAX] {
            let mut out = Vec::new();
            write_key(&mut out, n);
            let key = format!("key:{n}");
            assert_eq!(out, format!("${}\r\n{key}\r\n", key.len()).into_bytes());
        }
    }

    #[test]
    fn encodes_valid_commands() {
        let enc = Encoder::new(&parse_mix("get,set,mget:3,mset:2,ping").unwrap(), 100, 0, 5);
        let mut rng = fastrand::Rng::with_seed(1);
        let mut out = Vec::new();
        for _ in 0..200 {
            enc.encode(&mut rng, &mut out);
        }
        // Requests are RESP arrays of bulk strings, so the reply reader frames them too.
        let mut pos = 0;
        let mut count = 0;
        while pos < out.len() {
            let r = parse_reply(&out[pos..]).unwrap().expect("complete command");
            pos += r.len;
            count += 1;
        }
        assert_eq!(count, 200);
        let s = String::from_utf8(out).unwrap();
        for cmd in ["GET", "SET", "MGET", "MSET", "PING"] {
            assert!(s.contains(&format!("\r\n{cmd}\r\n")), "{cmd}");
        }
        assert!(s.contains("*4\r\n$4\r\nMGET\r\n"));
        assert!(s.contains("*5\r\n$4\r\nMSET\r\n"));
        assert!(s.contains("$5\r\nxxxxx\r\n"));
    }

    #[test]
    fn weighted_choice_follows_weights() {
        let enc = Encoder::new(&parse_mix("get:80,set:20").unwrap(), 10, 0, 1);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut out = Vec::new();
        for _ in 0..10_000 {
            enc.encode(&mut rng, &mut out);
        }
        let s = String::from_utf8(out).unwrap();
        let sets = s.matches("\r\nSET\r\n").count();
        assert!((1500..2500).contains(&sets), "{sets}");
    }

    #[test]
    fn budget_claims_exactly() {
        let s = Shared {
            phase: AtomicU8::new(MEASURE),
            claimed: AtomicU64::new(0),
            limit: 10,
        };
        assert_eq!(s.claim(4), 4);
        assert_eq!(s.claim(4), 4);
        assert_eq!(s.claim(4), 2);
        assert_eq!(s.claim(4), 0);
    }
}

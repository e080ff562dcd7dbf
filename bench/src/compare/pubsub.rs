//! The pub/sub fan-out cases of `compare` (`--cases pubsub-1,pubsub-100,pubsub-1000`): one
//! publisher and N subscribers on one channel, against Redis direct and through Respite, whose
//! workers each subscribe a channel once upstream and write every message they read to all their
//! local subscribers; and the memory a subscriber costs (`--pubsub-memory`).
//!
//! A run: N connections SUBSCRIBE to a channel of their own run (each confirmed before the
//! next), then one load thread (a current-thread tokio runtime) runs the publisher and the N
//! subscribers as tasks. The publisher PUBLISHes [`PAYLOAD`]-byte payloads
//! (`<sequence number><send time>`, 16 decimal digits each) with at most `pipeline` in flight,
//! refilled by halves. Every subscriber reads its `*3 message <channel> <payload>` frames and
//! checks that the sequence numbers go up by exactly one: a lower or equal number counts as
//! reordered, a skipped one as missing, and both as errors of the run. At the end the publisher
//! sends an end marker, and every subscriber must have read every message published before it
//! (within [`DRAIN_TIMEOUT`]).
//!
//! Flow control: the publisher also stays at most [`WINDOW`] messages ahead of the slowest
//! subscriber. Without it, a publisher through Respite would run far ahead of the delivery (its
//! PUBLISH is answered once the one upstream subscription has the message), the subscribers'
//! output buffers would grow until the pub/sub output buffer limit cuts them off (Redis does the
//! same when its subscribers read slower than it publishes), and "published/s" would measure
//! queueing, not delivery. With it, both targets publish as fast as all N subscribers can be
//! served.
//!
//! The unit of a run's report is one message delivered to one subscriber: `rps` is delivered
//! messages/s (the sum over subscribers), latency is from the PUBLISH write to the subscriber's
//! read, and CPU µs per request is CPU µs per delivered message. Against Respite the admin
//! `/stats` are read when the measured phase starts and ends: its upstream subscriber
//! connections and channels (gauges) and the messages it read from Redis and wrote to
//! subscribers (counters).

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::Output;
use super::cases::{Case, Group, Workload};
use super::metrics::{RunRecord, Summary, median};
use super::sysstat::rss_kib;
use super::table::{fmt_cpu, fmt_ratio, fmt_rps, fmt_us};
use crate::load::{self, Conn, DONE, LoadConfig, MEASURE, Stop, ThreadStats, WARMUP};
use crate::report::{CpuUsage, Report};
use crate::resp::{ReplyKind, command};

/// Bytes of a message's payload: its sequence number (from 1) and its send time (ns since the
/// run's thread started), 16 decimal digits each.
pub const PAYLOAD: usize = 32;
/// Most messages the publisher may be ahead of the slowest subscriber.
pub const WINDOW: u64 = 1024;
/// How long subscribers have, once the publisher sent its end marker, to read the rest.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// A PUBLISH reply slower than this, or a window that does not move for this long, fails the
/// run: a lost wake-up must not hang it.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The end marker's payload starts with this (padded to [`PAYLOAD`] with `-`).
const END: &[u8] = b"END";
/// The `/stats` query [`pubsub_stats`] makes: `pubsub.*` and `redis.*.pubsub_*`.
const STATS_PATH: &str = "/stats?filter=pubsub";

/// Numbers the runs' channels, so that no run sees another's messages.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Respite's pub/sub stats at one moment, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PubSubStats {
    /// `pubsub.upstream_cx_active`: subscriber connections to Redis open now.
    pub upstream_cx_active: i64,
    /// `pubsub.upstream_channels`: channels subscribed upstream now (a channel held by two
    /// workers counts twice).
    pub upstream_channels: i64,
    /// `pubsub.messages_in`: messages read from Redis since start.
    pub messages_in: u64,
    /// `pubsub.messages_out`: messages written to local subscribers since start.
    pub messages_out: u64,
    /// `redis.*.pubsub_slow_subscriber_close`: subscribers closed since start for holding more
    /// than the pub/sub output buffer limit.
    pub slow_closes: u64,
}

/// Sums [`PubSubStats`] out of `/stats` text (`name: value` lines).
pub fn parse_pubsub_stats(text: &str) -> PubSubStats {
    let mut s = PubSubStats::default();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Ok(v) = value.trim().parse::<i64>() else {
            continue;
        };
        let counter = v.max(0) as u64;
        match name {
            "pubsub.upstream_cx_active" => s.upstream_cx_active += v,
            "pubsub.upstream_channels" => s.upstream_channels += v,
            "pubsub.messages_in" => s.messages_in += counter,
            "pubsub.messages_out" => s.messages_out += counter,
            n if n.starts_with("redis.") && n.ends_with(".pubsub_slow_subscriber_close") => {
                s.slow_closes += counter;
            }
            _ => {}
        }
    }
    s
}

/// Reads [`PubSubStats`] from the admin endpoint at `admin`.
pub fn pubsub_stats(admin: SocketAddr) -> Result<PubSubStats, String> {
    respite_tools::admin_client::get(admin, STATS_PATH).map(|t| parse_pubsub_stats(&t))
}

/// Respite's side of one measured run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RespiteFanOut {
    /// `pubsub.upstream_cx_active` when the measured phase started.
    pub upstream_cx_active: i64,
    /// `pubsub.upstream_channels` when the measured phase started: 1 per worker that has
    /// subscribers of the run's channel (older channels not yet unsubscribed included).
    pub upstream_channels: i64,
    /// `pubsub.messages_in` over the measured phase, per second: messages read from Redis.
    pub messages_in_per_s: f64,
    /// `pubsub.messages_out` over the measured phase, per second: messages written to clients.
    pub messages_out_per_s: f64,
    /// `pubsub_slow_subscriber_close` over the measured phase.
    pub slow_closes: u64,
}

/// What one pub/sub run measured besides its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FanOutRun {
    /// N.
    pub subscribers: usize,
    /// PUBLISH replies read in the measured phase, per second.
    pub published_per_s: f64,
    /// Messages read by all subscribers together in the measured phase, per second (the run's
    /// `rps`).
    pub delivered_per_s: f64,
    /// Times the publisher waited for the slowest subscriber to come within [`WINDOW`].
    pub window_waits: u64,
    /// Messages whose sequence number was not above the one before (all phases).
    pub reordered: u64,
    /// Sequence numbers a subscriber never read (skipped, or not read by the end marker).
    pub missing: u64,
    /// Subscribers whose connection failed or closed before the end marker.
    pub cut_off: u64,
    /// Respite's stats (`None`: Redis direct).
    pub respite: Option<RespiteFanOut>,
}

impl FanOutRun {
    /// Reordered + missing + cut off.
    pub fn order_errors(&self) -> u64 {
        self.reordered + self.missing + self.cut_off
    }
}

/// `*3\r\n$9\r\nsubscribe\r\n$<n>\r\n<channel>\r\n:1\r\n`: the confirmation of a client's first
/// SUBSCRIBE.
fn confirmation(channel: &[u8]) -> Vec<u8> {
    let mut v = format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n", channel.len()).into_bytes();
    v.extend_from_slice(channel);
    v.extend_from_slice(b"\r\n:1\r\n");
    v
}

/// Everything of a message frame on `channel` before its payload:
/// `*3\r\n$7\r\nmessage\r\n$<n>\r\n<channel>\r\n$32\r\n`.
fn message_prefix(channel: &[u8]) -> Vec<u8> {
    let mut v = format!("*3\r\n$7\r\nmessage\r\n${}\r\n", channel.len()).into_bytes();
    v.extend_from_slice(channel);
    v.extend_from_slice(format!("\r\n${PAYLOAD}\r\n").as_bytes());
    v
}

/// Everything of a PUBLISH to `channel` before its payload.
fn publish_prefix(channel: &[u8]) -> Vec<u8> {
    let mut v = format!("*3\r\n$7\r\nPUBLISH\r\n${}\r\n", channel.len()).into_bytes();
    v.extend_from_slice(channel);
    v.extend_from_slice(format!("\r\n${PAYLOAD}\r\n").as_bytes());
    v
}

/// Appends message `seq`'s payload (sent `sent_ns` after the run's start) and its CRLF.
fn put_payload(out: &mut Vec<u8>, seq: u64, sent_ns: u64) {
    let _ = write!(out, "{seq:016}{sent_ns:016}\r\n");
}

/// The end marker's payload and its CRLF.
fn end_payload() -> Vec<u8> {
    let mut v = END.to_vec();
    v.resize(PAYLOAD, b'-');
    v.extend_from_slice(b"\r\n");
    v
}

/// 16 ASCII digits as a number.
fn digits(b: &[u8]) -> Option<u64> {
    if b.len() != 16 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// A payload: its sequence number and send time, or `None` for the end marker.
#[derive(Debug, PartialEq, Eq)]
enum Payload {
    Message { seq: u64, sent_ns: u64 },
    End,
}

fn parse_payload(p: &[u8]) -> Option<Payload> {
    if p.len() != PAYLOAD {
        return None;
    }
    if p.starts_with(END) {
        return Some(Payload::End);
    }
    Some(Payload::Message {
        seq: digits(&p[..16])?,
        sent_ns: digits(&p[16..])?,
    })
}

/// The publisher's window over the subscribers (one thread).
struct Flow {
    /// The last sequence number each subscriber read (`u64::MAX` once it left).
    at: Vec<Cell<u64>>,
    /// The number the publisher waits for every subscriber to reach (0: not waiting).
    want: Cell<u64>,
    /// Subscribers still below `want`.
    below: Cell<usize>,
    /// Woken when `below` reaches 0.
    wake: Notify,
}

impl Flow {
    fn new(subscribers: usize) -> Flow {
        Flow {
            at: (0..subscribers).map(|_| Cell::new(0)).collect(),
            want: Cell::new(0),
            below: Cell::new(0),
            wake: Notify::new(),
        }
    }

    /// Subscriber `i` has read up to `seq` (`u64::MAX`: it left).
    fn reached(&self, i: usize, seq: u64) {
        let old = self.at[i].replace(seq);
        let want = self.want.get();
        if want > 0 && old < want && seq >= want {
            let below = self.below.get().saturating_sub(1);
            self.below.set(below);
            if below == 0 {
                self.wake.notify_one();
            }
        }
    }

    /// The lowest number read by a subscriber still there (`u64::MAX` when none is).
    fn low(&self) -> u64 {
        self.at.iter().map(Cell::get).min().unwrap_or(u64::MAX)
    }

    /// Starts waiting until every subscriber read `want`; returns how many are below it.
    fn wait_for(&self, want: u64) -> usize {
        let below = self.at.iter().filter(|a| a.get() < want).count();
        self.want.set(want);
        self.below.set(below);
        below
    }

    fn stop_waiting(&self) {
        self.want.set(0);
        self.below.set(0);
    }
}

/// Counts of a run's thread besides its [`ThreadStats`].
#[derive(Debug, Default)]
struct Counts {
    published: u64,
    window_waits: u64,
    reordered: u64,
    missing: u64,
    cut_off: u64,
}

/// What the tasks of a run's thread share.
struct Shared {
    phase: Arc<AtomicU8>,
    /// Time 0 of the payloads' send times.
    base: Instant,
    flow: Flow,
    counts: RefCell<Counts>,
    stats: RefCell<ThreadStats>,
    /// The last sequence number published, set when the end marker goes out.
    last_seq: Cell<u64>,
}

impl Shared {
    fn measuring(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == MEASURE
    }

    /// Counts one error of the run, keeping the first message.
    fn error(&self, msg: impl FnOnce() -> String) {
        let mut st = self.stats.borrow_mut();
        st.errors += 1;
        if st.first_error.is_none() {
            st.first_error = Some(msg());
        }
    }

    /// Subscriber `i` stopped before the end marker (`e`): counted as cut off, with the
    /// messages it did not read.
    fn cut_off(&self, i: usize, e: &dyn std::fmt::Display) {
        let read = self.flow.at[i].get();
        self.flow.reached(i, u64::MAX);
        let mut c = self.counts.borrow_mut();
        c.cut_off += 1;
        c.missing += self.last_seq.get().saturating_sub(read);
        self.stats
            .borrow_mut()
            .conn_errors
            .push(format!("subscriber {i}: {e}"));
    }
}

/// Runs `case` (a [`Workload::PubSub`] case) with `cfg` (its mix is ignored; `stop` must be a
/// duration; `connections` is the publisher plus N subscribers, `pipeline` the PUBLISHes in
/// flight); `admin` is Respite's admin address, read for [`RespiteFanOut`]. The report counts
/// delivered messages.
pub fn run(
    cfg: LoadConfig,
    case: &Case,
    admin: Option<SocketAddr>,
) -> io::Result<(Report, FanOutRun)> {
    let Stop::Duration(duration) = cfg.stop else {
        return Err(io::Error::other("a pub/sub case runs for a duration"));
    };
    if case.workload != Workload::PubSub || cfg.connections < 2 {
        return Err(io::Error::other(
            "not a pub/sub case (a publisher and at least one subscriber)",
        ));
    }
    let n = cfg.connections - 1;
    let stats = || {
        admin
            .map(pubsub_stats)
            .transpose()
            .map_err(io::Error::other)
    };
    if let Some(a) = admin {
        // The subscribers of earlier runs have left; their channels should be gone upstream
        // before this run's gauge is read. Not a failure if one lingers: the gauge shows it.
        let deadline = Instant::now() + Duration::from_secs(3);
        while pubsub_stats(a).map_err(io::Error::other)?.upstream_channels > 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let channel = format!(
        "bench:pubsub:{}:{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let subscribe = command(&[b"SUBSCRIBE", channel.as_bytes()]);
    let confirm = confirmation(channel.as_bytes());
    let mut subs = Vec::with_capacity(n);
    for i in 0..n {
        let fail = |e: String| io::Error::other(format!("{} subscriber {i}: {e}", cfg.target));
        let mut s =
            load::connect(cfg.addr, cfg.auth.as_deref()).map_err(|e| fail(e.to_string()))?;
        // Confirmed before the next, so that every subscriber gets every message.
        let got = super::stateful::exchange(&mut s, &subscribe, 1).map_err(fail)?;
        if got != confirm {
            return Err(fail(format!(
                "unexpected SUBSCRIBE reply {:?}",
                String::from_utf8_lossy(&got)
            )));
        }
        s.set_nonblocking(true)?;
        subs.push(s);
    }
    let publisher = load::connect(cfg.addr, cfg.auth.as_deref())
        .map_err(|e| io::Error::new(e.kind(), format!("{} publisher: {e}", cfg.target)))?;
    publisher.set_nonblocking(true)?;

    let phase = Arc::new(AtomicU8::new(WARMUP));
    let barrier = Arc::new(Barrier::new(2));
    let thread = {
        let (phase, barrier, depth) = (phase.clone(), barrier.clone(), cfg.pipeline.max(1));
        std::thread::Builder::new()
            .name("bench-pubsub".into())
            .spawn(move || thread_main(publisher, subs, channel, depth, phase, &barrier))?
    };
    barrier.wait();
    if let Some(w) = cfg.warmup {
        std::thread::sleep(w);
    }
    let at_start = match stats() {
        Ok(s) => s,
        Err(e) => {
            // Stop the load before giving up.
            phase.store(DONE, Ordering::Relaxed);
            let _ = thread.join();
            return Err(e);
        }
    };
    let cpu_before = load::cpu_snapshot(&cfg);
    let machine_before = crate::procstat::machine_busy().ok();
    let start = Instant::now();
    phase.store(MEASURE, Ordering::Relaxed);
    let deadline = start + duration;
    while !thread.is_finished() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
    // The measured phase ends here: the messages read after it (the drain up to the end
    // marker) and the CPU they cost are not counted.
    let at_end = stats();
    let cpu_after = load::cpu_snapshot(&cfg);
    let machine_after = crate::procstat::machine_busy().ok();
    let end = Instant::now();
    phase.store(DONE, Ordering::Relaxed);
    let (mut results, counts) = thread
        .join()
        .map_err(|_| io::Error::other("the pub/sub load thread panicked"))?;
    let at_end = at_end?;
    results.finished = Some(end);
    let mut report = load::finish_report(
        &cfg,
        1,
        vec![results],
        start,
        cpu_before.clone(),
        machine_before,
    );
    report.params.mix = case.mix.to_string();
    cpu_between(
        &mut report,
        &cpu_before,
        &cpu_after,
        machine_before,
        machine_after,
    );
    let secs = report.elapsed_s.max(1e-9);
    let respite = match (at_start, at_end) {
        (Some(s), Some(e)) => Some(RespiteFanOut {
            upstream_cx_active: s.upstream_cx_active,
            upstream_channels: s.upstream_channels,
            messages_in_per_s: e.messages_in.saturating_sub(s.messages_in) as f64 / secs,
            messages_out_per_s: e.messages_out.saturating_sub(s.messages_out) as f64 / secs,
            slow_closes: e.slow_closes.saturating_sub(s.slow_closes),
        }),
        _ => None,
    };
    let fan_out = FanOutRun {
        subscribers: n,
        published_per_s: counts.published as f64 / secs,
        delivered_per_s: report.rps,
        window_waits: counts.window_waits,
        reordered: counts.reordered,
        missing: counts.missing,
        cut_off: counts.cut_off,
        respite,
    };
    Ok((report, fan_out))
}

/// Replaces the CPU figures of `report` (which [`load::finish_report`] read after the drain)
/// by the ones between the snapshots `before` and `after` ([`load::cpu_snapshot`]) and the
/// machine's busy time `machine_before`, `machine_after`.
fn cpu_between(
    report: &mut Report,
    before: &[Option<Duration>],
    after: &[Option<Duration>],
    machine_before: Option<Duration>,
    machine_after: Option<Duration>,
) {
    let elapsed = Duration::from_secs_f64(report.elapsed_s);
    let requests = report.requests;
    for (c, (b, a)) in report.cpu.iter_mut().zip(before.iter().zip(after)) {
        let cpu = match (b, a) {
            (Some(b), Some(a)) => Some(a.saturating_sub(*b)),
            _ => None,
        };
        *c = CpuUsage::new(std::mem::take(&mut c.label), c.pid, cpu, requests, elapsed);
    }
    report.machine_busy_us = match (machine_before, machine_after) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b).as_micros() as u64),
        _ => None,
    };
}

fn thread_main(
    publisher: StdTcpStream,
    subs: Vec<StdTcpStream>,
    channel: String,
    depth: usize,
    phase: Arc<AtomicU8>,
    barrier: &Barrier,
) -> (ThreadStats, Counts) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current_thread runtime");
    let local = tokio::task::LocalSet::new();
    let register = |s| Conn::new(TcpStream::from_std(s).expect("register socket with tokio"));
    let (publisher, subs): (Conn, Vec<Conn>) = {
        let _guard = rt.enter();
        (
            register(publisher),
            subs.into_iter().map(register).collect(),
        )
    };
    let shared = Rc::new(Shared {
        phase,
        base: Instant::now(),
        flow: Flow::new(subs.len()),
        counts: RefCell::default(),
        stats: RefCell::new(ThreadStats::new()),
        last_seq: Cell::new(0),
    });
    let channel: Rc<[u8]> = channel.into_bytes().into();
    barrier.wait();
    local.block_on(&rt, async {
        let mut subscribers = Vec::new();
        for (i, mut conn) in subs.into_iter().enumerate() {
            let (sh, channel) = (shared.clone(), channel.clone());
            subscribers.push(tokio::task::spawn_local(async move {
                match subscriber(&mut conn, i, &channel, &sh).await {
                    Ok(()) => sh.flow.reached(i, u64::MAX),
                    Err(e) => sh.cut_off(i, &e),
                }
            }));
        }
        let mut conn = publisher;
        let sh = &shared;
        let mut aborted = Vec::new();
        match publish(&mut conn, &channel, depth, sh).await {
            Ok(()) => {
                // Every subscriber has until the deadline to read the rest and the end marker.
                let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
                for (i, mut h) in subscribers.into_iter().enumerate() {
                    if tokio::time::timeout_at(deadline, &mut h).await.is_err() {
                        h.abort();
                        aborted.push(h);
                        sh.cut_off(
                            i,
                            &format!(
                                "no end marker within {} s of the publisher's; last message \
                                 read {} of {}",
                                DRAIN_TIMEOUT.as_secs(),
                                sh.flow.at[i].get(),
                                sh.last_seq.get()
                            ),
                        );
                    }
                }
            }
            Err(e) => {
                // The run is failed by the publisher; its subscribers just stop.
                sh.stats
                    .borrow_mut()
                    .conn_errors
                    .push(format!("publisher: {e}"));
                for h in &subscribers {
                    h.abort();
                }
                aborted = subscribers;
            }
        }
        for h in aborted {
            // Cancelled (or finished just before): nothing more to count.
            let _ = h.await;
        }
    });
    let shared = Rc::try_unwrap(shared).ok().expect("all tasks finished");
    (shared.stats.into_inner(), shared.counts.into_inner())
}

/// Subscriber `i` of `channel`: reads messages until the end marker, checking their order.
async fn subscriber(conn: &mut Conn, i: usize, channel: &[u8], sh: &Shared) -> io::Result<()> {
    let prefix = message_prefix(channel);
    let mut last = 0u64;
    loop {
        let (at, kind) = conn.next_reply().await?;
        let frame = conn.reply_bytes(at);
        let payload = match frame.strip_prefix(&prefix[..]) {
            Some(rest) if kind == ReplyKind::Value && rest.len() == PAYLOAD + 2 => &rest[..PAYLOAD],
            _ => {
                let shown = String::from_utf8_lossy(&frame[..frame.len().min(80)]).into_owned();
                sh.error(|| format!("subscriber {i}: unexpected frame {shown:?}"));
                continue;
            }
        };
        match parse_payload(payload) {
            None => {
                let shown = String::from_utf8_lossy(payload).into_owned();
                sh.error(|| format!("subscriber {i}: unexpected payload {shown:?}"));
            }
            Some(Payload::End) => {
                let published = sh.last_seq.get();
                if last < published {
                    sh.counts.borrow_mut().missing += published - last;
                    sh.error(|| {
                        format!("subscriber {i}: end marker after message {last} of {published}")
                    });
                }
                return Ok(());
            }
            Some(Payload::Message { seq, sent_ns }) => {
                if seq <= last {
                    sh.counts.borrow_mut().reordered += 1;
                    sh.error(|| format!("subscriber {i}: message {seq} after {last}"));
                    continue;
                }
                if seq != last + 1 {
                    sh.counts.borrow_mut().missing += seq - last - 1;
                    sh.error(|| format!("subscriber {i}: message {seq} after {last} (gap)"));
                }
                last = seq;
                sh.flow.reached(i, seq);
                if sh.measuring() {
                    let read_ns = conn.last_read.saturating_duration_since(sh.base).as_nanos();
                    let ns = (read_ns as u64).saturating_sub(sent_ns);
                    let mut st = sh.stats.borrow_mut();
                    st.hist.saturating_record(ns.max(1));
                    st.requests += 1;
                }
            }
        }
    }
}

/// The next reply on the publisher's connection, within [`STALL_TIMEOUT`]; an error reply or
/// `:0` (nobody subscribed) counts as an error of the run.
async fn publish_reply(conn: &mut Conn, sh: &Shared) -> io::Result<()> {
    let (at, kind) = tokio::time::timeout(STALL_TIMEOUT, conn.next_reply())
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no PUBLISH reply within {} s", STALL_TIMEOUT.as_secs()),
            ))
        })?;
    if let Some(e) = conn.error_text(at, kind) {
        sh.error(|| format!("PUBLISH: {e}"));
    } else if conn.reply_bytes(at) == b":0\r\n" {
        sh.error(|| "PUBLISH reached no subscriber".into());
    } else if !conn.reply_bytes(at).starts_with(b":") {
        let shown = String::from_utf8_lossy(conn.reply_bytes(at)).into_owned();
        sh.error(|| format!("PUBLISH: unexpected reply {shown:?}"));
    }
    Ok(())
}

/// The publisher: PUBLISHes to `channel` with up to `depth` in flight (refilled once half are
/// answered) and at most [`WINDOW`] messages ahead of the slowest subscriber, until the phase
/// is DONE; then reads the outstanding replies and sends the end marker.
async fn publish(conn: &mut Conn, channel: &[u8], depth: usize, sh: &Shared) -> io::Result<()> {
    let head = publish_prefix(channel);
    let mut batch = Vec::with_capacity(depth * (head.len() + PAYLOAD + 2));
    let (mut seq, mut inflight, mut low) = (0u64, 0usize, 0u64);
    loop {
        if sh.phase.load(Ordering::Relaxed) == DONE {
            break;
        }
        if inflight <= depth / 2 {
            batch.clear();
            while inflight < depth {
                if seq + 1 > low.saturating_add(WINDOW) {
                    low = sh.flow.low();
                    if seq + 1 > low.saturating_add(WINDOW) {
                        break;
                    }
                }
                seq += 1;
                batch.extend_from_slice(&head);
                let sent = sh.base.elapsed().as_nanos() as u64;
                put_payload(&mut batch, seq, sent);
                inflight += 1;
            }
            if !batch.is_empty() {
                conn.stream.write_all(&batch).await?;
            }
        }
        if inflight > 0 {
            publish_reply(conn, sh).await?;
            inflight -= 1;
            if sh.measuring() {
                sh.counts.borrow_mut().published += 1;
            }
            continue;
        }
        // Nothing in flight and the window is closed: wait for the slowest subscriber.
        if sh.flow.wait_for(seq + 1 - WINDOW) == 0 {
            sh.flow.stop_waiting();
            continue;
        }
        sh.counts.borrow_mut().window_waits += 1;
        let since = Instant::now();
        while sh.flow.below.get() > 0 && sh.phase.load(Ordering::Relaxed) != DONE {
            let _ = tokio::time::timeout(Duration::from_millis(50), sh.flow.wake.notified()).await;
            if since.elapsed() > STALL_TIMEOUT {
                sh.flow.stop_waiting();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} subscriber(s) still below message {} after {} s",
                        sh.flow.below.get(),
                        seq + 1 - WINDOW,
                        STALL_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
        sh.flow.stop_waiting();
    }
    while inflight > 0 {
        publish_reply(conn, sh).await?;
        inflight -= 1;
    }
    let mut end = head;
    end.extend_from_slice(&end_payload());
    conn.stream.write_all(&end).await?;
    sh.last_seq.set(seq);
    publish_reply(conn, sh).await?;
    Ok(())
}

/// Memory of one server with K clients subscribed to one channel.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriberMemory {
    pub target: String,
    /// K.
    pub subscribers: usize,
    /// VmRSS before the K connections were opened, KiB.
    pub rss_none_kib: u64,
    /// VmRSS with the K connected and idle for 1 s, KiB.
    pub rss_connected_kib: u64,
    /// VmRSS 1 s after all K were subscribed to one channel (each confirmed), KiB.
    pub rss_subscribed_kib: u64,
    /// (subscribed − none) × 1024 / K: bytes per subscriber, its connection included. Signed:
    /// RSS moves in pages.
    pub bytes_per_subscriber: f64,
    /// (subscribed − connected) × 1024 / K: bytes per subscription alone (signed).
    pub bytes_per_subscription: f64,
    /// Respite's pub/sub stats with all K subscribed (`None`: Redis direct).
    pub respite: Option<PubSubStats>,
}

/// Measures RSS of server process `pid` (listening on `port`) without clients, with K idle
/// connections, and with the K subscribed to one channel; then closes them. `admin`: Respite's
/// admin address, for its upstream connections and channels with all K subscribed.
pub fn memory_probe(
    target: &str,
    port: u16,
    pid: u32,
    k: usize,
    admin: Option<SocketAddr>,
) -> Result<SubscriberMemory, String> {
    let err = |e: String| format!("{target}: {e}");
    let none = rss_kib(pid)?;
    let mut conns = super::memory::open_idle(target, port, k)?;
    std::thread::sleep(Duration::from_secs(1));
    let connected = rss_kib(pid)?;
    let channel = format!("bench:pubsub-memory:{}", std::process::id());
    let subscribe = command(&[b"SUBSCRIBE", channel.as_bytes()]);
    let confirm = confirmation(channel.as_bytes());
    for (i, c) in conns.iter_mut().enumerate() {
        let got = super::stateful::exchange(c, &subscribe, 1)
            .map_err(|e| err(format!("SUBSCRIBE on connection {i}: {e}")))?;
        if got != confirm {
            return Err(err(format!(
                "unexpected SUBSCRIBE reply {:?}",
                String::from_utf8_lossy(&got)
            )));
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let subscribed = rss_kib(pid)?;
    let respite = admin.map(pubsub_stats).transpose().map_err(err)?;
    drop(conns);
    let per = |a: u64, b: u64| (a as f64 - b as f64) * 1024.0 / k.max(1) as f64;
    Ok(SubscriberMemory {
        target: target.to_string(),
        subscribers: k,
        rss_none_kib: none,
        rss_connected_kib: connected,
        rss_subscribed_kib: subscribed,
        bytes_per_subscriber: per(subscribed, none),
        bytes_per_subscription: per(subscribed, connected),
        respite,
    })
}

/// The `## Pub/sub fan-out` section: per case and target, published and delivered messages/s,
/// delivery latency, proxy and Redis CPU per delivered message (and Redis's against Redis
/// direct), Respite's upstream connections, channels and message counters, order errors; `n/a`
/// rows for the targets without pub/sub; then the memory per subscriber. Empty without pub/sub
/// cases.
pub fn render(o: &Output) -> String {
    render_parts(&o.cases, &o.medians, &o.runs, &o.pubsub_memory)
}

fn render_parts(
    cases: &[Case],
    medians: &[Summary],
    runs: &[RunRecord],
    memory: &[SubscriberMemory],
) -> String {
    let cases: Vec<&Case> = cases.iter().filter(|c| c.group == Group::PubSub).collect();
    if cases.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Pub/sub fan-out (one publisher, {} PUBLISH in flight, at most {WINDOW} messages ahead \
         of the slowest subscriber; {PAYLOAD}-byte payloads; one channel)\n",
        cases[0].pipeline
    );
    let _ = writeln!(
        s,
        "| case | target | published/s | delivered/s | ×direct | delivery p50 µs | p99 µs | proxy \
         CPU µs/msg | redis CPU µs/msg | redis CPU ×direct | upstream cx | upstream channels | \
         Respite in/s → out/s | reordered / missing / cut off | noisy |"
    );
    let _ = writeln!(
        s,
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    );
    for case in &cases {
        let direct = medians
            .iter()
            .find(|m| m.case == case.id && m.target == "direct");
        for m in medians.iter().filter(|m| m.case == case.id) {
            let rs: Vec<&FanOutRun> = runs
                .iter()
                .filter(|r| r.case == case.id && r.target == m.target)
                .filter_map(|r| r.pubsub.as_ref())
                .collect();
            let med = |f: &dyn Fn(&FanOutRun) -> Option<f64>| {
                median(&rs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            let opt = |v: Option<f64>, fmt: &dyn Fn(f64) -> String| v.map_or("–".into(), fmt);
            let respite = |f: &dyn Fn(&RespiteFanOut) -> f64| med(&|r| r.respite.as_ref().map(f));
            let gauge = |v: Option<f64>| opt(v, &|g| format!("{g:.0}"));
            let flow = match (
                respite(&|x| x.messages_in_per_s),
                respite(&|x| x.messages_out_per_s),
            ) {
                (Some(i), Some(o)) => format!("{} → {}", fmt_rps(i), fmt_rps(o)),
                _ => "–".into(),
            };
            let sum = |f: &dyn Fn(&FanOutRun) -> u64| rs.iter().map(|r| f(r)).sum::<u64>();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} |",
                case.label,
                m.target,
                opt(med(&|r| Some(r.published_per_s)), &fmt_rps),
                fmt_rps(m.median.rps),
                fmt_ratio(Some(m.median.rps), direct.map(|d| d.median.rps)),
                fmt_us(m.median.p50_us),
                fmt_us(m.median.p99_us),
                fmt_cpu(m.median.proxy_cpu_us_per_req),
                fmt_redis_cpu(m.median.redis_cpu_us_per_req),
                fmt_ratio(
                    m.median.redis_cpu_us_per_req,
                    direct.and_then(|d| d.median.redis_cpu_us_per_req)
                ),
                gauge(respite(&|x| x.upstream_cx_active as f64)),
                gauge(respite(&|x| x.upstream_channels as f64)),
                flow,
                sum(&|r| r.reordered),
                sum(&|r| r.missing),
                sum(&|r| r.cut_off),
                if m.noisy_reps > 0 {
                    format!("* ({}/{})", m.noisy_reps, m.reps)
                } else {
                    String::new()
                },
            );
        }
        for t in case.not_on {
            let _ = writeln!(
                s,
                "| {} | {t} | n/a (no pub/sub) |{}",
                case.label,
                " – |".repeat(12)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nmsg = one message delivered to one subscriber: delivered/s is the sum over the \
         subscribers, and CPU µs/msg is a process's CPU over the measured phase divided by the \
         messages delivered in it (redis = all redis-servers). Redis direct writes every message \
         to each of the N subscribers; through Respite, Redis writes it once per worker that has \
         subscribers (upstream channels) and Respite writes the N copies, so `redis CPU ×direct` \
         is what the shared subscription saves Redis. Respite in/out: `pubsub.messages_in` / \
         `messages_out` over the measured phase; upstream cx and channels: the gauges when it \
         started (a subscriber connection stays open once made, one per worker and \
         redis-server that ever held a channel, so earlier runs' count too; channels are this \
         run's). Reordered / missing / cut off are summed over the reps and must be 0."
    );
    if !memory.is_empty() {
        let _ = writeln!(
            s,
            "\nMemory per subscriber: RSS with K clients subscribed to one channel minus RSS \
             without them (Redis direct: the redis-server), and the part the subscription adds \
             to an idle connection:\n"
        );
        let _ = writeln!(
            s,
            "| target | subscribers | RSS none KiB | RSS connected KiB | RSS subscribed KiB | bytes per subscriber | of which the subscription | upstream cx | upstream channels |"
        );
        let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
        for m in memory {
            let signed = |v: f64| {
                if v < 0.0 {
                    format!("−{}", fmt_rps(-v))
                } else {
                    fmt_rps(v)
                }
            };
            let stat = |f: &dyn Fn(&PubSubStats) -> i64| {
                m.respite
                    .as_ref()
                    .map_or_else(|| "–".into(), |r| f(r).to_string())
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.target,
                fmt_rps(m.subscribers as f64),
                fmt_rps(m.rss_none_kib as f64),
                fmt_rps(m.rss_connected_kib as f64),
                fmt_rps(m.rss_subscribed_kib as f64),
                signed(m.bytes_per_subscriber),
                signed(m.bytes_per_subscription),
                stat(&|r| r.upstream_cx_active),
                stat(&|r| r.upstream_channels),
            );
        }
    }
    s.push('\n');
    s
}

/// Redis CPU µs per delivered message: three decimals, since through Respite it is small.
fn fmt_redis_cpu(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.3}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_summed() {
        let text = "pubsub.messages_in: 10\n\
                    pubsub.messages_out: 1000\n\
                    pubsub.upstream_channels: 2\n\
                    pubsub.upstream_cx_active: 2\n\
                    pubsub.upstream_patterns: 0\n\
                    redis.bench.pubsub_slow_subscriber_close: 3\n\
                    redis.bench.pubsub_subscriptions: 100\n";
        assert_eq!(
            parse_pubsub_stats(text),
            PubSubStats {
                upstream_cx_active: 2,
                upstream_channels: 2,
                messages_in: 10,
                messages_out: 1000,
                slow_closes: 3,
            }
        );
        assert_eq!(parse_pubsub_stats(""), PubSubStats::default());
    }

    #[test]
    fn frames_and_payloads() {
        let mut publish = publish_prefix(b"ch");
        put_payload(&mut publish, 42, 7);
        assert_eq!(
            crate::resp::parse_reply(&publish).unwrap().unwrap().len,
            publish.len()
        );
        let payload = &publish[publish.len() - PAYLOAD - 2..publish.len() - 2];
        assert_eq!(
            parse_payload(payload),
            Some(Payload::Message {
                seq: 42,
                sent_ns: 7
            })
        );
        let end = end_payload();
        assert_eq!(end.len(), PAYLOAD + 2);
        assert_eq!(parse_payload(&end[..PAYLOAD]), Some(Payload::End));
        assert_eq!(parse_payload(b"x"), None);
        assert_eq!(parse_payload(&[b'a'; PAYLOAD]), None);
        let mut frame = message_prefix(b"ch");
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        assert_eq!(
            frame,
            format!(
                "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$32\r\n{:016}{:016}\r\n",
                42, 7
            )
            .into_bytes()
        );
        assert_eq!(
            confirmation(b"ch"),
            b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
        );
    }

    #[test]
    fn window_wakes_when_the_last_subscriber_catches_up() {
        let f = Flow::new(3);
        f.reached(0, 10);
        f.reached(1, 5);
        assert_eq!(f.low(), 0);
        // Subscribers 1 (at 5) and 2 (at 0) are below 6.
        assert_eq!(f.wait_for(6), 2);
        f.reached(0, 11);
        assert_eq!(f.below.get(), 2);
        f.reached(2, 7);
        assert_eq!(f.below.get(), 1);
        // A subscriber that leaves counts as caught up.
        f.reached(1, u64::MAX);
        assert_eq!(f.below.get(), 0);
        // The wake-up is kept for a publisher that was not waiting on it yet.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), f.wake.notified()).await
        })
        .expect("woken");
        f.stop_waiting();
        assert_eq!(f.low(), 7);
        assert_eq!(f.wait_for(7), 0);
        f.stop_waiting();
        f.reached(0, u64::MAX);
        f.reached(2, u64::MAX);
        assert_eq!(f.low(), u64::MAX);
    }

    fn summary(case: &Case, target: &str, rps: f64, redis: f64) -> Summary {
        Summary {
            case: case.id.into(),
            label: case.label.into(),
            group: Group::PubSub,
            target: target.into(),
            connections: case.connections,
            pipeline: case.pipeline,
            rate: None,
            reps: 1,
            noisy_reps: 0,
            median: super::super::metrics::Metrics {
                rps,
                redis_cpu_us_per_req: Some(redis),
                proxy_cpu_us_per_req: (target != "direct").then_some(0.5),
                ..Default::default()
            },
            latency_curve_us: Vec::new(),
        }
    }

    fn record(case: &Case, target: &str, fan: FanOutRun) -> RunRecord {
        let cfg = LoadConfig {
            target: target.into(),
            addr: ([127, 0, 0, 1], 1).into(),
            connections: case.connections,
            pipeline: case.pipeline,
            threads: 1,
            mix: crate::mix::Mix {
                entries: Vec::new(),
            },
            keyspace: 1,
            value_size: PAYLOAD,
            stop: Stop::Duration(Duration::from_secs(1)),
            warmup: None,
            prefill: false,
            auth: None,
            pids: Vec::new(),
            rate: None,
            key_offset: 0,
            quiet: true,
            cluster: false,
            tls: None,
        };
        RunRecord {
            rep: 1,
            case: case.id.into(),
            group: Group::PubSub,
            target: target.into(),
            metrics: Default::default(),
            report: Report::new(&cfg, 1),
            stats_fetches_per_s: None,
            threads: None,
            leased: None,
            pubsub: Some(fan),
        }
    }

    #[test]
    fn section() {
        let cases = super::super::cases::all_cases();
        let c = cases.iter().find(|c| c.id == "pubsub-100").expect("case");
        let medians = [
            summary(c, "direct", 200_000.0, 4.0),
            summary(c, "respite-1w", 300_000.0, 0.04),
        ];
        let runs = [
            record(
                c,
                "direct",
                FanOutRun {
                    subscribers: 100,
                    published_per_s: 2000.0,
                    delivered_per_s: 200_000.0,
                    ..Default::default()
                },
            ),
            record(
                c,
                "respite-1w",
                FanOutRun {
                    subscribers: 100,
                    published_per_s: 3000.0,
                    delivered_per_s: 300_000.0,
                    reordered: 1,
                    respite: Some(RespiteFanOut {
                        upstream_cx_active: 1,
                        upstream_channels: 1,
                        messages_in_per_s: 3000.0,
                        messages_out_per_s: 300_000.0,
                        slow_closes: 0,
                    }),
                    ..Default::default()
                },
            ),
        ];
        let memory = [SubscriberMemory {
            target: "respite-1w".into(),
            subscribers: 1000,
            rss_none_kib: 10_000,
            rss_connected_kib: 12_000,
            rss_subscribed_kib: 12_500,
            bytes_per_subscriber: 2560.0,
            bytes_per_subscription: 512.0,
            respite: Some(PubSubStats {
                upstream_cx_active: 1,
                upstream_channels: 1,
                ..Default::default()
            }),
        }];
        let md = render_parts(&cases, &medians, &runs, &memory);
        let lines: Vec<&str> = md.lines().collect();
        let header = lines
            .iter()
            .find(|l| l.starts_with("| case |"))
            .expect("header");
        let cols = header.matches('|').count();
        let rows: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("| PUBLISH → 100 subscribers |"))
            .collect();
        assert_eq!(rows.len(), 3, "{md}");
        assert!(rows.iter().all(|l| l.matches('|').count() == cols), "{md}");
        assert!(md.contains(
            "| PUBLISH → 100 subscribers | direct | 2 000 | 200 000 | 1.00 | 0.0 | 0.0 | – | \
             4.000 | 1.00 | – | – | – | 0 / 0 / 0 |  |"
        ));
        assert!(md.contains(
            "| PUBLISH → 100 subscribers | respite-1w | 3 000 | 300 000 | 1.50 | 0.0 | 0.0 | \
             0.50 | 0.040 | 0.01 | 1 | 1 | 3 000 → 300 000 | 1 / 0 / 0 |  |"
        ));
        assert!(md.contains("| PUBLISH → 100 subscribers | twemproxy | n/a (no pub/sub) |"));
        assert!(
            md.contains("| respite-1w | 1 000 | 10 000 | 12 000 | 12 500 | 2 560 | 512 | 1 | 1 |")
        );
        assert_eq!(render_parts(&cases[..1], &[], &[], &[]), "");
    }
}

//! Open-loop load (`--rate`): every connection sends requests at scheduled times whether or not
//! earlier replies have arrived (many in flight, replies matched FIFO). Latency is measured from a
//! request's *intended* send time, so a stalled server is charged for the requests it delayed
//! (no coordinated omission).
//!
//! Each client thread runs one plain event loop (no async runtime) over its connections: a
//! level-triggered `epoll` set holding the nonblocking sockets and a periodic `timerfd`
//! (µs precision; tokio's own timer has 1 ms granularity). Whenever the loop wakes — a timer tick
//! or a reply — it writes every request whose intended time has passed (one `write` per
//! connection with something due, consecutive due requests coalesced), and it reads replies on
//! the connections epoll reports readable, in the same thread, with no task hand-offs. The next
//! due request is found from a cursor over the (fixed, time-ordered) slot sequence, so no
//! connection is scanned unless it has something due.
//!
//! The timer fires every `1 / rate` s but at most every [`MIN_TICK`]. Above `1 / MIN_TICK`
//! req/s, requests due between two wake-ups go out together at the next one, up to one tick late
//! (on average about half a tick, less when replies wake the loop in between). That lateness is
//! counted in their latency (from the intended time) and in the reported send lag, rather than
//! costing a wake-up per request. It is the same for every target of a `compare` run, so
//! differences between targets stay fair; absolute open-loop latencies include it.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::load::{DONE, Encoder, MEASURE, Shared, ThreadStats};
use crate::resp::{ReplyKind, parse_reply};

/// Shortest pacing period (the timer tick at high rates).
pub const MIN_TICK: Duration = Duration::from_micros(25);

/// How long outstanding replies may take to arrive after the measured phase ends.
const DRAIN: Duration = Duration::from_secs(2);

/// epoll token of the pacing timer (connections use their position).
const TIMER_TOKEN: u64 = u64::MAX;

/// Initial reply buffer per connection (grows for larger replies).
const READ_BUF: usize = 16 * 1024;

/// The send schedule: request `k` of connection `i` (of `C`) is due at `(k·C + i) / rate` seconds
/// after the schedule start. Each connection thus sends every `C / rate` s, and the connections'
/// phases are offset by `1 / rate` s, so the merged stream is evenly spaced at `rate` req/s.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Total requests/second over all connections.
    pub rate: f64,
    /// Number of connections sharing the rate.
    pub connections: u64,
}

impl Schedule {
    /// A schedule of `rate` requests/second over `connections` connections.
    pub fn new(rate: f64, connections: usize) -> Self {
        Schedule {
            rate,
            connections: connections.max(1) as u64,
        }
    }

    /// Intended send time of request `k` of connection `conn`, as an offset from the start.
    pub fn offset(&self, conn: u64, k: u64) -> Duration {
        let slot = k as f64 * self.connections as f64 + conn as f64;
        Duration::from_nanos((slot * 1e9 / self.rate) as u64)
    }
}

/// Latency in ns of a request intended at `intended` and answered at `reply` (at least 1 ns).
pub fn latency_ns(intended: Instant, reply: Instant) -> u64 {
    (reply.saturating_duration_since(intended).as_nanos() as u64).max(1)
}

/// One connection of the event loop.
struct Link {
    /// Connection index `i` of the schedule.
    index: u64,
    stream: TcpStream,
    /// Requests sent and not yet answered: (intended send time, counted in the measurement).
    pending: VecDeque<(Instant, bool)>,
    /// Encoded requests not yet written; `out[written..]` remains.
    out: Vec<u8>,
    written: usize,
    /// Intended times of the measured requests in `out`, for the send-lag histogram.
    out_due: Vec<Instant>,
    /// Waiting for EPOLLOUT after a short write.
    want_write: bool,
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    failed: bool,
    rng: fastrand::Rng,
}

impl Link {
    /// Writes as much of `out` as the socket takes; records send lag once all of it is written.
    fn flush(&mut self, epoll: &Epoll, token: u64, st: &mut ThreadStats) -> io::Result<()> {
        while self.written < self.out.len() {
            match (&self.stream).write(&self.out[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.want_write {
                        self.want_write = true;
                        let mut ev =
                            EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT, token);
                        epoll.modify(self.stream.as_fd(), &mut ev)?;
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        for due in self.out_due.drain(..) {
            st.send_lag.saturating_record(latency_ns(due, now));
        }
        self.out.clear();
        self.written = 0;
        if self.want_write {
            self.want_write = false;
            let mut ev = EpollEvent::new(EpollFlags::EPOLLIN, token);
            epoll.modify(self.stream.as_fd(), &mut ev)?;
        }
        Ok(())
    }

    /// Reads what is available and matches complete replies to pending requests (FIFO).
    fn read_replies(&mut self, st: &mut ThreadStats) -> io::Result<()> {
        loop {
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.end == self.inbuf.len() {
                if self.start > 0 {
                    self.inbuf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                } else {
                    let n = self.inbuf.len() * 2;
                    self.inbuf.resize(n, 0);
                }
            }
            let room = self.inbuf.len() - self.end;
            let n = match (&self.stream).read(&mut self.inbuf[self.end..]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed the connection",
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            };
            let at = Instant::now();
            self.end += n;
            while self.start < self.end {
                let r = match parse_reply(&self.inbuf[self.start..self.end]) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                };
                let reply_at = self.start;
                self.start += r.len;
                let Some((intended, measured)) = self.pending.pop_front() else {
                    return Err(io::Error::other("reply without a request"));
                };
                if !measured {
                    continue;
                }
                st.hist.saturating_record(latency_ns(intended, at));
                st.requests += 1;
                match r.kind {
                    ReplyKind::Value => {}
                    ReplyKind::Nil => st.nils += 1,
                    ReplyKind::Error { start, end } => {
                        st.errors += 1;
                        if st.first_error.is_none() {
                            let text = &self.inbuf[reply_at + start..reply_at + end];
                            st.first_error = Some(String::from_utf8_lossy(text).into_owned());
                        }
                    }
                }
            }
            // Level-triggered: anything left unread wakes the loop again. Only a read that
            // filled the buffer is retried at once (saves an EAGAIN read per wake-up).
            if n < room {
                return Ok(());
            }
        }
    }

    /// Marks the connection failed: no more sends, its pending requests are not charged.
    fn fail(&mut self, epoll: &Epoll, err: &io::Error, st: &mut ThreadStats) {
        if self.failed {
            return;
        }
        self.failed = true;
        let _ = epoll.delete(self.stream.as_fd());
        st.conn_errors
            .push(format!("connection {}: {err}", self.index));
    }
}

/// Requests one connection may have unanswered before it is failed: a target far below `--rate`
/// would otherwise grow the generator's queues without bound.
const MAX_OUTSTANDING: usize = 100_000;

/// Runs the open-loop phase (warmup + measurement) for one thread's connections, given as
/// (schedule index, nonblocking socket), on the calling thread.
pub(crate) fn run_thread(
    conns: Vec<(u64, TcpStream)>,
    enc: &Encoder,
    sched: Schedule,
    shared: &Shared,
    st: &mut ThreadStats,
) {
    if let Err(e) = event_loop(conns, enc, sched, shared, st) {
        st.conn_errors.push(format!("open-loop event loop: {e}"));
        let now = Instant::now();
        st.finished = Some(st.finished.map_or(now, |f| f.max(now)));
    }
}

fn event_loop(
    mut conns: Vec<(u64, TcpStream)>,
    enc: &Encoder,
    sched: Schedule,
    shared: &Shared,
    st: &mut ThreadStats,
) -> io::Result<()> {
    // Ascending indices: then the thread's slots, taken in (round k, position) order, are in
    // time order, and the next due request is always at the cursor.
    conns.sort_by_key(|(i, _)| *i);
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    let timer = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    epoll.add(
        timer.as_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN, TIMER_TOKEN),
    )?;
    let seed = fastrand::u64(..);
    let mut links = Vec::with_capacity(conns.len());
    for (pos, (index, stream)) in conns.into_iter().enumerate() {
        stream.set_nonblocking(true)?;
        epoll.add(
            stream.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, pos as u64),
        )?;
        links.push(Link {
            index,
            stream,
            pending: VecDeque::new(),
            out: Vec::with_capacity(4096),
            written: 0,
            out_due: Vec::new(),
            want_write: false,
            inbuf: vec![0; READ_BUF],
            start: 0,
            end: 0,
            failed: false,
            rng: fastrand::Rng::with_seed(seed.wrapping_add(index.wrapping_mul(0x9E37_79B9))),
        });
    }
    if links.is_empty() {
        return Ok(());
    }

    let period = Duration::from_secs_f64(1.0 / sched.rate).max(MIN_TICK);
    let t0 = Instant::now();
    timer.set(
        Expiration::Interval(TimeSpec::from_duration(period)),
        TimerSetTimeFlags::empty(),
    )?;
    let mut events = vec![EpollEvent::empty(); links.len() + 1];
    let mut touched: Vec<usize> = Vec::with_capacity(links.len());
    // Next slot: round `k` of the link at `cursor`.
    let mut cursor = 0usize;
    let mut k = 0u64;
    let mut stopped: Option<Instant> = None;
    loop {
        if stopped.is_none() {
            let phase = shared.phase.load(Ordering::Relaxed);
            let measure = phase == MEASURE;
            let now = Instant::now();
            if phase == DONE {
                stopped = Some(now);
            }
            while stopped.is_none() {
                let l = &mut links[cursor];
                let due = t0 + sched.offset(l.index, k);
                if due > now {
                    break;
                }
                if !l.failed && l.pending.len() >= MAX_OUTSTANDING {
                    let e = io::Error::other(format!(
                        "{MAX_OUTSTANDING} requests unanswered: the target cannot keep up with \
                         --rate"
                    ));
                    l.fail(&epoll, &e, st);
                }
                if !l.failed {
                    if measure && shared.claim(1) == 0 {
                        stopped = Some(now);
                        break;
                    }
                    if l.out.is_empty() {
                        touched.push(cursor);
                    }
                    enc.encode(&mut l.rng, &mut l.out);
                    l.pending.push_back((due, measure));
                    if measure {
                        l.out_due.push(due);
                    }
                }
                cursor += 1;
                if cursor == links.len() {
                    cursor = 0;
                    k += 1;
                }
            }
            for pos in touched.drain(..) {
                let l = &mut links[pos];
                if l.want_write || l.failed {
                    continue;
                }
                if let Err(e) = l.flush(&epoll, pos as u64, st) {
                    l.fail(&epoll, &e, st);
                }
            }
            if links.iter().all(|l| l.failed) {
                stopped.get_or_insert_with(Instant::now);
            }
            if let Some(s) = stopped {
                st.finished = Some(st.finished.map_or(s, |f| f.max(s)));
            }
        }
        if let Some(s) = stopped
            && (Instant::now() >= s + DRAIN
                || links.iter().all(|l| l.failed || l.pending.is_empty()))
        {
            break;
        }

        let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for ev in &events[..n] {
            let token = ev.data();
            if token == TIMER_TOKEN {
                // The read also re-arms a periodic timerfd (the kernel restarts it on read).
                match timer.wait() {
                    Ok(()) | Err(Errno::EAGAIN) => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            let Some(l) = links.get_mut(token as usize) else {
                continue;
            };
            if l.failed {
                continue;
            }
            let flags = ev.events();
            if flags.intersects(EpollFlags::EPOLLOUT)
                && let Err(e) = l.flush(&epoll, token, st)
            {
                l.fail(&epoll, &e, st);
                continue;
            }
            if flags.intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP)
                && let Err(e) = l.read_replies(st)
            {
                l.fail(&epoll, &e, st);
            }
        }
    }

    // Charge whatever is still missing after the drain as a lower bound.
    let now = Instant::now();
    let mut missing = 0u64;
    for l in &mut links {
        if l.failed {
            continue;
        }
        for (intended, measured) in l.pending.drain(..) {
            if measured {
                st.hist.saturating_record(latency_ns(intended, now));
                missing += 1;
            }
        }
    }
    if missing > 0 {
        st.conn_errors.push(format!(
            "{missing} requests unanswered {} s after the run (latency recorded as a lower bound)",
            DRAIN.as_secs()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_evenly_spaced_over_all_connections() {
        let s = Schedule::new(1000.0, 4);
        // Each connection every 4 ms, phases 1 ms apart.
        assert_eq!(s.offset(0, 0), Duration::ZERO);
        assert_eq!(s.offset(1, 0), Duration::from_millis(1));
        assert_eq!(s.offset(3, 0), Duration::from_millis(3));
        assert_eq!(s.offset(0, 1), Duration::from_millis(4));
        assert_eq!(s.offset(2, 5), Duration::from_millis(22));
        // Merged over connections: exactly one request per 1 ms slot.
        let mut all: Vec<Duration> = (0..4)
            .flat_map(|c| (0..25).map(move |k| s.offset(c, k)))
            .collect();
        all.sort();
        for (j, t) in all.iter().enumerate() {
            assert_eq!(*t, Duration::from_millis(j as u64));
        }
    }

    #[test]
    fn latency_counts_from_intended_time() {
        let t0 = Instant::now();
        let intended = t0 + Duration::from_millis(10);
        // Sent late (say at 15 ms) and answered at 16 ms: 6 ms, not 1 ms.
        let reply = t0 + Duration::from_millis(16);
        assert_eq!(latency_ns(intended, reply), 6_000_000);
        // Never negative, never zero.
        assert_eq!(latency_ns(reply, intended), 1);
    }
}

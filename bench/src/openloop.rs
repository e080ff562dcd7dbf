//! Open-loop load (`--rate`): every connection sends requests at scheduled times whether or not
//! earlier replies have arrived (many in flight, replies matched FIFO). Latency is measured from a
//! request's *intended* send time, so a stalled server is charged for the requests it delayed
//! (no coordinated omission). One pacing task per thread drives all of the thread's connections,
//! woken by a periodic `timerfd` (µs precision; tokio's own timer has 1 ms granularity) every
//! `1 / rate` s but at most every [`MIN_TICK`]: above 40 000 req/s requests due between two ticks
//! go out together at the next one, up to 25 µs late, which counts in their latency (and in the
//! reported send lag) rather than costing a wakeup per request.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::load::{Conn, DONE, Encoder, MEASURE, Shared, ThreadStats};
use crate::resp::ReplyKind;

/// Shortest pacing period.
pub const MIN_TICK: Duration = Duration::from_micros(25);

/// How long outstanding replies may take to arrive after the measured phase ends.
const DRAIN: Duration = Duration::from_secs(2);

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

/// A one-shot `timerfd` (CLOCK_MONOTONIC) registered with the tokio reactor.
struct Timer {
    fd: AsyncFd<OwnedFd>,
}

impl Timer {
    fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create has no memory preconditions; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd's descriptor stays open and unchanged until the AsyncFd drops it.
        let fd = unsafe { AsyncFd::register(owned) }.map_err(io::Error::from)?;
        Ok(Timer { fd })
    }

    /// Fires every `period` from now on (the first time after one period).
    fn start_periodic(&self, period: Duration) -> io::Result<()> {
        let ts = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(period.subsec_nanos() as i32),
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: `fd` is a valid timerfd and `spec` a valid itimerspec; old value not requested.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for the next expiry (returns at once if one is pending).
    async fn tick(&self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let r = guard.try_io(|inner| {
                let mut buf = [0u8; 8];
                // SAFETY: reads at most 8 bytes into an 8-byte buffer from a valid descriptor.
                let n = unsafe { libc::read(inner.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match r {
                Ok(res) => return res,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Requests sent and not yet answered: (intended send time, counted in the measurement).
type Pending = Rc<RefCell<VecDeque<(Instant, bool)>>>;

struct Writer {
    index: u64,
    half: OwnedWriteHalf,
    pending: Pending,
    next: u64,
    buf: Vec<u8>,
    /// Intended times of the measured requests in `buf`.
    due: Vec<Instant>,
    rng: fastrand::Rng,
}

/// Runs the open-loop phase (warmup + measurement) for one thread's connections.
pub(crate) async fn run_thread(
    conns: Vec<(u64, Conn)>,
    enc: Rc<Encoder>,
    sched: Schedule,
    shared: Arc<Shared>,
    stats: Rc<RefCell<ThreadStats>>,
) {
    let timer = match Timer::new() {
        Ok(t) => t,
        Err(e) => {
            stats.borrow_mut().conn_errors.push(format!("timerfd: {e}"));
            return;
        }
    };
    let seed = fastrand::u64(..);
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for (index, conn) in conns {
        let (rd, wr) = conn.stream.into_split();
        let pending: Pending = Rc::new(RefCell::new(VecDeque::new()));
        let failed = Rc::new(Cell::new(false));
        readers.push((
            pending.clone(),
            failed.clone(),
            tokio::task::spawn_local(read_replies(
                index,
                Conn::new(rd),
                pending.clone(),
                failed,
                stats.clone(),
            )),
        ));
        writers.push(Writer {
            index,
            half: wr,
            pending,
            next: 0,
            buf: Vec::with_capacity(4096),
            due: Vec::new(),
            rng: fastrand::Rng::with_seed(seed.wrapping_add(index.wrapping_mul(0x9E37_79B9))),
        });
    }

    let period = Duration::from_secs_f64(1.0 / sched.rate).max(MIN_TICK);
    let t0 = Instant::now();
    if let Err(e) = timer.start_periodic(period) {
        stats.borrow_mut().conn_errors.push(format!("timerfd: {e}"));
        return;
    }
    'pace: loop {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == DONE {
            break;
        }
        let measure = phase == MEASURE;
        let now = Instant::now();
        let mut i = 0;
        while i < writers.len() {
            let w = &mut writers[i];
            loop {
                let due = t0 + sched.offset(w.index, w.next);
                if due > now {
                    break;
                }
                if measure && shared.claim(1) == 0 {
                    break 'pace;
                }
                enc.encode(&mut w.rng, &mut w.buf);
                w.pending.borrow_mut().push_back((due, measure));
                if measure {
                    w.due.push(due);
                }
                w.next += 1;
            }
            if !w.buf.is_empty() {
                let r = w.half.write_all(&w.buf).await;
                let written = Instant::now();
                {
                    let mut st = stats.borrow_mut();
                    for due in w.due.drain(..) {
                        st.send_lag.saturating_record(latency_ns(due, written));
                    }
                }
                if let Err(e) = r {
                    stats
                        .borrow_mut()
                        .conn_errors
                        .push(format!("connection {}: {e}", w.index));
                    writers.swap_remove(i);
                    continue;
                }
                w.buf.clear();
            }
            i += 1;
        }
        if writers.is_empty() {
            break;
        }
        if let Err(e) = timer.tick().await {
            stats.borrow_mut().conn_errors.push(format!("timerfd: {e}"));
            break;
        }
    }
    let stopped = Instant::now();
    {
        let mut st = stats.borrow_mut();
        st.finished = Some(st.finished.map_or(stopped, |f| f.max(stopped)));
    }

    // Drain: wait for outstanding replies, then charge whatever is still missing.
    let deadline = stopped + DRAIN;
    while Instant::now() < deadline
        && readers
            .iter()
            .any(|(p, failed, _)| !failed.get() && !p.borrow().is_empty())
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let now = Instant::now();
    let mut missing = 0u64;
    for (pending, failed, handle) in readers {
        handle.abort();
        // Wait for the aborted task to be dropped (it holds a reference to `stats`).
        let _ = handle.await;
        if failed.get() {
            continue;
        }
        let mut st = stats.borrow_mut();
        for (intended, measured) in pending.borrow_mut().drain(..) {
            if measured {
                st.hist.saturating_record(latency_ns(intended, now));
                missing += 1;
            }
        }
    }
    if missing > 0 {
        stats.borrow_mut().conn_errors.push(format!(
            "{missing} requests unanswered {} s after the run (latency recorded as a lower bound)",
            DRAIN.as_secs()
        ));
    }
    drop(writers);
}

async fn read_replies(
    index: u64,
    mut conn: Conn<OwnedReadHalf>,
    pending: Pending,
    failed: Rc<Cell<bool>>,
    stats: Rc<RefCell<ThreadStats>>,
) {
    loop {
        let (at, kind) = match conn.next_reply().await {
            Ok(r) => r,
            Err(e) => {
                failed.set(true);
                stats
                    .borrow_mut()
                    .conn_errors
                    .push(format!("connection {index}: {e}"));
                return;
            }
        };
        let Some((intended, measured)) = pending.borrow_mut().pop_front() else {
            failed.set(true);
            stats
                .borrow_mut()
                .conn_errors
                .push(format!("connection {index}: reply without a request"));
            return;
        };
        if !measured {
            continue;
        }
        let mut st = stats.borrow_mut();
        st.hist
            .saturating_record(latency_ns(intended, conn.last_read));
        st.requests += 1;
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
    }
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

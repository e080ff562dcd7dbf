//! Log lines rate-limited per call site: events a client, a backend or load can repeat (a hung
//! host, a refused handshake, `accept` at the fd limit) log their first occurrence, then at most
//! one line per [`WINDOW`], which says how many like it were suppressed since the last one.
//!
//! One [`LogLimit`] is a `static` of its call site (the `log_limited!` macro declares it): two
//! atomics, shared by every worker thread, no allocation. An event inside the window costs one
//! relaxed load and one relaxed add; these are events on error paths, never per healthy
//! request.
//!
//! What is lost: the suppressed count of the last window is only told by the next line, so a
//! burst that stops for good is summarised by no line (the counters in `/stats` still have it).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one line per call site per this interval.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The limiter of one call site. `const`-constructible, so it can be a `static`.
#[derive(Debug)]
pub struct LogLimit {
    /// Milliseconds since [`epoch`] of the last line logged, plus one (0: never logged).
    last: AtomicU64,
    /// Events suppressed since the last line logged.
    suppressed: AtomicU64,
}

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit::new()
    }
}

impl LogLimit {
    /// A limiter that has logged nothing yet.
    pub const fn new() -> LogLimit {
        LogLimit {
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// One event now: `Some(n)` if it is to be logged, `n` being how many were suppressed since
    /// the last line; `None` if it falls inside the window (it is counted).
    #[inline]
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(now_ms(), WINDOW)
    }

    /// [`LogLimit::admit`] at `now_ms` milliseconds since the process epoch, with `window`.
    pub fn admit_at(&self, now_ms: u64, window: Duration) -> Option<u64> {
        let stamp = now_ms.saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        let window_ms = window.as_millis() as u64;
        if last != 0 && stamp.saturating_sub(last) < window_ms {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // Two threads past the window at once: one wins the line, the other is counted.
        match self
            .last
            .compare_exchange(last, stamp, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Some(self.suppressed.swap(0, Ordering::Relaxed)),
            Err(_) => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

/// Milliseconds since the first call in this process (a monotonic clock).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// `tracing` event at `$level` (`WARN`, `ERROR`, …), rate-limited for this call site by a
/// [`LogLimit`] of its own: `log_limited!(WARN, "message"; field = %value, …)`. A line logged
/// after suppressed ones carries `suppressed = N` and ends with
/// `(N similar suppressed in the last 10s)`.
macro_rules! log_limited {
    ($level:ident, $msg:literal $(; $($field:tt)*)?) => {{
        static LIMIT: $crate::stats::log_limit::LogLimit =
            $crate::stats::log_limit::LogLimit::new();
        $crate::stats::log_limit::log_limited_by!(LIMIT, $level, $msg $(; $($field)*)?)
    }};
}
pub(crate) use log_limited;

/// [`log_limited!`] with a given [`LogLimit`] instead of the call site's: for lines limited per
/// cluster or per listener, so that one noisy peer cannot hide every other's line of the kind.
macro_rules! log_limited_by {
    ($limit:expr, $level:ident, $msg:literal $(; $($field:tt)*)?) => {{
        match $limit.admit() {
            None => {}
            Some(0) => ::tracing::event!(::tracing::Level::$level, { $($($field)*)? }, $msg),
            Some(n) => ::tracing::event!(
                ::tracing::Level::$level,
                { suppressed = n, $($($field)*)? },
                concat!($msg, " ({} similar suppressed in the last 10s)"),
                n
            ),
        }
    }};
}
pub(crate) use log_limited_by;

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(10);

    #[test]
    fn first_logs_then_window_suppresses_and_counts() {
        let l = LogLimit::new();
        assert_eq!(l.admit_at(0, W), Some(0));
        for t in [1, 500, 9_998] {
            assert_eq!(l.admit_at(t, W), None, "{t} ms");
        }
        // The first event after the window logs, telling how many it replaces.
        assert_eq!(l.admit_at(10_000, W), Some(3));
        assert_eq!(l.admit_at(10_001, W), None);
        assert_eq!(l.admit_at(25_000, W), Some(1));
        // A quiet stretch: the next event logs with nothing suppressed.
        assert_eq!(l.admit_at(60_000, W), Some(0));
    }

    #[test]
    fn flood_logs_one_line_per_window() {
        let l = LogLimit::new();
        let logged: Vec<u64> = (0..100_000u64)
            .filter_map(|i| l.admit_at(i / 2, W)) // 50 s, two events per ms
            .collect();
        assert_eq!(logged.len(), 5, "{logged:?}");
        assert_eq!(logged.first(), Some(&0));
        assert!(logged.iter().skip(1).all(|&n| n == 19_999), "{logged:?}");
    }

    #[test]
    fn sites_are_independent() {
        let (a, b) = (LogLimit::new(), LogLimit::new());
        assert_eq!(a.admit_at(0, W), Some(0));
        assert_eq!(b.admit_at(1, W), Some(0));
        assert_eq!(a.admit_at(2, W), None);
    }

    #[test]
    fn macro_expands_with_and_without_fields() {
        for _ in 0..3 {
            log_limited!(WARN, "test event"; worker = 1, error = %"boom");
            log_limited!(ERROR, "test event without fields");
        }
    }
}

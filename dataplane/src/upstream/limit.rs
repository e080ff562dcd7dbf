//! Per-host connection rate limit, shared by all workers (`connection_rate_limit_per_sec`).
//!
//! A token bucket holding one second's worth of connections and starting full, as Envoy's
//! `ConnPoolSettings.connection_rate_limit` (PR envoyproxy/envoy#26502, against the reconnect
//! storms of issue #26400). Only the connect path uses it, so a small mutex is fine here.
//!
//! A connection that finds the bucket empty *reserves* the next token instead of polling: the
//! bucket goes below zero and the caller is told how long to wait. Waiters are then served in
//! the order they asked, one every `1 / rate` seconds, without a thundering herd of workers
//! waking together, and over any window of `w` seconds at most `rate × (w + 1)` connections
//! start (the bucket's capacity plus its refill).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A token bucket of new connections to one host, process-wide.
pub struct ConnectLimiter {
    rate: AtomicU32,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    /// Tokens available; negative while connections wait for reserved ones.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl ConnectLimiter {
    /// `rate_per_sec` new connections per second; 0 = unlimited.
    pub fn new(rate_per_sec: u32) -> ConnectLimiter {
        ConnectLimiter {
            rate: AtomicU32::new(rate_per_sec),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(rate_per_sec),
                at: Instant::now(),
            }),
        }
    }

    /// Takes the cluster's current setting after a reload.
    pub fn set_rate(&self, rate_per_sec: u32) {
        self.rate.store(rate_per_sec, Ordering::Relaxed);
    }

    /// Takes one token for a connect attempt. Returns how long the caller must wait before it
    /// connects: zero when a token was available, otherwise the time until the token it reserved
    /// is due (the caller must not ask again for this attempt: the token is already its own).
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return Duration::ZERO;
        }
        let rate = f64::from(rate);
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        // Capacity is one second's worth; a lowered rate also lowers what is banked.
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.at = now.max(b.at);
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_waits() {
        let l = ConnectLimiter::new(0);
        for _ in 0..1000 {
            assert_eq!(l.reserve(), Duration::ZERO);
        }
    }

    #[test]
    fn starts_full_then_spaces_reservations_by_one_over_rate() {
        let l = ConnectLimiter::new(4);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(l.reserve_at(t0), Duration::ZERO);
        }
        let waits: Vec<f64> = (0..4).map(|_| l.reserve_at(t0).as_secs_f64()).collect();
        for (i, w) in waits.iter().enumerate() {
            let want = (i + 1) as f64 * 0.25;
            assert!((w - want).abs() < 1e-6, "wait {i}: {w} want {want}");
        }
        // Two seconds later the debt (4 tokens) is paid and 4 more accrued: full again, not more.
        let t2 = t0 + Duration::from_secs(2);
        for _ in 0..4 {
            assert_eq!(l.reserve_at(t2), Duration::ZERO);
        }
        assert!(l.reserve_at(t2) > Duration::ZERO);
    }

    /// Over any window of `w` seconds at most `rate × (w + 1)` connects are granted (waits are
    /// whole nanoseconds, hence the tolerance).
    #[test]
    fn window_bound_holds_under_contention() {
        let rate = 3u32;
        let l = ConnectLimiter::new(rate);
        let t0 = Instant::now();
        // 40 connections ask every 10 ms; each connects at ask time + the wait it was given.
        let mut starts = Vec::new();
        for step in 0..300u64 {
            let now = t0 + Duration::from_millis(step * 10);
            if step % 7 == 0 {
                for _ in 0..5 {
                    starts.push(now + l.reserve_at(now));
                }
            }
        }
        starts.sort();
        for (i, a) in starts.iter().enumerate() {
            for (j, b) in starts.iter().enumerate().skip(i) {
                let w = b.duration_since(*a).as_secs_f64();
                let n = (j - i + 1) as f64;
                assert!(
                    n <= f64::from(rate) * (w + 1.0) + 1e-6,
                    "{n} connects within {w}s"
                );
            }
        }
    }

    #[test]
    fn set_rate_applies_to_the_next_reservation() {
        let l = ConnectLimiter::new(1);
        let t0 = Instant::now();
        assert_eq!(l.reserve_at(t0), Duration::ZERO);
        assert!(l.reserve_at(t0) > Duration::ZERO);
        l.set_rate(0);
        assert_eq!(l.reserve_at(t0), Duration::ZERO);
    }
}

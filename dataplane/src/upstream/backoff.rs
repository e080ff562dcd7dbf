//! Reconnect backoff: how long a host that refused or failed a connection is left alone before
//! the next attempt. Shared connections ([`super::conn`]) and leased ones ([`super::lease`])
//! back off alike, so a host that is down costs a client one failed attempt, not one per
//! request.

use std::time::Duration;

/// First delay ceiling (full jitter: the delay is uniform below it).
pub(super) const BACKOFF_BASE: Duration = Duration::from_millis(50);
/// Largest delay ceiling.
pub(super) const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff And
/// Jitter"): each delay is uniform in [10 ms, min(cap, base × 2^attempt)].
pub(super) struct Backoff {
    base: Duration,
    cap: Duration,
    /// Delays taken since the last reset: 0 before the first failure of a run.
    pub(super) attempt: u32,
}

impl Backoff {
    /// From [`BACKOFF_BASE`] to [`BACKOFF_CAP`].
    pub(super) fn reconnect() -> Backoff {
        Backoff::new(BACKOFF_BASE, BACKOFF_CAP)
    }

    fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            attempt: 0,
        }
    }

    /// Starts over (the host proved itself).
    pub(super) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The next delay.
    pub(super) fn next(&mut self) -> Duration {
        let exp = self.base.saturating_mul(1u32 << self.attempt.min(16));
        self.attempt = self.attempt.saturating_add(1);
        let ceiling = exp.min(self.cap);
        // Never zero, so a dead host is not hammered in a tight loop.
        ceiling
            .mul_f64(fastrand::f64())
            .max(Duration::from_millis(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        for attempt in 0..20u32 {
            let d = b.next();
            let ceiling = Duration::from_millis(50)
                .saturating_mul(1u32 << attempt.min(16))
                .min(Duration::from_secs(5));
            assert!(
                d <= ceiling.max(Duration::from_millis(10)),
                "{attempt}: {d:?}"
            );
            assert!(d >= Duration::from_millis(10));
        }
        b.reset();
        assert!(b.next() <= Duration::from_millis(50));
    }
}

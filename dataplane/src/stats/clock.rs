//! The batch clock: one `Instant::now()` per I/O batch, shared by every request parsed from one
//! downstream read and every reply matched from one upstream read. Latency histograms and
//! upstream request times read it instead of the system clock.

use std::cell::Cell;
use std::time::Instant;

thread_local! {
    /// The time of the I/O batch this thread is handling, if any (see [`BatchClock`]).
    static BATCH_NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// While alive, [`now`] on this thread returns the instant it was entered with: every request
/// parsed from one read, and every reply matched from one upstream read, shares one clock read
/// (one `Instant::now()` per batch, not per request).
pub struct BatchClock(Option<Instant>);

impl BatchClock {
    /// Starts a batch at `now` (nesting restores the outer batch's time on drop).
    #[inline]
    pub fn enter(now: Instant) -> BatchClock {
        BatchClock(BATCH_NOW.with(|c| c.replace(Some(now))))
    }
}

impl Drop for BatchClock {
    #[inline]
    fn drop(&mut self) {
        let prev = self.0;
        BATCH_NOW.with(|c| c.set(prev));
    }
}

/// The current batch's time, or `Instant::now()` outside a batch (timeouts, connection
/// failures).
#[inline]
pub fn now() -> Instant {
    BATCH_NOW.with(Cell::get).unwrap_or_else(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn batch_clock_is_shared_and_restored() {
        let t0 = Instant::now();
        {
            let _b = BatchClock::enter(t0);
            assert_eq!(now(), t0);
            let t1 = t0 + Duration::from_millis(5);
            {
                let _inner = BatchClock::enter(t1);
                assert_eq!(now(), t1);
            }
            assert_eq!(now(), t0);
        }
        assert!(BATCH_NOW.with(Cell::get).is_none());
    }
}

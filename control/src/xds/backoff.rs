//! Reconnect backoff between ADS stream attempts: gRPC's connection backoff
//! (grpc/grpc `doc/connection-backoff.md`: initial 1 s, ×1.6, ±20 % jitter, 120 s cap), reset only
//! after a response was received on a stream (gRFC A57 "Handling ADS Stream Termination").
//! Jitter is mandatory: fleets reconnecting in lock-step take control planes down (istio #35263).

use std::time::Duration;

/// First delay.
pub const INITIAL: Duration = Duration::from_secs(1);
/// Growth per attempt.
pub const MULTIPLIER: f64 = 1.6;
/// ± fraction of randomness around each delay.
pub const JITTER: f64 = 0.2;
/// Largest un-jittered delay.
pub const MAX: Duration = Duration::from_secs(120);

/// Exponential backoff state.
#[derive(Debug, Clone)]
pub struct Backoff {
    current: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { current: INITIAL }
    }
}

impl Backoff {
    /// The next delay, jittered with `fastrand`.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(fastrand::f64())
    }

    /// The next delay with `r` in [0, 1) as the random draw: `current × (1 + JITTER × (2r − 1))`,
    /// then `current = min(current × MULTIPLIER, MAX)` (connection-backoff.md applies jitter to the
    /// capped value, so a delay may reach 120 s × 1.2).
    pub fn next_delay_with(&mut self, r: f64) -> Duration {
        let r = r.clamp(0.0, 1.0);
        let base = self.current;
        self.current = base.mul_f64(MULTIPLIER).min(MAX);
        base.mul_f64(1.0 + JITTER * (2.0 * r - 1.0))
    }

    /// Back to [`INITIAL`]; called once a stream has received a response.
    pub fn reset(&mut self) {
        self.current = INITIAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_bounds() {
        let mut b = Backoff::default();
        let mut expected = 1.0f64;
        for i in 0..30 {
            let lo = b.clone().next_delay_with(0.0).as_secs_f64();
            let hi = b.clone().next_delay_with(1.0).as_secs_f64();
            let d = b.next_delay().as_secs_f64();
            assert!(
                (lo - expected * 0.8).abs() < 1e-6,
                "attempt {i}: low {lo} vs {expected}"
            );
            assert!(
                (hi - expected * 1.2).abs() < 1e-6,
                "attempt {i}: high {hi} vs {expected}"
            );
            assert!(d >= lo && d <= hi, "attempt {i}: {d} outside [{lo}, {hi}]");
            expected = (expected * 1.6).min(120.0);
        }
        // Capped: 120 s ± 20 %.
        assert!((Backoff { current: MAX }.next_delay_with(0.5).as_secs_f64() - 120.0).abs() < 1e-6);
        b.reset();
        assert_eq!(b.next_delay_with(0.5), Duration::from_secs(1));
        assert!((b.next_delay_with(0.5).as_secs_f64() - 1.6).abs() < 1e-9);
    }

    #[test]
    fn jitter_spreads() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            seen.insert(Backoff::default().next_delay().as_millis());
        }
        assert!(
            seen.len() > 10,
            "jitter produced only {} distinct delays",
            seen.len()
        );
    }
}

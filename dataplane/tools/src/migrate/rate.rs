//! A token bucket: at most `rate` operations per second, with a burst of a tenth of a second's
//! worth (at least one), so `--rate` holds over any window longer than that.

use std::time::{Duration, Instant};

/// Paces a loop to a rate; unlimited when built with `None`.
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A bucket for `rate` operations per second (`None`: no limit). Starts with one token, so
    /// the first operation is immediate and a run of N takes at least (N - 1) / rate.
    pub fn new(rate: Option<f64>) -> TokenBucket {
        let rate = rate.unwrap_or(f64::INFINITY);
        TokenBucket {
            rate,
            burst: (rate / 10.0).max(1.0),
            tokens: 1.0,
            last: Instant::now(),
        }
    }

    /// Waits (sleeping) until one operation may run, and takes its token.
    pub fn take(&mut self) {
        if self.rate.is_infinite() {
            return;
        }
        loop {
            let now = Instant::now();
            let earned = now.duration_since(self.last).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
            self.last = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                return;
            }
            let wait = (1.0 - self.tokens) / self.rate;
            std::thread::sleep(Duration::from_secs_f64(wait.min(1.0)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_the_rate() {
        let mut b = TokenBucket::new(Some(200.0));
        let t = Instant::now();
        for _ in 0..41 {
            b.take();
        }
        let took = t.elapsed();
        // 41 operations at 200/s: the first is free, 40 more need 0.2 s.
        assert!(took >= Duration::from_millis(190), "{took:?}");
        let mut free = TokenBucket::new(None);
        let t = Instant::now();
        for _ in 0..100_000 {
            free.take();
        }
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}

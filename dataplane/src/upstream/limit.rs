//! Per-host connection rate limit, shared by all workers (`connection_rate_limit_per_sec`).
//!
//! STUB: always allows; the reconnect work fills it in.

use std::sync::atomic::{AtomicU32, Ordering};

/// A token bucket of new connections to one host, process-wide.
pub struct ConnectLimiter {
    rate: AtomicU32,
}

impl ConnectLimiter {
    /// `rate_per_sec` new connections per second; 0 = unlimited.
    pub fn new(rate_per_sec: u32) -> ConnectLimiter {
        ConnectLimiter {
            rate: AtomicU32::new(rate_per_sec),
        }
    }

    /// Takes the cluster's current setting after a reload.
    pub fn set_rate(&self, rate_per_sec: u32) {
        self.rate.store(rate_per_sec, Ordering::Relaxed);
    }
}

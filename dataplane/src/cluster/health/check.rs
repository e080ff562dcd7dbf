//! The verdict rules of one active check of one host: what a reply means and when consecutive
//! results flip the host (Envoy `core.v3.HealthCheck` thresholds and the redis health
//! checker's reply rules), free of sockets.

/// How one check attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `+PONG` to `PING`, or `:0` to `EXISTS key`; or `-BUSY` (a script is running: the host
    /// is busy, not dead, and ejecting it would only move its keys' errors elsewhere).
    Pass,
    /// The host answered, but not with the healthy reply (`:1` to `EXISTS`, an error reply,
    /// a failed `AUTH`): Envoy's active failure.
    Fail,
    /// Connect failure, timeout, or the connection closed: Envoy's network failure.
    NetworkFail,
}

/// Judges one reply: `exists` is true for an `EXISTS key` check (healthy only on `:0`; `:1` or
/// anything else is unhealthy), false for `PING` (healthy only on `+PONG`); `-BUSY` passes either.
pub fn judge(reply: &[u8], exists: bool) -> Outcome {
    let healthy: &[u8] = if exists { b":0\r\n" } else { b"+PONG\r\n" };
    // `-BUSY`: a script runs past `busy-reply-threshold`; the host answers, it is not dead.
    if reply == healthy || reply.starts_with(b"-BUSY ") {
        Outcome::Pass
    } else {
        Outcome::Fail
    }
}

/// The consecutive-result counter of one (host, check).
///
/// Both kinds of failure count towards `unhealthy_threshold`. (Envoy marks a host unhealthy at
/// once on an active failure of an HTTP check with a non-retriable status; for the redis
/// checker the threshold is what operators tune, so it applies to every failure here.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    healthy: bool,
    passes: u32,
    fails: u32,
}

impl Tally {
    /// A tally starting in state `healthy`.
    pub fn new(healthy: bool) -> Tally {
        Tally {
            healthy,
            passes: 0,
            fails: 0,
        }
    }

    /// The state this tally holds.
    #[cfg(test)]
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// True while the host is healthy with no failure since its last pass: only then may its
    /// checks slow down to `no_traffic_interval`.
    pub fn settled(&self) -> bool {
        self.healthy && self.fails == 0
    }

    /// Records one attempt; `Some(new state)` when it flips the host: `unhealthy_threshold`
    /// failures in a row turn a healthy host unhealthy, `healthy_threshold` passes in a row
    /// turn an unhealthy one healthy.
    pub fn record(
        &mut self,
        outcome: Outcome,
        unhealthy_threshold: u32,
        healthy_threshold: u32,
    ) -> Option<bool> {
        if outcome == Outcome::Pass {
            self.fails = 0;
            self.passes = self.passes.saturating_add(1);
            if !self.healthy && self.passes >= healthy_threshold.max(1) {
                self.healthy = true;
                self.passes = 0;
                return Some(true);
            }
        } else {
            self.passes = 0;
            self.fails = self.fails.saturating_add(1);
            if self.healthy && self.fails >= unhealthy_threshold.max(1) {
                self.healthy = false;
                self.fails = 0;
                return Some(false);
            }
        }
        None
    }
}

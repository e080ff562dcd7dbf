//! Passive outlier detection (Envoy `cluster.v3.OutlierDetection`, the `consecutive_5xx` rule
//! as the redis proxy feeds it): the health thread's ejection bookkeeping, free of sockets so
//! the rules are unit-tested with a fake clock. The worker-side run of failures per connection
//! is `upstream::Streak`; it asks for an ejection through [`super::HostHealth`].

use std::time::{Duration, Instant};

use crate::config::OutlierDetectionConfig;

/// The ejection state of one host, kept by the health thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ejection {
    /// Times the host was ejected, lowered by one for each `interval` it spends not ejected
    /// (Envoy's `num_ejections` decay).
    pub times: u32,
    /// Ejected until then.
    pub until: Option<Instant>,
}

/// What [`Ejector`] did with an ejection request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The host is now ejected for this long.
    Ejected(Duration),
    /// Ejecting it would pass `max_ejection_percent` (`ejections_overflow`).
    Overflow,
    /// The host is already ejected.
    AlreadyEjected,
}

/// The ejection rules of one cluster.
#[derive(Debug, Clone)]
pub struct Ejector {
    pub cfg: OutlierDetectionConfig,
    /// When the next `interval` review is due.
    next_review: Option<Instant>,
}

impl Ejector {
    pub fn new(cfg: OutlierDetectionConfig) -> Ejector {
        Ejector {
            cfg,
            next_review: None,
        }
    }

    /// Most hosts of a cluster of `hosts` that may be ejected at once: `max_ejection_percent`
    /// of them rounded down, but at least one (a two-host cluster at 10% could otherwise never
    /// eject a dead host).
    pub fn max_ejected(&self, hosts: usize) -> usize {
        (hosts * self.cfg.max_ejection_percent as usize / 100).max(1)
    }

    /// How long the `times`-th ejection lasts: `base_ejection_time × times`, capped by
    /// `max_ejection_time` (but never below `base_ejection_time`, as Envoy does).
    pub fn duration(&self, times: u32) -> Duration {
        let cap = self.cfg.max_ejection_time.max(self.cfg.base_ejection_time);
        self.cfg
            .base_ejection_time
            .saturating_mul(times.max(1))
            .min(cap)
    }

    /// An ejection request for a host in state `e`, with `ejected` hosts of `hosts` already
    /// ejected.
    pub fn request(&self, e: &mut Ejection, ejected: usize, hosts: usize, now: Instant) -> Verdict {
        if e.until.is_some() {
            return Verdict::AlreadyEjected;
        }
        if ejected >= self.max_ejected(hosts) {
            return Verdict::Overflow;
        }
        e.times = e.times.saturating_add(1);
        let d = self.duration(e.times);
        e.until = Some(now + d);
        Verdict::Ejected(d)
    }

    /// True if `e`'s ejection has run out at `now` (then it is cleared).
    pub fn expire(&self, e: &mut Ejection, now: Instant) -> bool {
        match e.until {
            Some(until) if now >= until => {
                e.until = None;
                true
            }
            _ => false,
        }
    }

    /// True once per `interval`: the caller then calls [`Ejector::review`] on every host.
    pub fn review_due(&mut self, now: Instant) -> bool {
        match self.next_review {
            None => {
                self.next_review = Some(now + self.cfg.interval);
                false
            }
            Some(at) if now >= at => {
                self.next_review = Some(now + self.cfg.interval);
                true
            }
            Some(_) => false,
        }
    }

    /// The `interval` review of one host: a host not ejected has its ejection count lowered.
    pub fn review(&self, e: &mut Ejection) {
        if e.until.is_none() {
            e.times = e.times.saturating_sub(1);
        }
    }
}

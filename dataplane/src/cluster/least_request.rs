//! `lb_policy = "least_request"`: Envoy's LEAST_REQUEST (source/extensions/
//! load_balancing_policies/least_request/least_request_lb.cc) over this worker's own counts
//! of outstanding requests per host (no counter is shared between workers).
//!
//! - Equal weights: `choice_count` hosts drawn uniformly at random (with repetition, as
//!   Envoy's `unweightedHostPickNChoices`); the first drawn wins unless a later one has
//!   strictly fewer active requests.
//! - Unequal weights: Envoy schedules hosts by the dynamic weight
//!   `weight / (active + 1)^active_request_bias` (`hostWeight`) in its EDF scheduler, refreshed
//!   as hosts are picked; Respite draws a host with probability proportional to that weight
//!   taken now, over every host (one pass, no allocation).
//!
//! One pick per client command (and per transaction): the first pick for a draw is pinned in
//! it (`random::pin`) and every later key of the command or transaction gets the same host.

use super::random;
use crate::config::LeastRequestConfig;

/// The least-request picker of one host set.
#[derive(Debug, Clone)]
pub(crate) struct LeastRequest {
    /// The hosts with weight > 0.
    hosts: Vec<u32>,
    /// `live[i]`: host `i` has weight > 0.
    live: Vec<bool>,
    /// Weights of `hosts` (same order) when they differ; empty when all are equal.
    weights: Vec<f64>,
    choice_count: u32,
    bias: f64,
}

impl LeastRequest {
    /// Over the hosts of `weights` that are > 0.
    pub(super) fn new(weights: &[u32], config: LeastRequestConfig) -> LeastRequest {
        let hosts = random::live(weights);
        let live_weights: Vec<u32> = hosts
            .iter()
            .filter_map(|&h| weights.get(h as usize).copied())
            .collect();
        let equal = live_weights.windows(2).all(|w| w.first() == w.last());
        LeastRequest {
            live: weights.iter().map(|&w| w > 0).collect(),
            weights: if equal {
                Vec::new()
            } else {
                live_weights.iter().map(|&w| f64::from(w)).collect()
            },
            hosts,
            choice_count: config.choice_count.max(1),
            bias: config.active_request_bias,
        }
    }

    /// The host for the current draw: the one pinned for it, or a fresh pick (then pinned).
    /// `active(i)`: host `i`'s outstanding requests on this worker, `None` when it may not be
    /// picked (unhealthy in a `rehash` cluster). `None` when no host may be picked.
    #[inline]
    pub(super) fn pick(&self, active: impl Fn(usize) -> Option<usize>) -> Option<usize> {
        if let Some(p) = random::pinned()
            && self.live.get(p).copied().unwrap_or(false)
            && active(p).is_some()
        {
            return Some(p);
        }
        let host = if self.weights.is_empty() {
            self.n_choices(&active)
        } else {
            self.weighted(&active)
        }?;
        random::pin(host);
        Some(host)
    }

    /// Envoy `unweightedHostPickNChoices`; a host that may not be picked counts as busiest.
    fn n_choices(&self, active: &impl Fn(usize) -> Option<usize>) -> Option<usize> {
        let n = self.hosts.len();
        if n == 0 {
            return None;
        }
        let mut best: Option<(usize, usize)> = None;
        for _ in 0..self.choice_count {
            let Some(&h) = self.hosts.get(fastrand::usize(..n)) else {
                continue;
            };
            let h = h as usize;
            let a = active(h).unwrap_or(usize::MAX);
            if best.is_none_or(|(_, b)| a < b) {
                best = Some((h, a));
            }
        }
        match best {
            Some((h, a)) if a != usize::MAX => Some(h),
            // Every sampled host is out: the least loaded of those that may be picked.
            _ => self
                .hosts
                .iter()
                .filter_map(|&h| active(h as usize).map(|a| (a, h as usize)))
                .min()
                .map(|(_, h)| h),
        }
    }

    /// A host drawn in proportion to `weight / (active + 1)^bias`.
    fn weighted(&self, active: &impl Fn(usize) -> Option<usize>) -> Option<usize> {
        let share = |i: usize, h: u32| -> f64 {
            let Some(a) = active(h as usize) else {
                return 0.0;
            };
            let w = self.weights.get(i).copied().unwrap_or(0.0);
            let load = a as f64 + 1.0;
            if self.bias == 1.0 {
                w / load
            } else if self.bias == 0.0 {
                w
            } else {
                w / load.powf(self.bias)
            }
        };
        let total: f64 = self
            .hosts
            .iter()
            .enumerate()
            .map(|(i, &h)| share(i, h))
            .sum();
        if total <= 0.0 {
            return None;
        }
        let mut r = fastrand::f64() * total;
        let mut last = None;
        for (i, &h) in self.hosts.iter().enumerate() {
            let s = share(i, h);
            if s > 0.0 {
                last = Some(h as usize);
                if r < s {
                    return last;
                }
                r -= s;
            }
        }
        // Rounding left a sliver past the last share.
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(choice_count: u32, bias: f64) -> LeastRequestConfig {
        LeastRequestConfig {
            choice_count,
            active_request_bias: bias,
        }
    }

    fn picks(lr: &LeastRequest, active: &[Option<usize>], n: usize) -> Vec<usize> {
        let mut count = vec![0; active.len()];
        for i in 0..n {
            random::set_draw(i as u64);
            if let Some(h) = lr.pick(|h| active.get(h).copied().flatten()) {
                count[h] += 1;
            }
        }
        count
    }

    #[test]
    fn two_choices_avoid_the_busy_host() {
        let lr = LeastRequest::new(&[1, 1, 1], config(2, 1.0));
        let c = picks(&lr, &[Some(0), Some(50), Some(0)], 9000);
        // Host 1 wins only when both draws are host 1: 1/9 of the picks.
        assert!(c[1] > 700 && c[1] < 1300, "{c:?}");
        assert!(c[0] > 3500 && c[2] > 3500, "{c:?}");
        // With more choices the busy host is picked more rarely: (1/3)^5.
        let lr = LeastRequest::new(&[1, 1, 1], config(5, 1.0));
        let c = picks(&lr, &[Some(0), Some(50), Some(0)], 9000);
        assert!(c[1] < 100, "{c:?}");
    }

    #[test]
    fn out_hosts_are_never_picked() {
        let lr = LeastRequest::new(&[1, 1, 0], config(2, 1.0));
        let c = picks(&lr, &[None, Some(3), Some(0)], 1000);
        assert_eq!(c, [0, 1000, 0]);
        let none = picks(&lr, &[None, None, Some(0)], 10);
        assert_eq!(none, [0, 0, 0]);
    }

    #[test]
    fn weighted_shares_follow_weight_and_load() {
        let lr = LeastRequest::new(&[3, 1], config(2, 1.0));
        let c = picks(&lr, &[Some(0), Some(0)], 8000);
        assert!(c[0] > 5600 && c[0] < 6400, "{c:?}");
        // 3/(5+1) against 1/(0+1): host 1 gets 2/3.
        let c = picks(&lr, &[Some(5), Some(0)], 9000);
        assert!(c[1] > 5600 && c[1] < 6400, "{c:?}");
        // Bias 0: load is ignored.
        let lr = LeastRequest::new(&[3, 1], config(2, 0.0));
        let c = picks(&lr, &[Some(5), Some(0)], 8000);
        assert!(c[0] > 5600 && c[0] < 6400, "{c:?}");
    }

    #[test]
    fn one_pick_per_draw() {
        let lr = LeastRequest::new(&[1, 1, 1, 1], config(2, 1.0));
        random::set_draw(42);
        let first = lr.pick(|_| Some(0));
        for _ in 0..20 {
            assert_eq!(lr.pick(|_| Some(0)), first);
        }
    }
}

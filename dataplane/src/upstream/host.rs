//! What a connection needs of its host's process-wide state, and the run of failures it counts
//! towards outlier detection. The state itself (health, ejection, the connection rate limit)
//! is kept by the cluster layer, which implements [`HostState`]; this layer only reads it and
//! reports failures, so it never depends on how health is decided.

use std::cell::Cell;
use std::net::SocketAddr;

use super::limit::ConnectLimiter;

/// The host a connection serves, as every worker shares it.
pub trait HostState: 'static {
    /// The name of the host's cluster (for logs).
    fn cluster(&self) -> &str;
    /// The host's address.
    fn addr(&self) -> SocketAddr;
    /// New connections to the host, over all workers (`connection_rate_limit_per_sec`).
    fn connects(&self) -> &ConnectLimiter;
    /// False while the host fails its health checks or is ejected. On the request path: one
    /// relaxed load.
    fn is_healthy(&self) -> bool;
    /// Failures in a row on one connection after which the host's ejection is asked for
    /// (outlier detection's `consecutive_5xx`); 0: outlier detection is off.
    fn failure_threshold(&self) -> u32;
    /// A connection saw [`HostState::failure_threshold`] failures in a row.
    fn request_ejection(&self);
}

/// One connection's run of consecutive failures. A `Cell`: no sharing, nothing written but this
/// worker's own memory on the reply path.
///
/// What counts (Envoy redis_proxy docs, "Outlier detection"): a failed connect, a connection
/// closed under us, and an `op_timeout` expiring are failures; every Redis reply, even an error
/// reply, is an answer and ends the run.
#[derive(Debug, Default)]
pub struct Streak(Cell<u32>);

impl Streak {
    /// A reply arrived: the run ends.
    #[inline]
    pub fn success(&self) {
        if self.0.get() != 0 {
            self.0.set(0);
        }
    }

    /// A connect failure, a connection closed under us, or an op timeout. At the host's
    /// threshold the connection asks for an ejection and starts counting again (so a refused
    /// request, e.g. past `max_ejection_percent`, is asked again only after another full run).
    pub fn failure(&self, host: &impl HostState) {
        let threshold = host.failure_threshold();
        if threshold == 0 {
            return;
        }
        let n = self.0.get().saturating_add(1);
        if n >= threshold {
            self.0.set(0);
            host.request_ejection();
        } else {
            self.0.set(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::net::SocketAddr;

    use super::*;

    /// A host whose threshold the test sets and which counts ejection requests.
    struct FakeHost {
        threshold: Cell<u32>,
        ejections: Cell<u32>,
        connects: ConnectLimiter,
    }

    impl HostState for FakeHost {
        fn cluster(&self) -> &str {
            "c"
        }
        fn addr(&self) -> SocketAddr {
            SocketAddr::from(([127, 0, 0, 1], 1))
        }
        fn connects(&self) -> &ConnectLimiter {
            &self.connects
        }
        fn is_healthy(&self) -> bool {
            true
        }
        fn failure_threshold(&self) -> u32 {
            self.threshold.get()
        }
        fn request_ejection(&self) {
            self.ejections.set(self.ejections.get() + 1);
        }
    }

    #[test]
    fn streak_requests_ejection_at_the_threshold() {
        let h = FakeHost {
            threshold: Cell::new(0),
            ejections: Cell::new(0),
            connects: ConnectLimiter::new(0),
        };
        let s = Streak::default();
        for _ in 0..10 {
            s.failure(&h);
        }
        assert_eq!(h.ejections.get(), 0, "outlier detection off");
        h.threshold.set(3);
        s.failure(&h);
        s.failure(&h);
        s.success();
        s.failure(&h);
        s.failure(&h);
        assert_eq!(h.ejections.get(), 0, "a reply ends the run");
        s.failure(&h);
        assert_eq!(h.ejections.get(), 1);
        s.failure(&h);
        s.failure(&h);
        assert_eq!(h.ejections.get(), 1, "counting starts over after a request");
    }
}

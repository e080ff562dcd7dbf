//! Host health: active checks (Envoy's redis health checker) and passive outlier detection
//! (Envoy `outlier_detection`), decided once per process and read by every worker.
//!
//! - [`HostHealth`] is one `AtomicU32` per host: bit `j` (< [`EJECTED_BIT`]) is set while
//!   active check `j` of the cluster fails, [`EJECTED_BIT`] while outlier detection ejects the
//!   host. Workers read it with one relaxed load per request ([`HostHealth::is_healthy`]).
//! - Every change of any host of a cluster bumps the cluster's [`ClusterVersion`]; a worker
//!   whose cluster rehashes around unhealthy hosts compares it (one relaxed load) with the
//!   version it built its load balancer from, like `TopologyCell` for slot maps.
//! - Workers count consecutive failures per connection locally (`upstream::Streak`, a `Cell`)
//!   and ask for an ejection through [`HostHealth::request_ejection`]; the health thread
//!   ([`Checker`]) decides (`max_ejection_percent`), ejects, and un-ejects.
//!
//! Hosts start healthy: a proxy that starts (or reloads) while its checks have not run yet
//! routes as if no checks were configured, rather than refusing everything until the first
//! round of checks passes.

mod check;
mod checker;
mod outlier;
mod probe;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub use checker::Checker;

/// Bit of [`HostHealth`] set while outlier detection ejects the host; bits below it are active
/// checks (so a cluster has at most 31 active checks, which validation guarantees in practice:
/// more would be a config mistake; extra checks share the last bit).
pub const EJECTED_BIT: u32 = 31;

/// The health version of one cluster: bumped whenever any of its hosts changes health.
#[derive(Debug, Default)]
pub struct ClusterVersion(AtomicU64);

impl ClusterVersion {
    /// The current version (one relaxed load; request path).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// The health of one host, shared by the health thread (writer) and every worker (readers: one
/// relaxed atomic load per request, no lock).
#[derive(Debug)]
pub struct HostHealth {
    /// Bit `j`: active check `j` fails; [`EJECTED_BIT`]: ejected. 0 = healthy.
    state: AtomicU32,
    /// A worker saw `consecutive_5xx` failures in a row and asks for an ejection.
    eject_requested: AtomicBool,
    /// Outlier detection's `consecutive_5xx` for this host's cluster; 0 = outlier detection off.
    consecutive_5xx: AtomicU32,
    /// The version of the host's cluster, bumped on every change here.
    version: Arc<ClusterVersion>,
}

impl Default for HostHealth {
    fn default() -> Self {
        HostHealth::new(Arc::default())
    }
}

impl HostHealth {
    /// A healthy host of the cluster whose health version is `version`.
    pub fn new(version: Arc<ClusterVersion>) -> HostHealth {
        HostHealth {
            state: AtomicU32::new(0),
            eject_requested: AtomicBool::new(false),
            consecutive_5xx: AtomicU32::new(0),
            version,
        }
    }

    /// True unless active checks failed it or outlier detection ejected it.
    #[inline]
    pub fn is_healthy(&self) -> bool {
        self.state.load(Ordering::Relaxed) == 0
    }

    /// The cluster's health version (shared by all its hosts).
    pub fn version(&self) -> &Arc<ClusterVersion> {
        &self.version
    }

    /// True while outlier detection ejects the host.
    pub fn is_ejected(&self) -> bool {
        self.state.load(Ordering::Relaxed) & (1 << EJECTED_BIT) != 0
    }

    /// True while no active check fails (ejection aside): Envoy's `health_check.healthy`.
    pub fn passes_checks(&self) -> bool {
        self.state.load(Ordering::Relaxed) & !(1 << EJECTED_BIT) == 0
    }

    /// True while active check `check` fails.
    pub fn check_failing(&self, check: usize) -> bool {
        self.state.load(Ordering::Relaxed) & check_bit(check) != 0
    }

    /// Sets or clears `bit` (health thread). Returns `(healthy before, healthy after)`; bumps
    /// the cluster version when the state changed.
    fn set_bit(&self, bit: u32, on: bool) -> (bool, bool) {
        let before = if on {
            self.state.fetch_or(bit, Ordering::AcqRel)
        } else {
            self.state.fetch_and(!bit, Ordering::AcqRel)
        };
        let after = if on { before | bit } else { before & !bit };
        if before != after {
            self.version.bump();
        }
        (before == 0, after == 0)
    }

    /// Marks active check `check` failing or passing. See [`HostHealth::set_bit`].
    pub fn set_check_failing(&self, check: usize, failing: bool) -> (bool, bool) {
        self.set_bit(check_bit(check), failing)
    }

    /// Clears the bits of checks `from..` (a reload left the cluster with fewer checks).
    pub fn clear_checks_from(&self, from: usize) {
        for j in from..EJECTED_BIT as usize {
            if self.check_failing(j) {
                self.set_check_failing(j, false);
            }
        }
    }

    /// Ejects or un-ejects the host (health thread). See [`HostHealth::set_bit`].
    pub fn set_ejected(&self, ejected: bool) -> (bool, bool) {
        self.set_bit(1 << EJECTED_BIT, ejected)
    }

    /// Outlier detection's `consecutive_5xx` for this host; 0 = off.
    #[inline]
    pub fn consecutive_5xx(&self) -> u32 {
        self.consecutive_5xx.load(Ordering::Relaxed)
    }

    /// Sets `consecutive_5xx` (0 = outlier detection off); the health thread does it whenever
    /// it (re)starts the cluster.
    pub fn set_consecutive_5xx(&self, n: u32) {
        self.consecutive_5xx.store(n, Ordering::Relaxed);
    }

    /// A worker saw `consecutive_5xx` failures in a row (failure path only: one store).
    pub fn request_ejection(&self) {
        self.eject_requested.store(true, Ordering::Relaxed);
    }

    /// Takes a pending ejection request (health thread).
    pub fn take_ejection_request(&self) -> bool {
        self.eject_requested.swap(false, Ordering::AcqRel)
    }
}

/// The state bit of active check `check` (checks past the 31st share the last check bit).
fn check_bit(check: usize) -> u32 {
    1 << (check.min(EJECTED_BIT as usize - 1) as u32)
}

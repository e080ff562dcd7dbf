//! Host health: active checks (Envoy's redis health checker) and passive outlier detection.
//!
//! STUB: every host is healthy; the health work fills it in.

/// The health of one host, shared by the health thread (writer) and every worker (readers: one
/// relaxed atomic load per request, no lock).
#[derive(Default)]
pub struct HostHealth {}

impl HostHealth {
    /// True unless active checks failed it or outlier detection ejected it.
    #[inline]
    pub fn is_healthy(&self) -> bool {
        true
    }
}

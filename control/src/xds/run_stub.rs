//! TEMPORARY until the client lands.
use super::Applier;
use super::status::Status;
use crate::source::bootstrap::Bootstrap;

/// Runs the client.
pub async fn run<A: Applier>(_b: Bootstrap, _a: A, _s: Status) -> Result<(), String> {
    Err("xds client not implemented".into())
}

//! What a drawn fault does to the request it hit (Envoy `redis_proxy` faults; which fault, if
//! any, is [`crate::router::fault::Faults::pick`]).

use super::Slots;
use crate::router::fault::{FAULT_ERROR_REPLY, Fault};

/// Applies `fault`, drawn for a request of command `cmd` about to be dispatched: a delay holds
/// the request's reply (the next slot of `slots`); an ERROR fault answers it with
/// [`FAULT_ERROR_REPLY`] (held too when it has a delay). True when the request was answered
/// and must not be forwarded.
pub fn apply<S: Slots>(fault: Fault, cmd: u16, slots: &S) -> bool {
    if let Some(d) = fault.delay() {
        slots.hold_next(d);
    }
    match fault {
        Fault::Error { .. } => {
            slots.local(cmd, FAULT_ERROR_REPLY);
            true
        }
        Fault::Delay(_) => false,
    }
}

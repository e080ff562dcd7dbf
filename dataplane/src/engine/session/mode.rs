//! The connection's mode: what the requests of a connection may do, given what came before.
//! Every state of a connection that changes how later requests are served is a state here, so
//! the session's request handler asks one place.

use super::transaction::Tx;

/// What the connection is in, as far as the requests it may run are concerned.
#[derive(Default)]
pub(super) enum Mode {
    /// Requests go over the worker's shared pipelined upstream connections (a WATCH, if any,
    /// holds a leased connection meanwhile).
    #[default]
    Shared,
    /// Inside MULTI: requests are queued and sent to the transaction's backend (see
    /// [`super::transaction`]).
    Multi(Box<Tx>),
}

impl Mode {
    /// True in the shared mode.
    #[inline]
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Mode::Shared)
    }
}

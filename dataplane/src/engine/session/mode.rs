//! The connection's mode: what the requests of a connection may do, given what came before.
//! Every state of a connection that changes how later requests are served is a state here, so
//! the session's request handler asks one place.

use std::borrow::Cow;

use crate::command::{self, CommandSpec};
use crate::resp::Request;

/// Redis's reply to EXEC of a transaction flagged by an error while queuing (`multi.c`).
const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// What the connection is in, as far as the requests it may run are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Mode {
    /// Requests go over the worker's shared pipelined upstream connections.
    #[default]
    Shared,
    /// The client sent MULTI, which was refused: until EXEC or DISCARD every request is refused
    /// unrun and EXEC answers `-EXECABORT`, as Redis treats a transaction that had a queue-time
    /// error. Without this, a client that pipelines MULTI … EXEC would see the transaction fail
    /// while its commands ran one by one.
    RefusedMulti,
}

/// A request the mode looked at before it was resolved.
pub(super) struct Seen {
    /// Its row by name (counted as a request of that command; `None`: of no command).
    pub spec: Option<&'static CommandSpec>,
    /// The mode's answer: the request is not run. `None`: it is handled as usual.
    pub answer: Option<Cow<'static, [u8]>>,
}

impl Mode {
    /// Looks at `req` before it is resolved; `None` when the mode lets every request through
    /// untouched (shared). After a refused MULTI the replies are Redis's for a transaction
    /// with a queue-time error: nested MULTI and WATCH get their errors, EXEC answers
    /// `-EXECABORT`, DISCARD `+OK` (both end the state); RESET (which ends it too) and QUIT are
    /// handled as usual; anything else is refused unrun.
    pub(super) fn admit(&mut self, req: &Request<'_>) -> Option<Seen> {
        match self {
            Mode::Shared => None,
            Mode::RefusedMulti => {
                let spec = command::lookup(req.name());
                let answer = self.refused_multi(spec, req.argc());
                Some(Seen { spec, answer })
            }
        }
    }

    /// The request `spec` was refused (`Kind::Refused`): a refused MULTI starts the refused
    /// transaction.
    pub(super) fn refused(&mut self, spec: &CommandSpec) {
        if spec.name == "multi" {
            *self = Mode::RefusedMulti;
        }
    }

    fn refused_multi(
        &mut self,
        spec: Option<&'static CommandSpec>,
        argc: usize,
    ) -> Option<Cow<'static, [u8]>> {
        Some(match (spec.map(|s| s.name), argc) {
            (Some("reset"), _) => {
                *self = Mode::Shared;
                return None;
            }
            (Some("quit"), _) => return None,
            (Some("exec"), 1) => {
                *self = Mode::Shared;
                EXECABORT.into()
            }
            (Some("discard"), 1) => {
                *self = Mode::Shared;
                b"+OK\r\n"[..].into()
            }
            (Some("multi"), _) => b"-ERR MULTI calls can not be nested\r\n"[..].into(),
            (Some("watch"), _) => b"-ERR WATCH inside MULTI is not allowed\r\n"[..].into(),
            (Some(name), _) => format!(
                "-ERR '{name}' was not run: MULTI was refused on this connection, so the \
                 transaction is discarded; EXEC or DISCARD ends it\r\n"
            )
            .into_bytes()
            .into(),
            (None, _) => b"-ERR command was not run: MULTI was refused on this connection, so \
                the transaction is discarded; EXEC or DISCARD ends it\r\n"[..]
                .into(),
        })
    }
}

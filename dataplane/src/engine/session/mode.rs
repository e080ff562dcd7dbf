//! The connection's mode: what the requests of a connection may do, given what came before.
//! Every state of a connection that changes how later requests are served is a state here, so
//! the session's request handler asks one place.

use std::borrow::Cow;

use super::refused_multi::{self, Step};
use crate::command::CommandSpec;
use crate::command::Request;

/// What the connection is in, as far as the requests it may run are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Mode {
    /// Requests go over the worker's shared pipelined upstream connections.
    #[default]
    Shared,
    /// The client sent MULTI, which was refused: nothing runs until EXEC, DISCARD or RESET
    /// (see [`refused_multi`]).
    RefusedMulti,
}

/// The mode's answer to a request it does not let run.
pub(super) struct Answer {
    /// The request's table row id, or `NO_CMD` (counted as a request of that command).
    pub cmd: u16,
    pub reply: Cow<'static, [u8]>,
}

impl Mode {
    /// Looks at `req` before it is resolved; `None`: the request is handled as usual (always in
    /// the shared mode). `custom`: its name is one of the listener's `custom_commands`.
    pub(super) fn admit(&mut self, req: &Request<'_>, custom: bool) -> Option<Answer> {
        match self {
            Mode::Shared => None,
            Mode::RefusedMulti => match refused_multi::step(req.argc(), req.argv(), custom) {
                Step::Run { ends } => {
                    if ends {
                        *self = Mode::Shared;
                    }
                    None
                }
                Step::Answer { cmd, reply, ends } => {
                    if ends {
                        *self = Mode::Shared;
                    }
                    Some(Answer { cmd, reply })
                }
            },
        }
    }

    /// The request `spec` was refused (`Kind::Refused`): a refused MULTI starts the refused
    /// transaction.
    pub(super) fn refused(&mut self, spec: &CommandSpec) {
        if spec.name == "multi" {
            *self = Mode::RefusedMulti;
        }
    }
}

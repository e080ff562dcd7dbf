//! What a request means while a connection is inside `MULTI`, before anything is sent: the
//! queue-time rules of Redis (`server.c` `processCommand`, `multi.c`). Unknown commands and
//! wrong arity are answered at once and discard the transaction (EXEC then answers
//! `-EXECABORT`); a nested MULTI and a WATCH are answered with Redis's errors and change
//! nothing; EXEC, DISCARD, RESET and QUIT act; everything else is queued.

use std::borrow::Cow;

use crate::command::{self, CommandSpec, ResolveError};
use crate::engine::sink::NO_CMD;

/// Redis's reply to EXEC of a transaction flagged by an error while queuing.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// What the session does with one request inside `MULTI`.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Answer `reply` (a request of table row `cmd`, or [`NO_CMD`]). `discards`: the
    /// transaction is flagged, EXEC will answer `-EXECABORT`; `ends`: the transaction ends
    /// here (a malformed EXEC).
    Answer {
        cmd: u16,
        reply: Cow<'static, [u8]>,
        discards: bool,
        ends: bool,
    },
    /// EXEC: run the transaction (or answer `-EXECABORT` when it was flagged).
    Exec(&'static CommandSpec),
    /// DISCARD: `+OK`, the transaction and its WATCH end.
    Discard(&'static CommandSpec),
    /// RESET (ends the transaction, then runs as usual) or QUIT (runs as usual).
    Run { ends: bool },
    /// Queue it: a command of row `spec`, or a custom command (`None`).
    Queue(Option<&'static CommandSpec>),
}

/// The step for a request of `argc` arguments, `arg(i)` the i-th (`arg(0)` the name). `custom`:
/// the name is one of the listener's `custom_commands` (unknown to the table, but Redis would
/// queue it).
pub fn step<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8] + Copy, custom: bool) -> Step {
    let spec = match command::resolve(argc, arg) {
        Ok(spec) => spec,
        Err(ResolveError::Unknown(_)) if custom => return Step::Queue(None),
        Err(ResolveError::Unknown(reply)) => return answer(NO_CMD, reply, true, false),
        Err(ResolveError::Invalid(reply)) => {
            let spec = command::lookup(arg(0));
            let cmd = spec.map_or(NO_CMD, |s| s.id);
            if spec.is_some_and(|s| s.name == "exec") {
                // Redis discards the transaction at once when EXEC itself is malformed.
                return answer(cmd, execabort_because(&reply), true, true);
            }
            return answer(cmd, reply, true, false);
        }
    };
    match spec.name {
        "reset" => Step::Run { ends: true },
        "quit" => Step::Run { ends: false },
        "exec" => Step::Exec(spec),
        "discard" => Step::Discard(spec),
        "multi" => answer(
            spec.id,
            &b"-ERR MULTI calls can not be nested\r\n"[..],
            false,
            false,
        ),
        "watch" => answer(
            spec.id,
            &b"-ERR WATCH inside MULTI is not allowed\r\n"[..],
            false,
            false,
        ),
        _ => Step::Queue(Some(spec)),
    }
}

fn answer(cmd: u16, reply: impl Into<Cow<'static, [u8]>>, discards: bool, ends: bool) -> Step {
    Step::Answer {
        cmd,
        reply: reply.into(),
        discards,
        ends,
    }
}

/// Redis's `execCommandAbort` text for a malformed EXEC: `-EXECABORT Transaction discarded
/// because of: <the error without its code>`.
pub fn execabort_because(error: &[u8]) -> Vec<u8> {
    let text = error.strip_prefix(b"-").unwrap_or(error);
    let text = text.strip_prefix(b"ERR ").unwrap_or(text);
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    let mut out = b"-EXECABORT Transaction discarded because of: ".to_vec();
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&[u8]]) -> Step {
        step(
            args.len(),
            |i| args.get(i).copied().unwrap_or_default(),
            false,
        )
    }

    fn reply(s: Step) -> (String, bool, bool) {
        match s {
            Step::Answer {
                reply,
                discards,
                ends,
                ..
            } => (String::from_utf8_lossy(&reply).into(), discards, ends),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// Each reply below is what redis-server 7.0.15 answers inside MULTI, and whether EXEC
    /// then answers `-EXECABORT`.
    #[test]
    fn replies_follow_redis_queue_time_errors() {
        let cases: &[(&[&[u8]], &str, bool, bool)] = &[
            (
                &[b"exec", b"x"],
                "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n",
                true,
                true,
            ),
            (
                &[b"DISCARD", b"y"],
                "-ERR wrong number of arguments for 'discard' command\r\n",
                true,
                false,
            ),
            (
                &[b"MULTI"],
                "-ERR MULTI calls can not be nested\r\n",
                false,
                false,
            ),
            (
                &[b"MULTI", b"x"],
                "-ERR wrong number of arguments for 'multi' command\r\n",
                true,
                false,
            ),
            (
                &[b"WATCH", b"k"],
                "-ERR WATCH inside MULTI is not allowed\r\n",
                false,
                false,
            ),
            (
                &[b"WATCH"],
                "-ERR wrong number of arguments for 'watch' command\r\n",
                true,
                false,
            ),
            (
                &[b"RESET", b"x"],
                "-ERR wrong number of arguments for 'reset' command\r\n",
                true,
                false,
            ),
            (
                &[b"nosuchcmd", b"a"],
                "-ERR unknown command 'nosuchcmd', with args beginning with: 'a' \r\n",
                true,
                false,
            ),
            (
                &[b"get"],
                "-ERR wrong number of arguments for 'get' command\r\n",
                true,
                false,
            ),
        ];
        for (args, want, discards, ends) in cases {
            assert_eq!(
                reply(run(args)),
                ((*want).to_owned(), *discards, *ends),
                "{args:?}"
            );
        }
    }

    #[test]
    fn exec_discard_reset_quit_act_and_the_rest_is_queued() {
        assert!(matches!(run(&[b"EXEC"]), Step::Exec(s) if s.name == "exec"));
        assert!(matches!(run(&[b"DiScArD"]), Step::Discard(s) if s.name == "discard"));
        assert_eq!(run(&[b"reset"]), Step::Run { ends: true });
        assert_eq!(run(&[b"QUIT"]), Step::Run { ends: false });
        assert!(matches!(run(&[b"set", b"k", b"v"]), Step::Queue(Some(s)) if s.name == "set"));
        assert!(matches!(run(&[b"PING"]), Step::Queue(Some(s)) if s.name == "ping"));
        assert!(matches!(run(&[b"unwatch"]), Step::Queue(Some(s)) if s.name == "unwatch"));
    }

    #[test]
    fn custom_commands_are_queued() {
        let args: &[&[u8]] = &[b"mycmd", b"k"];
        assert_eq!(
            step(2, |i| args.get(i).copied().unwrap_or_default(), true),
            Step::Queue(None)
        );
    }
}

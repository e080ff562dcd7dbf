//! The connection state after a refused MULTI: until EXEC, DISCARD or RESET nothing the client
//! sends runs, and EXEC answers `-EXECABORT`, as Redis treats a transaction that had a queue-time
//! error (`multi.c`, `server.c` `processCommand`). Without it, a client that pipelines
//! MULTI … EXEC would see the transaction fail while its commands ran one by one.
//!
//! Errors Redis itself reports while queuing (unknown command, wrong arity, nested MULTI, WATCH
//! inside MULTI) get Redis's texts; a command Redis would have queued gets an error saying it was
//! not run.

use std::borrow::Cow;

use crate::command::{self, ResolveError};
use crate::engine::sink::NO_CMD;

/// Redis's reply to EXEC of a transaction flagged by an error while queuing.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// What the session does with one request while in the state.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Answer `reply` (a request of table row `cmd`, or [`NO_CMD`]); nothing runs. `ends`: the
    /// state ends with this request.
    Answer {
        cmd: u16,
        reply: Cow<'static, [u8]>,
        ends: bool,
    },
    /// Handle the request as usual: RESET (which also ends the state) and QUIT.
    Run { ends: bool },
}

/// The step for a request of `argc` arguments, `arg(i)` the i-th (`arg(0)` the name). `custom`:
/// the name is one of the listener's `custom_commands` (unknown to the table, but Redis would
/// have queued it).
pub fn step<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8] + Copy, custom: bool) -> Step {
    let spec = match command::resolve(argc, arg) {
        Ok(spec) => spec,
        Err(ResolveError::Unknown(_)) if custom => return not_run(NO_CMD, None),
        Err(ResolveError::Unknown(reply)) => return answer(NO_CMD, reply, false),
        Err(ResolveError::Invalid(reply)) => {
            let spec = command::lookup(arg(0));
            let cmd = spec.map_or(NO_CMD, |s| s.id);
            if spec.is_some_and(|s| s.name == "exec") {
                // Redis discards the transaction at once when EXEC itself is malformed.
                return answer(cmd, execabort_because(&reply), true);
            }
            return answer(cmd, reply, false);
        }
    };
    match spec.name {
        "reset" => Step::Run { ends: true },
        "quit" => Step::Run { ends: false },
        "exec" => answer(spec.id, EXECABORT, true),
        "discard" => answer(spec.id, &b"+OK\r\n"[..], true),
        "multi" => answer(
            spec.id,
            &b"-ERR MULTI calls can not be nested\r\n"[..],
            false,
        ),
        "watch" => answer(
            spec.id,
            &b"-ERR WATCH inside MULTI is not allowed\r\n"[..],
            false,
        ),
        name => not_run(spec.id, Some(name)),
    }
}

fn answer(cmd: u16, reply: impl Into<Cow<'static, [u8]>>, ends: bool) -> Step {
    Step::Answer {
        cmd,
        reply: reply.into(),
        ends,
    }
}

/// The refusal of a command Redis would have queued; `name` is the table's (never the client's
/// bytes, which could hold CR/LF), `None` for a custom command.
fn not_run(cmd: u16, name: Option<&str>) -> Step {
    let what = match name {
        Some(n) => format!("'{n}'"),
        None => "command".to_owned(),
    };
    let reply = format!(
        "-ERR {what} was not run: MULTI was refused on this connection, so the transaction is \
         discarded; EXEC or DISCARD ends it\r\n"
    );
    answer(cmd, reply.into_bytes(), false)
}

/// Redis's `execCommandAbort` text for a malformed EXEC: `-EXECABORT Transaction discarded
/// because of: <the error without its code>`.
fn execabort_because(error: &[u8]) -> Vec<u8> {
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

    fn reply(s: Step) -> (String, bool) {
        match s {
            Step::Answer { reply, ends, .. } => (String::from_utf8_lossy(&reply).into(), ends),
            Step::Run { .. } => panic!("expected an answer, got {s:?}"),
        }
    }

    /// Each reply below is what redis-server 7.0.15 answers inside MULTI, except the "was not
    /// run" refusals, where Redis would answer `+QUEUED`.
    #[test]
    fn replies_follow_redis_queue_time_errors() {
        let cases: &[(&[&[u8]], &str, bool)] = &[
            (
                &[b"EXEC"],
                "-EXECABORT Transaction discarded because of previous errors.\r\n",
                true,
            ),
            (
                &[b"exec", b"x"],
                "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n",
                true,
            ),
            (&[b"DiScArD"], "+OK\r\n", true),
            (
                &[b"DISCARD", b"y"],
                "-ERR wrong number of arguments for 'discard' command\r\n",
                false,
            ),
            (&[b"MULTI"], "-ERR MULTI calls can not be nested\r\n", false),
            (
                &[b"MULTI", b"x"],
                "-ERR wrong number of arguments for 'multi' command\r\n",
                false,
            ),
            (
                &[b"WATCH", b"k"],
                "-ERR WATCH inside MULTI is not allowed\r\n",
                false,
            ),
            (
                &[b"WATCH"],
                "-ERR wrong number of arguments for 'watch' command\r\n",
                false,
            ),
            (
                &[b"RESET", b"x"],
                "-ERR wrong number of arguments for 'reset' command\r\n",
                false,
            ),
            (
                &[b"nosuchcmd", b"a"],
                "-ERR unknown command 'nosuchcmd', with args beginning with: 'a' \r\n",
                false,
            ),
            (
                &[b"SET", b"k", b"v"],
                "-ERR 'set' was not run: MULTI was refused on this connection, so the transaction is discarded; EXEC or DISCARD ends it\r\n",
                false,
            ),
            (
                &[b"ping"],
                "-ERR 'ping' was not run: MULTI was refused on this connection, so the transaction is discarded; EXEC or DISCARD ends it\r\n",
                false,
            ),
        ];
        for (args, want, ends) in cases {
            assert_eq!(reply(run(args)), ((*want).to_owned(), *ends), "{args:?}");
        }
    }

    #[test]
    fn reset_and_quit_run_as_usual() {
        assert_eq!(run(&[b"reset"]), Step::Run { ends: true });
        assert_eq!(run(&[b"QUIT"]), Step::Run { ends: false });
    }

    #[test]
    fn custom_commands_are_refused_without_echoing_client_bytes() {
        let args: &[&[u8]] = &[b"my\r\ncmd", b"k"];
        let (text, ends) = reply(step(2, |i| args.get(i).copied().unwrap_or_default(), true));
        assert!(!ends);
        assert!(text.starts_with("-ERR command was not run: "), "{text}");
        assert_eq!(text.matches("\r\n").count(), 1);
    }
}

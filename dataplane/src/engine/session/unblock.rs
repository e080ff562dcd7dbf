//! `CLIENT UNBLOCK <client-id> [TIMEOUT | ERROR]`, for the ids Respite gives (CLIENT ID).
//!
//! A blocked client of any worker waits on a leased connection, registered by its client id
//! with that connection's id at the backend (`engine/blocked.rs`). The unblock goes to that
//! backend as `CLIENT UNBLOCK <upstream id> [TIMEOUT | ERROR]` over a leased connection of its
//! own (never waiting for a free one, like SCRIPT KILL), and its reply is the client's: `:1`,
//! or `:0` when the command was served in the meantime. Redis then answers the blocked command
//! itself (nil, or `-UNBLOCKED client unblocked via CLIENT UNBLOCK`), so the unblocked client
//! gets Redis's reply byte for byte and nothing is popped for it after the unblock.
//!
//! Argument errors are Redis 7.0's (`clientCommand`): the reason is checked before the id.
//! An id that is not blocked, or blocked on a cluster this listener does not route to, is
//! `:0`.

use std::rc::Rc;

use super::Session;
use super::barrier::Barrier;
use crate::command::{self, CommandSpec, Request};
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::resp::{encode, string2ll};
use crate::upstream::{Deliver, UPSTREAM_FAILURE};

const NOT_INTEGER: &[u8] = b"-ERR value is not an integer or out of range\r\n";
const BAD_REASON: &[u8] = b"-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n";
const NOT_BLOCKED: &[u8] = b":0\r\n";

impl Session {
    /// CLIENT UNBLOCK (resolved, counted, past the auth gate; at least 3 arguments).
    pub(super) fn client_unblock(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) {
        let reason = match (req.argc(), req.arg(3)) {
            (3, _) => None,
            (4, Some(r)) if r.eq_ignore_ascii_case(b"timeout") => Some(&b"TIMEOUT"[..]),
            (4, Some(r)) if r.eq_ignore_ascii_case(b"error") => Some(&b"ERROR"[..]),
            (4, _) => return self.sink.push_local(spec.id, BAD_REASON),
            _ => {
                let reply =
                    command::subcommand_syntax_error(req.name(), req.arg(1).unwrap_or_default());
                return self.sink.push_local(spec.id, &reply);
            }
        };
        let Some(id) = string2ll(req.arg(2).unwrap_or_default()) else {
            return self.sink.push_local(spec.id, NOT_INTEGER);
        };
        let Some(at) = u64::try_from(id)
            .ok()
            .and_then(|id| self.blocked_clients.claim(id))
        else {
            return self.sink.push_local(spec.id, NOT_BLOCKED);
        };
        let Some(pool) = rt
            .router
            .routes()
            .map(|r| &r.pool)
            .find(|p| *p.name == *at.cluster)
            .cloned()
        else {
            return self.sink.push_local(spec.id, NOT_BLOCKED);
        };
        let upstream_id = at.upstream_id.to_string();
        let mut request = Vec::new();
        let mut args = vec![&b"CLIENT"[..], b"UNBLOCK", upstream_id.as_bytes()];
        args.extend(reason);
        encode::command(&mut request, args.into_iter());
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        net::spawn(async move {
            let reply = match pool
                .leases
                .lease_now(at.addr, resp3, std::time::Duration::ZERO)
                .await
            {
                Err(e) => e.reply().to_vec(),
                Ok(mut lease) => match lease.exchange(request, 1).await {
                    Ok(mut replies) => {
                        lease.release(true);
                        replies.pop().unwrap_or_else(|| UPSTREAM_FAILURE.to_vec())
                    }
                    Err(_) => UPSTREAM_FAILURE.to_vec(),
                },
            };
            sink.deliver(seq, 0, &reply);
            barrier.open(None);
        });
    }
}

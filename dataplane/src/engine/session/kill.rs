//! `SCRIPT KILL` and `FUNCTION KILL`: stop the script a backend is busy with.
//!
//! A backend running a long script answers nothing on the shared connections until the script
//! passed its `busy-reply-threshold` (5 s by default), and then `-BUSY` to everything but these
//! two commands. So they go to every primary of every cluster the listener routes to, each over
//! a leased connection of its own (never queued behind the script on a shared one, and never
//! waiting for a free one: past `max_leased_connections` one is opened for it), at once, and
//! the replies merge as one server's: `+OK` if some backend killed its script, else the first
//! other error (`-UNKILLABLE` for a script that already wrote), else Redis's `-NOTBUSY`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::Session;
use super::barrier::Barrier;
use crate::command::{CommandSpec, Request};
use crate::engine::worker::ListenerRuntime;
use crate::net::{self, Notify};
use crate::upstream::{Deliver, NO_UPSTREAM_HOST};

/// How long past `op_timeout` a kill waits for a backend: Redis reads it only once the script
/// has run for `busy-reply-threshold`, 5 s by default.
const BUSY_REPLY_THRESHOLD: Duration = Duration::from_secs(5);

impl Session {
    /// SCRIPT KILL / FUNCTION KILL (resolved, counted, past the auth gate).
    pub(super) fn script_kill(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
    ) {
        let mut targets = Vec::new();
        let mut pools: Vec<&Rc<crate::cluster::ClusterPool>> = Vec::new();
        for route in rt.router.routes() {
            if pools.iter().any(|p| Rc::ptr_eq(p, &route.pool)) {
                continue;
            }
            pools.push(&route.pool);
            for addr in route.pool.primary_addrs() {
                targets.push((route.pool.clone(), addr));
            }
        }
        if targets.is_empty() {
            return self.sink.push_local(spec.id, NO_UPSTREAM_HOST);
        }
        let request = req.forward(&mut Vec::new()).to_vec();
        let seq = self.sink.push(spec.id);
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        let sink = self.sink.clone();
        let resp3 = self.conn.resp3;
        let replies: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let done = Rc::new(Notify::default());
        let expected = targets.len();
        for (pool, addr) in targets {
            let (request, replies, done) = (request.clone(), replies.clone(), done.clone());
            net::spawn(async move {
                let reply = match pool.leases.lease_now(addr, resp3).await {
                    Err(e) => e.reply().to_vec(),
                    Ok(mut lease) => match lease
                        .exchange_blocking(
                            request,
                            1,
                            Some(BUSY_REPLY_THRESHOLD),
                            std::future::pending(),
                        )
                        .await
                    {
                        Ok(reply) => {
                            lease.release(true);
                            reply
                        }
                        Err(_) => crate::upstream::UPSTREAM_FAILURE.to_vec(),
                    },
                };
                replies.borrow_mut().push(reply);
                done.notify();
            });
        }
        net::spawn(async move {
            while replies.borrow().len() < expected {
                done.notified().await;
            }
            sink.deliver(seq, 0, &merge(&replies.borrow()));
            barrier.open(None);
        });
    }
}

/// One reply from every backend's: `+OK` if any killed a script, else the first error other
/// than `-NOTBUSY`, else the first `-NOTBUSY` (Redis's text).
fn merge(replies: &[Vec<u8>]) -> Vec<u8> {
    if let Some(ok) = replies.iter().find(|r| r.starts_with(b"+")) {
        return ok.clone();
    }
    replies
        .iter()
        .find(|r| !r.starts_with(b"-NOTBUSY"))
        .or_else(|| replies.first())
        .cloned()
        .unwrap_or_else(|| NO_UPSTREAM_HOST.to_vec())
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn a_kill_anywhere_wins_then_other_errors_then_notbusy() {
        let notbusy = b"-NOTBUSY No scripts in execution right now.\r\n".to_vec();
        let unkillable = b"-UNKILLABLE Sorry the script already executed write commands against \
the dataset. You can either wait the script termination or kill the server in a hard way using \
the SHUTDOWN NOSAVE command.\r\n"
            .to_vec();
        let ok = b"+OK\r\n".to_vec();
        assert_eq!(
            merge(&[notbusy.clone(), ok.clone(), unkillable.clone()]),
            ok
        );
        assert_eq!(merge(&[notbusy.clone(), unkillable.clone()]), unkillable);
        assert_eq!(merge(&[notbusy.clone(), notbusy.clone()]), notbusy);
    }
}

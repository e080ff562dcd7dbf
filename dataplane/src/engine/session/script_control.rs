//! `SCRIPT KILL`, `FUNCTION KILL` and `FUNCTION STATS`: about the script a backend may be busy
//! with.
//!
//! A backend running a long script answers nothing on the shared connections until the script
//! passed its `busy-reply-threshold` (5 s by default), and then `-BUSY` to everything but the
//! commands Redis allows while busy, these among them. So they go to every primary of every
//! cluster the listener routes to, each over a leased connection of its own (never queued
//! behind the script on a shared one, and never waiting for a free one: past
//! `max_leased_connections` one is opened for it), at once, and the replies merge as one
//! server's:
//! - the kills: `+OK` if some backend killed its script, else the first other error
//!   (`-UNKILLABLE` for a script that already wrote), else Redis's `-NOTBUSY`;
//! - FUNCTION STATS: the reply of a backend running a function, else the first error (`-BUSY`
//!   from one running an EVAL), else the first reply (the libraries are the same on every
//!   backend: FUNCTION LOAD, DELETE and FLUSH go to all).

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
    /// SCRIPT KILL / FUNCTION KILL / FUNCTION STATS (resolved, counted, past the auth gate).
    pub(super) fn script_control(
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
        let stats = spec.name == "function|stats";
        for (pool, addr) in targets {
            let (request, replies, done) = (request.clone(), replies.clone(), done.clone());
            net::spawn(async move {
                let reply = match pool
                    .leases
                    .lease_now(addr, resp3, BUSY_REPLY_THRESHOLD)
                    .await
                {
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
            let replies = replies.borrow();
            let merged = if stats {
                merge_stats(&replies)
            } else {
                merge(&replies)
            };
            sink.deliver(seq, 0, &merged);
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

/// FUNCTION STATS as one server answers it, busy or not: the first reply that names a running
/// function, else the first error (a backend running an EVAL answers `-BUSY`, and so would one
/// server), else the first reply. Redis 7.0 `functionStatsCommand` (functions.c) replies a
/// 2-pair map (RESP2 a 4-element array) whose first value, after `running_script`, is nil when
/// no function runs.
fn merge_stats(replies: &[Vec<u8>]) -> Vec<u8> {
    let running = |r: &[u8]| {
        let Some(rest) = r
            .strip_prefix(b"*4\r\n")
            .or_else(|| r.strip_prefix(b"%2\r\n"))
            .and_then(|r| r.strip_prefix(b"$14\r\nrunning_script\r\n"))
        else {
            return false;
        };
        ![&b"$-1\r\n"[..], b"*-1\r\n", b"_\r\n"]
            .iter()
            .any(|nil| rest.starts_with(nil))
    };
    replies
        .iter()
        .find(|r| running(r))
        .or_else(|| replies.iter().find(|r| r.starts_with(b"-")))
        .or_else(|| replies.first())
        .cloned()
        .unwrap_or_else(|| NO_UPSTREAM_HOST.to_vec())
}

#[cfg(test)]
mod tests {
    use super::{merge, merge_stats};

    #[test]
    fn function_stats_of_the_busy_backend_win() {
        let idle2 = b"*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n".to_vec();
        let busy2 = b"*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$1\r\nf\r\n$7\r\ncommand\r\n*3\r\n$5\r\nfcall\r\n$1\r\nf\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:5001\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n".to_vec();
        let idle3 = b"%2\r\n$14\r\nrunning_script\r\n_\r\n$7\r\nengines\r\n%1\r\n$3\r\nLUA\r\n%2\r\n$15\r\nlibraries_count\r\n:0\r\n$15\r\nfunctions_count\r\n:0\r\n".to_vec();
        let busy3 = [&b"%2\r\n$14\r\nrunning_script\r\n%3\r\n"[..], &busy2[29..]].concat();
        let eval = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or \
SHUTDOWN NOSAVE.\r\n"
            .to_vec();
        assert_eq!(merge_stats(&[idle2.clone(), busy2.clone()]), busy2);
        assert_eq!(merge_stats(&[idle2.clone(), idle2.clone()]), idle2);
        assert_eq!(merge_stats(&[idle2.clone(), eval.clone()]), eval);
        assert_eq!(merge_stats(&[eval.clone(), busy2.clone()]), busy2);
        assert_eq!(merge_stats(&[idle3.clone(), busy3.clone()]), busy3);
        assert_eq!(merge_stats(std::slice::from_ref(&idle3)), idle3);
    }

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

//! AUTH and `HELLO … AUTH` on a listener with `[listeners.external_auth]`: the credentials go
//! to the gRPC service ([`crate::engine::external_auth`]), and the session holds the client's
//! later requests behind a [`Barrier`] until the answer, so they run after it, in order (Envoy
//! queues them the same way: `ProxyFilter::onRespValue` while the call is pending).
//!
//! Replies (Envoy `ProxyFilter::onAuthenticateExternal`): accepted → `+OK` (HELLO: its map),
//! refused → `-ERR <message>` (`-ERR unauthorized` without one) and the connection is no
//! longer authenticated, failed → `-ERR external authentication failed` and the connection
//! keeps the state it had. With `enable_auth_expiration`, past the accepting answer's
//! `expiration` the client's commands get `-NOAUTH Authentication required.` until an AUTH is
//! accepted again; an answer without expiration stays valid (the proto's rule: Envoy itself
//! takes a missing one as already past). Unlike the password check, failures are not
//! throttled here: the service sees every attempt and decides.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::SystemTime;

use super::Session;
use super::barrier::Barrier;
use crate::command::{CommandSpec, Local, Request};
use crate::engine::external_auth::{self, Verdict};
use crate::engine::worker::ListenerRuntime;
use crate::net;
use crate::resp::string2ll;
use crate::router::local;

/// An AUTH waiting for the service's answer.
pub(super) struct Pending {
    /// The reply's slot.
    seq: u64,
    spec: &'static CommandSpec,
    /// For `HELLO … AUTH`: HELLO's arguments without the AUTH option, answered once accepted.
    hello: Option<Vec<Vec<u8>>>,
    /// The listener's `enable_auth_expiration` when the AUTH was sent.
    expiration: bool,
    verdict: RefCell<Option<Verdict>>,
}

impl Session {
    /// Sends AUTH or `HELLO … AUTH` (resolved, counted) to the listener's external auth
    /// service. False when the request is not one to send (a HELLO without AUTH, or with wrong
    /// arguments): the local answer handles it, before any credentials check.
    pub(super) fn external_auth(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        which: Local,
    ) -> bool {
        let Some(cfg) = rt.config.external_auth.clone() else {
            return false;
        };
        let (user, password, hello) = match which {
            Local::Auth => match req.argc() {
                2 => (Vec::new(), arg(req, 1), None),
                3 => (arg(req, 1), arg(req, 2), None),
                _ => {
                    self.sink.push_local(spec.id, b"-ERR syntax error\r\n");
                    return true;
                }
            },
            // A version the listener refuses is answered NOPROTO before any credentials
            // check, as Redis checks `protover` first.
            Local::Hello if local::hello_version_refused(&self.conn, &rt.config, req.arg(1)) => {
                return false;
            }
            Local::Hello => match hello_auth(req) {
                Some((user, password, rest)) => (user, password, Some(rest)),
                None => return false,
            },
            _ => return false,
        };
        let pending = Rc::new(Pending {
            seq: self.sink.push(spec.id),
            spec,
            hello,
            expiration: cfg.enable_auth_expiration,
            verdict: RefCell::new(None),
        });
        let barrier = Rc::new(Barrier::new());
        self.barrier = Some(barrier.clone());
        self.external_pending = Some(pending.clone());
        net::spawn(async move {
            let verdict = external_auth::authenticate(&cfg, &user, &password).await;
            *pending.verdict.borrow_mut() = Some(verdict);
            barrier.open(None);
        });
        true
    }

    /// Once the barrier of an external AUTH opened: applies the answer and writes the reply.
    pub(super) fn finish_external_auth(&mut self, rt: &ListenerRuntime) {
        let Some(pending) = self.external_pending.take() else {
            return;
        };
        let verdict = pending
            .verdict
            .borrow_mut()
            .take()
            .unwrap_or_else(|| Verdict::Error("no answer".into()));
        let mut reply = Vec::new();
        match verdict {
            Verdict::Authorized { expires } => {
                rt.stats.external_auth_ok.inc();
                self.conn.authed = true;
                self.conn.auth_expires = expires.filter(|_| pending.expiration);
                match &pending.hello {
                    None => reply.extend_from_slice(b"+OK\r\n"),
                    Some(args) => {
                        local::answer(
                            &mut self.conn,
                            &rt.config,
                            pending.spec,
                            Local::Hello,
                            args.len(),
                            |i| args.get(i).map_or(&[][..], Vec::as_slice),
                            &mut reply,
                        );
                        self.protocol_changed();
                    }
                }
            }
            Verdict::Unauthorized(message) => {
                rt.stats.external_auth_denied.inc();
                self.conn.authed = false;
                self.conn.auth_expires = None;
                reply = external_auth::unauthorized_reply(&message);
            }
            Verdict::Error(why) => {
                rt.stats.external_auth_error.inc();
                external_auth::log_failure(&rt.config.name, &why);
                reply.extend_from_slice(external_auth::FAILED);
            }
        }
        crate::upstream::Deliver::deliver(&*self.sink, pending.seq, 0, &reply);
    }

    /// Ends the authentication of a client whose external AUTH expired (checked before each
    /// command; only a connection with an expiration reads the clock).
    #[inline]
    pub(super) fn check_auth_expiry(&mut self) {
        if let Some(t) = self.conn.auth_expires
            && SystemTime::now() > t
        {
            self.conn.authed = false;
            self.conn.auth_expires = None;
        }
    }
}

/// `HELLO … AUTH`'s user, password and HELLO's other arguments.
type HelloAuth = (Vec<u8>, Vec<u8>, Vec<Vec<u8>>);

fn arg(req: &Request<'_>, i: usize) -> Vec<u8> {
    req.arg(i).unwrap_or_default().to_vec()
}

/// `HELLO protover … AUTH user pass …`: the last AUTH's user and password, and the arguments
/// without any AUTH option. `None` when there is no AUTH, or the arguments are wrong (Redis
/// `helloCommand` answers those before it checks credentials).
fn hello_auth(req: &Request<'_>) -> Option<HelloAuth> {
    let argc = req.argc();
    if argc < 2 || !matches!(string2ll(req.arg(1)?), Some(2 | 3)) {
        return None;
    }
    let mut rest = vec![arg(req, 0), arg(req, 1)];
    let mut auth = None;
    let mut i = 2;
    while i < argc {
        let opt = req.arg(i)?.to_ascii_lowercase();
        let more = argc - i - 1;
        if opt == b"auth" && more >= 2 {
            auth = Some((arg(req, i + 1), arg(req, i + 2)));
            i += 3;
        } else if opt == b"setname" && more >= 1 {
            rest.push(arg(req, i));
            rest.push(arg(req, i + 1));
            i += 2;
        } else {
            return None;
        }
    }
    auth.map(|(u, p)| (u, p, rest))
}

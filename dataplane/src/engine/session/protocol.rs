//! A listener's `protocol_version = "resp3"` (Envoy `RedisProxy.protocol_version` RESP3): a
//! connection must negotiate RESP3 with `HELLO 3` before anything but HELLO, AUTH and QUIT;
//! every other request, unknown commands included, is answered [`local::NOPROTO`] and counted
//! in `downstream_rq_noproto`. Requests are refused one by one, in order, so a pipeline sent
//! before its `HELLO 3` is answered in order too.

use super::Session;
use crate::command;
use crate::engine::sink::NO_CMD;
use crate::engine::worker::ListenerRuntime;
use crate::router::local;

/// The commands a connection may send before it negotiated RESP3 (Envoy's exemptions).
fn exempt(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"hello")
        || name.eq_ignore_ascii_case(b"auth")
        || name.eq_ignore_ascii_case(b"quit")
}

impl Session {
    /// Whether a request named `name`, on a connection that has not negotiated RESP3, is
    /// refused; if so its NOPROTO reply took its turn. Callers test
    /// [`ListenerRuntime::resp3_only`] and the connection's RESP3 first, so other listeners
    /// pay one branch per request and RESP3 connections two.
    #[cold]
    pub(super) fn refused_before_hello3(&mut self, rt: &ListenerRuntime, name: &[u8]) -> bool {
        if exempt(name) {
            return false;
        }
        rt.stats.rq_noproto.inc();
        match command::lookup(name) {
            Some(spec) => {
                rt.stats.request(spec.id);
                self.sink.push_local(spec.id, local::NOPROTO);
            }
            None => {
                rt.stats.rq_total.inc();
                self.sink.push_local(NO_CMD, local::NOPROTO);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::exempt;

    #[test]
    fn only_hello_auth_quit_are_exempt() {
        for name in [&b"HELLO"[..], b"hello", b"Auth", b"QUIT"] {
            assert!(exempt(name), "{name:?}");
        }
        for name in [
            &b"PING"[..],
            b"GET",
            b"HELLOX",
            b"",
            b"RESET",
            b"CLIENT",
            b"nosuch",
        ] {
            assert!(!exempt(name), "{name:?}");
        }
    }
}

//! What one active check asks and what its answer means: `PING` (healthy on `+PONG`) or
//! `EXISTS key` (healthy on `:0`), over the wire exchange of `upstream::CheckSession`.

use std::time::Duration;

use super::check::{Outcome, judge};
use crate::net::Stream;
use crate::upstream::{CheckReply, CheckSession, TlsSettings, UpstreamAuth};

/// One configured check of a cluster, ready to run against any of its hosts.
#[derive(Debug, Clone)]
pub struct Probe {
    session: CheckSession,
    exists: bool,
}

impl Probe {
    /// `key`: `EXISTS key` instead of `PING`; `auth`: the cluster's credentials and database
    /// (per host, as every connection to its hosts takes them); `tls`: the cluster's TLS,
    /// which checks use like every other connection to its hosts.
    pub fn new(
        key: Option<&str>,
        auth: UpstreamAuth,
        connect_timeout: Duration,
        tls: Option<TlsSettings>,
    ) -> Probe {
        let command: &[&[u8]] = match key {
            Some(k) => &[b"EXISTS", k.as_bytes()],
            None => &[b"PING"],
        };
        let session = CheckSession::new(command, auth, connect_timeout, tls);
        Probe {
            session,
            exists: key.is_some(),
        }
    }

    /// One attempt on `stream` (connecting first when it is `None`): the outcome and the
    /// connection to keep. A refused `AUTH` is an active failure, as Envoy counts it.
    pub async fn run(
        &self,
        addr: std::net::SocketAddr,
        stream: Option<Stream>,
    ) -> (Outcome, Option<Stream>) {
        let (reply, kept) = self.session.run(addr, stream).await;
        let outcome = match reply {
            CheckReply::Reply(r) => judge(&r, self.exists),
            CheckReply::AuthRefused => Outcome::Fail,
            CheckReply::NetworkFail => Outcome::NetworkFail,
        };
        (outcome, kept)
    }
}

//! The wire side of one active health check of one host: (re)connect, `AUTH` when the cluster
//! has a password, send the check command and read its one reply. The connection is kept for
//! the next attempt (Envoy's redis health checker reuses its connection); any failure drops
//! it. What the reply means is decided above, in `cluster::health`.

use std::net::SocketAddr;
use std::time::Duration;

use super::conn::read_replies;
use super::handshake::{UpstreamAuth, encode_handshake};
use super::tls::TlsSettings;
use crate::net::{self, BufResult, Stream};
use crate::resp::encode;

/// How one attempt ended on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckReply {
    /// The check command's reply, one complete RESP value.
    Reply(Vec<u8>),
    /// The host answered `AUTH` with an error: it answers, but not as a usable member.
    AuthRefused,
    /// Connect failure, write or read error, a malformed reply or the connection closed.
    NetworkFail,
}

/// The encoded exchange of one check: the handshake (`AUTH` with the host's credentials,
/// `SELECT db`; see `upstream/handshake.rs`) once per connection, then the check command on
/// every attempt.
#[derive(Debug, Clone)]
pub struct CheckSession {
    auth: UpstreamAuth,
    command: Vec<u8>,
    connect_timeout: Duration,
    tls: Option<TlsSettings>,
}

impl CheckSession {
    /// `command`: the check's arguments (`PING`, `EXISTS key`); `auth`: the cluster's
    /// credentials and database; `tls`: the cluster's TLS (the handshake counts in
    /// `connect_timeout`).
    pub fn new(
        command: &[&[u8]],
        auth: UpstreamAuth,
        connect_timeout: Duration,
        tls: Option<TlsSettings>,
    ) -> CheckSession {
        let mut encoded = Vec::new();
        encode::command(&mut encoded, command.iter().copied());
        CheckSession {
            auth,
            command: encoded,
            connect_timeout,
            tls,
        }
    }

    /// One attempt on `stream` (connecting to `addr` first when it is `None`). Returns how it
    /// ended and the connection to keep (none after a failure). The caller bounds it with the
    /// check's `timeout`; dropping the future on timeout closes the connection.
    pub async fn run(
        &self,
        addr: SocketAddr,
        stream: Option<Stream>,
    ) -> (CheckReply, Option<Stream>) {
        let (stream, fresh) = match stream {
            Some(s) => (s, false),
            None => {
                let opened = match &self.tls {
                    Some(t) => t.connect(addr, self.connect_timeout, None).await,
                    None => net::connect(addr, self.connect_timeout)
                        .await
                        .map(Stream::plain),
                };
                match opened {
                    Ok(s) => (s, true),
                    Err(_) => return (CheckReply::NetworkFail, None),
                }
            }
        };
        let mut req = Vec::with_capacity(128 + self.command.len());
        let mut replies = 1;
        if fresh {
            replies += encode_handshake(&mut req, self.auth.for_addr(addr), false, self.auth.db);
        }
        req.extend_from_slice(&self.command);
        let BufResult(res, _) = net::write_all(&stream, req).await;
        if res.is_err() {
            return (CheckReply::NetworkFail, None);
        }
        let mut all = match read_replies(&stream, replies).await {
            Ok(all) => all,
            Err(_) => return (CheckReply::NetworkFail, None),
        };
        // A refused AUTH or SELECT: the check's own reply is the last one.
        if all
            .iter()
            .take(replies - 1)
            .any(|r| r.first() == Some(&b'-'))
        {
            return (CheckReply::AuthRefused, None);
        }
        match all.pop() {
            Some(reply) => (CheckReply::Reply(reply), Some(stream)),
            None => (CheckReply::NetworkFail, None),
        }
    }
}

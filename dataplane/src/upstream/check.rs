//! The wire side of one active health check of one host: (re)connect, `AUTH` when the cluster
//! has a password, send the check command and read its one reply. The connection is kept for
//! the next attempt (Envoy's redis health checker reuses its connection); any failure drops
//! it. What the reply means is decided above, in `cluster::health`.

use std::net::SocketAddr;
use std::time::Duration;

use super::conn::read_replies;
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

/// The encoded exchange of one check: `AUTH [user] pass` (or nothing) once per connection,
/// then the check command on every attempt.
#[derive(Debug, Clone)]
pub struct CheckSession {
    handshake: Vec<u8>,
    command: Vec<u8>,
    connect_timeout: Duration,
    tls: Option<TlsSettings>,
}

impl CheckSession {
    /// `command`: the check's arguments (`PING`, `EXISTS key`); `user`/`password`: the
    /// cluster's `auth_username`/`auth_password`; `tls`: the cluster's TLS (the handshake
    /// counts in `connect_timeout`).
    pub fn new(
        command: &[&[u8]],
        user: Option<&str>,
        password: Option<&str>,
        connect_timeout: Duration,
        tls: Option<TlsSettings>,
    ) -> CheckSession {
        let mut handshake = Vec::new();
        match (user, password) {
            (Some(u), Some(p)) => encode::command(
                &mut handshake,
                [&b"AUTH"[..], u.as_bytes(), p.as_bytes()].into_iter(),
            ),
            (None, Some(p)) => {
                encode::command(&mut handshake, [&b"AUTH"[..], p.as_bytes()].into_iter())
            }
            _ => {}
        }
        let mut encoded = Vec::new();
        encode::command(&mut encoded, command.iter().copied());
        CheckSession {
            handshake,
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
        let mut req = Vec::with_capacity(self.handshake.len() + self.command.len());
        let mut replies = 1;
        if fresh && !self.handshake.is_empty() {
            req.extend_from_slice(&self.handshake);
            replies += 1;
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
        if replies == 2 && all.first().is_some_and(|r| r.first() == Some(&b'-')) {
            return (CheckReply::AuthRefused, None);
        }
        match all.pop() {
            Some(reply) => (CheckReply::Reply(reply), Some(stream)),
            None => (CheckReply::NetworkFail, None),
        }
    }
}

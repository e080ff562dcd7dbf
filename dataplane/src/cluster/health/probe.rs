//! One check attempt on the wire: (re)connect, `AUTH` when the cluster has a password, then
//! `PING` or `EXISTS key`, and read one reply. The connection is kept for the next attempt
//! (Envoy's redis checker reuses its connection); any failure or timeout drops it.

use std::time::Duration;

use super::check::{Outcome, judge};
use crate::net::{self, BufResult, TcpStream};
use crate::resp::encode;
use crate::upstream::read_replies;

/// What a check sends and how it authenticates.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `AUTH [user] pass` (or nothing), then the check command, encoded once.
    handshake: Vec<u8>,
    command: Vec<u8>,
    exists: bool,
    connect_timeout: Duration,
}

impl Probe {
    /// `key`: `EXISTS key` instead of `PING`.
    pub fn new(
        key: Option<&str>,
        user: Option<&str>,
        password: Option<&str>,
        connect_timeout: Duration,
    ) -> Probe {
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
        let mut command = Vec::new();
        match key {
            Some(k) => encode::command(&mut command, [&b"EXISTS"[..], k.as_bytes()].into_iter()),
            None => encode::command(&mut command, [&b"PING"[..]].into_iter()),
        }
        Probe {
            handshake,
            command,
            exists: key.is_some(),
            connect_timeout,
        }
    }

    /// One attempt on `stream` (connecting first when it is `None`). Returns the outcome and
    /// the connection to keep (none after a failure). The caller bounds it with the check's
    /// `timeout`; dropping the future on timeout closes the connection.
    pub async fn run(
        &self,
        addr: std::net::SocketAddr,
        stream: Option<TcpStream>,
    ) -> (Outcome, Option<TcpStream>) {
        let (stream, fresh) = match stream {
            Some(s) => (s, false),
            None => match net::connect(addr, self.connect_timeout).await {
                Ok(s) => (s, true),
                Err(_) => return (Outcome::NetworkFail, None),
            },
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
            return (Outcome::NetworkFail, None);
        }
        let all = match read_replies(&stream, replies).await {
            Ok(all) => all,
            Err(_) => return (Outcome::NetworkFail, None),
        };
        if replies == 2 && all.first().is_some_and(|r| r.first() == Some(&b'-')) {
            // AUTH refused: the host answers, but not as a usable member.
            return (Outcome::Fail, None);
        }
        let outcome = all
            .last()
            .map_or(Outcome::NetworkFail, |r| judge(r, self.exists));
        (outcome, Some(stream))
    }
}

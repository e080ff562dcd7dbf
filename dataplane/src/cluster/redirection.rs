//! What a Redis Cluster node answers instead of a reply: `MOVED`, `ASK`, `TRYAGAIN`,
//! `CLUSTERDOWN` (Redis Cluster spec, "Redirection and resharding"), and the transient states
//! retried like `TRYAGAIN`: `LOADING`, `BUSY`, `MASTERDOWN`.

use std::net::{IpAddr, SocketAddr};

use super::CLUSTER_SLOTS;

/// What a node answered instead of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirection {
    Moved {
        slot: u16,
        addr: SocketAddr,
    },
    Ask {
        slot: u16,
        addr: SocketAddr,
    },
    /// `TRYAGAIN`, `CLUSTERDOWN`, or a transient state that refused the command without running
    /// it (`LOADING`, `BUSY`, `MASTERDOWN`): the same request may succeed a moment later.
    Retry,
}

impl Redirection {
    /// Parses `-MOVED <slot> <ip>:<port>` / `-ASK …` / `-TRYAGAIN …` / `-CLUSTERDOWN …` /
    /// `-LOADING …` / `-BUSY …` / `-MASTERDOWN …` (the connection passes `-BUSY` here only for
    /// requests that are not scripts). An
    /// empty ip means the replying node's own (Redis 7 `cluster-preferred-endpoint-type
    /// unknown-endpoint`). `None` for anything else, including hostnames (not resolved on the
    /// request path; Envoy passes those to the client too).
    pub(super) fn parse(reply: &[u8], from: SocketAddr) -> Option<Redirection> {
        let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
        let text = std::str::from_utf8(line.strip_prefix(b"-")?).ok()?;
        let mut words = text.split(' ');
        let kind = words.next()?;
        if matches!(
            kind,
            "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "BUSY" | "MASTERDOWN"
        ) {
            return Some(Redirection::Retry);
        }
        let slot: u16 = words.next()?.parse().ok()?;
        if slot >= CLUSTER_SLOTS {
            return None;
        }
        let (host, port) = words.next()?.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let ip: IpAddr = if host.is_empty() {
            from.ip()
        } else {
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .ok()?
        };
        let addr = SocketAddr::new(ip, port);
        match kind {
            "MOVED" => Some(Redirection::Moved { slot, addr }),
            "ASK" => Some(Redirection::Ask { slot, addr }),
            _ => None,
        }
    }
}

/// A `MOVED` / `ASK` naming a hostname (Redis 7 `cluster-preferred-endpoint-type hostname`),
/// which [`Redirection::parse`] leaves to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostRedirect<'a> {
    /// `MOVED` or `ASK`.
    kind: &'a str,
    slot: u16,
    /// The hostname as the node wrote it.
    pub(super) host: &'a str,
    pub(super) port: u16,
}

impl<'a> HostRedirect<'a> {
    /// `-MOVED <slot> <host>:<port>` / `-ASK …` whose host is not an IP address; `None` for
    /// anything else.
    pub(super) fn parse(reply: &'a [u8]) -> Option<HostRedirect<'a>> {
        let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
        let text = std::str::from_utf8(line.strip_prefix(b"-")?).ok()?;
        let mut words = text.split(' ');
        let kind = words.next().filter(|k| matches!(*k, "MOVED" | "ASK"))?;
        let slot: u16 = words.next()?.parse().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let ip_like = host.trim_start_matches('[').trim_end_matches(']');
        if slot >= CLUSTER_SLOTS || host.is_empty() || ip_like.parse::<IpAddr>().is_ok() {
            return None;
        }
        if words.next().is_some() {
            return None;
        }
        Some(HostRedirect {
            kind,
            slot,
            host,
            port,
        })
    }

    /// The same redirection naming `addr` instead, for [`Redirection::parse`].
    pub(super) fn with_addr(&self, addr: SocketAddr) -> Vec<u8> {
        format!("-{} {} {addr}\r\n", self.kind, self.slot).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redirects() {
        let from: SocketAddr = "10.0.0.9:7000".parse().expect("test value");
        assert_eq!(
            Redirection::parse(b"-MOVED 3999 127.0.0.1:6381\r\n", from),
            Some(Redirection::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".parse().expect("test value")
            })
        );
        assert_eq!(
            Redirection::parse(b"-ASK 16383 :7001\r\n", from),
            Some(Redirection::Ask {
                slot: 16383,
                addr: "10.0.0.9:7001".parse().expect("test value")
            })
        );
        assert_eq!(
            Redirection::parse(b"-MOVED 1 ::1:7002\r\n", from),
            Some(Redirection::Moved {
                slot: 1,
                addr: "[::1]:7002".parse().expect("test value")
            })
        );
        assert_eq!(
            Redirection::parse(
                b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                from
            ),
            Some(Redirection::Retry)
        );
        assert_eq!(
            Redirection::parse(b"-CLUSTERDOWN The cluster is down\r\n", from),
            Some(Redirection::Retry)
        );
        for transient in [
            &b"-LOADING Redis is loading the dataset in memory\r\n"[..],
            b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.\r\n",
            b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
        ] {
            assert_eq!(
                Redirection::parse(transient, from),
                Some(Redirection::Retry),
                "{transient:?}"
            );
        }
        let h = HostRedirect::parse(b"-MOVED 3999 redis-1.example:6381\r\n").expect("host");
        assert_eq!((h.host, h.port), ("redis-1.example", 6381));
        let addr: SocketAddr = "10.1.2.3:6381".parse().expect("test value");
        assert_eq!(h.with_addr(addr), b"-MOVED 3999 10.1.2.3:6381\r\n");
        let h = HostRedirect::parse(b"-ASK 7 localhost:7001\r\n").expect("host");
        assert_eq!(
            Redirection::parse(&h.with_addr(addr), from),
            Some(Redirection::Ask { slot: 7, addr })
        );
        for not_host in [
            &b"-MOVED 1 127.0.0.1:1\r\n"[..],
            b"-MOVED 1 [::1]:1\r\n",
            b"-MOVED 1 :1\r\n",
            b"-MOVED 16384 a:1\r\n",
            b"-TRYAGAIN a:1\r\n",
            b"-ERR a:1\r\n",
        ] {
            assert_eq!(HostRedirect::parse(not_host), None, "{not_host:?}");
        }
        for bad in [
            &b"-MOVED 16384 127.0.0.1:1\r\n"[..],
            b"-MOVED x 127.0.0.1:1\r\n",
            b"-MOVED 1 redis.example:6379\r\n",
            b"-MOVED 1\r\n",
            b"-MOVED 1 127.0.0.1\r\n",
            b"-ERR nope\r\n",
            b"-BUSYKEY Target key name already exists.\r\n",
            b"-BUSYGROUP Consumer Group name already exists\r\n",
            b"+OK\r\n",
            b"",
        ] {
            assert_eq!(Redirection::parse(bad, from), None, "{bad:?}");
        }
    }
}

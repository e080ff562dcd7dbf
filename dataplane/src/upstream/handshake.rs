//! The opening commands of an upstream connection, the same on every kind (shared, leased,
//! subscriber, health check, discovery): `AUTH` (or `HELLO 3 AUTH` for RESP3) with the
//! credentials of the host ([`crate::config::credentials::auth_for`]), then `SELECT <db>` when
//! the cluster's `db` is not 0 (twemproxy `redis_db`: its server connections `SELECT` right
//! after connecting). `READONLY`, when asked, goes after these (`conn::open`).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::credentials::auth_for;
use crate::config::{Auth, ClusterConfig, CredentialConfig};
use crate::resp::encode;

/// A cluster's credentials and database, owned, for connections that outlive the config
/// borrow (health checks, discovery).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UpstreamAuth {
    /// The cluster's `auth_username`.
    pub username: Option<String>,
    /// The cluster's `auth_password`.
    pub password: Option<String>,
    /// The cluster's `[[clusters.credentials]]`.
    pub credentials: Arc<[CredentialConfig]>,
    /// The cluster's `db`.
    pub db: u32,
}

impl UpstreamAuth {
    /// The credentials and database of `c`.
    pub fn of(c: &ClusterConfig) -> UpstreamAuth {
        UpstreamAuth {
            username: c.auth_username.clone(),
            password: c.auth_password.clone(),
            credentials: c.credentials.clone().into(),
            db: c.db,
        }
    }

    /// The credentials of a connection to `addr`.
    pub fn for_addr(&self, addr: SocketAddr) -> Auth<'_> {
        auth_for(
            &self.credentials,
            Auth {
                username: self.username.as_deref(),
                password: self.password.as_deref(),
            },
            addr,
            None,
        )
    }
}

/// Appends the handshake of one connection to `req`: `AUTH [user] pass` (RESP2) or
/// `HELLO 3 [AUTH user pass]` (RESP3; the user is `default` without a username), then
/// `SELECT db` when `db` is not 0. Returns how many replies the host sends back.
pub fn encode_handshake(req: &mut Vec<u8>, auth: Auth<'_>, resp3: bool, db: u32) -> usize {
    let mut replies = 0;
    let user = auth.username.unwrap_or("default");
    match (auth.password, resp3) {
        (Some(pw), true) => encode::command(
            req,
            [&b"HELLO"[..], b"3", b"AUTH", user.as_bytes(), pw.as_bytes()].into_iter(),
        ),
        (None, true) => encode::command(req, [&b"HELLO"[..], b"3"].into_iter()),
        (Some(pw), false) => match auth.username {
            Some(u) => {
                encode::command(req, [&b"AUTH"[..], u.as_bytes(), pw.as_bytes()].into_iter())
            }
            None => encode::command(req, [&b"AUTH"[..], pw.as_bytes()].into_iter()),
        },
        (None, false) => {}
    }
    if resp3 || auth.password.is_some() {
        replies += 1;
    }
    if db != 0 {
        let n = db.to_string();
        encode::command(req, [&b"SELECT"[..], n.as_bytes()].into_iter());
        replies += 1;
    }
    replies
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CredentialAddress;

    #[test]
    fn handshake_is_auth_then_select() {
        let mut req = Vec::new();
        let n = encode_handshake(
            &mut req,
            Auth {
                username: Some("u"),
                password: Some("p"),
            },
            false,
            3,
        );
        assert_eq!(n, 2);
        assert_eq!(
            req,
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"
        );
        let mut req = Vec::new();
        assert_eq!(encode_handshake(&mut req, Auth::default(), false, 0), 0);
        assert!(req.is_empty());
        assert_eq!(encode_handshake(&mut req, Auth::default(), true, 0), 1);
        assert_eq!(req, b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n");
    }

    #[test]
    fn first_matching_entry_wins_else_cluster_default() {
        let a1: SocketAddr = SocketAddr::from(([10, 0, 0, 1], 6379));
        let a2: SocketAddr = SocketAddr::from(([10, 0, 0, 2], 6379));
        let auth = UpstreamAuth {
            username: None,
            password: Some("cluster".into()),
            credentials: vec![
                CredentialConfig {
                    address: CredentialAddress::Ip(a1),
                    auth_username: Some("u1".into()),
                    auth_password: Some("p1".into()),
                },
                CredentialConfig {
                    address: CredentialAddress::Ip(a1),
                    auth_username: None,
                    auth_password: Some("second".into()),
                },
                CredentialConfig {
                    address: CredentialAddress::Name {
                        host: "never-resolved.invalid".into(),
                        port: 6379,
                    },
                    auth_username: None,
                    auth_password: None,
                },
            ]
            .into(),
            db: 0,
        };
        assert_eq!(
            auth.for_addr(a1),
            Auth {
                username: Some("u1"),
                password: Some("p1")
            }
        );
        assert_eq!(
            auth.for_addr(a2),
            Auth {
                username: None,
                password: Some("cluster")
            }
        );
        // A name entry matches a host resolved from that name, by the name given or by the
        // resolver's last answer.
        let named = &auth.credentials[2..];
        let d = Auth::default();
        assert_eq!(
            auth_for(
                named,
                Auth {
                    username: None,
                    password: Some("x")
                },
                a2,
                Some("NEVER-resolved.invalid")
            ),
            d
        );
        crate::config::dns_names::record("never-resolved.invalid", 6379, &[a2]);
        assert_eq!(
            auth_for(
                named,
                Auth {
                    username: None,
                    password: Some("x")
                },
                a2,
                None
            ),
            d
        );
        let other_port: SocketAddr = SocketAddr::from(([10, 0, 0, 2], 6380));
        assert_eq!(
            auth_for(
                named,
                Auth {
                    username: None,
                    password: Some("x")
                },
                other_port,
                None
            )
            .password,
            Some("x")
        );
    }
}

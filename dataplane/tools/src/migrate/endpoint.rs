//! An endpoint given on the command line: a single server (or Respite listener) or a Redis
//! Cluster, its nodes to SCAN and a client to read and write keys wherever they live.

use std::time::Duration;

use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::{Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use super::Result;

/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one reply may take (a large key's LRANGE chunk included).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A source or target deployment.
pub struct Endpoint {
    /// As the operator wrote it, password replaced by `***` ([`redacted`]): for messages and
    /// the cursor file.
    pub text: String,
    info: ConnectionInfo,
    /// Whether the node reported `cluster_enabled:1` in `INFO cluster`.
    pub cluster: bool,
    /// The nodes that hold the keyspace: the endpoint itself, or every cluster primary.
    pub nodes: Vec<Node>,
}

/// One node to SCAN.
pub struct Node {
    /// `host:port`, the node's name in the cursor file.
    pub addr: String,
    info: ConnectionInfo,
}

impl Node {
    /// A fresh connection to this node.
    pub fn connect(&self) -> Result<redis::Connection> {
        connect(&self.info, &self.addr)
    }
}

/// A client for per-key commands: one connection, or a cluster connection that routes by slot
/// and follows MOVED/ASK.
pub enum KeyClient {
    /// A single server or a Respite listener.
    Single(redis::Connection),
    /// A Redis Cluster.
    Cluster(Box<ClusterConnection>),
}

impl KeyClient {
    /// Sends one command; a Redis error reply is an `Err`.
    pub fn query(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            KeyClient::Single(c) => cmd.query(c),
            KeyClient::Cluster(c) => cmd.query(c.as_mut()),
        }
    }

    /// Sends commands on one key in one round trip (pipelined); their replies in order.
    pub fn pipe(&mut self, cmds: &[Cmd]) -> redis::RedisResult<Vec<Value>> {
        match self {
            KeyClient::Single(c) => {
                let mut p = redis::pipe();
                for cmd in cmds {
                    p.add_command(cmd.clone());
                }
                p.query(c)
            }
            // All commands name the same key, so one slot: the cluster pipeline sends them to
            // its owner together.
            KeyClient::Cluster(c) => {
                let mut p = redis::cluster::cluster_pipe();
                for cmd in cmds {
                    p.add_command(cmd.clone());
                }
                p.query(c.as_mut())
            }
        }
    }
}

/// Parses `host:port` or `redis://[user:pass@]host:port[/db]`. Errors show the endpoint
/// [`redacted`].
pub fn parse(text: &str) -> Result<ConnectionInfo> {
    let shown = redacted(text);
    let url = if text.contains("://") {
        text.to_string()
    } else {
        if !text.contains(':') {
            return Err(format!(
                "endpoint {shown:?}: expected host:port or redis://host:port"
            ));
        }
        format!("redis://{text}")
    };
    url.as_str()
        .into_connection_info()
        .map_err(|e| format!("endpoint {shown:?}: {e}"))
}

/// `text` fit to print: the password of a `scheme://user:password@host…` URL replaced by `***`
/// (the user name is kept). Anything else is returned as is.
pub fn redacted(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &text[rest_start..];
    // The last `@`: a password may contain `@` (unencoded); host, port and db cannot.
    let Some(at) = rest.rfind('@') else {
        return text.to_string();
    };
    let userinfo = &rest[..at];
    let Some(colon) = userinfo.find(':') else {
        return text.to_string();
    };
    format!(
        "{}{}:***{}",
        &text[..rest_start],
        &userinfo[..colon],
        &rest[at..]
    )
}

impl Endpoint {
    /// Connects to `text`, asks whether it is a cluster node and, if so, lists the primaries.
    /// Errors name the endpoint and what failed.
    pub fn open(text: &str) -> Result<Endpoint> {
        let info = parse(text)?;
        let text = redacted(text);
        let text = text.as_str();
        let mut conn = connect(&info, text)?;
        let infotext: String = redis::cmd("INFO")
            .arg("cluster")
            .query(&mut conn)
            .map_err(|e| format!("{text}: INFO cluster: {e}"))?;
        let cluster = infotext.lines().any(|l| l.trim() == "cluster_enabled:1");
        let nodes = if cluster {
            let slots: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut conn)
                .map_err(|e| format!("{text}: CLUSTER SLOTS: {e}"))?;
            primaries(&slots, &info)
                .into_iter()
                .map(|(addr, info)| Node { addr, info })
                .collect()
        } else {
            vec![Node {
                addr: addr_text(&info),
                info: info.clone(),
            }]
        };
        if nodes.is_empty() {
            return Err(format!("{text}: cluster has no slots assigned"));
        }
        Ok(Endpoint {
            text: text.to_string(),
            info,
            cluster,
            nodes,
        })
    }

    /// A client for per-key commands.
    pub fn key_client(&self) -> Result<KeyClient> {
        if !self.cluster {
            return connect(&self.info, &self.text).map(KeyClient::Single);
        }
        let seeds: Vec<ConnectionInfo> = std::iter::once(self.info.clone())
            .chain(self.nodes.iter().map(|n| n.info.clone()))
            .collect();
        let client = ClusterClientBuilder::new(seeds)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(IO_TIMEOUT)
            .build()
            .map_err(|e| format!("{}: cluster client: {e}", self.text))?;
        let conn = client
            .get_connection()
            .map_err(|e| format!("{}: cluster connection: {e}", self.text))?;
        Ok(KeyClient::Cluster(Box::new(conn)))
    }

    /// The first node this endpoint shares with `other`: same `host:port` (both resolved, so
    /// `localhost` and `127.0.0.1` are the same) and same database number. `Some("host:port db
    /// N")` when they share one (copying would RESTORE … REPLACE onto the source itself).
    pub fn same_server(&self, other: &Endpoint) -> Option<String> {
        for a in &self.nodes {
            let resolved_a = resolve(&a.info);
            for b in &other.nodes {
                if a.info.redis.db != b.info.redis.db {
                    continue;
                }
                let same =
                    a.addr == b.addr || resolve(&b.info).iter().any(|sa| resolved_a.contains(sa));
                if same {
                    return Some(format!("{} db {}", a.addr, a.info.redis.db));
                }
            }
        }
        None
    }

    /// Keys in the keyspace: `DBSIZE` summed over the nodes (the progress bar's total).
    pub fn dbsize(&self) -> Result<u64> {
        let mut total = 0u64;
        for node in &self.nodes {
            let mut c = node.connect()?;
            let n: u64 = redis::cmd("DBSIZE")
                .query(&mut c)
                .map_err(|e| format!("{}: DBSIZE: {e}", node.addr))?;
            total += n;
        }
        Ok(total)
    }
}

/// Opens a connection with connect and I/O timeouts; errors name `what`.
fn connect(info: &ConnectionInfo, what: &str) -> Result<redis::Connection> {
    let client = Client::open(info.clone()).map_err(|e| format!("{what}: {e}"))?;
    let conn = client
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(|e| format!("{what}: cannot connect: {e}"))?;
    conn.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(conn)
}

/// `host:port` of a TCP connection info.
fn addr_text(info: &ConnectionInfo) -> String {
    match &info.addr {
        ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
        other => other.to_string(),
    }
}

/// The socket addresses a TCP endpoint's host resolves to (none when it does not resolve).
fn resolve(info: &ConnectionInfo) -> Vec<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    match &info.addr {
        ConnectionAddr::Tcp(h, p)
        | ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => (h.as_str(), *p)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The distinct primaries of a `CLUSTER SLOTS` reply, in slot order, each with the seed's
/// credentials. An empty host (Redis's "unknown", the node the question was asked of) is the
/// seed's host.
fn primaries(slots: &Value, seed: &ConnectionInfo) -> Vec<(String, ConnectionInfo)> {
    let seed_host = match &seed.addr {
        ConnectionAddr::Tcp(h, _) => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    let mut ranges: Vec<(i64, String, u16)> = ranges
        .iter()
        .filter_map(|r| {
            let Value::Array(r) = r else { return None };
            let Value::Int(start) = r.first()? else {
                return None;
            };
            let Value::Array(primary) = r.get(2)? else {
                return None;
            };
            let host = match primary.first()? {
                Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
                Value::SimpleString(h) => h.clone(),
                _ => return None,
            };
            let Value::Int(port) = primary.get(1)? else {
                return None;
            };
            let host = if host.is_empty() || host == "?" {
                seed_host.clone()
            } else {
                host
            };
            Some((*start, host, u16::try_from(*port).ok()?))
        })
        .collect();
    ranges.sort();
    let mut out: Vec<(String, ConnectionInfo)> = Vec::new();
    for (_, host, port) in ranges {
        let addr = format!("{host}:{port}");
        if out.iter().any(|(a, _)| *a == addr) {
            continue;
        }
        let info = ConnectionInfo {
            addr: ConnectionAddr::Tcp(host, port),
            redis: seed.redis.clone(),
        };
        out.push((addr, info));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        let i = parse("127.0.0.1:7000").expect("host:port");
        assert_eq!(addr_text(&i), "127.0.0.1:7000");
        let i = parse("redis://u:p@h:7001").expect("url");
        assert_eq!(addr_text(&i), "h:7001");
        assert_eq!(i.redis.username.as_deref(), Some("u"));
        assert_eq!(i.redis.password.as_deref(), Some("p"));
        assert!(parse("localhost").is_err());
        assert!(parse("redis://h:notaport").is_err());
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redacted("127.0.0.1:7000"), "127.0.0.1:7000");
        assert_eq!(redacted("redis://h:7000/1"), "redis://h:7000/1");
        assert_eq!(redacted("redis://u@h:7000"), "redis://u@h:7000");
        assert_eq!(
            redacted("redis://user:s3cret@h:7000/2"),
            "redis://user:***@h:7000/2"
        );
        assert_eq!(redacted("redis://:pw@h:7000"), "redis://:***@h:7000");
        assert_eq!(redacted("rediss://u:p@ss@h:7000"), "rediss://u:***@h:7000");
        let e = parse("redis://u:s3cret@h:notaport").expect_err("bad port");
        assert!(!e.contains("s3cret") && e.contains("***"), "{e}");
    }

    #[test]
    fn primaries_from_cluster_slots() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let range = |a, z, host: &str, port| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(z),
                Value::Array(vec![b(host), Value::Int(port), b("id")]),
                Value::Array(vec![b(host), Value::Int(port + 100), b("id2")]),
            ])
        };
        let slots = Value::Array(vec![
            range(100, 200, "10.0.0.2", 7001),
            range(0, 99, "", 7000),
            range(201, 16383, "10.0.0.2", 7001),
        ]);
        let seed = parse("redis://:pw@10.0.0.1:7000").expect("seed");
        let p = primaries(&slots, &seed);
        let names: Vec<&str> = p.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(names, ["10.0.0.1:7000", "10.0.0.2:7001"]);
        assert_eq!(p[1].1.redis.password.as_deref(), Some("pw"));
        assert!(primaries(&Value::Nil, &seed).is_empty());
    }
}

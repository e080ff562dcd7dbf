//! The blocking one-shot topology exchange of Redis Cluster discovery: connect, `AUTH` if
//! configured, `CLUSTER SLOTS`, close. Runs on the discovery thread only (std sockets with
//! timeouts, never on a worker's ring); the reply is parsed above, in `cluster::discovery`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::ClusterConfig;
use crate::resp::{ReplyScanner, encode, is_error};

/// Longest read wait before the stop flag is looked at again, so that a discovery thread
/// told to stop while it waits for a slow node ends within about a tick.
const READ_SLICE: Duration = Duration::from_millis(50);

/// Largest reply accepted: a `CLUSTER SLOTS` reply of a 1000-node cluster with every slot in
/// its own range is still far below this; a node sending more is broken.
pub const MAX_REPLY: usize = 64 * 1024 * 1024;

/// Why one exchange failed, by step. `Display` is the text discovery logs.
#[derive(Debug)]
pub enum FetchError {
    /// The TCP connect failed or timed out.
    Connect(std::io::Error),
    /// The TLS handshake failed (`[clusters.tls]`).
    Tls(std::io::Error),
    /// Setting a socket option failed.
    Socket(std::io::Error),
    /// Writing the request failed.
    Write(std::io::Error),
    /// Reading the reply failed.
    Read(std::io::Error),
    /// The node answered `AUTH` with this error reply (trimmed).
    Auth(String),
    /// The node sent bytes that are not RESP.
    Protocol(String),
    /// The reply grew past [`MAX_REPLY`] bytes.
    TooLarge,
    /// `cluster_refresh_timeout` passed before the reply was complete.
    TimedOut,
    /// The node closed the connection before the reply was complete.
    Closed,
    /// The stop flag was set.
    Stopped,
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Connect(e) => write!(f, "connect: {e}"),
            FetchError::Tls(e) => write!(f, "TLS handshake: {e}"),
            FetchError::Socket(e) => write!(f, "socket: {e}"),
            FetchError::Write(e) => write!(f, "write: {e}"),
            FetchError::Read(e) => write!(f, "read: {e}"),
            FetchError::Auth(text) => write!(f, "AUTH failed: {text}"),
            FetchError::Protocol(e) => write!(f, "protocol error: {e}"),
            FetchError::TooLarge => write!(f, "reply larger than {MAX_REPLY} bytes"),
            FetchError::TimedOut => f.write_str("timed out"),
            FetchError::Closed => f.write_str("connection closed"),
            FetchError::Stopped => f.write_str("stopped"),
        }
    }
}

impl std::error::Error for FetchError {}

/// Asks nodes of one cluster for their `CLUSTER SLOTS` reply.
#[derive(Debug)]
pub struct ClusterSlotsClient {
    connect_timeout: Duration,
    timeout: Duration,
    /// The cluster's credentials: `AUTH …` (if any for the node) and `command` are pipelined
    /// in one write.
    auth: super::UpstreamAuth,
    /// What to ask: `CLUSTER SLOTS`, or `INFO server` for zone discovery.
    command: &'static [&'static [u8]],
    stop: Arc<AtomicBool>,
    /// The cluster's TLS: discovery connects as every other connection to its nodes does.
    tls: Option<super::TlsSettings>,
}

impl ClusterSlotsClient {
    /// Timeouts from `cluster`: the whole exchange is bounded by `cluster_refresh_timeout`, the
    /// connect by `connect_timeout` too. `stop` aborts a pending read.
    pub fn new(cluster: &ClusterConfig, stop: Arc<AtomicBool>) -> ClusterSlotsClient {
        Self::asking(cluster, stop, &[b"CLUSTER", b"SLOTS"])
    }

    /// A client that sends `INFO server` instead (zone discovery: the reply's
    /// `availability_zone` field), under the same timeouts, AUTH and TLS.
    pub fn info_server(cluster: &ClusterConfig, stop: Arc<AtomicBool>) -> ClusterSlotsClient {
        Self::asking(cluster, stop, &[b"INFO", b"server"])
    }

    fn asking(
        cluster: &ClusterConfig,
        stop: Arc<AtomicBool>,
        command: &'static [&'static [u8]],
    ) -> ClusterSlotsClient {
        let timeout = cluster.redis_cluster.cluster_refresh_timeout;
        ClusterSlotsClient {
            connect_timeout: cluster.connect_timeout.min(timeout),
            timeout,
            // Redis Cluster has database 0 only (`db` is refused on these clusters).
            auth: super::UpstreamAuth {
                db: 0,
                ..super::UpstreamAuth::of(cluster)
            },
            command,
            stop,
            tls: super::TlsSettings::of(cluster),
        }
    }

    /// Counts this client's TLS handshakes in the cluster's `ssl.*` stats (the discovery
    /// threads' shard).
    pub fn with_stats(mut self, store: &crate::stats::Store) -> ClusterSlotsClient {
        self.tls = self
            .tls
            .map(|t| t.with_stats(store, crate::stats::DISCOVERY_SHARD));
        self
    }

    /// The raw `CLUSTER SLOTS` reply of `node` (one complete RESP value, possibly an error
    /// reply, which the parser reports).
    pub fn fetch(&self, node: SocketAddr) -> Result<Vec<u8>, FetchError> {
        // A timeout too long to represent (not rejected by config validation) is no deadline.
        let deadline = Instant::now().checked_add(self.timeout);
        let tcp =
            TcpStream::connect_timeout(&node, self.connect_timeout).map_err(FetchError::Connect)?;
        // Small request, one reply: no point waiting for Nagle.
        let _ = tcp.set_nodelay(true);
        tcp.set_write_timeout(Some(self.timeout))
            .map_err(FetchError::Socket)?;
        let mut stream = match &self.tls {
            Some(tls) => {
                // The handshake has what is left of connect_timeout, as on the workers.
                tcp.set_read_timeout(Some(self.connect_timeout))
                    .map_err(FetchError::Socket)?;
                let name = tls.server_name(node);
                let mut conn =
                    rustls::ClientConnection::new(tls.config.client.config.clone(), name)
                        .map_err(|e| FetchError::Tls(std::io::Error::other(e)))?;
                let mut tcp = tcp;
                let mut done = Ok(());
                while conn.is_handshaking() && done.is_ok() {
                    done = conn.complete_io(&mut tcp).map(|_| ());
                }
                tls.count(done.as_ref().map(|_| ()));
                done.map_err(FetchError::Tls)?;
                Blocking::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
            }
            None => Blocking::Plain(tcp),
        };
        let mut request = Vec::new();
        let auth = super::encode_handshake(&mut request, self.auth.for_addr(node), false, 0);
        encode::command(&mut request, self.command.iter().copied());
        stream.write_all(&request).map_err(FetchError::Write)?;
        let mut reader = Reader::default();
        if auth > 0 {
            let reply = reader.next(&mut stream, deadline, &self.stop)?;
            if is_error(&reply) {
                let text = String::from_utf8_lossy(&reply);
                return Err(FetchError::Auth(text.trim_end().to_string()));
            }
        }
        reader.next(&mut stream, deadline, &self.stop)
    }
}

/// A blocking connection to a node, plain or TLS.
enum Blocking {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Blocking {
    fn tcp(&self) -> &TcpStream {
        match self {
            Blocking::Plain(s) => s,
            Blocking::Tls(s) => &s.sock,
        }
    }
}

impl Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.read(buf),
            Blocking::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.write(buf),
            Blocking::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Blocking::Plain(s) => s.flush(),
            Blocking::Tls(s) => s.flush(),
        }
    }
}

/// Reads whole replies off a blocking stream.
#[derive(Debug, Default)]
struct Reader {
    buf: Vec<u8>,
    scanner: ReplyScanner,
}

impl Reader {
    /// The next complete reply, or an error when `deadline` (if any) passes, `stop` is set,
    /// the peer closes or sends something that is not RESP.
    fn next(
        &mut self,
        stream: &mut Blocking,
        deadline: Option<Instant>,
        stop: &AtomicBool,
    ) -> Result<Vec<u8>, FetchError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let scanned = self
                .scanner
                .scan(&self.buf)
                .map_err(|e| FetchError::Protocol(e.to_string()))?;
            if let Some(n) = scanned {
                return Ok(self.buf.drain(..n).collect());
            }
            if self.buf.len() > MAX_REPLY {
                return Err(FetchError::TooLarge);
            }
            if stop.load(Ordering::Acquire) {
                return Err(FetchError::Stopped);
            }
            let left = deadline.map_or(READ_SLICE, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Err(FetchError::TimedOut);
            }
            stream
                .tcp()
                .set_read_timeout(Some(left.min(READ_SLICE)))
                .map_err(FetchError::Socket)?;
            match stream.read(&mut chunk) {
                Ok(0) => return Err(FetchError::Closed),
                Ok(n) => self
                    .buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(FetchError::Read(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each failure step against a one-connection local server that misbehaves on purpose.
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A cluster config with `password` and a 1 s refresh timeout.
    fn cluster(password: Option<&str>) -> ClusterConfig {
        use crate::config::{ClusterType, LbPolicy, RedisClusterConfig};
        ClusterConfig {
            name: "c".into(),
            cluster_type: ClusterType::RedisCluster,
            hosts: Vec::new(),
            lb_policy: LbPolicy::Ketama,
            least_request: Default::default(),
            hash: crate::config::KeyHash::Fnv1a64,
            connect_timeout: Duration::from_secs(1),
            auth_username: None,
            auth_password: password.map(str::to_string),
            credentials: Vec::new(),
            db: 0,
            connections_per_host: 1,
            redis_cluster: RedisClusterConfig {
                cluster_refresh_timeout: Duration::from_secs(1),
                ..RedisClusterConfig::default()
            },
            health_checks: Vec::new(),
            outlier_detection: None,
            on_unhealthy: Default::default(),
            connection_rate_limit_per_sec: 0,
            max_pending_requests: 16384,
            max_leased_connections: 32,
            max_reply_bytes_in_flight: 64 << 20,
            tcp_keepalive: Default::default(),
            tls: None,
            dns: None,
        }
    }

    /// Serves one connection: reads `expect` bytes, writes `answer`, then closes (or keeps the
    /// socket open for `hold`).
    fn serve(expect: usize, answer: &'static [u8], hold: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = vec![0u8; expect];
            let _ = s.read_exact(&mut got);
            let _ = s.write_all(answer);
            std::thread::sleep(hold);
        });
        addr
    }

    fn fetch(password: Option<&str>, addr: SocketAddr) -> Result<Vec<u8>, FetchError> {
        let stop = Arc::new(AtomicBool::new(false));
        ClusterSlotsClient::new(&cluster(password), stop).fetch(addr)
    }

    const SLOTS: usize = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n".len();
    const AUTH: usize = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n".len();

    #[test]
    fn returns_the_whole_reply_even_when_it_is_an_error() {
        let addr = serve(
            SLOTS,
            b"-ERR This instance has cluster support disabled\r\n",
            Duration::ZERO,
        );
        let reply = fetch(None, addr).unwrap();
        assert_eq!(
            reply,
            b"-ERR This instance has cluster support disabled\r\n"
        );
    }

    #[test]
    fn each_failing_step_is_named() {
        let closed = serve(SLOTS, b"*1\r\n", Duration::ZERO);
        assert!(matches!(fetch(None, closed), Err(FetchError::Closed)));
        let garbage = serve(SLOTS, b"hello\r\n", Duration::ZERO);
        let e = fetch(None, garbage).unwrap_err();
        assert!(matches!(e, FetchError::Protocol(_)), "{e}");
        assert!(e.to_string().starts_with("protocol error: "), "{e}");
        let refused = serve(
            AUTH + SLOTS,
            b"-WRONGPASS invalid username-password pair\r\n",
            Duration::ZERO,
        );
        let e = fetch(Some("pw"), refused).unwrap_err();
        assert_eq!(
            e.to_string(),
            "AUTH failed: -WRONGPASS invalid username-password pair"
        );
        let silent = serve(SLOTS, b"", Duration::from_secs(3));
        let started = Instant::now();
        assert!(matches!(fetch(None, silent), Err(FetchError::TimedOut)));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let nobody = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(fetch(None, nobody), Err(FetchError::Connect(_))));
    }

    #[test]
    fn stop_ends_a_pending_read_within_a_slice() {
        let silent = serve(SLOTS, b"", Duration::from_secs(3));
        let stop = Arc::new(AtomicBool::new(false));
        let client = ClusterSlotsClient::new(&cluster(None), stop.clone());
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Release);
        });
        let started = Instant::now();
        assert!(matches!(client.fetch(silent), Err(FetchError::Stopped)));
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
        setter.join().unwrap();
    }
}

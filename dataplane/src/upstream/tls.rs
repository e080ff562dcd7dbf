//! TLS to a cluster's hosts: the name each host is verified as, the TCP connect plus handshake
//! under one `connect_timeout`, and the cluster's `ssl.*` stats (Envoy's names, under
//! `cluster.<name>.ssl.`) with a log line that says why a handshake failed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

use crate::config::{ClusterConfig, TcpKeepalive, UpstreamTls};
use crate::net::{self, Stream};
use crate::stats::log_limit::{LogLimit, log_limited, log_limited_by};
use crate::stats::{Counter, Store};

/// A cluster's `[clusters.tls]` as its connections use it. Compared and hashed by the config
/// (the stats shard rides along, outside the comparison), so it can sit in
/// [`super::PoolSettings`].
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The validated settings with their rustls config.
    pub config: UpstreamTls,
    /// `address_text` of each configured host, by address: the name its certificate is
    /// verified as when `sni` is not set.
    names: Arc<[(SocketAddr, String)]>,
    /// The cluster's name, for log lines.
    cluster: Arc<str>,
    /// This worker's `ssl.*` shard; `None` off the workers (health checks, tests).
    pub(super) stats: Option<Arc<SslStats>>,
}

impl PartialEq for TlsSettings {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config && self.names == other.names
    }
}
impl Eq for TlsSettings {}

impl std::hash::Hash for TlsSettings {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.config.sni.hash(state);
        self.names.hash(state);
    }
}

impl TlsSettings {
    /// The TLS settings of `cluster`'s connections, `None` when it has no `[clusters.tls]`.
    pub fn of(cluster: &ClusterConfig) -> Option<TlsSettings> {
        let config = cluster.tls.clone()?;
        let names = cluster
            .hosts
            .iter()
            .map(|h| (h.address, h.address_text.clone()))
            .collect();
        Some(TlsSettings {
            config,
            names,
            cluster: cluster.name.as_str().into(),
            stats: None,
        })
    }

    /// Registers this worker's `cluster.<name>.ssl.*` shard.
    pub fn with_stats(mut self, store: &Store, worker: usize) -> TlsSettings {
        self.stats = Some(Arc::new(SslStats::new(store, worker, &self.cluster)));
        self
    }

    /// The name `addr`'s certificate is verified as: `sni`, else the host's name as written,
    /// else its IP (a Redis Cluster node known from discovery or a redirect).
    pub fn server_name(&self, addr: SocketAddr) -> ServerName<'static> {
        let text = self
            .names
            .iter()
            .find(|(a, _)| *a == addr)
            .map(|(_, t)| t.as_str());
        self.config.server_name(text, addr.ip())
    }

    /// Connects to `addr` and runs the TLS handshake, both within `timeout`; counts the
    /// outcome and logs a failed handshake (rate-limited) with its reason.
    ///
    /// # Errors
    /// The connect or the handshake failed, or `timeout` passed.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        timeout: Duration,
        keepalive: Option<&TcpKeepalive>,
    ) -> std::io::Result<Stream> {
        let deadline = Instant::now() + timeout;
        let tcp = match keepalive {
            Some(k) => net::connect_keepalive(addr, timeout, k).await?,
            None => net::connect(addr, timeout).await?,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let name = self.server_name(addr);
        let shown = shown(&name);
        let handshake = net::tls_connect(tcp, self.config.client.config.clone(), name);
        let res = match net::timeout(left, handshake).await {
            Some(r) => r,
            None => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timeout (connect_timeout)",
            )),
        };
        self.count(res.as_ref().map(|_| ()));
        if let Err(e) = &res {
            match &self.stats {
                Some(s) => log_limited_by!(s.log, WARN, "upstream TLS handshake failed";
                    cluster = %self.cluster, upstream = %addr, server_name = %shown, error = %e),
                None => log_limited!(WARN, "upstream TLS handshake failed";
                    cluster = %self.cluster, upstream = %addr, server_name = %shown, error = %e),
            }
        }
        res
    }

    /// Counts a handshake's outcome in `ssl.*` (when [`TlsSettings::with_stats`] gave a shard).
    pub fn count(&self, outcome: Result<(), &std::io::Error>) {
        let Some(s) = &self.stats else {
            return;
        };
        match outcome {
            Ok(()) => s.handshake.inc(),
            Err(e) => s.count_failure(net::tls::failure(e)),
        }
    }
}

impl TlsSettings {
    /// Counts and logs a refusal the host sent after the handshake looked done (a TLS 1.3
    /// server refusing the client certificate alerts on the first read): one
    /// `ssl.connection_error`, as if the handshake had failed, which it did. Other errors are
    /// not TLS's and are left to the caller.
    pub fn note_refusal(&self, addr: SocketAddr, e: &std::io::Error) {
        if !net::tls::is_peer_alert(e) {
            return;
        }
        match &self.stats {
            Some(s) => {
                s.connection_error.inc();
                log_limited_by!(s.log, WARN, "upstream TLS handshake failed";
                    cluster = %self.cluster, upstream = %addr, error = %e);
            }
            None => log_limited!(WARN, "upstream TLS handshake failed";
                cluster = %self.cluster, upstream = %addr, error = %e),
        }
    }
}

/// A server name as a reader writes it (`redis.example.com`, `10.0.0.7`).
fn shown(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

/// One worker's shard of a cluster's (or a listener's) `ssl.*` counters (Envoy's names).
#[derive(Debug)]
pub struct SslStats {
    /// `ssl.handshake`: handshakes completed.
    pub handshake: Arc<Counter>,
    /// `ssl.connection_error`: handshakes that failed, whatever the reason.
    pub connection_error: Arc<Counter>,
    /// `ssl.fail_verify_error`: the peer's certificate chain did not verify.
    pub fail_verify_error: Arc<Counter>,
    /// `ssl.fail_verify_san`: the certificate is not for the expected name.
    pub fail_verify_san: Arc<Counter>,
    /// `ssl.fail_verify_no_cert`: a certificate was required and none was presented.
    pub fail_verify_no_cert: Arc<Counter>,
    /// `ssl.no_certificate`: connections that completed with no peer certificate where one
    /// could have been presented (a listener with `trusted_ca` that does not require one).
    pub no_certificate: Arc<Counter>,
    /// Limits the failed-handshake log lines of this cluster (or listener) on this worker.
    pub log: LogLimit,
}

impl SslStats {
    /// Registers `worker`'s shard under `<scope>.ssl.` (`cluster.<name>` or
    /// `redis.<stat_prefix>`).
    pub fn under(store: &Store, worker: usize, scope: &str) -> SslStats {
        let c = |n: &str| store.counter(&format!("{scope}.ssl.{n}"), worker);
        SslStats {
            handshake: c("handshake"),
            connection_error: c("connection_error"),
            fail_verify_error: c("fail_verify_error"),
            fail_verify_san: c("fail_verify_san"),
            fail_verify_no_cert: c("fail_verify_no_cert"),
            no_certificate: c("no_certificate"),
            log: LogLimit::new(),
        }
    }

    fn new(store: &Store, worker: usize, cluster: &str) -> SslStats {
        SslStats::under(store, worker, &format!("cluster.{cluster}"))
    }

    /// Counts a failed handshake.
    pub fn count_failure(&self, failure: net::tls::Failure) {
        self.connection_error.inc();
        match failure {
            net::tls::Failure::Verify => self.fail_verify_error.inc(),
            net::tls::Failure::VerifyName => self.fail_verify_san.inc(),
            net::tls::Failure::NoCertificate => self.fail_verify_no_cert.inc(),
            net::tls::Failure::Other => {}
        }
    }
}

//! TLS for integration tests: certificates made at test time, TLS `redis-server`s, a blocking
//! rustls client that hands back raw reply bytes, and a six-node Redis Cluster on TLS ports.
//!
//! - [`Certs`]: a CA and the leaf certificates the tests need (server, client, another CA's
//!   client, expired, wrong host name, `localhost`-only), made with `rcgen` (ECDSA P-256) and
//!   written as PEM files into a temp dir; [`Certs::issue`] signs more (for rotation).
//! - [`TlsRedis`]: a `redis-server` with `--tls-port` beside its plain port (the harness's
//!   readiness check and direct comparisons use the plain one). Redis's `tls-auth-clients`
//!   defaults to `yes`: a TLS client must present a certificate signed by the CA.
//! - [`TlsClient`]: like [`crate::RawClient`] over rustls (`StreamOwned` over a std
//!   `TcpStream`): raw RESP bytes in and out, the served certificate visible.
//! - [`TlsCluster`]: six cluster nodes with `--tls-cluster yes --tls-replication yes`, joined
//!   over their plain ports; `CLUSTER SLOTS` asked over TLS names the TLS ports.

use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::cluster::{Reply, SLOTS, parse_cluster_slots, redis_cli, try_query};
use crate::{IO_TIMEOUT, RawClient, RedisServer, free_port, read_resp};

// ---- certificates ------------------------------------------------------------------------

/// Whether a leaf is valid now or expired long ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// 1975 to 4096 (rcgen's default).
    Current,
    /// 2000-01-01 to 2001-01-01.
    Expired,
}

/// One leaf certificate written to disk: `<stem>.pem` (the leaf) and `<stem>.key` (PKCS#8).
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The PEM certificate file (the leaf only; the CA is the trust anchor).
    pub cert: PathBuf,
    /// The PEM private key file.
    pub key: PathBuf,
    /// The leaf's DER bytes (to compare with what a server presents).
    pub der: Vec<u8>,
    /// Its serial number.
    pub serial: u64,
}

/// A CA, another CA and the leaves the TLS tests use, as PEM files in a temp dir (removed on
/// drop). Every leaf has both `serverAuth` and `clientAuth` extended key usages (a Redis
/// Cluster node presents its `tls-cert-file` on both sides of the bus).
pub struct Certs {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM): `trusted_ca` / `--tls-ca-cert-file` / `--cacert`.
    pub ca_pem: PathBuf,
    /// Another CA's certificate (PEM), trusted by nobody.
    pub other_ca_pem: PathBuf,
    /// Server leaf for DNS `localhost` and IP `127.0.0.1`, CN `respite-test-server` (serial 1).
    pub server: CertFiles,
    /// Client leaf signed by the CA, CN `respite-test-client` (serial 2).
    pub client: CertFiles,
    /// Client leaf signed by the other CA (serial 3): refused by anyone trusting only the CA.
    pub other_client: CertFiles,
    /// Server leaf for `localhost` and `127.0.0.1` that expired in 2001 (serial 4).
    pub expired: CertFiles,
    /// Server leaf for DNS `wrong.example.com` only (serial 5).
    pub wrong_host: CertFiles,
    /// Server leaf for DNS `localhost` only, no IP address (serial 6): verifies when the client
    /// asks for `localhost`, not when it asks for `127.0.0.1`.
    pub localhost_only: CertFiles,
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn new_ca(cn: &str) -> (Issuer<'static, KeyPair>, String) {
    let key = KeyPair::generate().expect("CA key");
    let params = ca_params(cn);
    let pem = params.self_signed(&key).expect("self-signed CA").pem();
    (Issuer::new(params, key), pem)
}

/// Signs a leaf for `sans` (DNS names or IP addresses) with `issuer` and writes it to
/// `dir/<stem>.pem` and `dir/<stem>.key` (replacing them if present).
fn issue_leaf(
    dir: &Path,
    issuer: &Issuer<'static, KeyPair>,
    stem: &str,
    cn: &str,
    sans: &[&str],
    serial: u64,
    validity: Validity,
) -> CertFiles {
    let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("leaf params");
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.serial_number = Some(SerialNumber::from(serial));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyAgreement,
    ];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    if validity == Validity::Expired {
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let key = KeyPair::generate().expect("leaf key");
    let cert = p.signed_by(&key, issuer).expect("sign leaf");
    let files = CertFiles {
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}.key")),
        der: cert.der().to_vec(),
        serial,
    };
    fs::write(&files.cert, cert.pem()).expect("write leaf");
    fs::write(&files.key, key.serialize_pem()).expect("write key");
    files
}

impl Certs {
    /// Makes the CAs and leaves (a few milliseconds) and writes them.
    pub fn generate() -> Certs {
        let dir = tempfile::Builder::new()
            .prefix("respite-tls-")
            .tempdir()
            .expect("temp dir for certificates");
        let (ca, ca_text) = new_ca("respite-test-ca");
        let (other, other_text) = new_ca("respite-other-ca");
        let ca_pem = dir.path().join("ca.pem");
        let other_ca_pem = dir.path().join("other-ca.pem");
        fs::write(&ca_pem, ca_text).expect("write ca.pem");
        fs::write(&other_ca_pem, other_text).expect("write other-ca.pem");
        let d = dir.path();
        let here = ["localhost", "127.0.0.1"];
        let server = issue_leaf(
            d,
            &ca,
            "server",
            "respite-test-server",
            &here,
            1,
            Validity::Current,
        );
        let client = issue_leaf(
            d,
            &ca,
            "client",
            "respite-test-client",
            &[],
            2,
            Validity::Current,
        );
        let other_client = issue_leaf(
            d,
            &other,
            "other-client",
            "respite-other-client",
            &[],
            3,
            Validity::Current,
        );
        let expired = issue_leaf(
            d,
            &ca,
            "expired",
            "respite-expired",
            &here,
            4,
            Validity::Expired,
        );
        let wrong_host = issue_leaf(
            d,
            &ca,
            "wrong-host",
            "wrong.example.com",
            &["wrong.example.com"],
            5,
            Validity::Current,
        );
        let localhost_only = issue_leaf(
            d,
            &ca,
            "localhost-only",
            "localhost",
            &["localhost"],
            6,
            Validity::Current,
        );
        Certs {
            dir,
            ca,
            ca_pem,
            other_ca_pem,
            server,
            client,
            other_client,
            expired,
            wrong_host,
            localhost_only,
        }
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Signs another leaf with the CA for `localhost` and `127.0.0.1`, CN `cn`, serial
    /// `serial`, written to `<stem>.pem` / `<stem>.key` in [`Certs::dir`] (replacing files of
    /// the same stem: a certificate rotated in place).
    pub fn issue(&self, stem: &str, cn: &str, serial: u64) -> CertFiles {
        issue_leaf(
            self.dir.path(),
            &self.ca,
            stem,
            cn,
            &["localhost", "127.0.0.1"],
            serial,
            Validity::Current,
        )
    }
}

// ---- TLS redis-server --------------------------------------------------------------------

/// A [`RedisServer`] that also listens for TLS on `tls_port` with `cert` and trusts the CA of
/// [`Certs`] for client certificates.
pub struct TlsRedis {
    /// The server (plain port in `server.port`, for readiness and direct comparisons).
    pub server: RedisServer,
    /// The TLS port on 127.0.0.1.
    pub tls_port: u16,
}

impl TlsRedis {
    /// Starts `redis-server --tls-port P --tls-cert-file <cert> --tls-key-file <key>
    /// --tls-ca-cert-file <ca.pem>` plus `extra` (for example `&["--tls-auth-clients", "no"]`).
    pub fn start(certs: &Certs, cert: &CertFiles, extra: &[&str]) -> TlsRedis {
        let tls_port = free_port();
        let (tls_port_s, cert_s, key_s, ca_s) = (
            tls_port.to_string(),
            cert.cert.display().to_string(),
            cert.key.display().to_string(),
            certs.ca_pem.display().to_string(),
        );
        let mut args = vec![
            "--tls-port",
            &tls_port_s,
            "--tls-cert-file",
            &cert_s,
            "--tls-key-file",
            &key_s,
            "--tls-ca-cert-file",
            &ca_s,
        ];
        args.extend_from_slice(extra);
        let server = RedisServer::start_with(&args);
        assert!(
            crate::wait_for_port(tls_port, crate::START_TIMEOUT),
            "redis-server TLS port {tls_port} not listening; log:\n{}",
            server.log()
        );
        TlsRedis { server, tls_port }
    }

    /// `"127.0.0.1:<tls_port>"`.
    pub fn tls_addr(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port)
    }

    /// A [`RawClient`] on the plain port.
    pub fn plain(&self) -> RawClient {
        self.server.raw()
    }
}

// ---- rustls client -----------------------------------------------------------------------

/// Reads every certificate of a PEM file.
pub fn read_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// A rustls client config (ring, TLS 1.2 and 1.3) trusting the CA in `ca_pem`, presenting
/// `client` when given.
pub fn client_config(ca_pem: &Path, client: Option<&CertFiles>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(ca_pem) {
        roots.add(c).expect("add CA to the root store");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
    let config = match client {
        Some(c) => {
            let key = PrivateKeyDer::from_pem_file(&c.key)
                .unwrap_or_else(|e| panic!("key {}: {e}", c.key.display()));
            builder
                .with_client_auth_cert(read_certs(&c.cert), key)
                .expect("client certificate")
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// A blocking TLS RESP client: the TLS counterpart of [`RawClient`], replies as the exact bytes
/// received. `pipeline` writes everything before reading, like `RawClient::pipeline`: keep
/// the replies of one batch within what the socket buffers hold.
pub struct TlsClient {
    io: BufReader<StreamOwned<ClientConnection, TcpStream>>,
}

impl TlsClient {
    /// Connects to `addr` and completes the handshake as `server_name` (`"localhost"`,
    /// `"127.0.0.1"`); panics on failure.
    pub fn connect(addr: &str, server_name: &str, config: Arc<ClientConfig>) -> TlsClient {
        Self::try_connect(addr, server_name, config)
            .unwrap_or_else(|e| panic!("TLS connect to {addr} as {server_name}: {e}"))
    }

    /// Connects and runs the handshake until the client's side of it is done. With TLS 1.3 a
    /// server that refuses the client's certificate says so after that: the first read fails.
    pub fn try_connect(
        addr: &str,
        server_name: &str,
        config: Arc<ClientConfig>,
    ) -> io::Result<TlsClient> {
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut tcp = TcpStream::connect(addr)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        Ok(TlsClient {
            io: BufReader::with_capacity(64 * 1024, StreamOwned::new(conn, tcp)),
        })
    }

    /// The certificates the server presented (leaf first), DER.
    pub fn peer_certificates(&self) -> Vec<Vec<u8>> {
        self.io
            .get_ref()
            .conn
            .peer_certificates()
            .map(|cs| cs.iter().map(|c| c.to_vec()).collect())
            .unwrap_or_default()
    }

    /// The negotiated protocol version (`TLSv1_3`, ...), for messages.
    pub fn protocol(&self) -> String {
        format!("{:?}", self.io.get_ref().conn.protocol_version())
    }

    /// Sets the socket's read timeout.
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        let _ = self.io.get_ref().sock.set_read_timeout(t);
    }

    /// Writes `bytes` as they are and flushes the TLS records.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let s = self.io.get_mut();
        s.write_all(bytes)?;
        s.flush()
    }

    /// [`TlsClient::try_send_raw`], panicking on errors.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.try_send_raw(bytes)
            .unwrap_or_else(|e| panic!("TLS write: {e}"));
    }

    /// Sends one command (a RESP array of bulk strings) without reading the reply.
    pub fn send(&mut self, args: &[&[u8]]) {
        self.send_raw(&RawClient::encode(args));
    }

    /// Reads one complete reply (RESP2 or RESP3), returning its raw bytes or the error.
    pub fn try_read_reply(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        read_resp(&mut self.io, &mut out)?;
        Ok(out)
    }

    /// Reads one complete reply; panics on EOF, timeout, a TLS alert or a malformed reply.
    pub fn read_reply(&mut self) -> Vec<u8> {
        self.try_read_reply()
            .unwrap_or_else(|e| panic!("TLS read reply: {e}"))
    }

    /// Sends one command and reads its reply, returning errors.
    pub fn try_cmd(&mut self, args: &[&[u8]]) -> io::Result<Vec<u8>> {
        self.try_send_raw(&RawClient::encode(args))?;
        self.try_read_reply()
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(args);
        self.read_reply()
    }

    /// Sends all `commands` in one write, then reads one reply per command.
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
        let mut buf = Vec::new();
        for c in commands {
            let args: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
            RawClient::encode_into(&mut buf, &args);
        }
        self.send_raw(&buf);
        commands.iter().map(|_| self.read_reply()).collect()
    }

    /// True if the server ended the connection (EOF, close_notify, an alert or a reset) within
    /// `timeout`, false if it is still open (the read timed out).
    pub fn is_closed(&mut self, timeout: Duration) -> bool {
        self.set_read_timeout(Some(timeout));
        let mut b = [0u8; 1];
        let closed = match self.io.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        };
        self.set_read_timeout(Some(IO_TIMEOUT));
        closed
    }
}

// ---- TLS Redis Cluster -------------------------------------------------------------------

/// Six cluster nodes (three primaries, three replicas) with TLS on the client port, the bus
/// (`--tls-cluster yes`) and replication (`--tls-replication yes`), each presenting
/// [`Certs::server`] (IP SAN 127.0.0.1, so nodes discovered by IP verify) and requiring client
/// certificates. Joined with `redis-cli --cluster create` over the plain ports, which stay
/// open for the harness. Dropping it kills every node.
pub struct TlsCluster {
    nodes: Vec<TlsRedis>,
}

impl TlsCluster {
    /// Starts the nodes, creates the cluster and waits until [`TlsCluster::wait_stable`].
    pub fn start(certs: &Certs) -> TlsCluster {
        let nodes: Vec<TlsRedis> = (0..6)
            .map(|_| {
                let bus = free_port().to_string();
                TlsRedis::start(
                    certs,
                    &certs.server,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "1000",
                        "--cluster-port",
                        &bus,
                        "--tls-cluster",
                        "yes",
                        "--tls-replication",
                        "yes",
                    ],
                )
            })
            .collect();
        let cluster = TlsCluster { nodes };
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(cluster.plain_nodes());
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        redis_cli(&args);
        cluster.wait_stable(Duration::from_secs(30));
        cluster
    }

    /// Every node's plain `127.0.0.1:port`, in start order.
    pub fn plain_nodes(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.server.addr()).collect()
    }

    /// Every node's TLS `127.0.0.1:tls_port`, in start order (Respite's seeds).
    pub fn tls_nodes(&self) -> Vec<String> {
        self.nodes.iter().map(TlsRedis::tls_addr).collect()
    }

    /// The TLS address of the node whose plain address is `plain`.
    pub fn tls_addr_of(&self, plain: &str) -> String {
        self.nodes
            .iter()
            .find(|n| n.server.addr() == plain)
            .map(TlsRedis::tls_addr)
            .unwrap_or_else(|| panic!("{plain} is not a node"))
    }

    /// `CLUSTER SLOTS` of the first node over its plain port (plain ports in it).
    pub fn slot_ranges(&self) -> crate::cluster::SlotRanges {
        let addr = &self.plain_nodes()[0];
        let r = try_query(addr, &["CLUSTER", "SLOTS"])
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS to {addr}: {e}"));
        parse_cluster_slots(&r, addr)
    }

    /// The primary (plain address) serving `slot`.
    pub fn slot_owner(&self, slot: u16) -> String {
        self.slot_ranges()
            .into_iter()
            .find(|((a, b), _)| (*a..=*b).contains(&slot))
            .map(|(_, (p, _))| p)
            .unwrap_or_else(|| panic!("slot {slot} not served"))
    }

    /// The primaries' plain addresses.
    pub fn primaries(&self) -> Vec<String> {
        let mut v: Vec<String> = self.slot_ranges().into_values().map(|(p, _)| p).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Sum of `DBSIZE` over the primaries.
    pub fn dbsize(&self) -> i64 {
        self.primaries()
            .iter()
            .map(|p| match try_query(p, &["DBSIZE"]) {
                Ok(Reply::Int(n)) => n,
                other => panic!("DBSIZE on {p}: {other:?}"),
            })
            .sum()
    }

    /// Moves the lowest `nslots` slots of primary `from` to primary `to` (plain addresses) with
    /// `redis-cli --tls --cluster reshard` over the TLS ports (with `tls-cluster yes`, the
    /// nodes' `MIGRATE` connects with TLS: redis-cli must name the TLS ports), then waits until
    /// stable. Panics with redis-cli's output on failure.
    pub fn reshard(&self, certs: &Certs, from: &str, to: &str, nslots: u32) {
        let id = |a: &str| crate::cluster::query(a, &["CLUSTER", "MYID"]).text();
        let args: Vec<String> = [
            "--tls",
            "--cacert",
            &certs.ca_pem.display().to_string(),
            "--cert",
            &certs.client.cert.display().to_string(),
            "--key",
            &certs.client.key.display().to_string(),
            "--cluster",
            "reshard",
            &self.tls_addr_of(from),
            "--cluster-from",
            &id(from),
            "--cluster-to",
            &id(to),
            "--cluster-slots",
            &nslots.to_string(),
            "--cluster-yes",
        ]
        .map(String::from)
        .to_vec();
        redis_cli(&args);
        self.wait_stable(Duration::from_secs(30));
    }

    /// Waits until every node says `cluster_state:ok`, has no open slot, and all nodes return
    /// the same `CLUSTER SLOTS` covering 16384 slots with one replica per range. Panics after
    /// `timeout` with the last reason.
    pub fn wait_stable(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let why = self.unstable_reason();
            let Some(why) = why else { return };
            assert!(
                Instant::now() < deadline,
                "TLS cluster not stable after {timeout:?}: {why}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn unstable_reason(&self) -> Option<String> {
        let mut first: Option<crate::cluster::SlotRanges> = None;
        for addr in self.plain_nodes() {
            match try_query(&addr, &["CLUSTER", "INFO"]) {
                Ok(r @ Reply::Bulk(Some(_))) if r.text().contains("cluster_state:ok") => {}
                other => return Some(format!("{addr}: CLUSTER INFO {other:?}")),
            }
            match try_query(&addr, &["CLUSTER", "NODES"]) {
                Ok(r @ Reply::Bulk(Some(_))) if !r.text().contains("->-") => {
                    if r.text().contains("-<-") {
                        return Some(format!("{addr}: importing slots"));
                    }
                }
                other => return Some(format!("{addr}: CLUSTER NODES {other:?}")),
            }
            let slots = match try_query(&addr, &["CLUSTER", "SLOTS"]) {
                Ok(r @ Reply::Array(Some(_))) => parse_cluster_slots(&r, &addr),
                other => return Some(format!("{addr}: CLUSTER SLOTS {other:?}")),
            };
            let covered: u32 = slots.keys().map(|(a, b)| u32::from(b - a) + 1).sum();
            if covered != u32::from(SLOTS) {
                return Some(format!("{addr}: CLUSTER SLOTS covers {covered}"));
            }
            if let Some(((a, b), (p, _))) = slots.iter().find(|(_, (_, r))| r.is_empty()) {
                // A replica is listed once its offset moved: write (and delete) a key of the
                // range on its primary.
                if let Some(key) = (0..1_000_000)
                    .map(|i| format!("harness:{i}"))
                    .find(|k| (*a..=*b).contains(&crate::cluster::key_slot(k.as_bytes())))
                {
                    let _ = try_query(p, &["SET", &key, "1"]);
                    let _ = try_query(p, &["DEL", &key]);
                }
                return Some(format!("{addr}: no replica listed for {p}"));
            }
            match &first {
                None => first = Some(slots),
                Some(s0) if *s0 != slots => return Some(format!("{addr} disagrees")),
                Some(_) => {}
            }
        }
        None
    }
}

//! The stateful half of Respite over TLS on both sides: transactions, blocking commands and
//! pub/sub from TLS clients through a mutual-TLS listener to TLS redis-servers (Debian's 7.0.15),
//! and units of Redis's own tcl suite run over TLS (runtest `--tls`, Tcl's `tls` package)
//! against a TLS redis-server and through Respite.
//!
//! Each session here needs an upstream connection of its own (a lease for MULTI and BLPOP, a
//! subscriber connection for SUBSCRIBE): these tests are what shows that those connections
//! are TLS too, since the backends' only address in the config is their TLS port.

use crate::blocking::blocked;
use crate::common;
use crate::redis_suite;
use crate::tls::{path, ssl_stats, wait_stat};

use std::path::Path;
use std::time::Duration;

use common::{show, wait_until};
use respite_tests::tls::{Certs, TlsClient, TlsRedis, client_config};
use respite_tests::{RawClient, RedisServer, Respite, free_port};

/// A config with a plain listener on `port` (the harness's readiness probe) and a mutual-TLS
/// listener on `tls_port`, both over one ketama cluster of the TLS `hosts` (hash tags on, as
/// `respite_tests::simple_config`), whose connections trust the test CA and present its client
/// certificate.
fn tls_config(certs: &Certs, port: u16, tls_port: u16, admin: u16, hosts: &[String]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let (ca, cert, key) = (
        path(&certs.ca_pem),
        path(&certs.server.cert),
        path(&certs.server.key),
    );
    let (client_cert, client_key) = (path(&certs.client.cert), path(&certs.client.key));
    let listener = |name: &str, port: u16, tls: &str| {
        format!(
            "[[listeners]]\nname = \"{name}\"\naddress = \"127.0.0.1:{port}\"\nstat_prefix = \
             \"{name}\"\nop_timeout = \"1s\"\nenable_hashtagging = true\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n{tls}"
        )
    };
    format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 2\ndrain_timeout = \
         \"5s\"\n{}{}[[clusters]]\nname = \"cache\"\ntype = \"static\"\nlb_policy = \
         \"ketama\"\nconnect_timeout = \"1s\"\nhosts = [{}]\n[clusters.tls]\ntrusted_ca = \
         \"{ca}\"\ncertificate_chain = \"{client_cert}\"\nprivate_key = \"{client_key}\"\n",
        listener("plain", port, ""),
        listener(
            "tls",
            tls_port,
            &format!(
                "[listeners.tls]\ncertificate_chain = \"{cert}\"\nprivate_key = \"{key}\"\n\
                 trusted_ca = \"{ca}\"\nrequire_client_certificate = true\n"
            ),
        ),
        hosts.join(", ")
    )
}

/// What the scenario needs of a client: plain ([`RawClient`]) or TLS ([`TlsClient`]).
trait Client {
    fn send(&mut self, args: &[&[u8]]);
    fn read_reply(&mut self) -> Vec<u8>;
    fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(args);
        self.read_reply()
    }
}

impl Client for RawClient {
    fn send(&mut self, args: &[&[u8]]) {
        RawClient::send(self, args)
    }
    fn read_reply(&mut self) -> Vec<u8> {
        RawClient::read_reply(self)
    }
}

impl Client for TlsClient {
    fn send(&mut self, args: &[&[u8]]) {
        TlsClient::send(self, args)
    }
    fn read_reply(&mut self) -> Vec<u8> {
        TlsClient::read_reply(self)
    }
}

/// Transactions, a WATCH conflict, BLPOP woken by another client and timing out, and pub/sub
/// with channel and pattern subscribers: every reply, in order, labelled by its step. `c` are
/// four clients of one server (direct or through Respite); `blocked` counts the clients
/// blocked at the backends.
fn scenario(c: &mut [Box<dyn Client>; 4], blocked: &dyn Fn() -> i64) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut note = |step: &str, reply: Vec<u8>| out.push((step.to_string(), reply));
    let [a, b, sub, psub] = c;

    // MULTI/EXEC, DISCARD and an aborted transaction, one command at a time.
    let transaction: &[&[&[u8]]] = &[
        &[b"MULTI"],
        &[b"SET", b"{t}a", b"1"],
        &[b"INCR", b"{t}a"],
        &[b"LPUSH", b"{t}l", b"x", b"y"],
        &[b"GET", b"{t}a"],
        &[b"EXEC"],
        &[b"MULTI"],
        &[b"INCR", b"{t}a"],
        &[b"DISCARD"],
        &[b"GET", b"{t}a"],
        &[b"MULTI"],
        &[b"SET", b"{t}b"],
        &[b"SET", b"{t}b", b"1"],
        &[b"EXEC"],
        &[b"EXISTS", b"{t}b"],
    ];
    for args in transaction {
        note(&show(&args.join(&b" "[..])), a.cmd(args));
    }
    // WATCH: another client's write in between makes EXEC return a null array.
    note("WATCH", a.cmd(&[b"WATCH", b"{w}k"]));
    note("SET by b", b.cmd(&[b"SET", b"{w}k", b"theirs"]));
    note("MULTI", a.cmd(&[b"MULTI"]));
    note("SET in MULTI", a.cmd(&[b"SET", b"{w}k", b"mine"]));
    note("EXEC after a watched write", a.cmd(&[b"EXEC"]));
    note("GET watched", a.cmd(&[b"GET", b"{w}k"]));

    // BLPOP: blocks at the backend until b pushes; then one that times out.
    a.send(&[b"BLPOP", b"{q}list", b"5"]);
    let was_blocked = wait_until(Duration::from_secs(5), || blocked() == 1);
    note("BLPOP blocked at a backend", vec![u8::from(was_blocked)]);
    note("RPUSH by b", b.cmd(&[b"RPUSH", b"{q}list", b"v"]));
    note("BLPOP woken", a.read_reply());
    note("BLPOP timing out", a.cmd(&[b"BLPOP", b"{q}empty", b"0.2"]));
    note("after BLPOP", a.cmd(&[b"PING"]));

    // Pub/sub: a channel subscriber and a pattern subscriber, messages published by b.
    note("SUBSCRIBE", sub.cmd(&[b"SUBSCRIBE", b"news", b"sports"]));
    note("SUBSCRIBE 2nd", sub.read_reply());
    note("PSUBSCRIBE", psub.cmd(&[b"PSUBSCRIBE", b"n*"]));
    note("PUBLISH news", b.cmd(&[b"PUBLISH", b"news", b"hello"]));
    note("message", sub.read_reply());
    note("pmessage", psub.read_reply());
    note("PUBLISH sports", b.cmd(&[b"PUBLISH", b"sports", b"goal"]));
    note("message 2", sub.read_reply());
    note("PING subscribed", sub.cmd(&[b"PING"]));
    note("UNSUBSCRIBE news", sub.cmd(&[b"UNSUBSCRIBE", b"news"]));
    note("PUBLISH after", b.cmd(&[b"PUBLISH", b"news", b"late"]));
    note("pmessage late", psub.read_reply());
    note("UNSUBSCRIBE all", sub.cmd(&[b"UNSUBSCRIBE"]));
    note("PUNSUBSCRIBE", psub.cmd(&[b"PUNSUBSCRIBE"]));
    note("GET after pub/sub", sub.cmd(&[b"GET", b"{t}a"]));
    out
}

/// Transactions, WATCH, BLPOP and pub/sub from rustls clients through a mutual-TLS listener over
/// two TLS redis-servers that require client certificates give, reply for reply, the bytes a
/// plain redis-server gives plain clients. The cluster's handshakes cover the shared, leased and
/// subscriber connections, and none failed.
#[test]
fn transactions_blocking_and_pubsub_over_tls() {
    let certs = Certs::generate();
    let servers: Vec<TlsRedis> = (0..2)
        .map(|_| TlsRedis::start(&certs, &certs.server, &[]))
        .collect();
    let hosts: Vec<String> = servers.iter().map(TlsRedis::tls_addr).collect();
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let respite = Respite::start(
        &tls_config(&certs, port, tls_port, admin, &hosts),
        port,
        admin,
    );
    let reference = RedisServer::start();

    let want = {
        let mut c: [Box<dyn Client>; 4] =
            std::array::from_fn(|_| -> Box<dyn Client> { Box::new(reference.raw()) });
        scenario(&mut c, &|| blocked(&reference))
    };
    let got = {
        let addr = format!("127.0.0.1:{tls_port}");
        let config = client_config(&certs.ca_pem, Some(&certs.client));
        let mut c: [Box<dyn Client>; 4] = std::array::from_fn(|_| -> Box<dyn Client> {
            Box::new(TlsClient::connect(&addr, "localhost", config.clone()))
        });
        let backends = || servers.iter().map(|s| blocked(&s.server)).sum::<i64>();
        scenario(&mut c, &backends)
    };
    assert_eq!(got.len(), want.len());
    for ((step, g), (_, w)) in got.iter().zip(&want) {
        assert_eq!(show(g), show(w), "{step}; log:\n{}", respite.log());
    }
    // The data went to the TLS servers (read on their plain ports).
    let on_servers: Vec<Vec<u8>> = servers
        .iter()
        .map(|s| s.plain().cmd(&[b"GET", b"{w}k"]))
        .collect();
    assert!(
        on_servers.iter().any(|r| r == b"$6\r\ntheirs\r\n"),
        "{on_servers:?}"
    );
    // Two backends, two workers: at least a shared connection, a lease and a subscriber
    // connection were opened, each with a handshake.
    let handshakes = respite.stat("cluster.cache.ssl.handshake");
    assert!(
        handshakes >= 3,
        "cluster.cache.ssl.handshake = {handshakes}"
    );
    wait_stat(&respite, "redis.tls.ssl.handshake", 4);
    for bad in ["redis.tls", "cluster.cache"] {
        assert_eq!(respite.stat(&format!("{bad}.ssl.connection_error")), 0);
    }
}

/// One worker over the TLS `host`, with `[[clusters.health_checks]]` every 100 ms when `checks`.
fn checked_config(certs: &Certs, port: u16, admin: u16, host: &str, checks: bool) -> String {
    let checks = if checks {
        "[[clusters.health_checks]]\ninterval = \"100ms\"\ntimeout = \"1s\"\n"
    } else {
        ""
    };
    format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 1\n[[listeners]]\nname = \
         \"plain\"\naddress = \"127.0.0.1:{port}\"\nstat_prefix = \"plain\"\nop_timeout = \"1s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n[[clusters]]\nname = \"c\"\n\
         hosts = [\"{host}\"]\n[clusters.tls]\ntrusted_ca = \"{}\"\ncertificate_chain = \"{}\"\n\
         private_key = \"{}\"\n{checks}",
        path(&certs.ca_pem),
        path(&certs.client.cert),
        path(&certs.client.key),
    )
}

/// Health checks connect with the cluster's TLS (the host's only address here is its TLS port,
/// and it requires a client certificate) and their handshakes are the cluster's: a Respite with
/// checks counts one more handshake than the same Respite without them, once the checks pass.
#[test]
fn health_checks_use_tls_and_count_handshakes() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, &certs.server, &[]);
    let settled = |checks: bool| {
        let (port, admin) = (free_port(), free_port());
        let respite = Respite::start(
            &checked_config(&certs, port, admin, &server.tls_addr(), checks),
            port,
            admin,
        );
        if checks {
            let passed = wait_until(Duration::from_secs(5), || {
                respite.stat("cluster.c.health_check.success") >= 1
            });
            assert!(passed, "health checks over TLS: {:?}", respite.stats());
        } else {
            std::thread::sleep(Duration::from_millis(500));
        }
        let n = respite.stat("cluster.c.ssl.handshake");
        assert_eq!(respite.stat("cluster.c.ssl.connection_error"), 0);
        (n, ssl_stats(&respite))
    };
    let (without, _) = settled(false);
    let (with, stats) = settled(true);
    assert_eq!(with, without + 1, "{stats:?}");
}

/// Units of Redis's tcl suite over TLS on both sides.
const TLS_UNITS: &[&str] = &[
    "unit/type/string",
    "unit/type/hash",
    "unit/multi",
    "unit/pubsub",
];

/// Writes the files runtest `--tls` reads (`ca.crt`, `client.crt`, `client.key`) into `dir`.
fn runtest_certificates(certs: &Certs, dir: &Path) {
    for (from, to) in [
        (&certs.ca_pem, "ca.crt"),
        (&certs.client.cert, "client.crt"),
        (&certs.client.key, "client.key"),
    ] {
        std::fs::copy(from, dir.join(to)).unwrap_or_else(|e| panic!("copy {to}: {e}"));
    }
}

/// Redis's tcl suite units [`TLS_UNITS`] over TLS (runtest `--tls`, presenting a client
/// certificate): directly against one TLS redis-server, then through Respite's mutual-TLS
/// listener over three TLS redis-servers that require client certificates. The tests that pass
/// directly but not through Respite must be exactly those in `tests/redis-suite/exceptions.txt`
/// (the plain runs' list: TLS changes nothing a test can see). `REDIS_SUITE_SKIP` skips it, as
/// it skips the plain runs.
#[test]
fn redis_suite_over_tls() {
    if std::env::var_os("REDIS_SUITE_SKIP").is_some() {
        println!("REDIS_SUITE_SKIP set: skipped");
        return;
    }
    let certs = Certs::generate();
    let runtest = tempfile::tempdir().expect("tempdir");
    runtest_certificates(&certs, runtest.path());
    let units: Vec<String> = TLS_UNITS.iter().map(|u| u.to_string()).collect();

    let direct = {
        let server = TlsRedis::start(&certs, &certs.server, &[]);
        redis_suite::run_suite(
            server.tls_port,
            &units,
            "direct-tls",
            None,
            Some(runtest.path()),
        )
    };
    let servers: Vec<TlsRedis> = (0..3)
        .map(|_| TlsRedis::start(&certs, &certs.server, &[]))
        .collect();
    let hosts: Vec<String> = servers.iter().map(TlsRedis::tls_addr).collect();
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let respite = Respite::start(
        &tls_config(&certs, port, tls_port, admin, &hosts),
        port,
        admin,
    );
    redis_suite::check_through_respite(
        "respite-tls",
        tls_port,
        &units,
        &direct,
        Some(runtest.path()),
        &|| respite.log(),
    );
    assert!(respite.stat("redis.tls.ssl.handshake") > 0);
    assert_eq!(respite.stat("redis.tls.ssl.connection_error"), 0);
    assert_eq!(respite.stat("cluster.cache.ssl.connection_error"), 0);
}

/// A Respite with a TLS listener `tls` (serving `certs.server`) over one plain redis-server:
/// Respite, the server (keep it) and the TLS port.
fn tls_listener_over_plain(certs: &Certs) -> (Respite, RedisServer, u16) {
    let server = RedisServer::start();
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let cfg = crate::tls::config(
        admin,
        &[
            crate::tls::listener("plain", port, "r", None),
            crate::tls::listener("tls", tls_port, "r", Some(crate::tls::serve(&certs.server))),
            crate::tls::cluster("r", &[server.addr()], None),
        ],
    );
    (Respite::start(&cfg, port, admin), server, tls_port)
}

/// A client that leaves Nagle on (no `TCP_NODELAY`, as a hand-rolled client or `openssl
/// s_client` does) gets its first reply over TLS 1.3 at once, not after the server's delayed
/// ACK of its Finished (40 ms on Linux, which held every new connection's first request before
/// Respite acked the handshake at once). Median of nine connections.
#[test]
fn first_request_after_a_tls13_handshake_is_not_delayed() {
    use std::io::{Read as _, Write as _};
    let certs = Certs::generate();
    let (respite, _server, tls_port) = tls_listener_over_plain(&certs);
    let config = client_config(&certs.ca_pem, None);
    let mut waits = Vec::new();
    for _ in 0..9 {
        let tcp = std::net::TcpStream::connect(("127.0.0.1", tls_port)).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut conn = rustls::ClientConnection::new(config.clone(), name).expect("client");
        let mut tcp = tcp;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).expect("handshake");
        }
        assert_eq!(
            conn.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let start = std::time::Instant::now();
        tls.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
        let mut reply = [0u8; 7];
        tls.read_exact(&mut reply).expect("read");
        waits.push(start.elapsed());
        assert_eq!(&reply, b"+PONG\r\n");
    }
    waits.sort();
    assert!(
        waits[4] < Duration::from_millis(20),
        "first request waits {waits:?}; log:\n{}",
        respite.log()
    );
}

/// Runs `openssl` with `args` in `dir`; panics with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Certificates made as Redis's `utils/gen-test-certs.sh` makes its `redis.crt`: `openssl x509
/// -req` with no extensions, an X.509 v1 certificate without subjectAltName, which redis-server
/// and redis-cli accept. Verified, rustls refuses it (v3 only), and the log says why; with
/// `insecure_skip_verify` it is accepted, as the option promises (only the unparsable
/// certificate's signature check is skipped).
#[test]
fn x509_v1_certificates_are_refused_verified_and_accepted_unverified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    openssl(d, &["genrsa", "-out", "ca.key", "2048"]);
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-sha256",
            "-key",
            "ca.key",
            "-days",
            "30",
            "-subj",
            "/O=Redis Test/CN=Certificate Authority",
            "-out",
            "ca.crt",
        ],
    );
    openssl(d, &["genrsa", "-out", "redis.key", "2048"]);
    openssl(
        d,
        &[
            "req",
            "-new",
            "-sha256",
            "-subj",
            "/O=Redis Test/CN=Generic-cert",
            "-key",
            "redis.key",
            "-out",
            "redis.csr",
        ],
    );
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-sha256",
            "-in",
            "redis.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            "redis.crt",
        ],
    );
    let p = |f: &str| d.join(f).display().to_string();
    let tls_port = free_port();
    let tls_port_s = tls_port.to_string();
    let (cert, key, ca) = (p("redis.crt"), p("redis.key"), p("ca.crt"));
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port_s,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    assert!(respite_tests::wait_for_port(
        tls_port,
        respite_tests::START_TIMEOUT
    ));
    assert_eq!(server.raw().cmd(&[b"SET", b"k", b"v1"]), b"+OK\r\n");
    let host = format!("127.0.0.1:{tls_port}");
    let through = |tls: &str| {
        let (port, admin) = (free_port(), free_port());
        let cfg = crate::tls::config(
            admin,
            &[
                crate::tls::listener("plain", port, "c", None),
                crate::tls::cluster("c", std::slice::from_ref(&host), Some(tls.to_string())),
            ],
        );
        let respite = Respite::start(&cfg, port, admin);
        let reply = respite.raw().cmd(&[b"GET", b"k"]);
        (respite, reply)
    };

    let (verified, reply) = through(&format!("trusted_ca = \"{ca}\"\n"));
    assert!(reply.starts_with(b"-"), "{}", show(&reply));
    let logged = wait_until(Duration::from_secs(5), || {
        verified.log().lines().any(|l| {
            l.contains("upstream TLS handshake failed") && l.contains("UnsupportedCertVersion")
        })
    });
    assert!(logged, "log:\n{}", verified.log());
    assert!(verified.stat("cluster.c.ssl.fail_verify_error") >= 1);

    let (unverified, reply) = through("insecure_skip_verify = true\n");
    assert_eq!(
        show(&reply),
        show(b"$2\r\nv1\r\n"),
        "log:\n{}",
        unverified.log()
    );
    assert!(unverified.stat("cluster.c.ssl.handshake") >= 1);
    assert_eq!(unverified.stat("cluster.c.ssl.connection_error"), 0);
}

/// A client that asks for a TLS 1.2 renegotiation (`openssl s_client`'s `R` command) is refused
/// by rustls with a warning alert. rustls logs each such event, at WARN, through `log`: any client
/// could flood Respite's log with them. None of those lines may show.
#[test]
fn refused_renegotiations_do_not_reach_the_log() {
    let certs = Certs::generate();
    let (respite, _server, tls_port) = tls_listener_over_plain(&certs);
    let connect = format!("127.0.0.1:{tls_port}");
    for _ in 0..3 {
        let mut child = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-tls1_2",
                "-connect",
                &connect,
                "-servername",
                "localhost",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("openssl s_client (Debian package openssl)");
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(b"R\n").expect("write R");
            std::thread::sleep(Duration::from_millis(300));
        }
        let out = child.wait_with_output().expect("s_client");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("RENEGOTIATING"), "{text}");
    }
    wait_stat(&respite, "redis.tls.ssl.handshake", 3);
    let log = respite.log();
    assert!(
        !log.contains("NoRenegotiation") && !log.contains("alert"),
        "rustls's own lines reached the log:\n{log}"
    );
}

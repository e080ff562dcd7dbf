//! TLS on both sides of Respite against real TLS `redis-server`s (Debian's 7.0.15, OpenSSL),
//! `redis-cli --tls`, redis-py and a rustls client: certificates made at test time
//! (`respite_tests::tls::Certs`).
//!
//! Every Respite here has a plain listener first: the harness's readiness probe connects to
//! the first listener without TLS, and a TLS listener counts a connection only once its
//! handshake is done (the probe would fail it and be counted as `ssl.connection_error`).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    assert_printed_ok, bulk, cmd, exchange, int, python_module, run_python, show, wait_until,
};
use respite_tests::tls::{CertFiles, Certs, TlsClient, TlsCluster, TlsRedis, client_config};
use respite_tests::{RawClient, RedisServer, Respite, free_port, respite_bin};

const OK: &[u8] = b"+OK\r\n";
const PONG: &[u8] = b"+PONG\r\n";
const NIL: &[u8] = b"$-1\r\n";

// ---- config pieces -----------------------------------------------------------------------

/// `[admin]` and `[runtime]` followed by `parts` (listeners and clusters).
pub(crate) fn config(admin: u16, parts: &[String]) -> String {
    format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 2\ndrain_timeout = \
         \"5s\"\n{}",
        parts.concat()
    )
}

/// A `[[listeners]]` named `name` (also its `stat_prefix`) on `port`, routing everything to
/// `cluster`; `tls` is the body of its `[listeners.tls]` table when given.
pub(crate) fn listener(name: &str, port: u16, cluster: &str, tls: Option<String>) -> String {
    let mut s = format!(
        "[[listeners]]\nname = \"{name}\"\naddress = \"127.0.0.1:{port}\"\nstat_prefix = \
         \"{name}\"\nop_timeout = \"2s\"\n[listeners.prefix_routes.catch_all_route]\ncluster = \
         \"{cluster}\"\n"
    );
    if let Some(t) = tls {
        s.push_str("[listeners.tls]\n");
        s.push_str(&t);
    }
    s
}

/// A static `[[clusters]]` named `name` over `hosts`; `tls` is the body of `[clusters.tls]`.
pub(crate) fn cluster(name: &str, hosts: &[String], tls: Option<String>) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let mut s = format!(
        "[[clusters]]\nname = \"{name}\"\nconnect_timeout = \"1s\"\nhosts = [{}]\n",
        hosts.join(", ")
    );
    if let Some(t) = tls {
        s.push_str("[clusters.tls]\n");
        s.push_str(&t);
    }
    s
}

pub(crate) fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `[listeners.tls]` body serving `cert`.
pub(crate) fn serve(cert: &CertFiles) -> String {
    format!(
        "certificate_chain = \"{}\"\nprivate_key = \"{}\"\n",
        path(&cert.cert),
        path(&cert.key)
    )
}

/// `[clusters.tls]` body trusting the CA, presenting `client` and sending `sni` when given.
pub(crate) fn upstream(certs: &Certs, client: Option<&CertFiles>, sni: Option<&str>) -> String {
    let mut s = format!("trusted_ca = \"{}\"\n", path(&certs.ca_pem));
    if let Some(c) = client {
        s.push_str(&format!(
            "certificate_chain = \"{}\"\nprivate_key = \"{}\"\n",
            path(&c.cert),
            path(&c.key)
        ));
    }
    if let Some(n) = sni {
        s.push_str(&format!("sni = \"{n}\"\n"));
    }
    s
}

/// Waits until `respite`'s stat `name` equals `want` (5 s); panics with every `ssl.` stat.
pub(crate) fn wait_stat(respite: &Respite, name: &str, want: i64) {
    let ok = wait_until(Duration::from_secs(5), || respite.stat(name) == want);
    assert!(
        ok,
        "{name} is {}, want {want}; ssl stats: {:?}\nlog:\n{}",
        respite.stat(name),
        ssl_stats(respite),
        respite.log()
    );
}

/// Every `*.ssl.*` stat of `respite`.
pub(crate) fn ssl_stats(respite: &Respite) -> Vec<(String, i64)> {
    respite
        .stats()
        .into_iter()
        .filter(|(k, _)| k.contains(".ssl."))
        .collect()
}

/// Log lines of `respite` that contain every one of `needles`.
fn log_lines(respite: &Respite, needles: &[&str]) -> Vec<String> {
    respite
        .log()
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_owned)
        .collect()
}

/// Waits until `respite` has logged `what` at least `n` times.
fn wait_log(respite: &Respite, what: &str, n: usize) {
    let ok = wait_until(Duration::from_secs(5), || {
        respite.log().matches(what).count() >= n
    });
    assert!(ok, "no {n}× {what:?} in the log:\n{}", respite.log());
}

/// Runs `redis-cli` with `args` (10 s timeout): (exit code, stdout + stderr).
fn redis_cli(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("timeout")
        .arg("10")
        .arg("redis-cli")
        .args(args)
        .output()
        .expect("run redis-cli");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Connects with `config` as `localhost` and sends PING: the error of the handshake or of the
/// first exchange (TLS 1.3 reports a refused client certificate after the client's side of the
/// handshake is done). Panics if the server answers.
fn refused(addr: &str, config: std::sync::Arc<rustls::ClientConfig>) -> String {
    match TlsClient::try_connect(addr, "localhost", config) {
        Err(e) => format!("handshake: {e}"),
        Ok(mut c) => match c.try_cmd(&[b"PING"]) {
            Err(e) => format!("first read: {e}"),
            Ok(r) => panic!("{addr} answered {} instead of refusing", show(&r)),
        },
    }
}

// ---- 1: TLS upstream, plain listener -----------------------------------------------------

/// A plain listener over a TLS redis-server that requires client certificates
/// (`tls-auth-clients yes`, the default): SET/GET, a 1 MiB value and 1000 pipelined commands
/// give the same bytes as a plain redis-server; the data is on the TLS server; the cluster's
/// handshakes are counted and none failed.
#[test]
fn tls_upstream_with_client_certificate() {
    let certs = Certs::generate();
    let redis = TlsRedis::start(&certs, &certs.server, &[]);
    let reference = RedisServer::start();
    let (port, admin) = (free_port(), free_port());
    let cfg = config(
        admin,
        &[
            listener("plain", port, "r", None),
            cluster(
                "r",
                &[redis.tls_addr()],
                Some(upstream(&certs, Some(&certs.client), None)),
            ),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let mut via = respite.raw();
    let mut direct = reference.raw();

    let big: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let singles: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"SET", b"k", b"v"]),
        cmd(&[b"GET", b"k"]),
        cmd(&[b"GET", b"missing"]),
        cmd(&[b"INCR", b"n"]),
        cmd(&[b"INCR", b"n"]),
        cmd(&[b"APPEND", b"k", b"\r\nbinary\0"]),
        cmd(&[b"GET", b"k"]),
        cmd(&[b"INCR", b"k"]),
        cmd(&[b"SET", b"big", &big]),
        cmd(&[b"GET", b"big"]),
        cmd(&[b"STRLEN", b"big"]),
    ];
    for c in &singles {
        let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
        let want = direct.cmd(&args);
        let got = via.cmd(&args);
        assert_eq!(show(&got), show(&want), "{}", show(args[0]));
    }
    assert_eq!(via.cmd(&[b"GET", b"big"]), bulk(&big));

    let pipeline: Vec<Vec<Vec<u8>>> = (0..1000)
        .map(|i| {
            let k = format!("p:{}", i % 97).into_bytes();
            match i % 4 {
                0 => cmd(&[b"SET", &k, format!("value-{i}").as_bytes()]),
                1 => cmd(&[b"GET", &k]),
                2 => cmd(&[b"INCR", format!("c:{}", i % 13).as_bytes()]),
                _ => cmd(&[b"EXISTS", &k, b"nope"]),
            }
        })
        .collect();
    let want = direct.pipeline(&pipeline);
    let got = via.pipeline(&pipeline);
    assert_eq!(got.len(), 1000);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(show(g), show(w), "pipelined command {i}");
    }

    // The data is on the TLS server (seen on its plain port).
    let mut on_server = redis.plain();
    assert_eq!(on_server.cmd(&[b"GET", b"big"]), bulk(&big));
    assert_eq!(on_server.cmd(&[b"GET", b"n"]), bulk(b"2"));
    assert_eq!(
        on_server.cmd(&[b"GET", b"c:0"]),
        direct.cmd(&[b"GET", b"c:0"])
    );
    assert!(
        respite.stat("cluster.r.ssl.handshake") >= 1,
        "{:?}",
        ssl_stats(&respite)
    );
    for bad in ["connection_error", "fail_verify_error", "fail_verify_san"] {
        assert_eq!(respite.stat(&format!("cluster.r.ssl.{bad}")), 0, "{bad}");
    }
}

// ---- 2: TLS listener + TLS upstream with redis-cli and redis-py ---------------------------

/// `redis-cli --tls --cacert` and redis-py (`ssl=True, ssl_ca_certs`) through a TLS listener
/// over a TLS upstream; a plain client on the TLS listener is closed and counted.
#[test]
fn redis_cli_and_redis_py_over_tls() {
    let certs = Certs::generate();
    let redis = TlsRedis::start(&certs, &certs.server, &[]);
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let cfg = config(
        admin,
        &[
            listener("plain", port, "r", None),
            listener("tls", tls_port, "r", Some(serve(&certs.server))),
            cluster(
                "r",
                &[redis.tls_addr()],
                Some(upstream(&certs, Some(&certs.client), None)),
            ),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let (ca, p) = (path(&certs.ca_pem), tls_port.to_string());
    let cli = |args: &[&str]| {
        let mut all = vec!["--tls", "--cacert", &ca, "-h", "127.0.0.1", "-p", &p];
        all.extend_from_slice(args);
        let (code, out) = redis_cli(&all);
        assert_eq!(code, Some(0), "redis-cli {args:?}: {out}");
        out.trim().to_string()
    };
    assert_eq!(cli(&["SET", "cli:k", "hello"]), "OK");
    assert_eq!(cli(&["GET", "cli:k"]), "hello");
    assert_eq!(cli(&["INCR", "cli:n"]), "1");
    assert_eq!(cli(&["INCR", "cli:n"]), "2");
    assert_eq!(redis.plain().cmd(&[b"GET", b"cli:k"]), bulk(b"hello"));

    python_module("redis", "redis");
    let script = r#"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), ssl=True, ssl_ca_certs=sys.argv[2],
                socket_timeout=5)
assert r.set("py:k", "v") is True
assert r.get("py:k") == b"v", r.get("py:k")
assert r.incr("py:n") == 1
p = r.pipeline(transaction=False)
for i in range(200):
    p.set("py:%d" % i, i)
assert p.execute() == [True] * 200
assert r.mget(["py:%d" % i for i in range(200)]) == [str(i).encode() for i in range(200)]
assert r.get("cli:k") == b"hello"
print("ok")
"#;
    let out = run_python(script, &[p.clone(), ca.clone()], 60);
    assert_printed_ok(&out, "redis-py over TLS");
    assert_eq!(redis.plain().cmd(&[b"GET", b"py:199"]), bulk(b"199"));
    // 4 redis-cli runs and one redis-py connection.
    wait_stat(&respite, "redis.tls.ssl.handshake", 5);
    assert_eq!(respite.stat("redis.tls.ssl.connection_error"), 0);

    // A plain RESP client on the TLS listener: answered with a TLS alert record (type 21) and
    // closed, counted, logged.
    let (got, closed) = exchange(
        &format!("127.0.0.1:{tls_port}"),
        b"*1\r\n$4\r\nPING\r\n",
        false,
        Duration::from_secs(5),
    );
    assert!(closed, "plain client kept open; got {}", show(&got));
    assert_eq!(got.first(), Some(&21), "not a TLS alert: {}", show(&got));
    wait_stat(&respite, "redis.tls.ssl.connection_error", 1);
    wait_log(
        &respite,
        "downstream TLS handshake failed; closing the connection",
        1,
    );
    assert_eq!(respite.stat("redis.tls.ssl.handshake"), 5);
}

// ---- 3: mutual TLS on the listener --------------------------------------------------------

/// `require_client_certificate`: the CA's client is served; no certificate and another CA's
/// certificate are refused at the handshake and counted (`fail_verify_no_cert`,
/// `fail_verify_error`). With `trusted_ca` alone, a client without a certificate is served and
/// counted in `no_certificate`, and a bad certificate is still refused.
#[test]
fn mutual_tls_listener() {
    let certs = Certs::generate();
    let redis = RedisServer::start();
    let (port, mtls, optional, admin) = (free_port(), free_port(), free_port(), free_port());
    let ca = path(&certs.ca_pem);
    let cfg = config(
        admin,
        &[
            listener("plain", port, "r", None),
            listener(
                "mtls",
                mtls,
                "r",
                Some(format!(
                    "{}trusted_ca = \"{ca}\"\nrequire_client_certificate = true\n",
                    serve(&certs.server)
                )),
            ),
            listener(
                "optional",
                optional,
                "r",
                Some(format!("{}trusted_ca = \"{ca}\"\n", serve(&certs.server))),
            ),
            cluster("r", &[redis.addr()], None),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let addr = format!("127.0.0.1:{mtls}");
    let with_cert = client_config(&certs.ca_pem, Some(&certs.client));
    let no_cert = client_config(&certs.ca_pem, None);
    let other_ca = client_config(&certs.ca_pem, Some(&certs.other_client));

    let mut good = TlsClient::connect(&addr, "localhost", with_cert.clone());
    assert_eq!(good.cmd(&[b"PING"]), PONG);
    assert_eq!(good.cmd(&[b"SET", b"m", b"1"]), OK);
    assert_eq!(good.cmd(&[b"GET", b"m"]), bulk(b"1"));
    wait_stat(&respite, "redis.mtls.ssl.handshake", 1);

    let why = refused(&addr, no_cert.clone());
    assert!(
        why.to_lowercase().contains("certificate"),
        "no certificate: {why}"
    );
    wait_stat(&respite, "redis.mtls.ssl.fail_verify_no_cert", 1);
    wait_stat(&respite, "redis.mtls.ssl.connection_error", 1);

    let why = refused(&addr, other_ca.clone());
    assert!(!why.is_empty(), "other CA: {why}");
    wait_stat(&respite, "redis.mtls.ssl.fail_verify_error", 1);
    wait_stat(&respite, "redis.mtls.ssl.connection_error", 2);
    assert_eq!(respite.stat("redis.mtls.ssl.fail_verify_no_cert"), 1);
    assert_eq!(respite.stat("redis.mtls.ssl.handshake"), 1);
    // The first refusal is logged with its reason (the next, within 10 s, only counted).
    let lines = log_lines(
        &respite,
        &[
            "WARN downstream TLS handshake failed; closing the connection",
            "listener=mtls",
            "peer=127.0.0.1:",
            "error=peer sent no certificates",
        ],
    );
    assert_eq!(lines.len(), 1, "log:\n{}", respite.log());

    // redis-cli: refused without --cert, served with it.
    let p = mtls.to_string();
    let (code, out) = redis_cli(&["--tls", "--cacert", &ca, "-p", &p, "PING"]);
    assert!(
        code != Some(0) || !out.contains("PONG"),
        "redis-cli without a certificate: {code:?} {out}"
    );
    wait_stat(&respite, "redis.mtls.ssl.fail_verify_no_cert", 2);
    let (cert, key) = (path(&certs.client.cert), path(&certs.client.key));
    let (code, out) = redis_cli(&[
        "--tls", "--cacert", &ca, "--cert", &cert, "--key", &key, "-p", &p, "GET", "m",
    ]);
    assert_eq!(
        (code, out.trim()),
        (Some(0), "1"),
        "redis-cli with a certificate"
    );
    wait_stat(&respite, "redis.mtls.ssl.handshake", 2);
    // The first client is still served.
    assert_eq!(good.cmd(&[b"INCR", b"m"]), int(2));

    // trusted_ca without require_client_certificate.
    let addr = format!("127.0.0.1:{optional}");
    let mut anon = TlsClient::connect(&addr, "localhost", no_cert);
    assert_eq!(anon.cmd(&[b"GET", b"m"]), bulk(b"2"));
    let mut named = TlsClient::connect(&addr, "localhost", with_cert);
    assert_eq!(named.cmd(&[b"GET", b"m"]), bulk(b"2"));
    wait_stat(&respite, "redis.optional.ssl.handshake", 2);
    assert_eq!(respite.stat("redis.optional.ssl.no_certificate"), 1);
    let why = refused(&addr, other_ca);
    assert!(!why.is_empty());
    wait_stat(&respite, "redis.optional.ssl.fail_verify_error", 1);
    assert_eq!(respite.stat("redis.optional.ssl.fail_verify_no_cert"), 0);
}

// ---- 4: upstream certificate verification -------------------------------------------------

/// Respite's replies for a host it cannot connect to: `-upstream failure` when the request
/// waited on the connection attempt that failed, `-no upstream host` when it came while the
/// host was between attempts (as for a refused TCP connect: `admin.rs`, `cluster.rs`).
fn is_unreachable(reply: &[u8]) -> bool {
    reply == b"-no upstream host\r\n" || reply == b"-upstream failure\r\n"
}

/// A Respite with a plain listener over cluster `c` = the TLS host `host`, trusting the CA,
/// presenting `client`, sending `sni`; and the reply to `GET k` through it.
fn through(
    certs: &Certs,
    host: &str,
    client: Option<&CertFiles>,
    sni: Option<&str>,
) -> (Respite, Vec<u8>) {
    let (port, admin) = (free_port(), free_port());
    let cfg = config(
        admin,
        &[
            listener("plain", port, "c", None),
            cluster("c", &[host.to_string()], Some(upstream(certs, client, sni))),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let reply = respite.raw().cmd(&[b"GET", b"k"]);
    (respite, reply)
}

/// Upstream hosts whose certificate Respite must refuse: expired; for another name; for DNS
/// `localhost` only while the host is addressed (and verified) by IP. Each: the client gets
/// an unreachable-host error, the WARN line names the host and rustls's reason, `cluster.c.ssl.*`
/// counts it and no handshake completed. One Respite per case: the WARN line is rate-limited
/// per cluster and worker (one per 10 s). Then `sni = "localhost"` verifies the
/// localhost-only certificate; and a good host that requires a client certificate
/// (`tls-auth-clients yes`) refuses Respite without one.
#[test]
fn upstream_certificate_verification() {
    let certs = Certs::generate();
    let expired = TlsRedis::start(&certs, &certs.expired, &[]);
    let wrong = TlsRedis::start(&certs, &certs.wrong_host, &[]);
    let localhost = TlsRedis::start(&certs, &certs.localhost_only, &[]);
    let good = TlsRedis::start(&certs, &certs.server, &[]);
    let client = Some(&certs.client);
    let refusals = [
        (
            "expired",
            &expired,
            "fail_verify_error",
            "certificate expired",
        ),
        (
            "wrong host",
            &wrong,
            "fail_verify_san",
            "certificate not valid for name",
        ),
        (
            "localhost-only by IP",
            &localhost,
            "fail_verify_san",
            "certificate not valid for name",
        ),
    ];
    for (what, server, stat, reason) in refusals {
        let (respite, reply) = through(&certs, &server.tls_addr(), client, None);
        assert!(
            is_unreachable(&reply),
            "{what}: {}; log:\n{}",
            show(&reply),
            respite.log()
        );
        wait_stat_at_least(&respite, &format!("cluster.c.ssl.{stat}"), 1);
        // Every failed handshake is this kind (one snapshot; retries go on meanwhile, and a
        // snapshot can fall between a failure's two increments: polled).
        let kind = format!("cluster.c.ssl.{stat}");
        let counts = || {
            let st = respite.stats();
            let get = |k: &str| st.get(k).copied().unwrap_or(0);
            (get("cluster.c.ssl.connection_error"), get(&kind))
        };
        let same = wait_until(Duration::from_secs(5), || {
            let (all, this) = counts();
            all >= 1 && all == this
        });
        assert!(same, "{what}: (connection_error, {stat}) = {:?}", counts());
        assert_eq!(respite.stat("cluster.c.ssl.handshake"), 0, "{what}");
        let lines = log_lines(
            &respite,
            &[
                "WARN upstream TLS handshake failed",
                "cluster=c",
                &format!("upstream={}", server.tls_addr()),
                "server_name=127.0.0.1",
                &format!("error=invalid peer certificate: {reason}"),
            ],
        );
        assert!(
            !lines.is_empty(),
            "{what}: no handshake failure line naming {reason:?}; log:\n{}",
            respite.log()
        );
        assert_eq!(
            server.plain().cmd(&[b"INFO", b"keyspace"]),
            bulk(b"# Keyspace\r\n")
        );
    }

    // sni = "localhost": the same localhost-only host verifies.
    let (respite, reply) = through(&certs, &localhost.tls_addr(), client, Some("localhost"));
    assert_eq!(reply, NIL);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"by-sni"]), OK);
    assert_eq!(localhost.plain().cmd(&[b"GET", b"k"]), bulk(b"by-sni"));
    assert!(respite.stat("cluster.c.ssl.handshake") >= 1);
    assert_eq!(respite.stat("cluster.c.ssl.connection_error"), 0);
    assert!(log_lines(&respite, &["upstream TLS handshake failed"]).is_empty());
    drop(respite);

    // No client certificate for a Redis that requires one. With TLS 1.3 the client's side of
    // the handshake completes and Redis's alert comes on the first read.
    let (respite, reply) = through(&certs, &good.tls_addr(), None, None);
    assert!(
        is_unreachable(&reply),
        "{}; log:\n{}",
        show(&reply),
        respite.log()
    );
    // Redis's reason is logged with the host.
    let needles = [
        "WARN upstream".to_string(),
        "cluster=c".to_string(),
        format!("upstream={}", good.tls_addr()),
        "error=received fatal alert: CertificateRequired".to_string(),
    ];
    let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
    let logged = wait_until(Duration::from_secs(5), || {
        !log_lines(&respite, &needles).is_empty()
    });
    assert!(logged, "log:\n{}", respite.log());
    // Counted as the failed handshake it is, though rustls had finished its side.
    wait_stat_at_least(&respite, "cluster.c.ssl.connection_error", 1);
    assert_eq!(good.plain().cmd(&[b"DBSIZE"]), int(0));
}

/// Waits until `respite`'s stat `name` is at least `want` (5 s).
fn wait_stat_at_least(respite: &Respite, name: &str, want: i64) {
    let ok = wait_until(Duration::from_secs(5), || respite.stat(name) >= want);
    assert!(
        ok,
        "{name} is {}, want ≥ {want}; ssl stats: {:?}\nlog:\n{}",
        respite.stat(name),
        ssl_stats(respite),
        respite.log()
    );
}

// ---- 5: certificate rotation --------------------------------------------------------------

/// The listener's certificate file is rewritten in place (same TOML) and SIGHUP sent: a client
/// connected before keeps its connection and is answered; a new client gets the new
/// certificate.
#[test]
fn certificate_rotation_by_reload() {
    let certs = Certs::generate();
    let redis = TlsRedis::start(&certs, &certs.server, &[]);
    let first = certs.issue("rotated", "rotation-1", 100);
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let cfg = config(
        admin,
        &[
            listener("plain", port, "r", None),
            listener("tls", tls_port, "r", Some(serve(&first))),
            cluster(
                "r",
                &[redis.tls_addr()],
                Some(upstream(&certs, Some(&certs.client), None)),
            ),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let addr = format!("127.0.0.1:{tls_port}");
    let tls = client_config(&certs.ca_pem, None);
    let mut before = TlsClient::connect(&addr, "localhost", tls.clone());
    assert_eq!(before.peer_certificates().first(), Some(&first.der));
    assert_eq!(before.cmd(&[b"SET", b"rot", b"before"]), OK);

    let second = certs.issue("rotated", "rotation-2", 200);
    assert_eq!(second.cert, first.cert);
    assert_ne!(second.der, first.der);
    respite.signal("HUP");
    wait_log(&respite, "config reloaded", 1);

    // The old connection goes on.
    assert_eq!(before.cmd(&[b"GET", b"rot"]), bulk(b"before"));
    assert_eq!(before.cmd(&[b"SET", b"rot", b"after"]), OK);
    assert_eq!(before.cmd(&[b"INCR", b"rot:n"]), int(1));
    assert_eq!(before.peer_certificates().first(), Some(&first.der));
    // A new connection gets the new certificate.
    let mut after = TlsClient::connect(&addr, "localhost", tls);
    assert_eq!(
        after.peer_certificates().first(),
        Some(&second.der),
        "the new client got the old certificate (serial {} expected)",
        second.serial
    );
    assert_eq!(after.cmd(&[b"GET", b"rot"]), bulk(b"after"));
    assert_eq!(before.cmd(&[b"INCR", b"rot:n"]), int(2));
    assert_eq!(redis.plain().cmd(&[b"GET", b"rot:n"]), bulk(b"2"));
    assert_eq!(respite.stat("redis.tls.ssl.handshake"), 2);
}

// ---- 6: bad certificate files -------------------------------------------------------------

/// Garbage, a missing file and a key that does not match its certificate: `respite
/// check-config` exits 2 naming the file and the key; the same files given to a running Respite
/// by a reload are rejected and the running certificate keeps serving.
#[test]
fn bad_certificate_files() {
    let certs = Certs::generate();
    let redis = RedisServer::start();
    let dir = certs.dir();
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let missing = dir.join("missing.pem");
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let with_tls = |tls: String, cluster_tls: Option<String>| {
        config(
            admin,
            &[
                listener("plain", port, "r", None),
                listener("tls", tls_port, "r", Some(tls)),
                cluster("r", &[redis.addr()], cluster_tls),
            ],
        )
    };
    let chain_key = |chain: &Path, key: &Path| {
        format!(
            "certificate_chain = \"{}\"\nprivate_key = \"{}\"\n",
            path(chain),
            path(key)
        )
    };
    let cases: Vec<(&str, String, &Path, &str)> = vec![
        (
            "garbage certificate",
            with_tls(chain_key(&garbage, &certs.server.key), None),
            &garbage,
            "certificate_chain",
        ),
        (
            "missing certificate",
            with_tls(chain_key(&missing, &certs.server.key), None),
            &missing,
            "certificate_chain",
        ),
        (
            "garbage key",
            with_tls(chain_key(&certs.server.cert, &garbage), None),
            &garbage,
            "private_key",
        ),
        (
            "key of another certificate",
            with_tls(chain_key(&certs.server.cert, &certs.client.key), None),
            &certs.server.cert,
            "private_key",
        ),
        (
            "garbage upstream CA",
            with_tls(
                serve(&certs.server),
                Some(format!("trusted_ca = \"{}\"\n", path(&garbage))),
            ),
            &garbage,
            "trusted_ca",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (what, text, file, key)) in cases.iter().enumerate() {
        let toml = dir.join(format!("bad{i}.toml"));
        std::fs::write(&toml, text).unwrap();
        let out = Command::new(respite_bin())
            .arg("check-config")
            .arg(&toml)
            .output()
            .expect("run respite check-config");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2)
            || !stderr.contains(&path(file))
            || !stderr.contains(&format!("tls.{key}"))
        {
            failures.push(format!(
                "{what}: want exit 2 naming {} and tls.{key}; got {:?}: {stderr}",
                path(file),
                out.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A running Respite with a certificate file that is then broken in place.
    let live = certs.issue("live", "live-1", 300);
    let good_cfg = with_tls(serve(&live), None);
    let respite = Respite::start(&good_cfg, port, admin);
    let addr = format!("127.0.0.1:{tls_port}");
    let tls = client_config(&certs.ca_pem, None);
    let mut before = TlsClient::connect(&addr, "localhost", tls.clone());
    assert_eq!(before.peer_certificates().first(), Some(&live.der));
    assert_eq!(before.cmd(&[b"SET", b"b", b"1"]), OK);
    let check_still_serving = |n: usize, before: &mut TlsClient| {
        let mut c = TlsClient::connect(&addr, "localhost", tls.clone());
        assert_eq!(
            c.peer_certificates().first(),
            Some(&live.der),
            "after bad reload {n}"
        );
        assert_eq!(c.cmd(&[b"GET", b"b"]), bulk(b"1"));
        assert_eq!(before.cmd(&[b"GET", b"b"]), bulk(b"1"));
    };

    let live_text = std::fs::read(&live.cert).unwrap();
    std::fs::write(&live.cert, "garbage\n").unwrap();
    respite.signal("HUP");
    wait_log(&respite, "config reload rejected", 1);
    let rejected = log_lines(&respite, &["config reload rejected", &path(&live.cert)]);
    assert_eq!(rejected.len(), 1, "log:\n{}", respite.log());
    check_still_serving(1, &mut before);
    std::fs::write(&live.cert, &live_text).unwrap();

    // Files named in a new config: missing, then a key that does not match.
    respite.reload(&with_tls(chain_key(&missing, &live.key), None));
    wait_log(&respite, "config reload rejected", 2);
    assert_eq!(
        log_lines(&respite, &["config reload rejected", &path(&missing)]).len(),
        1
    );
    check_still_serving(2, &mut before);
    respite.reload(&with_tls(chain_key(&live.cert, &certs.client.key), None));
    wait_log(&respite, "config reload rejected", 3);
    check_still_serving(3, &mut before);
    assert_eq!(respite.log().matches("config reloaded").count(), 0);

    // A good file again: accepted, served to new clients.
    let next = certs.issue("live", "live-2", 301);
    respite.reload(&good_cfg);
    wait_log(&respite, "config reloaded", 1);
    let mut c = TlsClient::connect(&addr, "localhost", tls);
    assert_eq!(c.peer_certificates().first(), Some(&next.der));
    assert_eq!(c.cmd(&[b"GET", b"b"]), bulk(b"1"));
}

// ---- 7: TLS Redis Cluster -----------------------------------------------------------------

/// A key in `slot`, found by trying `slot:<slot>:<n>`.
fn key_in_slot(slot: u16) -> Vec<u8> {
    (0..)
        .map(|n| format!("{{{n}}}:{slot}").into_bytes())
        .find(|k| respite_tests::cluster::key_slot(k) == slot)
        .unwrap()
}

/// One key per slot, 16384 in all.
fn keys_on_every_slot() -> Vec<Vec<u8>> {
    let mut keys: Vec<Option<Vec<u8>>> = vec![None; 16384];
    let mut left = 16384;
    for n in 0u32.. {
        let k = format!("{{t{n}}}").into_bytes();
        let s = respite_tests::cluster::key_slot(&k) as usize;
        if keys[s].is_none() {
            keys[s] = Some(k);
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    keys.into_iter().map(Option::unwrap).collect()
}

/// A six-node Redis Cluster with TLS on clients, bus and replication behind Respite: seeds are
/// the TLS ports, nodes are discovered (by IP) over TLS; a key on every slot is set through the
/// plain listener and read back through a TLS listener; a slot moved with `redis-cli --cluster
/// reshard` is followed (MOVED to the new owner's TLS port).
#[test]
fn tls_redis_cluster() {
    let certs = Certs::generate();
    let rc = TlsCluster::start(&certs);
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let seeds: Vec<String> = rc.tls_nodes().iter().map(|s| format!("\"{s}\"")).collect();
    let cfg = format!(
        "{}{}{}[[clusters]]\nname = \"rc\"\ntype = \"redis_cluster\"\nhosts = [{}]\n\
         connect_timeout = \"1s\"\ncluster_refresh_rate = \"1s\"\ncluster_refresh_timeout = \
         \"1s\"\nredirect_refresh_interval = \"200ms\"\n[clusters.tls]\n{}",
        config(admin, &[]),
        listener("plain", port, "rc", None),
        listener("tls", tls_port, "rc", Some(serve(&certs.server))),
        seeds.join(", "),
        upstream(&certs, Some(&certs.client), None),
    );
    let respite = Respite::start(&cfg, port, admin);
    let keys = keys_on_every_slot();
    let mut plain = respite.raw();
    for (n, chunk) in keys.chunks(2048).enumerate() {
        let sets: Vec<Vec<Vec<u8>>> = chunk.iter().map(|k| cmd(&[b"SET", k, k])).collect();
        let replies = plain.pipeline(&sets);
        let bad: Vec<String> = replies
            .iter()
            .zip(chunk)
            .filter(|(r, _)| r.as_slice() != OK)
            .map(|(r, k)| format!("{} → {}", show(k), show(r)))
            .take(5)
            .collect();
        assert!(
            bad.is_empty(),
            "SET batch {n}: {bad:?}\nlog:\n{}",
            respite.log()
        );
    }
    assert_eq!(rc.dbsize(), 16384);
    let mut tls = TlsClient::connect(
        &format!("127.0.0.1:{tls_port}"),
        "localhost",
        client_config(&certs.ca_pem, None),
    );
    for chunk in keys.chunks(2048) {
        let gets: Vec<Vec<Vec<u8>>> = chunk.iter().map(|k| cmd(&[b"GET", k])).collect();
        for (r, k) in tls.pipeline(&gets).iter().zip(chunk) {
            assert_eq!(show(r), show(&bulk(k)));
        }
    }
    // Every primary was reached over TLS; nothing failed.
    assert!(
        respite.stat("cluster.rc.ssl.handshake") >= 3,
        "{:?}",
        ssl_stats(&respite)
    );
    assert_eq!(respite.stat("cluster.rc.ssl.connection_error"), 0);
    // Spot checks on the owners themselves.
    for slot in [0u16, 5461, 5462, 10922, 10923, 16383] {
        let k = &keys[slot as usize];
        let owner = rc.slot_owner(slot);
        assert_eq!(
            RawClient::connect(&owner).cmd(&[b"GET", k]),
            bulk(k),
            "slot {slot}"
        );
    }

    // Move the lowest slot of the first primary to another; Respite follows.
    let primaries = rc.primaries();
    let (from, to) = (&primaries[0], &primaries[1]);
    let moved_slot = (0..16384u16).find(|s| rc.slot_owner(*s) == *from).unwrap();
    let extra = key_in_slot(moved_slot);
    assert_eq!(plain.cmd(&[b"SET", &extra, b"extra"]), OK);
    rc.reshard(&certs, from, to, 1);
    rc.wait_stable(Duration::from_secs(30));
    assert_eq!(rc.slot_owner(moved_slot), *to);
    let k = &keys[moved_slot as usize];
    assert_eq!(tls.cmd(&[b"GET", k]), bulk(k), "after the reshard");
    assert_eq!(tls.cmd(&[b"GET", &extra]), bulk(b"extra"));
    assert_eq!(plain.cmd(&[b"SET", k, b"new"]), OK);
    assert_eq!(RawClient::connect(to).cmd(&[b"GET", k]), bulk(b"new"));
    assert_eq!(respite.stat("cluster.rc.ssl.connection_error"), 0);

    // With no traffic, the workers open nothing new, while discovery connects to a node every
    // second (cluster_refresh_rate): its handshakes are the cluster's too.
    let before = respite.stat("cluster.rc.ssl.handshake");
    let grew = wait_until(Duration::from_secs(10), || {
        respite.stat("cluster.rc.ssl.handshake") >= before + 2
    });
    assert!(
        grew,
        "discovery's handshakes not counted: {:?}",
        ssl_stats(&respite)
    );
    assert_eq!(respite.stat("cluster.rc.ssl.connection_error"), 0);
}

// ---- 8: byte-level over TLS on both sides -------------------------------------------------

/// A mixed workload: `n` commands over 150 keys of five types, values 0..600 bytes with CR, LF
/// and NUL in them, errors included (wrong type, not an integer), from a fixed seed.
fn mixed_commands(n: usize, seed: u64) -> Vec<Vec<Vec<u8>>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|i| {
            let k = format!("mix:{}", rng.u32(0..150)).into_bytes();
            let len = rng.usize(0..600);
            let v: Vec<u8> = (0..len)
                .map(|j| match (i + j) % 50 {
                    0 => b'\r',
                    1 => b'\n',
                    2 => 0,
                    _ => rng.u8(..),
                })
                .collect();
            let f = format!("f{}", rng.u32(0..8)).into_bytes();
            match rng.u32(0..16) {
                0 | 1 => cmd(&[b"SET", &k, &v]),
                2 | 3 => cmd(&[b"GET", &k]),
                4 => cmd(&[b"INCR", &k]),
                5 => cmd(&[b"APPEND", &k, &v]),
                6 => cmd(&[b"DEL", &k]),
                // At most 64 bytes: the hash stays a listpack, whose HGETALL order is the
                // insertion order (a hashtable's depends on the process's hash seed).
                7 => cmd(&[b"HSET", &k, &f, &v[..len.min(64)]]),
                8 => cmd(&[b"HGETALL", &k]),
                9 => cmd(&[b"RPUSH", &k, &v, &f]),
                10 => cmd(&[b"LRANGE", &k, b"0", b"5"]),
                11 => cmd(&[b"SADD", &k, &f]),
                12 => cmd(&[b"SCARD", &k]),
                13 => cmd(&[b"ZADD", &k, format!("{len}").as_bytes(), &f]),
                14 => cmd(&[b"ZRANGE", &k, b"0", b"-1", b"WITHSCORES"]),
                _ => cmd(&[b"EXISTS", &k, b"mix:0", b"mix:1"]),
            }
        })
        .collect()
}

/// The rustls client through a TLS listener over a TLS upstream: 10 000 mixed commands in one
/// write answer byte for byte as a plain redis-server answers them; 8 MiB values go both ways.
#[test]
fn byte_level_over_tls_both_sides() {
    let certs = Certs::generate();
    let redis = TlsRedis::start(&certs, &certs.server, &[]);
    let reference = RedisServer::start();
    let (port, tls_port, admin) = (free_port(), free_port(), free_port());
    let cfg = config(
        admin,
        &[
            listener("plain", port, "r", None),
            listener("tls", tls_port, "r", Some(serve(&certs.server))),
            cluster(
                "r",
                &[redis.tls_addr()],
                Some(upstream(&certs, Some(&certs.client), None)),
            ),
        ],
    );
    let respite = Respite::start(&cfg, port, admin);
    let mut tls = TlsClient::connect(
        &format!("127.0.0.1:{tls_port}"),
        "127.0.0.1",
        client_config(&certs.ca_pem, None),
    );
    let mut direct = reference.raw();

    let commands = mixed_commands(10_000, 7);
    let want = direct.pipeline(&commands);
    let got = tls.pipeline(&commands);
    let errors = want.iter().filter(|r| r.starts_with(b"-")).count();
    assert!(errors > 100, "the workload has {errors} error replies");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(show(g), show(w), "command {i}: {}", show(&commands[i][0]));
    }
    // Same data on both servers.
    for i in 0..150 {
        let k = format!("mix:{i}").into_bytes();
        let mut on = redis.plain();
        assert_eq!(on.cmd(&[b"TYPE", &k]), direct.cmd(&[b"TYPE", &k]), "{i}");
    }

    let big: Vec<u8> = (0..8 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    assert_eq!(tls.cmd(&[b"SET", b"big", &big]), OK);
    assert_eq!(tls.cmd(&[b"STRLEN", b"big"]), int(8 << 20));
    assert!(
        tls.cmd(&[b"GET", b"big"]) == bulk(&big),
        "8 MiB GET differs"
    );
    assert!(
        redis.plain().cmd(&[b"GET", b"big"]) == bulk(&big),
        "8 MiB on the server differs"
    );
    // A pipeline with large values in both directions.
    let mid: Vec<u8> = big[..1 << 20].to_vec();
    let mut batch = Vec::new();
    for i in 0..4 {
        batch.push(cmd(&[b"SET", format!("mid:{i}").as_bytes(), &mid]));
        batch.push(cmd(&[b"GET", format!("mid:{i}").as_bytes()]));
    }
    let replies = tls.pipeline(&batch);
    for (i, r) in replies.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(r, OK);
        } else {
            assert!(*r == bulk(&mid), "GET mid:{} differs", i / 2);
        }
    }
    assert!(respite.stat("cluster.r.ssl.handshake") >= 1);
    assert_eq!(respite.stat("redis.tls.ssl.handshake"), 1);
    assert_eq!(respite.stat("redis.tls.ssl.connection_error"), 0);
}

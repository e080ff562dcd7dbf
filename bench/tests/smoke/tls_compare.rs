//! Smoke tests of TLS in the load generator: `respite-bench compare --tls` (redis-server's own
//! TLS against Respite's, and the handshake loop) and `respite-bench run --tls-ca` against a
//! redis-server TLS port. Need `redis-server` (built with TLS, as Debian's is) and the `respite`
//! binary next to `respite-bench`.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const TARGETS: [&str; 5] = [
    "direct",
    "direct-tls",
    "respite",
    "respite-tls",
    "respite-tls-down",
];

#[test]
fn tls_compare_measures_every_target_and_handshakes() {
    let (bench, respite) = common::binaries(&["redis-server"]);
    let out = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let status = Command::new(&bench)
        .args([
            "compare",
            "--tls",
            "--duration",
            "300ms",
            "--warmup",
            "50ms",
            "--reps",
            "1",
            "--cases",
            "get-p1,set-p16,handshake",
            "--handshake-clients",
            "4",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench compare --tls");
    let took = started.elapsed();
    let json =
        std::fs::read_to_string(out.path().join("latest-tls.json")).expect("latest-tls.json");
    let v: Value = serde_json::from_str(&json).expect("valid JSON");
    let md = std::fs::read_to_string(out.path().join("latest-tls.md")).expect("Markdown");
    assert!(
        status.success(),
        "compare --tls failed: {status}; {:?}",
        v["failures"]
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");

    let medians = v["medians"].as_array().expect("medians");
    for case in ["get-p1", "set-p16"] {
        for target in TARGETS {
            let m = &medians
                .iter()
                .find(|m| m["case"] == case && m["target"] == target)
                .unwrap_or_else(|| panic!("no {case} {target} median: {:?}", v["failures"]))["median"];
            assert!(m["rps"].as_f64() > Some(0.0), "{case} {target}: {m}");
            assert_eq!(m["errors"], 0, "{case} {target}: {m}");
            assert!(
                m["redis_cpu_us_per_req"].as_f64().is_some(),
                "{case} {target}: {m}"
            );
            assert_eq!(
                m["proxy_cpu_us_per_req"].as_f64().is_some(),
                target.starts_with("respite"),
                "{case} {target}: {m}"
            );
        }
    }
    // GET P1 ran over prefilled keys, through TLS too.
    let runs = v["runs"].as_array().expect("runs");
    for target in ["direct-tls", "respite-tls"] {
        let r = runs
            .iter()
            .find(|r| r["case"] == "get-p1" && r["target"] == target)
            .expect("a GET P1 run");
        assert_eq!(r["report"]["nil_replies"], 0, "{target}");
    }
    let costs = v["costs"].as_array().expect("costs");
    assert_eq!(costs.len(), 2);
    for c in costs {
        for k in [
            "redis_added_us",
            "respite_added_us",
            "respite_down_added_us",
            "ratio",
        ] {
            assert!(c[k].as_f64().is_some(), "{k}: {c}");
        }
    }

    let hs = v["handshake_medians"]
        .as_array()
        .expect("handshake medians");
    assert_eq!(hs.len(), 4, "{hs:?}; {:?}", v["failures"]);
    for h in hs {
        assert!(h["per_s"].as_f64() > Some(0.0), "{h}");
        assert!(h["server_cpu_us_per_conn"].as_f64().is_some(), "{h}");
        assert_eq!(h["handshake_cpu_us"].is_number(), h["tls"] == true, "{h}");
    }
    let handshakes = v["handshakes"].as_array().expect("handshake runs");
    let respite_tls = handshakes
        .iter()
        .find(|h| h["target"] == "respite-tls")
        .expect("respite-tls handshake run");
    // Respite counted at least the handshakes measured (its counter also saw the warm-up).
    assert!(
        respite_tls["respite_handshakes"].as_u64() >= respite_tls["connections"].as_u64(),
        "{respite_tls}"
    );
    assert!(
        respite_tls["negotiated"]
            .as_str()
            .is_some_and(|n| n.contains("TLS")),
        "{respite_tls}"
    );
    let stat = |name: &str| {
        v["respite_ssl_stats"]
            .as_array()
            .expect("ssl stats")
            .iter()
            .find(|s| s[0] == name)
            .and_then(|s| s[1].as_u64())
    };
    for name in [
        "redis.tls.ssl.handshake",
        "redis.tls_down.ssl.handshake",
        "cluster.tls.ssl.handshake",
    ] {
        assert!(stat(name) > Some(0), "{name}: {:?}", v["respite_ssl_stats"]);
    }
    // Respite's writes to Redis were counted for every Respite run.
    let batching = v["upstream_batching"]
        .as_array()
        .expect("upstream batching");
    assert_eq!(batching.len(), 6, "{batching:?}");
    assert!(
        batching
            .iter()
            .all(|b| b["per_write"].as_f64() >= Some(1.0)),
        "{batching:?}"
    );
    assert!(v["ktls"]["available"].is_boolean());
    for section in [
        "## What TLS costs per request",
        "## Handshakes",
        "| GET P1 | respite-tls |",
    ] {
        assert!(md.contains(section), "{section}: {md}");
    }
}

/// A redis-server with a TLS port only, killed on drop.
struct TlsRedis(Child);

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_pki(dir: &Path) {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    };
    // Distinct subjects: OpenSSL finds a certificate's issuer by name.
    let dn = |cn: &str| {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        dn
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = dn("test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, stem: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name = dn(stem);
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
    };
    leaf(vec!["localhost".into(), "127.0.0.1".into()], "server");
    leaf(vec!["client".into()], "client");
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
}

#[test]
fn run_with_tls_ca_loads_a_tls_port() {
    let (bench, _) = common::binaries(&["redis-server"]);
    let dir = tempfile::tempdir().expect("temp dir");
    write_pki(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let p = |n: &str| dir.path().join(n);
    let _redis = TlsRedis(
        Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(p("server.pem"))
            .arg("--tls-key-file")
            .arg(p("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(p("ca.pem"))
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server"),
    );
    let run = |extra: &[&str]| {
        // The TLS port takes a moment to listen: retry the first connection.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let o = Command::new(&bench)
                .args([
                    "--port",
                    &port.to_string(),
                    "-c",
                    "4",
                    "-P",
                    "4",
                    "-n",
                    "400",
                ])
                .args(["--mix", "get:1,set:1", "--prefill", "-r", "100", "--json"])
                .arg("--tls-ca")
                .arg(p("ca.pem"))
                .args(extra)
                .output()
                .expect("run respite-bench");
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            if o.status.success() || Instant::now() > deadline || !err.contains("refused") {
                return (o, err);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (cert, key) = (p("client.pem"), p("client.key"));
    let client = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let (o, err) = run(&client);
    assert!(o.status.success(), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(r["requests"], 400, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["nil_replies"], 0, "{r}");
    assert!(r["rps"].as_f64() > Some(0.0), "{r}");
    // Without a client certificate redis-server (tls-auth-clients yes) refuses the connection.
    let (o, err) = run(&[]);
    assert!(!o.status.success(), "{err}");
}

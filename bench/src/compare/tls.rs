//! `respite-bench compare --tls`: what TLS costs Respite per request, against what it costs
//! redis-server to terminate TLS itself, in one run.
//!
//! One redis-server listens on a plain port and on a TLS port (`--tls-port`, mutual TLS: its
//! default `tls-auth-clients yes`); one Respite (1 worker) has three listeners: plain → plain,
//! TLS → TLS (a `[listeners.tls]` that requires a client certificate, and a `[clusters.tls]`
//! cluster to the TLS port with a client certificate) and TLS → plain. The load generator goes
//! to the five endpoints ([`TARGETS`]) in turn, interleaved rep → case → target, GET and SET at
//! pipeline 1 and 16 over 50 connections; every TLS connection does its handshake before the
//! measured (and warm-up) load. The costs of TLS are differences within a repetition: Respite
//! TLS→TLS minus plain (proxy CPU per request) against direct TLS minus direct plain
//! (redis-server CPU per request). Then the handshake loop: [`Settings::handshake_clients`]
//! clients connect, handshake (full: the client never resumes), PING and close (RST), over and
//! over, against both servers' TLS and plain endpoints: connections per second and CPU per
//! connection. A CA, a server certificate (`localhost`, 127.0.0.1) and a client certificate,
//! ECDSA P-256, are made at run time with rcgen in the run's directory.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cases::{self, Case};
use super::metrics::{self, Metrics, RunRecord, Summary};
use super::procs::{Fleet, Server, free_port};
use super::table::{self, Layout, fmt_cpu, fmt_ratio, fmt_rps, fmt_us};
use super::{CompareArgs, Output, Runner, Setup, Target, prefill, setup, write_outputs};
use crate::procstat;
use crate::tls::TlsClient;

/// The load generator straight to redis-server's plain port.
pub const DIRECT: &str = "direct";
/// The load generator straight to redis-server's TLS port.
pub const DIRECT_TLS: &str = "direct-tls";
/// Respite, plain client side, plain to Redis.
pub const RESPITE: &str = "respite";
/// Respite, TLS client side, TLS to Redis's TLS port.
pub const RESPITE_TLS: &str = "respite-tls";
/// Respite, TLS client side, plain to Redis.
pub const RESPITE_TLS_DOWN: &str = "respite-tls-down";
/// Every target of the request cases, in run order.
pub const TARGETS: [&str; 5] = [DIRECT, DIRECT_TLS, RESPITE, RESPITE_TLS, RESPITE_TLS_DOWN];
/// The targets of the handshake loop (TLS → plain handshakes the same as TLS → TLS).
pub const HANDSHAKE_TARGETS: [&str; 4] = [DIRECT, DIRECT_TLS, RESPITE, RESPITE_TLS];
/// `--cases` id of the handshake loop.
pub const HANDSHAKE: &str = "handshake";
/// The request cases.
const CASES: [&str; 4] = ["get-p1", "set-p1", "get-p16", "set-p16"];

/// The request cases and whether the handshake loop runs, from `--cases` (`all` or a comma
/// list of get-p1, set-p1, get-p16, set-p16, handshake).
pub fn select(list: Option<&str>) -> Result<(Vec<Case>, bool), String> {
    let all: Vec<Case> = cases::all_cases()
        .into_iter()
        .filter(|c| CASES.contains(&c.id))
        .collect();
    let Some(list) = list.filter(|l| *l != "all") else {
        return Ok((all, true));
    };
    let ids: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = ids
        .iter()
        .find(|id| **id != HANDSHAKE && !CASES.contains(id))
    {
        return Err(format!(
            "case `{bad}` is not available with --tls; known: {}, {HANDSHAKE}",
            CASES.join(", ")
        ));
    }
    let handshake = ids.contains(&HANDSHAKE);
    Ok((
        all.into_iter().filter(|c| ids.contains(&c.id)).collect(),
        handshake,
    ))
}

/// The certificate files of a run (PEM).
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// A CA, a server certificate for `localhost` and 127.0.0.1 and a client certificate
    /// signed by it (ECDSA P-256, rcgen's default), written into `dir`.
    pub fn generate(dir: &Path) -> Result<Pki, String> {
        let e = |e: rcgen::Error| format!("certificates: {e}");
        let ca_key = KeyPair::generate().map_err(e)?;
        // Distinct subjects: OpenSSL (redis-server) finds a certificate's issuer by name, and
        // rcgen's default subject is the same for every certificate.
        let dn = |cn: &str| {
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, cn);
            dn
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name = dn("respite-bench CA");
        let ca = ca_params.self_signed(&ca_key).map_err(e)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |cn: &str, names: Vec<String>| -> Result<(String, String), String> {
            let key = KeyPair::generate().map_err(e)?;
            let mut params = CertificateParams::new(names).map_err(e)?;
            params.distinguished_name = dn(cn);
            let cert = params.signed_by(&key, &issuer).map_err(e)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server, server_key) = leaf("localhost", vec!["localhost".into(), "127.0.0.1".into()])?;
        let (client, client_key) = leaf("respite-bench client", vec!["respite-bench".into()])?;
        let pki = Pki {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        };
        for (path, text) in [
            (&pki.ca, ca.pem()),
            (&pki.server_cert, server),
            (&pki.server_key, server_key),
            (&pki.client_cert, client),
            (&pki.client_key, client_key),
        ] {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(pki)
    }

    /// A TLS client that trusts the CA and presents the client certificate; `resume`: see
    /// [`TlsClient::from_files`].
    pub fn client(&self, resume: bool) -> Result<TlsClient, String> {
        TlsClient::from_files(
            &self.ca,
            Some((&self.client_cert, &self.client_key)),
            "127.0.0.1",
            resume,
        )
    }
}

/// Respite's config: a plain → plain, a TLS → TLS and a TLS → plain listener (in that order
/// in `ports`), 1 worker.
fn respite_toml(
    admin: u16,
    ports: [u16; 3],
    redis_plain: u16,
    redis_tls: u16,
    pki: &Pki,
) -> String {
    let p = |p: &Path| p.display().to_string();
    let listener_tls = format!(
        "[listeners.tls]\ncertificate_chain = \"{}\"\nprivate_key = \"{}\"\n\
         trusted_ca = \"{}\"\nrequire_client_certificate = true\n",
        p(&pki.server_cert),
        p(&pki.server_key),
        p(&pki.ca)
    );
    let listener = |name: &str, port: u16, cluster: &str, tls: &str| {
        format!(
            "[[listeners]]\nname = \"{name}\"\naddress = \"127.0.0.1:{port}\"\n\
             stat_prefix = \"{name}\"\nop_timeout = \"5s\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"{cluster}\"\n{tls}"
        )
    };
    format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 1\n{}{}{}\
         [[clusters]]\nname = \"plain\"\ntype = \"static\"\nhosts = [\"127.0.0.1:{redis_plain}\"]\n\
         [[clusters]]\nname = \"tls\"\ntype = \"static\"\nhosts = [\"127.0.0.1:{redis_tls}\"]\n\
         [clusters.tls]\ntrusted_ca = \"{}\"\ncertificate_chain = \"{}\"\nprivate_key = \"{}\"\n",
        listener("plain", ports[0], "plain", ""),
        listener("tls", ports[1], "tls", &listener_tls),
        listener("tls_down", ports[2], "plain", &listener_tls),
        p(&pki.ca),
        p(&pki.client_cert),
        p(&pki.client_key),
    )
}

/// Whether the kernel offers kernel TLS (a `tls` upper-layer protocol).
#[derive(Debug, Clone, Serialize)]
pub struct Ktls {
    pub available: bool,
    /// `/proc/sys/net/ipv4/tcp_available_ulp` as read (`None`: unreadable).
    pub tcp_available_ulp: Option<String>,
}

impl Ktls {
    fn probe() -> Ktls {
        let ulp = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
            .ok()
            .map(|s| s.trim().to_string());
        Ktls {
            available: ulp
                .as_deref()
                .is_some_and(|u| u.split_whitespace().any(|w| w == "tls")),
            tcp_available_ulp: ulp,
        }
    }
}

/// One run of the handshake loop against one target.
#[derive(Debug, Clone, Serialize)]
pub struct HandshakeRun {
    pub rep: usize,
    pub target: String,
    pub tls: bool,
    pub clients: usize,
    pub elapsed_s: f64,
    /// Connections that completed (connect, handshake, PING answered) in the measured time.
    pub connections: u64,
    pub per_s: f64,
    /// Connect → PONG, µs.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Failed connections (warm-up included).
    pub errors: u64,
    pub first_error: Option<String>,
    pub proxy_cpu_us_per_conn: Option<f64>,
    pub redis_cpu_us_per_conn: Option<f64>,
    pub client_cpu_us_per_conn: Option<f64>,
    /// The server the clients talked to: Respite for Respite targets, else redis-server.
    pub server_cpu_us_per_conn: Option<f64>,
    /// Cores used by everything else on the machine.
    pub other_cores: Option<f64>,
    pub noisy: bool,
    /// Respite targets: the listener's `ssl.handshake` over the run, warm-up included.
    pub respite_handshakes: Option<u64>,
    /// What the first TLS connection negotiated.
    pub negotiated: Option<String>,
}

/// Medians of a target's handshake runs.
#[derive(Debug, Clone, Serialize)]
pub struct HandshakeSummary {
    pub target: String,
    pub tls: bool,
    pub reps: usize,
    pub noisy_reps: usize,
    pub per_s: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub proxy_cpu_us_per_conn: Option<f64>,
    pub redis_cpu_us_per_conn: Option<f64>,
    pub client_cpu_us_per_conn: Option<f64>,
    pub server_cpu_us_per_conn: Option<f64>,
    /// TLS targets: this target's server CPU per connection minus its plain twin's, the median
    /// of the per-rep differences: what a full handshake costs the server.
    pub handshake_cpu_us: Option<f64>,
}

/// What TLS costs per request in one case: medians of per-rep differences (µs of CPU per
/// request) and ratios.
#[derive(Debug, Clone, Serialize)]
pub struct TlsCost {
    pub case: String,
    pub label: String,
    /// redis-server's CPU per request, direct-tls minus direct: terminating TLS itself.
    pub redis_added_us: Option<f64>,
    /// Respite's CPU per request, respite-tls minus respite (TLS on both sides).
    pub respite_added_us: Option<f64>,
    /// redis-server's CPU per request behind Respite, respite-tls minus respite: the upstream
    /// TLS, shared by the requests of each batched upstream write.
    pub respite_redis_added_us: Option<f64>,
    /// Respite's CPU per request, respite-tls-down minus respite (TLS to the clients only).
    pub respite_down_added_us: Option<f64>,
    /// respite_added_us / redis_added_us (a ratio of the medians: a rep's own ratio swings
    /// wide when its redis-server difference is a fraction of a µs).
    pub ratio: Option<f64>,
    /// (respite_added_us + respite_redis_added_us) / redis_added_us: all the CPU TLS adds
    /// through Respite against what it adds to redis-server terminating it itself.
    pub ratio_with_backend: Option<f64>,
    /// respite_added_us / redis_added_us of each rep.
    pub ratio_per_rep: Vec<Option<f64>>,
}

/// Everything written to `<timestamp>-tls.json`.
#[derive(Debug, Serialize)]
struct TlsOutput {
    #[serde(flatten)]
    base: Output,
    ktls: Ktls,
    /// Certificates and TLS settings in words.
    setup: String,
    costs: Vec<TlsCost>,
    handshake_clients: usize,
    handshakes: Vec<HandshakeRun>,
    handshake_medians: Vec<HandshakeSummary>,
    /// Respite's `ssl.*` stats at the end (`name`, value).
    respite_ssl_stats: Vec<(String, u64)>,
    /// Respite's requests per upstream write in every Respite run.
    upstream_batching: Vec<UpstreamBatching>,
}

/// Requests per upstream write of one Respite run (`rq_total` / `flush_total` of the cluster's
/// host over the run, warm-up included): how many requests each write to Redis carried.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamBatching {
    pub rep: usize,
    pub case: String,
    pub target: String,
    pub requests: u64,
    pub writes: u64,
    pub per_write: Option<f64>,
}

/// The cluster behind a Respite target.
fn upstream_cluster(target: &str) -> Option<&'static str> {
    match target {
        RESPITE | RESPITE_TLS_DOWN => Some("plain"),
        RESPITE_TLS => Some("tls"),
        _ => None,
    }
}

/// `(rq_total, flush_total)` summed over the hosts of `cluster`.
fn upstream_writes(admin: SocketAddr, cluster: &str) -> Result<(u64, u64), String> {
    let text = respite_tools::admin_client::get(admin, "/stats?filter=rq_total%7Cflush_total")?;
    Ok(parse_upstream_writes(&text, cluster))
}

fn parse_upstream_writes(text: &str, cluster: &str) -> (u64, u64) {
    let prefix = format!("cluster.{cluster}.host.");
    let (mut rq, mut flush) = (0, 0);
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let Ok(v) = value.trim().parse::<u64>() else {
            continue;
        };
        if rest.ends_with(".rq_total") {
            rq += v;
        } else if rest.ends_with(".flush_total") {
            flush += v;
        }
    }
    (rq, flush)
}

const SETUP: &str = "ECDSA P-256 certificates (rcgen) from one CA; mutual TLS on every TLS hop \
     (redis-server's default `tls-auth-clients yes`, Respite's listener with \
     `require_client_certificate = true`, Respite's cluster and the load generator presenting a \
     client certificate); redis-server otherwise at its TLS defaults (OpenSSL), Respite with \
     rustls (ring); the load generator with rustls (ring), no session resumption";

/// Runs the comparison and writes `<UTC>-tls.{json,md}` and `latest-tls.*`.
pub(super) fn run(args: &CompareArgs) -> Result<(), String> {
    let (cases, with_handshakes) = select(args.cases.as_deref())?;
    if args.handshake_clients == 0 {
        return Err("--handshake-clients must be >= 1".into());
    }
    let Setup {
        mut settings,
        out_dir,
        respite_bin,
        timestamp,
        machine,
    } = setup(args, 1, 0)?;
    settings.client_threads = "1";
    procs_nofile()?;
    let ktls = Ktls::probe();
    let mut fleet = Fleet::new("respite-compare-tls")?;
    let result = measure(
        &mut fleet,
        &respite_bin,
        &cases,
        with_handshakes,
        args.handshake_clients,
        &settings,
    );
    fleet.remove();
    let m = result?;

    let names: Vec<String> = TARGETS.map(String::from).to_vec();
    let ok: Vec<RunRecord> = m
        .runs
        .iter()
        .filter(|r| r.metrics.errors == 0)
        .cloned()
        .collect();
    let medians = metrics::summarize(&ok, &cases, &names);
    let costs = costs(&ok, &cases, settings.reps);
    let handshake_medians = handshake_summaries(&m.handshakes, settings.reps);
    let output = TlsOutput {
        base: Output {
            timestamp: timestamp.clone(),
            machine,
            settings,
            cases,
            open_loop_rate: None,
            runs: m.runs,
            medians,
            memory: Vec::new(),
            blocked_memory: Vec::new(),
            pubsub_memory: Vec::new(),
            baseline: Vec::new(),
            failures: m.failures,
        },
        ktls,
        setup: SETUP.to_string(),
        costs,
        handshake_clients: args.handshake_clients,
        handshakes: m.handshakes,
        handshake_medians,
        respite_ssl_stats: m.ssl_stats,
        upstream_batching: m.batching,
    };
    let md = render(&output);
    write_outputs(
        &output,
        &output.base.failures,
        &out_dir,
        &timestamp,
        "-tls",
        &md,
        None,
    )
}

fn procs_nofile() -> Result<(), String> {
    super::procs::raise_nofile().map(drop)
}

/// What [`measure`] collects.
struct Measured {
    runs: Vec<RunRecord>,
    failures: Vec<String>,
    handshakes: Vec<HandshakeRun>,
    ssl_stats: Vec<(String, u64)>,
    batching: Vec<UpstreamBatching>,
}

/// Starts redis-server and Respite, checks every TLS endpoint, prefills, runs the request
/// cases and the handshake loop.
fn measure(
    fleet: &mut Fleet,
    respite_bin: &Path,
    cases: &[Case],
    with_handshakes: bool,
    handshake_clients: usize,
    settings: &super::Settings,
) -> Result<Measured, String> {
    let pki = Pki::generate(&fleet.dir)?;
    let load_client = Arc::new(pki.client(true)?);
    let (redis_port, redis_tls_port) = (free_port()?, free_port()?);
    eprintln!("starting redis-server (plain and --tls-port) and respite (3 listeners)...");
    let tls_port = redis_tls_port.to_string();
    let path = |p: &Path| p.display().to_string();
    let redis = fleet.redis(
        "redis1",
        redis_port,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &path(&pki.server_cert),
            "--tls-key-file",
            &path(&pki.server_key),
            "--tls-ca-cert-file",
            &path(&pki.ca),
        ],
    )?;
    let ports = [free_port()?, free_port()?, free_port()?];
    let admin = free_port()?;
    let toml = respite_toml(admin, ports, redis_port, redis_tls_port, &pki);
    let respite = fleet.respite_with_config("respite", respite_bin, &toml, ports[0], admin)?;
    let admin_addr: SocketAddr = ([127, 0, 0, 1], admin).into();
    // Every TLS endpoint answers through TLS before anything is measured.
    let check = pki.client(false)?;
    for (name, port) in [
        (DIRECT_TLS, redis_tls_port),
        (RESPITE_TLS, ports[1]),
        (RESPITE_TLS_DOWN, ports[2]),
    ] {
        let addr = ([127, 0, 0, 1], port).into();
        let r = new_runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(5), once(addr, Some(&check), true)).await
        });
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("{name} (127.0.0.1:{port}): {e}")),
            Err(_) => return Err(format!("{name} (127.0.0.1:{port}): no PONG within 5 s")),
        }
    }
    eprintln!("configs, certificates and logs in {}", fleet.dir.display());
    if !cases.is_empty() {
        prefill(&redis.name, redis.port, false, 3, 0)?;
    }

    let target = |name: &'static str| -> Target {
        let (port, proxy, tls) = match name {
            DIRECT => (redis_port, None, false),
            DIRECT_TLS => (redis_tls_port, None, true),
            RESPITE => (ports[0], Some(respite.pid), false),
            RESPITE_TLS => (ports[1], Some(respite.pid), true),
            _ => (ports[2], Some(respite.pid), true),
        };
        Target {
            name,
            port,
            proxy_pid: proxy,
            cluster: false,
            stats_reader: None,
            admin: proxy.map(|_| admin),
            tls: tls.then(|| load_client.clone()),
        }
    };
    let targets: Vec<Target> = TARGETS.iter().map(|n| target(n)).collect();
    let total = settings.reps * cases.len() * targets.len();
    let mut runner = Runner::new(settings, std::slice::from_ref(&redis), total, Vec::new());
    // rep → case → target, as `Runner::run_interleaved`, with Respite's upstream writes read
    // around each Respite run.
    let mut batching = Vec::new();
    for rep in 1..=settings.reps {
        for case in cases {
            for t in &targets {
                let cluster = upstream_cluster(t.name);
                let before = cluster.and_then(|c| upstream_writes(admin_addr, c).ok());
                runner.run_case(rep, case, t, None);
                let after = cluster.and_then(|c| upstream_writes(admin_addr, c).ok());
                if let (Some(b), Some(a)) = (before, after) {
                    let (requests, writes) = (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1));
                    batching.push(UpstreamBatching {
                        rep,
                        case: case.id.to_string(),
                        target: t.name.to_string(),
                        requests,
                        writes,
                        per_write: (writes > 0).then(|| requests as f64 / writes as f64),
                    });
                }
            }
        }
    }
    let Runner {
        runs, mut failures, ..
    } = runner;

    let mut handshakes = Vec::new();
    if with_handshakes {
        let full = Arc::new(pki.client(false)?);
        let n = settings.reps * HANDSHAKE_TARGETS.len();
        let mut i = 0;
        for rep in 1..=settings.reps {
            for name in HANDSHAKE_TARGETS {
                i += 1;
                let t = target(name);
                eprint!("[{i}/{n}] rep {rep} handshake loop {name} ... ");
                let tls = t.tls.as_ref().map(|_| full.clone());
                match handshake_run(rep, &t, tls, handshake_clients, settings, &redis) {
                    Ok(h) => {
                        eprintln!(
                            "{:.0} connections/s, p99 {:.0} µs, server {} µs/conn{}",
                            h.per_s,
                            h.p99_us,
                            fmt_cpu(h.server_cpu_us_per_conn),
                            if h.errors > 0 {
                                format!(", {} FAILED", h.errors)
                            } else {
                                String::new()
                            }
                        );
                        if h.errors > 0 || h.connections == 0 {
                            failures.push(format!(
                                "rep {rep} {HANDSHAKE} {name}: {} failed connections (first: {})",
                                h.errors,
                                h.first_error.as_deref().unwrap_or("none")
                            ));
                        }
                        handshakes.push(h);
                    }
                    Err(e) => {
                        eprintln!("failed: {e}");
                        failures.push(format!("rep {rep} {HANDSHAKE} {name}: {e}"));
                    }
                }
            }
        }
    }
    let ssl_stats = ssl_stats(admin_addr).unwrap_or_else(|e| {
        failures.push(format!("respite ssl stats: {e}"));
        Vec::new()
    });
    Ok(Measured {
        runs,
        failures,
        handshakes,
        ssl_stats,
        batching,
    })
}

fn new_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current_thread runtime")
}

/// Respite's `ssl.*` counters (`name: value` lines of `/stats?filter=ssl`).
fn ssl_stats(admin: SocketAddr) -> Result<Vec<(String, u64)>, String> {
    let text = respite_tools::admin_client::get(admin, "/stats?filter=%5C.ssl%5C.")?;
    Ok(parse_ssl_stats(&text))
}

fn parse_ssl_stats(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(": ")?;
            let v = value.trim().parse::<u64>().ok()?;
            name.contains(".ssl.").then(|| (name.to_string(), v))
        })
        .collect()
}

fn stat(stats: &[(String, u64)], name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

/// `PING` on `s`, `+PONG` expected.
async fn ping<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> io::Result<()> {
    s.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
    s.flush().await?;
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).await?;
    if &buf != b"+PONG\r\n" {
        return Err(io::Error::other(format!(
            "expected +PONG, got {:?}",
            String::from_utf8_lossy(&buf)
        )));
    }
    Ok(())
}

/// One connection of the handshake loop: connect, handshake (with `tls`), PING, close with a
/// reset (zero linger: no TIME_WAIT left behind by thousands of connections a second). With
/// `describe`, returns what the TLS connection negotiated.
async fn once(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    describe: bool,
) -> io::Result<Option<String>> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tcp.set_zero_linger()?;
    let Some(tls) = tls else {
        ping(&mut tcp).await?;
        return Ok(None);
    };
    let mut s = tls.connect(tcp).await?;
    ping(&mut s).await?;
    Ok(describe.then(|| {
        let c = s.get_ref().1;
        let name = |x: Option<String>| x.unwrap_or_else(|| "?".into());
        format!(
            "{}, {}, {}",
            name(c.protocol_version().map(|v| format!("{v:?}"))),
            name(
                c.negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite()))
            ),
            name(
                c.negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name()))
            ),
        )
    }))
}

/// What the handshake loop's clients count.
struct LoopStats {
    hist: Histogram<u64>,
    connections: u64,
    errors: u64,
    first_error: Option<String>,
    negotiated: Option<String>,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const DONE: u8 = 2;

/// `clients` connections at a time to `t`, each connecting, handshaking, PINGing and closing
/// over and over, for the warm-up and then the measured time; CPU of this process, Respite (if
/// `t` is Respite) and `redis` over the measured time.
fn handshake_run(
    rep: usize,
    t: &Target,
    tls: Option<Arc<TlsClient>>,
    clients: usize,
    settings: &super::Settings,
    redis: &Server,
) -> Result<HandshakeRun, String> {
    let addr: SocketAddr = ([127, 0, 0, 1], t.port).into();
    let admin = t.admin.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
    let listener_stat = match t.name {
        RESPITE_TLS => Some("redis.tls.ssl.handshake"),
        RESPITE_TLS_DOWN => Some("redis.tls_down.ssl.handshake"),
        _ => None,
    };
    let read_stat = |name: &str| {
        admin
            .and_then(|a| ssl_stats(a).ok())
            .and_then(|s| stat(&s, name))
    };
    let before_stat = listener_stat.and_then(read_stat);
    let warmup = Duration::from_secs_f64(settings.warmup_s);
    let duration = Duration::from_secs_f64(settings.duration_s);
    let pids: Vec<Option<u32>> = vec![Some(std::process::id()), t.proxy_pid, Some(redis.pid)];
    let cpu = |pids: &[Option<u32>]| -> Vec<Option<Duration>> {
        pids.iter()
            .map(|p| p.and_then(|p| procstat::cpu_time(&p.to_string()).ok()))
            .collect()
    };

    let stats = Rc::new(RefCell::new(LoopStats {
        hist: Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?,
        connections: 0,
        errors: 0,
        first_error: None,
        negotiated: None,
    }));
    let phase = Rc::new(Cell::new(if warmup.is_zero() { MEASURE } else { WARMUP }));
    let rt = new_runtime();
    let local = tokio::task::LocalSet::new();
    let (elapsed, cpu_before, cpu_after, busy_before, busy_after) = local.block_on(&rt, async {
        let mut handles = Vec::new();
        for _ in 0..clients {
            let stats = stats.clone();
            let phase = phase.clone();
            let tls = tls.clone();
            handles.push(tokio::task::spawn_local(async move {
                while phase.get() != DONE {
                    let describe = tls.is_some() && stats.borrow().negotiated.is_none();
                    let started = Instant::now();
                    let r = tokio::time::timeout(
                        Duration::from_secs(5),
                        once(addr, tls.as_deref(), describe),
                    )
                    .await
                    .unwrap_or_else(|_| Err(io::Error::other("no PONG within 5 s")));
                    let failed = {
                        let mut st = stats.borrow_mut();
                        match r {
                            Ok(neg) => {
                                if phase.get() == MEASURE {
                                    st.connections += 1;
                                    let us = started.elapsed().as_micros() as u64;
                                    st.hist.saturating_record(us.max(1));
                                }
                                if neg.is_some() {
                                    st.negotiated = neg;
                                }
                                false
                            }
                            Err(e) => {
                                st.errors += 1;
                                if st.first_error.is_none() {
                                    st.first_error = Some(e.to_string());
                                }
                                true
                            }
                        }
                    };
                    if failed {
                        // Not a hot loop against a server that refuses.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }));
        }
        if !warmup.is_zero() {
            tokio::time::sleep(warmup).await;
        }
        let cpu_before = cpu(&pids);
        let busy_before = procstat::machine_busy().ok();
        phase.set(MEASURE);
        let start = Instant::now();
        tokio::time::sleep(duration).await;
        phase.set(DONE);
        let elapsed = start.elapsed();
        let cpu_after = cpu(&pids);
        let busy_after = procstat::machine_busy().ok();
        for h in handles {
            let _ = h.await;
        }
        (elapsed, cpu_before, cpu_after, busy_before, busy_after)
    });
    let after_stat = listener_stat.and_then(read_stat);
    let st = Rc::try_unwrap(stats)
        .ok()
        .expect("all tasks finished")
        .into_inner();
    let used: Vec<Option<u64>> = cpu_before
        .iter()
        .zip(&cpu_after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => Some(a.saturating_sub(*b).as_micros() as u64),
            _ => None,
        })
        .collect();
    let n = st.connections;
    let per_conn = |us: Option<u64>| us.filter(|_| n > 0).map(|us| us as f64 / n as f64);
    let (client, proxy, redis_us) = (used[0], used[1], used[2]);
    let secs = elapsed.as_secs_f64();
    let other_cores = match (busy_before, busy_after) {
        (Some(b), Some(a)) if secs > 0.0 => {
            let tracked = client.unwrap_or(0) + proxy.unwrap_or(0) + redis_us.unwrap_or(0);
            let busy = a.saturating_sub(b).as_micros() as u64;
            Some(busy.saturating_sub(tracked) as f64 / 1e6 / secs)
        }
        _ => None,
    };
    let q = |p: f64| {
        if st.hist.is_empty() {
            0.0
        } else {
            st.hist.value_at_quantile(p) as f64
        }
    };
    Ok(HandshakeRun {
        rep,
        target: t.name.to_string(),
        tls: tls.is_some(),
        clients,
        elapsed_s: secs,
        connections: n,
        per_s: if secs > 0.0 { n as f64 / secs } else { 0.0 },
        p50_us: q(0.5),
        p99_us: q(0.99),
        errors: st.errors,
        first_error: st.first_error,
        proxy_cpu_us_per_conn: per_conn(proxy),
        redis_cpu_us_per_conn: per_conn(redis_us),
        client_cpu_us_per_conn: per_conn(client),
        server_cpu_us_per_conn: per_conn(if t.proxy_pid.is_some() {
            proxy
        } else {
            redis_us
        }),
        other_cores,
        noisy: other_cores.is_some_and(|o| o > metrics::NOISY_CORES),
        respite_handshakes: match (before_stat, after_stat) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            // Registered at the first handshake: absent before it.
            (None, Some(a)) => Some(a),
            _ => None,
        },
        negotiated: st.negotiated,
    })
}

/// The value of `f` for `case` × `target` in rep `rep`.
fn rep_metric(
    runs: &[RunRecord],
    rep: usize,
    case: &str,
    target: &str,
    f: fn(&Metrics) -> Option<f64>,
) -> Option<f64> {
    runs.iter()
        .find(|r| r.rep == rep && r.case == case && r.target == target)
        .and_then(|r| f(&r.metrics))
}

fn diff(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

fn med(v: &[Option<f64>]) -> Option<f64> {
    metrics::median(&v.iter().flatten().copied().collect::<Vec<_>>())
}

/// The per-request costs of TLS in every case (medians of per-rep differences).
fn costs(runs: &[RunRecord], cases: &[Case], reps: usize) -> Vec<TlsCost> {
    let proxy = |m: &Metrics| m.proxy_cpu_us_per_req;
    let redis = |m: &Metrics| m.redis_cpu_us_per_req;
    cases
        .iter()
        .map(|c| {
            let mut redis_added = Vec::new();
            let mut respite_added = Vec::new();
            let mut respite_redis_added = Vec::new();
            let mut down_added = Vec::new();
            let mut ratio = Vec::new();
            for rep in 1..=reps {
                let m = |t: &str, f: fn(&Metrics) -> Option<f64>| rep_metric(runs, rep, c.id, t, f);
                let ra = diff(m(DIRECT_TLS, redis), m(DIRECT, redis));
                let pa = diff(m(RESPITE_TLS, proxy), m(RESPITE, proxy));
                let pra = diff(m(RESPITE_TLS, redis), m(RESPITE, redis));
                redis_added.push(ra);
                respite_added.push(pa);
                respite_redis_added.push(pra);
                down_added.push(diff(m(RESPITE_TLS_DOWN, proxy), m(RESPITE, proxy)));
                ratio.push(table::ratio(pa, ra));
            }
            let (redis_added, respite_added, respite_redis_added) = (
                med(&redis_added),
                med(&respite_added),
                med(&respite_redis_added),
            );
            TlsCost {
                case: c.id.to_string(),
                label: c.label.to_string(),
                redis_added_us: redis_added,
                respite_added_us: respite_added,
                respite_redis_added_us: respite_redis_added,
                respite_down_added_us: med(&down_added),
                ratio: table::ratio(respite_added, redis_added),
                ratio_with_backend: table::ratio(
                    respite_added.zip(respite_redis_added).map(|(a, b)| a + b),
                    redis_added,
                ),
                ratio_per_rep: ratio,
            }
        })
        .collect()
}

/// The plain twin of a TLS target of the handshake loop.
fn plain_twin(target: &str) -> Option<&'static str> {
    match target {
        DIRECT_TLS => Some(DIRECT),
        RESPITE_TLS => Some(RESPITE),
        _ => None,
    }
}

fn handshake_summaries(runs: &[HandshakeRun], reps: usize) -> Vec<HandshakeSummary> {
    let ok = |r: &&HandshakeRun| r.errors == 0 && r.connections > 0;
    HANDSHAKE_TARGETS
        .iter()
        .filter_map(|&target| {
            let rs: Vec<&HandshakeRun> = runs
                .iter()
                .filter(ok)
                .filter(|r| r.target == target)
                .collect();
            let first = rs.first()?;
            let m = |f: fn(&HandshakeRun) -> Option<f64>| {
                med(&rs.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let handshake_cpu_us = plain_twin(target).and_then(|twin| {
                let per_rep: Vec<Option<f64>> = (1..=reps)
                    .map(|rep| {
                        let server = |t: &str| {
                            runs.iter()
                                .filter(ok)
                                .find(|r| r.rep == rep && r.target == t)
                                .and_then(|r| r.server_cpu_us_per_conn)
                        };
                        diff(server(target), server(twin))
                    })
                    .collect();
                med(&per_rep)
            });
            Some(HandshakeSummary {
                target: target.to_string(),
                tls: first.tls,
                reps: rs.len(),
                noisy_reps: rs.iter().filter(|r| r.noisy).count(),
                per_s: m(|r| Some(r.per_s)),
                p50_us: m(|r| Some(r.p50_us)),
                p99_us: m(|r| Some(r.p99_us)),
                proxy_cpu_us_per_conn: m(|r| r.proxy_cpu_us_per_conn),
                redis_cpu_us_per_conn: m(|r| r.redis_cpu_us_per_conn),
                client_cpu_us_per_conn: m(|r| r.client_cpu_us_per_conn),
                server_cpu_us_per_conn: m(|r| r.server_cpu_us_per_conn),
                handshake_cpu_us,
            })
        })
        .collect()
}

fn us_or_dash(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), fmt_us)
}

/// `+1.23` / `-0.40` µs, `–` when unknown.
fn fmt_added(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:+.2}"))
}

/// The Markdown report.
fn render(o: &TlsOutput) -> String {
    let b = &o.base;
    let st = &b.settings;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# TLS: Respite vs redis-server's own TLS {}\n",
        b.timestamp
    );
    let _ = writeln!(s, "{}", table::machine_line(b));
    let negotiated = o
        .handshakes
        .iter()
        .find_map(|h| h.negotiated.as_deref())
        .unwrap_or("?");
    let _ = writeln!(
        s,
        "One redis-server with a plain and a TLS port; one Respite (1 worker) with three \
         listeners: `{RESPITE}` plain → plain, `{RESPITE_TLS}` TLS → TLS (to the TLS port), \
         `{RESPITE_TLS_DOWN}` TLS → plain; `{DIRECT}` / `{DIRECT_TLS}`: the load generator \
         straight to redis-server's plain / TLS port. {}. Negotiated: {negotiated}. Client \
         connections do their handshakes before the warm-up. Kernel TLS: {} (tcp_available_ulp: \
         `{}`): both servers encrypt in user space. Medians of {} rep(s) of {} s runs ({} s \
         warm-up), interleaved rep → case → target; 50 connections, GET of 3-byte values over \
         {} keys, SET of 3-byte values. Latency in µs; CPU in µs per request: proxy = Respite \
         (all threads), redis = the redis-server, client = the load generator. `*` = other \
         processes used more than {} core in k of n reps.\n",
        o.setup,
        if o.ktls.available {
            "available, not used"
        } else {
            "not available on this kernel"
        },
        o.ktls.tcp_available_ulp.as_deref().unwrap_or("?"),
        st.reps,
        st.duration_s,
        st.warmup_s,
        fmt_rps(st.keyspace as f64),
        st.noisy_threshold_cores,
    );
    let _ = writeln!(s, "## Results\n");
    if b.medians.is_empty() {
        let _ = writeln!(s, "No request case ran (or none succeeded).\n");
    } else {
        let rows: Vec<&Summary> = b.medians.iter().collect();
        let layout = Layout {
            first: "case",
            baseline: DIRECT,
            client_cpu: true,
        };
        s.push_str(&table::table(&b.medians, &rows, &layout, &|x| {
            x.label.clone()
        }));
        s.push('\n');
    }
    if !o.costs.is_empty() {
        let _ = writeln!(s, "## What TLS costs per request\n");
        let _ = writeln!(
            s,
            "CPU µs per request added by TLS, medians of the differences within each rep. \
             redis-server terminating TLS itself: `{DIRECT_TLS}` − `{DIRECT}` (redis-server \
             CPU). Respite: `{RESPITE_TLS}` − `{RESPITE}` (Respite's CPU; and the redis-server's \
             behind it, whose upstream TLS connection carries batched writes), and \
             `{RESPITE_TLS_DOWN}` − `{RESPITE}` (client side only). Ratio = Respite's added CPU \
             / redis-server's added CPU, of the medians (below 1: TLS costs Respite less per \
             request than it costs Redis to terminate it); `per rep` = each rep's own ratio, \
             for the spread.\n"
        );
        let _ = writeln!(
            s,
            "| case | redis-server +µs/req (direct TLS) | Respite +µs/req (TLS→TLS) | its redis +µs/req | Respite +µs/req (TLS→plain) | Respite / redis-server | (Respite + its redis) / redis-server | per rep | rps ×, direct TLS/plain | rps ×, Respite TLS/plain | p99 ×, direct | p99 ×, Respite |"
        );
        let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|");
        let find = |case: &str, target: &str| {
            b.medians
                .iter()
                .find(|m| m.case == case && m.target == target)
                .map(|m| &m.median)
        };
        for c in &o.costs {
            let rps = |t: &str| find(&c.case, t).map(|m| m.rps);
            let p99 = |t: &str| find(&c.case, t).map(|m| m.p99_us);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.label,
                fmt_added(c.redis_added_us),
                fmt_added(c.respite_added_us),
                fmt_added(c.respite_redis_added_us),
                fmt_added(c.respite_down_added_us),
                fmt_cpu(c.ratio),
                fmt_cpu(c.ratio_with_backend),
                c.ratio_per_rep
                    .iter()
                    .map(|r| fmt_cpu(*r))
                    .collect::<Vec<_>>()
                    .join(" / "),
                fmt_ratio(rps(DIRECT_TLS), rps(DIRECT)),
                fmt_ratio(rps(RESPITE_TLS), rps(RESPITE)),
                fmt_ratio(p99(DIRECT_TLS), p99(DIRECT)),
                fmt_ratio(p99(RESPITE_TLS), p99(RESPITE)),
            );
        }
        s.push('\n');
        for c in &o.costs {
            let (Some(pa), Some(ra)) = (c.respite_added_us, c.redis_added_us) else {
                continue;
            };
            let verdict = match c.ratio {
                Some(r) if r < 1.0 => "less than",
                Some(_) => "NOT less than",
                None => "?",
            };
            let _ = writeln!(
                s,
                "- **{}**: TLS on both sides adds {pa:.2} µs of Respite's CPU per request (and \
                 {} µs of its redis-server's); redis-server terminating TLS itself adds {ra:.2} \
                 µs: Respite pays {} × ({verdict} Redis); Respite and its redis-server together \
                 {} ×.",
                c.label,
                fmt_added(c.respite_redis_added_us),
                fmt_cpu(c.ratio),
                fmt_cpu(c.ratio_with_backend),
            );
        }
        s.push('\n');
    }
    if !o.upstream_batching.is_empty() {
        let _ = writeln!(s, "## Respite's requests per upstream write\n");
        let _ = writeln!(
            s,
            "`rq_total / flush_total` of the cluster's host over each run (warm-up included), \
             per rep: how many requests each of Respite's writes to Redis carried (a TLS write is \
             one record, whose cost Redis pays per read).\n"
        );
        let _ = writeln!(s, "| case | target | per rep |");
        let _ = writeln!(s, "|---|---|---|");
        for c in &b.cases {
            for t in [RESPITE, RESPITE_TLS, RESPITE_TLS_DOWN] {
                let reps: Vec<String> = o
                    .upstream_batching
                    .iter()
                    .filter(|x| x.case == c.id && x.target == t)
                    .map(|x| {
                        x.per_write
                            .map_or_else(|| "–".into(), |p| format!("{p:.1}"))
                    })
                    .collect();
                if !reps.is_empty() {
                    let _ = writeln!(s, "| {} | {t} | {} |", c.label, reps.join(" / "));
                }
            }
        }
        s.push('\n');
    }
    if !o.handshake_medians.is_empty() {
        let _ = writeln!(s, "## Handshakes\n");
        let _ = writeln!(
            s,
            "{} clients, each connecting, handshaking (TLS targets: a full mutual-TLS \
             handshake, no resumption), sending PING, reading PONG and closing (RST) in a loop; \
             plain targets do the same without TLS. conn/s = connections completed per second \
             (handshakes/s for TLS targets), latency = connect → PONG; CPU µs per connection; \
             server = the process the clients talked to (Respite or redis-server); +handshake = \
             server CPU per connection minus its plain twin's (per rep, median). On 2 cores the \
             load generator's own handshake CPU competes with the server's: conn/s is a figure \
             of this machine, CPU per connection of the server.\n",
            o.handshake_clients
        );
        let _ = writeln!(
            s,
            "| target | TLS | conn/s | p50 | p99 | server CPU µs/conn | +handshake µs | proxy CPU µs/conn | redis CPU µs/conn | client CPU µs/conn | noisy |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|");
        for h in &o.handshake_medians {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                h.target,
                if h.tls { "yes" } else { "no" },
                h.per_s.map_or_else(|| "–".into(), fmt_rps),
                us_or_dash(h.p50_us),
                us_or_dash(h.p99_us),
                fmt_cpu(h.server_cpu_us_per_conn),
                fmt_added(h.handshake_cpu_us),
                fmt_cpu(h.proxy_cpu_us_per_conn),
                fmt_cpu(h.redis_cpu_us_per_conn),
                fmt_cpu(h.client_cpu_us_per_conn),
                if h.noisy_reps > 0 {
                    format!("* ({}/{})", h.noisy_reps, h.reps)
                } else {
                    String::new()
                },
            );
        }
        s.push('\n');
        let find = |t: &str| o.handshake_medians.iter().find(|h| h.target == t);
        if let (Some(r), Some(d)) = (find(RESPITE_TLS), find(DIRECT_TLS)) {
            let _ = writeln!(
                s,
                "- Handshakes/s: Respite {} vs redis-server {} ({} ×); a full handshake costs \
                 Respite {} µs of CPU and redis-server {} µs ({} ×).\n",
                r.per_s.map_or_else(|| "–".into(), fmt_rps),
                d.per_s.map_or_else(|| "–".into(), fmt_rps),
                fmt_ratio(r.per_s, d.per_s),
                fmt_cpu(r.handshake_cpu_us),
                fmt_cpu(d.handshake_cpu_us),
                fmt_ratio(r.handshake_cpu_us, d.handshake_cpu_us),
            );
        }
        let counted: Vec<String> = o
            .handshakes
            .iter()
            .filter_map(|h| {
                h.respite_handshakes.map(|n| {
                    format!(
                        "rep {} {}: {} ({} counted here, warm-up not)",
                        h.rep,
                        h.target,
                        fmt_rps(n as f64),
                        fmt_rps(h.connections as f64)
                    )
                })
            })
            .collect();
        if !counted.is_empty() {
            let _ = writeln!(
                s,
                "Respite's listener `ssl.handshake` over each loop (warm-up included): {}.\n",
                counted.join("; ")
            );
        }
    }
    if !o.respite_ssl_stats.is_empty() {
        let _ = writeln!(s, "## Respite's ssl stats at the end\n");
        let _ = writeln!(s, "| stat | value |");
        let _ = writeln!(s, "|---|--:|");
        for (name, v) in &o.respite_ssl_stats {
            let _ = writeln!(s, "| `{name}` | {} |", fmt_rps(*v as f64));
        }
        s.push('\n');
    }
    s.push_str(&table::failures(b));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_selection() {
        let ids = |l| {
            let (c, h) = select(l).unwrap();
            (c.iter().map(|c| c.id).collect::<Vec<_>>(), h)
        };
        assert_eq!(ids(None), (CASES.to_vec(), true));
        assert_eq!(ids(Some("all")), (CASES.to_vec(), true));
        assert_eq!(
            ids(Some("set-p16, get-p1")),
            (vec!["get-p1", "set-p16"], false)
        );
        assert_eq!(ids(Some("handshake")), (vec![], true));
        assert!(select(Some("mget10-p1")).is_err());
        let (c, _) = select(None).unwrap();
        assert!(c.iter().all(|c| c.connections == 50));
    }

    #[test]
    fn config_has_three_listeners_and_two_clusters() {
        let pki = Pki {
            ca: "/d/ca.pem".into(),
            server_cert: "/d/server.pem".into(),
            server_key: "/d/server.key".into(),
            client_cert: "/d/client.pem".into(),
            client_key: "/d/client.key".into(),
        };
        let t = respite_toml(9000, [9001, 9002, 9003], 7000, 7001, &pki);
        assert_eq!(t.matches("[[listeners]]").count(), 3);
        assert_eq!(t.matches("[listeners.tls]").count(), 2);
        assert_eq!(t.matches("[clusters.tls]").count(), 1);
        assert!(t.contains("hosts = [\"127.0.0.1:7001\"]\n[clusters.tls]"));
        assert!(t.contains("require_client_certificate = true"));
    }

    #[test]
    fn ssl_stats_are_parsed() {
        let text = "cluster.tls.ssl.handshake: 3\nredis.tls.ssl.handshake: 120\n\
                    redis.tls.ssl.connection_error: 0\nredis.plain.downstream_cx_total: 9\n";
        let s = parse_ssl_stats(text);
        assert_eq!(s.len(), 3);
        assert_eq!(stat(&s, "redis.tls.ssl.handshake"), Some(120));
        assert_eq!(stat(&s, "redis.plain.downstream_cx_total"), None);
    }

    #[test]
    fn upstream_writes_are_summed_per_cluster() {
        let text = "cluster.tls.host.127.0.0.1:7001.flush_total: 10\n\
                    cluster.tls.host.127.0.0.1:7001.rq_total: 45\n\
                    cluster.plain.host.127.0.0.1:7000.rq_total: 99\n\
                    cluster.tls.upstream_rq_total: 45\n";
        assert_eq!(parse_upstream_writes(text, "tls"), (45, 10));
        assert_eq!(parse_upstream_writes(text, "plain"), (99, 0));
        assert_eq!(upstream_cluster(RESPITE_TLS_DOWN), Some("plain"));
        assert_eq!(upstream_cluster(DIRECT_TLS), None);
    }

    #[test]
    fn certificates_verify() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path()).unwrap();
        assert!(pki.client(false).is_ok());
        for p in [&pki.ca, &pki.server_cert, &pki.client_key] {
            assert!(
                std::fs::read_to_string(p)
                    .unwrap()
                    .starts_with("-----BEGIN")
            );
        }
    }
}

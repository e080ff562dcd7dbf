//! eBPF sockmap acceleration of loopback hops, against its CLI
//! (`respite-control --sockmap …`, `respite-control sockmap off|on|status`), admin
//! (`GET /sockmap`) and data plane stats (`sockmap.*`).
//!
//! The tests run one at a time ([`LOCK`]), each with its own cgroup v2, its own `--admin` port
//! and its own bpffs mount (a fresh set of pinned maps, so its kill switch, filter and counters
//! are its own; `RESPITE_SOCKMAP_BPFFS` overrides), and compare counter snapshots. Processes whose
//! sockets must be redirected are spawned inside the test cgroup; this test process never moves
//! (other tests of the binary), so the clients that must be redirected run as a child: this
//! binary re-executed on one of the `child_*` entry points (ignored tests that do nothing unless
//! [`CHILD_ENV`] is set).
//!
//! Without root or cgroup v2, or when `GET /sockmap` says `unavailable` (no clang-built eBPF,
//! old kernel…), a test prints why and returns, unless `RESPITE_REQUIRE_SOCKMAP=1` (CI here):
//! then it fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use respite_tests::sockmap::{
    self, Bpffs, Counters, Proc, SockmapControl, TestCgroup, dataplane_stats, missing_privileges,
    ports_of, proxy_config, redis_in, respite_in, skip,
};
use respite_tests::{RawClient, RedisServer, free_port, target_dir, wait_for_port};

/// Serializes the tests of this file: they share the pinned maps and counters.
static LOCK: Mutex<()> = Mutex::new(());

/// Set (to the entry point's name) in a re-executed child client.
const CHILD_ENV: &str = "RESPITE_SOCKMAP_CHILD";

/// How long one step may take before a test gives up (2 shared, noisy cores).
const T: Duration = Duration::from_secs(15);

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A small counter for this process's test cgroups (`respite-test-<pid>-<n>`).
fn next_cgroup() -> TestCgroup {
    static N: AtomicU64 = AtomicU64::new(0);
    TestCgroup::create(N.fetch_add(1, Ordering::Relaxed) as u32)
}

/// Waits until `GET /sockmap` settles; true when the sockmap is enabled. `unavailable` skips
/// (or fails under `RESPITE_REQUIRE_SOCKMAP=1`); anything else fails.
fn enabled_or_skip(ctl: &SockmapControl) -> bool {
    let doc = ctl.settled();
    match doc["state"].as_str() {
        Some("enabled") => {
            println!(
                "sockmap enabled: self_test {} ports {}",
                doc["self_test"],
                ports_of(&doc).len()
            );
            assert_eq!(doc["self_test"]["ok"], true, "{doc}");
            true
        }
        Some("unavailable") => {
            skip(&format!(
                "GET /sockmap says unavailable: {} (log: {})",
                doc["reason"],
                ctl.proc.log()
            ));
            false
        }
        _ => panic!(
            "GET /sockmap 15 s after start with --sockmap: {doc}\nlog:\n{}",
            ctl.proc.log()
        ),
    }
}

fn sockmap_flags(cg: &TestCgroup, bpffs: &Bpffs, more: &[&str]) -> Vec<String> {
    let mut f = vec![
        "--sockmap".to_string(),
        "--sockmap-cgroup".to_string(),
        cg.arg(),
        "--bpffs".to_string(),
        bpffs.arg(),
    ];
    f.extend(more.iter().map(|s| s.to_string()));
    f
}

/// Polls `f` every 50 ms up to `timeout`; the last value and how long it took.
fn poll<V>(timeout: Duration, mut f: impl FnMut() -> Option<V>) -> Option<(V, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some((v, start.elapsed()));
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The newest compiled integration test binary `name` in target/release/deps.
fn newest_test_binary(name: &str) -> Option<PathBuf> {
    let deps = target_dir().join("release").join("deps");
    std::fs::read_dir(&deps)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let f = e.file_name().to_string_lossy().to_string();
            f.strip_prefix(&format!("{name}-"))
                .is_some_and(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max_by_key(|(m, _)| *m)
        .map(|(_, p)| p)
}

/// This binary re-executed inside `cg` on the ignored entry point `entry`, with `env`.
fn child(cg: &TestCgroup, entry: &str, env: &[(&str, String)]) -> Proc {
    let exe = std::env::current_exe().expect("current_exe");
    let args: Vec<String> = [
        entry,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cmd = cg.command(exe, &args);
    cmd.env(CHILD_ENV, entry);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc::spawn(entry, cmd)
}

/// Waits for a child client to finish; panics unless it exited 0 and printed its `RESULT`
/// line, which is returned.
fn child_result(p: &mut Proc, timeout: Duration) -> String {
    let status = p.wait(timeout);
    let log = p.log();
    assert!(
        status.is_some_and(|s| s.success()),
        "{} ended with {status:?}:\n{log}",
        p.name
    );
    // libtest prints "test <name> ... " first, on the same line.
    log.lines()
        .find_map(|l| l.find("RESULT ").map(|at| l[at..].to_string()))
        .unwrap_or_else(|| panic!("{} printed no RESULT:\n{log}", p.name))
}

/// `redis-benchmark` against 127.0.0.1:`port`, spawned inside `cg`.
fn benchmark_in(cg: &TestCgroup, port: u16, requests: u32) -> Proc {
    let args: Vec<String> = [
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-n",
        &requests.to_string(),
        "-c",
        "8",
        "-P",
        "4",
        "-t",
        "set,get",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Proc::spawn("redis-benchmark", cg.command("redis-benchmark", &args))
}

fn run_benchmark(cg: &TestCgroup, port: u16, requests: u32) {
    let mut b = benchmark_in(cg, port, requests);
    let status = b.wait(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "redis-benchmark on {port}: {status:?}: {}",
        b.log()
    );
    println!("redis-benchmark -p {port}: {}", last_line(&b.log()));
}

/// The last non-empty line of `text` (redis-benchmark's summary; it ends lines with `\r`).
fn last_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// Checks that `a → b` moved no failure counter and prints both.
fn assert_no_failures(what: &str, a: &Counters, b: &Counters) {
    println!("{what}: before {a:?}\n{what}: after  {b:?}");
    assert_eq!(
        b.redirect_fail, a.redirect_fail,
        "{what}: redirect_fail grew: {a:?} → {b:?}"
    );
}

/// The whole proxy of cases 2 and 3: two redis-servers and Respite (started empty) inside a
/// fresh cgroup, and `respite-control --config F --dataplane SOCK --sockmap
/// --sockmap-upstreams --sockmap-cgroup CG`. The control process starts first and Respite
/// only once the sockmap is enabled, so every connection (client and upstream) is made after
/// the programs are attached.
struct Stack {
    port: u16,
    dp_admin: u16,
    backends: Vec<u16>,
    // Drop order: processes first, the cgroup last.
    ctl: SockmapControl,
    dp: Proc,
    _redis: Vec<Proc>,
    _sock_dir: tempfile::TempDir,
    bpffs: Bpffs,
    cg: TestCgroup,
}

impl Stack {
    fn start(upstreams: bool) -> Option<Stack> {
        let cg = next_cgroup();
        let bpffs = Bpffs::new();
        let (r1, p1) = redis_in(&cg);
        let (r2, p2) = redis_in(&cg);
        let sock_dir = tempfile::tempdir().expect("tempdir");
        let sock = sock_dir.path().join("control.sock");
        let port = free_port();
        let backends = vec![format!("127.0.0.1:{p1}"), format!("127.0.0.1:{p2}")];
        let extra: &[&str] = if upstreams {
            &["--sockmap-upstreams"]
        } else {
            &[]
        };
        let ctl = SockmapControl::start(
            &proxy_config(port, &backends),
            Some(&sock),
            &sockmap_flags(&cg, &bpffs, extra),
        );
        if !enabled_or_skip(&ctl) {
            return None;
        }
        let (dp, dp_admin) = respite_in(&cg, &sock);
        assert!(
            wait_for_port(port, T),
            "the config was not pushed to the data plane: control log:\n{}\nrespite log:\n{}",
            ctl.proc.log(),
            dp.log()
        );
        let mut want = vec![port];
        if upstreams {
            want.extend([p1, p2]);
        }
        let ports = poll(Duration::from_secs(5), || {
            let ports = ctl.ports();
            want.iter().all(|p| ports.contains(p)).then_some(ports)
        });
        assert!(
            ports.is_some(),
            "GET /sockmap ports lack {want:?}: {}",
            ctl.sockmap()
        );
        Some(Stack {
            port,
            dp_admin,
            backends: vec![p1, p2],
            ctl,
            dp,
            _redis: vec![r1, r2],
            _sock_dir: sock_dir,
            bpffs,
            cg,
        })
    }
}

// ---- 1. the core suites with sockmap on ------------------------------------------------------

#[test]
fn core_suites_pass_inside_a_sockmap_cgroup_and_take_the_redirect_path() {
    let _g = lock();
    if let Some(reason) = missing_privileges() {
        return skip(&reason);
    }
    // The integration binary's proxy, routes and mirror modules, each in its own process.
    let bin = newest_test_binary("integration").unwrap_or_else(|| {
        panic!(
            "no compiled integration test binary in target/release/deps: run `cargo test \
             --release -p respite-tests --no-run --test integration` first"
        )
    });
    let suites = ["proxy", "routes", "mirror"];
    let cg = next_cgroup();
    let bpffs = Bpffs::new();
    let ctl = SockmapControl::start(
        &proxy_config(free_port(), &[format!("127.0.0.1:{}", free_port())]),
        None,
        &sockmap_flags(&cg, &bpffs, &["--sockmap-ports", "1024-65535"]),
    );
    if !enabled_or_skip(&ctl) {
        return;
    }
    let ports: std::collections::HashSet<u16> = ctl.ports().into_iter().collect();
    assert!(
        (1024..=65535u16).all(|p| ports.contains(&p)),
        "GET /sockmap ports do not cover 1024-65535 ({} ports)",
        ports.len()
    );
    // This process is outside the cgroup: its GET's reply from respite-control (inside, on a
    // filtered port) takes TCP and counts one redirect_fail, so it comes before `before`.
    let before_http = ctl.counters();
    let before = bpffs.status();
    for name in suites {
        let started = Instant::now();
        let args = [
            format!("{name}::"),
            "--test-threads".to_string(),
            "2".to_string(),
        ];
        let out = cg.command(&bin, &args).output().expect("run suite");
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text
            .lines()
            .rfind(|l| l.starts_with("test result:"))
            .unwrap_or("");
        println!(
            "suite {name} ({}) in the cgroup: {summary} [{:.1?}]",
            bin.display(),
            started.elapsed()
        );
        assert!(
            out.status.success(),
            "suite {name} failed with sockmap on:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let after = bpffs.status();
        println!(
            "after {name}: redirect_total +{} inserts +{} redirect_fail +{} insert_fail +{}",
            after.redirect_total - before.redirect_total,
            after.inserts - before.inserts,
            after.redirect_fail - before.redirect_fail,
            after.insert_fail - before.insert_fail
        );
    }
    let after = bpffs.status();
    // GET /sockmap shows the counters of respite-control's last tick (once a second).
    let after_http = poll(Duration::from_secs(3), || {
        let c = ctl.counters();
        (c.redirect_total >= after.redirect_total).then_some(c)
    })
    .map(|(c, _)| c)
    .unwrap_or_else(|| ctl.counters());
    assert_no_failures("status", &before, &after);
    assert!(
        after.redirect_total > before.redirect_total,
        "no redirect while the suites ran: {before:?} → {after:?}"
    );
    assert!(after.inserts > before.inserts, "{before:?} → {after:?}");
    assert!(bpffs.enabled(), "{after:?}");
    // GET /sockmap reads the same maps: its numbers grew alike.
    assert!(
        after_http.redirect_total >= after.redirect_total
            && after_http.redirect_total > before_http.redirect_total,
        "GET /sockmap: {before_http:?} → {after_http:?}; status said {after:?}"
    );
    // Not compared: redirect_fail over HTTP, since each GET from this process (outside the
    // cgroup) to respite-control (inside, on a filtered port) adds one by design (docs/ebpf.md).
}

// ---- 2. integrity under load ---------------------------------------------------------------

/// Value sizes every integrity client writes: 0, 1, and both sides of 1 KiB, 4 KiB, 16 KiB,
/// 64 KiB.
const SMALL: &[usize] = &[
    0, 1, 2, 100, 1023, 1024, 1025, 4095, 4096, 4097, 16384, 65535, 65536, 65537,
];
/// Large sizes, one per client for the first `3 * LARGE.len()` clients: both sides of 1 MiB,
/// 4 MiB, 8 MB and 8 MiB.
const LARGE: &[usize] = &[
    1_048_575, 1_048_576, 1_048_577, 4_194_304, 8_000_000, 8_388_608,
];

#[test]
fn values_0_to_8_mib_survive_100_pipelined_clients_through_both_redirected_hops() {
    let _g = lock();
    if let Some(reason) = missing_privileges() {
        return skip(&reason);
    }
    let Some(stack) = Stack::start(true) else {
        return;
    };
    let before = stack.bpffs.status();
    let started = Instant::now();
    let mut clients = child(
        &stack.cg,
        "child_integrity_clients",
        &[
            ("SOCKMAP_PORT", stack.port.to_string()),
            ("SOCKMAP_CLIENTS", "100".into()),
            ("SOCKMAP_ROUNDS", "2".into()),
        ],
    );
    let result = child_result(&mut clients, Duration::from_secs(150));
    println!("{result} [{:.1?}]", started.elapsed());
    let after = stack.bpffs.status();
    assert_no_failures("integrity", &before, &after);
    assert!(
        after.redirect_total > before.redirect_total,
        "integrity: no redirect: {before:?} → {after:?}"
    );

    // The upstream hop alone: a client outside the cgroup is never redirected (its socket is
    // not in the map), so redirects now come from Respite ↔ redis only.
    let hop = stack.bpffs.status();
    let mut c = RawClient::connect(&format!("127.0.0.1:{}", stack.port));
    for i in 0..200 {
        let key = format!("upstream-hop-{i}");
        let v = vec![b'u'; i * 37];
        assert_eq!(c.cmd(&[b"SET", key.as_bytes(), &v]), b"+OK\r\n");
        assert_eq!(c.cmd(&[b"GET", key.as_bytes()]), bulk(&v));
    }
    let hop_after = stack.bpffs.status();
    println!(
        "upstream hop only: redirect_total +{} (sockets {})",
        hop_after.redirect_total - hop.redirect_total,
        hop_after.sockets
    );
    assert!(
        hop_after.redirect_total > hop.redirect_total,
        "Respite → redis was not redirected with --sockmap-upstreams (backends {:?}): {hop:?} → \
         {hop_after:?}",
        stack.backends
    );
    // Respite's side of this one connection from outside the cgroup is in the map but its
    // peer is not: its first reply takes TCP, counted once as redirect_fail.
    assert!(
        hop_after.redirect_fail - hop.redirect_fail <= 1,
        "upstream hop: {hop:?} → {hop_after:?}"
    );

    // respite-control pushes its counters to the data plane once a second.
    let pushed = poll(Duration::from_secs(5), || {
        let stats = dataplane_stats(stack.dp_admin);
        let total = *stats.get("sockmap.redirect_total")?;
        (total > 0 && stats.get("sockmap.enabled") == Some(&1)).then_some(stats)
    });
    let (stats, took) = pushed.unwrap_or_else(|| {
        panic!(
            "the data plane's /stats has no sockmap.redirect_total > 0 and sockmap.enabled 1: \
             {:?}\ncontrol log:\n{}",
            dataplane_stats(stack.dp_admin)
                .into_iter()
                .filter(|(k, _)| k.starts_with("sockmap."))
                .collect::<Vec<_>>(),
            stack.ctl.proc.log()
        )
    });
    let sockmap_stats: Vec<_> = stats
        .iter()
        .filter(|(k, _)| k.starts_with("sockmap."))
        .collect();
    println!("data plane /stats after {took:.1?}: {sockmap_stats:?}");
    assert_eq!(stats.get("sockmap.redirect_fail").copied(), Some(0));
}

/// Deterministic bytes for (`seed`, `len`): xorshift64.
fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// FNV-1a 64 of `b`.
fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn bulk(v: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

/// The payload of a bulk string reply, or a description of what came instead.
fn bulk_payload(reply: &[u8]) -> Result<&[u8], String> {
    let show = || String::from_utf8_lossy(&reply[..reply.len().min(80)]).to_string();
    let nl = reply
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("not a bulk reply: {}", show()))?;
    if reply.first() != Some(&b'$') || nl < 2 {
        return Err(format!("not a bulk reply: {}", show()));
    }
    let len: usize = std::str::from_utf8(&reply[1..nl - 1])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad bulk length: {}", show()))?;
    reply
        .get(nl + 1..nl + 1 + len)
        .ok_or_else(|| format!("short bulk reply: {}", show()))
}

/// Joins client threads; returns each failed one's error (a panic included).
fn join_clients(threads: Vec<std::thread::JoinHandle<Result<(), String>>>) -> Vec<String> {
    threads
        .into_iter()
        .filter_map(|t| match t.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some("a client thread panicked".into()),
        })
        .collect()
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Child entry point of case 2: `SOCKMAP_CLIENTS` threads, each on its own connection to
/// 127.0.0.1:`SOCKMAP_PORT`, `SOCKMAP_ROUNDS` times: one pipelined write of SETs of every
/// [`SMALL`] size (and one [`LARGE`] size for the first clients), then one pipelined write of
/// the GETs; every value read back must have the written length, checksum and bytes.
#[test]
#[ignore = "child-process entry point of the sockmap tests"]
fn child_integrity_clients() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("child_integrity_clients") {
        return;
    }
    let port = env_num("SOCKMAP_PORT", 0);
    let clients = env_num("SOCKMAP_CLIENTS", 100);
    let rounds = env_num("SOCKMAP_ROUNDS", 2);
    let bytes = Arc::new(AtomicU64::new(0));
    let values = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (bytes, values) = (bytes.clone(), values.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut sizes = SMALL.to_vec();
                if (i as usize) < 3 * LARGE.len() {
                    sizes.push(LARGE[i as usize % LARGE.len()]);
                }
                let mut c = RawClient::try_connect(&format!("127.0.0.1:{port}"))
                    .map_err(|e| format!("client {i}: connect: {e}"))?;
                for round in 0..rounds {
                    let written: Vec<(String, Vec<u8>, u64)> = sizes
                        .iter()
                        .enumerate()
                        .map(|(j, &len)| {
                            let v = value((i << 32) ^ (round << 16) ^ j as u64, len);
                            let sum = checksum(&v);
                            (format!("sm:{i}:{j}"), v, sum)
                        })
                        .collect();
                    let sets: Vec<Vec<Vec<u8>>> = written
                        .iter()
                        .map(|(k, v, _)| vec![b"SET".to_vec(), k.clone().into_bytes(), v.clone()])
                        .collect();
                    for (n, r) in c.pipeline(&sets).iter().enumerate() {
                        if r != b"+OK\r\n" {
                            return Err(format!(
                                "client {i} round {round}: SET {} answered {:?}",
                                written[n].0,
                                String::from_utf8_lossy(r)
                            ));
                        }
                    }
                    let gets: Vec<Vec<Vec<u8>>> = written
                        .iter()
                        .map(|(k, _, _)| vec![b"GET".to_vec(), k.clone().into_bytes()])
                        .collect();
                    for (n, r) in c.pipeline(&gets).iter().enumerate() {
                        let (key, want, sum) = &written[n];
                        let got = bulk_payload(r)
                            .map_err(|e| format!("client {i} round {round}: GET {key}: {e}"))?;
                        if got.len() != want.len() || checksum(got) != *sum || got != want {
                            let at = got.iter().zip(want.iter()).position(|(a, b)| a != b);
                            return Err(format!(
                                "client {i} round {round}: GET {key}: {} bytes, checksum {:x}, \
                                 want {} bytes, checksum {sum:x}; first difference at {at:?}",
                                got.len(),
                                checksum(got),
                                want.len()
                            ));
                        }
                        bytes.fetch_add(2 * want.len() as u64, Ordering::Relaxed);
                        values.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            })
        })
        .collect();
    let errors = join_clients(threads);
    assert!(
        errors.is_empty(),
        "{} of {clients} clients failed:\n{}",
        errors.len(),
        errors.join("\n")
    );
    println!(
        "RESULT clients={clients} rounds={rounds} values_verified={} bytes_written_and_read={}",
        values.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed)
    );
    let _ = std::io::stdout().flush();
}

// ---- 3. off and on under traffic -----------------------------------------------------------

#[test]
fn switching_off_and_on_under_traffic_loses_no_request() {
    let _g = lock();
    if let Some(reason) = missing_privileges() {
        return skip(&reason);
    }
    let Some(stack) = Stack::start(true) else {
        return;
    };
    let stop_dir = tempfile::tempdir().expect("tempdir");
    let stop = stop_dir.path().join("stop");
    let mut clients = child(
        &stack.cg,
        "child_toggle_clients",
        &[
            ("SOCKMAP_PORT", stack.port.to_string()),
            ("SOCKMAP_STOP", stop.display().to_string()),
            ("SOCKMAP_LONG", "6".into()),
            ("SOCKMAP_RECONNECT", "4".into()),
        ],
    );
    // Traffic flows and is redirected before the first switch.
    let first = stack.bpffs.status();
    let flowing = poll(T, || {
        let now = stack.bpffs.status();
        (now.redirect_total > first.redirect_total).then_some(now)
    });
    assert!(
        flowing.is_some(),
        "no redirect with the clients running: {first:?} → {:?}\nclients:\n{}",
        stack.bpffs.status(),
        clients.log()
    );
    for cycle in 0..3 {
        stack.bpffs.switch("off");
        let off_at = Instant::now();
        // `off` acts at once in the kernel; allow connections being established to finish.
        std::thread::sleep(Duration::from_millis(300));
        let a = stack.bpffs.status();
        assert!(
            !stack.bpffs.enabled(),
            "cycle {cycle}: status after off: {a:?}"
        );
        let state = poll(Duration::from_secs(3), || {
            let doc = stack.ctl.sockmap();
            (doc["state"] == "disabled").then_some(())
        });
        assert!(
            state.is_some(),
            "cycle {cycle}: GET /sockmap after off: {}",
            stack.ctl.sockmap()
        );
        std::thread::sleep(Duration::from_millis(1000));
        let b = stack.bpffs.status();
        println!(
            "cycle {cycle}: off for {:.1?}: redirect_total {} → {}, sockets {}",
            off_at.elapsed(),
            a.redirect_total,
            b.redirect_total,
            b.sockets
        );
        // Off records no new socket; connections recorded before keep their redirect until they
        // close (moving them to TCP mid-stream breaks blocking readers: docs/ebpf.md).
        assert_eq!(
            b.inserts, a.inserts,
            "cycle {cycle}: sockets recorded while off: {a:?} → {b:?}"
        );

        stack.bpffs.switch("on");
        let on_at = Instant::now();
        let c = stack.bpffs.status();
        assert!(
            stack.bpffs.enabled(),
            "cycle {cycle}: status after on: {c:?}"
        );
        // The reconnecting clients' new connections are redirected again.
        let back = poll(T, || {
            let now = stack.bpffs.status();
            (now.redirect_total > c.redirect_total && now.inserts > c.inserts).then_some(now)
        });
        let (d, took) = back.unwrap_or_else(|| {
            panic!(
                "cycle {cycle}: no redirect of new connections after on: {c:?} → {:?}\n\
                 GET /sockmap: {}",
                stack.bpffs.status(),
                stack.ctl.sockmap()
            )
        });
        println!(
            "cycle {cycle}: on: redirects again after {took:.1?} (redirect_total +{}, inserts +{})",
            d.redirect_total - c.redirect_total,
            d.inserts - c.inserts
        );
        assert!(on_at.elapsed() < T);
        assert!(clients.alive(), "clients stopped:\n{}", clients.log());
    }
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, b"stop").expect("write stop file");
    let result = child_result(&mut clients, T);
    println!("{result}");
    let end = stack.ctl.sockmap();
    assert_eq!(end["state"], "enabled", "{end}");
    assert_no_failures("toggle", &first, &stack.bpffs.status());
}

/// Child entry point of case 3: `SOCKMAP_LONG` clients on one connection each and
/// `SOCKMAP_RECONNECT` clients that reconnect every 150-300 ms, all sending pipelined
/// SET/GET pairs to 127.0.0.1:`SOCKMAP_PORT` and checking every reply, until the file
/// `SOCKMAP_STOP` exists. Any error or wrong reply fails it.
#[test]
#[ignore = "child-process entry point of the sockmap tests"]
fn child_toggle_clients() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("child_toggle_clients") {
        return;
    }
    let port = env_num("SOCKMAP_PORT", 0);
    let stop = PathBuf::from(std::env::var("SOCKMAP_STOP").unwrap_or_default());
    let long = env_num("SOCKMAP_LONG", 6);
    let reconnect = env_num("SOCKMAP_RECONNECT", 4);
    let requests = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..long + reconnect)
        .map(|id| {
            let (stop, requests, connections) =
                (stop.clone(), requests.clone(), connections.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let reconnects = id >= long;
                let mut n = 0u64;
                while !stop.exists() {
                    let mut c = RawClient::try_connect(&format!("127.0.0.1:{port}"))
                        .map_err(|e| format!("client {id}: connect: {e}"))?;
                    // Blocking reads without a timeout, as redis-py's default: the kind of
                    // reader that got EAGAIN when the first kill switch moved live connections
                    // to TCP (the test would then fail with "Resource temporarily unavailable").
                    c.stream()
                        .set_read_timeout(None)
                        .map_err(|e| format!("client {id}: {e}"))?;
                    connections.fetch_add(1, Ordering::Relaxed);
                    let batches = if reconnects { 3 } else { u64::MAX };
                    let mut b = 0;
                    while b < batches && !stop.exists() {
                        toggle_batch(&mut c, id, &mut n)?;
                        requests.fetch_add(20, Ordering::Relaxed);
                        b += 1;
                    }
                    drop(c);
                    if reconnects {
                        std::thread::sleep(Duration::from_millis(150 + (n * 7919) % 150));
                    }
                }
                Ok(())
            })
        })
        .collect();
    let errors = join_clients(threads);
    assert!(errors.is_empty(), "errors:\n{}", errors.join("\n"));
    println!(
        "RESULT requests_verified={} connections={}",
        requests.load(Ordering::Relaxed),
        connections.load(Ordering::Relaxed)
    );
    let _ = std::io::stdout().flush();
}

/// One pipelined write of 10 SET/GET pairs (values up to ~2 KB, and one of up to 1 MiB, so the
/// reader blocks mid-reply while more bytes arrive: a connection moved to TCP under a blocking
/// reader still in the map gets EAGAIN there, which the first kill switch did) and the check of
/// all 20 replies.
fn toggle_batch(c: &mut RawClient, id: u64, n: &mut u64) -> Result<(), String> {
    let mut buf = Vec::new();
    let mut want = Vec::new();
    for i in 0..10 {
        *n += 1;
        let key = format!("tg:{id}:{}", *n % 64);
        let len = if i == 0 {
            (*n as usize * 7919) % (1 << 20)
        } else {
            (*n as usize * 131) % 2000
        };
        let v = value((id << 40) ^ *n, len);
        RawClient::encode_into(&mut buf, &[b"SET", key.as_bytes(), &v]);
        RawClient::encode_into(&mut buf, &[b"GET", key.as_bytes()]);
        want.push((key.clone(), b"+OK\r\n".to_vec()));
        want.push((key, bulk(&v)));
    }
    c.stream()
        .write_all(&buf)
        .map_err(|e| format!("client {id}: write: {e}"))?;
    for (key, w) in want {
        let r = c
            .try_read_reply()
            .map_err(|e| format!("client {id}: reply for {key}: {e}"))?;
        if r != w {
            return Err(format!(
                "client {id}: {key}: got {:?}, want {:?}",
                String::from_utf8_lossy(&r[..r.len().min(60)]),
                String::from_utf8_lossy(&w[..w.len().min(60)])
            ));
        }
    }
    Ok(())
}

// ---- 4. traffic on other ports -------------------------------------------------------------

#[test]
fn loopback_traffic_on_a_port_outside_the_filter_is_never_redirected() {
    let _g = lock();
    if let Some(reason) = missing_privileges() {
        return skip(&reason);
    }
    // Respite's listener is the only port in the filter (no --sockmap-upstreams, no extra).
    let Some(stack) = Stack::start(false) else {
        return;
    };
    let ports = stack.ctl.ports();
    assert_eq!(ports, vec![stack.port], "GET /sockmap ports");
    let other = stack.backends[1];
    let before = stack.bpffs.status();
    let mut bench = benchmark_in(&stack.cg, other, 50_000);
    let mut max_sockets = before.sockets;
    let mut samples = 0;
    while bench.alive() {
        max_sockets = max_sockets.max(stack.bpffs.status().sockets);
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = stack.bpffs.status();
    println!(
        "redis-benchmark straight to redis on {other}: {}; sockets max {max_sockets} over \
         {samples} samples",
        last_line(&bench.log())
    );
    assert!(
        bench.wait(T).is_some_and(|s| s.success()),
        "{}",
        bench.log()
    );
    assert!(samples > 0, "redis-benchmark ended before a sample");
    assert_no_failures("port outside the filter", &before, &after);
    assert_eq!(
        (after.redirect_total, after.inserts, max_sockets),
        (before.redirect_total, before.inserts, before.sockets),
        "traffic on {other} (not in the filter {ports:?}) touched the sockmap: {before:?} → \
         {after:?}"
    );
    let http = poll(Duration::from_secs(3), || {
        let c = stack.ctl.counters();
        (c.redirect_total == after.redirect_total && c.sockets == after.sockets).then_some(c)
    });
    assert!(
        http.is_some(),
        "GET /sockmap {:?} disagrees with status {after:?}",
        stack.ctl.counters()
    );

    // The same load to Respite's port is redirected: the counters can move.
    run_benchmark(&stack.cg, stack.port, 20_000);
    let matched = stack.bpffs.status();
    println!(
        "redis-benchmark through Respite on {}: redirect_total +{}, inserts +{}",
        stack.port,
        matched.redirect_total - after.redirect_total,
        matched.inserts - after.inserts
    );
    assert!(matched.redirect_total > after.redirect_total, "{matched:?}");
    assert_no_failures("port in the filter", &after, &matched);
}

// ---- 5. the filter follows the config ------------------------------------------------------

#[test]
fn the_port_filter_follows_a_changed_config_file_after_sighup() {
    let _g = lock();
    if let Some(reason) = missing_privileges() {
        return skip(&reason);
    }
    let Some(stack) = Stack::start(false) else {
        return;
    };
    let old = stack.port;
    let new = free_port();
    let backends: Vec<String> = stack
        .backends
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    std::fs::write(&stack.ctl.config, proxy_config(new, &backends)).expect("rewrite config");
    stack.ctl.proc.signal("HUP");
    let followed = poll(T, || {
        let ports = stack.ctl.ports();
        (ports.contains(&new) && !ports.contains(&old)).then_some(ports)
    });
    let (ports, took) = followed.unwrap_or_else(|| {
        panic!(
            "GET /sockmap ports did not become the new listener {new} (old {old}): {}\nlog:\n{}",
            stack.ctl.sockmap(),
            stack.ctl.proc.log()
        )
    });
    println!("filter {ports:?} {took:.1?} after SIGHUP");
    assert!(
        took < Duration::from_secs(5),
        "the filter took {took:?} to follow"
    );
    assert!(
        wait_for_port(new, T),
        "the data plane did not get the push: {}",
        stack.dp.log()
    );
    let before = stack.bpffs.status();
    run_benchmark(&stack.cg, new, 10_000);
    let after = stack.bpffs.status();
    println!(
        "new port {new}: redirect_total +{}, inserts +{}",
        after.redirect_total - before.redirect_total,
        after.inserts - before.inserts
    );
    assert!(
        after.redirect_total > before.redirect_total,
        "connections to the new port {new} were not redirected: {before:?} → {after:?}"
    );
    assert_no_failures("new port", &before, &after);
}

// ---- 6. without privileges -----------------------------------------------------------------

#[test]
fn without_privileges_it_logs_one_line_and_pushes_configs() {
    let _g = lock();
    let backend = RedisServer::start();
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let sock = sock_dir.path().join("control.sock");
    let dp = respite_tests::Respite::start_empty(&sock);
    // An unprivileged control process must reach the data plane's socket.
    world_accessible(sock_dir.path(), 0o755);
    world_accessible(&sock, 0o666);
    let unprivileged: Option<&[&str]> = if sockmap::is_root() {
        Some(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
    } else {
        None
    };
    let port = free_port();
    let ctl = SockmapControl::start_as(
        &proxy_config(port, &[backend.addr()]),
        Some(&sock),
        &["--sockmap".to_string()],
        unprivileged,
    );
    let doc = ctl.settled();
    println!("GET /sockmap as nobody: {doc}");
    assert_eq!(doc["state"], "unavailable", "{doc}");
    assert!(
        doc["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{doc}"
    );
    assert!(
        wait_for_port(port, T),
        "no push without privileges: {}",
        ctl.proc.log()
    );
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), b"+OK\r\n");
    assert_eq!(backend.raw().cmd(&[b"GET", b"k"]), b"$1\r\nv\r\n");

    // A second push (SIGHUP re-reads the file) works too, and the line is not repeated.
    let port2 = free_port();
    std::fs::write(&ctl.config, proxy_config(port2, &[backend.addr()])).expect("rewrite");
    ctl.proc.signal("HUP");
    assert!(
        wait_for_port(port2, T),
        "SIGHUP did not push: {}",
        ctl.proc.log()
    );
    std::thread::sleep(Duration::from_millis(1500));
    let log = ctl.proc.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sockmap unavailable: "))
        .collect();
    println!("{lines:?}");
    assert_eq!(
        lines.len(),
        1,
        "want one 'sockmap unavailable:' line:\n{log}"
    );
    let pushes = dp.stat("control_socket.push_accepted");
    assert!(pushes >= 2, "{pushes} pushes accepted: {}", dp.log());
}

fn world_accessible(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

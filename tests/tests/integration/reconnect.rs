//! Reconnects and upstream resilience: the per-host connection rate limit under a
//! rolling restart, self-healing pools over thousands of backend kill/restart cycles, TCP
//! keepalive on idle upstream connections, and `max_pending_requests` / hung-host detection.
//! Measured values are printed (`--nocapture`).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, START_TIMEOUT, free_port};

const CLUSTER: &str = "cluster.cache";

/// Error replies a client may see while its key's backend is down or reconnecting.
const DOWN_ERRORS: [&[u8]; 2] = [b"-no upstream host\r\n", b"-upstream failure\r\n"];
const OVERFLOW: &[u8] =
    b"-upstream overflow: too many requests queued for this host (max_pending_requests)\r\n";

// ---- a redis-server whose connections from this test are counted ---------------------------

/// A `redis-server` on a fixed port that can be killed and started again quickly, counting the
/// TCP connections this test itself makes to the current instance (readiness probes, samplers),
/// so that `total_connections_received` minus [`Backend::own`] is what the proxy opened.
struct Backend {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Connections this test made to the running instance.
    own: u64,
}

impl Backend {
    fn start() -> Backend {
        let mut b = Backend {
            port: free_port(),
            child: None,
            dir: tempfile::Builder::new()
                .prefix("respite-reconnect-")
                .tempdir()
                .expect("tempdir"),
            own: 0,
        };
        b.spawn();
        b
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("backend running").id()
    }

    /// Starts redis-server on `self.port` and waits (polling every 2 ms) until it answers PING.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "backend already running");
        self.own = 0;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut child = self.exec();
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                self.own += 1;
                s.set_read_timeout(Some(Duration::from_millis(500))).ok();
                let mut line = String::new();
                if s.write_all(b"PING\r\n").is_ok()
                    && BufReader::new(&s).read_line(&mut line).is_ok()
                    && line == "+PONG\r\n"
                {
                    self.child = Some(child);
                    return;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                // The port may still be held by the previous instance's last socket: retry.
                assert!(
                    Instant::now() < deadline,
                    "redis-server on {} exited: {status}",
                    self.port
                );
                std::thread::sleep(Duration::from_millis(20));
                child = self.exec();
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on {} not ready",
                self.port
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn exec(&self) -> Child {
        Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server")
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A raw client to the current instance (counted as the test's own connection).
    fn raw(&mut self) -> RawClient {
        self.own += 1;
        RawClient::connect(&self.addr())
    }

    /// Connections the proxy opened to the current instance: `total_connections_received`
    /// minus the test's own, read over `sampler` (one of the test's own connections).
    fn proxy_connections(&self, sampler: &mut RawClient) -> u64 {
        let info = sampler.cmd(&[b"INFO", b"stats"]);
        let total: u64 = String::from_utf8_lossy(&info)
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("total_connections_received in INFO stats");
        total - self.own
    }

    /// Connections open to the current instance that are not `own`'s (by local port).
    fn clients_except(&self, own: &mut RawClient) -> usize {
        let me = own.stream().local_addr().expect("local addr").to_string();
        let list = own.cmd(&[b"CLIENT", b"LIST"]);
        String::from_utf8_lossy(&list)
            .lines()
            .filter(|l| l.contains(" addr=") && !l.contains(&format!(" addr={me} ")))
            .count()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A one-listener, 'cache'-cluster config with extra `[[clusters]]` lines (and sub-tables).
fn config(
    port: u16,
    admin: u16,
    backends: &[String],
    workers: usize,
    op_timeout: &str,
    cluster: &str,
) -> String {
    let cfg = simple_config(port, admin, backends, workers, "").replace(
        "op_timeout = \"1s\"",
        &format!("op_timeout = \"{op_timeout}\""),
    );
    assert!(cfg.contains(&format!("op_timeout = \"{op_timeout}\"")));
    format!("{cfg}{cluster}\n")
}

fn wait_stat(respite: &Respite, name: &str, want: i64, timeout: Duration) -> bool {
    wait_until(timeout, || respite.stat(name) == want)
}

/// Open file descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

// ---- rolling restart under the connection rate limit ---------------------------------------

struct RollingOutcome {
    /// Largest `connections − rate × (window + 1)` over every window of every backend.
    worst_excess: f64,
    /// The window (seconds) and count where it happened, and the backend.
    worst_at: (f64, u64, usize),
    answered: usize,
    errors: usize,
    rate_limited: i64,
}

/// 3 backends, 4 workers, `connections_per_host = 2`, `connection_rate_limit_per_sec = rate`:
/// every backend in turn is killed and restarted under load while its proxy connections are
/// counted at the Redis side every 100 ms. Windows are checked against `bound_rate`.
fn rolling_restart(rate: u32, bound_rate: u32) -> RollingOutcome {
    let mut backends: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let addrs: Vec<String> = backends.iter().map(Backend::addr).collect();
    let (port, admin) = (free_port(), free_port());
    let cfg = config(
        port,
        admin,
        &addrs,
        4,
        "1s",
        &format!("connections_per_host = 2\nconnection_rate_limit_per_sec = {rate}"),
    );
    let per_backend = 4 * 2;
    let respite = Respite::start(&cfg, port, admin);
    let t = Instant::now();
    assert!(
        wait_stat(
            &respite,
            &format!("{CLUSTER}.upstream_cx_active"),
            3 * per_backend,
            Duration::from_secs(30)
        ),
        "upstream_cx_active {} at start",
        respite.stat(&format!("{CLUSTER}.upstream_cx_active"))
    );
    eprintln!("rate {rate}: all 24 connections up after {:?}", t.elapsed());

    // Load: 4 clients over 60 keys; every request must be answered (value or error).
    let keys: Arc<Vec<Vec<u8>>> =
        Arc::new((0..60).map(|i| format!("rr:{i}").into_bytes()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, errors) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load: Vec<_> = (0..4)
        .map(|w| {
            let (addr, keys, stop) = (respite.addr(), keys.clone(), stop.clone());
            let (answered, errors) = (answered.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut c = RawClient::connect(&addr);
                c.stream()
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("timeout");
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let k = &keys[(n * 4 + w) % keys.len()];
                    let v = format!("{w}-{n}");
                    let set: [&[u8]; 3] = [b"SET", k, v.as_bytes()];
                    let get: [&[u8]; 2] = [b"GET", k];
                    for args in [&set[..], &get[..]] {
                        let r = c.try_cmd(args).unwrap_or_else(|e| {
                            panic!("client {w}: {} not answered: {e}", show(args[0]))
                        });
                        answered.fetch_add(1, Ordering::Relaxed);
                        if r.first() == Some(&b'-') {
                            assert!(DOWN_ERRORS.contains(&r.as_slice()), "{}", show(&r));
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    n += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();

    // Cumulative proxy connections per backend over time, across its instances.
    let mut series: Vec<Vec<(Instant, u64)>> = vec![Vec::new(); 3];
    let mut done: Vec<u64> = vec![0; 3];
    let mut samplers: Vec<Option<RawClient>> = backends.iter_mut().map(|b| Some(b.raw())).collect();
    let sample = |backends: &[Backend],
                  samplers: &mut [Option<RawClient>],
                  series: &mut [Vec<(Instant, u64)>],
                  done: &[u64]| {
        for i in 0..3 {
            if let Some(s) = samplers[i].as_mut() {
                let n = backends[i].proxy_connections(s);
                series[i].push((Instant::now(), done[i] + n));
            }
        }
    };
    let run_for = |d: Duration,
                   backends: &[Backend],
                   samplers: &mut [Option<RawClient>],
                   series: &mut [Vec<(Instant, u64)>],
                   done: &[u64]| {
        let end = Instant::now() + d;
        while Instant::now() < end {
            sample(backends, samplers, series, done);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    run_for(
        Duration::from_secs(1),
        &backends,
        &mut samplers,
        &mut series,
        &done,
    );
    for b in 0..3 {
        // Last count of this instance, then kill it.
        sample(&backends, &mut samplers, &mut series, &done);
        done[b] = series[b].last().expect("sampled").1;
        samplers[b] = None;
        backends[b].kill();
        run_for(
            Duration::from_millis(500),
            &backends,
            &mut samplers,
            &mut series,
            &done,
        );
        backends[b].spawn();
        samplers[b] = Some(backends[b].raw());
        let t = Instant::now();
        let mut probe = backends[b].raw();
        loop {
            sample(&backends, &mut samplers, &mut series, &done);
            if backends[b].clients_except(&mut probe) == per_backend as usize + 1 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "backend {b}: proxy connections not back after 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(probe);
        eprintln!(
            "rate {rate}: backend {b} restarted; {per_backend} proxy connections back after {:?}",
            t.elapsed()
        );
    }
    run_for(
        Duration::from_secs(1),
        &backends,
        &mut samplers,
        &mut series,
        &done,
    );
    stop.store(true, Ordering::Relaxed);
    for h in load {
        h.join().expect("load client panicked");
    }

    // Every window [i, j] of every backend: count ≤ rate × (window + 1). Samples are taken
    // after the reply arrives: 0.2 s are added to each window for that imprecision.
    let mut worst = (f64::MIN, (0.0, 0, 0));
    for (b, s) in series.iter().enumerate() {
        for (i, (ta, na)) in s.iter().enumerate() {
            for (tb, nb) in &s[i + 1..] {
                let w = tb.duration_since(*ta).as_secs_f64();
                let n = nb - na;
                let excess = n as f64 - f64::from(bound_rate) * (w + 0.2 + 1.0);
                if excess > worst.0 {
                    worst = (excess, (w, n, b));
                }
            }
        }
    }
    let total: Vec<u64> = series.iter().map(|s| s.last().map_or(0, |l| l.1)).collect();
    eprintln!("rate {rate}: proxy connections per backend over the run {total:?}");

    // After the restarts every key works again, from a new client too.
    assert!(wait_stat(
        &respite,
        &format!("{CLUSTER}.upstream_cx_active"),
        3 * per_backend,
        Duration::from_secs(30)
    ));
    for _ in 0..2 {
        let mut c = respite.raw();
        for k in keys.iter() {
            assert_eq!(show(&c.cmd(&[b"SET", k, b"after"])), show(OK));
            assert_eq!(show(&c.cmd(&[b"GET", k])), show(&bulk(b"after")));
        }
    }
    RollingOutcome {
        worst_excess: worst.0,
        worst_at: worst.1,
        answered: answered.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        rate_limited: respite.stat(&format!("{CLUSTER}.upstream_cx_connect_rate_limited")),
    }
}

/// A rolling restart of 3 backends under load with 4 workers × 2 connections per host: with
/// `connection_rate_limit_per_sec = 2` the new connections each backend sees (counted at the
/// Redis side) stay within the token bucket's bound over every window; without the limit the
/// same restarts burst past it (so the check can fail). Every request is answered; afterwards
/// every key works.
#[test]
fn rolling_restart_respects_connection_rate_limit() {
    let limited = rolling_restart(2, 2);
    eprintln!(
        "limit 2/s: worst window excess {:.2} (window {:.2}s, {} connections, backend {}); \
         {} answered, {} errors, {} rate-limited waits",
        limited.worst_excess,
        limited.worst_at.0,
        limited.worst_at.1,
        limited.worst_at.2,
        limited.answered,
        limited.errors,
        limited.rate_limited
    );
    let unlimited = rolling_restart(0, 2);
    eprintln!(
        "no limit: worst window excess {:.2} (window {:.2}s, {} connections, backend {}); \
         {} answered, {} errors, {} rate-limited waits",
        unlimited.worst_excess,
        unlimited.worst_at.0,
        unlimited.worst_at.1,
        unlimited.worst_at.2,
        unlimited.answered,
        unlimited.errors,
        unlimited.rate_limited
    );
    assert!(
        limited.worst_excess <= 0.0,
        "with the limit, {} connections in {:.2}s to backend {}",
        limited.worst_at.1,
        limited.worst_at.0,
        limited.worst_at.2
    );
    assert!(limited.rate_limited > 0, "no connect waited for a token");
    assert!(
        unlimited.worst_excess > 0.0,
        "without the limit the restarts stayed within 2/s too: the check cannot tell"
    );
    assert_eq!(unlimited.rate_limited, 0);
    assert!(limited.answered > 1000 && unlimited.answered > 1000);
}

// ---- self-healing pools --------------------------------------------------------------------

/// 2 000 kill/restart cycles of one backend (a new redis-server on the same port each cycle, and
/// a request through Respite must succeed before the next kill): afterwards Respite's file
/// descriptors and `upstream_cx_active` are back at their baseline and the backend sees exactly
/// the proxy's 2 connections (2 workers × 1).
#[test]
fn kill_restart_cycles_return_to_baseline() {
    const CYCLES: usize = 2000;
    let mut backend = Backend::start();
    let (port, admin) = (free_port(), free_port());
    let cfg = config(port, admin, &[backend.addr()], 2, "1s", "");
    let respite = Respite::start(&cfg, port, admin);
    let active = format!("{CLUSTER}.upstream_cx_active");
    assert!(wait_stat(&respite, &active, 2, Duration::from_secs(10)));
    let pid = respite.pid();
    let mut c = respite.raw();
    c.stream()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let (fd_base, rss_base) = (fd_count(pid), rss_kib(pid));
    eprintln!("baseline: {fd_base} fds, {rss_base} KiB RSS, upstream_cx_active 2");

    let t = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut failed_tries = 0usize;
    for cycle in 0..CYCLES {
        backend.kill();
        backend.spawn();
        let tc = Instant::now();
        loop {
            let r = c
                .try_cmd(&[b"GET", b"k"])
                .unwrap_or_else(|e| panic!("cycle {cycle}: GET not answered: {e}"));
            if r == NIL {
                break;
            }
            assert!(
                DOWN_ERRORS.contains(&r.as_slice()),
                "cycle {cycle}: {}",
                show(&r)
            );
            failed_tries += 1;
            assert!(
                tc.elapsed() < Duration::from_secs(10),
                "cycle {cycle}: no success within 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        slowest = slowest.max(tc.elapsed());
        if (cycle + 1) % 500 == 0 {
            eprintln!(
                "{} cycles in {:?}; {} fds now",
                cycle + 1,
                t.elapsed(),
                fd_count(pid)
            );
        }
    }
    let took = t.elapsed();
    eprintln!(
        "{CYCLES} kill/restart cycles in {took:?} ({:?} per cycle; slowest recovery {slowest:?}; \
         {failed_tries} failed tries)",
        took / CYCLES as u32
    );

    // Back to baseline: both workers' connections up (the idle one may be in a long backoff).
    assert!(
        wait_stat(&respite, &active, 2, Duration::from_secs(20)),
        "upstream_cx_active {} after the cycles",
        respite.stat(&active)
    );
    let mut fds = 0;
    let fds_ok = wait_until(Duration::from_secs(10), || {
        fds = fd_count(pid);
        fds <= fd_base + 2
    });
    let rss = rss_kib(pid);
    let mut probe = backend.raw();
    let mut clients = 0;
    let clients_ok = wait_until(Duration::from_secs(10), || {
        clients = backend.clients_except(&mut probe);
        clients == 2
    });
    eprintln!(
        "after: {fds} fds (baseline {fd_base}), {rss} KiB RSS (baseline {rss_base}), \
         {clients} connections at the backend besides the probe, upstream_cx_active {}",
        respite.stat(&active)
    );
    assert!(fds_ok, "{fds} fds, baseline {fd_base}");
    assert!(clients_ok, "{clients} connections at the backend");
    assert!(
        rss < rss_base + 32 * 1024,
        "RSS grew from {rss_base} to {rss} KiB"
    );
    assert_eq!(c.cmd(&[b"SET", b"k", b"again"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"again"));
}

// ---- TCP keepalive -------------------------------------------------------------------------

/// An nftables table that drops every TCP packet to or from one local port; deleted on drop
/// (also when the test panics).
struct DropPort {
    table: String,
}

impl DropPort {
    /// `None` (with the reason) when not root or when `nft` is missing or refuses.
    fn new(port: u16) -> Result<DropPort, String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| format!("id -u: {e}"))?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not running as root".into());
        }
        let table = format!("respite_test_{}_{port}", std::process::id());
        let rules = format!(
            "table inet {table} {{\n chain input {{\n  type filter hook input priority -10; \
             policy accept;\n  tcp dport {port} drop\n  tcp sport {port} drop\n }}\n}}\n"
        );
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("nft not available (Debian package nftables): {e}"))?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .map_err(|e| format!("nft stdin: {e}"))?;
        let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "nft refused the rule: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(DropPort { table })
    }
}

impl Drop for DropPort {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}

/// With `tcp_keepalive` 1s / 1s / 2 an idle upstream connection whose packets are all dropped
/// (nftables) is noticed by the kernel's probes within about time + interval × probes = 3 s, so
/// requests then fail fast instead of waiting for op_timeout (10 s here). Skipped with the reason
/// printed when not root or without nft.
#[test]
fn tcp_keepalive_detects_dead_idle_connection() {
    let backend = Backend::start();
    let (port, admin) = (free_port(), free_port());
    let cfg = config(
        port,
        admin,
        &[backend.addr()],
        1,
        "10s",
        "[clusters.tcp_keepalive]\nkeepalive_time = \"1s\"\nkeepalive_interval = \"1s\"\n\
         keepalive_probes = 2",
    );
    let respite = Respite::start(&cfg, port, admin);
    let active = format!("{CLUSTER}.upstream_cx_active");
    assert!(wait_stat(&respite, &active, 1, Duration::from_secs(10)));
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"ka", b"v"]), OK);
    let total_before = respite.stat(&format!("{CLUSTER}.upstream_cx_total"));

    let guard = match DropPort::new(backend.port) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("SKIPPED tcp_keepalive_detects_dead_idle_connection: {why}");
            return;
        }
    };
    let t = Instant::now();
    let noticed = wait_stat(&respite, &active, 0, Duration::from_secs(15));
    let detect = t.elapsed();
    eprintln!("dead idle connection noticed after {detect:?} (keepalive 1s + 1s x 2)");
    assert!(noticed, "upstream_cx_active still 1 after {detect:?}");
    assert!(
        detect >= Duration::from_millis(1500) && detect < Duration::from_secs(7),
        "noticed after {detect:?}, expected about 3 s"
    );
    // Requests now fail fast: backoff or a connect that times out (connect_timeout 250ms).
    let t = Instant::now();
    let r = c.cmd(&[b"GET", b"ka"]);
    let fail = t.elapsed();
    eprintln!("GET while partitioned: {} after {fail:?}", show(&r));
    assert!(DOWN_ERRORS.contains(&r.as_slice()), "{}", show(&r));
    assert!(
        fail < Duration::from_secs(2),
        "took {fail:?}, op_timeout is 10s"
    );
    drop(guard);
    // The rule is gone: the proxy reconnects and the value is still there.
    let mut last = Vec::new();
    let back = wait_until(Duration::from_secs(10), || {
        last = c.cmd(&[b"GET", b"ka"]);
        last == bulk(b"v")
    });
    assert!(back, "after removing the rule: {}", show(&last));
    assert!(respite.stat(&format!("{CLUSTER}.upstream_cx_total")) > total_before);
}

// ---- max_pending_requests and hung hosts ---------------------------------------------------

/// `n` keys placed on the first of two backends (`hung:…`) and `n` on the second (`live:…`).
fn hung_and_live_keys(addrs: &[String], n: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let placement = Placement::new(addrs);
    let on = |b: usize, prefix: &str| -> Vec<Vec<u8>> {
        (0..)
            .map(|i| format!("{prefix}:{i}").into_bytes())
            .filter(|k| placement.owner(k) == b)
            .take(n)
            .collect()
    };
    (on(0, "hung"), on(1, "live"))
}

/// A SIGSTOPped backend that stops reading while big values fill the socket buffers: requests
/// queued behind the stuck write are bounded (`max_pending_requests = 8`): past it requests get
/// `-upstream overflow ...` at once; every request is answered within about 2 × op_timeout (the
/// connection is closed as hung when the oldest written request expires with nothing read);
/// the other backend's keys are unaffected; after SIGCONT the keys work again.
#[test]
fn hung_host_bounds_queueing_and_overflows() {
    const OP: Duration = Duration::from_secs(1);
    // Scheduling slack on 2 shared cores.
    const SLACK: Duration = Duration::from_millis(1000);
    let backends = [Backend::start(), Backend::start()];
    let addrs: Vec<String> = backends.iter().map(Backend::addr).collect();
    let (victim_keys, other_keys) = hung_and_live_keys(&addrs, 40);
    let (port, admin) = (free_port(), free_port());
    let cfg = config(port, admin, &addrs, 1, "1s", "max_pending_requests = 8");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    for k in victim_keys.iter().chain(&other_keys) {
        assert_eq!(c.cmd(&[b"SET", k, k]), OK);
    }
    let overflow_stat = format!("{CLUSTER}.upstream_rq_pending_overflow");
    assert_eq!(respite.stat(&overflow_stat), 0);

    let stopped = Stopped::new(backends[0].pid());
    let t0 = Instant::now();
    // Writer: 24 SETs of 960 KiB to the stopped host, pipelined from its own thread (under the
    // 1 MiB from which a request goes on a connection of its own: these must share the stuck
    // one).
    let big = {
        let addr = respite.addr();
        let keys = victim_keys[..24].to_vec();
        std::thread::spawn(move || {
            let mut w = RawClient::connect(&addr);
            let value = vec![b'x'; 960 << 10];
            let mut r = w.stream().try_clone().expect("clone");
            let writer = std::thread::spawn(move || {
                for k in &keys {
                    let _ = r.write_all(&RawClient::encode(&[b"SET", k, &value]));
                }
            });
            let replies: Vec<(Vec<u8>, Duration)> = (0..24)
                .map(|_| {
                    let r = w.read_reply();
                    (r, t0.elapsed())
                })
                .collect();
            writer.join().expect("writer");
            replies
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // Probes: one GET per new connection every 50 ms for 3 s, each timed on its own.
    let probes: Vec<_> = (0..60)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(50));
            let (addr, k) = (respite.addr(), victim_keys[24 + i % 16].clone());
            std::thread::spawn(move || {
                let mut p = RawClient::connect(&addr);
                let t = Instant::now();
                let r = p.cmd(&[b"GET", &k]);
                (r, t.elapsed())
            })
        })
        .collect();
    // Meanwhile the other backend's keys answer at once.
    let mut live_slowest = Duration::ZERO;
    for k in &other_keys {
        let t = Instant::now();
        assert_eq!(show(&c.cmd(&[b"GET", k])), show(&bulk(k)));
        live_slowest = live_slowest.max(t.elapsed());
    }
    let probes: Vec<(Vec<u8>, Duration)> = probes
        .into_iter()
        .map(|h| h.join().expect("probe"))
        .collect();
    let big = big.join().expect("big writer");
    let mut overflows = 0;
    let (mut slowest_queued, mut slowest_overflow) = (Duration::ZERO, Duration::ZERO);
    for (i, (r, took)) in probes.iter().enumerate() {
        if r == OVERFLOW {
            overflows += 1;
            slowest_overflow = slowest_overflow.max(*took);
        } else {
            assert!(
                DOWN_ERRORS.contains(&r.as_slice()),
                "probe {i}: {}",
                show(r)
            );
            slowest_queued = slowest_queued.max(*took);
        }
    }
    let big_overflows = big.iter().filter(|(r, _)| r == OVERFLOW).count();
    for (i, (r, _)) in big.iter().enumerate() {
        assert!(
            r == OVERFLOW || DOWN_ERRORS.contains(&r.as_slice()),
            "big SET {i}: {}",
            show(r)
        );
    }
    let big_last = big.last().expect("replies").1;
    eprintln!(
        "hung host, op_timeout {OP:?}: probes: {overflows} overflow (slowest \
         {slowest_overflow:?}), {} failed after queueing/timeout (slowest {slowest_queued:?}); \
         big SETs: {big_overflows} overflow, all 24 answered {big_last:?} after the first was \
         sent; other host slowest GET {live_slowest:?}",
        probes.len() - overflows
    );
    assert!(
        overflows > 0,
        "no probe got the overflow error while the host was stuck"
    );
    assert!(
        slowest_overflow < Duration::from_millis(300),
        "an overflow error took {slowest_overflow:?}"
    );
    assert!(
        slowest_queued <= 2 * OP + SLACK,
        "a queued request took {slowest_queued:?}"
    );
    assert!(
        big_last <= 2 * OP + SLACK,
        "big SETs answered after {big_last:?}"
    );
    assert!(live_slowest < Duration::from_millis(500));
    assert_eq!(
        respite.stat(&overflow_stat),
        (overflows + big_overflows) as i64
    );
    drop(stopped);
    let mut last = Vec::new();
    let back = wait_until(Duration::from_secs(10), || {
        last = c.cmd(&[b"GET", &victim_keys[30]]);
        last == bulk(&victim_keys[30])
    });
    assert!(back, "after SIGCONT: {}", show(&last));
}

/// Requests that each take a leased connection of their own (large SETs, blocking BLPOPs),
/// pipelined to a SIGSTOPped host: the first waits for the handshake (a lease's handshake may
/// take what is left of `op_timeout`, 1 s here) and fails; the host is then in reconnect
/// backoff for leases as for the shared connection, so the rest fail at once (`no upstream
/// host`) instead of one wait each (24 s). Counted, not only timed: while 24 MiB of SETs still
/// stream in, the backoff (from 50 ms) may run out and let another attempt through, by design,
/// so the bound is on failed connects (`leased_cx_connect_fail`), and each pipeline must take
/// no more than one `op_timeout` per failed attempt. The backoff is the stopped host's only:
/// the other host's large SET goes through meanwhile, and after SIGCONT the stopped host's work
/// again.
#[test]
fn leases_to_a_hung_host_fail_fast_after_the_first_failed_handshake() {
    const OP: Duration = Duration::from_secs(1);
    const SLACK: Duration = Duration::from_millis(750);
    let backends = [Backend::start(), Backend::start()];
    let addrs: Vec<String> = backends.iter().map(Backend::addr).collect();
    let (victim_keys, other_keys) = hung_and_live_keys(&addrs, 24);
    let (port, admin) = (free_port(), free_port());
    let cfg = config(port, admin, &addrs, 1, "1s", "");
    let respite = Respite::start(&cfg, port, admin);
    let value = vec![b'x'; (1 << 20) + 4096];

    let stopped = Stopped::new(backends[0].pid());
    // Each pipeline from its own writer thread, replies timed from the first write.
    let pipelined = |requests: Vec<Vec<u8>>| -> (Vec<Vec<u8>>, Duration) {
        let mut c = RawClient::connect(&respite.addr());
        let mut w = c.stream().try_clone().expect("clone");
        let n = requests.len();
        let t0 = Instant::now();
        let writer = std::thread::spawn(move || {
            for r in &requests {
                let _ = w.write_all(r);
            }
        });
        let replies: Vec<Vec<u8>> = (0..n).map(|_| c.read_reply()).collect();
        let took = t0.elapsed();
        writer.join().expect("writer");
        (replies, took)
    };
    let failed = || respite.stat(&format!("{CLUSTER}.leased_cx_connect_fail"));
    let sets = victim_keys
        .iter()
        .map(|k| RawClient::encode(&[b"SET", k, &value]))
        .collect();
    let (set_replies, sets_took) = pipelined(sets);
    let sets_failed = failed();
    let blpops = victim_keys
        .iter()
        .map(|k| RawClient::encode(&[b"BLPOP", k, b"5"]))
        .collect();
    let (blpop_replies, blpops_took) = pipelined(blpops);
    let blpops_failed = failed() - sets_failed;
    eprintln!(
        "hung host, op_timeout {OP:?}: 24 large SETs answered in {sets_took:?} ({sets_failed} \
         failed connects), 24 BLPOPs in {blpops_took:?} ({blpops_failed})"
    );
    for (i, r) in set_replies.iter().chain(&blpop_replies).enumerate() {
        assert!(
            DOWN_ERRORS.contains(&r.as_slice()),
            "request {i}: {}",
            show(r)
        );
    }
    assert!(
        (1..=6).contains(&(sets_failed + blpops_failed)),
        "{sets_failed} + {blpops_failed} failed leased connects for 48 requests to one hung host"
    );
    for (what, took, failed) in [
        ("large SETs", sets_took, sets_failed),
        ("BLPOPs", blpops_took, blpops_failed),
    ] {
        assert!(
            took <= OP * failed as u32 + SLACK,
            "24 pipelined {what} to the hung host answered after {took:?} ({failed} failed \
             connects)"
        );
    }
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", &other_keys[0], &value]), OK);

    drop(stopped);
    let mut last = Vec::new();
    let back = wait_until(Duration::from_secs(10), || {
        last = c.cmd(&[b"SET", &victim_keys[0], &value]);
        last == OK
    });
    assert!(back, "after SIGCONT: {}", show(&last));
    assert_eq!(
        c.cmd(&[b"STRLEN", &victim_keys[0]]),
        format!(":{}\r\n", value.len()).into_bytes()
    );
}

//! Helpers shared by the integration test binaries (each includes this with `mod common;`).

#![allow(dead_code)]

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use respite::cluster::{LoadBalancer, hashtag};
use respite::config::{HostConfig, LbPolicy};
use respite_tests::{RawClient, RedisServer};

/// A `HostConfig` as respite builds it for a `hosts = ["127.0.0.1:PORT"]` entry.
pub fn host(addr: &str) -> HostConfig {
    HostConfig {
        address: addr.parse().unwrap(),
        address_text: addr.to_string(),
        weight: 1,
        name: None,
    }
}

/// Respite's placement over `addrs` (ketama, hash tags on): key → index into `addrs`.
pub struct Placement(LoadBalancer);

impl Placement {
    pub fn new(addrs: &[String]) -> Placement {
        let hosts: Vec<HostConfig> = addrs.iter().map(|a| host(a)).collect();
        Placement(LoadBalancer::new(LbPolicy::Ketama, &hosts))
    }

    pub fn owner(&self, key: &[u8]) -> usize {
        self.0.pick(hashtag(key))
    }

    /// A key (`prefix-N`) that this placement puts on backend `owner`.
    pub fn key_on(&self, owner: usize, prefix: &str) -> String {
        (0..10_000)
            .map(|i| format!("{prefix}-{i}"))
            .find(|k| self.owner(k.as_bytes()) == owner)
            .expect("a key for every backend")
    }
}

/// Addresses of `servers`.
pub fn addrs(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.addr()).collect()
}

/// Starts `n` redis-servers.
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// RESP bulk string reply.
pub fn bulk(v: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

/// RESP integer reply.
pub fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

/// RESP nil bulk reply.
pub const NIL: &[u8] = b"$-1\r\n";
/// RESP `+OK`.
pub const OK: &[u8] = b"+OK\r\n";

/// EXEC's reply to a transaction discarded at queue time, as Redis gives it.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// Printable form of reply bytes for assertion messages.
pub fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

/// Sends `commands` in pipelined batches of `batch` and returns every reply.
pub fn pipelined(client: &mut RawClient, commands: &[Vec<Vec<u8>>], batch: usize) -> Vec<Vec<u8>> {
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(batch) {
        replies.extend(client.pipeline(chunk));
    }
    replies
}

/// `args` as owned byte vectors.
pub fn cmd(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// Splits a buffer of complete RESP values into them; the remainder (an incomplete value or
/// garbage) is returned second.
pub fn split_replies(mut buf: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut out = Vec::new();
    while let Some(n) = respite_tests::resp_len(buf) {
        out.push(buf[..n].to_vec());
        buf = &buf[n..];
    }
    (out, buf.to_vec())
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes; returns the last result.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `EXISTS key` on a backend directly: 0 or 1.
pub fn exists_on(server: &mut RawClient, key: &[u8]) -> bool {
    match server.cmd(&[b"EXISTS", key]).as_slice() {
        b":1\r\n" => true,
        b":0\r\n" => false,
        other => panic!("EXISTS answered {}", show(other)),
    }
}

/// Sends a signal with kill(1) to `pid`.
pub fn kill_sig(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Keeps a process SIGSTOPped; SIGCONTs it on drop (also when a test panics).
pub struct Stopped(pub u32);

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        kill_sig("STOP", pid);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.0.to_string())
            .status();
    }
}

/// Whether something accepts on 127.0.0.1:port.
pub fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

// ---- process measurements and hostile-client helpers (hostile.rs, clients.rs) -------------

/// `VmRSS` of process `pid` in KiB (from /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// `VmHWM` of process `pid` in KiB: the most it has held resident, by the kernel's count.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// (soft, hard) `Max open files` of process `pid` (from /proc/PID/limits).
pub fn nofile_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/limits: {e}"));
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// Raises the soft `RLIMIT_NOFILE` of process `pid` to `want` (at most its hard limit) with
/// prlimit(1), like `ulimit -n` would for a child; returns the soft limit afterwards.
pub fn raise_nofile(pid: u32, want: u64) -> u64 {
    let (soft, hard) = nofile_limits(pid);
    let target = want.min(hard);
    if soft < target {
        let ok = Command::new("prlimit")
            .arg(format!("--pid={pid}"))
            .arg(format!("--nofile={target}:{hard}"))
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "prlimit --pid={pid} --nofile={target}:{hard} failed");
    }
    nofile_limits(pid).0
}

/// A backend's `INFO commandstats` as command → calls, without `info` itself (so the caller's
/// own INFO calls do not count).
pub fn commandstats(server: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    let mut c = server.raw();
    let reply = c.cmd(&[b"INFO", b"commandstats"]);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "info").then(|| (name.to_string(), calls))
        })
        .collect()
}

/// Connects to `addr`, writes `bytes` (write errors ignored: the peer may close first),
/// half-closes if `half_close`, then reads until EOF / reset (`closed = true`) or until nothing
/// arrives for `quiet` (`closed = false`). Returns (bytes received, closed).
pub fn exchange(addr: &str, bytes: &[u8], half_close: bool, quiet: Duration) -> (Vec<u8>, bool) {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_nodelay(true).ok();
    let writer = {
        let mut w = s.try_clone().expect("clone");
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
            if half_close {
                let _ = w.shutdown(std::net::Shutdown::Write);
            }
        })
    };
    s.set_read_timeout(Some(quiet)).ok();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false;
            }
            Err(_) => break true,
        }
    };
    drop(s);
    let _ = writer.join();
    (out, closed)
}

/// A client that GETs one key in a loop on its own connection and records every latency, to
/// show that other clients are not disturbed.
pub struct Prober {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<Duration>>>,
}

impl Prober {
    /// Starts probing `GET key` on `addr`; every reply must equal `bulk(value)`.
    pub fn start(addr: &str, key: &[u8], value: &[u8]) -> Prober {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (addr, key, want, flag) = (addr.to_string(), key.to_vec(), bulk(value), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let mut lat = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let r = c.cmd(&[b"GET", &key]);
                lat.push(t.elapsed());
                assert_eq!(r, want, "prober GET {} answered {}", show(&key), show(&r));
                std::thread::sleep(Duration::from_millis(2));
            }
            lat
        });
        Prober {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the prober and returns (count, p50, p99, max) of its GET latencies.
    pub fn finish(mut self) -> LatencySummary {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut lat = match self.handle.take().expect("running").join() {
            Ok(l) => l,
            Err(p) => std::panic::resume_unwind(p),
        };
        lat.sort();
        let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
        assert!(!lat.is_empty(), "the prober made no request");
        LatencySummary {
            count: lat.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: *lat.last().unwrap(),
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Latencies seen by a [`Prober`].
#[derive(Debug, Clone, Copy)]
pub struct LatencySummary {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

// ---- python ------------------------------------------------------------------------------

/// Makes sure `import <module>` works in `python3`, installing `package` from PyPI if it does
/// not; returns the module's `__version__`. Panics with a clear message if it cannot.
pub fn python_module(module: &str, package: &str) -> String {
    let version = || {
        Command::new("python3")
            .args([
                "-c",
                &format!("import {module}; print({module}.__version__)"),
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if let Some(v) = version() {
        return v;
    }
    let pip = Command::new("timeout")
        .args(["180", "python3", "-m", "pip", "install", "--quiet", package])
        .output()
        .expect("run python3 -m pip (is python3 installed?)");
    version().unwrap_or_else(|| {
        panic!(
            "{module} is not installed and `python3 -m pip install {package}` failed (is PyPI \
             reachable?): {}{}",
            String::from_utf8_lossy(&pip.stdout),
            String::from_utf8_lossy(&pip.stderr)
        )
    })
}

/// Runs `script` with `python3 -` and `args`, killed after `seconds`.
pub fn run_python(script: &str, args: &[String], seconds: u32) -> Output {
    run_stdin(
        Command::new("timeout")
            .arg(seconds.to_string())
            .args(["python3", "-"]),
        script,
        args,
    )
}

/// Runs `command` with `args`, `script` on its standard input; its output.
fn run_stdin(command: &mut Command, script: &str, args: &[String]) -> Output {
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().expect("script output")
}

/// Panics unless `out`'s standard output says `ok`, showing both outputs.
pub fn assert_printed_ok(out: &Output, what: &str) {
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- node --------------------------------------------------------------------------------

/// Makes sure the npm package `package` is installed under `target/npm` (installing it from the
/// npm registry if it is not); returns the `node_modules` directory for `NODE_PATH`. Panics
/// with a clear message without `node`/`npm` or the registry.
pub fn node_module(package: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("npm");
    let modules = root.join("node_modules");
    if modules.join(package).join("package.json").exists() {
        return modules;
    }
    std::fs::create_dir_all(&root).expect("create target/npm");
    let out = Command::new("timeout")
        .args([
            "300",
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
        ])
        .arg(&root)
        .arg(package)
        .output()
        .expect("run npm (is npm installed? apt-get install nodejs npm)");
    assert!(
        out.status.success() && modules.join(package).exists(),
        "npm install {package} failed (is the npm registry reachable?): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    modules
}

/// Runs `script` with `node -` (modules from `node_modules`) and `args`, killed after `seconds`.
pub fn run_node(
    script: &str,
    node_modules: &std::path::Path,
    args: &[String],
    seconds: u32,
) -> Output {
    run_stdin(
        Command::new("timeout")
            .arg(seconds.to_string())
            .args(["node", "-"])
            .env("NODE_PATH", node_modules),
        script,
        args,
    )
}

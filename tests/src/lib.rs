//! Test harness for Respite's integration tests: real `redis-server` and `nutcracker`
//! processes on free loopback ports, killed on drop, plus clients to talk to them.
//!
//! - [`free_port`]: a loopback port nobody listens on, never handed out twice per process.
//! - [`RedisServer`]: one `redis-server` (no persistence) in its own temp dir.
//! - [`Nutcracker`]: twemproxy 0.5.0 (`/usr/sbin/nutcracker`) over some backends.
//! - [`RawClient`]: a raw RESP client that returns reply bytes untouched (for byte-exact
//!   comparisons); [`redis_client`]: a `redis` crate connection.
//! - [`respite_bin`]: the built `respite` binary.
//! - [`admin`]: admin HTTP requests of any method, `/clusters` parsed.
//! - [`cluster::RedisCluster`]: a six-node Redis Cluster (3 primaries + 3 replicas) and
//!   [`cluster::cluster_config`], a Respite config over it.
//! - [`sockmap`]: a test cgroup v2, processes spawned into it, `respite-control --sockmap` and
//!   the sockmap counters.
//! - [`xds::XdsServer`]: a scripted xDS (ADS) management server; [`xds::ControlProcess`]: a
//!   `respite-control` under test; [`xds_resources`]: Envoy resources and responses to send.
//! - [`tls`]: certificates made at test time, TLS `redis-server`s and Redis Clusters, a
//!   blocking rustls RESP client.

pub mod admin;
pub mod cluster;
pub mod respite;
pub mod sockmap;
pub mod tls;
pub mod xds;
pub mod xds_resources;
pub use cluster::RedisCluster;
pub use respite::Respite;

use std::collections::HashSet;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a started process gets to become ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Read/write timeout of the clients made here.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Returns a free TCP port on 127.0.0.1: a random port below the kernel's ephemeral range
/// that binds, the socket then closed. A port is never returned twice, within one process
/// (parallel tests in one test binary) nor across test processes running at the same time:
/// each port handed out is claimed with a lock on `<tmp>/respite-test-ports/<port>`, held until
/// the process exits. (Another program may still take it in between.)
///
/// Below the ephemeral range (`ip_local_port_range`), because the kernel picks the source port
/// of every outgoing connection from it: a port a test frees for a moment (a backend it kills
/// and restarts, a node of a Redis Cluster) could otherwise be taken meanwhile by a
/// connection of any parallel test, and the restarted server could not bind it.
pub fn free_port() -> u16 {
    static USED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    static CLAIMS: Mutex<Vec<fs::File>> = Mutex::new(Vec::new());
    let used = USED.get_or_init(|| Mutex::new(HashSet::new()));
    let dir = std::env::temp_dir().join("respite-test-ports");
    let _ = fs::create_dir_all(&dir);
    let ports = outside_ephemeral_range();
    loop {
        let port = fastrand::u16(ports.clone());
        let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) else {
            continue;
        };
        drop(listener);
        if !used.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            continue;
        }
        let claim = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()));
        match claim {
            Ok(file) => match file.try_lock() {
                Ok(()) => {
                    CLAIMS.lock().unwrap_or_else(|e| e.into_inner()).push(file);
                    return port;
                }
                // Another test process holds it.
                Err(_) => continue,
            },
            // No claim possible (read-only tmp): the in-process rule still holds.
            Err(_) => return port,
        }
    }
}

/// Up to 12 000 ports just below the kernel's ephemeral range (from 1024), for
/// [`free_port`]: 20 768..32 768 with the default range 32 768–60 999.
fn outside_ephemeral_range() -> std::ops::Range<u16> {
    let low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(2048);
    low.saturating_sub(12_000).max(1024)..low
}

/// Waits until something accepts TCP connections on `127.0.0.1:port`, up to `timeout`.
pub fn wait_for_port(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn read_log(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()))
}

/// `PING` on a fresh connection answers `+PONG`.
fn pings(port: u16) -> bool {
    let Ok(mut c) = RawClient::try_connect(&format!("127.0.0.1:{port}")) else {
        return false;
    };
    let _ = c.stream.set_read_timeout(Some(Duration::from_millis(500)));
    // A server started with --requirepass answers -NOAUTH: it is up all the same.
    c.try_cmd(&[b"PING"])
        .is_ok_and(|r| r == b"+PONG\r\n" || r.starts_with(b"-NOAUTH"))
}

// ---- redis-server ------------------------------------------------------------------------

/// A `redis-server` child process on `127.0.0.1:port`, started with
/// `--save "" --appendonly no --daemonize no` in a private temp dir (its `--dir` and log).
/// Dropping it kills it (SIGKILL) and reaps it.
pub struct RedisServer {
    /// The TCP port it listens on (127.0.0.1).
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
    /// The server binary: `redis-server`, or `valkey-server` ([`RedisServer::start_program`]).
    program: String,
}

impl RedisServer {
    /// Starts a `redis-server` on a free port and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra command-line arguments appended (for example
    /// `&["--requirepass", "secret"]` or `&["--cluster-enabled", "yes"]`).
    ///
    /// Panics with the server log if it does not answer `PING` within [`START_TIMEOUT`].
    pub fn start_with(args: &[&str]) -> RedisServer {
        Self::start_program("redis-server", args)
    }

    /// [`RedisServer::start_with`] running `program` (e.g. `valkey-server`, which takes the
    /// same arguments) instead of `redis-server`.
    pub fn start_program(program: &str, args: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("respite-redis-")
            .tempdir()
            .expect("create temp dir for redis-server");
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            program: program.to_string(),
        };
        // A free port can be taken by another process before redis binds it: retry a few times.
        let mut last_err = String::new();
        for _ in 0..3 {
            server.port = free_port();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("{last_err}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Spawns on `self.port` and waits for `PING`; on failure kills the child and describes why.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let log = self.log_path();
        let mut cmd = Command::new(&self.program);
        cmd.args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot spawn {} (is it installed?): {e}", self.program))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "redis-server on port {port} exited early ({status}); log:\n{}",
                    read_log(&log)
                ));
            }
            if pings(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}; \
                     log:\n{}",
                    read_log(&log)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `"127.0.0.1:<port>"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process id. Panics if the server has been [`kill`](RedisServer::kill)ed.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .unwrap_or_else(|| panic!("redis-server on port {} is not running", self.port))
            .id()
    }

    /// Whether the process is running (started and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Does nothing if already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if running, then starts it again on the same port (with an empty
    /// dataset) and waits until it answers `PING`. Panics if it cannot come back.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(e) if Instant::now() >= deadline => panic!("restart: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A fresh [`RawClient`] connected to this server.
    pub fn raw(&self) -> RawClient {
        RawClient::connect(&self.addr())
    }

    /// A fresh `redis` crate connection to this server.
    pub fn client(&self) -> redis::Connection {
        redis_client(self.port)
    }

    /// The server's log so far (for assertion messages).
    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `redis` crate connection to `127.0.0.1:port` with [`IO_TIMEOUT`] read/write timeouts.
pub fn redis_client(port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap_or_else(|e| panic!("redis client for port {port}: {e}"));
    let conn = client
        .get_connection_with_timeout(IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    conn.set_read_timeout(Some(IO_TIMEOUT))
        .expect("set read timeout");
    conn.set_write_timeout(Some(IO_TIMEOUT))
        .expect("set write timeout");
    conn
}

// ---- raw RESP client ---------------------------------------------------------------------

/// A minimal RESP client over a blocking `TcpStream` that hands back replies as the exact bytes
/// received, so tests can compare a proxy's replies with Redis's byte for byte.
pub struct RawClient {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl RawClient {
    /// Connects to `addr` (`"host:port"`) with [`IO_TIMEOUT`] timeouts. Panics on failure.
    pub fn connect(addr: &str) -> RawClient {
        Self::try_connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
    }

    /// Connects to `addr`, returning the error instead of panicking.
    pub fn try_connect(addr: &str) -> io::Result<RawClient> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let reader = BufReader::with_capacity(64 * 1024, stream.try_clone()?);
        Ok(RawClient { stream, reader })
    }

    /// The underlying stream (for timeouts, half-close, ...).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Encodes `args` as a RESP array of bulk strings.
    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
        Self::encode_into(&mut out, args);
        out
    }

    /// Appends the RESP encoding of `args` to `out` (to build pipelines).
    pub fn encode_into(out: &mut Vec<u8>, args: &[&[u8]]) {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Sends one command (a RESP array of bulk strings) without reading the reply.
    pub fn send(&mut self, args: &[&[u8]]) {
        let buf = Self::encode(args);
        self.send_raw(&buf);
    }

    /// Writes `bytes` as they are (pipelines, inline commands, malformed input).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("write to {:?}: {e}", self.stream.peer_addr()));
    }

    /// Reads one complete reply and returns its raw bytes. Panics on EOF, timeout or a
    /// malformed reply.
    pub fn read_reply(&mut self) -> Vec<u8> {
        self.try_read_reply()
            .unwrap_or_else(|e| panic!("read reply from {:?}: {e}", self.stream.peer_addr()))
    }

    /// Reads one complete reply (RESP2 or RESP3), returning its raw bytes or the I/O error.
    pub fn try_read_reply(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        read_resp(&mut self.reader, &mut out)?;
        Ok(out)
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(args);
        self.read_reply()
    }

    /// Sends one command and reads its reply, returning I/O errors.
    pub fn try_cmd(&mut self, args: &[&[u8]]) -> io::Result<Vec<u8>> {
        self.stream.write_all(&Self::encode(args))?;
        self.try_read_reply()
    }

    /// Sends all `commands` in one write, then reads one reply per command.
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
        let mut buf = Vec::new();
        for c in commands {
            let args: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
            Self::encode_into(&mut buf, &args);
        }
        self.send_raw(&buf);
        commands.iter().map(|_| self.read_reply()).collect()
    }

    /// True if the server closed the connection (a read returns EOF within `timeout`).
    pub fn is_closed(&mut self, timeout: Duration) -> bool {
        let _ = self.stream.set_read_timeout(Some(timeout));
        let mut b = [0u8; 1];
        let closed = matches!(self.reader.read(&mut b), Ok(0));
        let _ = self.stream.set_read_timeout(Some(IO_TIMEOUT));
        closed
    }

    /// Closes the write half (the server sees EOF).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads one RESP line (through `\r\n`) into `out`; returns the line without the type byte and
/// the terminator.
fn read_line<R: BufRead>(r: &mut R, out: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let start = out.len();
    let n = r.read_until(b'\n', out)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a complete reply",
        ));
    }
    let line = &out[start..];
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(invalid(format!(
            "malformed RESP line {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    Ok(line[1..line.len() - 2].to_vec())
}

fn parse_len(s: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| invalid(format!("bad RESP length {:?}", String::from_utf8_lossy(s))))
}

/// Reads one RESP2/RESP3 value from `r`, appending its exact bytes to `out`.
pub fn read_resp<R: BufRead>(r: &mut R, out: &mut Vec<u8>) -> io::Result<()> {
    let start = out.len();
    let body = read_line(r, out)?;
    match out[start] {
        // Simple string, error, integer, null, boolean, double, big number.
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(()),
        // Bulk string, bulk error, verbatim string.
        b'$' | b'!' | b'=' => {
            let n = parse_len(&body)?;
            if n < 0 {
                return Ok(());
            }
            let n = n as usize + 2;
            let at = out.len();
            out.resize(at + n, 0);
            r.read_exact(&mut out[at..])?;
            if !out.ends_with(b"\r\n") {
                return Err(invalid("bulk string not terminated by CRLF".into()));
            }
            Ok(())
        }
        // Array, set, push; map and attribute have two values per entry.
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_len(&body)?;
            if n < 0 {
                return Ok(());
            }
            let per = if matches!(out[start], b'%' | b'|') {
                2
            } else {
                1
            };
            for _ in 0..n * per {
                read_resp(r, out)?;
            }
            if out[start] == b'|' {
                // An attribute precedes the value it annotates.
                read_resp(r, out)?;
            }
            Ok(())
        }
        t => Err(invalid(format!("unknown RESP type byte {:?}", t as char))),
    }
}

/// Parses one complete RESP value at the start of `buf`, returning its length in bytes, or
/// `None` if `buf` holds an incomplete (or malformed) value.
pub fn resp_len(buf: &[u8]) -> Option<usize> {
    let mut cur = io::Cursor::new(buf);
    let mut out = Vec::new();
    read_resp(&mut cur, &mut out).ok()?;
    Some(out.len())
}

// ---- nutcracker (twemproxy) --------------------------------------------------------------

/// Path of the twemproxy binary (Debian package `nutcracker`).
pub const NUTCRACKER: &str = "/usr/sbin/nutcracker";

/// A `nutcracker` (twemproxy 0.5.0) process with one pool named `respite_test`:
/// `hash: fnv1a_64`, `distribution: ketama`, `redis: true`, `auto_eject_hosts: false`,
/// listening on `127.0.0.1:port`, with its stats server on another free port (not 22222).
/// Dropping it kills it (SIGKILL) and reaps it.
pub struct Nutcracker {
    /// The pool's listen port (127.0.0.1).
    pub port: u16,
    /// The stats port (`-s`), bound to 127.0.0.1 (`-a`).
    pub stats_port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Nutcracker {
    /// Starts nutcracker over `servers`, each a twemproxy `servers:` entry as written in its
    /// YAML: `"host:port:weight"` or `"host:port:weight name"`. Waits until it accepts
    /// connections; panics with its log otherwise.
    pub fn start(servers: &[String]) -> Nutcracker {
        Self::start_with(servers, &[])
    }

    /// Like [`Nutcracker::start`], with extra pool directives as YAML lines (for example
    /// `"hash_tag: \"{}\""`), added after the defaults.
    pub fn start_with(servers: &[String], extra_pool_lines: &[&str]) -> Nutcracker {
        let port = free_port();
        let mut conf = String::new();
        conf.push_str("respite_test:\n");
        conf.push_str(&format!("  listen: 127.0.0.1:{port}\n"));
        conf.push_str("  hash: fnv1a_64\n");
        conf.push_str("  distribution: ketama\n");
        conf.push_str("  redis: true\n");
        conf.push_str("  auto_eject_hosts: false\n");
        conf.push_str("  timeout: 10000\n");
        conf.push_str("  server_connections: 1\n");
        for line in extra_pool_lines {
            conf.push_str(&format!("  {line}\n"));
        }
        conf.push_str("  servers:\n");
        for s in servers {
            conf.push_str(&format!("   - {s}\n"));
        }
        Self::start_config(&conf, &[port])
    }

    /// Starts nutcracker with `conf`, a whole `nutcracker.yml` (any number of pools), and waits
    /// until every port of `ports` accepts connections; [`Nutcracker::port`] is `ports[0]`.
    pub fn start_config(conf: &str, ports: &[u16]) -> Nutcracker {
        let dir = tempfile::Builder::new()
            .prefix("respite-nutcracker-")
            .tempdir()
            .expect("create temp dir for nutcracker");
        let stats_port = free_port();
        let conf_path = dir.path().join("nutcracker.yml");
        fs::write(&conf_path, conf).expect("write nutcracker.yml");
        let log = dir.path().join("nutcracker.log");
        let mut child = Command::new(NUTCRACKER)
            .arg("-c")
            .arg(&conf_path)
            .arg("-o")
            .arg(&log)
            .arg("-p")
            .arg(dir.path().join("nutcracker.pid"))
            .args(["-s", &stats_port.to_string(), "-a", "127.0.0.1"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {NUTCRACKER} (is it installed?): {e}"));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nutcracker exited early ({status}); config:\n{conf}\nlog:\n{}",
                    read_log(&log)
                );
            }
            if ports
                .iter()
                .all(|&p| TcpStream::connect(("127.0.0.1", p)).is_ok())
            {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nutcracker did not listen on 127.0.0.1:{ports:?} within {START_TIMEOUT:?}; \
                     config:\n{conf}\nlog:\n{}",
                    read_log(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Nutcracker {
            port: ports.first().copied().unwrap_or_default(),
            stats_port,
            child: Some(child),
            dir,
        }
    }

    /// Starts nutcracker over `(host:port, weight)` backends, unnamed (`"host:port:weight"`).
    pub fn ketama(backends: &[(String, u32)]) -> Nutcracker {
        let servers: Vec<String> = backends
            .iter()
            .map(|(addr, w)| format!("{addr}:{w}"))
            .collect();
        Self::start(&servers)
    }

    /// `"127.0.0.1:<port>"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A fresh [`RawClient`] connected to the pool.
    pub fn raw(&self) -> RawClient {
        RawClient::connect(&self.addr())
    }

    /// The process id. Panics if killed.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nutcracker is not running").id()
    }

    /// The generated config file's text.
    pub fn config(&self) -> String {
        read_log(&self.dir.path().join("nutcracker.yml"))
    }

    /// nutcracker's log so far.
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("nutcracker.log"))
    }

    /// Kills nutcracker (SIGKILL) and waits for it. Does nothing if already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---- the respite binary ------------------------------------------------------------------

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        })
}

/// Path of the built `respite` binary: `$RESPITE_BIN` if set; otherwise the newer of
/// `target/release/respite` and `target/debug/respite` under `$CARGO_TARGET_DIR` or the
/// workspace's `target/`. Panics if neither exists (build it with `cargo build --bin respite`).
pub fn respite_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPITE_BIN") {
        return PathBuf::from(p);
    }
    let target = target_dir();
    let newest = ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("respite"))
        .filter_map(|p| {
            let modified = fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max_by_key(|(m, _)| *m);
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "no respite binary under {} (release or debug); run `cargo build --bin respite` or set \
             RESPITE_BIN",
            target.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_unique() {
        let ports: HashSet<u16> = (0..50).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn resp_reader_handles_nested_and_resp3() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b"$-1\r\n",
            b"$3\r\na\r\n\r\n",
            b"*-1\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"%1\r\n+k\r\n:1\r\n",
            b"_\r\n",
            b">2\r\n+pubsub\r\n$0\r\n\r\n",
        ];
        for c in cases {
            let mut buf = c.to_vec();
            buf.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(
                resp_len(&buf),
                Some(c.len()),
                "{:?}",
                String::from_utf8_lossy(c)
            );
            assert_eq!(resp_len(&c[..c.len() - 1]), None);
        }
    }

    #[test]
    fn redis_server_lifecycle() {
        let mut s = RedisServer::start();
        let mut c = s.raw();
        assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), b"+OK\r\n");
        assert_eq!(c.cmd(&[b"GET", b"k"]), b"$1\r\nv\r\n");
        assert_eq!(c.cmd(&[b"GET", b"missing"]), b"$-1\r\n");
        let mut conn = s.client();
        let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
        assert_eq!(v, "v");
        let pid = s.pid();
        let port = s.port;
        s.restart();
        assert_eq!(s.port, port);
        assert_ne!(s.pid(), pid);
        assert_eq!(s.raw().cmd(&[b"GET", b"k"]), b"$-1\r\n");
        s.kill();
        assert!(!s.is_running());
        assert!(!pings(port));
    }
}

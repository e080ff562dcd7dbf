//! A `respite` process under test: config written to a temp dir, log captured, killed on drop.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{RawClient, START_TIMEOUT, free_port, respite_bin, wait_for_port};

/// A running `respite --config <file>`.
pub struct Respite {
    /// The first listener's port.
    pub port: u16,
    /// The admin HTTP port.
    pub admin_port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// A one-listener config over `backends` (ketama unless `lb_policy` says otherwise): the shape
/// most tests need. `extra_listener` lines go into the `[[listeners]]` table.
pub fn simple_config(
    port: u16,
    admin_port: u16,
    backends: &[String],
    workers: usize,
    extra_listener: &str,
) -> String {
    let hosts: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        r#"[admin]
address = "127.0.0.1:{admin_port}"
[runtime]
workers = {workers}
drain_timeout = "5s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "1s"
enable_hashtagging = true
{extra_listener}
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
type = "static"
lb_policy = "ketama"
connect_timeout = "250ms"
hosts = [{}]
"#,
        hosts.join(", ")
    )
}

impl Respite {
    /// Starts respite over `backends` with [`simple_config`] and waits for its listener.
    pub fn over(backends: &[String], workers: usize) -> Respite {
        Respite::over_with(backends, workers, "")
    }

    /// Like [`Respite::over`] with extra listener lines (e.g. `op_timeout`, auth).
    pub fn over_with(backends: &[String], workers: usize, extra_listener: &str) -> Respite {
        let port = free_port();
        let admin_port = free_port();
        let cfg = simple_config(port, admin_port, backends, workers, extra_listener);
        Respite::start(&cfg, port, admin_port)
    }

    /// Starts respite with `config` (whose first listener is on `port`, admin on `admin_port`).
    pub fn start(config: &str, port: u16, admin_port: u16) -> Respite {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("respite.toml"), config).expect("write config");
        let mut r = Respite {
            port,
            admin_port,
            child: None,
            dir,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let log = fs::File::create(self.dir.path().join("respite.log")).expect("log file");
        let child = Command::new(respite_bin())
            .arg("--config")
            .arg(self.config_path())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn respite");
        self.child = Some(child);
        if !wait_for_port(self.port, START_TIMEOUT) {
            panic!(
                "respite did not listen on {}: log:\n{}",
                self.port,
                self.log()
            );
        }
        self.settle_readiness_probe();
    }

    /// Waits until the connection [`wait_for_port`] opened and closed is counted and gone, so a
    /// test's stats baseline taken next is not raced by it (the worker accepts it
    /// asynchronously: `downstream_cx_total` could otherwise grow after the baseline). A config
    /// without a reachable admin endpoint returns after the deadline without failing.
    fn settle_readiness_probe(&self) {
        let settled = || {
            let Ok((200, body)) = crate::admin::try_request(self.admin_port, "GET", "/stats")
            else {
                return false;
            };
            let sum = |suffix: &str| -> i64 {
                body.lines()
                    .filter_map(|l| l.split_once(": "))
                    .filter(|(k, _)| k.starts_with("redis.") && k.ends_with(suffix))
                    .filter_map(|(_, v)| v.trim().parse::<i64>().ok())
                    .sum()
            };
            sum(".downstream_cx_total") >= 1 && sum(".downstream_cx_active") == 0
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !settled() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Path of the config file (rewrite it and call [`Respite::reload`]).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("respite.toml")
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A raw RESP client connected to the listener.
    pub fn raw(&self) -> RawClient {
        RawClient::connect(&self.addr())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(|c| c.id())
            .expect("respite not running")
    }

    /// What respite logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("respite.log")).unwrap_or_default()
    }

    /// Sends a signal (`"HUP"`, `"TERM"`, …) with kill(1).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig} failed");
    }

    /// Writes `config` to the config file and sends SIGHUP.
    pub fn reload(&self, config: &str) {
        fs::write(self.config_path(), config).expect("write config");
        self.signal("HUP");
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET <path>` on the admin endpoint: (status, body).
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        admin_get(self.admin_port, path)
    }

    /// `/stats` parsed into name → value (histogram lines skipped).
    pub fn stats(&self) -> BTreeMap<String, i64> {
        let (_, body) = self.admin_get("/stats");
        body.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(": ")?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// One stat's value (0 when absent).
    pub fn stat(&self, name: &str) -> i64 {
        self.stats().get(name).copied().unwrap_or(0)
    }
}

impl Drop for Respite {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A minimal HTTP/1.0 GET against 127.0.0.1:`port`: (status, body).
pub fn admin_get(port: u16, path: &str) -> (u16, String) {
    crate::admin::request(port, "GET", path)
}

//! A `respite` process under test: config written to a temp dir, log captured, killed on drop.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{RawClient, START_TIMEOUT, free_port, respite_bin, wait_for_port};

/// A running `respite --config <file>` and/or `respite --control-socket <path>`.
pub struct Respite {
    /// The first listener's port (0 for a process started empty).
    pub port: u16,
    /// The admin HTTP port (0 for a process started empty: its admin requests go over the
    /// control socket instead).
    pub admin_port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// `--control-socket`, when given.
    control: Option<PathBuf>,
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
            control: None,
        };
        r.spawn();
        r
    }

    /// Starts `respite --control-socket <control_socket>` with no config file: no listener, no
    /// cluster, until a [`Respite::push`]. Waits until the socket answers. Its admin requests
    /// ([`Respite::stats`], [`Respite::admin_get`]) go over the socket.
    pub fn start_empty(control_socket: &Path) -> Respite {
        let mut r = Respite {
            port: 0,
            admin_port: 0,
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            control: Some(control_socket.to_path_buf()),
        };
        r.spawn();
        r
    }

    /// Like [`Respite::start`], with `--control-socket <control_socket>` too.
    pub fn start_with_socket(
        config: &str,
        port: u16,
        admin_port: u16,
        control_socket: &Path,
    ) -> Respite {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("respite.toml"), config).expect("write config");
        let mut r = Respite {
            port,
            admin_port,
            child: None,
            dir,
            control: Some(control_socket.to_path_buf()),
        };
        r.spawn();
        r
    }

    /// Pushes `toml` over the control socket (`respite_control::push::push`): `Err` is the
    /// data plane's reason.
    pub fn push(&self, toml: &str) -> Result<(), String> {
        let socket = self
            .control
            .as_deref()
            .expect("started without --control-socket");
        respite_control::push::push(socket, toml).map_err(|e| e.to_string())
    }

    /// `method path` (empty body) over the control socket: (status, body).
    pub fn control_request(&self, method: &str, path: &str) -> (u16, String) {
        let socket = self
            .control
            .as_deref()
            .expect("started without --control-socket");
        crate::admin::control_request(socket, method, path)
    }

    fn spawn(&mut self) {
        let log = fs::File::create(self.dir.path().join("respite.log")).expect("log file");
        let mut cmd = Command::new(respite_bin());
        if self.config_path().exists() {
            cmd.arg("--config").arg(self.config_path());
        }
        if let Some(socket) = &self.control {
            cmd.arg("--control-socket").arg(socket);
            if !self.config_path().exists() {
                // Started empty: an admin port of its own, so parallel tests never share 9901.
                cmd.arg("--admin").arg("127.0.0.1:0");
            }
        }
        let child = cmd
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
        if self.port == 0 {
            let socket = self.control.clone().expect("a port or a control socket");
            let deadline = Instant::now() + START_TIMEOUT;
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                if Instant::now() > deadline {
                    panic!(
                        "respite did not answer on {}: log:\n{}",
                        socket.display(),
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
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

    /// `GET <path>` on the admin endpoint (over the control socket when there is no admin
    /// port): (status, body).
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        if self.admin_port == 0 && self.control.is_some() {
            return self.control_request("GET", path);
        }
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

/// `GET path` against 127.0.0.1:`port`: (status, body).
pub fn admin_get(port: u16, path: &str) -> (u16, String) {
    crate::admin::request(port, "GET", path)
}

//! Harness for the eBPF sockmap tests: a throw-away cgroup v2 that processes are
//! spawned into, `respite-control --sockmap` under test, and the sockmap's numbers as the
//! kill-switch subcommand (`respite-control sockmap status`) and `GET /sockmap` show them.
//!
//! The kernel state (programs, pinned maps under `<bpffs>/respite/`) is shared by every test on
//! the machine, so its counters only ever grow: tests compare snapshots ([`Counters`]) taken
//! before and after, never absolute values.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub use respite_ebpf::Counters;

use crate::xds::control_bin;
use crate::{START_TIMEOUT, free_port};

/// Environment variable that turns "skip with a printed reason" into a failure (CI sets it).
pub const REQUIRE_ENV: &str = "RESPITE_REQUIRE_SOCKMAP";

/// Environment variable naming the bpffs the tests use instead of a private one (e.g.
/// `/sys/fs/bpf`, the default of respite-control).
pub const BPFFS_ENV: &str = "RESPITE_SOCKMAP_BPFFS";

/// Handles a missing precondition: panics with `reason` when [`REQUIRE_ENV`] is `1`, else
/// prints it (the caller then returns: the test is skipped).
pub fn skip(reason: &str) {
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_ENV}=1 but the sockmap cannot run here: {reason}");
    }
    println!("SKIPPED: {reason}");
}

/// Whether this process runs as root (effective uid 0, from /proc/self/status).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The cgroup v2 mount point from /proc/self/mounts (here `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// The reason the sockmap tests cannot run on this machine at all, if any (root and a cgroup v2
/// mount are needed; whether the programs load is for `GET /sockmap` to say).
pub fn missing_privileges() -> Option<String> {
    if !is_root() {
        return Some("not root".into());
    }
    if cgroup2_root().is_none() {
        return Some("no cgroup2 mount in /proc/self/mounts".into());
    }
    None
}

// ---- a private bpffs ----------------------------------------------------------------------

/// Where a test's pinned maps live: an empty temp dir that respite-control mounts a bpffs
/// instance on (it mounts one where none is), so the kill switch, the port filter and the
/// counters are this test's alone, whatever else on the node uses the default
/// `/sys/fs/bpf/respite/` (another respite-control, a benchmark switching it off and on). With
/// [`BPFFS_ENV`] set, that path instead (nothing unmounted then). Dropping it unmounts the
/// private instance, which frees its maps.
pub struct Bpffs {
    /// The mount point to pass as `--bpffs`.
    pub path: PathBuf,
    private: Option<tempfile::TempDir>,
}

impl Bpffs {
    /// A private mount point (mounted by the first respite-control given it), or [`BPFFS_ENV`].
    pub fn new() -> Bpffs {
        if let Some(p) = std::env::var_os(BPFFS_ENV) {
            return Bpffs {
                path: PathBuf::from(p),
                private: None,
            };
        }
        let dir = tempfile::Builder::new()
            .prefix("respite-test-bpffs-")
            .tempdir()
            .expect("tempdir");
        Bpffs {
            path: dir.path().to_path_buf(),
            private: Some(dir),
        }
    }

    /// The path as a string.
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }

    /// Runs `respite-control sockmap <verb> --bpffs PATH` (the kill switch).
    pub fn kill_switch(&self, verb: &str) -> Output {
        Command::new(control_bin())
            .args(["sockmap", verb, "--bpffs"])
            .arg(&self.path)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run respite-control sockmap {verb}: {e}"))
    }

    /// The counters of `respite-control sockmap status`; panics (with its output) if it fails.
    pub fn status(&self) -> Counters {
        let text = self.status_text();
        Counters::from_lines(&text)
            .unwrap_or_else(|| panic!("respite-control sockmap status printed:\n{text}"))
    }

    /// The `enabled` line of `respite-control sockmap status` (the kill switch's position).
    pub fn enabled(&self) -> bool {
        let text = self.status_text();
        match text.lines().find_map(|l| l.trim().strip_prefix("enabled ")) {
            Some("1") => true,
            Some("0") => false,
            _ => panic!("respite-control sockmap status printed:\n{text}"),
        }
    }

    /// The output of `respite-control sockmap status`; panics (with its output) if it fails.
    fn status_text(&self) -> String {
        let out = self.kill_switch("status");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "respite-control sockmap status: {}: {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// `respite-control sockmap off|on`; panics (with its output) if it fails.
    pub fn switch(&self, verb: &str) {
        let out = self.kill_switch(verb);
        assert!(
            out.status.success(),
            "respite-control sockmap {verb}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Default for Bpffs {
    fn default() -> Self {
        Bpffs::new()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        if self.private.is_some() {
            // Lazy: a process still holding a map fd does not keep the mount point busy.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.path)
                .stderr(Stdio::null())
                .status();
        }
    }
}

// ---- the test cgroup ---------------------------------------------------------------------

/// A cgroup v2 `respite-test-<pid>-<n>` under the cgroup2 mount, created empty. Dropping it
/// moves whatever still runs in it to the root cgroup, then removes it (retrying while the
/// kernel still counts exiting tasks).
pub struct TestCgroup {
    /// `/sys/fs/cgroup/unified/respite-test-<pid>-<n>`.
    pub path: PathBuf,
    root: PathBuf,
}

impl TestCgroup {
    /// Creates a fresh cgroup; panics if it cannot (callers check [`missing_privileges`]).
    pub fn create(n: u32) -> TestCgroup {
        let root = cgroup2_root().expect("a cgroup2 mount");
        let path = root.join(format!("respite-test-{}-{n}", std::process::id()));
        if path.exists() {
            let stale = TestCgroup {
                path: path.clone(),
                root: root.clone(),
            };
            drop(stale);
        }
        fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        TestCgroup { path, root }
    }

    /// A command that runs `bin args…` inside this cgroup: `sh -c 'echo $$ > CG/cgroup.procs
    /// && exec "$@"' sh bin args…`, so the process (and its children) are in the cgroup before
    /// they open any socket (a socket belongs to the cgroup of its creator, an accepted one to
    /// its listener's).
    pub fn command(&self, bin: impl AsRef<Path>, args: &[String]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && exec \"$@\"",
                self.path.display()
            ))
            .arg("sh")
            .arg(bin.as_ref())
            .args(args);
        cmd
    }

    /// The pids now in the cgroup.
    pub fn procs(&self) -> Vec<u32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// The path as a string (for `--sockmap-cgroup`).
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            for pid in self.procs() {
                let _ = fs::write(self.root.join("cgroup.procs"), pid.to_string());
            }
            if fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            if Instant::now() > deadline {
                eprintln!("cannot remove cgroup {}", self.path.display());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

// ---- processes in the cgroup -------------------------------------------------------------

/// A child process with its output in a log file, SIGTERMed (then SIGKILLed after 3 s) on drop.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr to a log file in a fresh temp dir.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        let dir = tempfile::Builder::new()
            .prefix("respite-sockmap-")
            .tempdir()
            .expect("tempdir");
        let log = dir.path().join(format!("{name}.log"));
        let file = fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.into(),
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Its output so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Sends `sig` ("HUP", "TERM", …) with kill(1).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {}", self.name);
    }

    /// Waits up to `timeout` for it to exit on its own; `None` if it still runs.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => return Some(status),
                Some(Ok(None)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    /// SIGTERM, wait up to 3 s, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "---- {} log (tail) ----\n{}\n----",
                self.name,
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// A `redis-server` on a free port started inside `cg` (no persistence), waited for.
pub fn redis_in(cg: &TestCgroup) -> (Proc, u16) {
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        "/tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let p = Proc::spawn("redis-server", cg.command("redis-server", &args));
    assert!(
        crate::wait_for_port(port, START_TIMEOUT),
        "redis-server on {port} did not start: {}",
        p.log()
    );
    (p, port)
}

/// `respite --control-socket SOCK --admin 127.0.0.1:ADMIN` started empty inside `cg`; waits
/// for the socket. Returns it and its admin port.
pub fn respite_in(cg: &TestCgroup, socket: &Path) -> (Proc, u16) {
    let admin = free_port();
    let args = vec![
        "--control-socket".to_string(),
        socket.display().to_string(),
        "--admin".to_string(),
        format!("127.0.0.1:{admin}"),
    ];
    let mut cmd = cg.command(crate::respite_bin(), &args);
    cmd.env("RUST_LOG", "info");
    let mut p = Proc::spawn("respite", cmd);
    let deadline = Instant::now() + START_TIMEOUT;
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(p.alive(), "respite exited: {}", p.log());
        assert!(
            Instant::now() < deadline,
            "respite did not answer on {}: {}",
            socket.display(),
            p.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (p, admin)
}

// ---- respite-control --sockmap -----------------------------------------------------------

/// A running `respite-control --config FILE --admin 127.0.0.1:PORT [--dataplane SOCK]
/// <sockmap flags>`; it moves itself into the sockmap cgroup.
pub struct SockmapControl {
    /// The process.
    pub proc: Proc,
    /// Its admin port.
    pub admin_port: u16,
    /// The config file (rewrite it, then SIGHUP).
    pub config: PathBuf,
    _dir: tempfile::TempDir,
}

impl SockmapControl {
    /// Writes `config` to a file and starts the control process with `flags` (e.g.
    /// `["--sockmap", "--sockmap-cgroup", CG]`); waits until `GET /sockmap` answers 200.
    pub fn start(config: &str, dataplane: Option<&Path>, flags: &[String]) -> SockmapControl {
        Self::start_as(config, dataplane, flags, None)
    }

    /// Like [`SockmapControl::start`], run through `wrapper` (e.g. `["setpriv",
    /// "--reuid=65534", …]`) when given. The config's directory is made world-readable so an
    /// unprivileged control process can read it.
    pub fn start_as(
        config: &str,
        dataplane: Option<&Path>,
        flags: &[String],
        wrapper: Option<&[&str]>,
    ) -> SockmapControl {
        let dir = tempfile::Builder::new()
            .prefix("respite-sockmap-control-")
            .tempdir()
            .expect("tempdir");
        let file = dir.path().join("respite.toml");
        fs::write(&file, config).expect("write config");
        make_world_readable(dir.path());
        make_world_readable(&file);
        let admin_port = free_port();
        let mut args: Vec<String> = vec![
            "--config".into(),
            file.display().to_string(),
            "--admin".into(),
            format!("127.0.0.1:{admin_port}"),
        ];
        if let Some(sock) = dataplane {
            args.push("--dataplane".into());
            args.push(sock.display().to_string());
        }
        args.extend(flags.iter().cloned());
        let mut cmd = match wrapper {
            Some(w) => {
                let mut c = Command::new(w[0]);
                c.args(&w[1..]).arg(control_bin()).args(&args);
                c
            }
            None => {
                let mut c = Command::new(control_bin());
                c.args(&args);
                c
            }
        };
        cmd.env("RUST_LOG", "info");
        let mut proc = Proc::spawn("respite-control", cmd);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok((200, _)) = crate::admin::try_request(admin_port, "GET", "/sockmap") {
                break;
            }
            assert!(proc.alive(), "respite-control exited:\n{}", proc.log());
            assert!(
                Instant::now() < deadline,
                "respite-control's GET /sockmap did not answer 200:\n{}",
                proc.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        SockmapControl {
            proc,
            admin_port,
            config: file,
            _dir: dir,
        }
    }

    /// `GET /sockmap` as JSON.
    pub fn sockmap(&self) -> serde_json::Value {
        let (status, body) = crate::admin::request(self.admin_port, "GET", "/sockmap");
        assert_eq!(status, 200, "GET /sockmap: {body}");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET /sockmap is not JSON ({e}): {body}"))
    }

    /// Waits (up to 15 s: the self-test runs first) until `GET /sockmap` says `enabled` or
    /// `unavailable`; returns the document. A state still `disabled` at the end is returned
    /// as it is.
    pub fn settled(&self) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let doc = self.sockmap();
            if doc["state"] == "enabled"
                || doc["state"] == "unavailable"
                || Instant::now() > deadline
            {
                return doc;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `ports` of `GET /sockmap`.
    pub fn ports(&self) -> Vec<u16> {
        ports_of(&self.sockmap())
    }

    /// The counters of `GET /sockmap`.
    pub fn counters(&self) -> Counters {
        let doc = self.sockmap();
        serde_json::from_value(doc.clone())
            .unwrap_or_else(|e| panic!("GET /sockmap counters ({e}): {doc}"))
    }
}

/// `ports` of a `GET /sockmap` document.
pub fn ports_of(doc: &serde_json::Value) -> Vec<u16> {
    doc["ports"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_u64().and_then(|p| u16::try_from(p).ok()))
                .collect()
        })
        .unwrap_or_default()
}

fn make_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = if path.is_dir() { 0o755 } else { 0o644 };
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
}

// ---- the numbers ---------------------------------------------------------------------------

/// A `[[listeners]]` on `port` whose catch-all goes to a static ketama cluster `cache` over
/// `backends` (data plane TOML).
pub fn proxy_config(port: u16, backends: &[String]) -> String {
    let hosts: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "[[listeners]]\nname = \"main\"\naddress = \"127.0.0.1:{port}\"\nstat_prefix = \"main\"\n\
         op_timeout = \"5s\"\n[listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n\
         [[clusters]]\nname = \"cache\"\ntype = \"static\"\nlb_policy = \"ketama\"\n\
         connect_timeout = \"1s\"\nhosts = [{}]\n",
        hosts.join(", ")
    )
}

/// `/stats` of a data plane's admin port parsed into name → value.
pub fn dataplane_stats(admin_port: u16) -> BTreeMap<String, i64> {
    let (_, body) = crate::admin::request(admin_port, "GET", "/stats");
    body.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

//! The processes a comparison runs against: redis-servers, twemproxy (nutcracker), two Respite
//! instances (1 and 2 workers) and optionally a baseline Respite binary (1 worker), on free
//! loopback ports ([`Procs`]); the cluster comparison's
//! processes are in `cluster.rs`. All are killed when their [`Fleet`] drops, and each child gets
//! `PR_SET_PDEATHSIG` so that it also dies if this process is killed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One started server process.
#[derive(Debug, Clone)]
pub struct Server {
    /// Short name, e.g. `redis1`, `twemproxy`, `respite-1w`.
    pub name: String,
    /// Listening port on 127.0.0.1.
    pub port: u16,
    /// Process id (the server itself, not a wrapper).
    pub pid: u32,
    /// Respite's admin HTTP port on 127.0.0.1 (`None` for other servers).
    pub admin_port: Option<u16>,
}

/// Processes started with their configs and logs in one scratch directory. Dropping it kills
/// every child (the directory stays, so that startup errors can point at the logs; the owners
/// below remove it when they drop).
pub struct Fleet {
    children: Vec<Child>,
    /// Directory with configs and logs.
    pub dir: PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_all();
    }
}

impl Fleet {
    /// An empty fleet whose directory is `$TMPDIR/<name>.<pid>`.
    pub fn new(name: &str) -> Result<Fleet, String> {
        let dir = std::env::temp_dir().join(format!("{name}.{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Fleet {
            children: Vec::new(),
            dir,
        })
    }

    /// Kills and reaps every child.
    fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
        self.children.clear();
    }

    /// Kills every child, then removes the directory.
    pub fn remove(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Starts a redis-server on `port` (no persistence, 20 000 clients, `extra` arguments
    /// appended, working directory `dir`) and waits until it answers PING.
    pub fn redis(&mut self, name: &str, port: u16, extra: &[&str]) -> Result<Server, String> {
        let mut child = spawn(
            Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--maxclients",
                    "20000",
                    "--dir",
                ])
                .arg(&self.dir)
                .args(extra),
            name,
            &self.dir.join(format!("{name}.log")),
        )?;
        let ready = wait_ready(name, port, &mut child, &self.dir);
        let pid = child.id();
        if ready.is_err() {
            let _ = child.kill();
        }
        self.children.push(child);
        ready.map(|()| Server {
            name: name.to_string(),
            port,
            pid,
            admin_port: None,
        })
    }

    /// Starts Respite `bin` as `name` (its config and log file names) with `workers` workers,
    /// one listener (`op_timeout`) whose catch-all route goes to the cluster `backends`,
    /// described by `cluster` (the TOML body of its `[[clusters]]` table after `name`), and
    /// waits until it answers PING.
    pub fn respite(
        &mut self,
        name: &str,
        bin: &Path,
        workers: usize,
        op_timeout: &str,
        cluster: &str,
    ) -> Result<Server, String> {
        let port = free_port()?;
        let admin = free_port()?;
        let toml = format!(
            "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = {workers}\n\
             [[listeners]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\n\
             stat_prefix = \"bench\"\nop_timeout = \"{op_timeout}\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"backends\"\n\
             [[clusters]]\nname = \"backends\"\n{cluster}"
        );
        self.respite_with_config(name, bin, &toml, port, admin)
    }

    /// Starts Respite `bin` as `name` with the config `toml` (written to `<name>.toml`), whose
    /// admin endpoint is on `admin`, and waits until it answers PING on the plain listener
    /// `port`.
    pub fn respite_with_config(
        &mut self,
        name: &str,
        bin: &Path,
        toml: &str,
        port: u16,
        admin: u16,
    ) -> Result<Server, String> {
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, toml).map_err(|e| format!("{}: {e}", path.display()))?;
        let log = self.dir.join(format!("{name}.log"));
        let mut child = spawn(Command::new(bin).arg("--config").arg(&path), name, &log)?;
        let ready = wait_ready(name, port, &mut child, &self.dir);
        let pid = child.id();
        if ready.is_err() {
            let _ = child.kill();
        }
        self.children.push(child);
        ready.map(|()| Server {
            name: name.to_string(),
            port,
            pid,
            admin_port: Some(admin),
        })
    }
}

/// The TOML list of `127.0.0.1:PORT` hosts: `["127.0.0.1:1", "127.0.0.1:2"]`.
pub fn hosts_toml(ports: impl IntoIterator<Item = u16>) -> String {
    let hosts: Vec<String> = ports
        .into_iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!("[{}]", hosts.join(", "))
}

/// Everything started for a comparison; dropping it kills every child and removes the directory.
pub struct Procs {
    fleet: Fleet,
    /// The backends; `redis[0]` doubles as the "direct" target.
    pub redis: Vec<Server>,
    pub twemproxy: Server,
    pub respite_1w: Server,
    pub respite_2w: Server,
    /// `--baseline-bin`: the baseline binary with `respite_1w`'s config.
    pub respite_1w_baseline: Option<Server>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.fleet.remove();
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (inherited by the children); returns it.
pub fn raise_nofile() -> Result<u64, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the rlimit struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(format!(
                "getrlimit(NOFILE): {}",
                std::io::Error::last_os_error()
            ));
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return Err(format!(
                "setrlimit(NOFILE, {}): {}",
                lim.rlim_max,
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(lim.rlim_cur)
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// `PING` until `+PONG` or the timeout.
pub fn wait_ready(name: &str, port: u16, child: &mut Child, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{name} exited during startup ({status}); logs in {}",
                dir.display()
            ));
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 7];
            if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
                && s.read_exact(&mut buf).is_ok()
                && &buf == b"+PONG\r\n"
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} not answering PING on port {port} after 10 s; logs in {}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Spawns `cmd` with stdout and stderr to `log` and `PR_SET_PDEATHSIG` (the child dies with
/// this process); `name` is for error messages.
pub(crate) fn spawn(cmd: &mut Command, name: &str, log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe; nothing else runs in the pre_exec child.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "cannot start {name}: `{}` not found (install it, e.g. `apt-get install redis-server nutcracker`)",
                cmd.get_program().to_string_lossy()
            )
        } else {
            format!("cannot start {name}: {e}")
        }
    })
}

impl Procs {
    /// Starts `redis_servers` redis-servers, nutcracker, two Respites and the `baseline_bin`
    /// Respite if given, waiting until all answer. `max_leased`: the Respites'
    /// `max_leased_connections` (leased upstream connections per host and worker), else their
    /// default (the key is then left out, so a baseline that predates it still starts).
    pub fn start(
        redis_servers: usize,
        respite_bin: &Path,
        baseline_bin: Option<&Path>,
        max_leased: Option<usize>,
    ) -> Result<Procs, String> {
        let mut fleet = Fleet::new("respite-compare")?;
        let mut redis = Vec::new();
        for i in 1..=redis_servers {
            redis.push(fleet.redis(&format!("redis{i}"), free_port()?, &[])?);
        }
        let dir = fleet.dir.clone();
        let tw_port = free_port()?;
        let tw_stats = free_port()?;
        let yml = format!(
            "bench:\n  listen: 127.0.0.1:{tw_port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
             redis: true\n  auto_eject_hosts: false\n  server_connections: 1\n  servers:\n{}",
            redis
                .iter()
                .map(|r| format!("   - 127.0.0.1:{}:1\n", r.port))
                .collect::<String>()
        );
        let yml_path = dir.join("nutcracker.yml");
        std::fs::write(&yml_path, yml).map_err(|e| format!("{}: {e}", yml_path.display()))?;
        let mut child = spawn(
            Command::new("nutcracker")
                .arg("-c")
                .arg(&yml_path)
                .args(["-s", &tw_stats.to_string(), "-a", "127.0.0.1", "-o"])
                .arg(dir.join("nutcracker.log")),
            "nutcracker",
            &dir.join("nutcracker.out"),
        )?;
        let ready = wait_ready("nutcracker", tw_port, &mut child, &dir);
        let twemproxy = Server {
            name: "twemproxy".into(),
            port: tw_port,
            pid: child.id(),
            admin_port: None,
        };
        fleet.children.push(child);
        ready?;

        let mut backends = format!(
            "type = \"static\"\nhosts = {}\n",
            hosts_toml(redis.iter().map(|r| r.port))
        );
        if let Some(n) = max_leased {
            backends.push_str(&format!("max_leased_connections = {n}\n"));
        }
        let respite_1w = fleet.respite("respite-1w", respite_bin, 1, "5s", &backends)?;
        let respite_2w = fleet.respite("respite-2w", respite_bin, 2, "5s", &backends)?;
        let respite_1w_baseline = baseline_bin
            .map(|bin| fleet.respite(super::baseline::TARGET, bin, 1, "5s", &backends))
            .transpose()?;
        Ok(Procs {
            fleet,
            redis,
            twemproxy,
            respite_1w,
            respite_2w,
            respite_1w_baseline,
        })
    }

    /// Directory with configs and logs (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.fleet.dir
    }
}

/// First line of `PROGRAM --version` (stdout or stderr), if it runs.
pub fn version_of(program: &str) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().next().map(|l| l.trim().to_string())
}

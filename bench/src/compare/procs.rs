//! The processes a comparison runs against: redis-servers, twemproxy (nutcracker) and two Respite
//! instances (1 and 2 workers), on free loopback ports. All are killed when [`Procs`] drops, and
//! each child gets `PR_SET_PDEATHSIG` so that it also dies if this process is killed.

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
}

/// Everything started for a comparison; dropping it kills every child and removes `dir`.
pub struct Procs {
    children: Vec<Child>,
    /// Directory with configs and logs.
    pub dir: PathBuf,
    /// The backends; `redis[0]` doubles as the "direct" target.
    pub redis: Vec<Server>,
    pub twemproxy: Server,
    pub respite_1w: Server,
    pub respite_2w: Server,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
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
fn wait_ready(name: &str, port: u16, child: &mut Child, dir: &Path) -> Result<(), String> {
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

fn spawn(cmd: &mut Command, name: &str, log: &Path) -> Result<Child, String> {
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
    /// Starts `redis_servers` redis-servers, nutcracker and two Respites, waiting until all answer.
    pub fn start(redis_servers: usize, respite_bin: &Path) -> Result<Procs, String> {
        let dir = std::env::temp_dir().join(format!("respite-compare.{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Children are killed by Drop only once `Procs` exists; until then by this guard.
        struct Guard(Vec<Child>);
        impl Drop for Guard {
            fn drop(&mut self) {
                for c in self.0.iter_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
        let mut guard = Guard(Vec::new());
        let mut redis = Vec::new();
        for i in 1..=redis_servers {
            let port = free_port()?;
            let name = format!("redis{i}");
            let mut child = spawn(
                Command::new("redis-server").args([
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
                ]),
                &name,
                &dir.join(format!("{name}.log")),
            )?;
            wait_ready(&name, port, &mut child, &dir)?;
            redis.push(Server {
                name,
                port,
                pid: child.id(),
            });
            guard.0.push(child);
        }
        let hosts: Vec<String> = redis
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.port))
            .collect();

        let tw_port = free_port()?;
        let tw_stats = free_port()?;
        let yml = format!(
            "bench:\n  listen: 127.0.0.1:{tw_port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
             redis: true\n  auto_eject_hosts: false\n  server_connections: 1\n  servers:\n{}",
            hosts
                .iter()
                .map(|h| format!("   - {h}:1\n"))
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
        wait_ready("nutcracker", tw_port, &mut child, &dir)?;
        let twemproxy = Server {
            name: "twemproxy".into(),
            port: tw_port,
            pid: child.id(),
        };
        guard.0.push(child);

        let mut respites = Vec::new();
        for workers in [1, 2] {
            let name = format!("respite-{workers}w");
            let port = free_port()?;
            let admin = free_port()?;
            let toml = format!(
                "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = {workers}\n\
                 [[listeners]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\n\
                 stat_prefix = \"bench\"\nop_timeout = \"5s\"\n\
                 [listeners.prefix_routes.catch_all_route]\ncluster = \"backends\"\n\
                 [[clusters]]\nname = \"backends\"\ntype = \"static\"\nhosts = [{}]\n",
                hosts
                    .iter()
                    .map(|h| format!("\"{h}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, toml).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut child = spawn(
                Command::new(respite_bin).arg("--config").arg(&path),
                &name,
                &dir.join(format!("{name}.log")),
            )?;
            wait_ready(&name, port, &mut child, &dir)?;
            respites.push(Server {
                name,
                port,
                pid: child.id(),
            });
            guard.0.push(child);
        }
        let children = std::mem::take(&mut guard.0);
        let mut it = respites.into_iter();
        let (Some(respite_1w), Some(respite_2w)) = (it.next(), it.next()) else {
            return Err("internal: respite processes missing".into());
        };
        Ok(Procs {
            children,
            dir,
            redis,
            twemproxy,
            respite_1w,
            respite_2w,
        })
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

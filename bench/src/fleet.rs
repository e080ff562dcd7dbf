//! The processes `soak` and `attack` run against, owned one by one so that they can be signalled,
//! stopped and started again: redis-servers that keep their port and data directory across a
//! restart ([`Backend`]) and one Respite whose config file can be rewritten and reloaded with
//! SIGHUP ([`Proxy`]). Both kill their child on drop; `compare`'s spawn helper gives each child
//! `PR_SET_PDEATHSIG`, so they also die with this process.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::compare::procs::{free_port, spawn, wait_ready};

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) -> Result<(), String> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
    // SAFETY: kill(2) only sends a signal; the pid is one of our own children.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Waits up to `timeout` for `child` to exit, then SIGKILLs it; returns whether it exited alone.
fn reap(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// One redis-server on a fixed port with its own data directory (so its AOF survives restarts).
pub struct Backend {
    pub name: String,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Backend {
    /// Starts `name` on a free port in `parent/name/` with `extra` redis-server arguments.
    pub fn start(parent: &Path, name: &str, extra: &[&str]) -> Result<Backend, String> {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut b = Backend {
            name: name.to_string(),
            port: free_port()?,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        b.spawn()?;
        Ok(b)
    }

    /// Starts the process (again) and waits until it answers PING (after loading its AOF).
    pub fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.join("redis.log");
        // Append, so a restart keeps the log of the run before it.
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--maxclients", "20000", "--dir"])
            .arg(&self.dir)
            .args(["--logfile"])
            .arg(&log)
            .args(&self.extra);
        let mut child = spawn(&mut cmd, &self.name, &self.dir.join("redis.out"))?;
        let ready = wait_ready(&self.name, self.port, &mut child, &self.dir);
        if ready.is_err() {
            let _ = child.kill();
            let _ = child.wait();
            return ready;
        }
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM (Redis flushes its AOF and exits), waiting up to 15 s before a SIGKILL; returns
    /// whether it exited on its own.
    pub fn stop(&mut self) -> Result<bool, String> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        signal(child.id(), libc::SIGTERM)?;
        Ok(reap(&mut child, Duration::from_secs(15)))
    }

    /// SIGKILL (no AOF flush, no wait for a busy server), then starts it again.
    pub fn kill_and_restart(&mut self) -> Result<(), String> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn()
    }

    /// Process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A direct connection (not through Respite) with a 5 s read timeout.
    pub fn connect(&self) -> Result<Direct, String> {
        Direct::connect(self.port)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A blocking RESP connection for a few commands at a time (setup, INFO, the ledger check).
pub struct Direct {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Direct {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> Result<Direct, String> {
        let stream =
            TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("port {port}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        Ok(Direct {
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends one command and returns its whole reply (type byte and CRLFs included).
    pub fn cmd(&mut self, args: &[&[u8]]) -> Result<Vec<u8>, String> {
        self.stream
            .write_all(&crate::resp::command(args))
            .map_err(|e| format!("write: {e}"))?;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match crate::resp::parse_reply(&self.buf).map_err(|e| e.to_string())? {
                Some(r) => {
                    let reply: Vec<u8> = self.buf.drain(..r.len).collect();
                    return Ok(reply);
                }
                None => {
                    let n = self
                        .stream
                        .read(&mut chunk)
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err("connection closed".into());
                    }
                    self.buf
                        .extend_from_slice(chunk.get(..n).unwrap_or_default());
                }
            }
        }
    }

    /// `INFO memory`: (`used_memory`, `used_memory_rss`) in bytes.
    pub fn memory(&mut self) -> Result<(u64, u64), String> {
        let info = self.cmd(&[b"INFO", b"memory"])?;
        let text = String::from_utf8_lossy(&info);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("no {name} in INFO memory"))
        };
        Ok((field("used_memory:")?, field("used_memory_rss:")?))
    }
}

/// The integer of a `:N\r\n` reply.
pub fn integer(reply: &[u8]) -> Option<i64> {
    let body = reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(body).ok()?.parse().ok()
}

/// The value of a bulk reply (`None` for nil or any other type).
pub fn bulk(reply: &[u8]) -> Option<&[u8]> {
    let rest = reply.strip_prefix(b"$")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    rest.get(nl + 1..rest.len().checked_sub(2)?)
}

/// Respite with the config file it was started from, which can be rewritten and reloaded.
pub struct Proxy {
    pub port: u16,
    pub admin: SocketAddr,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Child,
}

impl Proxy {
    /// Writes `toml` (made by `config(port, admin)`) to `dir/respite.toml` and starts `bin` on
    /// it, waiting until it answers PING.
    pub fn start(
        bin: &Path,
        dir: &Path,
        config: impl Fn(u16, u16) -> String,
    ) -> Result<Proxy, String> {
        let (port, admin) = (free_port()?, free_port()?);
        let path = dir.join("respite.toml");
        std::fs::write(&path, config(port, admin))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let log = dir.join("respite.log");
        let mut child = spawn(
            Command::new(bin).arg("--config").arg(&path),
            "respite",
            &log,
        )?;
        if let Err(e) = wait_ready("respite", port, &mut child, dir) {
            let _ = child.kill();
            let _ = child.wait();
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            return Err(format!("{e}; log: {}", tail.join(" | ")));
        }
        Ok(Proxy {
            port,
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            config: path,
            log,
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running (not exited, not reaped)?
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Writes `toml` as the config file and sends SIGHUP.
    pub fn reload(&self, toml: &str) -> Result<(), String> {
        std::fs::write(&self.config, toml)
            .map_err(|e| format!("{}: {e}", self.config.display()))?;
        signal(self.pid(), libc::SIGHUP)
    }

    /// Lines of the log containing `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().filter(|l| l.contains(needle)).count())
            .unwrap_or(0)
    }

    /// The sum over every listener of the `redis.<prefix>.<stat>` counters named in `stats`, in
    /// that order, from the admin `/stats`.
    pub fn listener_stats(&self, stats: &[&str]) -> Result<Vec<i64>, String> {
        let text = respite_tools::admin_client::get(self.admin, "/stats")?;
        Ok(sum_listener_stats(&text, stats))
    }

    /// SIGTERM (a drain), waiting up to 15 s before a SIGKILL.
    pub fn stop(&mut self) {
        if self.alive() && signal(self.pid(), libc::SIGTERM).is_ok() {
            reap(&mut self.child, Duration::from_secs(15));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sums `redis.*.<stat>` over listeners in `/stats` text (`name: value` lines).
pub fn sum_listener_stats(text: &str, stats: &[&str]) -> Vec<i64> {
    let mut out = vec![0; stats.len()];
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Ok(v) = value.trim().parse::<i64>() else {
            continue;
        };
        let Some(rest) = name.strip_prefix("redis.") else {
            continue;
        };
        // The prefix has no dot (stat_prefix rules), so the stat is everything after it.
        let Some((_, stat)) = rest.split_once('.') else {
            continue;
        };
        for (o, s) in out.iter_mut().zip(stats) {
            if stat == *s {
                *o += v;
            }
        }
    }
    out
}

/// Open file descriptors of `pid` (entries of /proc/PID/fd).
pub fn fd_count(pid: u32) -> Result<usize, String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        assert_eq!(integer(b":42\r\n"), Some(42));
        assert_eq!(integer(b"-ERR x\r\n"), None);
        assert_eq!(bulk(b"$3\r\nabc\r\n"), Some(&b"abc"[..]));
        assert_eq!(bulk(b"$-1\r\n"), None);
    }

    #[test]
    fn listener_stats_are_summed() {
        let text = "redis.a.evicted_clients: 2\nredis.b.evicted_clients: 3\n\
                    redis.a.client_output_buffer_limit_disconnections: 1\n\
                    cluster.c.evicted_clients: 9\nredis.a.command.get.total: 5\n";
        assert_eq!(
            sum_listener_stats(
                text,
                &[
                    "evicted_clients",
                    "client_output_buffer_limit_disconnections"
                ]
            ),
            vec![5, 1]
        );
        assert!(fd_count(std::process::id()).unwrap() > 0);
    }
}

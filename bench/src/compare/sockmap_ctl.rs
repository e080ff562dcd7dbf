//! The machinery under `compare --sockmap`: the cgroup v2 that Respite, Redis and the
//! load generator share, a private bpffs, `respite-control --sockmap` managing the eBPF programs
//! and pushing to Respite's control socket, its `GET /sockmap` counters, and the kill switch
//! (`respite-control sockmap on|off`). The kernel side, and the counters type, is the
//! `respite-ebpf` crate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde::Deserialize as _;

use super::procs::{free_port, spawn};

/// How long `respite-control --sockmap` may take to load its programs and pass its self-test.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// respite-control reads the counters once a second; a little more covers its tick's own work.
const TICK_WAIT: Duration = Duration::from_millis(1300);
/// The control process follows the kill switch within 1 s (docs/ebpf.md); a loaded machine gets more.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(4);

/// The counters of `GET /sockmap` (all cumulative since the maps were created, `sockets` a
/// gauge): the type respite-control shows them from.
pub use respite_ebpf::Counters;

/// `GET /sockmap` of respite-control: the state and the counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// `enabled`, `disabled` or `unavailable`.
    pub state: String,
    /// Why it is unavailable (or disabled), when the control process says.
    pub reason: Option<String>,
    pub counters: Counters,
    /// The port filter.
    pub ports: Vec<u16>,
}

/// Parses the `GET /sockmap` JSON body (docs/ebpf.md: `{"state":…, "reason":…, "sockets":u64,
/// "inserts":u64, "insert_fail":u64, "redirect_total":u64, "redirect_fail":u64, …}`).
///
/// Errors: not JSON, no `state` string, or a counter that is not a u64. Missing counters read
/// as 0 (an unavailable sockmap has none).
pub fn parse_status(body: &str) -> Result<Status, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("GET /sockmap: not JSON ({e}): {body}"))?;
    let state = v["state"]
        .as_str()
        .ok_or_else(|| format!("GET /sockmap: no `state` in {body}"))?
        .to_string();
    Ok(Status {
        state,
        reason: v["reason"].as_str().map(str::to_string),
        ports: v["ports"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| u16::try_from(p.as_u64()?).ok())
                    .collect()
            })
            .unwrap_or_default(),
        counters: Counters::deserialize(&v)
            .map_err(|e| format!("GET /sockmap: bad counters ({e}): {body}"))?,
    })
}

/// The cgroup v2 mount point, from /proc/self/mounts (here /sys/fs/cgroup/unified).
pub fn cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// This process's cgroup v2 path relative to the mount, from /proc/self/cgroup (`0::/path`).
pub fn own_cgroup(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Moves the whole process `pid` into the cgroup directory `cg` (its children inherit it).
fn enter_cgroup(cg: &Path, pid: u32) -> Result<(), String> {
    let procs = cg.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string())
        .map_err(|e| format!("cannot move pid {pid} into {}: {e}", procs.display()))
}

/// `EUID == 0`: loading eBPF, attaching to a cgroup and mounting bpffs all need it here.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Mounts a bpffs at `dir` (created); the pinned maps live there, private to this run.
fn mount_bpffs(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let c = |s: &str| std::ffi::CString::new(s).map_err(|e| e.to_string());
    let target = c(&dir.to_string_lossy())?;
    let (src, fstype) = (c("bpf")?, c("bpf")?);
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call; the
    // data argument may be null.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount -t bpf {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn umount(dir: &Path) {
    if let Ok(target) = std::ffi::CString::new(dir.to_string_lossy().as_bytes()) {
        // SAFETY: a valid NUL-terminated path; MNT_DETACH never blocks on busy mounts.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// What the comparison runs under: this process in the benchmark cgroup, a private bpffs and a
/// running `respite-control`. Dropping it stops the control process, switches the sockmap off,
/// unmounts the bpffs, moves this process back to its cgroup and removes the benchmark cgroup
/// if it created it.
pub struct SockmapEnv {
    /// `None` in the TCP-only plumbing mode (no eBPF at all).
    pub bpffs: Option<PathBuf>,
    pub cgroup: Option<PathBuf>,
    control_bin: PathBuf,
    control: Option<Child>,
    /// respite-control's admin address (`GET /sockmap`).
    pub admin: SocketAddr,
    log: PathBuf,
    /// Where this process was before (to move back), mount-relative.
    original_cgroup: Option<PathBuf>,
    created_cgroup: bool,
    mounted_bpffs: bool,
}

/// Options for [`SockmapEnv::start`].
pub struct EnvOptions<'a> {
    pub control_bin: &'a Path,
    /// Data plane TOML that respite-control reads (`--config`) and pushes.
    pub config: &'a Path,
    /// Respite's control socket (`--dataplane`).
    pub dataplane: &'a Path,
    /// The cgroup v2 directory for everything (created if missing); `None` = TCP-only mode.
    pub cgroup: Option<&'a Path>,
    /// Scratch directory for respite-control's log.
    pub dir: &'a Path,
    /// Directory (outside `dir`, which is removed recursively) for the bpffs mount point.
    pub bpffs_dir: &'a Path,
}

impl SockmapEnv {
    /// Joins the cgroup, mounts the bpffs, starts `respite-control --sockmap
    /// --sockmap-upstreams` and waits until `GET /sockmap` says `enabled`. TCP-only mode
    /// (`opts.cgroup == None`): only starts respite-control, without any sockmap flag.
    ///
    /// Errors (one line, `sockmap unavailable: <reason>` when it is about the sockmap): not root,
    /// no cgroup v2, the cgroup or bpffs cannot be set up, respite-control exits or does not
    /// answer, or reports the sockmap `unavailable` (its reason is given).
    pub fn start(opts: &EnvOptions) -> Result<SockmapEnv, String> {
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let log = opts.dir.join("respite-control.log");
        let mut env = SockmapEnv {
            bpffs: None,
            cgroup: None,
            control_bin: opts.control_bin.to_path_buf(),
            control: None,
            admin,
            log,
            original_cgroup: None,
            created_cgroup: false,
            mounted_bpffs: false,
        };
        let mut cmd = Command::new(opts.control_bin);
        cmd.arg("--config")
            .arg(opts.config)
            .arg("--dataplane")
            .arg(opts.dataplane)
            .arg("--admin")
            .arg(admin.to_string());
        if let Some(cg) = opts.cgroup {
            if !is_root() {
                return Err(
                    "sockmap unavailable: not root (loading eBPF programs, attaching them to a \
                     cgroup and mounting bpffs need root); run as root, or pass \
                     --sockmap-tcp-only for a TCP-only plumbing check"
                        .into(),
                );
            }
            env.join_cgroup(cg)?;
            let bpffs = opts.bpffs_dir.join("bpffs");
            mount_bpffs(&bpffs).map_err(|e| format!("sockmap unavailable: {e}"))?;
            env.mounted_bpffs = true;
            env.bpffs = Some(bpffs.clone());
            cmd.args(["--sockmap", "--sockmap-upstreams", "--sockmap-cgroup"])
                .arg(cg)
                .arg("--bpffs")
                .arg(&bpffs);
        }
        env.control = Some(spawn(&mut cmd, "respite-control", &env.log)?);
        env.wait_loaded()?;
        Ok(env)
    }

    fn join_cgroup(&mut self, cg: &Path) -> Result<(), String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let root = cgroup2_mount(&mounts)
            .ok_or("sockmap unavailable: no cgroup v2 mount in /proc/self/mounts")?;
        if !cg.starts_with(&root) {
            return Err(format!(
                "sockmap unavailable: --sockmap-cgroup {} is not under the cgroup v2 mount {}",
                cg.display(),
                root.display()
            ));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        self.original_cgroup = own_cgroup(&own).map(|rel| root.join(rel.trim_start_matches('/')));
        if !cg.exists() {
            std::fs::create_dir_all(cg)
                .map_err(|e| format!("sockmap unavailable: mkdir {}: {e}", cg.display()))?;
            self.created_cgroup = true;
        }
        self.cgroup = Some(cg.to_path_buf());
        enter_cgroup(cg, std::process::id()).map_err(|e| format!("sockmap unavailable: {e}"))
    }

    /// The last lines of respite-control's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(4)..].join(" | ")
    }

    /// `GET /sockmap`.
    pub fn status(&self) -> Result<Status, String> {
        parse_status(&respite_tools::admin_client::get(self.admin, "/sockmap")?)
    }

    fn exited(&mut self) -> Option<String> {
        let c = self.control.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => Some(format!(
                "respite-control exited ({st}); its log: {}",
                self.log_tail()
            )),
            _ => None,
        }
    }

    fn wait_loaded(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + LOAD_TIMEOUT;
        loop {
            if let Some(e) = self.exited() {
                return Err(e);
            }
            let last = if self.bpffs.is_none() {
                // TCP-only: no sockmap endpoint to ask; the admin answering is enough.
                match respite_tools::admin_client::get(self.admin, "/config_dump") {
                    Ok(_) => return Ok(()),
                    Err(e) => e,
                }
            } else {
                match self.status() {
                    // Wait for its first counter read, so that the self-test's redirects are
                    // not counted in the first phase.
                    Ok(s) if s.state == "enabled" => return self.fresh_status().map(|_| ()),
                    Ok(s) if s.state == "unavailable" => {
                        return Err(format!(
                            "sockmap unavailable: {}",
                            s.reason.as_deref().unwrap_or("(no reason given)")
                        ));
                    }
                    Ok(s) => format!("state {}", s.state),
                    Err(e) => e,
                }
            };
            if Instant::now() > deadline {
                return Err(format!(
                    "respite-control did not report the sockmap enabled within {} s (last: \
                     {last}); its log: {}",
                    LOAD_TIMEOUT.as_secs(),
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET /sockmap` once respite-control has read its counters again after now: its counters
    /// are those of its last once-a-second tick, so this polls until they differ from what they
    /// were on entry, or [`TICK_WAIT`] has passed (nothing changed: no traffic since the tick).
    pub fn fresh_status(&self) -> Result<Status, String> {
        let first = self.status()?;
        let deadline = Instant::now() + TICK_WAIT;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let s = self.status()?;
            if s.counters != first.counters || Instant::now() > deadline {
                return Ok(s);
            }
        }
    }

    /// The kill switch: `respite-control sockmap on|off --bpffs B`, then waits until `GET
    /// /sockmap` shows the matching state (`enabled` / `disabled`). Returns whether it did
    /// within [`SWITCH_TIMEOUT`] (the phase's counters decide its validity either way).
    ///
    /// Errors: the subcommand cannot run or exits nonzero.
    pub fn switch(&mut self, on: bool) -> Result<bool, String> {
        let Some(bpffs) = &self.bpffs else {
            return Ok(true);
        };
        let word = if on { "on" } else { "off" };
        let out = Command::new(&self.control_bin)
            .args(["sockmap", word, "--bpffs"])
            .arg(bpffs)
            .output()
            .map_err(|e| format!("respite-control sockmap {word}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "respite-control sockmap {word} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let want = if on { "enabled" } else { "disabled" };
        let deadline = Instant::now() + SWITCH_TIMEOUT;
        loop {
            if let Some(e) = self.exited() {
                return Err(e);
            }
            if self.status().is_ok_and(|s| s.state == want) {
                return Ok(true);
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for SockmapEnv {
    fn drop(&mut self) {
        if self.bpffs.is_some() {
            // Leave nothing redirecting if the programs outlive the control process.
            let _ = self.switch(false);
        }
        if let Some(mut c) = self.control.take() {
            stop(&mut c);
        }
        if let (true, Some(b)) = (self.mounted_bpffs, &self.bpffs) {
            umount(b);
        }
        if let Some(orig) = &self.original_cgroup {
            let _ = enter_cgroup(orig, std::process::id());
        }
        if let (true, Some(cg)) = (self.created_cgroup, &self.cgroup) {
            // Fails while a child is still in it; the children were killed before this drop.
            let _ = std::fs::remove_dir(cg);
        }
    }
}

/// SIGTERM (respite-control detaches its programs on the way out), then SIGKILL after 3 s.
fn stop(c: &mut Child) {
    if let Ok(pid) = i32::try_from(c.id()) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet (so not reused).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = c.kill();
    let _ = c.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_json() {
        let s = parse_status(
            r#"{"state":"enabled","reason":null,"cgroup":"/sys/fs/cgroup/unified/x",
                "ports":[6379],"self_test":null,"sockets":4,"inserts":10,"insert_fail":1,
                "redirect_total":12345,"redirect_fail":2}"#,
        )
        .unwrap();
        assert_eq!(s.state, "enabled");
        assert_eq!(s.reason, None);
        assert_eq!(s.ports, [6379]);
        assert_eq!(
            s.counters,
            Counters {
                sockets: 4,
                inserts: 10,
                insert_fail: 1,
                redirect_total: 12345,
                redirect_fail: 2
            }
        );
        let u = parse_status(r#"{"state":"unavailable","reason":"not root"}"#).unwrap();
        assert_eq!(u.reason.as_deref(), Some("not root"));
        assert_eq!(u.counters, Counters::default());
        assert!(parse_status("not found").is_err());
        assert!(parse_status(r#"{"reason":"x"}"#).is_err());
    }

    #[test]
    fn cgroup_paths() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        assert_eq!(
            cgroup2_mount(mounts),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("sysfs /sys sysfs rw 0 0\n"), None);
        let own = "12:memory:/user.slice\n1:name=systemd:/init.scope\n0::/init.scope\n";
        assert_eq!(own_cgroup(own).as_deref(), Some("/init.scope"));
        assert_eq!(own_cgroup("1:cpu:/\n"), None);
    }
}

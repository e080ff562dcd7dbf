//! `respite drain`: asks a running respite to drain and exit (hot restart, docs/hot-restart.md),
//! by SIGTERM to its pid or `POST /drain_listeners` to its admin endpoint, and optionally waits
//! until it has exited.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::admin_client::{Client, Error, Timeouts};

/// Which process to drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The one whose admin address this config file names.
    Config(PathBuf),
    /// The one answering on this admin address.
    Admin(SocketAddr),
    /// This pid (refused unless it runs a `respite*` executable).
    Pid(i32),
}

/// How long the admin endpoint may take to accept the drain: it answers once every listener
/// has stopped accepting.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks `target` to drain; with `wait`, returns once the process is gone. `Ok` is the line to
/// print (what was done).
///
/// # Errors
/// A message naming what did not answer or was refused: a pid that is not a respite process, a
/// config file that does not load, an admin address where nothing answers or that answers
/// anything but `200 … pid=N`.
pub fn run(target: Target, wait: bool) -> Result<String, String> {
    let (pid, what) = match target {
        Target::Pid(pid) => {
            // A mistyped pid must not SIGTERM some other program (or init).
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map_err(|e| format!("pid {pid}: {e}"))?;
            let is_respite = exe
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("respite"));
            if !is_respite || pid <= 1 {
                return Err(format!(
                    "pid {pid} is {}, not a respite process; nothing sent",
                    exe.display()
                ));
            }
            // SAFETY: kill(2) has no memory effects.
            if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("SIGTERM to pid {pid}: {e}"));
            }
            (pid, format!("sent SIGTERM to pid {pid}"))
        }
        Target::Config(file) => {
            // Only the admin address is wanted: the file is not held to this shell's fd limit.
            let config =
                respite::config::load_with_fd_limit(&file, None).map_err(|e| e.to_string())?;
            if config.admin.control_socket_only {
                return Err(format!(
                    "{}: admin.control_socket_only = true, so there is no admin address to \
                     drain through: use --pid, or POST /drain_listeners on the control socket",
                    file.display()
                ));
            }
            post_drain(config.admin.address)?
        }
        Target::Admin(addr) => post_drain(addr)?,
    };
    if !wait {
        return Ok(what);
    }
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("{what}; pid {pid} exited"))
}

/// True while `pid` exists and has not exited (a zombie waiting for its parent has exited).
fn alive(pid: i32) -> bool {
    // Signal 0 only checks existence: ESRCH once the process is gone.
    // SAFETY: kill(2) has no memory effects.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name, which may itself hold ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    state != Some('Z')
}

/// `POST /drain_listeners` to the admin endpoint at `addr` (loopback if `addr` is unspecified):
/// the pid it reported and a message.
fn post_drain(mut addr: SocketAddr) -> Result<(i32, String), String> {
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let timeouts = Timeouts {
        read: ANSWER_TIMEOUT,
        ..Timeouts::DEFAULT
    };
    let answer = Client::new(addr)
        .with_timeouts(timeouts)
        .post(respite::admin::DRAIN_PATH, "")
        .map_err(|e| match e {
            Error::Connect(e) => format!("nothing answers on admin address {addr}: {e}"),
            Error::Send(e) | Error::Receive(e) => format!("admin address {addr}: {e}"),
            Error::Malformed { start, .. } => {
                format!("admin address {addr} answered {start:?} (is it respite?)")
            }
        })?;
    let body = answer.body.trim();
    if answer.status != 200 {
        return Err(format!(
            "admin address {addr} answered {}: {body} (is it respite?)",
            answer.status
        ));
    }
    let pid = body
        .rsplit_once("pid=")
        .and_then(|(_, p)| p.trim().parse().ok())
        .ok_or_else(|| format!("admin address {addr}: unexpected answer {body:?}"))?;
    Ok((pid, format!("pid {pid} at {addr} is draining")))
}

//! The process's file-descriptor limit against what a config can hold open: before a config
//! runs (start, SIGHUP reload, a push), the soft `RLIMIT_NOFILE` is raised when it leaves too
//! little room, up to the hard limit (as Redis raises its own for `maxclients`), then checked.
//! A config that still does not fit is refused, so the running one stays.

use nix::sys::resource::{Resource, setrlimit};
use tracing::{info, warn};

use crate::config::Config;
use crate::config::limits::{self, fd_allowance};

/// Makes room for `config` running on `workers` workers, or says why there is none.
///
/// # Errors
/// `<key>: <reason>` naming the key that needs the most descriptors, the need and the limit.
pub(super) fn ensure(config: &Config, workers: usize) -> Result<(), String> {
    let need = limits::fd_need(config, workers);
    let Some((mut soft, hard)) = limits::nofile() else {
        // Nothing to check against (no getrlimit): the kernel's EMFILE stays the only bound.
        return Ok(());
    };
    if fd_allowance(soft) < need.total && soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                info!(
                    from = soft,
                    to = hard,
                    need = need.total,
                    "raised the soft RLIMIT_NOFILE to the hard limit for the config"
                );
                soft = hard;
            }
            Err(e) => warn!(error = %e, "could not raise the soft RLIMIT_NOFILE"),
        }
    }
    limits::check_fds(&need, soft, "soft").map_err(|(key, message)| format!("{key}: {message}"))
}

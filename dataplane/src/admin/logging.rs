//! `/logging`: read or replace the process's `tracing` filter at run time (Envoy admin
//! `/logging`, which takes `?level=` the same way, by `POST`).
//!
//! `GET /logging` (or `POST` without `level`) prints the filter in force. `POST
//! /logging?level=<directive>` replaces it with an `EnvFilter` directive (`debug`,
//! `info,respite::upstream=trace`, …). A `GET` with `level` is refused (`405`): a state change
//! by `GET` could be triggered by any page a browser on the host loads. A directive that does
//! not parse is a `400` with the parser's reason, and the old filter stays.

use super::query::Query;
use super::{Reply, text};

/// Reads and replaces the process's log filter (`/logging`). Installed by `main`, which owns the
/// subscriber and its reload handle.
pub struct LogControl {
    set: Box<SetFilter>,
    current: Box<dyn Fn() -> String + Send + Sync>,
}

/// Applies a filter directive, or says why not.
type SetFilter = dyn Fn(&str) -> Result<(), String> + Send + Sync;

impl LogControl {
    /// `set` applies a filter directive or says why it cannot (leaving the old filter);
    /// `current` prints the filter in force.
    pub fn new(
        set: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
        current: impl Fn() -> String + Send + Sync + 'static,
    ) -> LogControl {
        LogControl {
            set: Box::new(set),
            current: Box::new(current),
        }
    }

    /// Applies `directive`.
    ///
    /// # Errors
    /// Why the directive was refused (the old filter stays in force).
    pub fn set(&self, directive: &str) -> Result<(), String> {
        (self.set)(directive)
    }

    /// The filter in force, as a directive.
    pub fn current(&self) -> String {
        (self.current)()
    }
}

/// Answers `/logging` (module docs).
pub(super) fn logging(log: Option<&LogControl>, is_get: bool, q: &Query) -> Reply {
    let Some(log) = log else {
        return text(501, "no log control in this process\n");
    };
    match q.get("level") {
        None => text(200, format!("log filter: {}\n", log.current())),
        Some(_) if is_get => text(
            405,
            "method not allowed: use POST to change the log level\n",
        ),
        Some(level) if level.trim().is_empty() => text(400, "level is empty\n"),
        Some(level) => match crate::config::log_filter(level).and_then(|f| log.set(&f)) {
            Ok(()) => {
                let now = log.current();
                tracing::info!(filter = %now, "admin: log filter changed");
                text(200, format!("log filter: {now}\n"))
            }
            Err(e) => text(
                400,
                format!(
                    "invalid level {level:?}: {e}; log filter stays {}\n",
                    log.current()
                ),
            ),
        },
    }
}

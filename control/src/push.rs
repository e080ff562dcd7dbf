//! The data plane's control socket, client side: `POST /config` with TOML text over HTTP/1.1 on
//! a Unix socket; `200` = applied, anything else = rejected with the body as the reason.

use std::path::Path;

/// Why a push did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The socket cannot be reached or the exchange failed midway (the data plane may be
    /// restarting): not the config's fault.
    Unreachable(String),
    /// The data plane answered and refused the config: its reason.
    Rejected(String),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Unreachable(e) => write!(f, "data plane unreachable: {e}"),
            PushError::Rejected(e) => write!(f, "data plane rejected the config: {e}"),
        }
    }
}

/// Pushes `toml` to the data plane listening on `socket`.
///
/// Errors: [`PushError`].
pub fn push(socket: &Path, _toml: &str) -> Result<(), PushError> {
    Err(PushError::Unreachable(format!(
        "{}: push is not implemented yet",
        socket.display()
    )))
}

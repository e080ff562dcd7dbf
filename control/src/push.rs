//! The data plane's control socket, client side: `POST /config` with TOML text over HTTP/1.1 on
//! a Unix socket; `200` = applied, anything else = rejected with the body as the reason.

use std::path::Path;

/// Pushes `toml` to the data plane listening on `socket`.
///
/// Errors: the socket cannot be reached, or the data plane rejected the config (its reason).
pub fn push(socket: &Path, _toml: &str) -> Result<(), String> {
    Err(format!("{}: push is not implemented yet", socket.display()))
}

//! Admin HTTP helpers over the shared admin client (`respite_tools::admin_client`): any method,
//! over the admin port or the control socket, and the `/clusters` text form parsed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use respite_tools::admin_client::{Client, Endpoint, Error, Timeouts};

/// How long the harness waits for an admin answer.
const TIMEOUTS: Timeouts = Timeouts {
    read: crate::IO_TIMEOUT,
    ..Timeouts::DEFAULT
};

/// `method path` (empty body) against 127.0.0.1:`port`: (status, body).
pub fn request(port: u16, method: &str, path: &str) -> (u16, String) {
    try_request(port, method, path).unwrap_or_else(|e| panic!("admin {method} {path}: {e}"))
}

/// Like [`request`], with connection and I/O errors returned instead of panicking.
pub fn try_request(port: u16, method: &str, path: &str) -> Result<(u16, String), Error> {
    exchange(SocketAddr::from(([127, 0, 0, 1], port)), method, path)
}

/// `method path` (empty body) against `endpoint` (an admin port or a control socket): (status,
/// body).
pub fn exchange(
    endpoint: impl Into<Endpoint>,
    method: &str,
    path: &str,
) -> Result<(u16, String), Error> {
    let answer = Client::new(endpoint)
        .with_timeouts(TIMEOUTS)
        .request(method, path, "")?;
    Ok((answer.status, answer.body))
}

/// `method path` (empty body) over the control socket at `socket`: (status, body).
pub fn control_request(socket: &Path, method: &str, path: &str) -> (u16, String) {
    exchange(socket, method, path)
        .unwrap_or_else(|e| panic!("control socket {}: {method} {path}: {e}", socket.display()))
}

/// `POST path`: (status, body).
pub fn post(port: u16, path: &str) -> (u16, String) {
    request(port, "POST", path)
}

/// `/clusters` text parsed: (cluster, host, fact) → value.
pub fn clusters(port: u16) -> BTreeMap<(String, String, String), String> {
    let (status, body) = request(port, "GET", "/clusters");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|l| {
            let mut it = l.splitn(4, "::");
            let (c, h, k, v) = (it.next()?, it.next()?, it.next()?, it.next()?);
            Some(((c.into(), h.into(), k.into()), v.into()))
        })
        .collect()
}

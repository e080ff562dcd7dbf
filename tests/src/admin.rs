//! Admin HTTP helpers beyond [`crate::respite::admin_get`]: any method, and the `/stats`,
//! `/stats/prometheus` and `/clusters` text forms parsed.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `method path` (HTTP/1.0, empty body) against 127.0.0.1:`port`: (status, body).
pub fn request(port: u16, method: &str, path: &str) -> (u16, String) {
    try_request(port, method, path).unwrap_or_else(|e| panic!("admin {method} {path}: {e}"))
}

/// Like [`request`], with connection and I/O errors returned instead of panicking.
pub fn try_request(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(split_response(&resp))
}

/// (status, body) of an HTTP/1.x response read to EOF; status 0 if the status line is bad.
pub fn split_response(resp: &str) -> (u16, String) {
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
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

//! A tiny blocking HTTP/1.1 `GET` for the admin endpoint.
//!
//! `respite top` polls a loopback admin port once a second; a hand-written GET over
//! [`TcpStream`] (`Connection: close`, body read to EOF, `Content-Length` or chunked) needs no
//! new dependency and no TLS, which the admin endpoint does not speak anyway.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Connect, write and read timeout of one request.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// Resolves `addr` (`host:port`) to its first socket address.
///
/// # Errors
/// A message naming `addr` when it does not resolve.
pub fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("admin address {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("admin address {addr}: resolves to nothing"))
}

/// `GET path` from `addr`: the body of a `200` answer.
///
/// # Errors
/// Connection or I/O errors, a malformed response, or any status but 200 (with the body's
/// first line).
pub fn get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| format!("admin {addr}: connect: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT)).ok();
    s.set_write_timeout(Some(TIMEOUT)).ok();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| format!("admin {addr}: write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("admin {addr}{path}: read: {e}"))?;
    let (status, body) = parse_response(&raw).map_err(|e| format!("admin {addr}{path}: {e}"))?;
    if status != 200 {
        let first = body.lines().next().unwrap_or("");
        return Err(format!("admin {addr}{path}: HTTP {status}: {first}"));
    }
    Ok(body)
}

/// Splits a complete HTTP/1.x response into its status and (de-chunked) body.
///
/// # Errors
/// No header terminator, an unparsable status line, or a broken chunked body.
pub fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("response without a header end")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("bad status line")?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Decodes a `Transfer-Encoding: chunked` body (RFC 9112 section 7.1; extensions and trailers
/// ignored).
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(b.len());
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = b.get(..size).ok_or("truncated chunk")?;
        out.extend_from_slice(chunk);
        b = b.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_chunked_bodies() {
        let (s, b) = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((s, b.as_str()), (200, "hello"));
        let (s, b) = parse_response(
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n\
              4\r\nDRAI\r\n3;x=y\r\nNED\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((s, b.as_str()), (503, "DRAINED"));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab")
                .is_err()
        );
    }
}

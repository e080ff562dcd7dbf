//! The one client of Respite's admin endpoints, over TCP (the admin address) or a Unix socket
//! (the control socket): `respite top` and `respite drain`, respite-control's config and stats
//! pushes, the benchmark and the integration tests all speak through it.
//!
//! One request per connection: HTTP/1.1 with `Connection: close`, the answer read to EOF and its
//! body taken as sent or de-chunked (`Transfer-Encoding: chunked`, RFC 9112 section 7.1).
//! Written by hand over std sockets: the admin endpoints speak plain HTTP/1.x and no TLS, so an
//! HTTP crate would bring nothing.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where an admin endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// An admin address (`[admin] address`, `respite --admin`).
    Tcp(SocketAddr),
    /// A control socket (`respite --control-socket PATH`).
    Unix(PathBuf),
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Endpoint {
        Endpoint::Tcp(addr)
    }
}

impl From<&Path> for Endpoint {
    fn from(path: &Path) -> Endpoint {
        Endpoint::Unix(path.to_path_buf())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "{addr}"),
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How long each step of one exchange may block. Every duration must be non-zero (the socket
/// options refuse zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting over TCP. A Unix-socket connect does not block: it fails at once when nobody
    /// listens.
    pub connect: Duration,
    /// Writing the request.
    pub write: Duration,
    /// Waiting for the answer: each read may wait this long (`SO_RCVTIMEO`).
    pub read: Duration,
}

impl Timeouts {
    /// Three seconds for each step: enough for a loopback admin endpoint that answers from
    /// memory.
    pub const DEFAULT: Timeouts = Timeouts {
        connect: Duration::from_secs(3),
        write: Duration::from_secs(3),
        read: Duration::from_secs(3),
    };
}

/// An answer: the status code and the body (de-chunked; invalid UTF-8 replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code of the status line.
    pub status: u16,
    /// The body.
    pub body: String,
}

/// Why an exchange failed, by step, so each caller can word its own message.
#[derive(Debug)]
pub enum Error {
    /// Nothing accepted the connection, or its timeouts could not be set.
    Connect(io::Error),
    /// Writing the request failed.
    Send(io::Error),
    /// Reading the answer failed or timed out.
    Receive(io::Error),
    /// The peer answered, but not with an HTTP/1.x response.
    Malformed {
        /// What is wrong with the answer.
        reason: String,
        /// Its first 200 characters.
        start: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect(e) => write!(f, "connect: {e}"),
            Error::Send(e) => write!(f, "write: {e}"),
            Error::Receive(e) => write!(f, "read: {e}"),
            Error::Malformed { reason, .. } => f.write_str(reason),
        }
    }
}

impl std::error::Error for Error {}

/// A client of one admin endpoint; each request is one connection.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    timeouts: Timeouts,
}

impl Client {
    /// A client of `endpoint` with [`Timeouts::DEFAULT`].
    pub fn new(endpoint: impl Into<Endpoint>) -> Client {
        Client {
            endpoint: endpoint.into(),
            timeouts: Timeouts::DEFAULT,
        }
    }

    /// The same client with `timeouts`.
    #[must_use]
    pub fn with_timeouts(self, timeouts: Timeouts) -> Client {
        Client { timeouts, ..self }
    }

    /// Where this client connects.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `GET path`.
    ///
    /// # Errors
    /// As [`Client::request`].
    pub fn get(&self, path: &str) -> Result<Response, Error> {
        self.request("GET", path, "")
    }

    /// `POST path` with `body` (sent as `text/plain` when not empty).
    ///
    /// # Errors
    /// As [`Client::request`].
    pub fn post(&self, path: &str, body: &str) -> Result<Response, Error> {
        self.request("POST", path, body)
    }

    /// `method path` with `body`: the answer, whatever its status.
    ///
    /// # Errors
    /// The step that failed ([`Error`]); a status other than 200 is not an error here.
    pub fn request(&self, method: &str, path: &str, body: &str) -> Result<Response, Error> {
        let host = match &self.endpoint {
            Endpoint::Tcp(addr) => addr.to_string(),
            Endpoint::Unix(_) => "localhost".to_owned(),
        };
        let content_type = if body.is_empty() {
            ""
        } else {
            "Content-Type: text/plain; charset=UTF-8\r\n"
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{content_type}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let t = self.timeouts;
        let raw = match &self.endpoint {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect_timeout(addr, t.connect).map_err(Error::Connect)?;
                s.set_read_timeout(Some(t.read))
                    .and_then(|()| s.set_write_timeout(Some(t.write)))
                    .map_err(Error::Connect)?;
                exchange(s, request.as_bytes())?
            }
            Endpoint::Unix(path) => {
                let s = UnixStream::connect(path).map_err(Error::Connect)?;
                s.set_read_timeout(Some(t.read))
                    .and_then(|()| s.set_write_timeout(Some(t.write)))
                    .map_err(Error::Connect)?;
                exchange(s, request.as_bytes())?
            }
        };
        parse_response(&raw).map_err(|reason| Error::Malformed {
            reason,
            start: String::from_utf8_lossy(&raw).chars().take(200).collect(),
        })
    }
}

/// Writes `request` to `s` and reads the answer to EOF.
fn exchange(mut s: impl Read + Write, request: &[u8]) -> Result<Vec<u8>, Error> {
    s.write_all(request)
        .and_then(|()| s.flush())
        .map_err(Error::Send)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(Error::Receive)?;
    Ok(raw)
}

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

/// `GET path` from the admin address `addr` with [`Timeouts::DEFAULT`]: the body of a `200`
/// answer.
///
/// # Errors
/// A message naming `addr` (and `path` once the request is sent): connection or I/O errors, a
/// malformed response, or any status but 200 (with the body's first line).
pub fn get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let answer = Client::new(addr).get(path).map_err(|e| match e {
        Error::Connect(_) | Error::Send(_) => format!("admin {addr}: {e}"),
        Error::Receive(_) | Error::Malformed { .. } => format!("admin {addr}{path}: {e}"),
    })?;
    if answer.status != 200 {
        let first = answer.body.lines().next().unwrap_or("");
        return Err(format!(
            "admin {addr}{path}: HTTP {}: {first}",
            answer.status
        ));
    }
    Ok(answer.body)
}

/// Splits a complete HTTP/1.x response into its status and (de-chunked) body.
///
/// # Errors
/// No header terminator, an unparsable status line, or a broken chunked body.
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("response without a header end")?;
    let head = String::from_utf8_lossy(raw.get(..end).unwrap_or_default());
    let body = raw.get(end + 4..).unwrap_or_default();
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
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
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
        let size_text = String::from_utf8_lossy(b.get(..eol).unwrap_or_default());
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        b = b.get(eol + 2..).unwrap_or_default();
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
    use std::net::TcpListener;
    use std::os::unix::net::UnixListener;
    use std::thread::JoinHandle;

    fn parsed(raw: &[u8]) -> (u16, String) {
        let r = parse_response(raw).unwrap();
        (r.status, r.body)
    }

    #[test]
    fn plain_and_chunked_bodies() {
        assert_eq!(
            parsed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
            (200, "hello".into())
        );
        assert_eq!(
            parsed(
                b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n\
                  4\r\nDRAI\r\n3;x=y\r\nNED\r\n0\r\n\r\n"
            ),
            (503, "DRAINED".into())
        );
        assert_eq!(
            parsed(b"HTTP/1.0 503 Service Unavailable\r\nA: b\r\n\r\nbusy\n"),
            (503, "busy\n".into())
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 abc OK\r\n\r\n").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab")
                .is_err()
        );
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err()
        );
    }

    /// Reads one request (head + Content-Length body) from `s`, answers `response`, returns
    /// the request.
    fn serve_one(mut s: impl Read + Write, response: &str) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.len() >= len {
                    break;
                }
            }
            assert!(n > 0, "client closed before sending a whole request");
        }
        s.write_all(response.as_bytes()).unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn tcp_server(response: &'static str) -> (SocketAddr, JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || serve_one(listener.accept().unwrap().0, response));
        (addr, handle)
    }

    #[test]
    fn a_get_over_tcp_names_the_host_and_closes() {
        let (addr, handle) = tcp_server("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        assert_eq!(get(addr, "/ready"), Ok("ok\n".to_owned()));
        let request = handle.join().unwrap();
        assert_eq!(
            request,
            format!(
                "GET /ready HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            )
        );
    }

    #[test]
    fn get_refuses_other_statuses_with_the_first_line() {
        let (addr, handle) = tcp_server("HTTP/1.1 404 Not Found\r\n\r\nno such page\nmore\n");
        let err = get(addr, "/x").unwrap_err();
        assert_eq!(err, format!("admin {addr}/x: HTTP 404: no such page"));
        handle.join().unwrap();
        // Nobody listens on a port just freed.
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let err = get(free, "/x").unwrap_err();
        assert!(
            err.starts_with(&format!("admin {free}: connect: ")),
            "{err}"
        );
    }

    #[test]
    fn a_post_over_a_unix_socket_carries_its_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            serve_one(
                listener.accept().unwrap().0,
                "HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5\r\nbind \r\n6\r\nfailed\r\n0\r\n\r\n",
            )
        });
        let answer = Client::new(path.as_path())
            .post("/config", "a = 1")
            .unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (409, "bind failed"));
        assert_eq!(
            handle.join().unwrap(),
            "POST /config HTTP/1.1\r\nHost: localhost\r\n\
             Content-Type: text/plain; charset=UTF-8\r\nContent-Length: 5\r\n\
             Connection: close\r\n\r\na = 1"
        );
    }

    #[test]
    fn errors_say_which_step_failed() {
        let dir = tempfile::tempdir().unwrap();
        let nobody = dir.path().join("nobody.sock");
        let err = Client::new(nobody.as_path()).get("/").unwrap_err();
        assert!(matches!(err, Error::Connect(_)), "{err:?}");

        let (addr, handle) = tcp_server("SSH-2.0-OpenSSH_9.6\r\n");
        let err = Client::new(addr).get("/").unwrap_err();
        match &err {
            Error::Malformed { start, .. } => assert_eq!(start, "SSH-2.0-OpenSSH_9.6\r\n"),
            other => panic!("{other:?}"),
        }
        handle.join().unwrap();

        // Accepts (the kernel does, from the backlog) and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let quick = Timeouts {
            read: Duration::from_millis(200),
            ..Timeouts::DEFAULT
        };
        let err = Client::new(listener.local_addr().unwrap())
            .with_timeouts(quick)
            .get("/")
            .unwrap_err();
        assert!(matches!(err, Error::Receive(_)), "{err:?}");
    }
}

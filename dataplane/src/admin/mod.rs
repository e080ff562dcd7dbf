//! Admin HTTP endpoint on its own thread, off the data path (Envoy admin style).
//!
//! Endpoints (all `GET`; other methods on a known path get `405`, unknown paths `404`):
//!
//! | path | response |
//! |---|---|
//! | `/stats` | `text/plain; charset=UTF-8`, [`Store::render_text`] (Envoy admin `/stats`). `?filter=<s>` keeps stat names containing the substring `s` (percent-decoded; Envoy takes a regex, we take a substring). |
//! | `/stats/prometheus` | `text/plain; version=0.0.4; charset=utf-8`, [`Store::render_prometheus`] (Prometheus text format 0.0.4); `?filter=` as above, on the Envoy stat name. |
//! | `/ready` | `200` `LIVE\n` (Envoy's `/ready` body) |
//! | `/help` | the endpoint list |
//!
//! The server is blocking `tiny_http` on one background thread; it never touches a worker.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::stats::Store;

/// Content type of `/stats`, `/ready`, `/help` and error bodies.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";
/// Content type of `/stats/prometheus` (Prometheus text exposition format 0.0.4).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Body of `/help`: one endpoint per line, Envoy admin style.
pub const HELP_TEXT: &str = "admin commands are:\n  \
/help: print out list of admin commands\n  \
/ready: print server state, return 200 if LIVE\n  \
/stats: print server stats; param: filter=<substring>\n  \
/stats/prometheus: print server stats in prometheus format; param: filter=<substring>\n";

/// A running admin server; stops its thread (and closes the listener) when dropped.
pub struct AdminServer {
    /// The address actually bound (the real port when `spawn` was given port 0).
    pub local_addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds `addr` and serves admin requests on a background thread named `respite-admin`.
///
/// # Errors
/// The bind error, with its [`io::ErrorKind`] kept (e.g. `AddrInUse` when the port is taken);
/// or the thread spawn error.
pub fn spawn(addr: SocketAddr, stats: Arc<Store>) -> io::Result<AdminServer> {
    let server = tiny_http::Server::http(addr).map_err(|e| match e.downcast::<io::Error>() {
        Ok(io_err) => *io_err,
        Err(other) => io::Error::other(other),
    })?;
    let local_addr = server.server_addr().to_ip().unwrap_or(addr);
    let server = Arc::new(server);
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let server = Arc::clone(&server);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("respite-admin".to_owned())
            .spawn(move || serve(&server, &stop, &stats))?
    };
    Ok(AdminServer {
        local_addr,
        server,
        stop,
        thread: Some(thread),
    })
}

fn serve(server: &tiny_http::Server, stop: &AtomicBool, stats: &Store) {
    loop {
        match server.recv() {
            Ok(req) => {
                let is_get = matches!(req.method(), tiny_http::Method::Get);
                let reply = route(is_get, req.url(), stats);
                let mut resp =
                    tiny_http::Response::from_string(reply.body).with_status_code(reply.status);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", reply.content_type) {
                    resp = resp.with_header(h);
                }
                if let Err(e) = req.respond(resp) {
                    tracing::debug!(error = %e, "admin: writing response failed");
                }
            }
            Err(e) => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                tracing::debug!(error = %e, "admin: accept failed");
            }
        }
    }
}

/// An admin response before it is put on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type` header value.
    pub content_type: &'static str,
    /// Response body.
    pub body: String,
}

fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply {
        status,
        content_type: TEXT_CONTENT_TYPE,
        body: body.into(),
    }
}

/// Answers one admin request: `is_get` tells whether the method is `GET`, `url` is the request
/// target (`/path?query`). Pure function of the store's current values (see the module docs for
/// the endpoints).
pub fn route(is_get: bool, url: &str, stats: &Store) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let known = matches!(
        path,
        "/stats" | "/stats/prometheus" | "/ready" | "/help" | "/"
    );
    if !known {
        return text(404, format!("not found: {path}\n"));
    }
    if !is_get {
        return text(405, "method not allowed\n");
    }
    let filter = query_param(query, "filter");
    let filter = filter.as_deref().filter(|f| !f.is_empty());
    match path {
        "/stats" => text(200, stats.render_text_filtered(filter)),
        "/stats/prometheus" => Reply {
            status: 200,
            content_type: PROMETHEUS_CONTENT_TYPE,
            body: stats.render_prometheus_filtered(filter),
        },
        "/ready" => text(200, "LIVE\n"),
        _ => text(200, HELP_TEXT),
    }
}

/// The percent-decoded value of query parameter `key` (`+` decodes to a space), if present.
fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    fn hex(c: u8) -> Option<u8> {
        (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;

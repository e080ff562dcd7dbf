//! Admin HTTP endpoint on its own thread, off the data path (Envoy admin style).
//!
//! Endpoints (`GET` unless noted; a wrong method on a known path gets `405`, unknown paths `404`):
//!
//! | path | response |
//! |---|---|
//! | `POST /drain_listeners` | `200` `OK draining pid=<pid>\n`, then the process drains and exits as on SIGTERM (Envoy's endpoint name; Envoy only drains listeners, here the whole process goes, as hot restart needs). |
//! | `/stats` | `text/plain; charset=UTF-8`, [`Store::render_text`] (Envoy admin `/stats`). `?filter=<s>` keeps stat names containing the substring `s` (percent-decoded; Envoy takes a regex, we take a substring). |
//! | `/stats/prometheus` | `text/plain; version=0.0.4; charset=utf-8`, [`Store::render_prometheus`] (Prometheus text format 0.0.4); `?filter=` as above, on the Envoy stat name. |
//! | `/ready` | `200` `LIVE\n` (Envoy's `/ready` body) |
//! | `/help` | the endpoint list |
//!
//! The server is blocking `tiny_http` on one background thread; it never touches a worker.
//! [`spawn_or_retry`] starts it even while another process (the one being replaced in a hot
//! restart) still holds the address: it keeps retrying the bind in the background.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::Config;
use crate::stats::Store;
use crate::upstream::HostRegistry;

/// Changes the process's log filter (`/logging?level=`): given a `tracing` filter directive,
/// applies it or says why not. Installed by `main` (which owns the subscriber).
pub type LogControl = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Everything the admin endpoints read or change. CONTRACT: built by the engine at start;
/// `config` is replaced by the engine after every applied reload.
pub struct AdminContext {
    /// The stats store (counters, gauges, histograms, hot keys).
    pub stats: Arc<Store>,
    /// The live config (`/config_dump`, `/clusters`).
    pub config: Mutex<Arc<Config>>,
    /// Per-host health and outlier state (`/clusters`).
    pub hosts: Arc<HostRegistry>,
    /// Set by `POST /healthcheck/fail`, cleared by `POST /healthcheck/ok`; `/ready` answers 503
    /// while set (Envoy: a failed health check reports the server as draining).
    pub health_fail: AtomicBool,
    /// Set when the process starts draining: `/ready` answers 503.
    pub draining: AtomicBool,
    /// `/logging?level=`; `None` when the embedding process installed no control.
    pub log: Option<LogControl>,
}

impl AdminContext {
    /// A context over `stats`, `config` and `hosts`, not failing health checks, not draining.
    pub fn new(
        stats: Arc<Store>,
        config: Arc<Config>,
        hosts: Arc<HostRegistry>,
        log: Option<LogControl>,
    ) -> Arc<AdminContext> {
        Arc::new(AdminContext {
            stats,
            config: Mutex::new(config),
            hosts,
            health_fail: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            log,
        })
    }

    /// The live config.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the live config (after a reload was applied).
    pub fn set_config(&self, config: Arc<Config>) {
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = config;
    }
}

/// Content type of `/stats`, `/ready`, `/help` and error bodies.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";
/// Content type of `/stats/prometheus` (Prometheus text exposition format 0.0.4).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Body of `/help`: one endpoint per line, Envoy admin style.
pub const HELP_TEXT: &str = "admin commands are:\n  \
/help: print out list of admin commands\n  \
/ready: print server state, return 200 if LIVE\n  \
/stats: print server stats; param: filter=<substring>\n  \
/stats/prometheus: print server stats in prometheus format; param: filter=<substring>\n  \
/drain_listeners (POST): stop accepting, finish in-flight requests, close connections, exit\n";

/// Path of the drain endpoint (Envoy admin's name; `POST` only).
pub const DRAIN_PATH: &str = "/drain_listeners";

/// How often [`spawn_or_retry`] retries a bind refused with `EADDRINUSE`: the process being
/// replaced releases the admin port as soon as it starts draining, so the gap stays this short.
const BIND_RETRY_EVERY: Duration = Duration::from_millis(100);

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
pub fn spawn(addr: SocketAddr, ctx: Arc<AdminContext>) -> io::Result<AdminServer> {
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
            .spawn(move || serve(&server, &stop, &ctx))?
    };
    Ok(AdminServer {
        local_addr,
        server,
        stop,
        thread: Some(thread),
    })
}

/// The admin endpoint of a running engine: bound now, or still retrying in the background
/// (while a process being replaced holds the address). Stops serving on [`AdminHandle::stop`]
/// or drop.
pub struct AdminHandle {
    address: SocketAddr,
    state: Arc<Mutex<AdminState>>,
}

#[derive(Default)]
struct AdminState {
    server: Option<AdminServer>,
    stopped: bool,
}

impl AdminHandle {
    /// The configured address (the bound one once bound: the real port when given port 0).
    pub fn address(&self) -> SocketAddr {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .server
            .as_ref()
            .map(|s| s.local_addr)
            .unwrap_or(self.address)
    }

    /// True once the address is bound and served.
    pub fn is_bound(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.server.is_some()
    }

    /// Closes the admin listener (so a new process can take the address) and stops retrying.
    pub fn stop(&self) {
        let server = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.stopped = true;
            state.server.take()
        };
        drop(server);
    }
}

impl Drop for AdminHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Like [`spawn`], but an address in use (`EADDRINUSE`: the process this one replaces still
/// serves it) is not an error: a background thread retries every 100 ms until the bind succeeds
/// or the handle is stopped.
///
/// # Errors
/// Any other bind error (address not local, permission denied, …).
pub fn spawn_or_retry(addr: SocketAddr, ctx: Arc<AdminContext>) -> io::Result<AdminHandle> {
    let state = Arc::new(Mutex::new(AdminState::default()));
    match spawn(addr, ctx.clone()) {
        Ok(server) => {
            state.lock().unwrap_or_else(PoisonError::into_inner).server = Some(server);
        }
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            tracing::warn!(
                %addr,
                "admin address in use (the process being replaced?); retrying in the background"
            );
            let state = Arc::clone(&state);
            std::thread::Builder::new()
                .name("respite-admin-bind".to_owned())
                .spawn(move || retry_bind(addr, &ctx, &state))?;
        }
        Err(e) => return Err(e),
    }
    Ok(AdminHandle {
        address: addr,
        state,
    })
}

fn retry_bind(addr: SocketAddr, ctx: &Arc<AdminContext>, state: &Mutex<AdminState>) {
    loop {
        std::thread::sleep(BIND_RETRY_EVERY);
        if state.lock().unwrap_or_else(PoisonError::into_inner).stopped {
            return;
        }
        match spawn(addr, ctx.clone()) {
            Ok(server) => {
                let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
                if !s.stopped {
                    tracing::info!(admin = %server.local_addr, "admin listening");
                    s.server = Some(server);
                }
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
            Err(e) => {
                tracing::error!(%addr, error = %e, "admin: bind failed; no admin endpoint");
                return;
            }
        }
    }
}

fn serve(server: &tiny_http::Server, stop: &AtomicBool, ctx: &AdminContext) {
    loop {
        match server.recv() {
            Ok(req) => {
                let is_get = matches!(req.method(), tiny_http::Method::Get);
                let reply = route(is_get, req.url(), ctx);
                let drain = !is_get && reply.status == 200 && is_drain(req.url());
                let mut resp =
                    tiny_http::Response::from_string(reply.body).with_status_code(reply.status);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", reply.content_type) {
                    resp = resp.with_header(h);
                }
                if let Err(e) = req.respond(resp) {
                    tracing::debug!(error = %e, "admin: writing response failed");
                }
                if drain {
                    request_drain();
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

fn is_drain(url: &str) -> bool {
    url.split_once('?').map_or(url, |(p, _)| p) == DRAIN_PATH
}

/// Sends SIGTERM to this process, so a drain asked over HTTP takes exactly the SIGTERM path
/// (`engine::run`'s signal loop). A process embedding the engine without that loop gets
/// SIGTERM's default action.
fn request_drain() {
    tracing::info!("drain requested on the admin endpoint");
    // SAFETY: kill(2) on our own pid has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Answers one admin request: `is_get` tells whether the method is `GET`, `url` is the request
/// target (`/path?query`). Pure function of the store's current values (see the module docs for
/// the endpoints); for `POST /drain_listeners` the caller starts the drain after replying.
pub fn route(is_get: bool, url: &str, ctx: &AdminContext) -> Reply {
    let stats = &ctx.stats;
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if path == DRAIN_PATH {
        return if is_get {
            text(405, "method not allowed: use POST\n")
        } else {
            text(200, format!("OK draining pid={}\n", std::process::id()))
        };
    }
    let known = matches!(
        path,
        "/stats" | "/stats/prometheus" | "/ready" | "/help" | "/" | "/hot_keys"
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
        "/hot_keys" => Reply {
            status: 200,
            content_type: "application/json",
            body: hot_keys_json(stats),
        },
        _ => text(200, HELP_TEXT),
    }
}

/// `/hot_keys` (TEMPORARY minimal rendering until the admin part's own lands; JSON whatever the
/// query): `{"listeners":[{"stat_prefix":P,"window_seconds":W,"top":[{"key":K,"count":N},…],
/// "big_values":[{"key":K,"command":C,"bytes":N,"direction":D,"unix_ms":T},…]}]}`, keys escaped
/// as [`crate::stats::hotkeys::escape_key`] (cut to 1 KiB here).
fn hot_keys_json(stats: &Store) -> String {
    use crate::engine::access_log::json_str;
    use crate::stats::hotkeys::{MAX_TRACKED_KEY, escape_key};
    use std::fmt::Write as _;
    let mut out = String::from("{\"listeners\":[");
    for (i, r) in stats.hot_keys().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"stat_prefix\":");
        json_str(&r.stat_prefix, &mut out);
        let _ = write!(
            out,
            ",\"window_seconds\":{},\"top\":[",
            r.window.as_secs_f64()
        );
        for (j, (k, n)) in r.top.iter().enumerate() {
            out.push_str(if j > 0 { ",{\"key\":" } else { "{\"key\":" });
            json_str(&escape_key(k, MAX_TRACKED_KEY), &mut out);
            let _ = write!(out, ",\"count\":{n}}}");
        }
        out.push_str("],\"big_values\":[");
        for (j, b) in r.big_values.iter().enumerate() {
            out.push_str(if j > 0 { ",{\"key\":" } else { "{\"key\":" });
            json_str(&escape_key(&b.key, MAX_TRACKED_KEY), &mut out);
            out.push_str(",\"command\":");
            json_str(&b.command, &mut out);
            let _ = write!(
                out,
                ",\"bytes\":{},\"direction\":\"{}\",\"unix_ms\":{}}}",
                b.bytes, b.direction, b.unix_ms
            );
        }
        out.push_str("]}");
    }
    out.push_str("]}\n");
    out
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

//! The HTTP side of the admin endpoint: a blocking `tiny_http` server on one background thread,
//! one request at a time, never touching a worker; and the bind-retry used in a hot restart.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{AdminContext, DRAIN_PATH, Reply, origin, route, text};

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
            .spawn(move || {
                yield_to_workers();
                serve(&server, &stop, &ctx, addr)
            })?
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

/// [`spawn`], as an [`AdminHandle`]: the endpoint of a process that replaces none, for which an
/// address in use is an error like any other.
///
/// # Errors
/// As [`spawn`] (`AddrInUse` when another process holds the address).
pub fn spawn_handle(addr: SocketAddr, ctx: Arc<AdminContext>) -> io::Result<AdminHandle> {
    let server = spawn(addr, ctx)?;
    Ok(AdminHandle {
        address: addr,
        state: Arc::new(Mutex::new(AdminState {
            server: Some(server),
            stopped: false,
        })),
    })
}

/// Like [`spawn`], but an address in use (`EADDRINUSE`: the process this one replaces in a hot
/// restart still serves it) is not an error: a background thread retries every 100 ms until the
/// bind succeeds or the handle is stopped.
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

/// Nice value of the admin thread. On a machine whose cores the workers keep busy, a client
/// reading `/stats` in a tight loop would otherwise take a full share of a core from them; at
/// nice 10 the scheduler gives the admin thread about a tenth of a worker's share while they
/// compete, and any idle CPU when they do not (CFS weights 110 vs 1024).
const ADMIN_NICE: libc::c_int = 10;

/// Lowers this thread's scheduling priority to [`ADMIN_NICE`] (Linux: `setpriority` on a thread
/// id applies to that thread only). Failure only costs the workers more CPU under admin load.
fn yield_to_workers() {
    // SAFETY: gettid/setpriority take no pointers; they only change this thread's nice value.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, ADMIN_NICE)
    };
    if rc != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "admin: cannot lower the thread's priority");
    }
}

/// Responses being written at once, each by its own thread (see [`respond`]).
static WRITERS: AtomicUsize = AtomicUsize::new(0);
/// At most this many responses are written at once; past it a request gets a short `503` so a
/// crowd of clients that do not read cannot pile up threads.
const MAX_WRITERS: usize = 32;

fn serve(server: &tiny_http::Server, stop: &AtomicBool, ctx: &AdminContext, admin: SocketAddr) {
    loop {
        match server.recv() {
            Ok(req) => {
                let (reply, drain) = match from_a_browser(&req, admin) {
                    Some(refused) => {
                        tracing::debug!(
                            method = %req.method(),
                            url = req.url(),
                            peer = ?req.remote_addr(),
                            "admin: refused a request a browser page may have sent"
                        );
                        (refused, false)
                    }
                    None => answer(&req, ctx),
                };
                respond(req, reply, drain);
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

/// The `403` for a request that may change state and that a browser page may have sent
/// ([`origin`]); `admin` is the configured admin address.
fn from_a_browser(req: &tiny_http::Request, admin: SocketAddr) -> Option<Reply> {
    let is_get = matches!(
        req.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    );
    let header = |name: &'static str| {
        req.headers()
            .iter()
            .filter(move |h| h.field.equiv(name))
            .map(|h| h.value.as_str())
    };
    origin::refused(is_get, header("Origin").next(), header("Host"), admin)
}

/// The admin reply to `req`, and whether it started a drain (a `200` to `POST
/// /drain_listeners`: the caller asks for it once the reply is written).
pub(super) fn answer(req: &tiny_http::Request, ctx: &AdminContext) -> (Reply, bool) {
    // HEAD is a GET without the body (tiny_http leaves the body out); every other method but
    // POST is refused here, so only POST can change state.
    let is_get = match req.method() {
        tiny_http::Method::Get | tiny_http::Method::Head => Some(true),
        tiny_http::Method::Post => Some(false),
        _ => None,
    };
    let reply = match is_get {
        Some(is_get) => route(is_get, req.url(), ctx),
        None => text(405, "method not allowed: use GET or POST\n"),
    };
    let drain = is_get == Some(false) && reply.status == 200 && is_drain(req.url());
    (reply, drain)
}

/// Writes `reply` from a thread of its own: a client that does not read its response must not
/// hold up the next request (`/ready` probes, scrapes). Writer threads inherit the admin
/// thread's nice value.
pub(super) fn respond(req: tiny_http::Request, reply: Reply, drain: bool) {
    let response = |reply: Reply| {
        let mut resp = tiny_http::Response::from_string(reply.body).with_status_code(reply.status);
        if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", reply.content_type) {
            resp = resp.with_header(h);
        }
        resp
    };
    let finish = move |req: tiny_http::Request, reply: Reply| {
        if let Err(e) = req.respond(response(reply)) {
            tracing::debug!(error = %e, "admin: writing response failed");
        }
        if drain {
            request_drain();
        }
    };
    if WRITERS.fetch_add(1, Ordering::AcqRel) >= MAX_WRITERS {
        WRITERS.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!("admin: {MAX_WRITERS} responses still being written; answering 503");
        let busy = text(503, "busy: too many unread admin responses\n");
        if let Err(e) = req.respond(response(busy)) {
            tracing::debug!(error = %e, "admin: writing response failed");
        }
        return;
    }
    // The request is moved into the closure; if the spawn fails it is gone with it, and the
    // client sees its connection close, which is all a failed thread spawn allows.
    let spawned = std::thread::Builder::new()
        .name("respite-admin-w".to_owned())
        .spawn(move || {
            finish(req, reply);
            WRITERS.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        WRITERS.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!(error = %e, "admin: cannot start a response writer");
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

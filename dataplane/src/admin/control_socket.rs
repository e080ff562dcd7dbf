//! The control socket (`respite --control-socket PATH`): HTTP/1.1 over a Unix socket, through
//! which `respite-control` pushes whole configs and the data plane answers accept or reject.
//!
//! | method | path | body | response |
//! |---|---|---|---|
//! | POST | `/config` | TOML text in the config file format (`deploy/examples/respite.toml`); zero listeners is valid ([`crate::config::parse_pushed`]) | `200 applied`; `400` the config error (`control socket:line:col: key: reason`); `409` the apply failure (e.g. a listener address cannot be bound); `413` over [`MAX_PUSH_BYTES`]; `503` while the process shuts down. On any failure the running config stays. |
//! | POST | `/stats/external` | stats kept by another process (respite-control's sockmap totals), one per line: `counter <name> <u64>` or `gauge <name> <i64>`; names `sockmap.` + `[a-z0-9_.]`; blank lines ignored ([`crate::stats::external::parse`]) | `200 ok`: each value SET (not added), shown in `/stats`, `/stats?format=json` and `/stats/prometheus` like any other stat; `400` the first bad line (`line N: "…": reason`), and nothing of the request is applied; `413` over [`MAX_STATS_BYTES`]. |
//! | any | anything else | | the admin endpoint's answer ([`super::route`]): `GET /stats`, `/config_dump`, … work here too |
//!
//! The process keeps its own `[admin]` and `[runtime]`: those of a pushed config are ignored
//! (they only take effect at a restart, and the control process does not own them).
//!
//! Only the owner may push: the socket file is created mode `0600`. A socket file left by a
//! dead process is replaced; one that a live process answers on is not (the second process
//! refuses to start). The file is removed when the [`ControlSocket`] is dropped.
//!
//! Pushes are not applied on the socket's thread: each is handed, with a reply channel, to the
//! one owner of the engine (`engine::run`'s event loop), which also handles SIGHUP and SIGTERM,
//! so a push and a reload never race. Requests are answered one at a time, in arrival order.

use std::io::{self, Read as _};
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use super::server::{answer, respond};
use super::{AdminContext, Reply, text};

/// Path of the push endpoint on the control socket (`POST` only).
pub const CONFIG_PATH: &str = "/config";

/// Path of the external stats endpoint on the control socket (`POST` only).
pub const STATS_EXTERNAL_PATH: &str = "/stats/external";

/// Largest external stats push accepted, in bytes (`413` above): a push carries a handful of
/// lines.
pub const MAX_STATS_BYTES: u64 = 1 << 20;

/// Largest pushed config accepted, in bytes (`413` above): far above any real config (a
/// thousand clusters render to well under 1 MiB), low enough that a runaway client cannot make
/// the process buffer gigabytes.
pub const MAX_PUSH_BYTES: u64 = 64 << 20;

/// Why a pushed config was not applied; the running config stays either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The text does not parse or validate (`400`): `control socket:line:col: key: reason`.
    Invalid(String),
    /// The config is valid but applying it failed (`409`), e.g. a listener address is in use.
    NotApplied(String),
}

/// One pushed config on its way to the engine's owner, which answers on `reply`.
pub struct Push {
    /// The request body: TOML text in the config file format.
    pub toml: String,
    /// Where the outcome goes; the socket thread waits for it before answering.
    pub reply: mpsc::Sender<Result<(), PushError>>,
}

/// A bound control socket; closes and removes its file on drop.
pub struct ControlSocket {
    path: PathBuf,
    server: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ControlSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlSocket")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ControlSocket {
    /// Binds `path` with mode `0600`, replacing a socket file that nothing answers on (left by a
    /// process that died). Requests wait (queued by the kernel and tiny_http) until
    /// [`ControlSocket::serve`].
    ///
    /// Call it before the process starts other threads: the file is created under a
    /// temporary `umask` of `0177`, which is process-wide. The mode is set by the bind itself
    /// and never changed afterwards: a `chmod` after the bind would be a window in which the
    /// socket is connectable by others, and it would undo an operator's own `chmod` made as
    /// soon as the socket answers (a control process running as another user relies on that).
    ///
    /// # Errors
    /// A live process answers on `path`; `path` exists and is not a socket; the bind failed.
    /// Each names the path.
    pub fn bind(path: &Path) -> Result<ControlSocket, String> {
        let shown = path.display();
        remove_stale(path)?;
        // SAFETY: umask(2) only swaps the process's file mode mask; it cannot fail.
        let old = unsafe { libc::umask(0o177) };
        let server = tiny_http::Server::http_unix(path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let server = server.map_err(|e| format!("control socket {shown}: bind: {e}"))?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            server: Arc::new(server),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts answering on a thread named `respite-control`: pushes go to `events` (as
    /// `E::from(Push)`), every other request to the admin endpoint over `ctx`. A push the
    /// receiver no longer takes (the process is shutting down) is answered `503`.
    ///
    /// # Errors
    /// Already serving, or the thread cannot be spawned.
    pub fn serve<E>(&mut self, ctx: Arc<AdminContext>, events: mpsc::Sender<E>) -> io::Result<()>
    where
        E: From<Push> + Send + 'static,
    {
        if self.thread.is_some() {
            return Err(io::Error::other("control socket: already serving"));
        }
        let server = Arc::clone(&self.server);
        let stop = Arc::clone(&self.stop);
        let thread = std::thread::Builder::new()
            .name("respite-control".to_owned())
            .spawn(move || serve(&server, &stop, &ctx, &events))?;
        self.thread = Some(thread);
        Ok(())
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The last `Arc` of the server goes with `self`: tiny_http's drop removes the file.
    }
}

/// Makes room for binding `path`: nothing there is fine; a socket nothing answers on (its
/// process died without removing it) is removed; anything else is refused.
fn remove_stale(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("control socket {shown}: {e}")),
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "control socket {shown}: the path exists and is not a socket; not replacing it"
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(format!(
            "control socket {shown}: another process is listening on it (is a respite already \
             running with --control-socket {shown}?)"
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %shown, "replacing a stale control socket (nothing listens on it)");
            std::fs::remove_file(path)
                .or_else(|e| match e.kind() {
                    io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                })
                .map_err(|e| format!("control socket {shown}: removing the stale socket: {e}"))
        }
        Err(e) => Err(format!("control socket {shown}: {e}")),
    }
}

fn serve<E: From<Push>>(
    server: &tiny_http::Server,
    stop: &AtomicBool,
    ctx: &AdminContext,
    events: &mpsc::Sender<E>,
) {
    loop {
        match server.recv() {
            Ok(mut req) => {
                let url = req.url();
                let path = url.split_once('?').map_or(url, |(p, _)| p);
                if path == STATS_EXTERNAL_PATH {
                    let reply = if *req.method() == tiny_http::Method::Post {
                        push_stats(&mut req, ctx)
                    } else {
                        text(
                            405,
                            format!("method not allowed: use POST for {STATS_EXTERNAL_PATH}\n"),
                        )
                    };
                    respond(req, reply, false);
                } else if path == CONFIG_PATH {
                    let reply = if *req.method() == tiny_http::Method::Post {
                        push(&mut req, events)
                    } else {
                        text(
                            405,
                            format!("method not allowed: use POST for {CONFIG_PATH}\n"),
                        )
                    };
                    respond(req, reply, false);
                } else {
                    let (reply, drain) = answer(&req, ctx);
                    respond(req, reply, drain);
                }
            }
            Err(e) => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                tracing::debug!(error = %e, "control socket: accept failed");
            }
        }
    }
}

/// Reads the pushed config from `req`, hands it to the engine's owner and waits for the outcome.
fn push<E: From<Push>>(req: &mut tiny_http::Request, events: &mpsc::Sender<E>) -> Reply {
    let mut body = Vec::new();
    if let Err(e) = req
        .as_reader()
        .take(MAX_PUSH_BYTES + 1)
        .read_to_end(&mut body)
    {
        return text(400, format!("reading the request body: {e}\n"));
    }
    if body.len() as u64 > MAX_PUSH_BYTES {
        return text(
            413,
            format!("config larger than {MAX_PUSH_BYTES} bytes; not applied\n"),
        );
    }
    let Ok(toml) = String::from_utf8(body) else {
        return text(400, "control socket: the config is not UTF-8 text\n");
    };
    let (tx, rx) = mpsc::channel();
    let outcome = events
        .send(E::from(Push { toml, reply: tx }))
        .ok()
        .and_then(|()| rx.recv().ok());
    match outcome {
        Some(Ok(())) => text(200, "applied\n"),
        Some(Err(PushError::Invalid(e))) => text(400, format!("{e}\n")),
        Some(Err(PushError::NotApplied(e))) => text(409, format!("{e}\n")),
        None => text(503, "shutting down; config not applied\n"),
    }
}

/// Reads pushed external stats from `req` and sets them in the stats store, all or none.
/// Answered on this thread: it touches only the store, not the engine.
fn push_stats(req: &mut tiny_http::Request, ctx: &AdminContext) -> Reply {
    let mut body = Vec::new();
    if let Err(e) = req
        .as_reader()
        .take(MAX_STATS_BYTES + 1)
        .read_to_end(&mut body)
    {
        return text(400, format!("reading the request body: {e}\n"));
    }
    if body.len() as u64 > MAX_STATS_BYTES {
        return text(
            413,
            format!("stats larger than {MAX_STATS_BYTES} bytes; not applied\n"),
        );
    }
    let Ok(body) = String::from_utf8(body) else {
        return text(400, "the stats are not UTF-8 text; not applied\n");
    };
    let applied = crate::stats::external::parse(&body).and_then(|s| ctx.stats.set_external(&s));
    match applied {
        Ok(()) => text(200, "ok\n"),
        Err(e) => text(400, format!("{e}; nothing applied\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// One request over the socket; (status, body).
    fn request(path: &Path, method: &str, target: &str, body: &str) -> (u16, String) {
        use std::io::Write as _;
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            s,
            "{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        (
            head.split(' ').nth(1).unwrap().parse().unwrap(),
            body.to_owned(),
        )
    }

    /// A served control socket over `store`, with no listener behind the pushes.
    fn served(store: Arc<crate::stats::Store>) -> (tempfile::TempDir, ControlSocket) {
        let dir = tempfile::tempdir().unwrap();
        let mut sock = ControlSocket::bind(&dir.path().join("c.sock")).unwrap();
        let config = crate::config::parse_pushed("", "t").unwrap();
        let ctx = AdminContext::new(store, Arc::new(config), Arc::default(), None);
        let (tx, rx) = mpsc::channel::<Push>();
        // Config pushes are not under test: the receiver goes away, so they would get 503.
        drop(rx);
        sock.serve(ctx, tx).unwrap();
        (dir, sock)
    }

    #[test]
    fn external_stats_are_set_and_shown_in_stats() {
        let store = crate::stats::Store::new();
        store.counter("redis.m.downstream_cx_total", 0).add(2);
        let (_dir, sock) = served(store.clone());
        let p = sock.path();
        let body = "counter sockmap.redirect_total 40\n\ngauge sockmap.sockets 3\n";
        assert_eq!(
            request(p, "POST", STATS_EXTERNAL_PATH, body),
            (200, "ok\n".into())
        );
        // Totals: a second push replaces the values.
        let body = "counter sockmap.redirect_total 41\ngauge sockmap.sockets 2\n";
        assert_eq!(
            request(p, "POST", STATS_EXTERNAL_PATH, body),
            (200, "ok\n".into())
        );
        assert_eq!(store.counter_value("sockmap.redirect_total"), Some(41));
        assert_eq!(store.gauge_value("sockmap.sockets"), Some(2));
        let (status, stats) = request(p, "GET", "/stats", "");
        assert_eq!(status, 200);
        assert_eq!(
            stats,
            "redis.m.downstream_cx_total: 2\nsockmap.redirect_total: 41\nsockmap.sockets: 2\n"
        );
    }

    #[test]
    fn a_bad_external_stats_line_is_400_and_nothing_is_applied() {
        let store = crate::stats::Store::new();
        let (_dir, sock) = served(store.clone());
        let p = sock.path();
        let body = "counter sockmap.redirect_total 40\ngauge redis.m.x 1\n";
        let (status, answer) = request(p, "POST", STATS_EXTERNAL_PATH, body);
        assert_eq!(status, 400);
        assert_eq!(
            answer,
            "line 2: \"gauge redis.m.x 1\": the name must start with \"sockmap.\" (only those \
             stats are pushed); nothing applied\n"
        );
        assert_eq!(store.counter_value("sockmap.redirect_total"), None);
        let (status, answer) = request(p, "GET", STATS_EXTERNAL_PATH, "");
        assert_eq!(status, 405, "{answer}");
        let big = "\n".repeat(MAX_STATS_BYTES as usize + 1);
        assert_eq!(request(p, "POST", STATS_EXTERNAL_PATH, &big).0, 413);
        assert!(store.counters().is_empty(), "{:?}", store.counters());
        assert!(store.gauges().is_empty(), "{:?}", store.gauges());
    }

    #[test]
    fn bind_makes_an_owner_only_socket_and_removes_it_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let sock = ControlSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // Live: a second bind refuses and leaves the file in place.
        let err = ControlSocket::bind(&path).unwrap_err();
        assert!(err.contains("another process is listening"), "{err}");
        assert!(path.exists());
        drop(sock);
        assert!(!path.exists(), "the socket file outlived the ControlSocket");
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_regular_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        // A socket nobody listens on any more (std does not remove the file on drop).
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let sock = ControlSocket::bind(&path).unwrap();
        assert!(UnixStream::connect(&path).is_ok());
        drop(sock);

        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "keep me").unwrap();
        let err = ControlSocket::bind(&file).unwrap_err();
        assert!(err.contains("is not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    }
}

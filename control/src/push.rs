//! The data plane's control socket, client side: `POST /config` with TOML text, and
//! `POST /stats/external` with stat lines, over HTTP/1.1 on a Unix socket; `200` = applied,
//! anything else = rejected with the body as the reason (server side:
//! `respite::admin::control_socket`).

use std::path::Path;
use std::time::Duration;

use respite_tools::admin_client::{Client, Error, Timeouts};

/// How long a push may wait for the data plane's answer. Applying can legitimately take a while
/// (a new `redis_cluster` cluster waits up to its `cluster_refresh_timeout` for a first slot map),
/// but a stuck data plane must not hang the control process forever.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long writing the request may block (the data plane reads it before applying anything).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a push did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The socket cannot be reached or the exchange failed midway (the data plane may be
    /// restarting): not the config's fault. The message names the socket path.
    Unreachable(String),
    /// The data plane answered and refused the config: its answer's body, trimmed.
    Rejected(String),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Unreachable(e) | PushError::Rejected(e) => f.write_str(e),
        }
    }
}

/// Pushes `toml` to the data plane listening on `socket`, blocking until it answers.
///
/// Unix-socket connects do not block on a live listener (they fail at once with `ECONNREFUSED`
/// or `ENOENT` when nobody listens), so the timeouts that matter are on the write
/// ([`WRITE_TIMEOUT`]) and on the answer ([`READ_TIMEOUT`]).
///
/// Errors: the socket cannot be reached or the exchange failed (the message names the socket
/// path), or the data plane rejected the config: then the error is its answer's body, trimmed
/// (`control socket:12:1: clusters[0].lb_policy: …` for an invalid config, the apply error for
/// one that could not be applied).
pub fn push(socket: &Path, toml: &str) -> Result<(), PushError> {
    push_within(socket, toml, READ_TIMEOUT)
}

/// Pushes stats that this process owns (the sockmap totals) to the data plane listening on
/// `socket`: `body` is one `counter <name> <u64>` or `gauge <name> <i64>` per line, names under
/// `sockmap.` (`respite::stats::external`). The data plane SETS each value, so send totals.
/// Same timeouts as [`push`].
///
/// Errors: as [`push`]: [`PushError::Unreachable`] naming the socket path, or
/// [`PushError::Rejected`] with the data plane's answer (`line N: "…": reason; nothing
/// applied`); a rejected push sets none of its values.
pub fn push_stats(socket: &Path, body: &str) -> Result<(), PushError> {
    post(socket, "/stats/external", "the stats", body, READ_TIMEOUT)
}

/// [`push`] waiting at most `read_timeout` for the answer.
fn push_within(socket: &Path, toml: &str, read_timeout: Duration) -> Result<(), PushError> {
    post(socket, "/config", "the config", toml, read_timeout)
}

/// `POST target` with `body` (`what` names it in errors), waiting at most `read_timeout` for
/// the answer; `200` is success, any other answer a [`PushError::Rejected`].
fn post(
    socket: &Path,
    target: &str,
    what: &str,
    body: &str,
    read_timeout: Duration,
) -> Result<(), PushError> {
    let shown = socket.display();
    let timeouts = Timeouts {
        write: WRITE_TIMEOUT,
        read: read_timeout,
        ..Timeouts::DEFAULT
    };
    let answer = Client::new(socket)
        .with_timeouts(timeouts)
        .post(target, body)
        .map_err(|e| {
            PushError::Unreachable(match e {
                Error::Connect(e) => format!("control socket {shown}: connect: {e}"),
                Error::Send(e) => format!("control socket {shown}: sending {what}: {e}"),
                Error::Receive(e) => format!("control socket {shown}: reading the answer: {e}"),
                Error::Malformed { start, .. } => {
                    format!("control socket {shown}: not an HTTP answer: {start:?}")
                }
            })
        })?;
    if answer.status == 200 {
        Ok(())
    } else if answer.body.trim().is_empty() {
        Err(PushError::Rejected(format!(
            "control socket {shown}: answered {}",
            answer.status
        )))
    } else {
        Err(PushError::Rejected(answer.body.trim().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixListener;
    use std::thread::JoinHandle;

    /// A one-shot server on a fresh socket: reads one request (head + Content-Length body),
    /// answers `response` and closes; the request it read comes back from the join handle.
    fn server(
        response: &'static str,
    ) -> (tempfile::TempDir, std::path::PathBuf, JoinHandle<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
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
                    if body.len() >= len || n == 0 {
                        break;
                    }
                }
                assert!(n > 0, "client closed before sending a whole request");
            }
            s.write_all(response.as_bytes()).unwrap();
            String::from_utf8(buf).unwrap()
        });
        (dir, path, handle)
    }

    #[test]
    fn sends_a_post_with_length_and_close_and_takes_200() {
        let (_dir, path, handle) = server("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\napplied\n");
        let toml = "[[clusters]]\nname = \"c\"\n";
        assert_eq!(push(&path, toml), Ok(()));
        let request = handle.join().unwrap();
        let (head, body) = request.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        assert_eq!(lines.next(), Some("POST /config HTTP/1.1"));
        let headers: Vec<&str> = lines.collect();
        assert!(headers.contains(&"Host: localhost"), "{headers:?}");
        assert!(headers.contains(&"Connection: close"), "{headers:?}");
        assert!(
            headers.contains(&format!("Content-Length: {}", toml.len()).as_str()),
            "{headers:?}"
        );
        assert_eq!(body, toml);
    }

    #[test]
    fn push_stats_posts_the_lines_to_stats_external() {
        let (_dir, path, handle) = server("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        let body = "counter sockmap.redirect_total 7\ngauge sockmap.enabled 1\n";
        assert_eq!(push_stats(&path, body), Ok(()));
        let request = handle.join().unwrap();
        let (head, sent) = request.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        assert_eq!(lines.next(), Some("POST /stats/external HTTP/1.1"));
        let headers: Vec<&str> = lines.collect();
        assert!(headers.contains(&"Connection: close"), "{headers:?}");
        assert!(
            headers.contains(&format!("Content-Length: {}", body.len()).as_str()),
            "{headers:?}"
        );
        assert_eq!(sent, body);

        let reason = "line 1: \"counter x 1\": the name must start with \"sockmap.\"";
        let response: &'static str = Box::leak(
            format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Length: {}\r\n\r\n{reason}\n",
                reason.len() + 1
            )
            .into_boxed_str(),
        );
        let (_dir, path, handle) = server(response);
        assert_eq!(
            push_stats(&path, "counter x 1\n"),
            Err(PushError::Rejected(reason.to_owned()))
        );
        handle.join().unwrap();

        let dir = tempfile::tempdir().unwrap();
        let nobody = dir.path().join("nobody.sock");
        let err = push_stats(&nobody, "").unwrap_err();
        assert!(matches!(err, PushError::Unreachable(_)), "{err:?}");
        assert!(err.to_string().contains("connect"), "{err}");
    }

    #[test]
    fn a_rejection_is_the_trimmed_body() {
        let reason = "control socket:3:8: clusters[0].lb_policy: unknown variant `nope`";
        let response: &'static str = Box::leak(
            format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Length: {}\r\n\r\n  {reason}\n",
                reason.len() + 3
            )
            .into_boxed_str(),
        );
        let (_dir, path, handle) = server(response);
        assert_eq!(
            push(&path, "x = 1"),
            Err(PushError::Rejected(reason.to_owned()))
        );
        handle.join().unwrap();
    }

    #[test]
    fn a_409_and_an_empty_body_name_the_status() {
        let (_dir, path, handle) = server("HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n");
        let err = push(&path, "").unwrap_err();
        assert!(matches!(err, PushError::Rejected(_)), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("answered 409"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        handle.join().unwrap();
    }

    #[test]
    fn a_chunked_answer_is_read() {
        let (_dir, path, handle) = server(
            "HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nbind \r\n6\r\nfailed\r\n0\r\n\r\n",
        );
        assert_eq!(
            push(&path, "a"),
            Err(PushError::Rejected("bind failed".to_owned()))
        );
        handle.join().unwrap();
    }

    #[test]
    fn no_listener_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nobody.sock");
        let err = push(&path, "").unwrap_err();
        assert!(matches!(err, PushError::Unreachable(_)), "{err:?}");
        let err = err.to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("connect"), "{err}");
        // A socket file nobody listens on: refused, also named.
        let listener = UnixListener::bind(&path).unwrap();
        drop(listener);
        let err = push(&path, "").unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
    }

    #[test]
    fn a_silent_data_plane_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stuck.sock");
        let listener = UnixListener::bind(&path).unwrap();
        // Accepts (the kernel does, from the backlog) and never answers.
        let started = std::time::Instant::now();
        let err = push_within(&path, "a", Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        let took = started.elapsed();
        println!("timed out after {took:?}: {err}");
        assert!(err.contains("reading the answer"), "{err}");
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        drop(listener);
    }

    #[test]
    fn garbage_is_not_taken_for_an_answer() {
        let (_dir, path, handle) = server("SSH-2.0-OpenSSH_9.6\r\n");
        let err = push(&path, "").unwrap_err().to_string();
        assert!(err.contains("not an HTTP answer"), "{err}");
        handle.join().unwrap();
    }
}

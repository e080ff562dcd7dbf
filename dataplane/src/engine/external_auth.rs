//! The client of `[listeners.external_auth]`: Envoy's
//! `envoy.service.redis_auth.v3.RedisProxyExternalAuth/Authenticate` (proto
//! `api/envoy/service/redis_auth/v3/redis_external_auth.proto`).
//!
//! The workers run on compio, so gRPC (tonic, on tokio) runs on one dedicated thread of the
//! process, `respite-ext-auth`, with a current-thread tokio runtime, started by the first call.
//! A session sends its call there over a channel and awaits the verdict on a one-slot channel
//! of its own; both are `async-channel`, which any runtime can await. One HTTP/2 connection
//! per service address (plaintext, h2c) carries every call to it; it is opened at the first
//! call and reopened after a failure.
//!
//! Bounds: at most [`MAX_IN_FLIGHT`] calls in the whole process (past it a call fails at once);
//! each call is cut at its listener's `timeout`, and the session waits at most [`GRACE`] more
//! for the verdict (so a stuck thread cannot hold a client). Failures are logged at most once
//! per [`LOG_EVERY`]; a password never is.
//!
//! The verdict follows Envoy's `GrpcExternalAuthClient::onSuccess`/`onFailure`
//! (`source/extensions/filters/network/redis_proxy/external_auth.cc`): status OK accepts,
//! PERMISSION_DENIED or UNAUTHENTICATED refuses, any other status and any call failure is an
//! error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::redis_auth::v3::RedisProxyExternalAuthRequest;
use envoy_types::pb::envoy::service::redis_auth::v3::redis_proxy_external_auth_client::RedisProxyExternalAuthClient;
use tonic::transport::{Channel, Endpoint};
use tracing::warn;

use crate::config::ExternalAuthConfig;
use crate::net;

/// Calls in flight in the whole process, every listener together: past it a call fails at once
/// (`-ERR external authentication failed`) rather than queueing without end behind a slow
/// service.
pub const MAX_IN_FLIGHT: usize = 1024;

/// How much longer than the call's timeout a session waits for the verdict.
pub const GRACE: Duration = Duration::from_secs(1);

/// At most one failure logged per this period (the others are counted in the stats).
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// gRPC status codes (`google.rpc.Code`) the verdict tells apart.
const CODE_OK: i32 = 0;
const CODE_PERMISSION_DENIED: i32 = 7;
const CODE_UNAUTHENTICATED: i32 = 16;

/// The service's answer to one AUTH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Status OK: the client is authenticated, until `expires` when the answer carried an
    /// expiration.
    Authorized {
        /// The answer's `expiration`; `None` when it had none (valid indefinitely, as the
        /// proto says).
        expires: Option<SystemTime>,
    },
    /// PERMISSION_DENIED or UNAUTHENTICATED, with the service's `message` (may be empty).
    Unauthorized(String),
    /// Any other status, or the call failed; why, for the log.
    Error(String),
}

/// One call, as the sessions hand it to the gRPC thread.
struct Call {
    address: String,
    timeout: Duration,
    request: RedisProxyExternalAuthRequest,
    reply: async_channel::Sender<Verdict>,
    _permit: Permit,
}

/// One of the [`MAX_IN_FLIGHT`] places, given back when the call is done or dropped.
struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Service {
    calls: async_channel::Sender<Call>,
    in_flight: Arc<AtomicUsize>,
}

static SERVICE: OnceLock<Service> = OnceLock::new();

/// The gRPC thread's inbox, starting the thread on first use. If the thread cannot start, the
/// inbox's receiver is gone and every call fails as an error.
fn service() -> &'static Service {
    SERVICE.get_or_init(|| {
        let (tx, rx) = async_channel::unbounded();
        let started = std::thread::Builder::new()
            .name("respite-ext-auth".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(serve(rx)),
                    Err(e) => {
                        warn!(error = %e, "external auth: no tokio runtime; every AUTH fails")
                    }
                }
            });
        if let Err(e) = started {
            warn!(error = %e, "external auth: thread not started; every AUTH fails");
        }
        Service {
            calls: tx,
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    })
}

/// Asks `cfg`'s service whether `username` (empty for `AUTH <password>`) and `password` may
/// authenticate. Never waits longer than `cfg.timeout` + [`GRACE`].
pub async fn authenticate(cfg: &ExternalAuthConfig, username: &[u8], password: &[u8]) -> Verdict {
    let (Ok(username), Ok(password)) = (
        String::from_utf8(username.to_vec()),
        String::from_utf8(password.to_vec()),
    ) else {
        // Protobuf strings are UTF-8; altering the bytes would check another password.
        return Verdict::Error("the user name or password is not UTF-8".into());
    };
    let svc = service();
    if svc.in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
        svc.in_flight.fetch_sub(1, Ordering::Relaxed);
        return Verdict::Error(format!("more than {MAX_IN_FLIGHT} calls in flight"));
    }
    let permit = Permit(svc.in_flight.clone());
    let (reply, verdict) = async_channel::bounded(1);
    let call = Call {
        address: cfg.address.clone(),
        timeout: cfg.timeout,
        request: RedisProxyExternalAuthRequest { username, password },
        reply,
        _permit: permit,
    };
    if svc.calls.try_send(call).is_err() {
        return Verdict::Error("the external auth thread is not running".into());
    }
    match net::timeout(cfg.timeout.saturating_add(GRACE), verdict.recv()).await {
        Some(Ok(v)) => v,
        Some(Err(_)) => Verdict::Error("the external auth thread dropped the call".into()),
        None => Verdict::Error("no answer from the external auth thread".into()),
    }
}

/// The gRPC thread: one task per call, over one channel per service address.
async fn serve(calls: async_channel::Receiver<Call>) {
    // One entry per address a listener ever named: bounded by the configurations applied.
    let mut channels: HashMap<String, Channel> = HashMap::new();
    while let Ok(call) = calls.recv().await {
        let channel = match channels.get(&call.address) {
            Some(c) => c.clone(),
            None => match Endpoint::from_shared(format!("http://{}", call.address)) {
                Ok(e) => {
                    let c = e.connect_timeout(call.timeout).connect_lazy();
                    channels.insert(call.address.clone(), c.clone());
                    c
                }
                Err(e) => {
                    let _ = call
                        .reply
                        .try_send(Verdict::Error(format!("bad address: {e}")));
                    continue;
                }
            },
        };
        tokio::spawn(async move {
            let verdict = match tokio::time::timeout(call.timeout, {
                let mut client = RedisProxyExternalAuthClient::new(channel);
                async move { client.authenticate(call.request).await }
            })
            .await
            {
                Err(_) => Verdict::Error(format!("no answer within {:?}", call.timeout)),
                Ok(Err(status)) => Verdict::Error(format!(
                    "call failed: {:?}: {}",
                    status.code(),
                    status.message()
                )),
                Ok(Ok(resp)) => verdict(resp.into_inner()),
            };
            let _ = call.reply.try_send(verdict);
        });
    }
}

/// The verdict of a response (Envoy `GrpcExternalAuthClient::onSuccess`).
fn verdict(
    resp: envoy_types::pb::envoy::service::redis_auth::v3::RedisProxyExternalAuthResponse,
) -> Verdict {
    let code = resp.status.as_ref().map_or(CODE_OK, |s| s.code);
    match code {
        CODE_OK => Verdict::Authorized {
            expires: resp.expiration.map(|t| timestamp(t.seconds, t.nanos)),
        },
        CODE_PERMISSION_DENIED | CODE_UNAUTHENTICATED => Verdict::Unauthorized(resp.message),
        other => Verdict::Error(format!("status {other}: {}", resp.message)),
    }
}

/// A protobuf Timestamp as a time; one before 1970 is the epoch (long past).
fn timestamp(seconds: i64, nanos: i32) -> SystemTime {
    let secs = u64::try_from(seconds).unwrap_or(0);
    let nanos = u32::try_from(nanos).unwrap_or(0).min(999_999_999);
    UNIX_EPOCH
        .checked_add(Duration::new(secs, nanos))
        .unwrap_or(UNIX_EPOCH)
}

/// The reply to a refused AUTH (Envoy `ProxyFilter::onAuthenticateExternal`): `-ERR <message>`,
/// `-ERR unauthorized` when the service gave none. CR and LF are dropped from the message (they
/// would end the error line).
pub fn unauthorized_reply(message: &str) -> Vec<u8> {
    let message = if message.is_empty() {
        "unauthorized"
    } else {
        message
    };
    let mut out = b"-ERR ".to_vec();
    out.extend(message.bytes().filter(|b| !matches!(b, b'\r' | b'\n')));
    out.extend_from_slice(b"\r\n");
    out
}

/// The reply to an AUTH whose check failed (Envoy's text).
pub const FAILED: &[u8] = b"-ERR external authentication failed\r\n";

/// Logs a failed call, at most once per [`LOG_EVERY`] in the process.
pub fn log_failure(listener: &str, why: &str) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(Ordering::Relaxed);
    if (last == 0 || now >= last.saturating_add(LOG_EVERY.as_secs()))
        && LAST
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        warn!(
            listener,
            error = why,
            "external authentication failed (logged at most every 10s)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::redis_auth::v3::RedisProxyExternalAuthResponse;
    use envoy_types::pb::google::protobuf::Timestamp;
    use envoy_types::pb::google::rpc::Status;

    fn resp(code: i32, message: &str, exp: Option<i64>) -> RedisProxyExternalAuthResponse {
        RedisProxyExternalAuthResponse {
            status: Some(Status {
                code,
                message: String::new(),
                details: vec![],
            }),
            expiration: exp.map(|seconds| Timestamp { seconds, nanos: 5 }),
            message: message.into(),
        }
    }

    #[test]
    fn verdicts_follow_envoy_status_mapping() {
        assert_eq!(
            verdict(resp(0, "", Some(100))),
            Verdict::Authorized {
                expires: Some(UNIX_EPOCH + Duration::new(100, 5))
            }
        );
        assert_eq!(
            verdict(resp(0, "", None)),
            Verdict::Authorized { expires: None }
        );
        assert_eq!(
            verdict(resp(7, "no", None)),
            Verdict::Unauthorized("no".into())
        );
        assert_eq!(
            verdict(resp(16, "", None)),
            Verdict::Unauthorized(String::new())
        );
        assert_eq!(
            verdict(resp(14, "down", None)),
            Verdict::Error("status 14: down".into())
        );
        assert_eq!(timestamp(-5, -1), UNIX_EPOCH);
    }

    #[test]
    fn refusal_reply_texts() {
        assert_eq!(unauthorized_reply(""), b"-ERR unauthorized\r\n");
        assert_eq!(
            unauthorized_reply("bad\r\nuser"),
            b"-ERR baduser\r\n".to_vec()
        );
    }

    #[test]
    fn an_unreachable_service_is_an_error_within_the_timeout() {
        let cfg = ExternalAuthConfig {
            // A port nothing listens on (reserved, discard).
            address: "127.0.0.1:9".into(),
            timeout: Duration::from_millis(300),
            enable_auth_expiration: false,
        };
        let start = std::time::Instant::now();
        let v = compio::runtime::Runtime::new()
            .unwrap()
            .block_on(authenticate(&cfg, b"", b"pw"));
        assert!(matches!(v, Verdict::Error(_)), "{v:?}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}

//! The start of a client connection: on a TLS listener, the handshake (with the listener's
//! certificates as they are now, so a reload changes new connections only), then the session.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use super::session;
use super::worker::{ListenerHandle, WorkerShared};
use crate::net::{self, Stream, TcpStream};
use crate::stats::log_limit::log_limited_by;

/// The longest a client may take over its TLS handshake. A client that opens connections and
/// never finishes the handshake holds them no longer than this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one accepted connection: the TLS handshake when the listener has `[listeners.tls]`,
/// then the session. A failed handshake is counted in `redis.<stat_prefix>.ssl.*` and logged
/// (rate-limited) with its reason; the connection is closed.
pub async fn serve(
    tcp: TcpStream,
    peer: Option<SocketAddr>,
    handle: Rc<ListenerHandle>,
    worker: Rc<WorkerShared>,
) {
    let rt = handle.current();
    let Some(tls) = rt.config.tls.as_ref() else {
        drop(rt);
        return session::run(Stream::plain(tcp), peer, handle, worker).await;
    };
    let config = tls.server.config.clone();
    let asks_certificate = tls.trusted_ca.is_some();
    let listener = rt.config.name.clone();
    let stats = rt.stats.ssl();
    drop(rt);
    match net::timeout(HANDSHAKE_TIMEOUT, net::tls_accept(tcp, config)).await {
        Some(Ok((stream, info))) => {
            stats.handshake.inc();
            if asks_certificate && !info.peer_certificate {
                stats.no_certificate.inc();
            }
            session::run(stream, peer, handle, worker).await
        }
        Some(Err(e)) => {
            stats.count_failure(net::tls::failure(&e));
            log_limited_by!(stats.log, WARN, "downstream TLS handshake failed; closing the connection";
                listener = %listener, peer = %peer.map_or_else(|| "?".to_owned(), |p| p.to_string()), error = %e);
        }
        None => {
            stats.connection_error.inc();
            log_limited_by!(stats.log, WARN, "downstream TLS handshake timed out; closing the connection";
                listener = %listener, peer = %peer.map_or_else(|| "?".to_owned(), |p| p.to_string()),
                timeout_s = HANDSHAKE_TIMEOUT.as_secs());
        }
    }
}

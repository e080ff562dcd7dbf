//! respite-control's admin endpoint (HTTP, blocking `tiny_http` on its own thread, off the xDS
//! path), in Envoy admin's spirit:
//!
//! | method | path | response |
//! |---|---|---|
//! | GET | `/`, `/help` | this list |
//! | GET | `/config_dump` | JSON: `applied` (the last config the data plane accepted, in the data plane's own `/config_dump` shape, secrets redacted), `listeners` (active / warming / waiting_for), `clusters` (EDS name, host count), `push_pending` |
//! | GET | `/xds` | JSON: the xDS client's `stream`, per-type `types` (subscription, version, nonce, ACK/NACK counts, last NACK) and per-resource `resources` (REQUESTED / DOES_NOT_EXIST / ACKED / NACKED with version, rejected version, error, time) — CSDS's `ClientResourceStatus` as JSON (gRFC A40) |
//! | GET | `/sockmap` | JSON: `state` (`enabled` / `disabled` / `unavailable`), `reason`, `cgroup`, `ports` (the filter), `self_test`, `sockets`, `inserts`, `insert_fail`, `redirect_total`, `redirect_fail` ([`crate::sockmap`]) |
//! | GET | `/ready` | `200 LIVE` |

use std::net::SocketAddr;
use std::sync::Arc;

use crate::apply::Applier;
use crate::sockmap::Accelerator;
use crate::xds::status::Status;

const HELP: &str = "admin commands are:\n  /config_dump: the applied config and the resource cache (JSON)\n  /xds: xDS client state per type and resource (JSON)\n  /sockmap: the eBPF loopback accelerator (JSON)\n  /ready: 200 LIVE\n";

/// What the endpoint reads.
#[derive(Clone)]
pub struct AdminState {
    /// The resource cache and applied config.
    pub applier: Applier,
    /// The xDS client's status (empty when the source is a file).
    pub status: Status,
    /// The sockmap accelerator; None when `--sockmap` was not asked for.
    pub sockmap: Option<Accelerator>,
}

/// Answers one request: (status code, content type, body).
pub fn route(method_get: bool, url: &str, state: &AdminState) -> (u16, &'static str, String) {
    let path = url.split('?').next().unwrap_or(url);
    if !method_get {
        return (
            405,
            "text/plain",
            format!("method not allowed: use GET for {path}\n"),
        );
    }
    match path {
        "/" | "/help" => (200, "text/plain", HELP.to_string()),
        "/ready" => (200, "text/plain", "LIVE\n".to_string()),
        "/config_dump" => (
            200,
            "application/json",
            pretty(&state.applier.config_dump()),
        ),
        "/xds" => {
            let snapshot = state.status.snapshot();
            let value = serde_json::to_value(&snapshot).unwrap_or_default();
            (200, "application/json", pretty(&value))
        }
        "/sockmap" => {
            let value = state.sockmap.as_ref().map_or_else(
                || {
                    serde_json::json!({
                        "state": "disabled",
                        "reason": "not requested: start respite-control with --sockmap",
                    })
                },
                Accelerator::status,
            );
            (200, "application/json", pretty(&value))
        }
        _ => (404, "text/plain", format!("not found: {path}; see /help\n")),
    }
}

fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// Binds `address` and serves on a background thread. Returns the bound address (port 0 asks
/// for a free one).
///
/// Errors: the address cannot be bound.
pub fn spawn(address: SocketAddr, state: AdminState) -> Result<SocketAddr, String> {
    let server =
        tiny_http::Server::http(address).map_err(|e| format!("admin: bind {address}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("admin: {address} is not an IP address"))?;
    let server = Arc::new(server);
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let get = *request.method() == tiny_http::Method::Get;
                let (code, ctype, body) = route(get, request.url(), &state);
                let mut response = tiny_http::Response::from_string(body).with_status_code(code);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", ctype) {
                    response = response.with_header(h);
                }
                let _ = request.respond(response);
            }
        })
        .map_err(|e| format!("admin: thread: {e}"))?;
    Ok(bound)
}

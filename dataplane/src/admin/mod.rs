//! Admin HTTP endpoint on its own thread, off the data path (Envoy admin semantics).
//!
//! A known path asked with the wrong method gets `405`, an unknown path `404`, a bad parameter
//! `400` with the reason. Every `GET` is read-only; everything that changes state is `POST`
//! (as Envoy requires since 1.17: a browser tab cannot change it by loading a URL).
//!
//! | method | path | parameters | response |
//! |---|---|---|---|
//! | GET | `/`, `/help` | | this list, one endpoint per line |
//! | GET | `/stats` | `filter=<regex>`, `format=text\|json\|prometheus`, `histogram_buckets=detailed` (json), `pretty` (json) | Envoy `/stats`: `name: value` lines, sorted, then histogram quantile lines; JSON in Envoy's shape ([`stats`]); `usedonly` is accepted and ignored (every stat is shown) |
//! | GET | `/stats/prometheus` | `filter=<regex>` | Prometheus text format 0.0.4 ([`crate::stats::prometheus`]) |
//! | GET | `/clusters` | `format=text\|json` | every upstream host: `<cluster>::<ip:port>::<stat>::<value>`, health flags, weight ([`clusters`]) |
//! | GET | `/config_dump` | | the live config as pretty JSON, passwords as `"[redacted]"` |
//! | GET | `/ready` | | `200 LIVE`; `503 DRAINING` after `/healthcheck/fail` (a draining process has closed its admin port, so a successor can bind it) |
//! | POST | `/healthcheck/fail` | | `200 OK`; `/ready` answers 503 from now on (load-balancer draining) |
//! | POST | `/healthcheck/ok` | | `200 OK`; undoes `/healthcheck/fail` |
//! | GET, POST | `/logging` | `level=<tracing directive>` (POST only) | the current log filter; POST with `level` replaces it (`400` and the old filter kept when the directive is invalid) |
//! | GET | `/hot_keys` | `format=text\|json` | per listener, the most requested keys and the latest big values ([`hot_keys`]) |
//! | POST | `/drain_listeners` | | `200 OK draining pid=<pid>`, then the process drains and exits as on SIGTERM (Envoy's endpoint name; Envoy only drains listeners, here the whole process goes, as hot restart needs) |
//!
//! **Trust.** The admin port has no authentication: whoever can connect to it reads every stat
//! and the config (passwords redacted) and may fail health checks, change the log filter and
//! drain the process. It binds `127.0.0.1:9901` by default, for local processes only. A
//! request that changes state (any method but `GET`/`HEAD`) is refused with `403` when a
//! browser page may have sent it: it carries an `Origin` header, or its `Host` is not
//! `localhost`, a loopback address or the admin address ([`origin`]).
//!
//! `filter` is a regex ([`regex`] crate syntax) searched anywhere in the Envoy (dotted) stat
//! name, as Envoy's `std::regex_search`; an invalid one is a `400` with the regex error.
//!
//! The server is blocking `tiny_http` on one background thread, one request at a time; it never
//! touches a worker. An address another process holds is an error at start ([`spawn_handle`]),
//! except in a hot restart (`respite --hot-restart`): there [`spawn_or_retry`] starts it while
//! the process being replaced still holds the address, and keeps retrying the bind.
//!
//! The same endpoints answer on the control socket ([`control_socket`], `respite
//! --control-socket PATH`), which adds `POST /config` (config push).

pub mod clusters;
mod config_dump;
pub mod control_socket;
pub mod hot_keys;
mod logging;
pub mod origin;
mod query;
mod server;
pub mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

pub use logging::LogControl;
pub use server::{AdminHandle, AdminServer, spawn, spawn_handle, spawn_or_retry};

use crate::cluster::HostRegistry;
use crate::config::Config;
use crate::stats::Store;
use query::Query;

/// Everything the admin endpoints read or change: built by the engine at start;
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
    /// `/logging?level=`; `None` when the embedding process installed no control.
    pub log: Option<LogControl>,
}

impl AdminContext {
    /// A context over `stats`, `config` and `hosts`, not failing health checks.
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

/// Content type of text bodies (`/stats`, `/clusters`, `/ready`, `/help`, errors).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";
/// Content type of `/stats/prometheus` (Prometheus text exposition format 0.0.4).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of JSON bodies (`format=json`, `/config_dump`).
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// Path of the drain endpoint (Envoy admin's name; `POST` only).
pub const DRAIN_PATH: &str = "/drain_listeners";

/// Which methods an endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Methods {
    Get,
    Post,
    GetPost,
}

impl Methods {
    fn allows(self, is_get: bool) -> bool {
        match self {
            Methods::Get => is_get,
            Methods::Post => !is_get,
            Methods::GetPost => true,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Methods::Get => "GET",
            Methods::Post => "POST",
            Methods::GetPost => "GET or POST",
        }
    }
}

/// One admin endpoint: what `/help` prints and what [`route`] accepts.
struct Endpoint {
    path: &'static str,
    methods: Methods,
    help: &'static str,
}

/// Every endpoint, in `/help` order.
const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        path: "/help",
        methods: Methods::Get,
        help: "print out list of admin commands",
    },
    Endpoint {
        path: "/stats",
        methods: Methods::Get,
        help: "print server stats; params: filter=<regex>, format=text|json|prometheus, \
               histogram_buckets=detailed (json), pretty (json)",
    },
    Endpoint {
        path: "/stats/prometheus",
        methods: Methods::Get,
        help: "print server stats in prometheus format; param: filter=<regex>",
    },
    Endpoint {
        path: "/clusters",
        methods: Methods::Get,
        help: "upstream hosts: health, connections, requests, errors; param: format=text|json",
    },
    Endpoint {
        path: "/config_dump",
        methods: Methods::Get,
        help: "the live config as JSON, secrets redacted",
    },
    Endpoint {
        path: "/ready",
        methods: Methods::Get,
        help: "print server state, return 200 if LIVE, 503 if DRAINING or health check failed",
    },
    Endpoint {
        path: "/healthcheck/fail",
        methods: Methods::Post,
        help: "make /ready fail (503), for load-balancer draining",
    },
    Endpoint {
        path: "/healthcheck/ok",
        methods: Methods::Post,
        help: "undo /healthcheck/fail",
    },
    Endpoint {
        path: "/logging",
        methods: Methods::GetPost,
        help: "print the log filter (GET); change it (POST); param: level=<tracing directive> \
               (e.g. debug, info,respite::upstream=trace)",
    },
    Endpoint {
        path: "/hot_keys",
        methods: Methods::Get,
        help: "most requested keys and big values per listener; param: format=text|json",
    },
    Endpoint {
        path: DRAIN_PATH,
        methods: Methods::Post,
        help: "stop accepting, finish in-flight requests, close connections, exit",
    },
];

/// Body of `/help`: one endpoint per line, Envoy admin style.
pub fn help_text() -> String {
    let mut out = String::from("admin commands are:\n");
    for e in ENDPOINTS {
        let method = if e.methods == Methods::Get {
            String::new()
        } else {
            format!(" ({})", e.methods.as_str())
        };
        out.push_str(&format!("  {}{method}: {}\n", e.path, e.help));
    }
    out
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

/// A JSON reply; `pretty` indents it. Serializing a `serde_json::Value` cannot fail.
fn json(value: &serde_json::Value, pretty: bool) -> Reply {
    let mut body = if pretty {
        serde_json::to_string_pretty(value).unwrap_or_default()
    } else {
        value.to_string()
    };
    body.push('\n');
    Reply {
        status: 200,
        content_type: JSON_CONTENT_TYPE,
        body,
    }
}

/// The `format` parameter among `allowed` (the first is the default), or a `400` naming them.
fn format<'a>(q: &Query, allowed: &[&'a str]) -> Result<&'a str, Reply> {
    let default = allowed.first().copied().unwrap_or("text");
    match q.get("format") {
        None | Some("") => Ok(default),
        Some(f) => allowed.iter().copied().find(|a| *a == f).ok_or_else(|| {
            text(
                400,
                format!(
                    "unsupported format {f:?}; use one of {}\n",
                    allowed.join(", ")
                ),
            )
        }),
    }
}

/// Answers one admin request: `is_get` tells whether the method is `GET` (anything else counts
/// as `POST`), `url` is the request target (`/path?query`). See the module docs for the
/// endpoints. For `POST /drain_listeners` the caller starts the drain after replying.
pub fn route(is_get: bool, url: &str, ctx: &AdminContext) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let path = if path == "/" { "/help" } else { path };
    let Some(endpoint) = ENDPOINTS.iter().find(|e| e.path == path) else {
        return text(404, format!("not found: {path}; see /help\n"));
    };
    if !endpoint.methods.allows(is_get) {
        return text(
            405,
            format!(
                "method not allowed: use {} for {path}\n",
                endpoint.methods.as_str()
            ),
        );
    }
    let q = Query::parse(query);
    let result = match path {
        "/help" => Ok(text(200, help_text())),
        "/stats" => stats::stats(&ctx.stats, &q),
        "/stats/prometheus" => stats::prometheus(&ctx.stats, &q),
        "/clusters" => format(&q, &["text", "json"]).map(|f| {
            let view = clusters::collect(&ctx.config(), &ctx.hosts, &ctx.stats);
            if f == "json" {
                json(&clusters::render_json(&view), true)
            } else {
                text(200, clusters::render_text(&view))
            }
        }),
        "/config_dump" => Ok(config_dump::render(&ctx.config())),
        "/ready" => Ok(ready(ctx)),
        "/healthcheck/fail" | "/healthcheck/ok" => {
            let fail = path == "/healthcheck/fail";
            ctx.health_fail.store(fail, Ordering::Relaxed);
            tracing::info!(health_fail = fail, "admin: {path}");
            Ok(text(200, "OK\n"))
        }
        "/logging" => Ok(logging::logging(ctx.log.as_ref(), is_get, &q)),
        "/hot_keys" => format(&q, &["text", "json"]).map(|f| {
            let reports = ctx.stats.hot_keys();
            if f == "json" {
                json(&hot_keys::render_json(&reports), true)
            } else {
                text(200, hot_keys::render_text(&reports))
            }
        }),
        DRAIN_PATH => Ok(text(
            200,
            format!("OK draining pid={}\n", std::process::id()),
        )),
        _ => Ok(text(404, format!("not found: {path}\n"))),
    };
    result.unwrap_or_else(|e| e)
}

/// Envoy `/ready`: the server state name, `200` only while live.
fn ready(ctx: &AdminContext) -> Reply {
    if ctx.health_fail.load(Ordering::Relaxed) {
        text(503, "DRAINING\n")
    } else {
        text(200, "LIVE\n")
    }
}

#[cfg(test)]
mod tests;

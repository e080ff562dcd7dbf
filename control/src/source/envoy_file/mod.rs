//! An Envoy bootstrap file (YAML or JSON, proto3 JSON mapping) → its `static_resources` as
//! Envoy protos, so an existing Envoy redis_proxy sidecar config runs unchanged.
//!
//! envoy-types has no serde, so the mapping is written out per message (`reader` is the proto3
//! JSON mapping, `core`/`listener`/`cluster`/`redis` the messages, `any` the `@type` dispatch).
//! Like Envoy's own bootstrap loading, an unknown field is an error. Only the fields a Redis
//! proxy listener or cluster can carry are mapped; a key left over is judged against Envoy's
//! proto (`reader::Obj::finish_message`, field names from envoy-types' descriptors): a real
//! Envoy field Respite does not implement is "not supported by respite (refused)" (or, for a
//! few no-effect ones, logged as "ignored: why"), anything else is an "unknown field" (a typo).
//! Like Envoy's YAML loader, a single value where a list belongs is a one-element list, and
//! enum names match case-insensitively.

mod any;
mod cluster;
mod core;
mod dynamic;
mod listener;
mod reader;
mod redis;
mod tls;
mod yaml;

use std::path::Path;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use serde_json::Value;

use reader::{MapErr, Obj};

/// Maps one `Any` in proto3 JSON (`{"@type": ..., fields}`, e.g. a `Struct`/`TypedStruct`
/// payload with its type URL added) to the encoded `Any`, with the file import's rules: how the
/// translator reads an extension config that arrived wrapped in a `Struct`.
///
/// Errors: the type is not one the import maps, or a field does not map (named by its path
/// under `path`).
pub fn any_from_json(
    v: &Value,
    path: &str,
) -> Result<envoy_types::pb::google::protobuf::Any, String> {
    any::any(v, path).map_err(|e| {
        if e.path.is_empty() {
            e.msg
        } else {
            format!("{}: {}", e.path, e.msg)
        }
    })
}

/// `static_resources` of an Envoy bootstrap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaticResources {
    /// `static_resources.listeners`, in file order.
    pub listeners: Vec<Listener>,
    /// `static_resources.clusters`, in file order.
    pub clusters: Vec<Cluster>,
    /// The files `dynamic_resources` names for listeners and clusters (Envoy's filesystem
    /// subscription): [`load`] has appended their resources to `listeners` and `clusters`;
    /// whoever runs the config re-reads it when they change.
    pub xds_files: XdsFiles,
    /// `node.locality.zone` (non-empty): the proxy's zone, for `LOCAL_ZONE_AFFINITY*` read
    /// policies. The rest of `node` is ignored.
    pub local_zone: Option<String>,
}

pub use dynamic::XdsFiles;

/// Top-level bootstrap keys that configure Envoy itself (its admin, stats, runtime, tracing…):
/// Respite has its own, so they are ignored with a warning.
const IGNORED: &[&str] = &[
    "node_context_params",
    "admin",
    "layered_runtime",
    "runtime",
    "stats_sinks",
    "stats_config",
    "stats_flush_interval",
    "stats_flush_on_admin",
    "stats_server_version_override",
    "overload_manager",
    "cluster_manager",
    "watchdog",
    "watchdogs",
    "tracing",
    "hds_config",
    "flags_path",
    "enable_dispatcher_stats",
    "header_prefix",
    "use_tcp_for_dns_lookups",
    "dns_resolution_config",
    "typed_dns_resolver_config",
    "bootstrap_extensions",
    "fatal_actions",
    "default_socket_interface",
    "inline_headers",
    "perf_tracing_file_path",
    "default_regex_engine",
    "xds_delegate_extension",
    "xds_config_tracker_extension",
    "listener_manager",
    "application_log_config",
    "grpc_async_client_manager_config",
    "memory_allocator_manager",
    "certificate_provider_instances",
    "default_config_source",
    "config_sources",
    "stats_flush_interval",
];

/// Reads an Envoy bootstrap file: YAML for `.yaml`/`.yml`, JSON otherwise (a JSON file is also
/// valid YAML, but JSON errors are clearer from the JSON parser).
///
/// Listeners and clusters of `dynamic_resources` files (`lds_config` / `cds_config` with a
/// `path`) are read too and follow the static ones.
///
/// Errors: unreadable file, bad YAML/JSON (with line), a gRPC `dynamic_resources` source (that
/// is `--bootstrap`'s job), or a field that cannot be mapped, named by its file, path and, for
/// YAML, its line: `static_resources.clusters[1].lb_polcy: unknown field (line 42)`.
pub fn load(path: &Path) -> Result<StaticResources, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let mut sr = parse(&text, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(f) = &sr.xds_files.lds {
        sr.listeners.extend(dynamic::listeners(f)?);
    }
    if let Some(f) = &sr.xds_files.cds {
        sr.clusters.extend(dynamic::clusters(f)?);
    }
    Ok(sr)
}

/// [`load`] on text already read: `yaml` selects the YAML parser, otherwise JSON.
pub fn parse(text: &str, yaml: bool) -> Result<StaticResources, String> {
    let (root, lines) = if yaml {
        yaml::parse(text)?
    } else {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        (v, yaml::Lines::new())
    };
    bootstrap(&root).map_err(|e| {
        let line = line_of(&lines, &e.path).map_or(String::new(), |l| format!(" (line {l})"));
        if e.path.is_empty() {
            format!("{}{line}", e.msg)
        } else {
            format!("{}: {}{line}", e.path, e.msg)
        }
    })
}

/// `node.locality.zone` if it is a non-empty string.
fn node_zone(node: Option<&Value>) -> Option<String> {
    node?
        .get("locality")?
        .get("zone")?
        .as_str()
        .filter(|z| !z.is_empty())
        .map(str::to_owned)
}

/// The line of `path`, or of its nearest ancestor that has one.
fn line_of(lines: &yaml::Lines, path: &str) -> Option<usize> {
    let mut p = path;
    loop {
        if let Some(l) = lines.get(p) {
            return Some(*l);
        }
        let cut = p.rfind(['.', '['])?;
        p = &p[..cut];
    }
}

fn bootstrap(root: &Value) -> Result<StaticResources, MapErr> {
    let map = match root {
        Value::Object(m) => m,
        Value::Null => return Err(MapErr::new("", "empty bootstrap (no static_resources)")),
        other => {
            return Err(MapErr::new(
                "",
                format!("a bootstrap is an object, got {}", reader::kind(other)),
            ));
        }
    };
    let mut o = Obj::new(root, "")?;
    let xds_files = o
        .msg("dynamic_resources", dynamic::dynamic_resources)?
        .unwrap_or_default();
    let mut local_zone = None;
    for key in map.keys() {
        let snake = reader::snake(key);
        if snake == "node" {
            local_zone = node_zone(map.get(key));
            tracing::warn!(
                key = %key,
                "Envoy bootstrap: ignored but for locality.zone (Respite has its own)"
            );
            o.skip(key);
            continue;
        }
        if IGNORED.contains(&snake.as_str()) {
            tracing::warn!(key = %key, "Envoy bootstrap: ignored (Respite has its own)");
            o.skip(key);
        }
    }
    let sr = o.msg("static_resources", |v, p| {
        let mut s = Obj::new(v, p)?;
        let r = StaticResources {
            listeners: s.list("listeners", listener::listener)?,
            clusters: s.list("clusters", cluster::cluster)?,
            xds_files: XdsFiles::default(),
            local_zone: None,
        };
        s.finish_message("envoy.config.bootstrap.v3.Bootstrap.StaticResources")?;
        Ok(r)
    })?;
    o.finish_message("envoy.config.bootstrap.v3.Bootstrap")?;
    match sr {
        Some(sr) => Ok(StaticResources {
            xds_files,
            local_zone,
            ..sr
        }),
        None if xds_files != XdsFiles::default() => Ok(StaticResources {
            xds_files,
            local_zone,
            ..StaticResources::default()
        }),
        None => Err(MapErr::new("", "no static_resources")),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_corpus;
#[cfg(test)]
mod tests_shapes;
#[cfg(test)]
mod tests_zone;

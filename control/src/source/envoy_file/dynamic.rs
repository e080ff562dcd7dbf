//! `dynamic_resources` whose listeners and clusters come from files: Envoy's filesystem
//! subscription (`lds_config` / `cds_config` with `path` or `path_config_source`), where each
//! file holds a `DiscoveryResponse` (`version_info`, `resources: [Any]`) in YAML or JSON. Envoy's
//! own Redis example runs this way (a bootstrap with `cds_config: {path: ...}`).
//!
//! Envoy re-reads such a file when it is moved into place; `respite-control` re-reads it on
//! SIGHUP and when its modification time changes (checked every second, `main.rs`), which
//! covers both a move and an in-place write. gRPC config sources (`ads_config`,
//! `api_config_source`) are `--bootstrap`'s job and are refused here, saying so.

use std::path::{Path, PathBuf};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use serde_json::Value;

use super::reader::{MapErr, Obj, Res};
use super::{cluster, line_of, listener, yaml};

/// The files named by a bootstrap's `dynamic_resources`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct XdsFiles {
    /// `lds_config`'s file: a `DiscoveryResponse` of `envoy.config.listener.v3.Listener`s.
    pub lds: Option<PathBuf>,
    /// `cds_config`'s file: a `DiscoveryResponse` of `envoy.config.cluster.v3.Cluster`s.
    pub cds: Option<PathBuf>,
}

const BOOTSTRAP_FOR_GRPC: &str = "xDS over gRPC: use respite-control --bootstrap (this \
                                  import reads dynamic_resources only from files)";

/// `Bootstrap.dynamic_resources` (the object at `p`).
///
/// Errors: a gRPC source (`ads_config`, `api_config_source`, `ads`), the v2 API, a config
/// source without a path, or a field of `DynamicResources` / `ConfigSource` Respite does not
/// implement, each named by its path.
pub fn dynamic_resources(v: &Value, p: &str) -> Res<XdsFiles> {
    let mut o = Obj::new(v, p)?;
    if let Some((_, path)) = o.get("ads_config")? {
        return Err(MapErr::new(&path, BOOTSTRAP_FOR_GRPC));
    }
    let files = XdsFiles {
        lds: o.msg("lds_config", config_source)?,
        cds: o.msg("cds_config", config_source)?,
    };
    o.finish_message("envoy.config.bootstrap.v3.Bootstrap.DynamicResources")?;
    Ok(files)
}

/// A `ConfigSource` that names a file: `path` (deprecated in Envoy, still accepted) or
/// `path_config_source.path`.
fn config_source(v: &Value, p: &str) -> Res<PathBuf> {
    let mut o = Obj::new(v, p)?;
    for grpc in ["api_config_source", "ads", "self"] {
        if let Some((_, path)) = o.get(grpc)? {
            return Err(MapErr::new(&path, BOOTSTRAP_FOR_GRPC));
        }
    }
    let version = o.opt_string("resource_api_version")?;
    if let Some(ver) = version.filter(|v| !v.eq_ignore_ascii_case("v3")) {
        return Err(MapErr::new(
            &format!("{p}.resource_api_version"),
            format!("{ver}: only the v3 API is supported (the v2 API was removed from Envoy)"),
        ));
    }
    // Envoy waits this long for the first answer of a remote source; a file answers at once.
    o.skip("initial_fetch_timeout");
    o.skip("initialFetchTimeout");
    let old = o.opt_string("path")?;
    let new = o.msg("path_config_source", |v, p| {
        let mut s = Obj::new(v, p)?;
        let path = s.string("path")?;
        // The directory Envoy watches for moves into it; the file's own modification time
        // tells respite-control the same.
        s.skip("watched_directory");
        s.skip("watchedDirectory");
        s.finish_message("envoy.config.core.v3.PathConfigSource")?;
        Ok(path)
    })?;
    o.finish_message("envoy.config.core.v3.ConfigSource")?;
    match (old, new) {
        (Some(_), Some(_)) => Err(MapErr::new(
            p,
            "both path and path_config_source are set (one field)",
        )),
        (Some(f), None) | (None, Some(f)) if !f.is_empty() => Ok(PathBuf::from(f)),
        _ => Err(MapErr::new(
            p,
            "a config source without a file (path or path_config_source.path)",
        )),
    }
}

/// Reads `file`, a `DiscoveryResponse` of listeners.
///
/// Errors: unreadable file, bad YAML/JSON, a resource of another type, or a field that does
/// not map, as `file: path: reason (line N)`.
pub fn listeners(file: &Path) -> Result<Vec<Listener>, String> {
    resources(
        file,
        "envoy.config.listener.v3.Listener",
        listener::listener,
    )
}

/// Reads `file`, a `DiscoveryResponse` of clusters; errors as [`listeners`].
pub fn clusters(file: &Path) -> Result<Vec<Cluster>, String> {
    resources(file, "envoy.config.cluster.v3.Cluster", cluster::cluster)
}

fn resources<T>(
    file: &Path,
    type_name: &str,
    read: impl Fn(&Value, &str) -> Res<T>,
) -> Result<Vec<T>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let json = file.extension().and_then(|e| e.to_str()) == Some("json");
    let (root, lines) = if json {
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        (v, yaml::Lines::new())
    } else {
        yaml::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?
    };
    discovery_response(&root, type_name, &read).map_err(|e| {
        let line = line_of(&lines, &e.path).map_or(String::new(), |l| format!(" (line {l})"));
        if e.path.is_empty() {
            format!("{}: {}{line}", file.display(), e.msg)
        } else {
            format!("{}: {}: {}{line}", file.display(), e.path, e.msg)
        }
    })
}

/// `DiscoveryResponse`: its `resources`, each an `Any` of `type_name`.
fn discovery_response<T>(
    root: &Value,
    type_name: &str,
    read: &impl Fn(&Value, &str) -> Res<T>,
) -> Res<Vec<T>> {
    if root.is_null() {
        return Ok(Vec::new());
    }
    let mut o = Obj::new(root, "")?;
    // Bookkeeping of a gRPC exchange; a file has nothing to acknowledge.
    for k in [
        "version_info",
        "versionInfo",
        "nonce",
        "type_url",
        "typeUrl",
    ] {
        o.skip(k);
    }
    let out = o.list("resources", |v, p| {
        let Value::Object(map) = v else {
            return Err(MapErr::new(p, "a resource is an object with an \"@type\""));
        };
        let url = map.get("@type").and_then(Value::as_str).unwrap_or_default();
        if url.rsplit('/').next() != Some(type_name) {
            return Err(MapErr::new(
                p,
                format!("\"@type\" {url:?}: this file holds {type_name} resources"),
            ));
        }
        let mut fields = map.clone();
        fields.remove("@type");
        read(&Value::Object(fields), p)
    })?;
    o.finish_message("envoy.service.discovery.v3.DiscoveryResponse")?;
    Ok(out)
}

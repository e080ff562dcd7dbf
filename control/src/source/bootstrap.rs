//! gRPC's xDS bootstrap (gRFC A27; `GRPC_XDS_BOOTSTRAP` / `GRPC_XDS_BOOTSTRAP_CONFIG`), with a
//! few Respite extensions that gRPC ignores (unknown fields are ignored by the format).

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use serde_json::Value as Json;

/// A parsed bootstrap.
#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap {
    /// The first `xds_servers` entry (fallback to later ones is not implemented).
    pub server: XdsServer,
    /// `node` (id, cluster, locality, metadata); user_agent_* and client_features are filled by
    /// the client, never from the file.
    pub node: Node,
    /// Respite extension `respite.listener_names`: non-empty = named LDS (the gRPC way), and CDS
    /// names come from those listeners; empty = wildcard LDS and CDS (the Envoy way).
    pub listener_names: Vec<String>,
    /// Respite extension `respite.resource_timeout` (duration string); default 15s (gRFC A57).
    pub resource_timeout: Duration,
    /// Respite extension `respite.max_message_bytes`; default 64 MiB (gRPC's 4 MiB is too small
    /// for a whole SotW CDS).
    pub max_message_bytes: usize,
    /// Respite extension `respite.warming_timeout`: how long a listener naming unknown clusters
    /// waits for them; default 15s.
    pub warming_timeout: Duration,
}

/// One `xds_servers` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsServer {
    /// `server_uri`: `host:port`, `dns:///host:port` or `http(s)://host:port`.
    pub server_uri: String,
    /// The first supported `channel_creds` entry.
    pub channel_creds: ChannelCreds,
    /// `server_features` (unknown strings kept, ignored).
    pub server_features: Vec<String>,
    /// Respite extension `api_type`: `"GRPC"` (SotW, default) or `"DELTA_GRPC"` (Envoy's
    /// `ApiConfigSource.api_type` names).
    pub delta: bool,
}

/// `channel_creds`.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelCreds {
    Insecure,
    /// `tls` (gRFC A65): CA file (system roots when absent), optional client cert + key (mTLS).
    Tls {
        ca_certificate_file: Option<PathBuf>,
        certificate_file: Option<PathBuf>,
        private_key_file: Option<PathBuf>,
    },
}

/// Default does-not-exist timeout (gRFC A57; C-core `GRPC_ARG_XDS_RESOURCE_DOES_NOT_EXIST_TIMEOUT_MS`).
pub const DEFAULT_RESOURCE_TIMEOUT: Duration = Duration::from_secs(15);
/// Default receive limit: a SotW CDS/LDS response carries the whole world (grpc-go #5790).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Default time a listener waits for the clusters it names.
pub const DEFAULT_WARMING_TIMEOUT: Duration = Duration::from_secs(15);

/// Parses bootstrap JSON.
///
/// Errors: bad JSON, no `xds_servers`, no supported `channel_creds`, bad durations. Unknown
/// fields are ignored (gRFC A27: the format grows backward-compatibly). `node.user_agent_*` and
/// `node.client_features` are ignored: the client fills them (A27).
pub fn parse(json: &str) -> Result<Bootstrap, String> {
    let root: Json = serde_json::from_str(json).map_err(|e| format!("bootstrap: bad JSON: {e}"))?;
    let root = root
        .as_object()
        .ok_or("bootstrap: the top level must be a JSON object")?;
    let servers = root
        .get("xds_servers")
        .ok_or("bootstrap: `xds_servers` is missing")?
        .as_array()
        .ok_or("bootstrap: `xds_servers` must be an array")?;
    // Only the first entry is used: fallback (gRFC A71) is not implemented.
    let first = servers.first().ok_or("bootstrap: `xds_servers` is empty")?;
    let server = parse_server(first)?;
    let node = match root.get("node") {
        None | Some(Json::Null) => Node::default(),
        Some(n) => parse_node(n)?,
    };
    let mut b = Bootstrap {
        server,
        node,
        listener_names: Vec::new(),
        resource_timeout: DEFAULT_RESOURCE_TIMEOUT,
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        warming_timeout: DEFAULT_WARMING_TIMEOUT,
    };
    if let Some(ext) = root.get("respite") {
        let ext = ext
            .as_object()
            .ok_or("bootstrap: `respite` must be an object")?;
        // Respite's own object: a typo here would silently keep a default, so unknown keys are
        // errors (gRPC ignores unknown keys only so that *its* format can grow).
        const KNOWN: [&str; 4] = [
            "listener_names",
            "resource_timeout",
            "warming_timeout",
            "max_message_bytes",
        ];
        if let Some(unknown) = ext.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!(
                "bootstrap: `respite.{unknown}`: unknown key (known: {})",
                KNOWN.join(", ")
            ));
        }
        if let Some(v) = ext.get("listener_names") {
            b.listener_names = strings(v, "respite.listener_names")?;
            if b.listener_names.iter().any(String::is_empty) {
                return Err("bootstrap: `respite.listener_names` has an empty name".into());
            }
        }
        if let Some(v) = ext.get("resource_timeout") {
            b.resource_timeout = duration(v, "respite.resource_timeout")?;
        }
        if let Some(v) = ext.get("warming_timeout") {
            b.warming_timeout = duration(v, "respite.warming_timeout")?;
        }
        if let Some(v) = ext.get("max_message_bytes") {
            b.max_message_bytes = v
                .as_u64()
                .filter(|n| *n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or("bootstrap: `respite.max_message_bytes` must be a positive integer")?;
        }
    }
    Ok(b)
}

/// Reads the bootstrap the way gRPC does: `GRPC_XDS_BOOTSTRAP` (a file path, gRFC A27), then
/// `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON itself; C-core, grpc-go). `Ok(None)` when neither is set
/// (an empty value counts as unset).
pub fn from_env() -> Result<Option<Bootstrap>, String> {
    from_lookup(|k| std::env::var(k).ok())
}

/// [`from_env`] with the environment given as a lookup function (testable without touching the
/// process environment).
pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Bootstrap>, String> {
    let set = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(path) = set("GRPC_XDS_BOOTSTRAP") {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("GRPC_XDS_BOOTSTRAP: cannot read {path}: {e}"))?;
        return parse(&text)
            .map(Some)
            .map_err(|e| format!("GRPC_XDS_BOOTSTRAP {path}: {e}"));
    }
    if let Some(json) = set("GRPC_XDS_BOOTSTRAP_CONFIG") {
        return parse(&json)
            .map(Some)
            .map_err(|e| format!("GRPC_XDS_BOOTSTRAP_CONFIG: {e}"));
    }
    Ok(None)
}

fn parse_server(v: &Json) -> Result<XdsServer, String> {
    let o = v
        .as_object()
        .ok_or("bootstrap: `xds_servers[0]` must be an object")?;
    let server_uri = o
        .get("server_uri")
        .and_then(Json::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or("bootstrap: `xds_servers[0].server_uri` must be a non-empty string")?
        .trim()
        .to_string();
    let creds = o
        .get("channel_creds")
        .ok_or("bootstrap: `xds_servers[0].channel_creds` is missing")?
        .as_array()
        .ok_or("bootstrap: `xds_servers[0].channel_creds` must be an array")?;
    // gRFC A27: every entry is validated, the first supported type is used.
    let mut chosen = None;
    for (i, c) in creds.iter().enumerate() {
        let field = format!("xds_servers[0].channel_creds[{i}]");
        let ty = c
            .get("type")
            .and_then(Json::as_str)
            .ok_or(format!("bootstrap: `{field}.type` must be a string"))?;
        let parsed = match ty {
            "insecure" => Some(ChannelCreds::Insecure),
            "tls" => Some(parse_tls(c.get("config"), &field)?),
            _ => None,
        };
        if chosen.is_none() {
            chosen = parsed;
        }
    }
    let channel_creds = chosen.ok_or(
        "bootstrap: `xds_servers[0].channel_creds` has no supported type (supported: insecure, tls)",
    )?;
    let server_features = match o.get("server_features") {
        None => Vec::new(),
        Some(v) => strings(v, "xds_servers[0].server_features")?,
    };
    let delta = match o.get("api_type").map(|v| v.as_str()) {
        None | Some(Some("GRPC")) => false,
        Some(Some("DELTA_GRPC")) => true,
        Some(_) => {
            return Err(
                "bootstrap: `xds_servers[0].api_type` must be \"GRPC\" or \"DELTA_GRPC\"".into(),
            );
        }
    };
    Ok(XdsServer {
        server_uri,
        channel_creds,
        server_features,
        delta,
    })
}

fn parse_tls(config: Option<&Json>, field: &str) -> Result<ChannelCreds, String> {
    let path = |k: &str| -> Result<Option<PathBuf>, String> {
        match config.and_then(|c| c.get(k)) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) if !s.is_empty() => Ok(Some(PathBuf::from(s))),
            Some(_) => Err(format!(
                "bootstrap: `{field}.config.{k}` must be a non-empty string"
            )),
        }
    };
    if config.is_some_and(|c| !c.is_object()) {
        return Err(format!("bootstrap: `{field}.config` must be an object"));
    }
    let certificate_file = path("certificate_file")?;
    let private_key_file = path("private_key_file")?;
    if certificate_file.is_some() != private_key_file.is_some() {
        return Err(format!(
            "bootstrap: `{field}.config`: certificate_file and private_key_file go together (mTLS)"
        ));
    }
    Ok(ChannelCreds::Tls {
        ca_certificate_file: path("ca_certificate_file")?,
        certificate_file,
        private_key_file,
    })
}

fn parse_node(v: &Json) -> Result<Node, String> {
    let o = v.as_object().ok_or("bootstrap: `node` must be an object")?;
    let string = |k: &str| -> Result<String, String> {
        match o.get(k) {
            None | Some(Json::Null) => Ok(String::new()),
            Some(Json::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("bootstrap: `node.{k}` must be a string")),
        }
    };
    let mut node = Node {
        id: string("id")?,
        cluster: string("cluster")?,
        ..Node::default()
    };
    if let Some(l) = o.get("locality") {
        let l = l
            .as_object()
            .ok_or("bootstrap: `node.locality` must be an object")?;
        let part = |k: &str| -> Result<String, String> {
            match l.get(k) {
                None | Some(Json::Null) => Ok(String::new()),
                Some(Json::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("bootstrap: `node.locality.{k}` must be a string")),
            }
        };
        node.locality = Some(Locality {
            region: part("region")?,
            zone: part("zone")?,
            sub_zone: part("sub_zone")?,
        });
    }
    match o.get("metadata") {
        None | Some(Json::Null) => {}
        Some(Json::Object(m)) => {
            node.metadata = Some(Struct {
                fields: m.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
            })
        }
        Some(_) => return Err("bootstrap: `node.metadata` must be an object".into()),
    }
    Ok(node)
}

/// JSON → `google.protobuf.Value` (the proto3 JSON mapping of Struct).
fn to_value(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Json::Object(m) => Kind::StructValue(Struct {
            fields: m.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
        }),
    };
    Value { kind: Some(kind) }
}

fn strings(v: &Json, field: &str) -> Result<Vec<String>, String> {
    let a = v
        .as_array()
        .ok_or(format!("bootstrap: `{field}` must be an array of strings"))?;
    a.iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or(format!("bootstrap: `{field}` must be an array of strings"))
}

/// A duration: a humantime string ("15s", "500ms", "1m") or a number of seconds.
fn duration(v: &Json, field: &str) -> Result<Duration, String> {
    let d = match v {
        Json::String(s) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("bootstrap: `{field}`: bad duration {s:?}: {e}"))?,
        Json::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .and_then(|f| Duration::try_from_secs_f64(f).ok())
            .ok_or(format!("bootstrap: `{field}`: bad number of seconds"))?,
        _ => {
            return Err(format!(
                "bootstrap: `{field}` must be a duration string like \"15s\""
            ));
        }
    };
    if d.is_zero() {
        return Err(format!("bootstrap: `{field}` must be greater than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests;

//! gRPC's xDS bootstrap (gRFC A27; `GRPC_XDS_BOOTSTRAP` / `GRPC_XDS_BOOTSTRAP_CONFIG`), with a
//! few Respite extensions that gRPC ignores (unknown fields are ignored by the format).

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;

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

/// Parses bootstrap JSON.
///
/// Errors: bad JSON, no `xds_servers`, no supported `channel_creds`, bad durations.
pub fn parse(_json: &str) -> Result<Bootstrap, String> {
    Err("bootstrap parsing is not implemented yet".into())
}

//! Per-type and per-resource state of the xDS client, for the `/xds` admin page (in the spirit
//! of CSDS, `envoy.service.status.v3.ClientResourceStatus`; gRFC A40). Written by the client and
//! the applier, read by the admin server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The state of one resource (CSDS `ClientResourceStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceState {
    /// Subscribed, not received yet.
    Requested,
    /// The does-not-exist timer fired, or the server deleted it.
    DoesNotExist,
    /// The last version received was accepted.
    Acked,
    /// The last version received was rejected; `version` is still the last good one.
    Nacked,
}

/// One resource's row on `/xds`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResourceStatus {
    pub type_url: String,
    pub name: String,
    pub state: ResourceState,
    /// Version of the last accepted update of this resource (SotW: the response's version_info;
    /// Delta: the resource's version). None until one is accepted.
    pub version: Option<String>,
    /// For [`ResourceState::Nacked`]: the rejected version, and why.
    pub rejected_version: Option<String>,
    pub error: Option<String>,
    /// What the applier is doing with it, e.g. "warming: waiting for clusters [\"b\"]".
    pub detail: Option<String>,
    /// RFC 3339 UTC time of the last change of this row.
    pub updated: String,
}

/// One resource type's row on `/xds`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TypeStatus {
    pub type_url: String,
    /// "wildcard", or the subscribed names.
    pub subscription: Vec<String>,
    pub wildcard: bool,
    /// Last accepted version_info (SotW) / system_version_info (Delta); empty until one.
    pub version: String,
    /// Nonce of the last response of this type on the current stream.
    pub nonce: String,
    pub acks: u64,
    pub nacks: u64,
    /// The last NACK: rejected version, its nonce, the error_detail message, RFC 3339 time.
    pub last_nack: Option<NackStatus>,
}

/// The last NACK of a type.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NackStatus {
    pub version: String,
    pub nonce: String,
    pub error: String,
    pub time: String,
}

/// The stream's row on `/xds`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamStatus {
    pub server_uri: String,
    /// "sotw" or "delta".
    pub api: String,
    pub connected: bool,
    /// Streams opened since start (1 after the first connect).
    pub streams_opened: u64,
    /// The last stream or connect error, if any.
    pub last_error: Option<String>,
}

/// Everything `/xds` shows.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct XdsStatus {
    pub stream: StreamStatus,
    /// By type URL.
    pub types: BTreeMap<String, TypeStatus>,
    /// By (type URL, name); serialized as a list.
    #[serde(serialize_with = "as_list")]
    pub resources: BTreeMap<(String, String), ResourceStatus>,
}

fn as_list<S: serde::Serializer>(
    map: &BTreeMap<(String, String), ResourceStatus>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(map.values())
}

/// Shared handle to the status.
#[derive(Debug, Clone, Default)]
pub struct Status(Arc<Mutex<XdsStatus>>);

impl Status {
    /// Runs `f` on the status under its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut XdsStatus) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy, for rendering.
    pub fn snapshot(&self) -> XdsStatus {
        self.with(|s| s.clone())
    }
}

/// Now as RFC 3339 UTC (seconds), for the `updated` / `time` fields.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

//! The xDS client: one aggregated (ADS) gRPC stream to the management server, state-of-the-world
//! or incremental (Delta), carrying Listener, Cluster and ClusterLoadAssignment resources.
//!
//! Transport rules (Envoy `api/xds_protocol.rst`, `discovery.proto`; gRPC gRFCs A27, A53, A57)
//! live here: versions, nonces, ACK/NACK, subscriptions and wildcard, the does-not-exist timer,
//! reconnect backoff. What resources *mean* is the [`Applier`]'s business: the client hands it
//! each response's requested resources and turns its [`Verdict`] into the ACK or NACK.

pub mod backoff;
pub mod channel;
pub mod state;
pub mod status;
pub mod stream;
pub mod wire;

pub use stream::run;

use std::collections::BTreeSet;

use envoy_types::pb::google::protobuf::Any;

/// LDS type URL (xDS v3).
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// CDS type URL (xDS v3).
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// EDS type URL (xDS v3).
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// What the applier wants of one resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interest {
    /// Every resource the server has for this node (LDS/CDS as Envoy subscribes; xDS "wildcard").
    Wildcard,
    /// Exactly these names; empty = none (the type is not requested at all on a new stream).
    Names(BTreeSet<String>),
}

/// One response's resources of one type, as handed to the [`Applier`]. Resources the client did
/// not request (and is not a wildcard subscriber of) were already dropped, not validated.
#[derive(Debug, Clone)]
pub struct Update {
    /// One of [`LISTENER_TYPE`], [`CLUSTER_TYPE`], [`ENDPOINT_TYPE`].
    pub type_url: String,
    /// The response's `version_info` (SotW) or `system_version_info` (Delta; debugging only).
    pub version: String,
    /// Added or changed resources: name → the resource (its `Any.type_url` may still be wrong:
    /// the applier rejects a mismatch).
    pub resources: Vec<(String, Any)>,
    /// Names deleted: absent from a complete SotW LDS/CDS response while held, or in a Delta
    /// `removed_resources`.
    pub removed: Vec<String>,
}

/// The applier's answer for one [`Update`]: empty means ACK.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Rejected resources: (name, reason). Each keeps its last good version; the others apply.
    pub rejected: Vec<(String, String)>,
    /// A failure not tied to one resource (e.g. the data plane refused the whole config).
    pub error: Option<String>,
}

impl Verdict {
    /// True when the response is ACKed.
    pub fn is_ack(&self) -> bool {
        self.rejected.is_empty() && self.error.is_none()
    }
}

/// What the client drives: resource meaning, caching, warming, pushing to the data plane.
pub trait Applier: Send + 'static {
    /// Applies one response's requested resources of one type. Called once per response, before
    /// its ACK or NACK is sent.
    fn apply(&mut self, update: Update) -> Verdict;
    /// A subscribed resource did not arrive within the does-not-exist timeout (xds_protocol.rst
    /// "Knowing When a Requested Resource Does Not Exist"; gRFC A57).
    fn does_not_exist(&mut self, type_url: &str, name: &str);
    /// What the applier wants now, per type ([`LISTENER_TYPE`], [`CLUSTER_TYPE`],
    /// [`ENDPOINT_TYPE`]). Read at start and after every `apply` / `does_not_exist`; the client
    /// sends a request for each type whose interest changed.
    fn interest(&self) -> Vec<(&'static str, Interest)>;
}

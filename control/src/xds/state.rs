//! The sans-IO ADS client state: per-type subscriptions, last accepted version, nonces,
//! received-resource versions, does-not-exist timers, and which request to send next. Time comes
//! in as `now`; requests go out as return values; the transport loop (`stream.rs`) does the IO.
//!
//! Comments cite the rule each step follows: `xds_protocol.rst` is Envoy's xDS protocol document
//! (`api/xds_protocol.rst` in envoyproxy/envoy, section titles in quotes), `discovery.proto` the
//! message definitions beside it, and A27, A46, A57 are gRPC's xDS design documents (gRFCs).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::{Node, node::UserAgentVersionType};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;

use super::status::{NackStatus, ResourceState, ResourceStatus, Status, now_rfc3339};
use super::wire::{self, NOT_FOUND};
use super::{Applier, CLUSTER_TYPE, ENDPOINT_TYPE, Interest, LISTENER_TYPE, Update, Verdict};

/// The types the client knows, in the order their first requests go out on a stream.
pub const TYPES: [&str; 3] = [LISTENER_TYPE, CLUSTER_TYPE, ENDPOINT_TYPE];
/// `node.user_agent_name` (gRFC A27: the client fills it, never the bootstrap).
pub const USER_AGENT_NAME: &str = "respite-control";
/// At most one NACK log line per type per this interval: a server that resends a rejected
/// response is NACKed each time, and the log must not flood.
pub const NACK_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// State of the world or incremental.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sotw,
    Delta,
}

/// A request to write on the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    Sotw(DiscoveryRequest),
    Delta(DeltaDiscoveryRequest),
}

impl Outbound {
    /// The request's type URL.
    pub fn type_url(&self) -> &str {
        match self {
            Outbound::Sotw(r) => &r.type_url,
            Outbound::Delta(r) => &r.type_url,
        }
    }
}

/// A response read from the stream.
#[derive(Debug, Clone)]
pub enum Inbound {
    Sotw(DiscoveryResponse),
    Delta(DeltaDiscoveryResponse),
}

/// A does-not-exist timer (gRFC A57 "Handling Resources That Do Not Exist").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Subscribed; starts when a request of the type is handed to a connected stream.
    Pending,
    Running(Instant),
}

#[derive(Debug)]
struct TypeState {
    type_url: &'static str,
    /// What the applier wants now.
    want: Interest,
    /// What the server was told on this stream; None = nothing sent for this type yet.
    sent: Option<Interest>,
    /// An explicit name was sent on this stream: from then on an empty list means
    /// "unsubscribe from all", not wildcard (xds_protocol.rst "How the client specifies what
    /// resources to return").
    named_sent: bool,
    /// Last accepted version_info (SotW; a property of the resources, so it carries over streams:
    /// xds_protocol.rst "ACK/NACK and resource type instance version") / system_version_info.
    version: String,
    /// Received and accepted resources: name → version (the latest one, which Delta's
    /// `initial_resource_versions` must carry: discovery.proto).
    cache: BTreeMap<String, String>,
    timers: BTreeMap<String, Timer>,
    last_nack_log: Option<Instant>,
    nacks_unlogged: u64,
}

impl TypeState {
    fn new(type_url: &'static str) -> Self {
        Self {
            type_url,
            want: Interest::Names(BTreeSet::new()),
            sent: None,
            named_sent: false,
            version: String::new(),
            cache: BTreeMap::new(),
            timers: BTreeMap::new(),
            last_nack_log: None,
            nacks_unlogged: 0,
        }
    }

    fn wants(&self, name: &str) -> bool {
        match &self.want {
            Interest::Wildcard => true,
            Interest::Names(n) => n.contains(name),
        }
    }

    /// A request is owed: the server's view differs, except that a type with no names and
    /// nothing sent on this stream is never requested (its empty first request would read as a
    /// wildcard subscription).
    fn dirty(&self) -> bool {
        match (&self.sent, &self.want) {
            (None, Interest::Names(n)) => !n.is_empty(),
            (None, Interest::Wildcard) => true,
            (Some(s), w) => s != w,
        }
    }
}

/// The whole client state.
pub struct State {
    mode: Mode,
    node: Node,
    timeout: Duration,
    status: Status,
    types: Vec<TypeState>,
    /// Nonce of the last response of *every* type on this stream, watched or not: a later
    /// request of that type must carry it (xds_protocol.rst "Basic Protocol Overview").
    nonces: BTreeMap<String, String>,
    node_sent: bool,
    on_stream: bool,
}

impl State {
    /// `node` from the bootstrap: user_agent_* are set here, client_features cleared (we
    /// implement none: never advertise `xds.config.supports-resource-in-sotw` or resource TTLs,
    /// xds_protocol.rst "TTL").
    pub fn new(mode: Mode, mut node: Node, resource_timeout: Duration, status: Status) -> Self {
        node.user_agent_name = USER_AGENT_NAME.into();
        node.user_agent_version_type = Some(UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").into(),
        ));
        node.client_features.clear();
        let types = TYPES.iter().map(|t| TypeState::new(t)).collect();
        status.with(|s| {
            for t in TYPES {
                s.types.entry(t.to_string()).or_default().type_url = t.to_string();
            }
        });
        Self {
            mode,
            node,
            timeout: resource_timeout,
            status,
            types,
            nonces: BTreeMap::new(),
            node_sent: false,
            on_stream: false,
        }
    }

    fn idx(&self, type_url: &str) -> Option<usize> {
        self.types.iter().position(|t| t.type_url == type_url)
    }

    /// Takes the applier's interest. New names: any cached copy is dropped and a timer armed
    /// (a re-subscribed name is sent again by the server, so nothing is assumed cached); gone
    /// names: cache, timer and status row dropped (xds_protocol.rst "Unsubscribing From
    /// Resources").
    pub fn set_interest(&mut self, interest: Vec<(&'static str, Interest)>) {
        for (type_url, want) in interest {
            let Some(i) = self.idx(type_url) else {
                continue;
            };
            let ts = &mut self.types[i];
            if ts.want == want {
                continue;
            }
            let old = std::mem::replace(&mut ts.want, want.clone());
            let (added, gone): (Vec<String>, Vec<String>) = match (&old, &want) {
                (Interest::Names(o), Interest::Names(n)) => (
                    n.difference(o).cloned().collect(),
                    o.difference(n).cloned().collect(),
                ),
                (Interest::Wildcard, Interest::Names(n)) => {
                    let gone = ts
                        .cache
                        .keys()
                        .filter(|k| !n.contains(*k))
                        .cloned()
                        .collect();
                    (n.iter().cloned().collect(), gone)
                }
                (Interest::Names(_), Interest::Wildcard)
                | (Interest::Wildcard, Interest::Wildcard) => {
                    // No timers under wildcard: the server decides the set.
                    ts.timers.clear();
                    (vec![], vec![])
                }
            };
            let mut rows = Vec::new();
            for n in &gone {
                ts.cache.remove(n);
                ts.timers.remove(n);
            }
            for n in &added {
                // Re-subscribing must fetch it again (xds_protocol.rst "Unsubscribing From
                // Resources").
                ts.cache.remove(n);
                ts.timers.insert(n.clone(), Timer::Pending);
                rows.push(n.clone());
            }
            let (sub, wildcard) = match &want {
                Interest::Wildcard => (vec![], true),
                Interest::Names(n) => (n.iter().cloned().collect(), false),
            };
            self.status.with(|s| {
                let t = s.types.entry(type_url.to_string()).or_default();
                t.subscription = sub;
                t.wildcard = wildcard;
                for n in &gone {
                    s.resources.remove(&(type_url.to_string(), n.clone()));
                }
                for n in rows {
                    s.resources.insert(
                        (type_url.to_string(), n.clone()),
                        row(type_url, &n, ResourceState::Requested, None),
                    );
                }
            });
        }
    }

    /// A stream opened: nonces and the per-stream view reset (nonces do not survive a stream:
    /// discovery.proto `response_nonce`), every subscribed type re-requested with its last
    /// accepted version and an empty nonce, timers re-armed only for names not cached (A57).
    pub fn start_stream(&mut self) -> Vec<Outbound> {
        self.nonces.clear();
        self.node_sent = false;
        self.on_stream = true;
        for ts in &mut self.types {
            ts.sent = None;
            ts.named_sent = false;
            ts.timers.clear();
            if let Interest::Names(names) = &ts.want {
                for n in names.iter().filter(|n| !ts.cache.contains_key(*n)) {
                    ts.timers.insert(n.clone(), Timer::Pending);
                }
            }
        }
        self.status.with(|s| {
            for t in s.types.values_mut() {
                t.nonce.clear();
            }
        });
        self.requests()
    }

    /// The stream ended: running timers stop (A57: no does-not-exist while disconnected).
    pub fn end_stream(&mut self) {
        self.on_stream = false;
        for ts in &mut self.types {
            for t in ts.timers.values_mut() {
                *t = Timer::Pending;
            }
        }
    }

    /// A request of `type_url` was handed to the connected stream: its pending timers start
    /// (C-core waits for the write, grpc/grpc PR #31507).
    pub fn on_sent(&mut self, type_url: &str, now: Instant) {
        if !self.on_stream {
            return;
        }
        let timeout = self.timeout;
        if let Some(i) = self.idx(type_url) {
            for t in self.types[i].timers.values_mut() {
                if *t == Timer::Pending {
                    *t = Timer::Running(now + timeout);
                }
            }
        }
    }

    /// The earliest running does-not-exist deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.types
            .iter()
            .flat_map(|t| t.timers.values())
            .filter_map(|t| match t {
                Timer::Running(d) => Some(*d),
                Timer::Pending => None,
            })
            .min()
    }

    /// Fires expired timers: `Applier::does_not_exist` and DOES_NOT_EXIST (A57); then the
    /// requests the applier's new interest calls for.
    pub fn on_tick<A: Applier>(&mut self, now: Instant, applier: &mut A) -> Vec<Outbound> {
        let mut fired = Vec::new();
        for ts in &mut self.types {
            ts.timers.retain(|name, t| match t {
                Timer::Running(d) if *d <= now => {
                    fired.push((ts.type_url, name.clone()));
                    false
                }
                _ => true,
            });
        }
        if fired.is_empty() {
            return vec![];
        }
        for (t, n) in &fired {
            tracing::warn!(type_url = %t, name = %n, "xDS resource does not exist (no answer within {:?})", self.timeout);
            applier.does_not_exist(t, n);
            self.status.with(|s| {
                let r = s
                    .resources
                    .entry((t.to_string(), n.clone()))
                    .or_insert_with(|| row(t, n, ResourceState::DoesNotExist, None));
                r.state = ResourceState::DoesNotExist;
                r.updated = now_rfc3339();
            });
        }
        self.set_interest(applier.interest());
        self.requests()
    }

    /// Requests owed because of subscription changes (or a new stream).
    pub fn requests(&mut self) -> Vec<Outbound> {
        let mut out = Vec::new();
        for i in 0..self.types.len() {
            if self.types[i].dirty() {
                out.push(match self.mode {
                    Mode::Sotw => Outbound::Sotw(self.sotw_request(i, None)),
                    Mode::Delta => Outbound::Delta(self.delta_subscription(i)),
                });
            }
        }
        out
    }

    fn take_node(&mut self) -> Option<Node> {
        // `node` on the first request of every stream (xds_protocol.rst "Basic Protocol Overview").
        if self.node_sent {
            None
        } else {
            self.node_sent = true;
            Some(self.node.clone())
        }
    }

    /// A SotW request for type `i`: the full current name set, never a diff, the last accepted
    /// version, the stream's last nonce of the type, and `error_detail` for a NACK
    /// (xds_protocol.rst "ACK/NACK and resource type instance version").
    fn sotw_request(
        &mut self,
        i: usize,
        error: Option<envoy_types::pb::google::rpc::Status>,
    ) -> DiscoveryRequest {
        let node = self.take_node();
        let ts = &mut self.types[i];
        let resource_names = match &ts.want {
            // Legacy wildcard = empty list, valid only while no name was sent on this stream
            // (xds_protocol.rst "How the client specifies what resources to return"); after that
            // wildcard is the explicit "*".
            Interest::Wildcard if ts.named_sent => vec!["*".to_string()],
            Interest::Wildcard => vec![],
            // After a named request an empty list is the unsubscribe from all.
            Interest::Names(n) => n.iter().cloned().collect(),
        };
        if !resource_names.is_empty() {
            ts.named_sent = true;
        }
        ts.sent = Some(ts.want.clone());
        DiscoveryRequest {
            version_info: ts.version.clone(),
            node,
            resource_names,
            type_url: ts.type_url.to_string(),
            response_nonce: self.nonces.get(ts.type_url).cloned().unwrap_or_default(),
            error_detail: error,
            ..Default::default()
        }
    }

    /// A Delta subscription request for type `i`: the first of the stream subscribes to everything
    /// wanted with `initial_resource_versions`; later ones carry the diff. No nonce on requests
    /// the client makes on its own (discovery.proto `DeltaDiscoveryRequest`).
    fn delta_subscription(&mut self, i: usize) -> DeltaDiscoveryRequest {
        let node = self.take_node();
        let ts = &mut self.types[i];
        let mut req = DeltaDiscoveryRequest {
            node,
            type_url: ts.type_url.to_string(),
            ..Default::default()
        };
        match (&ts.sent, &ts.want) {
            (None, want) => {
                // A wildcard type stays wildcard: cached names go only in
                // initial_resource_versions (discovery.proto `initial_resource_versions`).
                if let Interest::Names(n) = want {
                    req.resource_names_subscribe = n.iter().cloned().collect();
                }
                req.initial_resource_versions = ts
                    .cache
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
            }
            (Some(Interest::Names(old)), Interest::Names(new)) => {
                req.resource_names_subscribe = new.difference(old).cloned().collect();
                req.resource_names_unsubscribe = old.difference(new).cloned().collect();
            }
            (Some(Interest::Wildcard), Interest::Names(new)) => {
                req.resource_names_subscribe = new.iter().cloned().collect();
                req.resource_names_unsubscribe = vec!["*".into()];
            }
            (Some(Interest::Names(old)), Interest::Wildcard) => {
                req.resource_names_subscribe = vec!["*".into()];
                req.resource_names_unsubscribe = old.iter().cloned().collect();
            }
            (Some(Interest::Wildcard), Interest::Wildcard) => {}
        }
        ts.sent = Some(ts.want.clone());
        req
    }

    /// One response: drop what was not requested, apply each valid resource (a rejected one keeps
    /// its last good version, gRFC A46), record state, answer exactly one ACK or NACK
    /// (xds_protocol.rst "ACK and NACK semantics summary"), then the requests the applier's new
    /// interest calls for.
    pub fn on_response<A: Applier>(
        &mut self,
        msg: Inbound,
        applier: &mut A,
        now: Instant,
    ) -> Vec<Outbound> {
        let (type_url, nonce) = match &msg {
            Inbound::Sotw(r) => (r.type_url.clone(), r.nonce.clone()),
            Inbound::Delta(r) => (r.type_url.clone(), r.nonce.clone()),
        };
        // Every response's nonce is kept, watched type or not.
        self.nonces.insert(type_url.clone(), nonce.clone());
        self.status.with(|s| {
            if let Some(t) = s.types.get_mut(&type_url) {
                t.nonce = nonce.clone();
            }
        });
        let Some(i) = self.idx(&type_url) else {
            // Answering an unknown type would subscribe to it (an empty first request is a
            // wildcard): record the nonce only.
            tracing::warn!(%type_url, "xDS response of an unsupported type ignored");
            return vec![];
        };
        if self.types[i].sent.is_none() {
            tracing::warn!(%type_url, "xDS response for a type not requested on this stream ignored");
            return vec![];
        }
        let read = match msg {
            Inbound::Sotw(r) => self.read_sotw(i, r),
            Inbound::Delta(r) => self.read_delta(i, r),
        };
        let Read {
            version,
            kept,
            versions,
            mut rejected,
            present,
            removed,
            ..
        } = read;
        {
            // An answer, even an invalid one, cancels the timer: invalid is not missing.
            let ts = &mut self.types[i];
            for n in present.iter().chain(&removed) {
                ts.timers.remove(n);
            }
        }
        let kept_names: Vec<String> = kept.iter().map(|(n, _)| n.clone()).collect();
        let update = Update {
            type_url: type_url.clone(),
            version: version.clone(),
            resources: kept,
            removed: removed.clone(),
        };
        let verdict: Verdict = applier.apply(update);
        rejected.extend(verdict.rejected.iter().cloned());
        let ack = rejected.is_empty() && verdict.error.is_none();
        let rejected_map: BTreeMap<&str, &str> = rejected
            .iter()
            .map(|(n, w)| (n.as_str(), w.as_str()))
            .collect();
        let whole = verdict.error.as_deref();
        let ts = &mut self.types[i];
        let mut rows: Vec<(String, ResourceState, Option<String>)> = Vec::new();
        for n in &kept_names {
            match (rejected_map.get(n.as_str()), whole) {
                (Some(why), _) => {
                    rows.push((n.clone(), ResourceState::Nacked, Some(why.to_string())))
                }
                (None, Some(e)) => {
                    rows.push((n.clone(), ResourceState::Nacked, Some(e.to_string())))
                }
                (None, None) => {
                    let v = versions.get(n).cloned().unwrap_or_else(|| version.clone());
                    ts.cache.insert(n.clone(), v);
                    rows.push((n.clone(), ResourceState::Acked, None));
                }
            }
        }
        for (n, why) in &rejected {
            if !kept_names.contains(n) {
                rows.push((n.clone(), ResourceState::Nacked, Some(why.clone())));
            }
        }
        if whole.is_none() {
            for n in &removed {
                ts.cache.remove(n);
                rows.push((n.clone(), ResourceState::DoesNotExist, None));
            }
        }
        if ack {
            ts.version = version.clone();
        }
        let error = (!ack).then(|| wire::error_detail(&type_url, &version, &rejected, whole));
        if let Some(e) = &error {
            // One NACK per response, never a reconnect; the log line is rate-limited.
            ts.nacks_unlogged += 1;
            if ts
                .last_nack_log
                .is_none_or(|t| now.duration_since(t) >= NACK_LOG_INTERVAL)
            {
                tracing::warn!(%type_url, nacks = ts.nacks_unlogged, "xDS NACK: {}", e.message);
                ts.last_nack_log = Some(now);
                ts.nacks_unlogged = 0;
            }
        }
        let (accepted_version, cache) = (ts.version.clone(), ts.cache.clone());
        self.status.with(|s| {
            let t = s.types.entry(type_url.clone()).or_default();
            t.version = accepted_version;
            if let Some(e) = &error {
                t.nacks += 1;
                t.last_nack = Some(NackStatus {
                    version: version.clone(),
                    nonce: nonce.clone(),
                    error: e.message.clone(),
                    time: now_rfc3339(),
                });
            } else {
                t.acks += 1;
            }
            for (n, state, why) in rows {
                let key = (type_url.clone(), n.clone());
                let r = s
                    .resources
                    .entry(key)
                    .or_insert_with(|| row(&type_url, &n, state, None));
                r.state = state;
                r.version = cache.get(&n).cloned();
                r.updated = now_rfc3339();
                if state == ResourceState::Nacked {
                    r.rejected_version =
                        Some(versions.get(&n).cloned().unwrap_or_else(|| version.clone()));
                    r.error = why;
                } else {
                    r.rejected_version = None;
                    r.error = None;
                }
            }
        });
        // The applier may want other names now (e.g. the EDS names of new clusters, or fewer:
        // a deleted cluster's EDS name, xds_protocol.rst "Deleting Resources").
        self.set_interest(applier.interest());
        let mut out = Vec::with_capacity(2);
        match self.mode {
            Mode::Sotw => out.push(Outbound::Sotw(self.sotw_request(i, error))),
            Mode::Delta => {
                let node = self.take_node();
                out.push(Outbound::Delta(DeltaDiscoveryRequest {
                    node,
                    type_url: type_url.clone(),
                    response_nonce: nonce,
                    error_detail: error,
                    ..Default::default()
                }));
            }
        }
        out.extend(self.requests());
        out
    }

    /// SotW: drops unrequested resources, rejects duplicates and type mismatches, and computes
    /// deletions (LDS/CDS responses are complete, EDS partial:
    /// xds_protocol.rst "Deleting Resources").
    fn read_sotw(&self, i: usize, r: DiscoveryResponse) -> Read {
        let ts = &self.types[i];
        let mut read = Read::new(r.version_info);
        for (k, any) in r.resources.into_iter().enumerate() {
            match wire::sotw_resource(any) {
                Err(e) => read.rejected.push((format!("resources[{k}]"), e)),
                // A wrapper with no body in SotW is a TTL heartbeat (xds_protocol.rst "TTL"): not
                // an update.
                Ok((name, None)) => {
                    if ts.wants(&name) {
                        read.present.insert(name);
                    }
                }
                Ok((name, Some(body))) => read.add(ts, &r.type_url, name, body, None),
            }
        }
        read.finish_duplicates();
        if ts.type_url == LISTENER_TYPE || ts.type_url == CLUSTER_TYPE {
            read.removed = ts
                .cache
                .keys()
                .filter(|n| ts.wants(n) && !read.present.contains(*n))
                .cloned()
                .collect();
        }
        read
    }

    /// Delta: `removed_resources`, `removed_resource_names`, a `Resource` without a body, and a
    /// NOT_FOUND `resource_errors` entry all mean removal (discovery.proto
    /// `DeltaDiscoveryResponse`).
    fn read_delta(&self, i: usize, r: DeltaDiscoveryResponse) -> Read {
        let ts = &self.types[i];
        let mut read = Read::new(r.system_version_info);
        let mut removed = BTreeSet::new();
        for res in r.resources {
            let name = if res.name.is_empty() {
                res.resource_name
                    .as_ref()
                    .map(|n| n.name.clone())
                    .unwrap_or_default()
            } else {
                res.name
            };
            match res.resource {
                None => {
                    removed.insert(name);
                }
                Some(body) => read.add(ts, &r.type_url, name, body, Some(res.version)),
            }
        }
        read.finish_duplicates();
        removed.extend(r.removed_resources);
        removed.extend(r.removed_resource_names.into_iter().map(|n| n.name));
        removed.extend(
            r.resource_errors
                .into_iter()
                .filter(|e| e.error_detail.as_ref().is_some_and(|d| d.code == NOT_FOUND))
                .filter_map(|e| e.resource_name.map(|n| n.name)),
        );
        read.removed = removed
            .into_iter()
            .filter(|n| ts.wants(n) && !read.present.contains(n))
            .collect();
        read
    }
}

/// What one response holds for the applier, after the client's own checks.
struct Read {
    version: String,
    kept: Vec<(String, Any)>,
    /// Delta: each resource's own version.
    versions: BTreeMap<String, String>,
    rejected: Vec<(String, String)>,
    /// Requested names present in the response, valid or not.
    present: BTreeSet<String>,
    duplicates: BTreeSet<String>,
    removed: Vec<String>,
}

impl Read {
    fn new(version: String) -> Self {
        Self {
            version,
            kept: vec![],
            versions: BTreeMap::new(),
            rejected: vec![],
            present: BTreeSet::new(),
            duplicates: BTreeSet::new(),
            removed: vec![],
        }
    }

    fn add(
        &mut self,
        ts: &TypeState,
        type_url: &str,
        name: String,
        body: Any,
        version: Option<String>,
    ) {
        // Not requested and not wildcard: dropped, not validated, not cached.
        if !ts.wants(&name) {
            tracing::debug!(%type_url, %name, "unrequested xDS resource dropped");
            return;
        }
        if !self.present.insert(name.clone()) {
            self.duplicates.insert(name);
            return;
        }
        if body.type_url != type_url {
            // Item 16 (discovery.proto DiscoveryResponse.type_url).
            self.rejected.push((
                name,
                format!(
                    "resource type {} is not the response's type {type_url}",
                    body.type_url
                ),
            ));
            return;
        }
        if let Some(v) = version {
            self.versions.insert(name.clone(), v);
        }
        self.kept.push((name, body));
    }

    /// Duplicate names in one response: the name is rejected, none of its copies applied
    /// (xds_protocol.rst "Duplicate Resource Names").
    fn finish_duplicates(&mut self) {
        if self.duplicates.is_empty() {
            return;
        }
        let d = std::mem::take(&mut self.duplicates);
        self.kept.retain(|(n, _)| !d.contains(n));
        self.rejected.retain(|(n, _)| !d.contains(n));
        for n in d {
            self.rejected.push((
                n,
                "duplicate resource name in one response (xds_protocol.rst)".into(),
            ));
        }
    }
}

fn row(
    type_url: &str,
    name: &str,
    state: ResourceState,
    version: Option<String>,
) -> ResourceStatus {
    ResourceStatus {
        type_url: type_url.to_string(),
        name: name.to_string(),
        state,
        version,
        rejected_version: None,
        error: None,
        detail: None,
        updated: now_rfc3339(),
    }
}

#[cfg(test)]
mod tests;

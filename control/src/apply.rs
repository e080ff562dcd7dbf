//! The applier: the xDS resource cache, listener warming, snapshot building, validation with the
//! data plane's own parser, and the push.
//!
//! The config pushed is a pure function of the cache: every listener's *active* version, every
//! cluster whose hosts are known, rendered in name order (so an unchanged cache renders the same
//! text and is not pushed again).
//!
//! - **Last good version** (xds_protocol.rst "ACK and NACK semantics"; gRFC A46): a resource that
//!   does not translate, or that makes the whole config invalid, is rejected by name and the
//!   cache keeps its previous version; the other resources of the same response apply.
//! - **Warming** (xds_protocol.rst "Resource warming"; Envoy warms listeners before they serve):
//!   a new or changed listener naming a cluster that is not known yet — or an EDS cluster whose
//!   ClusterLoadAssignment has not arrived — waits, while its previous version (if any) keeps
//!   serving. It is applied as soon as its clusters are ready, or after `warming_timeout` at the
//!   latest; a route whose cluster is still missing then answers `no upstream host`, as Envoy's
//!   redis_proxy does for a cluster it does not know.
//! - **A deleted cluster still named by a serving listener** becomes an empty `type = "eds"`
//!   cluster: its routes answer `no upstream host` (Envoy's behaviour) instead of the whole
//!   config becoming invalid. Management servers remove clusters after the listeners that use
//!   them (xds_protocol.rst "Eventual consistency considerations"), so this is a transient.
//! - **The data plane's answer**: a config it rejects (e.g. a listener address it cannot bind)
//!   undoes the whole response and becomes a NACK; an unreachable data plane is not the
//!   config's fault: the response is ACKed and the push is retried every second by
//!   [`Applier::tick`] until it lands.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use respite::config::raw::{RawCluster, RawHost};
use respite::config::{ClusterType, Config};

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

use crate::push::{self, PushError};
use crate::translate::{self, ClusterDraft, HostSource, ListenerDraft};
use crate::xds::status::Status;
use crate::xds::{CLUSTER_TYPE, ENDPOINT_TYPE, Interest, LISTENER_TYPE, Update, Verdict};

/// Origin named in config errors of translated snapshots.
const ORIGIN: &str = "xds";

/// Why a resource, a snapshot or a push was not applied. `Display` is the text of the NACK's
/// `error_detail` or of the log line.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyError {
    /// A resource that cannot be used on its own: its `type_url` differs from the response's,
    /// it does not decode, its name differs from the name it was sent under, or it does not
    /// translate (the translation's message).
    Resource(String),
    /// The whole config does not parse with the data plane's own parser
    /// (`origin:line:col: key: reason`).
    Invalid(respite::config::ConfigError),
    /// The data plane answered and refused the config: its reason (e.g. a bind failure).
    Rejected(String),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::Resource(reason) => f.write_str(reason),
            ApplyError::Invalid(e) => write!(f, "{e}"),
            ApplyError::Rejected(reason) => {
                write!(f, "the data plane rejected the config: {reason}")
            }
        }
    }
}

impl std::error::Error for ApplyError {}

/// How the applier runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data plane's control socket; `None` = validate only (dry run).
    pub dataplane: Option<PathBuf>,
    /// Named LDS (the gRPC way): these listeners, and CDS names from their routes. Empty =
    /// wildcard LDS and CDS (the Envoy way).
    pub listener_names: Vec<String>,
    /// The longest a new listener waits for its clusters.
    pub warming_timeout: Duration,
    /// Called with each config just before it is pushed (or, in a dry run, applied): the
    /// sockmap filter must hold a new listener's or upstream's port before the data plane's
    /// first connection on it, since a connection is only recorded when it is established.
    pub before_push: Option<BeforePush>,
    /// The proxy's zone (the bootstrap's `node.locality.zone`), for listeners with a
    /// `LOCAL_ZONE_AFFINITY*` read policy ([`translate::set_local_zone`]).
    pub local_zone: Option<String>,
}

/// A hook run with each config about to be pushed ([`Options::before_push`]).
#[derive(Clone)]
pub struct BeforePush(pub Arc<dyn Fn(&Config) + Send + Sync>);

impl std::fmt::Debug for BeforePush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforePush")
    }
}

/// The applier, shared by the xDS client (which calls [`crate::xds::Applier`] on it), the
/// ticker and the admin endpoint.
#[derive(Debug, Clone)]
pub struct Applier {
    state: Arc<Mutex<State>>,
    status: Status,
}

/// One listener's versions.
#[derive(Debug, Clone, Default)]
struct ListenerEntry {
    /// The version serving now.
    active: Option<ListenerDraft>,
    /// A newer version waiting for its clusters, and since when.
    warming: Option<(ListenerDraft, Instant)>,
}

/// The resource cache and what was last applied.
#[derive(Debug, Clone)]
struct Cache {
    listeners: BTreeMap<String, ListenerEntry>,
    clusters: BTreeMap<String, ClusterDraft>,
    /// EDS resource name → hosts items.
    endpoints: BTreeMap<String, Vec<RawHost>>,
    /// EDS names the server said (or the timer decided) do not exist: their clusters are ready
    /// with no hosts.
    missing_endpoints: BTreeSet<String>,
}

#[derive(Debug)]
struct State {
    options: Options,
    cache: Cache,
    /// The last config the data plane (or, in a dry run, the validator) accepted.
    applied: Option<Arc<Config>>,
    /// Text of `applied`.
    applied_text: String,
    /// Text accepted by the validator but not yet taken by an unreachable data plane.
    unpushed: Option<(String, Arc<Config>)>,
    /// Identity of the control socket file at the last push that landed: a data plane that
    /// restarted (and so starts empty) has a new socket file, and gets the config again.
    socket_id: Option<SocketId>,
}

/// What a snapshot is made of, and which listeners wait.
struct Plan {
    text: String,
    /// Listener name → the warming version's clusters that are not ready.
    waiting: BTreeMap<String, Vec<String>>,
}

impl Applier {
    /// An applier with an empty cache.
    pub fn new(options: Options, status: Status) -> Applier {
        Applier {
            state: Arc::new(Mutex::new(State {
                options,
                cache: Cache {
                    listeners: BTreeMap::new(),
                    clusters: BTreeMap::new(),
                    endpoints: BTreeMap::new(),
                    missing_endpoints: BTreeSet::new(),
                },
                applied: None,
                applied_text: String::new(),
                unpushed: None,
                socket_id: None,
            })),
            status,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last config applied (pushed and accepted; in a dry run, validated).
    pub fn applied(&self) -> Option<Arc<Config>> {
        self.lock().applied.clone()
    }

    /// The admin `/config_dump` body: `applied` (the data plane's `/config_dump` shape, secrets
    /// redacted), and per listener and cluster what the cache holds.
    pub fn config_dump(&self) -> serde_json::Value {
        let st = self.lock();
        let now = Instant::now();
        let plan = st.plan(now);
        let listeners: Vec<serde_json::Value> = st
            .cache
            .listeners
            .iter()
            .map(|(name, e)| {
                serde_json::json!({
                    "name": name,
                    "active": e.active.is_some(),
                    "warming": e.warming.is_some(),
                    "waiting_for": plan.waiting.get(name).cloned().unwrap_or_default(),
                })
            })
            .collect();
        let clusters: Vec<serde_json::Value> = st
            .cache
            .clusters
            .values()
            .map(|c| {
                let (eds, hosts) = match &c.hosts {
                    HostSource::Inline(h) => (None, Some(h.len())),
                    HostSource::Eds(n) => (
                        Some(n.clone()),
                        st.cache.endpoints.get(n).map(Vec::len).or(st
                            .cache
                            .missing_endpoints
                            .contains(n)
                            .then_some(0)),
                    ),
                };
                serde_json::json!({"name": c.name, "eds_service_name": eds, "hosts": hosts})
            })
            .collect();
        // `[admin]` and `[runtime]` of a pushed config are the data plane's own, never ours.
        let applied = st.applied.as_deref().map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("admin");
                o.remove("runtime");
            }
            v
        });
        serde_json::json!({
            "applied": applied,
            "dataplane": st.options.dataplane.as_ref().map(|p| p.display().to_string()),
            "push_pending": st.unpushed.is_some(),
            "listeners": listeners,
            "clusters": clusters,
        })
    }

    /// Retries a push the data plane missed and applies listeners whose warming time is up.
    /// Call about once a second.
    pub fn tick(&self) {
        let mut st = self.lock();
        if st.unpushed.is_none()
            && let (Some(socket), Some(config), Some(seen)) = (
                st.options.dataplane.clone(),
                st.applied.clone(),
                st.socket_id,
            )
            && socket_id(&socket).is_some_and(|now| now != seen)
        {
            tracing::warn!(socket = %socket.display(), "the data plane restarted; pushing the config again");
            let text = st.applied_text.clone();
            st.unpushed = Some((text, config));
        }
        if let Some((text, config)) = st.unpushed.take()
            && let Err(e) = st.push(text, config)
        {
            tracing::error!(error = %e, "retried push refused; the data plane keeps its config");
        }
        let now = Instant::now();
        let timeout = st.options.warming_timeout;
        let expired = st.cache.listeners.values().any(|e| {
            e.warming
                .as_ref()
                .is_some_and(|(_, since)| now.duration_since(*since) >= timeout)
        });
        if expired {
            let _ = st.commit(now);
        }
        self.report_warming(&st, now);
    }

    /// Marks warming listeners in `/xds` (detail "warming: waiting for clusters [...]").
    fn report_warming(&self, st: &State, now: Instant) {
        let plan = st.plan(now);
        self.status.with(|s| {
            for ((type_url, name), row) in s.resources.iter_mut() {
                if type_url == LISTENER_TYPE {
                    row.detail = plan
                        .waiting
                        .get(name)
                        .map(|missing| format!("warming: waiting for clusters {missing:?}"));
                }
            }
        });
    }
}

impl State {
    /// Whether cluster `name` can serve: known, and its hosts known.
    fn ready(&self, name: &str) -> bool {
        match self.cache.clusters.get(name) {
            None => false,
            Some(c) => match &c.hosts {
                HostSource::Inline(_) => true,
                HostSource::Eds(n) => {
                    self.cache.endpoints.contains_key(n) || self.cache.missing_endpoints.contains(n)
                }
            },
        }
    }

    /// The listeners that serve at `now`: each warming version whose clusters are ready or whose
    /// time is up, else the active version.
    fn chosen(&self, now: Instant) -> (Vec<&ListenerDraft>, BTreeMap<String, Vec<String>>) {
        let mut chosen = Vec::new();
        let mut waiting = BTreeMap::new();
        for (name, e) in &self.cache.listeners {
            if let Some((draft, since)) = &e.warming {
                let missing: Vec<String> = draft
                    .clusters
                    .iter()
                    .filter(|c| !self.ready(c))
                    .cloned()
                    .collect();
                if missing.is_empty() || now.duration_since(*since) >= self.options.warming_timeout
                {
                    chosen.push(draft);
                    continue;
                }
                waiting.insert(name.clone(), missing);
            }
            if let Some(active) = &e.active {
                chosen.push(active);
            }
        }
        (chosen, waiting)
    }

    /// Renders the config that would serve at `now`.
    fn plan(&self, now: Instant) -> Plan {
        let (listeners, waiting) = self.chosen(now);
        let referenced: BTreeSet<&str> = listeners
            .iter()
            .flat_map(|l| l.clusters.iter().map(String::as_str))
            .collect();
        let empty: Vec<RawHost> = Vec::new();
        let placeholders: Vec<ClusterDraft> = referenced
            .iter()
            .filter(|c| !self.ready(c))
            .map(|c| placeholder(c))
            .collect();
        let mut clusters: Vec<(&ClusterDraft, &[RawHost])> = Vec::new();
        for c in self.cache.clusters.values() {
            match &c.hosts {
                HostSource::Inline(h) => clusters.push((c, h)),
                HostSource::Eds(n) => {
                    if let Some(h) = self.cache.endpoints.get(n) {
                        clusters.push((c, h));
                    } else if self.cache.missing_endpoints.contains(n) {
                        clusters.push((c, &empty));
                    }
                }
            }
        }
        for p in &placeholders {
            clusters.push((p, &empty));
        }
        clusters.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Plan {
            text: translate::render(&listeners, &clusters),
            waiting,
        }
    }

    /// Promotes warming listeners that are ready (or timed out), validates and pushes.
    ///
    /// Errors: the snapshot is invalid (the config error), or the data plane rejected it (its
    /// reason); the cache is not restored here.
    fn commit(&mut self, now: Instant) -> Result<(), ApplyError> {
        let plan = self.plan(now);
        let config =
            respite::config::parse_pushed(&plan.text, ORIGIN).map_err(ApplyError::Invalid)?;
        // Promote: the versions just rendered are the active ones now.
        let timeout = self.options.warming_timeout;
        for e in self.cache.listeners.values_mut() {
            let promote = e.warming.as_ref().is_some_and(|(d, since)| {
                now.duration_since(*since) >= timeout || !plan.waiting.contains_key(&d.name)
            });
            if promote && let Some((d, _)) = e.warming.take() {
                e.active = Some(d);
            }
        }
        if plan.text == self.applied_text && self.unpushed.is_none() {
            return Ok(());
        }
        // Envoy serves nothing until its first listeners have warmed; pushing an empty config
        // before that would close the listeners a data plane started from a file is serving.
        if self.applied.is_none() && config.listeners.is_empty() {
            return Ok(());
        }
        self.push(plan.text, Arc::new(config))
    }

    /// Pushes `text` (already validated into `config`) to the data plane, if there is one.
    ///
    /// Errors: the data plane rejected it. An unreachable data plane is not an error: the push
    /// is kept for [`Applier::tick`].
    fn push(&mut self, text: String, config: Arc<Config>) -> Result<(), ApplyError> {
        if let Some(hook) = &self.options.before_push {
            (hook.0)(&config);
        }
        let Some(socket) = self.options.dataplane.clone() else {
            self.applied = Some(config);
            self.applied_text = text;
            return Ok(());
        };
        match push::push(&socket, &text) {
            Ok(()) => {
                tracing::info!(
                    listeners = config.listeners.len(),
                    clusters = config.clusters.len(),
                    "config pushed to the data plane"
                );
                self.unpushed = None;
                self.applied = Some(config);
                self.applied_text = text;
                self.socket_id = socket_id(&socket);
                Ok(())
            }
            Err(PushError::Rejected(reason)) => {
                self.unpushed = None;
                Err(ApplyError::Rejected(reason))
            }
            Err(PushError::Unreachable(reason)) => {
                if self.unpushed.is_none() {
                    tracing::warn!(error = %reason, "data plane unreachable; retrying the push");
                }
                self.unpushed = Some((text, config));
                Ok(())
            }
        }
    }

    /// Drops endpoints no cluster refers to any more (the EDS half of a cascading delete).
    fn drop_orphans(&mut self) {
        let wanted: BTreeSet<String> = self.eds_names();
        self.cache.endpoints.retain(|n, _| wanted.contains(n));
        self.cache.missing_endpoints.retain(|n| wanted.contains(n));
    }

    fn eds_names(&self) -> BTreeSet<String> {
        self.cache
            .clusters
            .values()
            .filter_map(|c| match &c.hosts {
                HostSource::Eds(n) => Some(n.clone()),
                HostSource::Inline(_) => None,
            })
            .collect()
    }

    /// Caches one resource of `type_url`, translated.
    ///
    /// Errors: why the resource is invalid.
    fn store(
        &mut self,
        type_url: &str,
        name: &str,
        any: &Any,
        now: Instant,
    ) -> Result<(), ApplyError> {
        self.store_resource(type_url, name, any, now)
            .map_err(ApplyError::Resource)
    }

    fn store_resource(
        &mut self,
        type_url: &str,
        name: &str,
        any: &Any,
        now: Instant,
    ) -> Result<(), String> {
        if any.type_url != type_url {
            return Err(format!(
                "resource type {} does not match the response type {type_url}",
                any.type_url
            ));
        }
        match type_url {
            LISTENER_TYPE => {
                let l = Listener::decode(any.value.as_slice()).map_err(|e| e.to_string())?;
                check_name(name, &l.name)?;
                let mut draft = translate::listener(&l)?;
                translate::set_local_zone(&mut draft, self.options.local_zone.as_deref())?;
                let entry = self.cache.listeners.entry(name.to_string()).or_default();
                if entry.active.as_ref() == Some(&draft) {
                    entry.warming = None;
                } else {
                    entry.warming = Some((draft, now));
                }
            }
            CLUSTER_TYPE => {
                let c = Cluster::decode(any.value.as_slice()).map_err(|e| e.to_string())?;
                check_name(name, &c.name)?;
                let draft = translate::cluster(&c)?;
                self.cache.clusters.insert(name.to_string(), draft);
            }
            ENDPOINT_TYPE => {
                let cla = ClusterLoadAssignment::decode(any.value.as_slice())
                    .map_err(|e| e.to_string())?;
                check_name(name, &cla.cluster_name)?;
                let hosts = translate::endpoints(&cla)?;
                self.cache.missing_endpoints.remove(name);
                self.cache.endpoints.insert(name.to_string(), hosts);
            }
            other => return Err(format!("unsupported resource type {other}")),
        }
        Ok(())
    }

    fn remove(&mut self, type_url: &str, name: &str) {
        match type_url {
            LISTENER_TYPE => {
                self.cache.listeners.remove(name);
            }
            CLUSTER_TYPE => {
                self.cache.clusters.remove(name);
            }
            ENDPOINT_TYPE => {
                // Deleted endpoints leave the cluster with no hosts, not unknown.
                self.cache.endpoints.remove(name);
                self.cache.missing_endpoints.insert(name.to_string());
            }
            _ => {}
        }
    }
}

/// (inode, ctime s, ctime ns) of a socket file: tmpfs reuses a freed inode number at once, so
/// the creation time tells a new file from the old one.
type SocketId = (u64, i64, i64);

/// The socket file's [`SocketId`], if it exists.
fn socket_id(socket: &std::path::Path) -> Option<SocketId> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(socket)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

/// The resource's own name must be the name it is delivered under.
fn check_name(delivered: &str, own: &str) -> Result<(), String> {
    if delivered == own {
        Ok(())
    } else {
        Err(format!(
            "resource name {own:?} differs from the name it was sent as {delivered:?}"
        ))
    }
}

/// An empty cluster standing in for one a serving listener names but that is unknown or has no
/// hosts yet: its routes answer `no upstream host`.
fn placeholder(name: &str) -> ClusterDraft {
    ClusterDraft {
        name: name.to_string(),
        cluster: RawCluster::new(name.to_string(), ClusterType::Eds),
        hosts: HostSource::Inline(Vec::new()),
    }
}

impl crate::xds::Applier for Applier {
    fn apply(&mut self, update: Update) -> Verdict {
        let now = Instant::now();
        let mut st = self.lock();
        let saved = st.cache.clone();
        let mut verdict = Verdict::default();
        for name in &update.removed {
            st.remove(&update.type_url, name);
        }
        st.drop_orphans();
        // Translate each resource alone: a bad one is rejected by name, the others stay.
        for (name, any) in &update.resources {
            if let Err(reason) = st.store(&update.type_url, name, any, now) {
                verdict.rejected.push((name.clone(), reason.to_string()));
            }
        }
        st.drop_orphans();
        // Whole-config validation; on failure find which resources break it, one at a time on
        // top of the previous cache.
        let valid = respite::config::parse_pushed(&st.plan(now).text, ORIGIN).is_ok();
        if !valid {
            let mut accepted = saved.clone();
            for name in &update.removed {
                let mut probe = State::with_cache(&st, accepted.clone());
                probe.remove(&update.type_url, name);
                accepted = probe.cache;
            }
            for (name, any) in &update.resources {
                if verdict.rejected.iter().any(|(n, _)| n == name) {
                    continue;
                }
                let mut probe = State::with_cache(&st, accepted.clone());
                if probe.store(&update.type_url, name, any, now).is_err() {
                    continue;
                }
                probe.drop_orphans();
                match respite::config::parse_pushed(&probe.plan(now).text, ORIGIN) {
                    Ok(_) => accepted = probe.cache,
                    Err(e) => verdict.rejected.push((name.clone(), e.to_string())),
                }
            }
            st.cache = accepted;
        }
        if let Err(e) = st.commit(now) {
            st.cache = saved;
            verdict.error = Some(e.to_string());
        }
        self.report_warming(&st, now);
        verdict
    }

    fn does_not_exist(&mut self, type_url: &str, name: &str) {
        let now = Instant::now();
        let mut st = self.lock();
        let saved = st.cache.clone();
        match type_url {
            ENDPOINT_TYPE => {
                st.cache.missing_endpoints.insert(name.to_string());
            }
            _ => st.remove(type_url, name),
        }
        if let Err(e) = st.commit(now) {
            tracing::warn!(error = %e, type_url, name, "applying a missing resource failed");
            st.cache = saved;
        }
        self.report_warming(&st, now);
    }

    fn interest(&self) -> Vec<(&'static str, Interest)> {
        let st = self.lock();
        let eds = Interest::Names(st.eds_names());
        if st.options.listener_names.is_empty() {
            return vec![
                (LISTENER_TYPE, Interest::Wildcard),
                (CLUSTER_TYPE, Interest::Wildcard),
                (ENDPOINT_TYPE, eds),
            ];
        }
        let clusters: BTreeSet<String> = st
            .cache
            .listeners
            .values()
            .flat_map(|e| {
                e.active
                    .iter()
                    .chain(e.warming.iter().map(|(d, _)| d))
                    .flat_map(|d| d.clusters.iter().cloned())
            })
            .collect();
        vec![
            (
                LISTENER_TYPE,
                Interest::Names(st.options.listener_names.iter().cloned().collect()),
            ),
            (CLUSTER_TYPE, Interest::Names(clusters)),
            (ENDPOINT_TYPE, eds),
        ]
    }
}

impl State {
    /// A throwaway state over `cache`, for probing which resource breaks a config.
    fn with_cache(st: &State, cache: Cache) -> State {
        State {
            options: st.options.clone(),
            cache,
            applied: None,
            applied_text: String::new(),
            unpushed: None,
            socket_id: None,
        }
    }
}

impl Applier {
    /// Validates `text` (a whole Respite TOML config: a `--config` file, or an Envoy file
    /// translated) and pushes it to the data plane if there is one; on success it is the applied
    /// config. The xDS cache is not involved.
    ///
    /// Errors: the config is invalid (`origin:line:col: key: reason`), or the data plane
    /// rejected it or cannot be reached.
    pub fn apply_static(&self, text: &str, origin: &str) -> Result<(), ApplyError> {
        let config = respite::config::parse_pushed(text, origin).map_err(ApplyError::Invalid)?;
        self.lock().push(text.to_string(), Arc::new(config))
    }

    /// Pushes the applied config again (SIGHUP in xDS mode: an operator's way to resync a data
    /// plane by hand).
    pub fn repush(&self) {
        let mut st = self.lock();
        if let Some(config) = st.applied.clone() {
            let text = st.applied_text.clone();
            if let Err(e) = st.push(text, config) {
                tracing::error!(error = %e, "re-push refused; the data plane keeps its config");
            }
        }
    }
}

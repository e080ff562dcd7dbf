//! Meaning checks of a listener's `prefix_routes` and `faults` (Envoy `RedisProxy.PrefixRoutes`
//! and `RedisProxy.RedisFault`).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use toml::Spanned;

use super::locate::Source;
use super::raw::{RawCluster, RawFault, RawHost, RawPrefixRoutes, RawRoute};
use super::validate::duration;
use super::{ClusterType, ConfigError, FaultConfig, FaultType, MirrorPolicy, PrefixRoutes, Route};

type Result<T> = std::result::Result<T, ConfigError>;

/// What route checks need to know of a `[[clusters]]` entry before its body is validated.
pub(super) struct ClusterRef {
    /// Position in `[[clusters]]`.
    pub index: usize,
    pub cluster_type: ClusterType,
    /// `zone_discovery = true` (checked by the listener's zone read policies).
    pub zone_discovery: bool,
    /// Host addresses as written, normalised where they parse as `ip:port`.
    hosts: HashSet<String>,
}

impl ClusterRef {
    pub(super) fn new(index: usize, c: &RawCluster) -> ClusterRef {
        let hosts = c
            .hosts
            .get_ref()
            .iter()
            .map(|h| {
                let text = match h.get_ref() {
                    RawHost::Short(a) => a.as_str(),
                    RawHost::Full(t) => t.address.get_ref().as_str(),
                };
                text.trim()
                    .parse::<std::net::SocketAddr>()
                    .map_or_else(|_| text.trim().to_ascii_lowercase(), |a| a.to_string())
            })
            .collect();
        ClusterRef {
            index,
            cluster_type: c.cluster_type,
            zone_discovery: c.zone_discovery.as_ref().is_some_and(|z| *z.get_ref()),
            hosts,
        }
    }
}

/// Envoy's limit on `Route.prefix`.
const MAX_PREFIX_BYTES: usize = 1000;

/// The template variable of `key_formatter` (Envoy `%KEY%`).
pub const KEY_VARIABLE: &str = "%KEY%";

/// `[listeners.prefix_routes]` → the routes, and whether any route, mirror or read policy sends
/// requests to a `redis_cluster` cluster (the listener's cluster-only settings need one).
pub(super) fn prefix_routes(
    src: &Source<'_>,
    path: &str,
    raw: Option<Spanned<RawPrefixRoutes>>,
    listener_span: Range<usize>,
    clusters: &HashMap<String, ClusterRef>,
) -> Result<(PrefixRoutes, bool)> {
    let path = format!("{path}.prefix_routes");
    let Some(raw) = raw else {
        return Err(src.error(
            Some(listener_span),
            &format!("{path}.catch_all_route"),
            "missing; every listener needs prefix routes or a catch-all route naming a cluster",
        ));
    };
    let span = raw.span();
    let raw = raw.into_inner();
    if raw.routes.is_empty() && raw.catch_all_route.is_none() {
        return Err(src.error(
            Some(span),
            &format!("{path}.catch_all_route"),
            "missing; with no routes, a catch-all route naming a cluster is required",
        ));
    }
    let mut any_redis_cluster = false;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut routes = Vec::with_capacity(raw.routes.len());
    for (i, r) in raw.routes.into_iter().enumerate() {
        let rpath = format!("{path}.routes[{i}]");
        let r_span = r.span();
        let route = route(src, &rpath, r.into_inner(), r_span, clusters, false)?;
        let key = if raw.case_insensitive {
            route.0.prefix.to_ascii_lowercase()
        } else {
            route.0.prefix.clone()
        };
        if let Some(first) = seen.insert(key, i) {
            return Err(src.error(
                route.1,
                &format!("{rpath}.prefix"),
                &format!(
                    "prefix \"{}\" already exists (routes[{first}]{})",
                    route.0.prefix,
                    if raw.case_insensitive {
                        ", compared without case"
                    } else {
                        ""
                    }
                ),
            ));
        }
        any_redis_cluster |= route.2;
        routes.push(route.0);
    }
    let catch_all_route = match raw.catch_all_route {
        Some(r) => {
            let r_span = r.span();
            let (route, _, rc) = route(
                src,
                &format!("{path}.catch_all_route"),
                r.into_inner(),
                r_span,
                clusters,
                true,
            )?;
            any_redis_cluster |= rc;
            Some(route)
        }
        None => None,
    };
    Ok((
        PrefixRoutes {
            routes,
            case_insensitive: raw.case_insensitive,
            catch_all_route,
        },
        any_redis_cluster,
    ))
}

/// One route: (the route, the span of its prefix, whether it reaches a `redis_cluster`).
fn route(
    src: &Source<'_>,
    path: &str,
    r: RawRoute,
    span: Range<usize>,
    clusters: &HashMap<String, ClusterRef>,
    catch_all: bool,
) -> Result<(Route, Option<Range<usize>>, bool)> {
    let prefix_span = r.prefix.as_ref().map(|p| p.span());
    let prefix = match (r.prefix, catch_all) {
        (Some(p), true) => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.prefix"),
                "the catch-all route matches every key; it has no prefix",
            ));
        }
        (Some(p), false) if p.get_ref().is_empty() => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.prefix"),
                "must not be empty (use catch_all_route for every other key)",
            ));
        }
        (Some(p), false) if p.get_ref().len() > MAX_PREFIX_BYTES => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.prefix"),
                &format!("at most {MAX_PREFIX_BYTES} bytes"),
            ));
        }
        (Some(p), false) => p.into_inner(),
        (None, true) => String::new(),
        (None, false) => {
            return Err(src.error(
                Some(span),
                &format!("{path}.prefix"),
                "missing; a route needs a key prefix",
            ));
        }
    };
    let remove_prefix = match r.remove_prefix {
        Some(b) if catch_all && *b.get_ref() => {
            return Err(src.error(
                Some(b.span()),
                &format!("{path}.remove_prefix"),
                "the catch-all route has no prefix to remove",
            ));
        }
        Some(b) => b.into_inner(),
        None => false,
    };
    let key_formatter = match r.key_formatter {
        Some(f) if !f.get_ref().contains(KEY_VARIABLE) => {
            return Err(src.error(
                Some(f.span()),
                &format!("{path}.key_formatter"),
                &format!(
                    "must contain {KEY_VARIABLE} (without it every key would become the same key)"
                ),
            ));
        }
        Some(f) => Some(f.into_inner()),
        None => None,
    };
    let (cluster, mut redis_cluster) =
        cluster_ref(src, &format!("{path}.cluster"), r.cluster, clusters)?;
    let read_command_policy = match r.read_command_policy {
        Some(p) => {
            let (c, rc) = cluster_ref(
                src,
                &format!("{path}.read_command_policy.cluster"),
                p.into_inner().cluster,
                clusters,
            )?;
            redis_cluster |= rc;
            Some(c)
        }
        None => None,
    };
    let mut mirrors: Vec<MirrorPolicy> = Vec::with_capacity(r.request_mirror_policy.len());
    for (i, m) in r.request_mirror_policy.into_iter().enumerate() {
        let mpath = format!("{path}.request_mirror_policy[{i}]");
        let m = m.into_inner();
        let c_span = m.cluster.span();
        let (mc, rc) = cluster_ref(src, &format!("{mpath}.cluster"), m.cluster, clusters)?;
        // A mirror onto the route's own cluster, or onto another cluster over one of its
        // servers, is accepted, as Envoy accepts it: each mirrored command reaches that server
        // twice (so a mirrored write is applied twice), which is worth a warning, not a refusal.
        if mc != cluster
            && let (Some(p), Some(m)) = (clusters.get(&cluster), clusters.get(&mc))
            && let Some(shared) = p.hosts.intersection(&m.hosts).next()
        {
            tracing::warn!(
                route = %mpath,
                "mirror cluster \"{mc}\" shares host {shared} with the route's cluster \
                 \"{cluster}\": each mirrored command reaches that server twice"
            );
        }
        if mirrors.iter().any(|o| o.cluster == mc) {
            return Err(src.error(
                Some(c_span),
                &format!("{mpath}.cluster"),
                &format!("cluster \"{mc}\" is already a mirror of this route"),
            ));
        }
        let runtime_fraction = match m.runtime_fraction {
            Some(f) => percentage(src, &format!("{mpath}.runtime_fraction"), &f)?,
            None => 100.0,
        };
        redis_cluster |= rc;
        mirrors.push(MirrorPolicy {
            cluster: mc,
            exclude_read_commands: m.exclude_read_commands,
            runtime_fraction,
        });
    }
    Ok((
        Route {
            prefix,
            cluster,
            remove_prefix,
            key_formatter,
            request_mirror_policy: mirrors,
            read_command_policy,
        },
        prefix_span,
        redis_cluster,
    ))
}

/// A cluster name that must exist: (the name, whether it is a `redis_cluster`).
fn cluster_ref(
    src: &Source<'_>,
    path: &str,
    name: Spanned<String>,
    clusters: &HashMap<String, ClusterRef>,
) -> Result<(String, bool)> {
    match clusters.get(name.get_ref()) {
        Some(c) => Ok((
            name.into_inner(),
            c.cluster_type == ClusterType::RedisCluster,
        )),
        None => Err(src.error(
            Some(name.span()),
            path,
            &format!("unknown cluster \"{}\"", name.get_ref()),
        )),
    }
}

/// A percentage, 0.0 to 100.0.
fn percentage(src: &Source<'_>, path: &str, f: &Spanned<f64>) -> Result<f64> {
    let v = *f.get_ref();
    if !(0.0..=100.0).contains(&v) {
        return Err(src.error(
            Some(f.span()),
            path,
            &format!("{v} is not a percentage between 0 and 100"),
        ));
    }
    Ok(v)
}

/// `[[listeners.faults]]`.
pub(super) fn faults(
    src: &Source<'_>,
    path: &str,
    raw: Vec<Spanned<RawFault>>,
) -> Result<Vec<FaultConfig>> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, f) in raw.into_iter().enumerate() {
        let fpath = format!("{path}.faults[{i}]");
        let span = f.span();
        let f = f.into_inner();
        let fault_enabled = percentage(src, &format!("{fpath}.fault_enabled"), &f.fault_enabled)?;
        let delay = match f.delay {
            Some(d) => Some(duration(src, &format!("{fpath}.delay"), &d)?),
            None => None,
        };
        let fault_type = f.fault_type.into_inner();
        if fault_type == FaultType::Delay && delay.is_none_or(|d| d.is_zero()) {
            return Err(src.error(
                Some(span),
                &format!("{fpath}.delay"),
                "a delay fault needs a delay greater than zero",
            ));
        }
        let mut commands = Vec::with_capacity(f.commands.len());
        for (j, c) in f.commands.into_iter().enumerate() {
            let cpath = format!("{fpath}.commands[{j}]");
            let name = c.get_ref().to_ascii_lowercase();
            if name == "auth" || name == "ping" {
                return Err(src.error(
                    Some(c.span()),
                    &cpath,
                    &format!(
                        "faults never apply to {} (as in Envoy)",
                        name.to_uppercase()
                    ),
                ));
            }
            let Some(spec) = crate::command::lookup(name.as_bytes()) else {
                return Err(src.error(
                    Some(c.span()),
                    &cpath,
                    &format!("unknown command \"{}\"", c.get_ref()),
                ));
            };
            // Faults act on requests sent upstream; one listed only for a command respite
            // answers itself (or refuses) would silently never fire, and so would one on a
            // transaction command other than EXEC (the transaction draws as one request).
            use crate::command::{Kind, Transaction};
            let never = match spec.kind {
                Kind::Local(_) | Kind::Refused(_) => {
                    Some("is answered by respite itself, never sent upstream")
                }
                Kind::Transaction(Transaction::Exec) => None,
                Kind::Transaction(_) => {
                    Some("is part of a transaction, which draws its faults at EXEC")
                }
                _ => None,
            };
            if let Some(why) = never {
                return Err(src.error(
                    Some(c.span()),
                    &cpath,
                    &format!(
                        "{} {why}: a fault on it would never fire",
                        name.to_uppercase()
                    ),
                ));
            }
            if !commands.contains(&name) {
                commands.push(name);
            }
        }
        out.push(FaultConfig {
            fault_type,
            fault_enabled,
            delay,
            commands,
        });
    }
    Ok(out)
}

/// Cluster names a listener sends requests to: routes, read policies and mirrors, each once.
pub fn clusters_of(routes: &PrefixRoutes) -> Vec<&str> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in routes.routes.iter().chain(&routes.catch_all_route) {
        let names = std::iter::once(r.cluster.as_str())
            .chain(r.read_command_policy.as_deref())
            .chain(r.request_mirror_policy.iter().map(|m| m.cluster.as_str()));
        for n in names {
            if seen.insert(n) {
                out.push(n);
            }
        }
    }
    out
}

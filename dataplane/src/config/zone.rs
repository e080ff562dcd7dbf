//! The listener's `local_zone` and the checks that tie it to the zone read policies
//! (`local_zone_affinity*`, Envoy `LOCAL_ZONE_AFFINITY*`) and to the clusters'
//! `zone_discovery`.

use std::collections::HashMap;

use toml::Spanned;

use super::locate::Source;
use super::routes::ClusterRef;
use super::{ClusterType, ConfigError, PrefixRoutes, ReadPolicy};

/// The listener's `local_zone`, checked against its `read_policy` and the clusters it routes
/// to. Errors (each naming the key): a zone policy without `local_zone`; `local_zone` without a
/// zone policy (it would be ignored); an empty `local_zone`; a zone policy routing to a
/// `redis_cluster` cluster without `zone_discovery = true` (its nodes would all be "other
/// zone", so the policy would silently act as `prefer_replica`).
pub(super) fn local_zone(
    src: &Source<'_>,
    path: &str,
    read_policy: Option<&Spanned<ReadPolicy>>,
    local_zone: Option<Spanned<String>>,
    routes: &PrefixRoutes,
    clusters: &HashMap<String, ClusterRef>,
) -> Result<Option<String>, ConfigError> {
    let policy = read_policy.filter(|p| p.get_ref().zone_aware());
    let (policy, zone) = match (policy, local_zone) {
        (None, None) => return Ok(None),
        (None, Some(z)) => {
            return Err(src.error(
                Some(z.span()),
                &format!("{path}.local_zone"),
                "applies only with read_policy = \"local_zone_affinity\" or \
                 \"local_zone_affinity_replicas_and_primary\"",
            ));
        }
        (Some(p), None) => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.read_policy"),
                &format!(
                    "a zone read policy needs {path}.local_zone (the proxy's availability zone)"
                ),
            ));
        }
        (Some(p), Some(z)) => (p, z),
    };
    if zone.get_ref().trim().is_empty() {
        return Err(src.error(
            Some(zone.span()),
            &format!("{path}.local_zone"),
            "must not be empty",
        ));
    }
    let named = routes
        .routes
        .iter()
        .chain(routes.catch_all_route.iter())
        .flat_map(|r| std::iter::once(&r.cluster).chain(r.read_command_policy.as_ref()))
        .map(String::as_str);
    for name in named {
        let Some(c) = clusters.get(name) else {
            continue;
        };
        if c.cluster_type == ClusterType::RedisCluster && !c.zone_discovery {
            return Err(src.error(
                Some(policy.span()),
                &format!("{path}.read_policy"),
                &format!(
                    "a zone read policy needs clusters[{}].zone_discovery = true (cluster \
                     \"{name}\" would know no node's zone)",
                    c.index
                ),
            ));
        }
    }
    Ok(Some(zone.into_inner()))
}

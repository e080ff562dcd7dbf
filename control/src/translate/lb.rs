//! Cluster load balancing → `lb_policy`. Sources: `cluster.proto` (`LbPolicy`,
//! `RingHashLbConfig`, `MaglevLbConfig`, `load_balancing_policy`), the typed policies
//! `envoy.load_balancing_policies.{ring_hash,maglev,cluster_provided}`, and
//! the data plane's ring (`dataplane/src/cluster/ring_hash.rs`: Envoy's default 1024 / 8M sizes,
//! xxHash) and Maglev table (65537 entries).
//!
//! The non-hashing policies: RANDOM, ROUND_ROBIN (the proto default) and LEAST_REQUEST become
//! the data plane's `random`, `round_robin` and `least_request` — as in Envoy, a key has no
//! fixed host; Respite keeps each client command and each transaction on one host, and pub/sub
//! on one fixed host. Endpoint weights (inline or EDS) go to the hosts: ROUND_ROBIN and
//! LEAST_REQUEST weigh by them as Envoy does, RANDOM ignores them as Envoy's does
//! (`RandomLoadBalancer` draws uniformly). LEAST_REQUEST's `choice_count` and
//! `active_request_bias` (its `default_value`: Respite has no runtime) become
//! `[clusters.least_request]`; slow start and the full-scan selection are refused.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    LbConfig, LbPolicy, ring_hash_lb_config,
};
use envoy_types::pb::envoy::extensions::load_balancing_policies::least_request::v3::LeastRequest;
use envoy_types::pb::envoy::extensions::load_balancing_policies::maglev::v3::Maglev;
use envoy_types::pb::envoy::extensions::load_balancing_policies::ring_hash::v3::{
    RingHash, ring_hash,
};

use respite::config::LbPolicy as DataPlaneLbPolicy;
use respite::config::least_request::RawLeastRequest;
use respite::config::raw::{RawCluster, unspanned};

use super::cluster::Kind;
use super::fields::decode;

/// The data plane's ring size bounds (Envoy's defaults); other sizes would place keys differently
/// from Envoy.
const MIN_RING_SIZE: u64 = 1024;
const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;
/// The data plane's Maglev table size (Envoy's default).
const MAGLEV_TABLE_SIZE: u64 = 65537;

const RING_HASH_TYPE: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";
const MAGLEV_TYPE: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev";
const CLUSTER_PROVIDED_TYPE: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided";
/// Typed non-hashing policies, recognised so that a policy list can fall through to them.
const LEAST_REQUEST_TYPE: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest";
const NON_HASH_TYPES: [(&str, &str); 2] = [
    (
        "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
        "ROUND_ROBIN",
    ),
    (
        "type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random",
        "RANDOM",
    ),
];

/// The policy a cluster asks for, after its config checks.
#[derive(Debug, PartialEq)]
enum Policy {
    RingHash,
    Maglev,
    ClusterProvided,
    /// Round robin or random (the name, for messages).
    NonHash(String),
    /// Least request, with its settings when any is set.
    LeastRequest(Option<RawLeastRequest>),
}

impl Policy {
    fn name(&self) -> &str {
        match self {
            Policy::RingHash => "RING_HASH",
            Policy::Maglev => "MAGLEV",
            Policy::ClusterProvided => "CLUSTER_PROVIDED",
            Policy::NonHash(n) => n,
            Policy::LeastRequest(_) => "LEAST_REQUEST",
        }
    }
}

/// Writes `lb_policy` (not for `redis_cluster`, where the slot decides).
pub(super) fn policy(c: &Cluster, kind: Kind, t: &mut RawCluster) -> Result<(), String> {
    let p = chosen(c)?;
    if kind == Kind::RedisCluster {
        // CLUSTER_PROVIDED is the documented setting; the proto default ROUND_ROBIN is what a
        // config that omits lb_policy has, and Respite routes by slot either way.
        return match p {
            Policy::ClusterProvided => Ok(()),
            Policy::NonHash(n) if n == "ROUND_ROBIN" => Ok(()),
            other => Err(format!(
                "lb_policy: {} does not apply to envoy.clusters.redis (use \
                 CLUSTER_PROVIDED: keys go by slot)",
                other.name()
            )),
        };
    }
    match p {
        Policy::RingHash => {
            t.lb_policy = Some(unspanned(DataPlaneLbPolicy::RingHash));
            Ok(())
        }
        Policy::Maglev => {
            t.lb_policy = Some(unspanned(DataPlaneLbPolicy::Maglev));
            Ok(())
        }
        Policy::ClusterProvided => {
            Err("lb_policy: CLUSTER_PROVIDED needs cluster_type envoy.clusters.redis".into())
        }
        Policy::NonHash(_) if kind == Kind::Static && one_host(c) => Ok(()),
        Policy::LeastRequest(settings) => {
            t.lb_policy = Some(unspanned(DataPlaneLbPolicy::LeastRequest));
            t.least_request = settings.map(unspanned);
            Ok(())
        }
        Policy::NonHash(name) if name == "RANDOM" => {
            t.lb_policy = Some(unspanned(DataPlaneLbPolicy::Random));
            Ok(())
        }
        Policy::NonHash(name) if name == "ROUND_ROBIN" => {
            t.lb_policy = Some(unspanned(DataPlaneLbPolicy::RoundRobin));
            Ok(())
        }
        Policy::NonHash(name) => Err(format!(
            "lb_policy: {name} is not supported by respite yet on several hosts (RANDOM, \
             ROUND_ROBIN, LEAST_REQUEST, RING_HASH and MAGLEV are; any policy is accepted on a \
             static cluster with one host)"
        )),
    }
}

/// `[clusters.least_request]` from Envoy's `choice_count` and `active_request_bias` (`None`
/// when neither is set); `f` names the message for errors.
fn least_request_settings(
    choice_count: Option<u32>,
    bias: Option<&envoy_types::pb::envoy::config::core::v3::RuntimeDouble>,
    slow_start: bool,
    f: &str,
) -> Result<Option<RawLeastRequest>, String> {
    if slow_start {
        return Err(format!("{f}.slow_start_config: not supported by respite"));
    }
    if choice_count.is_none() && bias.is_none() {
        return Ok(None);
    }
    Ok(Some(RawLeastRequest {
        choice_count: choice_count.map(unspanned),
        active_request_bias: bias.map(|b| unspanned(b.default_value)),
    }))
}

/// The typed `envoy.load_balancing_policies.least_request` policy.
fn typed_least_request(lr: &LeastRequest, f: &str) -> Result<Policy, String> {
    if lr.locality_lb_config.is_some() {
        return Err(format!("{f}.locality_lb_config: not supported by respite"));
    }
    #[allow(deprecated)]
    let full_scan = lr.enable_full_scan.as_ref().is_some_and(|b| b.value);
    if full_scan || lr.selection_method != 0 {
        return Err(format!(
            "{f}.selection_method: FULL_SCAN is not supported by respite (N_CHOICES)"
        ));
    }
    least_request_settings(
        lr.choice_count.map(|v| v.value),
        lr.active_request_bias.as_ref(),
        lr.slow_start_config.is_some(),
        f,
    )
    .map(Policy::LeastRequest)
}

/// True if the inline assignment has exactly one endpoint.
fn one_host(c: &Cluster) -> bool {
    c.load_assignment.as_ref().is_some_and(|cla| {
        cla.endpoints
            .iter()
            .map(|l| l.lb_endpoints.len())
            .sum::<usize>()
            == 1
    })
}

/// `load_balancing_policy` when set (Envoy: it supersedes `lb_policy`; the first policy Envoy
/// supports wins), else `lb_policy` with its `lb_config`.
fn chosen(c: &Cluster) -> Result<Policy, String> {
    if let Some(lbp) = &c.load_balancing_policy {
        for (i, pol) in lbp.policies.iter().enumerate() {
            let f = format!("load_balancing_policy.policies[{i}].typed_extension_config");
            let Some(any) = pol
                .typed_extension_config
                .as_ref()
                .and_then(|e| e.typed_config.as_ref())
            else {
                return Err(format!("{f}.typed_config: required"));
            };
            match super::fields::inner_type(any)
                .as_deref()
                .unwrap_or_default()
            {
                RING_HASH_TYPE => {
                    let rh: RingHash = decode(any, RING_HASH_TYPE, &f)?;
                    typed_ring_hash(&rh, &f)?;
                    return Ok(Policy::RingHash);
                }
                MAGLEV_TYPE => {
                    let m: Maglev = decode(any, MAGLEV_TYPE, &f)?;
                    table_size(m.table_size.map(|v| v.value), &format!("{f}.table_size"))?;
                    if m.consistent_hashing_lb_config.as_ref().is_some_and(|ch| {
                        ch.use_hostname_for_hashing || ch.hash_balance_factor.is_some()
                    }) {
                        return Err(format!(
                            "{f}.consistent_hashing_lb_config: use_hostname_for_hashing and \
                             hash_balance_factor are not supported"
                        ));
                    }
                    return Ok(Policy::Maglev);
                }
                CLUSTER_PROVIDED_TYPE => return Ok(Policy::ClusterProvided),
                LEAST_REQUEST_TYPE => {
                    let lr: LeastRequest = decode(any, LEAST_REQUEST_TYPE, &f)?;
                    return typed_least_request(&lr, &f);
                }
                u => {
                    if let Some((_, name)) = NON_HASH_TYPES.iter().find(|(url, _)| *url == u) {
                        return Ok(Policy::NonHash((*name).to_owned()));
                    }
                }
            }
        }
        let urls: Vec<&str> = lbp
            .policies
            .iter()
            .filter_map(|p| p.typed_extension_config.as_ref())
            .filter_map(|e| e.typed_config.as_ref())
            .map(|a| a.type_url.as_str())
            .collect();
        return Err(format!(
            "load_balancing_policy: no supported policy in {urls:?} (ring_hash, maglev, \
             cluster_provided, round_robin, least_request or random)"
        ));
    }
    match LbPolicy::try_from(c.lb_policy) {
        Ok(LbPolicy::RingHash) => {
            if let Some(LbConfig::RingHashLbConfig(rc)) = &c.lb_config {
                let f = "ring_hash_lb_config";
                if rc.hash_function == ring_hash_lb_config::HashFunction::MurmurHash2 as i32 {
                    return Err(format!(
                        "{f}.hash_function: MURMUR_HASH_2 is not supported (XX_HASH)"
                    ));
                }
                ring_sizes(
                    rc.minimum_ring_size.map(|v| v.value),
                    rc.maximum_ring_size.map(|v| v.value),
                    f,
                )?;
            }
            Ok(Policy::RingHash)
        }
        Ok(LbPolicy::Maglev) => {
            if let Some(LbConfig::MaglevLbConfig(m)) = &c.lb_config {
                table_size(m.table_size.map(|v| v.value), "maglev_lb_config.table_size")?;
            }
            Ok(Policy::Maglev)
        }
        Ok(LbPolicy::ClusterProvided) => Ok(Policy::ClusterProvided),
        Ok(LbPolicy::LeastRequest) => match &c.lb_config {
            Some(LbConfig::LeastRequestLbConfig(l)) => least_request_settings(
                l.choice_count.map(|v| v.value),
                l.active_request_bias.as_ref(),
                l.slow_start_config.is_some(),
                "least_request_lb_config",
            )
            .map(Policy::LeastRequest),
            _ => Ok(Policy::LeastRequest(None)),
        },
        Ok(LbPolicy::LoadBalancingPolicyConfig) => {
            Err("lb_policy: LOAD_BALANCING_POLICY_CONFIG needs load_balancing_policy".into())
        }
        Ok(other) => Ok(Policy::NonHash(other.as_str_name().to_owned())),
        Err(_) => Err(format!("lb_policy: unknown value {}", c.lb_policy)),
    }
}

// Reads deprecated fields on purpose: configs that still set them must be refused, not obeyed
// silently in part.
#[allow(deprecated)]
fn typed_ring_hash(rh: &RingHash, f: &str) -> Result<(), String> {
    if rh.hash_function == ring_hash::HashFunction::MurmurHash2 as i32 {
        return Err(format!(
            "{f}.hash_function: MURMUR_HASH_2 is not supported (XX_HASH)"
        ));
    }
    if rh.use_hostname_for_hashing
        || rh.hash_balance_factor.is_some()
        || rh
            .consistent_hashing_lb_config
            .as_ref()
            .is_some_and(|ch| ch.use_hostname_for_hashing || ch.hash_balance_factor.is_some())
    {
        return Err(format!(
            "{f}: use_hostname_for_hashing and hash_balance_factor are not supported"
        ));
    }
    ring_sizes(
        rh.minimum_ring_size.map(|v| v.value),
        rh.maximum_ring_size.map(|v| v.value),
        f,
    )
}

fn ring_sizes(min: Option<u64>, max: Option<u64>, f: &str) -> Result<(), String> {
    if let Some(m) = min.filter(|m| *m != MIN_RING_SIZE) {
        return Err(format!(
            "{f}.minimum_ring_size: {m} is not supported (the ring has Envoy's default \
             {MIN_RING_SIZE})"
        ));
    }
    if let Some(m) = max.filter(|m| *m != MAX_RING_SIZE) {
        return Err(format!(
            "{f}.maximum_ring_size: {m} is not supported (the ring has Envoy's default \
             {MAX_RING_SIZE})"
        ));
    }
    Ok(())
}

fn table_size(size: Option<u64>, f: &str) -> Result<(), String> {
    match size {
        Some(n) if n != MAGLEV_TABLE_SIZE => Err(format!(
            "{f}: {n} is not supported (the table has Envoy's default {MAGLEV_TABLE_SIZE})"
        )),
        _ => Ok(()),
    }
}

//! `ClusterLoadAssignment` → `hosts` items. Source: Envoy's `endpoint.proto` /
//! `endpoint_components.proto`.
//!
//! - Endpoints whose `health_status` is UNHEALTHY, DRAINING or TIMEOUT are left out (Envoy does
//!   not route to them); UNKNOWN, HEALTHY and DEGRADED are kept.
//! - `load_balancing_weight` → the host's `weight` (its share of the hash ring).
//! - A locality with `priority` above 0 is invalid: Respite has no priority failover, and
//!   merging failover hosts into the ring would send keys to them while the primaries are up.
//! - Locality weights are ignored: consistent hashing in Envoy ignores them unless
//!   `locality_weighted_lb_config` is set, and Respite has none.
//! - The same address twice is invalid (the data plane forbids it; Envoy would merge them).

use std::collections::HashSet;

use envoy_types::pb::envoy::config::core::v3::HealthStatus;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;

use respite::config::raw::{RawHost, RawHostTable, unspanned};

use super::fields::socket_address;

/// See [`super::endpoints`]. Errors name the field from `endpoints[…]`.
pub fn translate(cla: &ClusterLoadAssignment) -> Result<Vec<RawHost>, String> {
    let mut hosts = Vec::new();
    let mut seen = HashSet::new();
    for (i, loc) in cla.endpoints.iter().enumerate() {
        let lp = format!("endpoints[{i}]");
        if loc.priority > 0 {
            return Err(format!(
                "{lp}.priority: {} is not supported (no priority failover; every endpoint must \
                 be priority 0)",
                loc.priority
            ));
        }
        for (j, lb) in loc.lb_endpoints.iter().enumerate() {
            let ep = format!("{lp}.lb_endpoints[{j}]");
            let skip = matches!(
                HealthStatus::try_from(lb.health_status),
                Ok(HealthStatus::Unhealthy | HealthStatus::Draining | HealthStatus::Timeout)
            );
            if skip {
                continue;
            }
            let endpoint = match &lb.host_identifier {
                Some(HostIdentifier::Endpoint(e)) => e,
                Some(HostIdentifier::EndpointName(n)) => {
                    return Err(format!(
                        "{ep}.endpoint_name: named endpoints (\"{n}\") are not supported"
                    ));
                }
                None => return Err(format!("{ep}.endpoint: required")),
            };
            let address =
                socket_address(endpoint.address.as_ref(), &format!("{ep}.endpoint.address"))?;
            if !seen.insert(address.clone()) {
                return Err(format!(
                    "{ep}.endpoint.address: {address} appears twice in the assignment"
                ));
            }
            match lb.load_balancing_weight {
                Some(w) if w.value == 0 => {
                    return Err(format!("{ep}.load_balancing_weight: must be at least 1"));
                }
                Some(w) if w.value != 1 => hosts.push(RawHost::Full(RawHostTable {
                    address: unspanned(address),
                    weight: Some(unspanned(w.value)),
                    name: None,
                })),
                _ => hosts.push(RawHost::Short(address)),
            }
        }
    }
    Ok(hosts)
}

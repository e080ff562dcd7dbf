//! `[clusters.least_request]`: the settings of `lb_policy = "least_request"` (Envoy
//! `Cluster.LeastRequestLbConfig` / `envoy.load_balancing_policies.least_request`).

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::locate::Source;
use super::{ConfigError, LbPolicy};

/// Envoy's default `choice_count` (and its proto minimum).
pub const DEFAULT_CHOICE_COUNT: u32 = 2;
/// The most hosts one pick may sample: more is a full scan in all but name.
pub const MAX_CHOICE_COUNT: u32 = 64;
/// Envoy's default `active_request_bias`.
pub const DEFAULT_ACTIVE_REQUEST_BIAS: f64 = 1.0;

/// How `least_request` picks a host for a command.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeastRequestConfig {
    /// Hosts sampled per pick when every host has the same weight; the sampled host with the
    /// fewest active requests wins. 2 ([`DEFAULT_CHOICE_COUNT`]) to [`MAX_CHOICE_COUNT`].
    pub choice_count: u32,
    /// With unequal weights a host's share is `weight / (active + 1)^active_request_bias`
    /// (0 = by weight only, as round robin). Finite, >= 0; default 1.0.
    pub active_request_bias: f64,
}

impl Default for LeastRequestConfig {
    fn default() -> LeastRequestConfig {
        LeastRequestConfig {
            choice_count: DEFAULT_CHOICE_COUNT,
            active_request_bias: DEFAULT_ACTIVE_REQUEST_BIAS,
        }
    }
}

/// `[clusters.least_request]` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawLeastRequest {
    /// Hosts sampled per pick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice_count: Option<Spanned<u32>>,
    /// Exponent of the active-request penalty with unequal weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_request_bias: Option<Spanned<f64>>,
}

/// Checks `[clusters.least_request]` at `path` (`clusters[i].least_request`): allowed only with
/// `lb_policy = "least_request"`; defaults when absent.
///
/// Errors: the table with another policy, `choice_count` outside 2..=[`MAX_CHOICE_COUNT`],
/// `active_request_bias` negative or not finite; each names its key.
pub(super) fn validate(
    src: &Source<'_>,
    path: &str,
    raw: Option<Spanned<RawLeastRequest>>,
    policy: LbPolicy,
) -> Result<LeastRequestConfig, ConfigError> {
    let d = LeastRequestConfig::default();
    let Some(raw) = raw else { return Ok(d) };
    if policy != LbPolicy::LeastRequest {
        return Err(src.error(
            Some(raw.span()),
            path,
            "applies to lb_policy \"least_request\" only",
        ));
    }
    let raw = raw.into_inner();
    let choice_count = match raw.choice_count {
        Some(n) if !(DEFAULT_CHOICE_COUNT..=MAX_CHOICE_COUNT).contains(n.get_ref()) => {
            return Err(src.error(
                Some(n.span()),
                &format!("{path}.choice_count"),
                &format!(
                    "must be {DEFAULT_CHOICE_COUNT} to {MAX_CHOICE_COUNT} (Envoy's minimum is 2)"
                ),
            ));
        }
        Some(n) => n.into_inner(),
        None => d.choice_count,
    };
    let active_request_bias = match raw.active_request_bias {
        Some(b) if !(b.get_ref().is_finite() && *b.get_ref() >= 0.0) => {
            return Err(src.error(
                Some(b.span()),
                &format!("{path}.active_request_bias"),
                "must be a finite number >= 0",
            ));
        }
        Some(b) => b.into_inner(),
        None => d.active_request_bias,
    };
    Ok(LeastRequestConfig {
        choice_count,
        active_request_bias,
    })
}

//! `lb_policy = "least_request"` and `[clusters.least_request]`.

use super::tests::{MINIMAL, assert_err};
use super::*;

#[test]
fn least_request_defaults_and_settings() {
    let c = parse(
        &format!("{MINIMAL}lb_policy = \"least_request\"\n"),
        "t.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cl = &c.clusters[0];
    assert_eq!(cl.lb_policy, LbPolicy::LeastRequest);
    assert_eq!(cl.least_request.choice_count, 2);
    assert_eq!(cl.least_request.active_request_bias, 1.0);

    let text = format!(
        "{MINIMAL}lb_policy = \"least_request\"\n[clusters.least_request]\nchoice_count = 3\n\
         active_request_bias = 0.5\n"
    );
    let c = parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.clusters[0].least_request,
        LeastRequestConfig {
            choice_count: 3,
            active_request_bias: 0.5
        }
    );
}

#[test]
fn least_request_bad_settings_name_their_key() {
    assert_err(
        &format!("{MINIMAL}[clusters.least_request]\nchoice_count = 3\n"),
        10,
        "clusters[0].least_request",
        "applies to lb_policy \"least_request\" only",
    );
    assert_err(
        &format!(
            "{MINIMAL}lb_policy = \"least_request\"\n[clusters.least_request]\nchoice_count = 1\n"
        ),
        12,
        "clusters[0].least_request.choice_count",
        "must be 2 to 64",
    );
    assert_err(
        &format!(
            "{MINIMAL}lb_policy = \"least_request\"\n[clusters.least_request]\nactive_request_bias = -1.0\n"
        ),
        12,
        "clusters[0].least_request.active_request_bias",
        "finite number >= 0",
    );
    assert_err(
        &format!("{MINIMAL}lb_policy = \"least_request\"\nhash = \"md5\"\n"),
        11,
        "clusters[0].hash",
        "least_request hash nothing",
    );
    assert_err(
        &format!("{MINIMAL}lb_policy = \"least_request\"\n[clusters.least_request]\nchoices = 3\n"),
        12,
        "clusters[0].least_request.choices",
        "unknown field `choices`",
    );
}

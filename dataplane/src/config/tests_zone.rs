//! `read_policy = "local_zone_affinity*"`, `local_zone` and `zone_discovery`.

use super::tests::{MINIMAL, assert_err};
use super::*;

/// MINIMAL with the cluster made a Redis Cluster (line 10) and listener keys after line 4.
fn zoned(listener: &str, cluster: &str) -> String {
    let text = MINIMAL.replacen(
        "op_timeout = \"1s\"",
        &format!("op_timeout = \"1s\"\n{listener}"),
        1,
    );
    format!("{text}type = \"redis_cluster\"\n{cluster}")
}

#[test]
fn zone_policies_parse() {
    for (name, policy) in [
        ("local_zone_affinity", ReadPolicy::LocalZoneAffinity),
        (
            "local_zone_affinity_replicas_and_primary",
            ReadPolicy::LocalZoneAffinityReplicasAndPrimary,
        ),
    ] {
        let text = zoned(
            &format!("read_policy = \"{name}\"\nlocal_zone = \"us-east-1a\""),
            "zone_discovery = true\n",
        );
        let c = parse(&text, "t.toml").unwrap();
        assert_eq!(c.listeners[0].read_policy, policy);
        assert_eq!(c.listeners[0].local_zone.as_deref(), Some("us-east-1a"));
        assert!(c.clusters[0].redis_cluster.zone_discovery);
    }
    let c = parse(&zoned("", ""), "t.toml").unwrap();
    assert_eq!(c.listeners[0].local_zone, None);
    assert!(!c.clusters[0].redis_cluster.zone_discovery);
}

#[test]
fn zone_policy_mistakes() {
    // A zone policy without local_zone: names both keys.
    assert_err(
        &zoned(
            "read_policy = \"local_zone_affinity\"",
            "zone_discovery = true\n",
        ),
        5,
        "listeners[0].read_policy",
        "needs listeners[0].local_zone",
    );
    // local_zone without a zone policy would be ignored.
    assert_err(
        &zoned("local_zone = \"a\"", "zone_discovery = true\n"),
        5,
        "listeners[0].local_zone",
        "applies only with read_policy",
    );
    assert_err(
        &zoned(
            "read_policy = \"local_zone_affinity\"\nlocal_zone = \"\"",
            "zone_discovery = true\n",
        ),
        6,
        "listeners[0].local_zone",
        "must not be empty",
    );
    // No zone_discovery on the routed cluster.
    assert_err(
        &zoned(
            "read_policy = \"local_zone_affinity_replicas_and_primary\"\nlocal_zone = \"a\"",
            "",
        ),
        5,
        "listeners[0].read_policy",
        "clusters[0].zone_discovery = true",
    );
    // zone_discovery on a static cluster.
    assert_err(
        &format!("{MINIMAL}zone_discovery = true\n"),
        10,
        "clusters[0].zone_discovery",
        "applies only to type = \"redis_cluster\"",
    );
}

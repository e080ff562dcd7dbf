//! The node's zone and the zone read policies, from an Envoy YAML bootstrap.

use super::parse;
use super::tests_corpus::redis_cluster;
use crate::translate::static_config_in_zone;

#[test]
fn node_zone_and_old_and_new_policy_names() {
    for (name, want) in [
        ("AZ_AFFINITY", "local_zone_affinity"),
        ("az_affinity", "local_zone_affinity"),
        ("LOCAL_ZONE_AFFINITY", "local_zone_affinity"),
        (
            "AZ_AFFINITY_REPLICAS_AND_PRIMARY",
            "local_zone_affinity_replicas_and_primary",
        ),
        (
            "LOCAL_ZONE_AFFINITY_REPLICAS_AND_PRIMARY",
            "local_zone_affinity_replicas_and_primary",
        ),
    ] {
        let yaml = format!(
            "node:\n  id: n1\n  locality: {{region: us-east-1, zone: us-east-1b}}\n{}",
            redis_cluster(
                &format!("            read_policy: {name}\n"),
                "            enable_zone_discovery: true\n",
                "",
            )
        );
        let sr = parse(&yaml, true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sr.local_zone.as_deref(), Some("us-east-1b"));
        let t = static_config_in_zone(&sr.listeners, &sr.clusters, sr.local_zone.as_deref())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.contains(&format!("read_policy = \"{want}\"")), "{t}");
        assert!(t.contains("local_zone = \"us-east-1b\""), "{t}");
        assert!(t.contains("zone_discovery = true"), "{t}");
    }
    // No node: no zone.
    let sr = parse(&redis_cluster("", "", ""), true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sr.local_zone, None);
}

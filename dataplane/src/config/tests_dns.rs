use std::time::Duration;

use super::tests::{MINIMAL, assert_err};
use super::*;

fn dns(lines: &str) -> String {
    MINIMAL.replacen(r#"hosts = ["127.0.0.1:7001"]"#, lines, 1)
}

#[test]
fn strict_dns_names_are_not_resolved_at_load() {
    let c = parse(
        &dns(
            "type = \"strict_dns\"\nhosts = [\"respite-none.invalid:7001\", \
              { address = \"[::1]:7002\", weight = 3 }]\ndns_refresh_rate = \"250ms\"\n\
              dns_lookup_family = \"v4_only\"",
        ),
        "t.toml",
    )
    .expect("parses");
    let cl = &c.clusters[0];
    assert_eq!(cl.cluster_type, ClusterType::StrictDns);
    assert!(cl.hosts.is_empty());
    let d = cl.dns.as_ref().expect("dns");
    assert_eq!(d.dns_refresh_rate, Duration::from_millis(250));
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::V4Only);
    assert_eq!(
        d.targets,
        vec![
            DnsTarget {
                host: "respite-none.invalid".into(),
                port: 7001,
                weight: 1
            },
            DnsTarget {
                host: "::1".into(),
                port: 7002,
                weight: 3
            },
        ]
    );
}

#[test]
fn dns_defaults_are_envoys() {
    let c = parse(
        &dns("type = \"logical_dns\"\nhosts = [\"localhost:7001\"]"),
        "t.toml",
    )
    .expect("parses");
    let d = c.clusters[0].dns.as_ref().expect("dns");
    assert_eq!(d.dns_refresh_rate, Duration::from_secs(5));
    assert_eq!(d.dns_lookup_family, DnsLookupFamily::Auto);
    assert!(parse(MINIMAL, "t.toml").unwrap().clusters[0].dns.is_none());
}

#[test]
fn bad_dns_clusters_name_the_key() {
    assert_err(
        &dns("type = \"logical_dns\"\nhosts = [\"a:1\", \"b:1\"]"),
        10,
        "clusters[0].hosts",
        "exactly one host",
    );
    assert_err(
        &dns("hosts = [\"127.0.0.1:7001\"]\ndns_refresh_rate = \"1s\""),
        10,
        "clusters[0].dns_refresh_rate",
        "applies only to type = \"strict_dns\" or \"logical_dns\"",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [\"a:1\"]\ndns_refresh_rate = \"0s\""),
        11,
        "clusters[0].dns_refresh_rate",
        "greater than zero",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [\"a b:1\"]"),
        10,
        "clusters[0].hosts[0]",
        "not allowed in a hostname",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [\"a:0\"]"),
        10,
        "clusters[0].hosts[0]",
        "port",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [\"a:1\", \"a:1\"]"),
        10,
        "clusters[0].hosts[1]",
        "duplicate host",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [{ address = \"a:1\", name = \"x\" }]"),
        10,
        "clusters[0].hosts[0].name",
        "not supported by respite",
    );
    assert_err(
        &dns("type = \"strict_dns\"\nhosts = [\"a:1\"]\ndns_lookup_family = \"v5\""),
        11,
        "clusters[0].dns_lookup_family",
        "unknown variant",
    );
}

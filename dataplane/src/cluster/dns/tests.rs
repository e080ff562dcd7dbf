use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::config::{DnsLookupFamily, DnsTarget};

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn spec(t: ClusterType, family: DnsLookupFamily, targets: &[(&str, u32)]) -> DnsSpec {
    DnsSpec {
        cluster_type: t,
        dns: DnsConfig {
            targets: targets
                .iter()
                .map(|(h, w)| DnsTarget {
                    host: h.to_string(),
                    port: 6379,
                    weight: *w,
                })
                .collect(),
            dns_refresh_rate: Duration::from_millis(20),
            dns_lookup_family: family,
        },
    }
}

/// A fake DNS: name → addresses (port taken from the query); absent names fail.
type Table = Arc<Mutex<HashMap<String, Vec<&'static str>>>>;

fn fake(table: Table) -> Arc<Lookup> {
    Arc::new(move |host: &str, port: u16| {
        let t = table.lock().unwrap();
        match t.get(host) {
            Some(ips) => Ok(ips
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
                .collect()),
            None => Err(io::Error::other("no such name")),
        }
    })
}

#[test]
fn families_follow_envoy() {
    let both = [a("10.0.0.1:1"), a("[::1]:1"), a("10.0.0.2:1")];
    let v4 = [a("10.0.0.1:1")];
    use DnsLookupFamily::*;
    assert_eq!(pick_family(Auto, &both), vec![a("[::1]:1")]);
    assert_eq!(pick_family(Auto, &v4), vec![a("10.0.0.1:1")]);
    assert_eq!(
        pick_family(V4Preferred, &both),
        vec![a("10.0.0.1:1"), a("10.0.0.2:1")]
    );
    assert_eq!(
        pick_family(V4Preferred, &[a("[::1]:1")]),
        vec![a("[::1]:1")]
    );
    assert_eq!(
        pick_family(V4Only, &[a("[::1]:1")]),
        Vec::<SocketAddr>::new()
    );
    assert_eq!(pick_family(V6Only, &both), vec![a("[::1]:1")]);
    assert_eq!(pick_family(All, &both), both.to_vec());
}

#[test]
fn strict_dns_hosts_are_every_address_with_the_name_weight_sorted_and_deduplicated() {
    let s = spec(
        ClusterType::StrictDns,
        DnsLookupFamily::V4Only,
        &[("b", 3), ("a", 1)],
    );
    let r = Resolved(vec![
        vec![a("10.0.0.9:6379"), a("10.0.0.1:6379")],
        vec![a("10.0.0.1:6379"), a("10.0.0.5:6379")],
    ]);
    let h = hosts(&s, &r);
    let got: Vec<(String, u32)> = h
        .iter()
        .map(|h| (h.address_text.clone(), h.weight))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.0.0.1:6379".to_string(), 3),
            ("10.0.0.5:6379".to_string(), 1),
            ("10.0.0.9:6379".to_string(), 3),
        ]
    );
    assert!(h.iter().all(|h| h.name.is_none()));
}

#[test]
fn logical_dns_takes_the_first_address() {
    let s = spec(ClusterType::LogicalDns, DnsLookupFamily::All, &[("x", 2)]);
    let r = Resolved(vec![vec![a("10.0.0.9:6379"), a("10.0.0.1:6379")]]);
    let h = hosts(&s, &r);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].address, a("10.0.0.9:6379"));
    assert_eq!(h[0].weight, 2);
    assert!(hosts(&s, &Resolved(vec![vec![]])).is_empty());
}

#[test]
fn a_failed_name_has_no_host_first_and_keeps_its_last_addresses_later() {
    let table: Table = Arc::default();
    let lookup = fake(table.clone());
    let s = spec(
        ClusterType::StrictDns,
        DnsLookupFamily::V4Only,
        &[("up", 1), ("later", 1)],
    );
    table.lock().unwrap().insert("up".into(), vec!["10.0.0.1"]);
    let (r, outcomes) = resolve(&s, None, &*lookup);
    assert_eq!(r.0, vec![vec![a("10.0.0.1:6379")], vec![]]);
    assert!(outcomes[0].is_ok());
    assert!(outcomes[1].as_ref().unwrap_err().contains("later:6379"));

    table
        .lock()
        .unwrap()
        .insert("later".into(), vec!["10.0.0.2", "::1"]);
    let (r, outcomes) = resolve(&s, Some(&r), &*lookup);
    assert_eq!(
        r.0,
        vec![vec![a("10.0.0.1:6379")], vec![a("10.0.0.2:6379")]]
    );
    assert!(outcomes.iter().all(Result::is_ok));

    // Gone from DNS, or left with only the wrong family: the last addresses stay.
    table.lock().unwrap().remove("up");
    table.lock().unwrap().insert("later".into(), vec!["::2"]);
    let (r2, outcomes) = resolve(&s, Some(&r), &*lookup);
    assert_eq!(r2, r);
    assert!(outcomes.iter().all(Result::is_err));
}

#[test]
fn resolver_thread_reports_changes_only_and_counts() {
    let table: Table = Arc::default();
    let store = Store::new();
    let resolver = Resolver::spawn(store.clone(), fake(table.clone()));
    let s = spec(ClusterType::StrictDns, DnsLookupFamily::V4Only, &[("n", 1)]);
    resolver.set(vec![("c".into(), s.clone(), Resolved(vec![vec![]]))]);
    // Unresolvable: failures counted, nothing reported.
    std::thread::sleep(Duration::from_millis(100));
    assert!(resolver.updates().is_empty());
    let count = |stat: &str| store.counter(&format!("cluster.c.{stat}"), DNS_SHARD).get();
    assert!(count("update_failure") >= 2, "{}", count("update_failure"));
    assert_eq!(count("update_success"), 0);

    table.lock().unwrap().insert("n".into(), vec!["10.0.0.7"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let update = loop {
        if let Some(u) = resolver.updates().pop() {
            break u;
        }
        assert!(Instant::now() < deadline, "no update");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(update.cluster, "c");
    assert_eq!(update.spec, s);
    assert_eq!(update.resolved.0, vec![vec![a("10.0.0.7:6379")]]);
    // The same answer again is no change.
    std::thread::sleep(Duration::from_millis(100));
    assert!(resolver.updates().is_empty());
    assert!(count("update_success") >= 2);
    assert!(count("update_attempt") >= 4);
}

//! Unit tests of discovery: the `CLUSTER SLOTS` parser on replies captured from a real Redis
//! 7.0 cluster and on malformed input, and the refresh decisions with a fake fetcher.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::parse_cluster_slots;
use super::refresh::{Outcome, Refresher, TriggerGate};
use crate::cluster::topology::{SlotMap, SlotShard, UNASSIGNED};
use crate::config::RedisClusterConfig;

/// Redis 7.0.15, `redis-cli --cluster create` of 6 nodes with `--cluster-replicas 1`, RESP2.
const RESP2_3X1: &[u8] = b"\
    *3\r\n\
    *4\r\n:0\r\n:5460\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n*0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n*0\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n*0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n*0\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n*0\r\n";

/// The same cluster after `HELLO 3`: metadata is a map.
const RESP3_3X1: &[u8] = b"\
    *3\r\n\
    *4\r\n:0\r\n:5460\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n%0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n%0\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n%0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n%0\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n%0\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n%0\r\n";

/// The same cluster right after creation, before the replicas were known (3-element entries).
const RESP2_NO_REPLICAS: &[u8] = b"\
    *3\r\n*3\r\n:0\r\n:5460\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n*0\r\n*3\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n*0\r\n*3\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*0\r\n";

/// After resharding slots 0-9 to :31003 and setting `cluster-announce-hostname localhost` (RESP2 metadata pairs; :31002's hostname not yet gossiped).
const RESP2_SPLIT: &[u8] = b"\
    *4\r\n\
    *4\r\n:0\r\n:9\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10\r\n:5460\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n*2\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n";

/// The same, RESP3.
const RESP3_SPLIT: &[u8] = b"\
    *4\r\n\
    *4\r\n:0\r\n:9\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10\r\n:5460\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$9\r\n127.0.0.1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n%1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n";

/// The same, queried node with `cluster-preferred-endpoint-type hostname`: hostnames as endpoints, `?` for :31002 (no hostname known), `ip` in the metadata.
const RESP2_HOSTNAME: &[u8] = b"\
    *4\r\n\
    *4\r\n:0\r\n:9\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n:10\r\n:5460\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
    *4\r\n$9\r\nlocalhost\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";

/// The same with `cluster-preferred-endpoint-type unknown-endpoint`: NULL endpoints.
const RESP2_UNKNOWN_ENDPOINT: &[u8] = b"\
    *4\r\n\
    *4\r\n:0\r\n:9\r\n\
    *4\r\n$-1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$-1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10\r\n:5460\r\n\
    *4\r\n$-1\r\n:31001\r\n$40\r\nd1d6a9551ef1f81212a3bb16efcde2bc06a40323\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$-1\r\n:31006\r\n$40\r\nbe9460939d398de7c192969e27d93a33d137cf01\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:5461\r\n:10922\r\n\
    *4\r\n$-1\r\n:31002\r\n$40\r\ne7ad4536803d2c9e5ec80e5087c89810edc245ea\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$-1\r\n:31004\r\n$40\r\n8f9ee4a883e1e84b34bc7129046c9af356bee0ad\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n:10923\r\n:16383\r\n\
    *4\r\n$-1\r\n:31003\r\n$40\r\n85cb7743e0d334fadebdee82e66fb3176d99cbe9\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n\
    *4\r\n$-1\r\n:31005\r\n$40\r\na1b6498492c9ae69eb099b0b3e3d8e88bab5c81c\r\n\
    *4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$9\r\nlocalhost\r\n";

fn a(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One shard of a test map: primary, replicas, slot ranges.
type ShardSpec<'a> = (SocketAddr, &'a [SocketAddr], &'a [(u16, u16)]);

/// A map of the given shards, in the order given.
fn map(shards: &[ShardSpec<'_>]) -> SlotMap {
    let mut m = SlotMap::empty();
    for (i, (primary, replicas, ranges)) in shards.iter().enumerate() {
        m.shards.push(SlotShard {
            primary: *primary,
            replicas: replicas.to_vec(),
        });
        for &(start, end) in *ranges {
            for s in start..=end {
                m.slots[usize::from(s)] = i as u16;
            }
        }
    }
    m
}

/// The cluster of the captures: :31001-3 primaries with replicas :31006, :31004, :31005.
fn captured_3x1() -> SlotMap {
    map(&[
        (a(31001), &[a(31006)], &[(0, 5460)]),
        (a(31002), &[a(31004)], &[(5461, 10922)]),
        (a(31003), &[a(31005)], &[(10923, 16383)]),
    ])
}

/// The captured cluster after slots 0-9 moved to :31003.
fn captured_split() -> SlotMap {
    map(&[
        (a(31003), &[a(31005)], &[(0, 9), (10923, 16383)]),
        (a(31001), &[a(31006)], &[(10, 5460)]),
        (a(31002), &[a(31004)], &[(5461, 10922)]),
    ])
}

const QUERIED: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 31001);

#[test]
fn parses_a_real_resp2_reply() {
    assert_eq!(parse_cluster_slots(RESP2_3X1, QUERIED), Ok(captured_3x1()));
}

#[test]
fn parses_a_real_resp3_reply_with_metadata_maps() {
    assert_eq!(parse_cluster_slots(RESP3_3X1, QUERIED), Ok(captured_3x1()));
}

#[test]
fn parses_entries_without_replicas() {
    let m = parse_cluster_slots(RESP2_NO_REPLICAS, QUERIED).expect("parses");
    assert!(m.same_primaries(&captured_3x1()));
    assert!(m.shards.iter().all(|s| s.replicas.is_empty()));
}

#[test]
fn a_primary_with_two_ranges_is_one_shard_ordered_by_first_slot() {
    assert_eq!(
        parse_cluster_slots(RESP2_SPLIT, QUERIED),
        Ok(captured_split())
    );
    assert_eq!(
        parse_cluster_slots(RESP3_SPLIT, QUERIED),
        Ok(captured_split())
    );
}

#[test]
fn ranges_listed_out_of_slot_order_are_sorted() {
    let reply = b"*2\r\n\
        *3\r\n:100\r\n:200\r\n*2\r\n$8\r\n10.0.0.2\r\n:7000\r\n\
        *3\r\n:0\r\n:99\r\n*2\r\n$8\r\n10.0.0.1\r\n:7000\r\n";
    let m = parse_cluster_slots(reply, QUERIED).expect("parses");
    let p = |ip: [u8; 4]| SocketAddr::from((ip, 7000));
    assert_eq!(m.shards[0].primary, p([10, 0, 0, 1]));
    assert_eq!(m.shards[1].primary, p([10, 0, 0, 2]));
    assert_eq!(
        (m.slots[0], m.slots[99], m.slots[100], m.slots[200]),
        (0, 0, 1, 1)
    );
    assert_eq!(m.slots[201], UNASSIGNED);
}

#[test]
fn hostname_endpoints_are_resolved_and_question_mark_uses_the_metadata_ip() {
    let m = parse_cluster_slots(RESP2_HOSTNAME, QUERIED).expect("parses");
    let ports: Vec<u16> = m.shards.iter().map(|s| s.primary.port()).collect();
    assert_eq!(ports, [31003, 31001, 31002]);
    // "localhost" may resolve to 127.0.0.1 or ::1; either is this host.
    for s in &m.shards {
        assert!(s.primary.ip().is_loopback(), "{}", s.primary);
        assert_eq!(s.replicas.len(), 1);
    }
    // :31002 had no hostname ("?"): its metadata ip is used.
    assert_eq!(m.shards[2].primary, a(31002));
    assert_eq!(m.slots, captured_split().slots);
}

#[test]
fn null_endpoints_mean_the_queried_host() {
    let queried = SocketAddr::from(([10, 1, 2, 3], 31001));
    let m = parse_cluster_slots(RESP2_UNKNOWN_ENDPOINT, queried).expect("parses");
    let mut want = captured_split();
    for s in &mut want.shards {
        s.primary.set_ip(queried.ip());
        s.replicas.iter_mut().for_each(|r| r.set_ip(queried.ip()));
    }
    assert_eq!(m, want);
}

#[test]
fn empty_and_question_mark_endpoints_without_metadata_mean_the_queried_host() {
    let reply = b"*1\r\n*4\r\n:0\r\n:16383\r\n\
        *3\r\n$0\r\n\r\n:7000\r\n$2\r\nid\r\n\
        *2\r\n$1\r\n?\r\n:7001\r\n";
    let queried = SocketAddr::from(([10, 9, 8, 7], 1));
    let m = parse_cluster_slots(reply, queried).expect("parses");
    assert_eq!(m.shards[0].primary, SocketAddr::from(([10, 9, 8, 7], 7000)));
    assert_eq!(
        m.shards[0].replicas,
        [SocketAddr::from(([10, 9, 8, 7], 7001))]
    );
}

#[test]
fn ipv6_endpoints_and_simple_strings() {
    let reply = b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n+::1\r\n:7000\r\n";
    let m = parse_cluster_slots(reply, QUERIED).expect("parses");
    assert_eq!(
        m.shards[0].primary,
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 7000)
    );
}

#[test]
fn an_unresolvable_replica_is_skipped_an_unresolvable_primary_is_an_error() {
    let replica = b"*1\r\n*4\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n\
        *2\r\n$20\r\nno-such-host.invalid\r\n:7001\r\n";
    let m = parse_cluster_slots(replica, QUERIED).expect("parses");
    assert_eq!(m.shards[0].primary, a(7000));
    assert!(m.shards[0].replicas.is_empty());
    let primary = b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$20\r\nno-such-host.invalid\r\n:7000\r\n";
    let e = parse_cluster_slots(primary, QUERIED).expect_err("unresolvable primary");
    assert!(e.contains("no-such-host.invalid"), "{e}");
}

#[test]
fn an_empty_array_is_an_empty_map() {
    assert_eq!(
        parse_cluster_slots(b"*0\r\n", QUERIED),
        Ok(SlotMap::empty())
    );
}

#[test]
fn malformed_replies_are_errors() {
    let node = "*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
    let entry = |start: &str, end: &str| format!("*3\r\n{start}\r\n{end}\r\n{node}");
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "incomplete"),
        (
            "-ERR This instance has cluster support disabled\r\n".into(),
            "cluster support disabled",
        ),
        ("!21\r\nSYNTAX invalid syntax\r\n".into(), "error reply"),
        ("+OK\r\n".into(), "expected an array"),
        ("*-1\r\n".into(), "expected an array"),
        ("_\r\n".into(), "expected an array"),
        ("%1\r\n:1\r\n:2\r\n".into(), "expected an array"),
        ("*1\r\n:1\r\n".into(), "entry 0: expected an array"),
        (
            "*1\r\n*2\r\n:0\r\n:1\r\n".to_string(),
            "expected start, end and a primary",
        ),
        (format!("*1\r\n{}", entry(":5", ":4")), "reversed"),
        (format!("*1\r\n{}", entry(":0", ":16384")), "out of range"),
        (format!("*1\r\n{}", entry(":-1", ":4")), "out of range"),
        (
            format!("*1\r\n{}", entry("$1\r\n0", ":4")),
            "expected a slot number",
        ),
        (
            format!("*2\r\n{}{}", entry(":0", ":10"), entry(":10", ":20")),
            "listed twice",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$9\r\n127.0.0.1\r\n".into(),
            "expected endpoint and port",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n".into(),
            "port 0",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$9\r\n127.0.0.1\r\n:65536\r\n".into(),
            "port 65536",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000\r\n".into(),
            "port number",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:7000\r\n".into(),
            "expected a string",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$?\r\n;1\r\nx\r\n;0\r\n:7000\r\n".into(),
            "expected a string",
        ),
        (
            "*1\r\n*3\r\n:0\r\n:1\r\n*4\r\n$1\r\nx\r\n:7000\r\n$1\r\ni\r\n:5\r\n".into(),
            "metadata",
        ),
        (
            "*1\r\n*4\r\n:0\r\n:1\r\n".to_string() + node + ":7\r\n",
            "replica 0",
        ),
        ("*2\r\n*0\r\n".into(), "incomplete"),
        ("*1\r\n*0\r\n\r\n".into(), "trailing bytes"),
        ("*1\r\n&x\r\n".into(), "malformed"),
    ];
    for (reply, want) in cases {
        match parse_cluster_slots(reply.as_bytes(), QUERIED) {
            Err(e) => assert!(e.contains(want), "{reply:?}: {e:?} does not say {want:?}"),
            Ok(m) => panic!("{reply:?} parsed: {m:?}"),
        }
    }
}

#[test]
fn a_non_utf8_endpoint_is_an_error() {
    let reply = b"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$2\r\n\xff\xfe\r\n:7000\r\n";
    let e = parse_cluster_slots(reply, QUERIED).expect_err("not UTF-8");
    assert!(e.contains("UTF-8"), "{e}");
}

#[test]
fn every_truncation_of_a_real_reply_is_an_error() {
    for reply in [RESP2_3X1, RESP3_SPLIT, RESP2_HOSTNAME] {
        for len in 0..reply.len() {
            assert!(
                parse_cluster_slots(&reply[..len], QUERIED).is_err(),
                "{len}"
            );
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_cluster_slots(&bytes, QUERIED);
    }

    #[test]
    fn mutated_real_replies_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut reply = [RESP2_3X1, RESP3_3X1, RESP2_SPLIT, RESP2_UNKNOWN_ENDPOINT][which].to_vec();
        for (at, byte, op) in edits {
            let i = at.index(reply.len() + 1);
            match op {
                0 if i < reply.len() => reply[i] = byte,
                1 => reply.insert(i, byte),
                _ => reply.truncate(i),
            }
        }
        let _ = parse_cluster_slots(&reply, QUERIED);
    }
}

/// A fake cluster: what each node answers, and who was asked, in order.
struct Fake {
    answers: HashMap<SocketAddr, Result<SlotMap, String>>,
    asked: Vec<SocketAddr>,
}

impl Fake {
    fn new(answers: &[(SocketAddr, Result<SlotMap, String>)]) -> Fake {
        Fake {
            answers: answers.iter().cloned().collect(),
            asked: Vec::new(),
        }
    }
    fn fetch(&mut self, node: SocketAddr) -> Result<SlotMap, String> {
        self.asked.push(node);
        self.answers
            .get(&node)
            .cloned()
            .unwrap_or_else(|| Err("connect: refused".into()))
    }
}

/// Every node of [`captured_3x1`] answering `m`.
fn all_answer(m: &SlotMap) -> Vec<(SocketAddr, Result<SlotMap, String>)> {
    (31001..=31006).map(|p| (a(p), Ok(m.clone()))).collect()
}

/// [`captured_3x1`] after a failover of :31001 to its replica :31006.
fn failed_over() -> SlotMap {
    map(&[
        (a(31006), &[a(31001)], &[(0, 5460)]),
        (a(31002), &[a(31004)], &[(5461, 10922)]),
        (a(31003), &[a(31005)], &[(10923, 16383)]),
    ])
}

fn refresher(current: Option<SlotMap>, seed: u64) -> Refresher {
    Refresher::new(
        vec![a(31001)],
        current.map(Arc::new),
        fastrand::Rng::with_seed(seed),
    )
}

#[test]
fn the_first_map_is_published_at_once() {
    let mut r = refresher(None, 1);
    let mut fake = Fake::new(&all_answer(&captured_3x1()));
    let report = r.refresh(&mut |n| fake.fetch(n));
    assert_eq!(report.outcome, Outcome::First(Arc::new(captured_3x1())));
    assert_eq!(fake.asked, [a(31001)]);
}

#[test]
fn an_equal_map_changes_nothing() {
    let mut r = refresher(Some(captured_3x1()), 2);
    let mut fake = Fake::new(&all_answer(&captured_3x1()));
    let report = r.refresh(&mut |n| fake.fetch(n));
    assert_eq!(report.outcome, Outcome::Unchanged);
    assert_eq!(fake.asked.len(), 1);
}

#[test]
fn a_replicas_only_change_is_published_without_confirmation() {
    let mut fewer = captured_3x1();
    fewer.shards[1].replicas.clear();
    let mut r = refresher(Some(captured_3x1()), 3);
    let mut fake = Fake::new(&all_answer(&fewer));
    let report = r.refresh(&mut |n| fake.fetch(n));
    assert_eq!(report.outcome, Outcome::Replicas(Arc::new(fewer.clone())));
    assert_eq!(fake.asked.len(), 1);
    assert_eq!(r.current().map(|m| &**m), Some(&fewer));
}

#[test]
fn a_primaries_change_confirmed_by_a_new_primary_is_published() {
    for seed in 0..20 {
        let mut r = refresher(Some(captured_3x1()), seed);
        let mut fake = Fake::new(&all_answer(&failed_over()));
        let mut failures = Vec::new();
        let outcome = r.decide(
            a(31002),
            failed_over(),
            &mut |n| fake.fetch(n),
            &mut failures,
        );
        assert_eq!(outcome, Outcome::Changed(Arc::new(failed_over())));
        // Confirmed by a primary of the new map other than the node that reported it.
        assert_eq!(fake.asked.len(), 1);
        assert!(
            [a(31006), a(31003)].contains(&fake.asked[0]),
            "{:?}",
            fake.asked
        );
        assert!(failures.is_empty());
    }
}

#[test]
fn a_primaries_change_the_confirming_node_disagrees_with_is_not_published() {
    let mut r = refresher(Some(captured_3x1()), 4);
    // Only :31002 believes in the failover; every other node still has the old map.
    let mut answers = all_answer(&captured_3x1());
    answers.retain(|(n, _)| *n != a(31002));
    let mut fake = Fake::new(&answers);
    let mut failures = Vec::new();
    let outcome = r.decide(
        a(31002),
        failed_over(),
        &mut |n| fake.fetch(n),
        &mut failures,
    );
    assert!(
        matches!(outcome, Outcome::Unconfirmed { from, by: Some(by) } if from == a(31002) && by != from),
        "{outcome:?}"
    );
    assert_eq!(r.current().map(|m| &**m), Some(&captured_3x1()));
}

#[test]
fn a_primaries_change_nobody_else_answers_for_is_not_published() {
    let mut r = refresher(Some(captured_3x1()), 5);
    let mut fake = Fake::new(&[]);
    let mut failures = Vec::new();
    let outcome = r.decide(
        a(31002),
        failed_over(),
        &mut |n| fake.fetch(n),
        &mut failures,
    );
    assert_eq!(
        outcome,
        Outcome::Unconfirmed {
            from: a(31002),
            by: None
        }
    );
    // Everyone but the reporting node was tried: the new map's nodes and the old map's.
    assert_eq!(failures.len(), 5);
    assert!(!fake.asked.contains(&a(31002)));
    assert_eq!(r.current().map(|m| &**m), Some(&captured_3x1()));
}

#[test]
fn a_node_in_a_minority_partition_cannot_flip_the_map() {
    // :31005 sees itself as primary of everything; the rest agree on the current map.
    let lone = map(&[(a(31005), &[], &[(0, 16383)])]);
    let mut answers = all_answer(&captured_3x1());
    answers.retain(|(n, _)| *n != a(31005));
    answers.push((a(31005), Ok(lone)));
    let mut fake = Fake::new(&answers);
    let mut r = refresher(Some(captured_3x1()), 6);
    let mut unconfirmed = 0;
    for _ in 0..200 {
        match r.refresh(&mut |n| fake.fetch(n)).outcome {
            Outcome::Unchanged => {}
            Outcome::Unconfirmed { from, .. } => {
                assert_eq!(from, a(31005));
                unconfirmed += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(unconfirmed > 0, "the lone node was never asked");
    assert_eq!(r.current().map(|m| &**m), Some(&captured_3x1()));
}

#[test]
fn failing_nodes_fall_back_to_the_other_nodes_then_the_seeds() {
    let seed_node = a(40000);
    let mut answers: Vec<_> = (31001..=31006)
        .map(|p| (a(p), Err(format!("node {p} down"))))
        .collect();
    answers.push((seed_node, Ok(captured_3x1())));
    let mut fake = Fake::new(&answers);
    let mut r = Refresher::new(
        vec![seed_node],
        Some(Arc::new(captured_3x1())),
        fastrand::Rng::with_seed(7),
    );
    let report = r.refresh(&mut |n| fake.fetch(n));
    // Unless the random first pick was the seed, every map node was tried before it.
    if fake.asked[0] != seed_node {
        assert_eq!(fake.asked.len(), 7);
        assert_eq!(fake.asked[6], seed_node);
        assert_eq!(report.failures.len(), 6);
    }
    assert_eq!(report.outcome, Outcome::Unchanged);

    let mut dead = Fake::new(&[]);
    let report = r.refresh(&mut |n| dead.fetch(n));
    assert_eq!(report.outcome, Outcome::NoAnswer);
    assert_eq!(report.failures.len(), 7);
}

#[test]
fn a_map_without_slots_counts_as_a_failure() {
    let mut r = Refresher::new(vec![a(1), a(2)], None, fastrand::Rng::with_seed(8));
    let mut fake = Fake::new(&[(a(1), Ok(SlotMap::empty())), (a(2), Ok(captured_3x1()))]);
    let report = r.refresh(&mut |n| fake.fetch(n));
    assert_eq!(report.outcome, Outcome::First(Arc::new(captured_3x1())));
    if fake.asked[0] == a(1) {
        assert_eq!(
            report.failures,
            [(a(1), "the node serves no slots".to_string())]
        );
    }
}

#[test]
fn the_first_node_asked_is_random_over_all_known_nodes() {
    let seeds = vec![a(40000), a(31001)];
    let mut r = Refresher::new(
        seeds,
        Some(Arc::new(captured_3x1())),
        fastrand::Rng::with_seed(9),
    );
    let mut firsts = std::collections::HashSet::new();
    for _ in 0..500 {
        let order = r.query_order();
        // Every known node exactly once, the seed-only node last unless picked first.
        assert_eq!(order.len(), 7);
        let unique: std::collections::HashSet<_> = order.iter().collect();
        assert_eq!(unique.len(), 7);
        if order[0] != a(40000) {
            assert_eq!(order[6], a(40000));
        }
        firsts.insert(order[0]);
    }
    assert_eq!(firsts.len(), 7);
}

fn gate(redirects: u32, failures: u32, interval: Duration) -> TriggerGate {
    TriggerGate::new(&RedisClusterConfig {
        redirect_refresh_threshold: redirects,
        failure_refresh_threshold: failures,
        redirect_refresh_interval: interval,
        ..RedisClusterConfig::default()
    })
}

#[test]
fn triggers_accumulate_up_to_a_threshold_and_restart() {
    let t = Instant::now();
    let mut g = gate(5, 3, Duration::ZERO);
    assert!(!g.observe(t, 3, 0));
    assert!(g.observe(t, 2, 0), "5 redirects");
    assert!(
        !g.observe(t, 4, 2),
        "counts restart after a triggered refresh"
    );
    assert!(g.observe(t, 0, 1), "3 failures");
    assert!(!g.observe(t, 0, 0));
}

#[test]
fn a_zero_threshold_never_triggers() {
    let t = Instant::now();
    let mut g = gate(0, 0, Duration::ZERO);
    assert!(!g.observe(t, u32::MAX, u32::MAX));
    let mut g = gate(0, 1, Duration::ZERO);
    assert!(!g.observe(t, 1000, 0));
    assert!(g.observe(t, 0, 1));
}

#[test]
fn triggers_inside_the_interval_are_dropped() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(5);
    let mut g = gate(5, 0, interval);
    assert!(g.observe(t0, 5, 0), "the first trigger is not held back");
    assert!(!g.observe(t0 + Duration::from_secs(1), 100, 0));
    // The 100 redirects inside the gap were dropped, not saved up.
    assert!(!g.observe(t0 + interval, 4, 0));
    assert!(g.observe(t0 + interval, 1, 0));
}

#[test]
fn a_refresh_that_changed_nothing_shortens_the_gap() {
    let t0 = Instant::now();
    let interval = Duration::from_secs(5);
    let mut g = gate(0, 1, interval);
    assert!(g.observe(t0, 0, 1));
    g.refreshed(false);
    // A primary died: failures keep coming while the cluster fails over.
    assert!(!g.observe(t0 + Duration::from_millis(400), 0, 1));
    assert!(g.observe(t0 + super::refresh::RETRIGGER_GAP, 0, 1));
    g.refreshed(true);
    // Once a refresh found the new map, the full interval applies again.
    assert!(!g.observe(t0 + Duration::from_secs(2), 0, 1));
    assert!(g.observe(t0 + super::refresh::RETRIGGER_GAP + interval, 0, 1));
}

#[test]
fn degraded_hosts_trigger_a_refresh_at_their_threshold() {
    let mut g = TriggerGate::new(&RedisClusterConfig {
        redirect_refresh_threshold: 5,
        failure_refresh_threshold: 0,
        host_degraded_refresh_threshold: 2,
        redirect_refresh_interval: Duration::from_secs(5),
        ..RedisClusterConfig::default()
    });
    let t = Instant::now();
    assert_eq!(
        g.observe_all(t, 0, 100, 1),
        None,
        "failures off, one degraded host"
    );
    assert_eq!(
        g.observe_all(t, 0, 0, 1),
        Some(super::refresh::Trigger::HostDegraded)
    );
    assert_eq!(g.observe_all(t, 0, 0, 5), None, "inside the gap: dropped");
    let later = t + Duration::from_secs(5);
    assert_eq!(
        g.observe_all(later, 5, 0, 0),
        Some(super::refresh::Trigger::Errors)
    );
}

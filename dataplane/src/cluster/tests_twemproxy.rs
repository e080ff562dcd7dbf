//! twemproxy's modula and random distributions, its `hash_tag`, and `hash` under ketama.

use std::collections::HashSet;

use super::*;
use crate::config::{HostConfig, KeyHash, LbPolicy};

fn hosts(weights: &[u32]) -> Vec<HostConfig> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &weight)| {
            let text = format!("127.0.0.1:{}", 7001 + i);
            HostConfig {
                address: text.parse().expect("addr"),
                address_text: text,
                weight,
                name: None,
            }
        })
        .collect()
}

#[test]
fn modula_is_hash_mod_total_weight_over_weight_repeated_hosts() {
    // nc_modula.c with weights 1, 2, 3: continuum [h0, h1, h1, h2, h2, h2], entry hash % 6.
    // Hashes from the twemproxy C vectors (hashkit/tests.rs): fnv1a_64("foo") = 0xfed9d577
    // (% 6 = 5), ("key1") = 0x5cbda787 (1), md5("key1") = 0x94d6adc2 (0), jenkins("user:100")
    // = 0xc42212f0 (2).
    let hs = hosts(&[1, 2, 3]);
    let lb = LoadBalancer::with_hash(LbPolicy::Modula, KeyHash::Fnv1a64, &hs);
    assert_eq!(lb.pick(b"foo"), 2);
    assert_eq!(lb.pick(b"key1"), 1);
    let lb = LoadBalancer::with_hash(LbPolicy::Modula, KeyHash::Md5, &hs);
    assert_eq!(lb.pick(b"key1"), 0);
    assert_eq!(lb.pick(b"foo"), 2); // 0xdb18bdac % 6 = 4
    let lb = LoadBalancer::with_hash(LbPolicy::Modula, KeyHash::Jenkins, &hs);
    assert_eq!(lb.pick(b"user:100"), 1);
    // An empty key hashes to 0: the first entry (server_pool_hash).
    assert_eq!(lb.pick(b""), 0);
    // Every key against a brute-force continuum.
    let table = [0usize, 1, 1, 2, 2, 2];
    for hash in [
        KeyHash::Crc32,
        KeyHash::Murmur,
        KeyHash::Hsieh,
        KeyHash::Fnv1_32,
    ] {
        let lb = LoadBalancer::with_hash(LbPolicy::Modula, hash, &hs);
        for i in 0..2000 {
            let key = format!("k:{i}");
            let want = table[(hashkit::key_hash(hash, key.as_bytes()) % 6) as usize];
            assert_eq!(lb.pick(key.as_bytes()), want, "{hash:?} {key}");
        }
    }
    // One server: always it, unhashed.
    let lb = LoadBalancer::with_hash(LbPolicy::Modula, KeyHash::Md5, &hosts(&[5]));
    assert_eq!(lb.pick(b"anything"), 0);
}

#[test]
fn ketama_hash_changes_only_the_key_hash() {
    let hs = hosts(&[1, 1, 1]);
    let fnv = LoadBalancer::new(LbPolicy::Ketama, &hs);
    let md5 = LoadBalancer::with_hash(LbPolicy::Ketama, KeyHash::Md5, &hs);
    let k = ketama::Ketama::new(&hs, &[1, 1, 1], KeyHash::Md5);
    let f = ketama::Ketama::new(&hs, &[1, 1, 1], KeyHash::Fnv1a64);
    assert_eq!(k.len(), f.len());
    let mut differ = 0;
    for i in 0..2000 {
        let key = format!("key:{i}");
        assert_eq!(md5.pick(key.as_bytes()), k.pick(key.as_bytes()));
        assert_eq!(fnv.pick(key.as_bytes()), f.pick(key.as_bytes()));
        differ += usize::from(md5.pick(key.as_bytes()) != fnv.pick(key.as_bytes()));
    }
    // Two unrelated hashes agree on about a third of the keys over three equal hosts.
    assert!((1000..1700).contains(&differ), "{differ}");
}

#[test]
fn random_follows_the_draw_and_ignores_weights() {
    let hs = hosts(&[1, 5, 1]);
    let lb = LoadBalancer::with_hash(LbPolicy::Random, KeyHash::Md5, &hs);
    assert!(lb.is_non_hashing());
    for draw in 0..9u64 {
        random::set_draw(draw);
        // Every key of one draw goes to the same host: nc_random.c lists each server once.
        let want = (draw % 3) as usize;
        for key in [&b"a"[..], b"b", b"", b"{x}y"] {
            assert_eq!(lb.pick(key), want);
        }
    }
    let mut seen = HashSet::new();
    for _ in 0..200 {
        random::set_draw(random::new_draw());
        seen.insert(lb.pick(b"k"));
    }
    assert_eq!(seen, HashSet::from([0, 1, 2]));
    assert!(!LoadBalancer::new(LbPolicy::Modula, &hs).is_non_hashing());
}

#[test]
fn round_robin_takes_turns_per_draw_and_ignores_keys() {
    let hs = hosts(&[1, 1, 0, 1]);
    let lb = LoadBalancer::new(LbPolicy::RoundRobin, &hs);
    assert!(lb.is_non_hashing());
    let mut order = Vec::new();
    for _ in 0..6 {
        random::set_draw(random::new_draw());
        let host = lb.pick(b"a");
        // One draw (one client command): every key to the same host.
        for key in [&b"b"[..], b"", b"{x}y"] {
            assert_eq!(lb.pick(key), host);
        }
        order.push(host);
    }
    // Weight 0 takes no turn; the others in config order, from wherever the worker's turn is.
    let start = order.iter().position(|&h| h == 0).unwrap_or(0);
    let turns: Vec<usize> = order.iter().cycle().skip(start).take(3).copied().collect();
    assert_eq!(turns, [0, 1, 3]);
    assert_eq!(order.get(..3), order.get(3..));
}

#[test]
fn hash_tag_follows_server_pool_idx() {
    let t = Some(*b"{}");
    assert_eq!(hash_tag(None, b"{a}b"), b"{a}b");
    assert_eq!(hash_tag(t, b"{user1000}.following"), b"user1000");
    assert_eq!(hash_tag(t, b"foo{}{bar}"), b"foo{}{bar}"); // empty tag: whole key
    assert_eq!(hash_tag(t, b"open{only"), b"open{only"); // no closer: whole key
    assert_eq!(hash_tag(t, b"{a{b}c"), b"a{b");
    assert_eq!(hash_tag(t, b""), b"");
    // "{}" is exactly the Redis Cluster rule.
    for key in [&b"a{b}c"[..], b"{}x", b"}{x}", b"{{x}}", b"x{y"] {
        assert_eq!(hash_tag(t, key), hashtag(key));
    }
    // Same character both ends: between its first two occurrences.
    let colons = Some(*b"::");
    assert_eq!(hash_tag(colons, b"user:42:name"), b"42");
    assert_eq!(hash_tag(colons, b"user::name"), b"user::name");
    assert_eq!(hash_tag(colons, b"user:42"), b"user:42");
    assert_eq!(hash_tag(colons, b"a:b:c:d"), b"b");
    let angle = Some(*b"<>");
    assert_eq!(hash_tag(angle, b"x>y<z>"), b"z");
    assert_eq!(hash_tag(angle, b"x<>y<z>"), b"x<>y<z>");
}

/// `on_unhealthy = "rehash"` (twemproxy's auto_eject_hosts): the same distribution and hash
/// rebuilt over the live hosts, as `modula_update` skips the dead servers.
#[test]
fn rehash_rebuilds_modula_with_the_same_hash() {
    use std::sync::Arc;

    use super::health::ClusterVersion;
    use super::host::SharedHost;

    let hs = hosts(&[1, 2, 3]);
    let version = Arc::new(ClusterVersion::default());
    let shared: Vec<Arc<SharedHost>> = hs
        .iter()
        .map(|h| {
            Arc::new(SharedHost {
                cluster: "c".into(),
                addr: h.address,
                health: health::HostHealth::new(version.clone()),
                connects: crate::upstream::ConnectLimiter::new(0),
            })
        })
        .collect();
    let full = LoadBalancer::with_hash(LbPolicy::Modula, KeyHash::Murmur, &hs);
    let r = rehash::Rehash::new(version, LbPolicy::Modula, KeyHash::Murmur, hs.clone());
    for i in 0..500 {
        let key = format!("k{i}");
        assert_eq!(
            r.pick(key.as_bytes(), &full, &shared),
            Some(full.pick(key.as_bytes()))
        );
    }
    // Host 1 (weight 2) fails its check: the continuum is [h0, h2, h2, h2], hash % 4.
    shared[1].health.set_check_failing(0, true);
    for i in 0..500 {
        let key = format!("k{i}");
        let h = hashkit::murmur(key.as_bytes());
        let want = [0, 2, 2, 2][(h % 4) as usize];
        assert_eq!(r.pick(key.as_bytes(), &full, &shared), Some(want), "{key}");
    }
}

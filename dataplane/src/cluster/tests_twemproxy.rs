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
    assert!(lb.is_random());
    for draw in 0..9u32 {
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
    assert!(!LoadBalancer::new(LbPolicy::Modula, &hs).is_random());
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

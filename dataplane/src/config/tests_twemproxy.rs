//! twemproxy keys: a cluster's `lb_policy` / `hash`, a listener's `hash_tag`.

use super::tests::{MINIMAL, assert_err};
use super::*;

fn ok(text: &str) -> Config {
    match parse(text, "t.toml") {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// MINIMAL with `line` added to the listener (after its line 4, `op_timeout`).
fn listener_with(line: &str) -> String {
    MINIMAL.replacen(
        "op_timeout = \"1s\"\n",
        &format!("op_timeout = \"1s\"\n{line}\n"),
        1,
    )
}

#[test]
fn hash_and_distributions_parse() {
    let c = ok(MINIMAL);
    assert_eq!(c.clusters[0].lb_policy, LbPolicy::Ketama);
    assert_eq!(c.clusters[0].hash, KeyHash::Fnv1a64);
    for (name, hash) in [
        ("one_at_a_time", KeyHash::OneAtATime),
        ("md5", KeyHash::Md5),
        ("crc16", KeyHash::Crc16),
        ("crc32", KeyHash::Crc32),
        ("crc32a", KeyHash::Crc32a),
        ("fnv1_64", KeyHash::Fnv1_64),
        ("fnv1a_64", KeyHash::Fnv1a64),
        ("fnv1_32", KeyHash::Fnv1_32),
        ("fnv1a_32", KeyHash::Fnv1a32),
        ("hsieh", KeyHash::Hsieh),
        ("murmur", KeyHash::Murmur),
        ("jenkins", KeyHash::Jenkins),
    ] {
        for (policy, lb) in [
            ("ketama", LbPolicy::Ketama),
            ("modula", LbPolicy::Modula),
            ("random", LbPolicy::Random),
        ] {
            let c = ok(&format!(
                "{MINIMAL}lb_policy = \"{policy}\"\nhash = \"{name}\"\n"
            ));
            assert_eq!(c.clusters[0].lb_policy, lb);
            assert_eq!(c.clusters[0].hash, hash);
        }
    }
    // NAMES (what respite-control's twemproxy import accepts) are exactly the serde names.
    let parsed: Vec<KeyHash> = KeyHash::NAMES
        .iter()
        .map(|n| ok(&format!("{MINIMAL}hash = \"{n}\"\n")).clusters[0].hash)
        .collect();
    let distinct: std::collections::HashSet<String> =
        parsed.iter().map(|h| format!("{h:?}")).collect();
    assert_eq!(distinct.len(), 12);
}

#[test]
fn hash_errors_name_the_key() {
    assert_err(
        &format!("{MINIMAL}hash = \"sha1\"\n"),
        10,
        "clusters[0].hash",
        "unknown variant `sha1`, expected one of `one_at_a_time`, `md5`, `crc16`, `crc32`, \
         `crc32a`, `fnv1_64`, `fnv1a_64`, `fnv1_32`, `fnv1a_32`, `hsieh`, `murmur`, `jenkins`",
    );
    for policy in ["ring_hash", "maglev"] {
        assert_err(
            &format!("{MINIMAL}lb_policy = \"{policy}\"\nhash = \"md5\"\n"),
            11,
            "clusters[0].hash",
            "ring_hash and maglev hash keys with Envoy's murmur2",
        );
    }
    assert_err(
        &format!("{MINIMAL}type = \"redis_cluster\"\nhash = \"crc16\"\n"),
        11,
        "clusters[0].hash",
        "does not apply to type \"redis_cluster\"",
    );
}

#[test]
fn hash_tag_parses_and_enable_hashtagging_means_braces() {
    assert_eq!(ok(MINIMAL).listeners[0].hash_tag, None);
    let c = ok(&listener_with("hash_tag = \"::\""));
    assert_eq!(c.listeners[0].hash_tag, Some(*b"::"));
    let c = ok(&listener_with("enable_hashtagging = true"));
    assert_eq!(c.listeners[0].hash_tag, Some(*b"{}"));
    let c = ok(&listener_with(
        "enable_hashtagging = true\nhash_tag = \"{}\"",
    ));
    assert_eq!(c.listeners[0].hash_tag, Some(*b"{}"));
    let c = ok(&listener_with(
        "enable_hashtagging = false\nhash_tag = \"<>\"",
    ));
    assert_eq!(c.listeners[0].hash_tag, Some(*b"<>"));
}

#[test]
fn hash_tag_errors_name_the_key() {
    for bad in ["{", "{}}", ""] {
        assert_err(
            &listener_with(&format!("hash_tag = \"{bad}\"")),
            5,
            "listeners[0].hash_tag",
            &format!(
                "must be exactly two characters (bytes), e.g. \"{{}}\"; got {} bytes",
                bad.len()
            ),
        );
    }
    // Two characters but three bytes.
    assert_err(
        &listener_with("hash_tag = \"é{\""),
        5,
        "listeners[0].hash_tag",
        "got 3 bytes",
    );
    assert_err(
        &listener_with("enable_hashtagging = true\nhash_tag = \"[]\""),
        6,
        "listeners[0].hash_tag",
        "conflicts with enable_hashtagging = true",
    );
}

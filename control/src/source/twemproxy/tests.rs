use super::*;
use respite::config::raw::{RawDuration, RawHost, RawHostTable, unspanned};
use respite::config::{KeyHash, LbPolicy, OnUnhealthy};

/// One pool `p` with these extra lines (indented by the caller's two spaces) after the
/// required keys.
fn one(extra: &str) -> String {
    format!(
        "p:\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n{extra}"
    )
}

/// The first pool of `text`, untranslated to TOML (no data plane check).
fn pool_of(text: &str) -> Result<Pool, String> {
    let root = yaml::parse(text)?;
    let Value::Map(pools) = &root.value else {
        panic!("not a map")
    };
    let (name, line, node) = &pools[0];
    pool::translate(name, *line, node)
}

fn dur(ms: &str) -> Option<respite::config::raw::Spanned<RawDuration>> {
    Some(unspanned(RawDuration::Text(ms.to_string())))
}

#[test]
fn required_keys_and_defaults() {
    let p = pool_of(&one("")).unwrap();
    assert_eq!(p.listener.name.get_ref(), "p");
    assert_eq!(p.listener.address.get_ref(), "127.0.0.1:22121");
    assert_eq!(p.listener.stat_prefix.as_ref().unwrap().get_ref(), "p");
    assert_eq!(
        p.listener.op_timeout.get_ref(),
        &RawDuration::Text("24h".into())
    );
    assert!(p.listener.downstream_auth_passwords.is_empty());
    assert!(p.listener.hash_tag.is_none());
    assert_eq!(p.cluster.name.get_ref(), "p");
    assert_eq!(p.cluster.hash, Some(unspanned(KeyHash::Fnv1a64)));
    assert_eq!(p.cluster.lb_policy, Some(unspanned(LbPolicy::Ketama)));
    assert_eq!(
        p.cluster.on_unhealthy.as_ref().unwrap().get_ref(),
        &OnUnhealthy::FailFast
    );
    assert!(p.cluster.outlier_detection.is_none());
    assert!(p.cluster.auth_password.is_none());
    assert!(p.cluster.connections_per_host.is_none());
    assert_eq!(
        p.cluster.hosts.get_ref()[0].get_ref(),
        &RawHost::Full(RawHostTable {
            address: unspanned("127.0.0.1:6379".into()),
            weight: Some(unspanned(1)),
            name: None,
        })
    );
    assert!(p.notes.is_empty());
}

#[test]
fn hash_distribution_hash_tag_timeout() {
    let p = pool_of(&one(
        "  hash: crc32a\n  distribution: modula\n  hash_tag: \"{}\"\n  timeout: 400\n",
    ))
    .unwrap();
    assert_eq!(p.cluster.hash, Some(unspanned(KeyHash::Crc32a)));
    assert_eq!(p.cluster.lb_policy, Some(unspanned(LbPolicy::Modula)));
    assert_eq!(p.listener.hash_tag, Some(unspanned("{}".to_string())));
    assert_eq!(
        p.listener.op_timeout.get_ref(),
        &RawDuration::Text("400ms".into())
    );
    let p = pool_of(&one(
        "  distribution: random\n  hash: murmur\n  timeout: 0\n",
    ))
    .unwrap();
    assert_eq!(p.cluster.lb_policy, Some(unspanned(LbPolicy::Random)));
    assert_eq!(p.cluster.hash, Some(unspanned(KeyHash::Murmur)));
    assert_eq!(
        p.listener.op_timeout.get_ref(),
        &RawDuration::Text("24h".into())
    );
}

#[test]
fn redis_auth_is_both_ends() {
    let p = pool_of(&one("  redis_auth: s3cret\n  redis_db: 0\n")).unwrap();
    assert_eq!(
        p.listener.downstream_auth_passwords,
        vec![unspanned("s3cret".to_string())]
    );
    assert_eq!(
        p.cluster.auth_password,
        Some(unspanned("s3cret".to_string()))
    );
}

#[test]
fn redis_db_is_the_clusters_db() {
    let p = pool_of(&one("  redis_db: 3\n")).unwrap();
    assert_eq!(p.cluster.db, Some(unspanned(3)));
    let p = pool_of(&one("  redis_db: 0\n")).unwrap();
    assert_eq!(p.cluster.db, None);
}

#[test]
fn auto_eject_hosts_is_outlier_detection_and_rehash() {
    let p = pool_of(&one("  auto_eject_hosts: true\n")).unwrap();
    let o = p.cluster.outlier_detection.as_ref().unwrap().get_ref();
    assert_eq!(o.consecutive_5xx, Some(unspanned(2)));
    assert_eq!(o.base_ejection_time, dur("30000ms"));
    assert_eq!(o.max_ejection_time, dur("30000ms"));
    assert_eq!(o.max_ejection_percent, Some(unspanned(100)));
    assert_eq!(o.interval, dur("1000ms"));
    assert_eq!(
        p.cluster.on_unhealthy.as_ref().unwrap().get_ref(),
        &OnUnhealthy::Rehash
    );

    let p = pool_of(&one(
        "  auto_eject_hosts: true\n  server_retry_timeout: 500\n  server_failure_limit: 3\n",
    ))
    .unwrap();
    let o = p.cluster.outlier_detection.as_ref().unwrap().get_ref();
    assert_eq!(o.consecutive_5xx, Some(unspanned(3)));
    assert_eq!(o.base_ejection_time, dur("500ms"));
    assert_eq!(o.interval, dur("500ms"));

    let p = pool_of(&one(
        "  auto_eject_hosts: false\n  server_retry_timeout: 500\n",
    ))
    .unwrap();
    assert!(p.cluster.outlier_detection.is_none());
    assert_eq!(
        p.cluster.on_unhealthy.as_ref().unwrap().get_ref(),
        &OnUnhealthy::FailFast
    );
    assert_eq!(p.notes.len(), 1);
    assert!(
        p.notes[0].contains("server_retry_timeout (line 7) has no effect"),
        "{:?}",
        p.notes
    );
}

#[test]
fn server_connections_and_servers_with_names() {
    let text = "p:\n  listen: 0.0.0.0:22121\n  redis: \"true\"\n  server_connections: 4\n  \
                servers:\n   - 10.0.0.1:6379:2 alpha\n   - redis.local:6380:1\n";
    let p = pool_of(text).unwrap();
    assert_eq!(p.cluster.connections_per_host, Some(unspanned(4)));
    assert!(
        p.notes[0].contains("server_connections 4 (line 4)"),
        "{:?}",
        p.notes
    );
    let hosts: Vec<&RawHost> = p
        .cluster
        .hosts
        .get_ref()
        .iter()
        .map(|h| h.get_ref())
        .collect();
    assert_eq!(
        hosts,
        vec![
            &RawHost::Full(RawHostTable {
                address: unspanned("10.0.0.1:6379".into()),
                weight: Some(unspanned(2)),
                name: Some(unspanned("alpha".into())),
            }),
            &RawHost::Full(RawHostTable {
                address: unspanned("redis.local:6380".into()),
                weight: Some(unspanned(1)),
                name: None,
            }),
        ]
    );
    assert_eq!(p.server_lines, vec![6, 7]);
}

#[test]
fn keys_without_effect_are_noted() {
    let p = pool_of(&one(
        "  preconnect: true\n  backlog: 1024\n  client_connections: 100\n  tcpkeepalive: true\n  \
         reuseport: false\n",
    ))
    .unwrap();
    assert_eq!(p.notes.len(), 4, "{:?}", p.notes);
    assert!(p.notes[0].starts_with("pool \"p\": preconnect (line 6): not applied"));
    assert!(p.notes[1].starts_with("pool \"p\": backlog 1024 (line 7): not applied"));
    assert!(p.notes[2].starts_with("pool \"p\": client_connections 100 (line 8): not applied"));
    assert!(p.notes[3].starts_with("pool \"p\": tcpkeepalive (line 9): not applied"));
    // Their defaults say nothing.
    let p = pool_of(&one(
        "  preconnect: false\n  client_connections: 0\n  tcpkeepalive: false\n",
    ))
    .unwrap();
    assert!(p.notes.is_empty(), "{:?}", p.notes);
}

#[test]
fn refusals_name_pool_key_and_line() {
    let cases: &[(&str, &str)] = &[
        (
            "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:6379:1\n",
            "line 1: pool \"p\": redis: absent, so a memcache pool (twemproxy's default); \
             memcache pools are not supported by respite",
        ),
        (
            "p:\n  listen: 127.0.0.1:22121\n  redis: false\n",
            "line 3: pool \"p\": redis: memcache pools are not supported by respite",
        ),
        (
            "p:\n  listen: /tmp/nc.sock 0666\n  redis: true\n",
            "line 2: pool \"p\": listen: \"/tmp/nc.sock 0666\" is a unix socket; unix socket \
             listeners are not supported by respite (its listeners are TCP only)",
        ),
        (
            &one("  redis_db: 4294967296\n"),
            "line 6: pool \"p\": redis_db: 4294967296 is too large",
        ),
        (
            &one("  tcpkeepalive: true\n  stats_listen: 1.2.3.4:1\n"),
            "line 7: pool \"p\": stats_listen: not a twemproxy 0.5.0 pool key; not supported \
             by respite",
        ),
        (
            &one("  hash: sha1\n"),
            "line 6: pool \"p\": hash: \"sha1\" is not a twemproxy hash (one of one_at_a_time, \
             md5, crc16, crc32, crc32a, fnv1_64, fnv1a_64, fnv1_32, fnv1a_32, hsieh, murmur, \
             jenkins)",
        ),
        (
            &one("  distribution: ring\n"),
            "line 6: pool \"p\": distribution: \"ring\" is not a twemproxy distribution (one of \
             ketama, modula, random)",
        ),
        (
            &one("  hash_tag: \"{\"\n"),
            "line 6: pool \"p\": hash_tag: \"{\" must be two characters, e.g. \"{}\"",
        ),
        (
            &one("  timeout: 1s\n"),
            "line 6: pool \"p\": timeout: \"1s\" is not a non-negative whole number",
        ),
        (
            &one("  auto_eject_hosts: yes\n"),
            "line 6: pool \"p\": auto_eject_hosts: \"yes\" is not \"true\" or \"false\"",
        ),
        (
            &one("  reuseport: true\n"),
            "line 6: pool \"p\": reuseport: SO_REUSEPORT listeners shared with other processes \
             are not supported by respite",
        ),
        (
            &one("  redis_auth: \"\"\n"),
            "line 6: pool \"p\": redis_auth: must not be empty",
        ),
        (
            "p:\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - 127.0.0.1:6379\n",
            "line 5: pool \"p\": servers[0]: \"127.0.0.1:6379\" is not \"host:port:weight [name]\"",
        ),
        (
            "p:\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - a:1:1\n   - /tmp/r.sock:1\n",
            "line 6: pool \"p\": servers[1]: \"/tmp/r.sock:1\" is a unix socket; unix socket \
             servers are not supported by respite",
        ),
        (
            "p:\n  listen: 127.0.0.1:1\n  redis: true\n  servers: []\n",
            "line 4: pool \"p\": servers: must list at least one server",
        ),
        (
            "p:\n  redis: true\n  servers:\n   - a:1:1\n",
            "line 1: pool \"p\": listen: required by twemproxy",
        ),
        (
            "p: 1\n",
            "line 1: pool \"p\": must be a map of twemproxy keys (listen, servers, ...)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(translate(text).unwrap_err(), *want, "{text}");
    }
}

#[test]
fn file_level_errors() {
    assert_eq!(
        translate("").unwrap_err(),
        "no pools: a nutcracker.yml maps pool names to pools"
    );
    assert_eq!(
        translate("- a\n").unwrap_err(),
        "line 1: the file must be a map of pool names to pools"
    );
    let two = "a.b:\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - a:1:1\n\
               a_b:\n  listen: 127.0.0.1:2\n  redis: true\n  servers:\n   - a:1:1\n";
    assert_eq!(
        translate(two).unwrap_err(),
        "line 6: pool \"a_b\": its cluster name \"a_b\" is also pool \"a.b\"'s (line 1); rename one"
    );
}

#[test]
fn bad_weight() {
    assert_eq!(
        translate("p:\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - a:1:x\n")
            .unwrap_err(),
        "line 5: pool \"p\": servers[0]: weight \"x\" is not a whole number"
    );
}

#[test]
fn stat_names() {
    assert_eq!(stat_name("alpha"), "alpha");
    assert_eq!(stat_name("a.b c/d:e-f_g"), "a_b_c_d:e-f_g");
}

const MULTI: &str = "\
alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  hash_tag: \"{}\"
  timeout: 400
  redis: true
  redis_auth: pw
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:6379:2 one
   - 127.0.0.1:6380:1 two
beta.cache:
  listen: 127.0.0.1:22122
  hash: crc32a
  distribution: modula
  redis: true
  preconnect: true
  servers:
   - 127.0.0.1:6381:1
";

#[test]
fn multi_pool_file_renders_validated_toml() {
    let t = translate(MULTI).unwrap();
    assert_eq!(
        t.notes,
        vec![
            "pool \"beta.cache\" (line 15): cluster and stats prefix named \"beta_cache\" \
             (characters other than ASCII letters, digits, '_', '-' and ':' become '_')"
                .to_string(),
            "pool \"beta.cache\": preconnect (line 20): not applied; Respite opens upstream \
             connections when the config is applied or when first needed, and either way a \
             client sees the same replies (only the first request may wait for a connect)"
                .to_string(),
        ]
    );
    assert!(
        t.toml
            .starts_with("# Translated from a twemproxy nutcracker.yml")
    );
    assert!(
        t.toml
            .contains("\n# note: pool \"beta.cache\": preconnect (line 20)")
    );
    let c = respite::config::parse_pushed(&t.toml, "t").unwrap();
    assert_eq!(c.listeners.len(), 2);
    let (a, b) = (&c.listeners[0], &c.listeners[1]);
    assert_eq!(a.name, "alpha");
    assert_eq!(a.address.to_string(), "127.0.0.1:22121");
    assert_eq!(a.op_timeout, std::time::Duration::from_millis(400));
    assert_eq!(b.name, "beta.cache");
    assert_eq!(b.stat_prefix, "beta_cache");
    assert_eq!(b.op_timeout, std::time::Duration::from_secs(24 * 3600));
    assert_eq!(c.clusters.len(), 2);
    let (ca, cb) = (&c.clusters[0], &c.clusters[1]);
    assert_eq!(ca.name, "alpha");
    assert_eq!(ca.hosts.len(), 2);
    assert_eq!(ca.hosts[0].weight, 2);
    assert_eq!(ca.hosts[0].name.as_deref(), Some("one"));
    assert_eq!(ca.hosts[1].address_text, "127.0.0.1:6380");
    assert_eq!(ca.on_unhealthy, OnUnhealthy::Rehash);
    let o = ca.outlier_detection.as_ref().unwrap();
    assert_eq!(o.consecutive_5xx, 1);
    assert_eq!(o.base_ejection_time, std::time::Duration::from_secs(2));
    assert_eq!(o.max_ejection_time, std::time::Duration::from_secs(2));
    assert_eq!(o.max_ejection_percent, 100);
    assert_eq!(ca.auth_password.as_deref(), Some("pw"));
    assert_eq!(cb.name, "beta_cache");
    assert_eq!(cb.lb_policy, LbPolicy::Modula);
    assert_eq!(cb.hash, KeyHash::Crc32a);
    assert_eq!(cb.on_unhealthy, OnUnhealthy::FailFast);
    assert!(cb.outlier_detection.is_none());
    // The exact tables, for review.
    assert!(t.toml.contains("hash_tag = \"{}\""), "{}", t.toml);
    assert!(
        t.toml.contains("downstream_auth_passwords = [\"pw\"]"),
        "{}",
        t.toml
    );
    assert!(t.toml.contains("lb_policy = \"modula\""), "{}", t.toml);
    assert!(t.toml.contains("hash = \"crc32a\""), "{}", t.toml);
}

#[test]
fn data_plane_refusals_point_at_the_twemproxy_key() {
    // Two pools on one address: the second's listen.
    let text = MULTI.replace("127.0.0.1:22122", "127.0.0.1:22121");
    let e = translate(&text).unwrap_err();
    assert!(
        e.starts_with("line 16: pool \"beta.cache\": listen: duplicate listener address"),
        "{e}"
    );
    // A weight the data plane refuses: that server's line.
    let text = MULTI.replace("6380:1 two", "6380:0 two");
    let e = translate(&text).unwrap_err();
    assert!(
        e.starts_with("line 14: pool \"alpha\": servers[1]: "),
        "{e}"
    );
    // Two servers of one name.
    let text = MULTI.replace("6380:1 two", "6380:1 one");
    let e = translate(&text).unwrap_err();
    assert!(
        e.starts_with("line 14: pool \"alpha\": servers[1]: "),
        "{e}"
    );
    // More connections than the data plane allows.
    let e = translate(&one("  server_connections: 100000\n")).unwrap_err();
    assert!(
        e.starts_with("line 6: pool \"p\": server_connections: "),
        "{e}"
    );
    // Two characters, but not two bytes.
    let e = translate(&one("  hash_tag: \"««\"\n")).unwrap_err();
    assert!(e.starts_with("line 6: pool \"p\": hash_tag: "), "{e}");
}

#[test]
fn the_deploy_example_translates() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples/nutcracker.yml");
    let t = load(&path).unwrap();
    let c = respite::config::parse_pushed(&t.toml, "example").unwrap();
    let names: Vec<&str> = c.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["sessions", "counters", "private"]);
    assert_eq!(c.clusters[0].hosts[2].name.as_deref(), Some("sessions-c"));
    assert_eq!(t.notes.len(), 2, "{:?}", t.notes);
    assert!(t.notes[1].contains("preconnect (line 44)"), "{:?}", t.notes);
}

//! An Envoy redis_proxy bootstrap run unchanged: `respite-control translate
//! --envoy-config FILE` prints the data plane's TOML, `respite --config` runs it, and requests to
//! real redis-servers behave as Envoy's redis_proxy documentation says: the longest prefix wins,
//! `remove_prefix` strips it, the catch-all route takes the rest, the mirror gets copies of
//! writes, RING_HASH places keys consistently, and the redis health checker takes a stopped host
//! out.
//!
//! Needs `target/release/respite-control` and `respite` (cargo build --release --bin respite
//! --bin respite-control).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use respite::cluster::LoadBalancer;
use respite::config::{HostConfig, LbPolicy};
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port, respite_bin};

/// A request answered this fast did not wait for the 1s op_timeout (2 shared, noisy cores).
const FAST: Duration = Duration::from_millis(400);

/// `respite-control` next to the `respite` binary the harness runs.
fn control_bin() -> PathBuf {
    std::env::var_os("RESPITE_CONTROL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| respite_bin().with_file_name("respite-control"))
}

/// The backends: `ring` (two hosts, RING_HASH, redis health check), `shadow` (the mirror) and
/// `other` (the `cache:` prefix).
struct Backends {
    ring: Vec<RedisServer>,
    shadow: RedisServer,
    other: RedisServer,
}

impl Backends {
    fn start() -> Backends {
        let mut s = servers(4);
        let other = s.pop().unwrap();
        let shadow = s.pop().unwrap();
        Backends {
            ring: s,
            shadow,
            other,
        }
    }

    fn ring_addrs(&self) -> Vec<String> {
        self.ring.iter().map(|s| s.addr()).collect()
    }
}

fn socket_address(port: u16) -> String {
    format!("{{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}")
}

/// The bootstrap, shaped like deploy/examples/envoy.yaml, with test timings (checks every 200ms).
fn envoy_yaml(port: u16, b: &Backends) -> String {
    let ring: Vec<String> = b
        .ring
        .iter()
        .map(|s| {
            format!(
                "        - endpoint: {{ address: {} }}",
                socket_address(s.port)
            )
        })
        .collect();
    format!(
        r#"admin:
  address: {admin}
static_resources:
  listeners:
  - name: redis_listener
    address: {listen}
    filter_chains:
    - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: egress_redis
          settings:
            op_timeout: 1s
          prefix_routes:
            routes:
            - prefix: "cache:"
              cluster: other
            - prefix: "cache:user:"
              remove_prefix: true
              cluster: ring
              request_mirror_policy:
              - cluster: shadow
                exclude_read_commands: true
                runtime_fraction:
                  default_value: {{ numerator: 100, denominator: HUNDRED }}
                  runtime_key: redis.mirror.user
            catch_all_route:
              cluster: ring
  clusters:
  - name: ring
    connect_timeout: 0.25s
    type: STATIC
    lb_policy: RING_HASH
    load_assignment:
      cluster_name: ring
      endpoints:
      - lb_endpoints:
{ring}
    health_checks:
    - timeout: 0.1s
      interval: 0.2s
      interval_jitter: 0.02s
      no_traffic_interval: 0.2s
      unhealthy_threshold: 2
      healthy_threshold: 2
      custom_health_check:
        name: envoy.health_checkers.redis
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.health_checkers.redis.v3.Redis
  - name: shadow
    connect_timeout: 0.25s
    type: STATIC
    load_assignment:
      cluster_name: shadow
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {shadow} }}
  - name: other
    connect_timeout: 0.25s
    type: STATIC
    load_assignment:
      cluster_name: other
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {other} }}
"#,
        admin = socket_address(free_port()),
        listen = socket_address(port),
        ring = ring.join("\n"),
        shadow = socket_address(b.shadow.port),
        other = socket_address(b.other.port),
    )
}

/// Runs `respite-control translate --envoy-config FILE`; its stdout is the TOML.
fn translate(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, yaml).unwrap();
    let bin = control_bin();
    let out = Command::new(&bin)
        .arg("translate")
        .arg("--envoy-config")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "translate failed ({}):\nstderr:\n{}\nstdout:\n{stdout}\nyaml:\n{yaml}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("[[listeners]]") && stdout.contains("[[clusters]]"),
        "translate printed no config:\n{stdout}"
    );
    stdout
}

/// Translates the bootstrap and starts respite with it (admin on a free port: Envoy's admin
/// section is not Respite's).
fn start(b: &Backends) -> Respite {
    let port = free_port();
    let toml = translate(&envoy_yaml(port, b));
    println!("translated:\n{toml}");
    let admin = free_port();
    let config = format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 2\ndrain_timeout = \"5s\"\n\n{toml}"
    );
    Respite::start(&config, port, admin)
}

/// Where RING_HASH puts `key` among the ring's hosts (as listed in load_assignment).
fn ring_owner(addrs: &[String], key: &str) -> usize {
    let hosts: Vec<HostConfig> = addrs.iter().map(|a| host(a)).collect();
    LoadBalancer::new(LbPolicy::RingHash, &hosts).pick(key.as_bytes())
}

fn set(c: &mut RawClient, key: &str, value: &str) {
    let r = c.cmd(&[b"SET", key.as_bytes(), value.as_bytes()]);
    assert_eq!(r, OK, "SET {key}: {}", show(&r));
}

#[test]
fn longest_prefix_wins_remove_prefix_strips_and_catch_all_takes_the_rest() {
    let b = Backends::start();
    let r = start(&b);
    let mut c = r.raw();
    let addrs = b.ring_addrs();
    let mut ring: Vec<RawClient> = b.ring.iter().map(|s| s.raw()).collect();
    let mut other = b.other.raw();

    // "cache:user:42" matches both prefixes: the longer one wins, and strips its prefix.
    set(&mut c, "cache:user:42", "u");
    let owner = ring_owner(&addrs, "42");
    assert!(
        exists_on(&mut ring[owner], b"42"),
        "42 not on ring host {owner}"
    );
    assert!(!exists_on(&mut ring[1 - owner], b"42"));
    assert!(!exists_on(&mut other, b"cache:user:42"));
    assert!(!exists_on(&mut other, b"42"));
    assert_eq!(c.cmd(&[b"GET", b"cache:user:42"]), bulk(b"u"));

    // "cache:x" matches only the shorter prefix: to `other`, key kept whole.
    set(&mut c, "cache:x", "o");
    assert!(exists_on(&mut other, b"cache:x"));
    assert!(ring.iter_mut().all(|s| !exists_on(s, b"cache:x")));

    // No prefix matches: the catch-all route, key kept whole.
    set(&mut c, "plain:1", "p");
    let owner = ring_owner(&addrs, "plain:1");
    assert!(exists_on(&mut ring[owner], b"plain:1"));
    assert!(!exists_on(&mut other, b"plain:1"));
}

#[test]
fn mirror_gets_copies_of_writes_only() {
    let b = Backends::start();
    let r = start(&b);
    let mut c = r.raw();
    let mut shadow = b.shadow.raw();

    set(&mut c, "cache:user:7", "m");
    // Mirrored copies are fire-and-forget: wait for it.
    let mirrored = wait_until(Duration::from_secs(5), || {
        shadow.cmd(&[b"GET", b"7"]) == bulk(b"m")
    });
    assert!(mirrored, "the write was not mirrored to shadow as \"7\"");
    // Keys outside the mirrored route are not copied.
    set(&mut c, "plain:2", "p");
    set(&mut c, "cache:y", "p");

    // exclude_read_commands: reads are not mirrored.
    assert_eq!(shadow.cmd(&[b"CONFIG", b"RESETSTAT"]), OK);
    for _ in 0..20 {
        assert_eq!(c.cmd(&[b"GET", b"cache:user:7"]), bulk(b"m"));
    }
    set(&mut c, "cache:user:8", "n");
    assert!(wait_until(Duration::from_secs(5), || exists_on(
        &mut shadow,
        b"8"
    )));
    let stats = String::from_utf8_lossy(&shadow.cmd(&[b"INFO", b"commandstats"])).into_owned();
    println!("shadow commandstats:\n{stats}");
    assert!(
        !stats.contains("cmdstat_get:"),
        "reads reached the mirror:\n{stats}"
    );
    assert!(
        stats.contains("cmdstat_set:calls=1,"),
        "one SET mirrored:\n{stats}"
    );
    assert!(!exists_on(&mut shadow, b"plain:2"));
    assert!(!exists_on(&mut shadow, b"cache:y"));
}

#[test]
fn ring_hash_places_keys_consistently() {
    let b = Backends::start();
    let r = start(&b);
    let mut c = r.raw();
    let addrs = b.ring_addrs();
    let mut ring: Vec<RawClient> = b.ring.iter().map(|s| s.raw()).collect();

    let mut per_host = [0usize; 2];
    for i in 0..200 {
        let key = format!("k{i}");
        set(&mut c, &key, "v");
        let owner = ring_owner(&addrs, &key);
        per_host[owner] += 1;
        assert!(
            exists_on(&mut ring[owner], key.as_bytes()),
            "{key} not on {owner}"
        );
        assert!(
            !exists_on(&mut ring[1 - owner], key.as_bytes()),
            "{key} also on {}",
            1 - owner
        );
    }
    println!("keys per ring host: {per_host:?}");
    assert!(
        per_host.iter().all(|&n| n >= 40),
        "uneven split {per_host:?}"
    );

    // A second respite from the same bootstrap places every key the same way.
    let r2 = start(&b);
    let mut c2 = r2.raw();
    for i in 0..200 {
        let key = format!("k{i}");
        assert_eq!(c2.cmd(&[b"GET", key.as_bytes()]), bulk(b"v"), "{key}");
    }
}

#[test]
fn health_check_takes_a_stopped_host_out() {
    let b = Backends::start();
    let r = start(&b);
    let mut c = r.raw();
    let addrs = b.ring_addrs();
    let on = |owner: usize| {
        (0..1000)
            .map(|i| format!("hc{i}"))
            .find(|k| ring_owner(&addrs, k) == owner)
            .unwrap()
    };
    let (k0, k1) = (on(0), on(1));
    set(&mut c, &k0, "a");
    set(&mut c, &k1, "b");

    // The checker (not request traffic) must find it: both hosts healthy first, then the stop is
    // noticed with no request sent to the stopped host.
    let healthy = || r.stat("cluster.ring.health_check.healthy");
    assert!(
        wait_until(Duration::from_secs(10), || healthy() == 2),
        "health checks never reported 2 healthy ring hosts (got {})",
        healthy()
    );
    let _stopped = Stopped::new(b.ring[0].pid());
    let t = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || healthy() == 1),
        "the health checker did not notice the stopped host (healthy = {})",
        healthy()
    );
    println!(
        "health checker took the stopped host out after {:?}",
        t.elapsed()
    );
    // Its keys are now answered at once, without waiting for the op_timeout: by the other host
    // (Envoy: the host leaves the ring) or with "no upstream host" (Respite's on_unhealthy =
    // "fail_fast").
    let s = Instant::now();
    let reply = c.cmd(&[b"SET", k0.as_bytes(), b"moved"]);
    let last = (reply, s.elapsed());
    println!(
        "SET on the stopped host's key: {} in {:?}",
        show(&last.0),
        last.1
    );
    assert!(
        last.1 < FAST && (last.0 == OK || last.0.starts_with(b"-no upstream host")),
        "k0 still waits on the stopped host: {} in {:?}",
        show(&last.0),
        last.1
    );
    if last.0 == OK {
        // Rehashed: the write went to the healthy host.
        assert!(exists_on(&mut b.ring[1].raw(), k0.as_bytes()));
    }
    // The healthy host's keys are untouched and fast.
    let s = Instant::now();
    assert_eq!(c.cmd(&[b"GET", k1.as_bytes()]), bulk(b"b"));
    assert!(
        s.elapsed() < FAST,
        "GET on the healthy host took {:?}",
        s.elapsed()
    );
}

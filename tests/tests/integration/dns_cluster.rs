//! `type = "strict_dns"` clusters against real redis-servers: a name that does not resolve at
//! start (the proxy starts anyway and answers `no upstream host`), then resolves (a line added
//! to /etc/hosts), then moves to another address; a client connected throughout keeps working.
//!
//! /etc/hosts is edited only to add a name unique to this process
//! (`respite-dns-test-<pid>.invalid`), and restored by a drop guard, so no other test sees a
//! difference.

use crate::common;

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port};

const HOSTS: &str = "/etc/hosts";
const NO_HOST: &[u8] = b"-no upstream host\r\n";

/// Adds `ip name` lines to /etc/hosts; [`HostsGuard::set`] replaces them; drop restores the
/// original file.
struct HostsGuard {
    original: String,
    name: String,
}

impl HostsGuard {
    fn new(name: &str) -> HostsGuard {
        HostsGuard {
            original: fs::read_to_string(HOSTS).expect("read /etc/hosts"),
            name: name.to_string(),
        }
    }

    fn set(&self, ip: &str) {
        let mut text = self.original.clone();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{ip} {}\n", self.name));
        fs::write(HOSTS, text).expect("write /etc/hosts");
    }
}

impl Drop for HostsGuard {
    fn drop(&mut self) {
        let _ = fs::write(HOSTS, &self.original);
    }
}

/// A redis-server on `ip:port` (an address `RedisServer` does not bind), killed on drop; the
/// directory it runs in goes with it.
struct Server(Child, #[allow(dead_code)] tempfile::TempDir);

impl Server {
    fn start(ip: &str, port: u16) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", ip])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let addr = format!("{ip}:{port}");
        let up = wait_until(Duration::from_secs(5), || {
            RawClient::try_connect(&addr)
                .ok()
                .and_then(|mut c| c.try_cmd(&[b"PING"]).ok())
                .is_some_and(|r| r == b"+PONG\r\n")
        });
        assert!(up, "redis-server on {addr} did not start");
        Server(child, dir)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(port: u16, admin: u16, host: &str) -> String {
    format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "dns"
[[clusters]]
name = "dns"
type = "strict_dns"
hosts = ["{host}"]
dns_refresh_rate = "200ms"
dns_lookup_family = "v4_only"
connect_timeout = "250ms"
"#
    )
}

#[test]
fn strict_dns_starts_unresolved_then_follows_the_name() {
    let name = format!("respite-dns-test-{}.invalid", std::process::id());
    let hosts = HostsGuard::new(&name);
    let a = RedisServer::start();
    let redis_port: u16 = a.addr().rsplit_once(':').unwrap().1.parse().unwrap();
    let port = free_port();
    let admin = free_port();
    let respite = Respite::start(
        &config(port, admin, &format!("{name}:{redis_port}")),
        port,
        admin,
    );

    // Unresolvable: the proxy runs, requests get the no-host error, failures are counted.
    let mut held = respite.raw();
    assert_eq!(held.cmd(&[b"SET", b"k", b"0"]), NO_HOST);
    assert!(wait_until(Duration::from_secs(3), || respite
        .stat("cluster.dns.update_failure")
        >= 2));
    assert_eq!(respite.stat("cluster.dns.update_success"), 0);
    assert_eq!(respite.stat("cluster.dns.membership_change"), 0);

    // The name resolves: within the refresh period (plus slack) requests reach server A.
    hosts.set("127.0.0.1");
    assert!(
        wait_until(Duration::from_secs(3), || held.cmd(&[b"SET", b"k", b"a"])
            == OK),
        "the held client never reached the resolved host; log:\n{}",
        respite.log()
    );
    assert_eq!(a.raw().cmd(&[b"GET", b"k"]), b"$1\r\na\r\n");
    assert_eq!(respite.raw().cmd(&[b"GET", b"k"]), b"$1\r\na\r\n");
    assert_eq!(respite.stat("cluster.dns.membership_change"), 1);
    assert!(respite.stat("cluster.dns.update_success") >= 1);

    // The name moves to another address (same port): traffic follows, the held client stays.
    let b = Server::start("127.0.0.2", redis_port);
    hosts.set("127.0.0.2");
    let mut on_b = RawClient::connect(&format!("127.0.0.2:{redis_port}"));
    assert!(
        wait_until(Duration::from_secs(3), || {
            held.cmd(&[b"SET", b"k2", b"b"]) == OK && exists_on(&mut on_b, b"k2")
        }),
        "requests never moved to 127.0.0.2; log:\n{}",
        respite.log()
    );
    assert_eq!(held.cmd(&[b"GET", b"k2"]), b"$1\r\nb\r\n");
    assert_eq!(respite.stat("cluster.dns.membership_change"), 2);
    assert!(respite.stat("cluster.dns.update_attempt") >= 4);

    // Gone from DNS again: the last addresses stay (Envoy keeps a failed target's hosts).
    drop(hosts);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(held.cmd(&[b"GET", b"k2"]), b"$1\r\nb\r\n");
    assert_eq!(respite.stat("cluster.dns.membership_change"), 2);
    drop(b);
}

/// `[listeners.dns_cache]`: a Redis Cluster whose nodes announce the hostname `localhost`
/// (`cluster-preferred-endpoint-type hostname`) answers `MOVED <slot> localhost:<port>` for a
/// slot moved by hand. A listener with the cache follows it; one without gives it to the client.
#[test]
fn dns_cache_follows_moved_to_a_hostname() {
    use respite_tests::RedisCluster;
    use respite_tests::cluster::{Reply, key_slot, query};

    let cluster = RedisCluster::start();
    for node in cluster.nodes() {
        for (k, v) in [
            ("cluster-announce-hostname", "localhost"),
            ("cluster-preferred-endpoint-type", "hostname"),
        ] {
            assert_eq!(
                query(&node, &["CONFIG", "SET", k, v]),
                Reply::Simple("OK".into())
            );
        }
    }
    let key = "dnscache:{k}";
    let slot = key_slot(key.as_bytes());
    let primaries = cluster.primaries();
    let owner = primaries
        .iter()
        .find(|p| !query(p, &["GET", key]).is_error())
        .expect("an owner")
        .clone();
    let other = primaries
        .iter()
        .find(|p| **p != owner)
        .expect("a second primary")
        .clone();

    let (with, without, admin) = (free_port(), free_port(), free_port());
    let seeds: Vec<String> = cluster.seeds().iter().map(|s| format!("\"{s}\"")).collect();
    let listener = |name: &str, port: u16, extra: &str| {
        format!(
            "[[listeners]]\nname = \"{name}\"\naddress = \"127.0.0.1:{port}\"\n\
             op_timeout = \"2s\"\n[listeners.prefix_routes.catch_all_route]\ncluster = \"rc\"\n\
             {extra}"
        )
    };
    let config = format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = 1\n{}{}\
         [[clusters]]\nname = \"rc\"\ntype = \"redis_cluster\"\nhosts = [{}]\n\
         cluster_refresh_rate = \"60s\"\nredirect_refresh_threshold = 0\n\
         failure_refresh_threshold = 0\n",
        listener(
            "with",
            with,
            "[listeners.dns_cache]\ndns_refresh_rate = \"60s\"\nmax_hosts = 16\n\
             dns_lookup_family = \"v4_only\"\n"
        ),
        listener("without", without, ""),
        seeds.join(", ")
    );
    let respite = Respite::start(&config, with, admin);
    let mut c_with = RawClient::connect(&format!("127.0.0.1:{with}"));
    let mut c_without = RawClient::connect(&format!("127.0.0.1:{without}"));
    assert_eq!(c_with.cmd(&[b"SET", key.as_bytes(), b"before"]), OK);
    assert_eq!(
        c_without.cmd(&[b"GET", key.as_bytes()]),
        b"$6\r\nbefore\r\n"
    );

    // The slot moves to `other` (empty there; Redis refuses to give away a slot that still
    // holds keys, so the key goes first): the old owner now answers MOVED to a hostname.
    assert_eq!(query(&owner, &["DEL", key]), Reply::Int(1));
    let other_id = cluster.node_id(&other);
    let s = slot.to_string();
    for node in [&other, &owner] {
        assert_eq!(
            query(node, &["CLUSTER", "SETSLOT", &s, "NODE", &other_id]),
            Reply::Simple("OK".into())
        );
    }
    let other_port = other.rsplit_once(':').expect("ip:port").1;
    let moved = format!("-MOVED {slot} localhost:{other_port}\r\n");
    // The announced hostname reaches the other nodes by the cluster bus (until then a MOVED
    // names the host "?").
    let expected = Reply::Error(moved[1..moved.len() - 2].to_string());
    wait_until(Duration::from_secs(10), || {
        query(&owner, &["GET", key]) == expected
    });
    assert_eq!(query(&owner, &["GET", key]), expected);

    // Without the cache: the client gets the redirection unchanged.
    assert_eq!(
        String::from_utf8_lossy(&c_without.cmd(&[b"GET", key.as_bytes()])),
        moved
    );
    // With it: followed to the new owner.
    assert_eq!(c_with.cmd(&[b"SET", key.as_bytes(), b"after"]), OK);
    assert_eq!(
        query(&other, &["GET", key]),
        Reply::Bulk(Some(b"after".to_vec()))
    );
    assert_eq!(c_with.cmd(&[b"GET", key.as_bytes()]), b"$5\r\nafter\r\n");
    drop(respite);
}

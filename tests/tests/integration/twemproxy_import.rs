//! A nutcracker.yml run unchanged: the real twemproxy 0.5.0 (`/usr/sbin/nutcracker`) accepts
//! it (`-t`) and serves it; then Respite serves the same file through `respite-control
//! --twemproxy-config` on the same ports, and every key written through nutcracker is read back
//! through Respite (switching a live deployment moves no key). Pools: ketama + fnv1a_64 with
//! weights, names and a hash tag and auto_eject_hosts; modula + crc32a; ketama + murmur with
//! redis_auth, which refuses clients that did not AUTH in both proxies.
//!
//! Needs `target/release/respite-control` and `respite` (cargo build --release --workspace
//! --bins).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use respite_tests::respite::Respite;
use respite_tests::xds::{ControlProcess, wait_for};
use respite_tests::{NUTCRACKER, RawClient, RedisServer, free_port, respite_bin};

const T: Duration = Duration::from_secs(15);
const PASSWORD: &str = "s3cret-pw";
/// Keys written per pool.
const KEYS: usize = 3000;

/// The three pools' backends and listen ports.
struct Setup {
    alpha: Vec<RedisServer>,
    beta: Vec<RedisServer>,
    gamma: Vec<RedisServer>,
    ports: [u16; 3],
}

impl Setup {
    fn start() -> Setup {
        let auth = ["--requirepass", PASSWORD];
        Setup {
            alpha: (0..3).map(|_| RedisServer::start()).collect(),
            beta: (0..2).map(|_| RedisServer::start()).collect(),
            gamma: (0..2).map(|_| RedisServer::start_with(&auth)).collect(),
            ports: [free_port(), free_port(), free_port()],
        }
    }

    /// A realistic nutcracker.yml, commented as an operator would write it.
    fn yaml(&self) -> String {
        let [pa, pb, pc] = self.ports;
        let (a, b, c) = (&self.alpha, &self.beta, &self.gamma);
        format!(
            "# sessions: consistent hashing, named servers (the names are hashed, so servers \
             can move)\n\
             alpha:\n  listen: 127.0.0.1:{pa}\n  hash: fnv1a_64\n  distribution: ketama\n  \
             hash_tag: \"{{}}\"\n  timeout: 2000\n  redis: true\n  auto_eject_hosts: true\n  \
             server_retry_timeout: 2000\n  server_failure_limit: 2\n  server_connections: 1\n  \
             preconnect: true\n  servers:\n   - {}:1 sess-a\n   - {}:2 sess-b\n   - {}:3 sess-c\n\
             \n# counters: modula\n\
             beta.counters:\n  listen: 127.0.0.1:{pb}\n  hash: crc32a\n  distribution: modula\n  \
             redis: true\n  timeout: 2000\n  backlog: 512\n  servers:\n   - {}:1\n   - {}:2\n\
             \n# private: AUTH at both ends\n\
             gamma:\n  listen: 127.0.0.1:{pc}\n  hash: murmur\n  redis: true\n  redis_auth: \
             {PASSWORD}\n  redis_db: 0\n  auto_eject_hosts: false\n  timeout: 2000\n  servers:\n   \
             - {}:1\n   - {}:1\n",
            a[0].addr(),
            a[1].addr(),
            a[2].addr(),
            b[0].addr(),
            b[1].addr(),
            c[0].addr(),
            c[1].addr(),
        )
    }
}

/// `nutcracker -c FILE`, killed on drop.
struct Nutcracker(Child, tempfile::TempDir);

impl Nutcracker {
    fn start(file: &Path, ports: &[u16]) -> Nutcracker {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("nutcracker.log");
        let child = Command::new(NUTCRACKER)
            .arg("-c")
            .arg(file)
            .arg("-o")
            .arg(&log)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {NUTCRACKER}: {e}"));
        let n = Nutcracker(child, dir);
        for p in ports {
            wait_for(T, || std::net::TcpStream::connect(("127.0.0.1", *p)).ok())
                .unwrap_or_else(|| panic!("nutcracker not on {p}: {}", n.log()));
        }
        n
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.1.path().join("nutcracker.log")).unwrap_or_default()
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn control_bin() -> PathBuf {
    std::env::var_os("RESPITE_CONTROL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| respite_bin().with_file_name("respite-control"))
}

fn client(port: u16, auth: bool) -> RawClient {
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    if auth {
        assert_eq!(
            c.cmd(&[b"AUTH", PASSWORD.as_bytes()]),
            b"+OK\r\n",
            "AUTH on {port}"
        );
    }
    c
}

/// The keys of pool `i`: plain ones, and for the hash-tag pool keys whose `{...}` part alone
/// must decide the server.
fn keys(pool: usize) -> Vec<String> {
    (0..KEYS)
        .map(|i| match (pool, i % 3) {
            (0, 1) => format!("user:{{{}}}:profile", i / 3),
            (0, 2) => format!("{{{}}}x:{i}", i / 7),
            _ => format!("p{pool}:key:{i}"),
        })
        .collect()
}

/// Pipelines `SET key value-of-key` for every key (or `GET`), returning the replies.
fn pipeline(c: &mut RawClient, keys: &[String], set: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for chunk in keys.chunks(500) {
        let mut buf = Vec::new();
        for k in chunk {
            let v = format!("v:{k}");
            if set {
                RawClient::encode_into(&mut buf, &[b"SET", k.as_bytes(), v.as_bytes()]);
            } else {
                RawClient::encode_into(&mut buf, &[b"GET", k.as_bytes()]);
            }
        }
        c.send_raw(&buf);
        for _ in chunk {
            out.push(c.read_reply());
        }
    }
    out
}

/// How many of `keys` each server holds (servers asked directly).
fn spread(servers: &[RedisServer], keys: &[String], auth: bool) -> Vec<usize> {
    servers
        .iter()
        .map(|s| {
            let mut c = s.raw();
            if auth {
                assert_eq!(c.cmd(&[b"AUTH", PASSWORD.as_bytes()]), b"+OK\r\n");
            }
            let mut n = 0;
            for chunk in keys.chunks(500) {
                let mut args: Vec<&[u8]> = vec![b"EXISTS"];
                args.extend(chunk.iter().map(|k| k.as_bytes()));
                let r = String::from_utf8_lossy(&c.cmd(&args)).into_owned();
                n += r.trim_start_matches(':').trim().parse::<usize>().unwrap();
            }
            n
        })
        .collect()
}

/// What a client that did not AUTH gets for a GET on `port`.
fn unauthenticated_get(port: u16) -> String {
    let mut c = client(port, false);
    String::from_utf8_lossy(&c.cmd(&[b"GET", b"p2:key:1"])).into_owned()
}

#[test]
fn a_nutcracker_yml_moves_no_key_when_respite_takes_over() {
    let s = Setup::start();
    let yaml = s.yaml();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nutcracker.yml");
    std::fs::write(&file, &yaml).unwrap();

    // twemproxy itself accepts the file.
    let t = Command::new(NUTCRACKER)
        .arg("-t")
        .arg("-c")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        t.status.success(),
        "nutcracker -t: {}{}\n{yaml}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );

    // And so does the translator, with a note for each key taken without effect.
    let out = Command::new(control_bin())
        .args(["translate", "--twemproxy-config"])
        .arg(&file)
        .output()
        .unwrap();
    let toml = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "translate: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "name = \"beta.counters\"",
        "stat_prefix = \"beta_counters\"",
        "lb_policy = \"modula\"",
        "hash = \"crc32a\"",
        "hash = \"murmur\"",
        "hash_tag = \"{}\"",
        "on_unhealthy = \"rehash\"",
        "# note: pool \"alpha\": preconnect (line 13)",
        "# note: pool \"beta.counters\": backlog 512 (line 26)",
    ] {
        assert!(toml.contains(want), "no {want:?} in:\n{toml}");
    }

    // Writes through twemproxy; the auth'd pool refuses a client without AUTH.
    let ports = s.ports;
    let all_keys: Vec<Vec<String>> = (0..3).map(keys).collect();
    let nc_noauth;
    {
        let nc = Nutcracker::start(&file, &ports);
        for (i, ks) in all_keys.iter().enumerate() {
            let mut c = client(ports[i], i == 2);
            for (k, r) in ks.iter().zip(pipeline(&mut c, ks, true)) {
                assert_eq!(r, b"+OK\r\n", "SET {k} via nutcracker: {}", nc.log());
            }
        }
        nc_noauth = unauthenticated_get(ports[2]);
    }
    assert!(
        nc_noauth.starts_with("-NOAUTH"),
        "nutcracker: {nc_noauth:?}"
    );
    // Every server got a share, so the reads below test placement.
    let sa = spread(&s.alpha, &all_keys[0], false);
    let sb = spread(&s.beta, &all_keys[1], false);
    let sc = spread(&s.gamma, &all_keys[2], true);
    for (name, sp) in [("alpha", &sa), ("beta", &sb), ("gamma", &sc)] {
        assert_eq!(sp.iter().sum::<usize>(), KEYS, "{name}: {sp:?}");
        assert!(sp.iter().all(|&n| n > KEYS / 10), "{name}: {sp:?}");
    }

    // Respite takes over the same ports with the same file.
    let sock = dir.path().join("control.sock");
    let _dp = Respite::start_empty(&sock);
    let (ctl, _f) = ControlProcess::start_file("--twemproxy-config", &yaml, Some(&sock));
    for (i, ks) in all_keys.iter().enumerate() {
        let port = ports[i];
        wait_for(T, || std::net::TcpStream::connect(("127.0.0.1", port)).ok())
            .unwrap_or_else(|| panic!("respite not on {port}: {}", ctl.log()));
        let mut c = client(port, i == 2);
        let replies = pipeline(&mut c, ks, false);
        let moved: Vec<&String> = ks
            .iter()
            .zip(&replies)
            .filter(|(k, r)| {
                let v = format!("v:{k}");
                r.as_slice() != format!("${}\r\n{v}\r\n", v.len()).as_bytes()
            })
            .map(|(k, _)| k)
            .take(10)
            .collect();
        assert!(
            moved.is_empty(),
            "pool {i}: keys not found through respite (first 10): {moved:?}\n{}",
            ctl.log()
        );
    }
    let respite_noauth = unauthenticated_get(ports[2]);
    assert!(
        respite_noauth.starts_with("-NOAUTH"),
        "respite: {respite_noauth:?}"
    );
}

//! Per-host upstream credentials (`[[clusters.credentials]]`, Envoy
//! `RedisProtocolOptions.credentials`) and a cluster's database (`db`, twemproxy `redis_db`),
//! against real redis-servers: every kind of upstream connection (shared, leased for
//! MULTI/EXEC, subscriber, health check) authenticates with its host's own credentials and
//! `SELECT`s the cluster's database; a nutcracker.yml with `redis_db: 3` served by nutcracker
//! and then by Respite reads the same keys in the same database.

use crate::common;

use std::time::Duration;

use common::{Placement, wait_until};
use respite_tests::admin::clusters;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::xds::{ControlProcess, wait_for};
use respite_tests::{Nutcracker, RawClient, RedisServer, free_port};

const OK: &[u8] = b"+OK\r\n";
const T: Duration = Duration::from_secs(10);

/// Server `i`: user `u{i}`/`pw-secret-{i}`, and its `default` user's password
/// `dflt-secret-{i}`; the cluster-wide
/// password fits no server.
fn acl_server(i: usize) -> RedisServer {
    let user = format!("u{i}");
    let pass = format!(">pw-secret-{i}");
    let default = format!("dflt-secret-{i}");
    RedisServer::start_with(&[
        "--requirepass",
        &default,
        "--user",
        &user,
        "on",
        &pass,
        "~*",
        "&*",
        "+@all",
    ])
}

/// A client of server `i` logged in as `u{i}`.
fn direct(s: &RedisServer, i: usize) -> RawClient {
    let mut c = s.raw();
    let (u, p) = (format!("u{i}"), format!("pw-secret-{i}"));
    assert_eq!(c.cmd(&[b"AUTH", u.as_bytes(), p.as_bytes()]), OK);
    c
}

/// Server 0 and 1 by ACL user, server 2 by its default user's password (`AUTH <pass>`);
/// `wrong`: server 1's entry has a wrong password.
fn credentials(addrs: &[String], wrong: bool) -> String {
    let p1 = if wrong { "bad" } else { "pw-secret-1" };
    format!(
        "[[clusters.credentials]]\naddress = \"{}\"\nauth_username = \"u0\"\nauth_password = \"pw-secret-0\"\n\
         [[clusters.credentials]]\naddress = \"{}\"\nauth_username = \"u1\"\nauth_password = \"{p1}\"\n\
         [[clusters.credentials]]\naddress = \"{}\"\nauth_password = \"dflt-secret-2\"\n",
        addrs[0], addrs[1], addrs[2]
    )
}

const HEALTH: &str = "[[clusters.health_checks]]\ninterval = \"200ms\"\ntimeout = \"150ms\"\n\
                      unhealthy_threshold = 2\nhealthy_threshold = 1\nno_traffic_interval = \"200ms\"\n";

/// A one-listener config over `addrs` whose cluster AUTHs with `auth_password = "nope"` unless
/// an entry says otherwise, with `extra` cluster lines (keys first) and active checks.
fn config(addrs: &[String], keys: &str, extra: &str) -> (String, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let mut cfg = simple_config(port, admin, addrs, 2, "");
    cfg.push_str("auth_password = \"nope\"\n");
    cfg.push_str(keys);
    cfg.push_str(extra);
    cfg.push_str(HEALTH);
    (cfg, port, admin)
}

fn health(admin: u16, host: &str) -> String {
    clusters(admin)
        .get(&("cache".into(), host.into(), "health_flags".into()))
        .cloned()
        .unwrap_or_default()
}

/// Each host is reached with its own credentials by the shared, leased and subscriber
/// connections, and is healthy by its checks; a wrong entry fails that host alone.
#[test]
fn each_host_gets_its_own_credentials() {
    let servers: Vec<RedisServer> = (0..3).map(acl_server).collect();
    let addrs: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let placement = Placement::new(&addrs);
    let keys: Vec<String> = (0..3).map(|i| placement.key_on(i, "cred")).collect();

    let (cfg, port, admin) = config(&addrs, "", &credentials(&addrs, false));
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    for (i, k) in keys.iter().enumerate() {
        let v = format!("v{i}");
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), v.as_bytes()]), OK, "host {i}");
        assert_eq!(
            c.cmd(&[b"GET", k.as_bytes()]),
            format!("${}\r\n{v}\r\n", v.len()).into_bytes()
        );
        // The key is on its host.
        assert_eq!(
            direct(&servers[i], i).cmd(&[b"GET", k.as_bytes()]),
            format!("${}\r\n{v}\r\n", v.len()).into_bytes()
        );
        // A leased connection (MULTI … EXEC) to the same host.
        assert_eq!(c.cmd(&[b"MULTI"]), OK);
        assert_eq!(
            c.cmd(&[b"INCR", format!("{k}-n").as_bytes()]),
            b"+QUEUED\r\n"
        );
        assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n:1\r\n", "host {i}");
    }
    // A subscriber connection.
    let mut sub = respite.raw();
    assert_eq!(
        sub.cmd(&[b"SUBSCRIBE", b"news"]),
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    let delivered = wait_until(T, || c.cmd(&[b"PUBLISH", b"news", b"hi"]) == b":1\r\n");
    assert!(delivered, "the subscriber connection never subscribed");
    assert_eq!(
        sub.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
    );
    // Health checks authenticate too: every host stays healthy.
    std::thread::sleep(Duration::from_millis(800));
    for a in &addrs {
        assert_eq!(
            health(admin, a),
            "healthy",
            "{a}: {}",
            respite.admin_get("/clusters").1
        );
    }
    // The dump never shows a password.
    let (_, dump) = respite.admin_get("/config_dump");
    assert!(!dump.contains("secret"), "{dump}");
    assert!(dump.contains("[redacted]"), "{dump}");
    drop(respite);

    // Server 1's entry is wrong: its requests fail, its checks fail; the others work.
    let (cfg, port, admin) = config(&addrs, "", &credentials(&addrs, true));
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    let r = c.cmd(&[b"GET", keys[1].as_bytes()]);
    assert!(
        r == b"-upstream failure\r\n" || r == b"-no upstream host\r\n",
        "{}",
        String::from_utf8_lossy(&r)
    );
    for i in [0, 2] {
        assert_eq!(
            c.cmd(&[b"SET", keys[i].as_bytes(), b"again"]),
            OK,
            "host {i}"
        );
    }
    let failed = wait_until(T, || health(admin, &addrs[1]) == "/failed_active_hc");
    assert!(failed, "{}", respite.admin_get("/clusters").1);
    assert_eq!(health(admin, &addrs[0]), "healthy");
    assert_eq!(health(admin, &addrs[2]), "healthy");
    assert!(
        respite.log().contains("WRONGPASS"),
        "no refused handshake logged: {}",
        respite.log()
    );
}

/// `db = 3`: keys written through Respite land in database 3; an `EXISTS` health check looks
/// there; a client's `SELECT 3` is a no-op and any other database is refused.
#[test]
fn a_clusters_db_is_selected_everywhere() {
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let placement = Placement::new(&addrs);
    let (port, admin) = (free_port(), free_port());
    let mut cfg = simple_config(port, admin, &addrs, 2, "");
    cfg.push_str("db = 3\n");
    cfg.push_str(HEALTH);
    cfg.push_str("key = \"drain\"\n");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    for (i, server) in servers.iter().enumerate().take(2) {
        let k = placement.key_on(i, "db");
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), b"v"]), OK);
        let mut d = server.raw();
        assert_eq!(d.cmd(&[b"EXISTS", k.as_bytes()]), b":0\r\n", "in db 0");
        assert_eq!(d.cmd(&[b"SELECT", b"3"]), OK);
        assert_eq!(d.cmd(&[b"EXISTS", k.as_bytes()]), b":1\r\n", "not in db 3");
        // Leased connections select it too.
        assert_eq!(c.cmd(&[b"MULTI"]), OK);
        assert_eq!(c.cmd(&[b"GET", k.as_bytes()]), b"+QUEUED\r\n");
        assert_eq!(c.cmd(&[b"EXEC"]), b"*1\r\n$1\r\nv\r\n");
    }
    assert_eq!(c.cmd(&[b"SELECT", b"3"]), OK);
    assert_eq!(
        c.cmd(&[b"SELECT", b"0"]),
        b"-ERR DB index is out of range\r\n"
    );
    // The drain key in database 0 is not the check's; in database 3 it drains the host.
    let mut d = servers[0].raw();
    assert_eq!(d.cmd(&[b"SET", b"drain", b"1"]), OK);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(health(admin, &addrs[0]), "healthy");
    assert_eq!(d.cmd(&[b"SELECT", b"3"]), OK);
    assert_eq!(d.cmd(&[b"SET", b"drain", b"1"]), OK);
    let drained = wait_until(T, || health(admin, &addrs[0]) == "/failed_active_hc");
    assert!(drained, "{}", respite.admin_get("/clusters").1);
    assert_eq!(health(admin, &addrs[1]), "healthy");
}

/// A nutcracker.yml with `redis_db: 3`: keys nutcracker wrote (in database 3) are read back
/// through Respite serving the same file, and Respite's own writes land in database 3.
#[test]
fn twemproxy_redis_db_is_kept() {
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let entries: Vec<String> = servers.iter().map(|s| format!("{}:1", s.addr())).collect();
    let mut nc = Nutcracker::start_with(&entries, &["redis_db: 3"]);
    let yaml = nc.config();
    let port = nc.port;
    let keys: Vec<String> = (0..200).map(|i| format!("nc-{i}")).collect();
    let mut c = nc.raw();
    for k in &keys {
        assert_eq!(
            c.cmd(&[b"SET", k.as_bytes(), k.as_bytes()]),
            OK,
            "{}",
            nc.log()
        );
    }
    let in_db = |db: &[u8]| -> i64 {
        servers
            .iter()
            .map(|s| {
                let mut d = s.raw();
                assert_eq!(d.cmd(&[b"SELECT", db]), OK);
                let r = d.cmd(&[b"DBSIZE"]);
                String::from_utf8_lossy(&r[1..r.len() - 2])
                    .parse::<i64>()
                    .unwrap()
            })
            .sum()
    };
    assert_eq!(in_db(b"3"), 200, "nutcracker writes to database 3");
    assert_eq!(in_db(b"0"), 0);
    drop(c);
    nc.kill();

    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    let _dp = Respite::start_empty(&sock);
    let (ctl, _f) = ControlProcess::start_file("--twemproxy-config", &yaml, Some(&sock));
    wait_for(T, || std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .unwrap_or_else(|| panic!("respite not on {port}: {}", ctl.log()));
    let mut c = RawClient::connect(&format!("127.0.0.1:{port}"));
    for k in &keys {
        assert_eq!(
            c.cmd(&[b"GET", k.as_bytes()]),
            format!("${}\r\n{k}\r\n", k.len()).into_bytes(),
            "{k} not found through respite: {}",
            ctl.log()
        );
    }
    assert_eq!(c.cmd(&[b"SET", b"from-respite", b"1"]), OK);
    assert_eq!(in_db(b"3"), 201);
    assert_eq!(in_db(b"0"), 0);
}

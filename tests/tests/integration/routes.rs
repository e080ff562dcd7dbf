//! Prefix routes and request mirroring (Envoy redis_proxy `prefix_routes`) against real
//! redis-servers: where each key lands is read back from the backend it must be on.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port};

/// A config with one listener (`routes`: its `[listeners.prefix_routes…]` tables) over
/// `clusters` (name, hosts), one worker so upstream connection counts are deterministic.
fn config(port: u16, admin: u16, routes: &str, clusters: &[(&str, Vec<String>)]) -> String {
    let mut out = format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 1
drain_timeout = "5s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "1s"
enable_hashtagging = true
{routes}
"#
    );
    for (name, hosts) in clusters {
        let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        out.push_str(&format!(
            "[[clusters]]\nname = \"{name}\"\ntype = \"static\"\nlb_policy = \"ketama\"\n\
             connect_timeout = \"250ms\"\nhosts = [{}]\n",
            hosts.join(", ")
        ));
    }
    out
}

fn start(routes: &str, clusters: &[(&str, Vec<String>)]) -> Respite {
    let port = free_port();
    let admin = free_port();
    Respite::start(&config(port, admin, routes, clusters), port, admin)
}

/// `GET key` straight from a backend.
fn get_on(server: &RedisServer, key: &[u8]) -> Vec<u8> {
    server.raw().cmd(&[b"GET", key])
}

/// Calls of `cmd` (lowercase) a backend has served, from `INFO commandstats`.
fn calls(server: &RedisServer, cmd: &str) -> u64 {
    let info = server.raw().cmd(&[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&info);
    let tag = format!("cmdstat_{cmd}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The key list of a backend (`KEYS *`), sorted.
fn keys_on(server: &RedisServer) -> Vec<String> {
    let reply = server.raw().cmd(&[b"KEYS", b"*"]);
    let (_, rest) = split_replies(&reply);
    assert!(rest.is_empty());
    let text = String::from_utf8_lossy(&reply).to_string();
    let mut lines = text.split("\r\n").skip(1);
    let mut out = Vec::new();
    while let (Some(_len), Some(k)) = (lines.next(), lines.next()) {
        out.push(k.to_string());
    }
    out.sort();
    out
}

const ROUTES_ABC: &str = r#"[listeners.prefix_routes]
case_insensitive = CI
[[listeners.prefix_routes.routes]]
prefix = "a:"
cluster = "a"
[[listeners.prefix_routes.routes]]
prefix = "a:b:"
cluster = "ab"
[listeners.prefix_routes.catch_all_route]
cluster = "other"
"#;

#[test]
fn longest_prefix_wins_and_case_insensitive() {
    let b = servers(3);
    let clusters = [
        ("a", vec![b[0].addr()]),
        ("ab", vec![b[1].addr()]),
        ("other", vec![b[2].addr()]),
    ];
    for ci in [false, true] {
        for s in &b {
            s.raw().cmd(&[b"FLUSHALL"]);
        }
        let respite = start(&ROUTES_ABC.replace("CI", &ci.to_string()), &clusters);
        let mut c = respite.raw();
        // (key, backend it must be on)
        let cases: [(&[u8], usize); 7] = [
            (b"a:x", 0),
            (b"a:b", 0),
            (b"a:b:x", 1),
            (b"a:b:", 1),
            (b"a", 2),
            (b"zz", 2),
            (b"A:B:x", if ci { 1 } else { 2 }),
        ];
        for (k, owner) in cases {
            assert_eq!(c.cmd(&[b"SET", k, k]), OK, "SET {}", show(k));
            for (i, s) in b.iter().enumerate() {
                let want = if i == owner { bulk(k) } else { NIL.to_vec() };
                assert_eq!(
                    get_on(s, k),
                    want,
                    "case_insensitive={ci}: {} on backend {i}",
                    show(k)
                );
            }
            assert_eq!(c.cmd(&[b"GET", k]), bulk(k));
        }
        // case_insensitive matches the prefix only; the key keeps its case.
        assert_eq!(get_on(&b[1], b"a:b:X"), NIL);
        // A multi-key keyed command whose keys take different routes.
        assert_eq!(
            c.cmd(&[b"RENAME", b"a:x", b"a:b:y"]),
            b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
        );
        assert_eq!(c.cmd(&[b"RENAME", b"a:x", b"a:y"]), OK);
        assert_eq!(get_on(&b[0], b"a:y"), bulk(b"a:x"));
        // Keyless commands take the catch-all route.
        assert_eq!(c.cmd(&[b"DBSIZE"]), int(if ci { 2 } else { 3 }));
    }
}

#[test]
fn no_route_no_catch_all_is_no_upstream_host() {
    let b = servers(1);
    let routes = r#"[listeners.prefix_routes]
[[listeners.prefix_routes.routes]]
prefix = "a:"
cluster = "a"
"#;
    let respite = start(routes, &[("a", vec![b[0].addr()])]);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"a:1", b"v"]), OK);
    assert_eq!(get_on(&b[0], b"a:1"), bulk(b"v"));
    let nohost = b"-no upstream host\r\n";
    assert_eq!(c.cmd(&[b"SET", b"b:1", b"v"]), nohost);
    assert_eq!(c.cmd(&[b"GET", b"A:1"]), nohost, "prefixes match case");
    assert_eq!(c.cmd(&[b"DBSIZE"]), nohost);
    assert_eq!(c.cmd(&[b"SCAN", b"0"]), nohost);
    assert_eq!(c.cmd(&[b"MGET", b"a:1", b"b:1"]), nohost);
    assert_eq!(c.cmd(&[b"EVAL", b"return 1", b"0"]), nohost);
    assert_eq!(c.cmd(&[b"MGET", b"a:1"]), b"*1\r\n$1\r\nv\r\n");
    assert_eq!(keys_on(&b[0]), vec!["a:1"]);
}

#[test]
fn remove_prefix_and_key_formatter() {
    let b = servers(3);
    let two = vec![b[0].addr(), b[1].addr()];
    let routes = r#"[listeners.prefix_routes]
[[listeners.prefix_routes.routes]]
prefix = "user:"
cluster = "users"
remove_prefix = true
key_formatter = "{%KEY%}"
[[listeners.prefix_routes.routes]]
prefix = "r:"
cluster = "plain"
remove_prefix = true
[[listeners.prefix_routes.routes]]
prefix = "f:"
cluster = "plain"
key_formatter = "pre-%KEY%-%KEY%"
"#;
    let respite = start(
        routes,
        &[("users", two.clone()), ("plain", vec![b[2].addr()])],
    );
    let place = Placement::new(&two);
    // Two keys whose (stripped) names ketama puts on different hosts: each lands where the
    // hash tag the template adds says.
    let k0 = place.key_on(0, "k");
    let k1 = place.key_on(1, "k");
    let mut c = respite.raw();
    for k in [&k0, &k1] {
        let client_key = format!("user:{k}");
        assert_eq!(c.cmd(&[b"SET", client_key.as_bytes(), b"v"]), OK);
        assert_eq!(c.cmd(&[b"GET", client_key.as_bytes()]), bulk(b"v"));
    }
    assert_eq!(keys_on(&b[0]), vec![format!("{{{k0}}}")]);
    assert_eq!(keys_on(&b[1]), vec![format!("{{{k1}}}")]);
    // Every key of a multi-key command is rewritten, not only the first.
    assert_eq!(c.cmd(&[b"SET", b"r:x", b"1"]), OK);
    assert_eq!(c.cmd(&[b"RENAME", b"r:x", b"r:y"]), OK);
    assert_eq!(c.cmd(&[b"SET", b"f:z", b"2"]), OK);
    assert_eq!(keys_on(&b[2]), vec!["pre-f:z-f:z", "y"]);
    // Split commands rewrite each key by its own route.
    assert_eq!(
        c.cmd(&[b"MSET", b"r:m1", b"1", b"f:m2", b"2", b"r:m3", b"3"]),
        OK
    );
    assert_eq!(get_on(&b[2], b"m1"), bulk(b"1"));
    assert_eq!(get_on(&b[2], b"pre-f:m2-f:m2"), bulk(b"2"));
    assert_eq!(get_on(&b[2], b"m3"), bulk(b"3"));
    assert_eq!(
        c.cmd(&[b"MGET", b"r:m3", b"f:m2", b"r:m1", b"r:none"]),
        b"*4\r\n$1\r\n3\r\n$1\r\n2\r\n$1\r\n1\r\n$-1\r\n"
    );
    // Inline requests are rewritten too.
    c.send_raw(b"GET r:m1\r\n");
    assert_eq!(c.read_reply(), bulk(b"1"));
}

#[test]
fn cross_route_split_commands_merge_in_order() {
    let b = servers(4);
    let routes = r#"[listeners.prefix_routes]
[[listeners.prefix_routes.routes]]
prefix = "a:"
cluster = "a"
[[listeners.prefix_routes.routes]]
prefix = "b:"
cluster = "b"
[listeners.prefix_routes.catch_all_route]
cluster = "c"
"#;
    let two = vec![b[0].addr(), b[1].addr()];
    let respite = start(
        routes,
        &[
            ("a", two.clone()),
            ("b", vec![b[2].addr()]),
            ("c", vec![b[3].addr()]),
        ],
    );
    let place = Placement::new(&two);
    let a0 = place.key_on(0, "a:x");
    let a1 = place.key_on(1, "a:x");
    let (a0, a1) = (a0.as_bytes(), a1.as_bytes());
    let mut c = respite.raw();
    assert_eq!(
        c.cmd(&[
            b"MSET", a0, b"1", b"b:1", b"2", b"c1", b"3", a1, b"4", b"b:2", b"5"
        ]),
        OK
    );
    assert_eq!(get_on(&b[0], a0), bulk(b"1"));
    assert_eq!(get_on(&b[1], a1), bulk(b"4"));
    assert_eq!(keys_on(&b[2]), vec!["b:1", "b:2"]);
    assert_eq!(keys_on(&b[3]), vec!["c1"]);
    assert_eq!(
        c.cmd(&[b"MGET", a0, b"b:1", b"c1", b"missing", a1, b"b:2"]),
        b"*6\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$-1\r\n$1\r\n4\r\n$1\r\n5\r\n"
    );
    assert_eq!(
        c.cmd(&[b"EXISTS", a0, b"b:1", b"zz", b"c1", a1, a0]),
        int(5)
    );
    assert_eq!(c.cmd(&[b"DEL", a1, b"b:2", b"c1", b"nope"]), int(3));
    assert_eq!(
        c.cmd(&[b"MGET", a1, b"b:1", b"c1", a0, b"b:2"]),
        b"*5\r\n$-1\r\n$1\r\n2\r\n$-1\r\n$1\r\n1\r\n$-1\r\n"
    );
    assert_eq!(keys_on(&b[1]), Vec::<String>::new());
    assert_eq!(keys_on(&b[2]), vec!["b:1"]);
}

#[test]
fn read_command_policy_sends_reads_elsewhere() {
    let b = servers(2);
    let routes = r#"[listeners.prefix_routes]
[listeners.prefix_routes.catch_all_route]
cluster = "primary"
[listeners.prefix_routes.catch_all_route.read_command_policy]
cluster = "replica"
"#;
    let respite = start(
        routes,
        &[
            ("primary", vec![b[0].addr()]),
            ("replica", vec![b[1].addr()]),
        ],
    );
    b[1].raw().cmd(&[b"SET", b"k", b"from-replica"]);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"from-primary"]), OK);
    assert_eq!(get_on(&b[0], b"k"), bulk(b"from-primary"));
    assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"from-replica"));
    assert_eq!(c.cmd(&[b"MGET", b"k"]), b"*1\r\n$12\r\nfrom-replica\r\n");
    assert_eq!(c.cmd(&[b"INCR", b"n"]), int(1));
    assert_eq!(get_on(&b[0], b"n"), bulk(b"1"));
    assert_eq!(get_on(&b[1], b"n"), NIL);
    assert_eq!(calls(&b[0], "get"), 2, "only the direct reads above");
}

fn mirror_routes(exclude_reads: bool, fraction: f64) -> String {
    format!(
        r#"[listeners.prefix_routes]
[listeners.prefix_routes.catch_all_route]
cluster = "primary"
[[listeners.prefix_routes.catch_all_route.request_mirror_policy]]
cluster = "mirror"
exclude_read_commands = {exclude_reads}
runtime_fraction = {fraction:.1}
"#
    )
}

#[test]
fn mirror_gets_copies_and_client_sees_primary_only() {
    let b = servers(2);
    let clusters = [
        ("primary", vec![b[0].addr()]),
        ("mirror", vec![b[1].addr()]),
    ];
    let respite = start(&mirror_routes(false, 100.0), &clusters);
    b[0].raw().cmd(&[b"SET", b"k", b"primary"]);
    b[1].raw().cmd(&[b"SET", b"k", b"mirror"]);
    let mut c = respite.raw();
    for _ in 0..20 {
        assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"primary"));
    }
    assert_eq!(c.cmd(&[b"APPEND", b"k", b"+"]), int(8), "primary's length");
    // INCR reaches each backend exactly once.
    assert_eq!(c.cmd(&[b"INCR", b"n"]), int(1));
    // SET then EXPIRE, pipelined: the mirror applies them in order, so the key has a TTL.
    let replies = c.pipeline(&[
        cmd(&[b"SET", b"t", b"v"]),
        cmd(&[b"EXPIRE", b"t", b"100"]),
        cmd(&[b"MSET", b"m1", b"1", b"m2", b"2"]),
        cmd(&[b"DEL", b"m2"]),
    ]);
    assert_eq!(replies, vec![OK.to_vec(), int(1), OK.to_vec(), int(1)]);
    let total = respite.stat("cluster.mirror.mirror_rq_total");
    println!("mirror_rq_total {total}");
    assert_eq!(total, 20 + 1 + 1 + 4);
    assert!(
        wait_until(Duration::from_secs(5), || {
            respite.stat("cluster.mirror.mirror_rq_success") == total
        }),
        "stats: {:?}",
        respite.stats()
    );
    assert_eq!(calls(&b[1], "get"), 20, "reads are mirrored");
    assert_eq!(calls(&b[1], "incr"), 1);
    assert_eq!(get_on(&b[1], b"m1"), bulk(b"1"));
    assert_eq!(get_on(&b[1], b"k"), bulk(b"mirror+"));
    assert_eq!(get_on(&b[0], b"n"), bulk(b"1"));
    assert_eq!(get_on(&b[1], b"n"), bulk(b"1"));
    let ttl = b[1].raw().cmd(&[b"TTL", b"t"]);
    assert!(
        ttl.starts_with(b":") && ttl != b":-1\r\n" && ttl != b":-2\r\n",
        "TTL on mirror: {}",
        show(&ttl)
    );
    assert_eq!(get_on(&b[1], b"m2"), NIL);
    assert_eq!(respite.stat("cluster.mirror.mirror_rq_error"), 0);
    assert_eq!(respite.stat("cluster.mirror.mirror_rq_overflow"), 0);
    assert_eq!(respite.stat("cluster.mirror.mirror_rq_active"), 0);
}

#[test]
fn mirror_excludes_reads_when_asked() {
    let b = servers(2);
    let clusters = [
        ("primary", vec![b[0].addr()]),
        ("mirror", vec![b[1].addr()]),
    ];
    let respite = start(&mirror_routes(true, 100.0), &clusters);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    for _ in 0..10 {
        assert_eq!(c.cmd(&[b"GET", b"k"]), bulk(b"v"));
        assert_eq!(c.cmd(&[b"MGET", b"k", b"x"]), b"*2\r\n$1\r\nv\r\n$-1\r\n");
    }
    assert!(wait_until(Duration::from_secs(5), || {
        respite.stat("cluster.mirror.mirror_rq_success") == 1
    }));
    assert_eq!(calls(&b[1], "get"), 0);
    assert_eq!(calls(&b[1], "mget"), 0);
    assert_eq!(get_on(&b[1], b"k"), bulk(b"v"));
    assert_eq!(respite.stat("cluster.mirror.mirror_rq_total"), 1);
}

#[test]
fn runtime_fraction_mirrors_a_deterministic_half() {
    let b = servers(2);
    let clusters = [
        ("primary", vec![b[0].addr()]),
        ("mirror", vec![b[1].addr()]),
    ];
    let respite = start(&mirror_routes(false, 50.0), &clusters);
    let keys: Vec<String> = (0..400).map(|i| format!("frac:{i}")).collect();
    let mut c = respite.raw();
    let sets: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .map(|k| cmd(&[b"SET", k.as_bytes(), b"1"]))
        .collect();
    assert!(pipelined(&mut c, &sets, 50).iter().all(|r| r == OK));
    assert!(wait_until(Duration::from_secs(5), || {
        respite.stat("cluster.mirror.mirror_rq_active") == 0
            && respite.stat("cluster.mirror.mirror_rq_total") > 0
    }));
    let first = keys_on(&b[1]);
    println!("mirrored {} of {} keys", first.len(), keys.len());
    assert!(
        (140..=260).contains(&first.len()),
        "{} of 400 keys mirrored at 50%",
        first.len()
    );
    // The same keys again (values changed): exactly the same ones reach the mirror.
    let sets2: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .map(|k| cmd(&[b"SET", k.as_bytes(), b"2"]))
        .collect();
    assert!(pipelined(&mut c, &sets2, 50).iter().all(|r| r == OK));
    assert!(wait_until(Duration::from_secs(5), || {
        first
            .iter()
            .all(|k| get_on(&b[1], k.as_bytes()) == bulk(b"2"))
    }));
    assert_eq!(keys_on(&b[1]), first);
    // The decision is the documented hash: xxh64(key) % 10000 < 5000.
    let want: Vec<String> = {
        let mut v: Vec<String> = keys
            .iter()
            .filter(|k| respite::cluster::xxh64(k.as_bytes(), 0) % 10_000 < 5_000)
            .cloned()
            .collect();
        v.sort();
        v
    };
    assert_eq!(first, want);
    assert_eq!(keys_on(&b[0]).len(), 400);
}

/// The catch-all switches between old (mirror new) and new (mirror old) while one client
/// pipelines increasing values to one key: the primary and the mirror of a cluster share one
/// pool (one connection per host for the session), so no older write lands after a newer one,
/// and both clusters end with the last value.
#[test]
fn route_switch_keeps_write_order() {
    let b = servers(2);
    let clusters = [("old", vec![b[0].addr()]), ("new", vec![b[1].addr()])];
    let cfg = |primary: &str, mirror: &str| {
        format!(
            r#"[listeners.prefix_routes]
[listeners.prefix_routes.catch_all_route]
cluster = "{primary}"
[[listeners.prefix_routes.catch_all_route.request_mirror_policy]]
cluster = "{mirror}"
"#
        )
    };
    let port = free_port();
    let admin = free_port();
    let text = |p: &str, m: &str| config(port, admin, &cfg(p, m), &clusters);
    let respite = Respite::start(&text("old", "new"), port, admin);
    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let addr = respite.addr();
    let writer = {
        let stop = stop.clone();
        let last = last.clone();
        std::thread::spawn(move || {
            let mut c = RawClient::connect(&addr);
            let mut n = 0u64;
            let mut errors = 0;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<Vec<Vec<u8>>> = (0..32)
                    .map(|_| {
                        n += 1;
                        cmd(&[b"SET", b"k", n.to_string().as_bytes()])
                    })
                    .collect();
                errors += c.pipeline(&batch).iter().filter(|r| *r != OK).count();
                last.store(n, Ordering::Relaxed);
            }
            errors
        })
    };
    let log_count = |respite: &Respite| respite.log().matches("config reloaded").count();
    for (i, (p, m)) in [
        ("new", "old"),
        ("old", "new"),
        ("new", "old"),
        ("old", "new"),
        ("new", "old"),
    ]
    .into_iter()
    .enumerate()
    {
        std::thread::sleep(Duration::from_millis(200));
        respite.reload(&text(p, m));
        assert!(
            wait_until(Duration::from_secs(5), || log_count(&respite) > i),
            "reload {i} not applied: {}",
            respite.log()
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let errors = writer.join().expect("writer");
    let last = last.load(Ordering::Relaxed);
    println!("{last} writes, {errors} errors");
    assert_eq!(errors, 0);
    assert!(last > 100, "only {last} writes");
    let want = bulk(last.to_string().as_bytes());
    let settled = wait_until(Duration::from_secs(5), || {
        get_on(&b[0], b"k") == want && get_on(&b[1], b"k") == want
    });
    assert!(
        settled,
        "last value {last}: old has {}, new has {}",
        show(&get_on(&b[0], b"k")),
        show(&get_on(&b[1], b"k"))
    );
    // One worker, one host per cluster: one connection each, kept across every switch — the
    // primary and mirror sides of a cluster are the same pool.
    assert_eq!(respite.stat("cluster.old.upstream_cx_total"), 1);
    assert_eq!(respite.stat("cluster.new.upstream_cx_total"), 1);
    assert_eq!(respite.stat("cluster.old.mirror_rq_error"), 0);
    assert_eq!(respite.stat("cluster.new.mirror_rq_error"), 0);
}

/// Pub/sub follows prefix routes: a channel is subscribed on the cluster its prefix names (with
/// `remove_prefix`, under the stripped name, while the client reads the name it gave), and
/// PUBLISH meets it there; a route's mirror gets every PUBLISH, like a write, but no
/// subscription.
#[test]
fn pubsub_follows_routes_and_mirrors_publish() {
    let b = servers(3);
    let routes = r#"[listeners.prefix_routes]
[[listeners.prefix_routes.routes]]
prefix = "a:"
cluster = "ca"
remove_prefix = true
[listeners.prefix_routes.catch_all_route]
cluster = "main"
[[listeners.prefix_routes.catch_all_route.request_mirror_policy]]
cluster = "mirror"
"#;
    let respite = start(
        routes,
        &[
            ("ca", vec![b[0].addr()]),
            ("main", vec![b[1].addr()]),
            ("mirror", vec![b[2].addr()]),
        ],
    );
    let mut sub = respite.raw();
    assert_eq!(
        sub.cmd(&[b"SUBSCRIBE", b"a:news", b"other"]),
        b"*3\r\n$9\r\nsubscribe\r\n$6\r\na:news\r\n:1\r\n"
    );
    assert_eq!(
        sub.read_reply(),
        b"*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:2\r\n"
    );
    let channels = |s: &RedisServer| s.raw().cmd(&[b"PUBSUB", b"CHANNELS"]);
    assert_eq!(channels(&b[0]), b"*1\r\n$4\r\nnews\r\n");
    assert_eq!(channels(&b[1]), b"*1\r\n$5\r\nother\r\n");
    assert_eq!(channels(&b[2]), b"*0\r\n");
    // A client of the mirror cluster itself sees what is published through the route.
    let mut on_mirror = b[2].raw();
    assert_eq!(
        on_mirror.cmd(&[b"SUBSCRIBE", b"other"]),
        b"*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:1\r\n"
    );
    let mut publisher = respite.raw();
    assert_eq!(publisher.cmd(&[b"PUBLISH", b"a:news", b"hi"]), int(1));
    assert_eq!(
        sub.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$6\r\na:news\r\n$2\r\nhi\r\n"
    );
    assert_eq!(publisher.cmd(&[b"PUBLISH", b"other", b"copied"]), int(1));
    let message = b"*3\r\n$7\r\nmessage\r\n$5\r\nother\r\n$6\r\ncopied\r\n";
    assert_eq!(sub.read_reply(), message);
    assert_eq!(on_mirror.read_reply(), message);
    assert_eq!(calls(&b[2], "publish"), 1);
    assert_eq!(calls(&b[0], "publish"), 1);
    // A pattern under the route: subscribed stripped, its messages named as the client names.
    assert_eq!(
        sub.cmd(&[b"PSUBSCRIBE", b"a:n*"]),
        b"*3\r\n$10\r\npsubscribe\r\n$4\r\na:n*\r\n:3\r\n"
    );
    assert_eq!(b[0].raw().cmd(&[b"PUBSUB", b"NUMPAT"]), int(1));
    assert_eq!(publisher.cmd(&[b"PUBLISH", b"a:news", b"both"]), int(2));
    assert_eq!(
        sub.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$6\r\na:news\r\n$4\r\nboth\r\n"
    );
    assert_eq!(
        sub.read_reply(),
        b"*4\r\n$8\r\npmessage\r\n$4\r\na:n*\r\n$6\r\na:news\r\n$4\r\nboth\r\n"
    );
}

/// Large requests (which otherwise go on a connection of their own) go where small ones do on
/// routes that rewrite keys or mirror: `r:x` stripped to `x` on its cluster, and a catch-all
/// `SET` copied whole to the mirror.
#[test]
fn large_requests_are_rewritten_and_mirrored() {
    let b = servers(3);
    let routes = r#"[listeners.prefix_routes]
[[listeners.prefix_routes.routes]]
prefix = "r:"
cluster = "plain"
remove_prefix = true
[listeners.prefix_routes.catch_all_route]
cluster = "primary"
[[listeners.prefix_routes.catch_all_route.request_mirror_policy]]
cluster = "mirror"
"#;
    let respite = start(
        routes,
        &[
            ("plain", vec![b[0].addr()]),
            ("primary", vec![b[1].addr()]),
            ("mirror", vec![b[2].addr()]),
        ],
    );
    let large = vec![b'v'; 2 << 20];
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"r:x", &large]), OK);
    assert_eq!(c.cmd(&[b"SET", b"y", &large]), OK);
    assert_eq!(get_on(&b[0], b"x"), bulk(&large));
    assert!(
        wait_until(Duration::from_secs(5), || get_on(&b[2], b"y")
            == bulk(&large)),
        "the mirror has no copy of the large SET"
    );
    assert_eq!(get_on(&b[1], b"y"), bulk(&large));
    assert_eq!(keys_on(&b[0]), vec!["x"]);
}

//! Downstream AUTH and `HELLO … AUTH`: Respite's replies against a redis-server 7.0 with the
//! same credentials, byte for byte; and the throttle of repeated failures, with its counters.

use crate::common;

use std::time::{Duration, Instant};

use common::{addrs, servers, show};
use respite_tests::{RawClient, RedisServer, Respite};

const OK: &[u8] = b"+OK\r\n";
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
/// Respite's reply during a back-off (`router/local/auth.rs`).
const THROTTLED: &[u8] = b"-ERR too many failed AUTH attempts, retry later\r\n";

/// The fields of a HELLO reply that differ between two servers by nature (the version each
/// reports, the client id) replaced by `?`; every other byte is kept.
fn normalized(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut lines: Vec<String> = text.split("\r\n").map(str::to_owned).collect();
    if matches!(lines.first().map(String::as_str), Some("%7" | "*14")) {
        for i in 0..lines.len() {
            match lines[i].as_str() {
                "version" if i + 2 < lines.len() => {
                    lines[i + 1] = "?".into();
                    lines[i + 2] = "?".into();
                }
                "id" if i + 1 < lines.len() => lines[i + 1] = "?".into(),
                _ => {}
            }
        }
    }
    lines.join("\r\n")
}

/// Runs each conversation (one fresh connection each) against `redis` and `respite` and
/// asserts every reply is the same.
fn same_replies(redis: &str, respite: &str, conversations: &[&[&[&[u8]]]]) {
    for (n, conversation) in conversations.iter().enumerate() {
        let mut r = RawClient::connect(redis);
        let mut p = RawClient::connect(respite);
        for args in *conversation {
            let want = r.cmd(args);
            let got = p.cmd(args);
            let words: Vec<String> = args.iter().map(|a| show(a)).collect();
            assert_eq!(
                normalized(&got),
                normalized(&want),
                "conversation {n}: {}",
                words.join(" ")
            );
        }
    }
}

/// True if `reply` is HELLO's map (RESP3) or array (RESP2), whose version and id the
/// comparison leaves out.
fn is_hello_map(reply: &[u8]) -> bool {
    reply.starts_with(b"%7\r\n$6\r\nserver\r\n") || reply.starts_with(b"*14\r\n$6\r\nserver\r\n")
}

/// No password, passwords (Redis: the `default` user's), and a user name (Redis: that user,
/// and `default` off): every AUTH and HELLO case answers what redis-server 7.0 answers.
#[test]
fn replies_match_redis_byte_for_byte() {
    let backends = servers(1);
    let hosts = addrs(&backends);

    // No password: Redis's default user is `nopass`.
    let reference = RedisServer::start();
    let respite = Respite::over(&hosts, 1);
    let open: &[&[&[&[u8]]]] = &[
        &[
            &[b"AUTH", b"x"],
            &[b"AUTH", b"default", b"x"],
            &[b"AUTH", b"nouser", b"x"],
            &[b"AUTH", b"a", b"b", b"c"],
            &[b"HELLO", b"3", b"AUTH", b"default", b"x"],
            &[b"HELLO", b"3", b"AUTH", b"default", b""],
            &[b"HELLO", b"2", b"AUTH", b"nouser", b"x"],
            &[b"HELLO", b"2"],
            &[b"PING"],
        ],
        &[&[b"HELLO", b"3", b"AUTH", b"default", b""], &[b"PING"]],
    ];
    same_replies(&reference.addr(), &respite.addr(), open);
    let mut c = respite.raw();
    assert!(is_hello_map(
        &c.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"x"])
    ));

    // Passwords: the default user's (requirepass is the one-password case).
    let reference = RedisServer::start();
    assert_eq!(
        reference.raw().cmd(&[
            b"ACL",
            b"SETUSER",
            b"default",
            b"resetpass",
            b">pw",
            b">other-pw"
        ]),
        OK
    );
    let respite = Respite::over_with(
        &hosts,
        1,
        r#"downstream_auth_passwords = ["pw", "other-pw"]"#,
    );
    // Five failures in all: under the per-source allowance (10), at most two per connection.
    let protected: &[&[&[&[u8]]]] = &[
        &[
            &[b"AUTH", b"nope"],
            &[b"GET", b"k"],
            &[b"HELLO", b"3"],
            &[b"HELLO"],
            &[b"AUTH", b"pw"],
            &[b"PING"],
        ],
        &[
            &[b"AUTH", b"default", b"nope"],
            &[b"HELLO", b"3", b"AUTH", b"default", b""],
            &[b"AUTH", b"other-pw"],
        ],
        &[
            &[b"HELLO", b"2", b"AUTH", b"default", b"pw"],
            &[b"AUTH", b"a", b"b", b"c"],
            &[b"HELLO", b"3", b"AUTH", b"default", b"other-pw"],
        ],
        &[
            &[b"AUTH", b"default", b"other-pw"],
            &[b"AUTH", b"bad"],
            &[b"PING"],
        ],
        &[
            &[b"HELLO", b"4", b"AUTH", b"default", b"x"],
            &[b"HELLO", b"3", b"AUTH", b"default"],
            &[
                b"HELLO", b"2", b"AUTH", b"default", b"x", b"SETNAME", b"a b",
            ],
            &[
                b"HELLO", b"2", b"AUTH", b"default", b"pw", b"SETNAME", b"a b",
            ],
            &[b"PING"],
        ],
    ];
    same_replies(&reference.addr(), &respite.addr(), protected);
    assert_eq!(respite.stat("redis.main.downstream_auth_failure"), 5);
    assert_eq!(respite.stat("redis.main.downstream_auth_throttled"), 0);

    // A user name: Redis with that user and the default user off (and without a password).
    let reference = RedisServer::start();
    let mut admin = reference.raw();
    assert_eq!(
        admin.cmd(&[
            b"ACL", b"SETUSER", b"app", b"on", b">pw", b"~*", b"&*", b"+@all"
        ]),
        OK
    );
    assert_eq!(
        admin.cmd(&[b"ACL", b"SETUSER", b"default", b"off", b"resetpass"]),
        OK
    );
    let respite = Respite::over_with(
        &hosts,
        1,
        "downstream_auth_passwords = [\"pw\"]\ndownstream_auth_username = \"app\"",
    );
    let named: &[&[&[&[u8]]]] = &[
        &[
            &[b"AUTH", b"pw"],
            &[b"AUTH", b"default", b"pw"],
            &[b"GET", b"k"],
            &[b"AUTH", b"app", b"pw"],
            &[b"PING"],
        ],
        &[
            &[b"HELLO", b"3", b"AUTH", b"app", b"bad"],
            &[b"HELLO", b"3", b"AUTH", b"app", b"pw"],
            &[b"PING"],
        ],
    ];
    same_replies(&reference.addr(), &respite.addr(), named);
}

/// 1,000 wrong passwords pipelined on one connection: three are checked, the rest refused
/// unchecked while the back-off lasts; the counters say exactly that, on `/stats` and
/// Prometheus; once the back-off is over the right password works.
#[test]
fn a_thousand_wrong_passwords_are_throttled() {
    let backends = servers(1);
    let respite = Respite::over_with(
        &addrs(&backends),
        2,
        r#"downstream_auth_passwords = ["pw"]"#,
    );
    let mut c = respite.raw();
    let mut pipeline = Vec::new();
    for i in 0..1000 {
        RawClient::encode_into(&mut pipeline, &[b"AUTH", format!("guess-{i}").as_bytes()]);
    }
    let started = Instant::now();
    c.send_raw(&pipeline);
    let (mut failed, mut throttled) = (0u64, 0u64);
    for _ in 0..1000 {
        match c.read_reply().as_slice() {
            WRONGPASS => failed += 1,
            THROTTLED => throttled += 1,
            other => panic!("unexpected reply {}", show(other)),
        }
    }
    let elapsed = started.elapsed();
    // Three free failures, then back-offs of 100 ms, 200 ms, …: a slow machine may have let
    // one or two more through, never more than the time allows.
    let mut allowed = 3;
    let mut window = Duration::from_millis(100);
    let mut spent = window;
    while spent <= elapsed {
        allowed += 1;
        window *= 2;
        spent += window;
    }
    assert!(
        (3..=allowed).contains(&failed),
        "{failed} checked in {elapsed:?}"
    );
    assert_eq!(failed + throttled, 1000);
    assert_eq!(
        respite.stat("redis.main.downstream_auth_failure"),
        failed as i64
    );
    assert_eq!(
        respite.stat("redis.main.downstream_auth_throttled"),
        throttled as i64
    );
    assert_eq!(respite.stat("redis.main.command.auth.total"), 1000);
    let (status, prometheus) = respite.admin_get("/stats/prometheus");
    assert_eq!(status, 200);
    for (name, value) in [
        ("downstream_auth_failure", failed),
        ("downstream_auth_throttled", throttled),
    ] {
        let line = format!("envoy_redis_{name}{{envoy_redis_prefix=\"main\"}} {value}");
        assert!(
            prometheus.lines().any(|l| l == line),
            "{line} not in /stats/prometheus"
        );
    }

    // During the back-off even the right password is refused unchecked; after it, it works.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refused = 0;
    loop {
        let reply = c.cmd(&[b"AUTH", b"pw"]);
        if reply == OK {
            break;
        }
        assert_eq!(show(&reply), show(THROTTLED));
        refused += 1;
        assert!(Instant::now() < deadline, "still throttled after 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(
        respite.stat("redis.main.downstream_auth_failure"),
        failed as i64
    );
    assert_eq!(
        respite.stat("redis.main.downstream_auth_throttled"),
        (throttled + refused) as i64
    );
}

/// Failures add up per source address across connections: past ten, a new connection from
/// that address, with no failure of its own, is refused for the back-off; then its right
/// password works.
#[test]
fn failures_from_one_address_throttle_its_new_connections() {
    let backends = servers(1);
    let respite = Respite::over_with(
        &addrs(&backends),
        2,
        r#"downstream_auth_passwords = ["pw"]"#,
    );
    // Five connections, two failures each (under the per-connection allowance of three).
    for _ in 0..5 {
        let mut c = respite.raw();
        assert_eq!(c.cmd(&[b"AUTH", b"nope"]), WRONGPASS);
        assert_eq!(c.cmd(&[b"AUTH", b"default", b"nope"]), WRONGPASS);
    }
    // The tenth failure started a 100 ms back-off; a machine too slow to connect within it lets
    // one more guess through, which doubles the next one, so a refusal is seen within a few.
    let mut failures = 10;
    let mut fresh = respite.raw();
    loop {
        match fresh.cmd(&[b"AUTH", b"nope"]).as_slice() {
            THROTTLED => break,
            WRONGPASS if failures < 15 => failures += 1,
            other => panic!("after {failures} failures: {}", show(other)),
        }
        fresh = respite.raw();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = fresh.cmd(&[b"AUTH", b"pw"]);
        if reply == OK {
            break;
        }
        assert_eq!(show(&reply), show(THROTTLED));
        assert!(Instant::now() < deadline, "still throttled after 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fresh.cmd(&[b"PING"]), b"+PONG\r\n");
    assert_eq!(respite.stat("redis.main.downstream_auth_failure"), failures);
}

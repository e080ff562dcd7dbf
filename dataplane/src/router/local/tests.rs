//! AUTH and HELLO against Redis 7.0's replies (taken from redis-server 7.0.15; the integration
//! test `auth::replies_match_redis_byte_for_byte` compares them live), and the throttle.

use std::net::IpAddr;
use std::time::Duration;

use super::*;
use crate::command::Kind;

/// A listener with `passwords` (none: no client auth) and optionally a user name.
pub(super) fn listener(passwords: &[&str], user: Option<&str>) -> ListenerConfig {
    let list: Vec<String> = passwords.iter().map(|p| format!("{p:?}")).collect();
    let mut toml = format!(
        "[[listeners]]\nname = \"l\"\naddress = \"127.0.0.1:6380\"\nop_timeout = \"1s\"\n\
         downstream_auth_passwords = [{}]\n",
        list.join(", ")
    );
    if let Some(u) = user {
        toml.push_str(&format!("downstream_auth_username = {u:?}\n"));
    }
    toml.push_str(
        "[listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
         [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n",
    );
    let cfg = crate::config::parse(&toml, "t").unwrap();
    cfg.listeners.into_iter().next().unwrap()
}

/// Runs one local command; returns its reply and outcome.
fn run(conn: &mut ConnState, cfg: &ListenerConfig, args: &[&[u8]]) -> (Vec<u8>, Outcome) {
    let spec = crate::command::resolve(args.len(), |i| args[i]).unwrap();
    let Kind::Local(which) = spec.kind else {
        panic!("{} is not local", spec.name)
    };
    let mut out = Vec::new();
    let outcome = answer(conn, cfg, spec, which, args.len(), |i| args[i], &mut out);
    (out, outcome)
}

fn conn(cfg: &ListenerConfig, peer: Option<IpAddr>) -> ConnState {
    ConnState::new(7, cfg, None, peer)
}

const WRONGPASS_7_0: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

#[test]
fn no_password_is_the_nopass_default_user() {
    let cfg = listener(&[], None);
    let mut c = conn(&cfg, None);
    assert!(c.authed);
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"x"]),
        (
            b"-ERR AUTH <password> called without any password configured for the default user. \
              Are you sure your configuration is correct?\r\n"
                .to_vec(),
            Outcome::Answered
        )
    );
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"default", b"x"]),
        (b"+OK\r\n".to_vec(), Outcome::Answered)
    );
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"other", b"x"]),
        (WRONGPASS_7_0.to_vec(), Outcome::AuthFailed)
    );
    assert_eq!(
        run(&mut c, &cfg, &[b"HELLO", b"3", b"AUTH", b"other", b"x"]),
        (WRONGPASS_7_0.to_vec(), Outcome::AuthFailed)
    );
    for password in [&b"x"[..], b""] {
        let (reply, outcome) = run(
            &mut c,
            &cfg,
            &[b"HELLO", b"3", b"AUTH", b"default", password],
        );
        assert!(reply.starts_with(b"%7\r\n"), "{reply:?}");
        assert_eq!(outcome, Outcome::Answered);
    }
}

#[test]
fn wrong_and_right_passwords() {
    let cfg = listener(&["pw"], None);
    let mut c = conn(&cfg, None);
    assert!(!c.authed);
    for args in [
        &[&b"AUTH"[..], b"nope"][..],
        &[b"AUTH", b"default", b"nope"],
        &[b"HELLO", b"3", b"AUTH", b"default", b""],
    ] {
        assert_eq!(
            run(&mut c, &cfg, args),
            (WRONGPASS_7_0.to_vec(), Outcome::AuthFailed)
        );
    }
    assert!(!c.authed);
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"a", b"b", b"c"]).0,
        b"-ERR syntax error\r\n"
    );
    assert_eq!(
        run(&mut c, &cfg, &[b"HELLO", b"3"]).0,
        b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
          HELLO AUTH <user> <pass> option can be used to authenticate the client and select the \
          RESP protocol version at the same time\r\n"
    );
    // Three failures started a 100 ms back-off.
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"pw"]),
        (auth::THROTTLED.to_vec(), Outcome::AuthThrottled)
    );
    std::thread::sleep(Duration::from_millis(110));
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"pw"]),
        (b"+OK\r\n".to_vec(), Outcome::Answered)
    );
    assert!(c.authed);
    assert_eq!(c.auth_failures, auth::Backoff::default());
    // A failure after a success leaves the connection authenticated, as in Redis.
    assert_eq!(run(&mut c, &cfg, &[b"AUTH", b"bad"]).0, WRONGPASS_7_0);
    assert!(c.authed);
}

#[test]
fn a_thousand_wrong_passwords_cost_three_checks() {
    let cfg = listener(&["pw"], None);
    let mut c = conn(&cfg, None);
    let (mut failed, mut throttled) = (0, 0);
    for _ in 0..1000 {
        match run(&mut c, &cfg, &[b"AUTH", b"guess"]) {
            (r, Outcome::AuthFailed) if r == WRONGPASS_7_0 => failed += 1,
            (r, Outcome::AuthThrottled) if r == auth::THROTTLED => throttled += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((failed, throttled), (auth::PER_CONNECTION.free, 997));
    // RESET does not clear the count.
    assert_eq!(run(&mut c, &cfg, &[b"RESET"]).0, b"+RESET\r\n");
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"pw"]).1,
        Outcome::AuthThrottled
    );
}

#[test]
fn failures_of_one_source_throttle_its_new_connections() {
    let cfg = listener(&["pw"], None);
    // An address of TEST-NET-2 that no other test uses: the table is process-wide.
    let peer: IpAddr = "198.51.100.77".parse().unwrap();
    let mut failures = 0;
    while failures < auth::PER_SOURCE.free {
        let mut c = conn(&cfg, Some(peer));
        assert_eq!(
            run(&mut c, &cfg, &[b"AUTH", b"guess"]).1,
            Outcome::AuthFailed
        );
        failures += 1;
    }
    let mut fresh = conn(&cfg, Some(peer));
    assert_eq!(
        run(&mut fresh, &cfg, &[b"AUTH", b"pw"]),
        (auth::THROTTLED.to_vec(), Outcome::AuthThrottled)
    );
    assert_eq!(
        run(
            &mut fresh,
            &cfg,
            &[b"HELLO", b"3", b"AUTH", b"default", b"pw"]
        ),
        (auth::THROTTLED.to_vec(), Outcome::AuthThrottled)
    );
    assert!(!fresh.authed);
    std::thread::sleep(Duration::from_millis(110));
    assert_eq!(run(&mut fresh, &cfg, &[b"AUTH", b"pw"]).0, b"+OK\r\n");
}

#[test]
fn with_a_user_name_the_default_user_is_off() {
    let cfg = listener(&["pw"], Some("app"));
    let mut c = conn(&cfg, None);
    assert_eq!(run(&mut c, &cfg, &[b"AUTH", b"pw"]).0, WRONGPASS_7_0);
    assert_eq!(
        run(&mut c, &cfg, &[b"AUTH", b"default", b"pw"]).0,
        WRONGPASS_7_0
    );
    assert!(!c.authed);
    c.auth_failures = auth::Backoff::default();
    assert_eq!(run(&mut c, &cfg, &[b"AUTH", b"app", b"pw"]).0, b"+OK\r\n");
    assert!(c.authed);
}

#[test]
fn hello_matches_the_listener_protocol_version() {
    use crate::config::ProtocolVersion;
    let mut cfg = listener(&[], None);
    cfg.protocol_version = Some(ProtocolVersion::Resp3);
    let mut c = conn(&cfg, None);
    assert_eq!(run(&mut c, &cfg, &[b"HELLO", b"2"]).0, NOPROTO);
    // A bare HELLO asks for the connection's version, RESP2 until HELLO 3.
    assert_eq!(run(&mut c, &cfg, &[b"HELLO"]).0, NOPROTO);
    assert!(hello_version_refused(&c, &cfg, None));
    assert!(!c.resp3);
    assert!(
        run(&mut c, &cfg, &[b"HELLO", b"3"])
            .0
            .starts_with(b"%7\r\n")
    );
    assert!(c.resp3);
    assert!(run(&mut c, &cfg, &[b"HELLO"]).0.starts_with(b"%7\r\n"));
    assert!(!hello_version_refused(&c, &cfg, None));
    assert_eq!(run(&mut c, &cfg, &[b"HELLO", b"2"]).0, NOPROTO);
    assert!(c.resp3, "a refused HELLO 2 keeps RESP3");
    // Not a version: Redis's own errors, whatever the listener's version.
    assert!(!hello_version_refused(&c, &cfg, Some(b"x")));
    assert_eq!(run(&mut c, &cfg, &[b"HELLO", b"4"]).0, NOPROTO);

    cfg.protocol_version = Some(ProtocolVersion::Resp2);
    let mut c = conn(&cfg, None);
    assert_eq!(run(&mut c, &cfg, &[b"HELLO", b"3"]).0, NOPROTO);
    assert!(hello_version_refused(&c, &cfg, Some(b"3")));
    assert!(!c.resp3);
    assert!(
        run(&mut c, &cfg, &[b"HELLO", b"2"])
            .0
            .starts_with(b"*14\r\n")
    );
    assert!(run(&mut c, &cfg, &[b"HELLO"]).0.starts_with(b"*14\r\n"));

    // Unset: both, as Redis.
    cfg.protocol_version = None;
    let mut c = conn(&cfg, None);
    assert!(
        run(&mut c, &cfg, &[b"HELLO", b"3"])
            .0
            .starts_with(b"%7\r\n")
    );
    assert!(
        run(&mut c, &cfg, &[b"HELLO", b"2"])
            .0
            .starts_with(b"*14\r\n")
    );
}

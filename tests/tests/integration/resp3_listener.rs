//! A listener's `protocol_version` (Envoy `RedisProxy.protocol_version`). With `"resp3"` a
//! client must `HELLO 3` before anything but HELLO, AUTH and QUIT (the rest, unknown commands
//! included, is answered `-NOPROTO`), and its replies keep redis-server's RESP3 types byte for
//! byte. With `"resp2"`, `HELLO 3` is refused. A backend that refuses `HELLO 3` counts in
//! `cluster.<c>.redis_cluster.upstream_resp3_hello_failure` and its clients get an error.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer};

const NOPROTO: &[u8] = b"-NOPROTO unsupported protocol version\r\n";
const PASSWORD: &str = "s3cret";

fn resp3_over(backend: &RedisServer) -> Respite {
    Respite::over_with(
        &[backend.addr()],
        2,
        &format!("protocol_version = \"resp3\"\ndownstream_auth_passwords = [\"{PASSWORD}\"]"),
    )
}

/// A RESP3 `HELLO` reply of any server: a map whose `proto` is 3.
fn assert_hello3(reply: &[u8]) {
    assert!(reply.starts_with(b"%7\r\n"), "{}", show(reply));
    let proto = b"$5\r\nproto\r\n:3\r\n";
    assert!(
        reply.windows(proto.len()).any(|w| w == proto),
        "{}",
        show(reply)
    );
}

#[test]
fn resp3_listener_requires_hello3_first() {
    let backend = RedisServer::start();
    let proxy = resp3_over(&backend);
    let mut c = proxy.raw();
    assert_eq!(c.cmd(&[b"PING"]), NOPROTO);
    assert_eq!(c.cmd(&[b"NOSUCHCOMMAND", b"x"]), NOPROTO);
    assert_eq!(c.cmd(&[b"GET", b"k"]), NOPROTO);
    assert_eq!(c.cmd(&[b"MULTI"]), NOPROTO);
    assert_eq!(c.cmd(&[b"SUBSCRIBE", b"ch"]), NOPROTO);
    assert_eq!(c.cmd(&[b"BLPOP", b"list", b"0"]), NOPROTO);
    assert_eq!(c.cmd(&[b"auth", PASSWORD.as_bytes()]), OK);
    assert_eq!(c.cmd(&[b"HELLO", b"2"]), NOPROTO);
    assert_eq!(c.cmd(&[b"HELLO"]), NOPROTO);
    assert_eq!(c.cmd(&[b"PING"]), NOPROTO);
    assert_hello3(&c.cmd(&[b"HELLO", b"3"]));
    // Once RESP3, a bare HELLO asks for the connection's version: 3.
    assert_hello3(&c.cmd(&[b"hello"]));
    assert_eq!(c.cmd(&[b"PING"]), b"+PONG\r\n");
    // The gate's refusals; HELLO's own NOPROTO answers are not among them.
    assert_eq!(proxy.stat("redis.main.downstream_rq_noproto"), 7);

    // The same commands on a direct RESP3 connection to an empty server of its own (the
    // writes must meet the same state as through the proxy): the same bytes.
    let twin = RedisServer::start();
    let mut direct = twin.raw();
    assert_hello3(&direct.cmd(&[b"HELLO", b"3"]));
    let commands: Vec<Vec<Vec<u8>>> = vec![
        cmd(&[b"SET", b"k", b"v"]),
        cmd(&[b"GET", b"k"]),
        cmd(&[b"HSET", b"h", b"f1", b"a", b"f2", b"b"]),
        cmd(&[b"HGETALL", b"h"]),
        cmd(&[b"SADD", b"s", b"m"]),
        cmd(&[b"SMEMBERS", b"s"]),
        cmd(&[b"ZADD", b"z", b"1.5", b"m"]),
        cmd(&[b"ZSCORE", b"z", b"m"]),
        cmd(&[b"GET", b"missing"]),
        cmd(&[b"MULTI"]),
        cmd(&[b"HGETALL", b"h"]),
        cmd(&[b"EXEC"]),
    ];
    for command in &commands {
        let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        let via_proxy = c.cmd(&args);
        let want = direct.cmd(&args);
        assert_eq!(show(&via_proxy), show(&want), "{}", show(&args.concat()));
    }
    let hgetall = direct.cmd(&[b"HGETALL", b"h"]);
    assert!(hgetall.starts_with(b"%2\r\n"), "{}", show(&hgetall));

    // QUIT passes the gate on a fresh connection.
    let mut q = proxy.raw();
    assert_eq!(q.cmd(&[b"QUIT"]), OK);
    assert!(q.is_closed(Duration::from_secs(5)));
}

#[test]
fn resp3_listener_answers_a_pipeline_before_hello_in_order() {
    let backend = RedisServer::start();
    backend.raw().cmd(&[b"SET", b"k", b"v"]);
    let proxy = resp3_over(&backend);
    let mut c = proxy.raw();
    let mut bytes = Vec::new();
    for args in [
        &[&b"GET"[..], b"k"][..],
        &[b"AUTH", PASSWORD.as_bytes()],
        &[b"PING"],
        &[b"HELLO", b"3"],
        &[b"GET", b"k"],
        &[b"UNKNOWNCMD"],
        &[b"HGETALL", b"nothing"],
    ] {
        RawClient::encode_into(&mut bytes, args);
    }
    c.send_raw(&bytes);
    assert_eq!(c.read_reply(), NOPROTO);
    assert_eq!(c.read_reply(), OK);
    assert_eq!(c.read_reply(), NOPROTO);
    assert_hello3(&c.read_reply());
    assert_eq!(c.read_reply(), b"$1\r\nv\r\n");
    let unknown = c.read_reply();
    assert!(
        unknown.starts_with(b"-ERR unknown command 'UNKNOWNCMD'"),
        "{}",
        show(&unknown)
    );
    assert_eq!(c.read_reply(), b"%0\r\n");
}

#[test]
fn resp2_listener_refuses_hello3() {
    let backend = RedisServer::start();
    let proxy = Respite::over_with(&[backend.addr()], 1, "protocol_version = \"resp2\"");
    let mut c = proxy.raw();
    assert_eq!(c.cmd(&[b"HELLO", b"3"]), NOPROTO);
    assert!(c.cmd(&[b"HELLO", b"2"]).starts_with(b"*14\r\n"));
    assert!(c.cmd(&[b"HELLO"]).starts_with(b"*14\r\n"));
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"k"]), b"$1\r\nv\r\n");
    assert_eq!(c.cmd(&[b"HSET", b"h", b"f", b"x"]), b":1\r\n");
    assert_eq!(c.cmd(&[b"HGETALL", b"h"]), b"*2\r\n$1\r\nf\r\n$1\r\nx\r\n");
}

/// A backend that answers every read the way a server without `HELLO` answers `HELLO 3`.
fn refusing_backend() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0
                        || conn
                            .write_all(
                                b"-ERR unknown command 'HELLO', with args beginning with: '3' \r\n",
                            )
                            .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn upstream_hello3_failure_is_counted_and_the_client_gets_an_error() {
    let backend = refusing_backend();
    let proxy = Respite::over_with(&[backend], 1, "protocol_version = \"resp3\"");
    let mut c = proxy.raw();
    assert_hello3(&c.cmd(&[b"HELLO", b"3"]));
    let started = Instant::now();
    let reply = c.cmd(&[b"GET", b"k"]);
    assert!(reply.starts_with(b"-"), "{}", show(&reply));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stat = "cluster.cache.redis_cluster.upstream_resp3_hello_failure";
    assert!(
        wait_until(Duration::from_secs(5), || proxy.stat(stat) >= 1),
        "{stat} = {}",
        proxy.stat(stat)
    );
}

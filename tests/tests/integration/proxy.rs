//! Respite as a proxy over real redis-servers: key placement, multi-key commands compared with
//! a single Redis, concurrent pipelined clients, local commands, downstream AUTH, admin stats.

use crate::common;

use std::time::Duration;

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer};

/// (Test 1) Every key is stored on exactly the backend respite's ketama names, hash-tagged keys
/// together.
#[test]
fn keys_land_where_the_hash_says() {
    let backends = servers(3);
    let addrs = addrs(&backends);
    let respite = Respite::over(&addrs, 2);
    let placement = Placement::new(&addrs);

    let mut keys: Vec<Vec<u8>> = (0..1000)
        .flat_map(|i| [format!("key:{i}"), format!("{i}:key")])
        .map(String::into_bytes)
        .collect();
    keys.push(b"{user1}.a".to_vec());
    keys.push(b"{user1}.b".to_vec());
    let commands: Vec<Vec<Vec<u8>>> = keys.iter().map(|k| cmd(&[b"SET", k, b"v"])).collect();
    let mut c = respite.raw();
    for (k, r) in keys.iter().zip(pipelined(&mut c, &commands, 500)) {
        assert_eq!(r, OK, "SET {} through respite", show(k));
    }

    let mut direct: Vec<RawClient> = backends.iter().map(|b| b.raw()).collect();
    let mut per_backend = [0usize; 3];
    for k in &keys {
        let want = placement.owner(k);
        per_backend[want] += 1;
        for (i, d) in direct.iter_mut().enumerate() {
            assert_eq!(
                exists_on(d, k),
                i == want,
                "key {} on backend {i} ({}), ketama says backend {want}",
                show(k),
                addrs[i]
            );
        }
    }
    assert_eq!(
        placement.owner(b"{user1}.a"),
        placement.owner(b"{user1}.b"),
        "hash-tagged keys must hash together"
    );
    // Every backend got a share (the check above is not vacuous).
    assert!(per_backend.iter().all(|&n| n >= 50), "{per_backend:?}");
}

/// The differential multi-key stream of test 2.
fn multikey_stream() -> Vec<Vec<Vec<u8>>> {
    let mut s: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut add = |args: &[&[u8]]| s.push(cmd(args));
    let bin1: &[u8] = b"bin\r\nkey\x00\xff";
    let bin2: &[u8] = b"\r\n";
    add(&[
        b"MSET", b"a", b"1", b"b", b"2", b"c", b"3", b"d", b"4", b"e", b"5",
    ]);
    add(&[
        b"MGET",
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
        b"missing1",
        b"missing2",
    ]);
    add(&[b"MGET", b"a", b"a"]);
    add(&[b"MGET", b"missing"]);
    add(&[b"EXISTS", b"a", b"a"]);
    add(&[b"EXISTS", b"a", b"b", b"nope", b"c", b"a"]);
    add(&[b"TOUCH", b"a", b"b", b"nope", b"c"]);
    add(&[b"TOUCH", b"a", b"a"]);
    add(&[b"DEL", b"a", b"a"]);
    add(&[b"MGET", b"a", b"b"]);
    add(&[b"DEL", b"b", b"c", b"nope"]);
    add(&[b"UNLINK", b"d", b"e", b"d", b"zzz"]);
    add(&[b"MGET", b"a", b"b", b"c", b"d", b"e"]);
    // Many keys over all backends.
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    let mut mget: Vec<Vec<u8>> = vec![b"MGET".to_vec()];
    let mut del: Vec<Vec<u8>> = vec![b"DEL".to_vec()];
    for i in 0..60 {
        mset.push(format!("k{i}").into_bytes());
        mset.push(format!("value-{i}").into_bytes());
        mget.push(format!("k{}", i * 7 % 70).into_bytes());
        if i % 3 == 0 {
            del.push(format!("k{i}").into_bytes());
        }
    }
    s.push(mset);
    s.push(mget.clone());
    s.push(del);
    s.push(mget);
    let mut add = |args: &[&[u8]]| s.push(cmd(args));
    // Wrong types: MGET gives nil for a non-string, GET gives WRONGTYPE.
    add(&[b"HSET", b"h", b"f", b"v"]);
    add(&[b"RPUSH", b"l", b"x", b"y"]);
    add(&[b"MGET", b"h", b"k1", b"l", b"k2"]);
    add(&[b"GET", b"l"]);
    add(&[b"GET", b"h"]);
    add(&[b"EXISTS", b"h", b"l", b"k1"]);
    add(&[b"DEL", b"h", b"l", b"k1", b"k1"]);
    // Binary keys with CRLF, empty key, empty value.
    add(&[b"MSET", bin1, b"x\r\ny", bin2, b"", b"", b"empty-key"]);
    add(&[b"MGET", bin1, bin2, b"", b"nothing"]);
    add(&[b"GET", b""]);
    add(&[b"EXISTS", bin1, bin2, b"", b""]);
    add(&[b"SET", b"ev", b""]);
    add(&[b"MGET", b"ev", b"ev"]);
    add(&[b"DEL", bin1, bin2, b"", b"ev"]);
    add(&[b"MGET", bin1, bin2, b"", b"ev"]);
    // Hash-tagged keys together.
    add(&[b"MSET", b"{t}.1", b"one", b"{t}.2", b"two"]);
    add(&[b"MGET", b"{t}.1", b"{t}.2", b"{t}.3"]);
    add(&[b"UNLINK", b"{t}.1", b"{t}.2", b"{t}.3"]);
    // Arity errors on multi-key commands.
    add(&[b"MSET", b"a"]);
    add(&[b"MSET", b"a", b"1", b"b"]);
    add(&[b"MGET"]);
    add(&[b"DEL"]);
    add(&[b"EXISTS"]);
    s
}

/// (Test 2) The same multi-key stream gives byte-identical replies through respite (3 backends) and
/// straight from one redis-server.
#[test]
fn multikey_differential_against_single_redis() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let single = RedisServer::start();
    let mut via = respite.raw();
    let mut direct = single.raw();
    let mut mismatches = Vec::new();
    let stream = multikey_stream();
    for c in &stream {
        let args: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
        let want = direct.cmd(&args);
        let got = via.cmd(&args);
        if got != want {
            mismatches.push(format!(
                "command {:?}\n  redis:   {}\n  respite: {}",
                args.iter().map(|a| show(a)).collect::<Vec<_>>(),
                show(&want),
                show(&got)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} commands differ:\n{}",
        mismatches.len(),
        stream.len(),
        mismatches.join("\n")
    );
}

/// One client's pipeline of test 3 and the replies it must get.
fn client_script(id: usize, n: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut out = Vec::new();
    let mut want = Vec::new();
    let mut counter = 0i64;
    let mut live: Vec<Option<Vec<u8>>> = vec![None; n];
    let key = |i: usize| format!("c{id}:k{i}").into_bytes();
    let ctr = format!("c{id}:ctr").into_bytes();
    let mut i = 0;
    while want.len() < n {
        let v = format!("v{id}-{i}-{}", i * 31 + id).into_bytes();
        match i % 5 {
            0 => {
                RawClient::encode_into(&mut out, &[b"SET", &key(i), &v]);
                want.push(OK.to_vec());
                live[i] = Some(v);
            }
            1 => {
                let k = i - 1;
                RawClient::encode_into(&mut out, &[b"GET", &key(k)]);
                want.push(bulk(live[k].as_ref().unwrap()));
            }
            2 => {
                RawClient::encode_into(&mut out, &[b"INCR", &ctr]);
                counter += 1;
                want.push(int(counter));
            }
            3 => {
                // MGET over own keys written so far (some deleted, some never written).
                let ks: Vec<usize> = [i.saturating_sub(3), i.saturating_sub(8), i, i + 1, 0]
                    .into_iter()
                    .collect();
                let mut args: Vec<Vec<u8>> = vec![b"MGET".to_vec()];
                let mut reply = format!("*{}\r\n", ks.len()).into_bytes();
                for &k in &ks {
                    args.push(key(k));
                    match live.get(k).and_then(|v| v.as_ref()) {
                        Some(v) => reply.extend(bulk(v)),
                        None => reply.extend_from_slice(NIL),
                    }
                }
                let a: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
                RawClient::encode_into(&mut out, &a);
                want.push(reply);
            }
            _ => {
                // DEL every other written key (and one never written).
                let k = i - 4;
                let deleted = if (i / 5) % 2 == 0 { k } else { n + i };
                RawClient::encode_into(&mut out, &[b"DEL", &key(deleted)]);
                let existed = live.get_mut(deleted).and_then(|v| v.take()).is_some();
                want.push(int(existed as i64));
            }
        }
        i += 1;
    }
    (out, want)
}

/// (Test 3) 50 concurrent clients, each pipelining 1 000 mixed commands, each gets exactly its own
/// replies in order.
#[test]
fn concurrent_pipelining_clients_get_their_own_replies() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let addr = respite.addr();
    let threads: Vec<_> = (0..50)
        .map(|id| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let (bytes, want) = client_script(id, 1000);
                let mut c = RawClient::connect(&addr);
                let mut w = c.stream().try_clone().unwrap();
                // Write from another thread so a full socket buffer never deadlocks us.
                let writer = std::thread::spawn(move || {
                    use std::io::Write;
                    for chunk in bytes.chunks(16 * 1024) {
                        w.write_all(chunk).unwrap();
                    }
                });
                for (n, want) in want.iter().enumerate() {
                    let got = c.read_reply();
                    assert_eq!(show(&got), show(want), "client {id} reply #{n}");
                }
                writer.join().unwrap();
                // Nothing extra arrives.
                c.stream()
                    .set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                assert!(c.try_read_reply().is_err(), "client {id}: extra reply");
            })
        })
        .collect();
    let mut failures = Vec::new();
    for t in threads {
        if let Err(e) = t.join() {
            failures.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into()),
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} clients failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}

/// (Test 7a) Local commands answered by respite itself.
#[test]
fn local_commands() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    assert_eq!(show(&c.cmd(&[b"PING"])), show(b"+PONG\r\n"));
    assert_eq!(
        show(&c.cmd(&[b"PING", b"hello there"])),
        show(&bulk(b"hello there"))
    );
    assert_eq!(show(&c.cmd(&[b"ECHO", b"a\r\nb"])), show(&bulk(b"a\r\nb")));
    assert_eq!(show(&c.cmd(&[b"SELECT", b"0"])), show(OK));
    assert_eq!(
        show(&c.cmd(&[b"SELECT", b"1"])),
        show(b"-ERR DB index is out of range\r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"foo", b"a", b"b"])),
        show(b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"get"])),
        show(b"-ERR wrong number of arguments for 'get' command\r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"GET", b"a", b"b"])),
        show(b"-ERR wrong number of arguments for 'get' command\r\n")
    );
    // The connection is still usable after errors.
    assert_eq!(show(&c.cmd(&[b"SET", b"x", b"1"])), show(OK));
    assert_eq!(show(&c.cmd(&[b"GET", b"x"])), show(&bulk(b"1")));
    // QUIT: +OK, then the connection is closed.
    assert_eq!(show(&c.cmd(&[b"QUIT"])), show(OK));
    assert!(
        c.is_closed(Duration::from_secs(2)),
        "connection open after QUIT"
    );
}

/// (Test 7b) Inline commands, with quoting, and empty inline lines ignored.
#[test]
fn inline_commands() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    c.send_raw(b"set k \"a b\"\r\n");
    assert_eq!(show(&c.read_reply()), show(OK));
    c.send_raw(b"get k\r\n");
    assert_eq!(show(&c.read_reply()), show(&bulk(b"a b")));
    c.send_raw(b"\r\n\r\n\nPING\r\n\r\nEXISTS k nope\r\n");
    assert_eq!(show(&c.read_reply()), show(b"+PONG\r\n"));
    assert_eq!(show(&c.read_reply()), show(&int(1)));
    // Nothing more: the empty lines got no reply.
    c.stream()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(c.try_read_reply().is_err(), "empty inline line got a reply");
}

/// Sum of every backend's `cmdstat_*` calls other than INFO.
fn commands_seen(backends: &[RedisServer]) -> u64 {
    let mut total = 0;
    for b in backends {
        let info = b.raw().cmd(&[b"INFO", b"commandstats"]);
        for line in String::from_utf8_lossy(&info).lines() {
            if line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:") {
                let calls = line
                    .split("calls=")
                    .nth(1)
                    .and_then(|s| s.split(',').next())
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("bad commandstats line {line}"));
                total += calls;
            }
        }
    }
    total
}

/// (Test 7c) A RESP protocol error: Redis's exact reply, then the connection is closed, and nothing
/// reached a backend.
#[test]
fn protocol_error_closes_connection() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    // What Redis itself says.
    let single = RedisServer::start();
    let mut d = single.raw();
    d.send_raw(b"*1\r\n:1\r\n");
    let redis_says = d.read_reply();
    assert!(d.is_closed(Duration::from_secs(2)));

    let before = commands_seen(&backends);
    let mut c = respite.raw();
    c.send_raw(b"*1\r\n:1\r\n");
    let got = c.read_reply();
    assert_eq!(
        show(&got),
        show(b"-ERR Protocol error: expected '$', got ':'\r\n")
    );
    assert_eq!(show(&got), show(&redis_says));
    assert!(
        c.is_closed(Duration::from_secs(2)),
        "connection open after protocol error"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(commands_seen(&backends), before, "a backend saw a command");
}

/// (Test 7d) An 8 MB value written in small chunks comes back byte-exact.
#[test]
fn multi_megabyte_value() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let value: Vec<u8> = (0..8 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let req = RawClient::encode(&[b"SET", b"big", &value]);
    let mut c = respite.raw();
    // Small writes (TCP_NODELAY: each goes out on its own), with pauses so respite sees the
    // value arrive in many partial reads.
    for (i, chunk) in req.chunks(7919).enumerate() {
        c.send_raw(chunk);
        if i % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(show(&c.read_reply()), show(OK));
    let got = c.cmd(&[b"GET", b"big"]);
    assert!(
        got == bulk(&value),
        "GET big: {} bytes back, differs",
        got.len()
    );
    assert_eq!(c.cmd(&[b"STRLEN", b"big"]), int(value.len() as i64));
}

/// (Test 7e) A small pipeline split at every byte boundary gives the right replies.
#[test]
fn pipeline_split_at_every_byte() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    let mut req = Vec::new();
    RawClient::encode_into(&mut req, &[b"SET", b"sa", b"hello"]);
    RawClient::encode_into(&mut req, &[b"GET", b"sa"]);
    RawClient::encode_into(&mut req, &[b"PING"]);
    RawClient::encode_into(&mut req, &[b"MGET", b"sa", b"sb", b"sa"]);
    req.extend_from_slice(b"echo x\r\n");
    RawClient::encode_into(&mut req, &[b"INCR", b"n"]);
    let want_prefix: Vec<Vec<u8>> = vec![
        OK.to_vec(),
        bulk(b"hello"),
        b"+PONG\r\n".to_vec(),
        [b"*3\r\n".as_slice(), &bulk(b"hello"), NIL, &bulk(b"hello")].concat(),
        bulk(b"x"),
    ];
    for split in 1..req.len() {
        c.send_raw(&req[..split]);
        std::thread::sleep(Duration::from_millis(2));
        c.send_raw(&req[split..]);
        for (i, want) in want_prefix.iter().enumerate() {
            let got = c.read_reply();
            assert_eq!(show(&got), show(want), "split at {split}, reply {i}");
        }
        let got = c.read_reply();
        assert_eq!(
            show(&got),
            show(&int(split as i64)),
            "split at {split}, INCR"
        );
    }
}

/// (Test 8) Downstream AUTH.
#[test]
fn downstream_auth() {
    let backends = servers(2);
    let respite = Respite::over_with(
        &addrs(&backends),
        2,
        r#"downstream_auth_passwords = ["pw"]"#,
    );
    let mut c = respite.raw();
    assert_eq!(
        show(&c.cmd(&[b"GET", b"a"])),
        show(b"-NOAUTH Authentication required.\r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"SET", b"a", b"1"])),
        show(b"-NOAUTH Authentication required.\r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"AUTH", b"nope"])),
        show(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
    );
    assert_eq!(
        show(&c.cmd(&[b"GET", b"a"])),
        show(b"-NOAUTH Authentication required.\r\n")
    );
    assert_eq!(show(&c.cmd(&[b"AUTH", b"pw"])), show(OK));
    assert_eq!(show(&c.cmd(&[b"SET", b"a", b"1"])), show(OK));
    assert_eq!(show(&c.cmd(&[b"GET", b"a"])), show(&bulk(b"1")));
    assert_eq!(
        show(&c.cmd(&[b"MGET", b"a", b"b"])),
        show(&[b"*2\r\n".as_slice(), &bulk(b"1"), NIL].concat())
    );
    // Another connection is not authenticated.
    let mut c2 = respite.raw();
    assert_eq!(
        show(&c2.cmd(&[b"GET", b"a"])),
        show(b"-NOAUTH Authentication required.\r\n")
    );
    // Nothing reached a backend unauthenticated: key a was written once.
    let placement = Placement::new(&addrs(&backends));
    let owner = placement.owner(b"a");
    assert_eq!(backends[owner].raw().cmd(&[b"GET", b"a"]), bulk(b"1"));

    // No password configured: AUTH with a password alone is an error (Redis 7.0's text).
    let open = Respite::over(&addrs(&backends), 1);
    let mut c3 = open.raw();
    assert_eq!(
        show(&c3.cmd(&[b"AUTH", b"pw"])),
        show(
            b"-ERR AUTH <password> called without any password configured for the default \
              user. Are you sure your configuration is correct?\r\n"
        )
    );
    assert_eq!(show(&c3.cmd(&[b"GET", b"a"])), show(&bulk(b"1")));
}

/// (Test 11) Admin stats after a known workload.
#[test]
fn admin_stats_count_exactly() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let connections = 5;
    let mut clients: Vec<RawClient> = (0..connections).map(|_| respite.raw()).collect();
    for i in 0..100 {
        let c = &mut clients[i % connections];
        if i < 50 {
            assert_eq!(c.cmd(&[b"SET", format!("s{i}").as_bytes(), b"v"]), OK);
        }
        let r = c.cmd(&[b"GET", format!("s{i}").as_bytes()]);
        assert_eq!(r, if i < 50 { bulk(b"v") } else { NIL.to_vec() });
    }
    for c in clients.iter_mut().take(3) {
        let r = c.cmd(&[b"nosuchcmd", b"x"]);
        assert!(
            r.starts_with(b"-ERR unknown command 'nosuchcmd'"),
            "{}",
            show(&r)
        );
    }
    // The harness's start-up probe (wait_for_port) is one more downstream connection.
    let want: Vec<(&str, i64)> = vec![
        ("redis.main.command.get.total", 100),
        ("redis.main.command.get.success", 100),
        ("redis.main.command.get.error", 0),
        ("redis.main.command.set.total", 50),
        ("redis.main.command.set.success", 50),
        ("redis.main.splitter.unsupported_command", 3),
        ("redis.main.downstream_cx_total", connections as i64 + 1),
    ];
    let mut stats = respite.stats();
    let matches = |s: &std::collections::BTreeMap<String, i64>| {
        want.iter()
            .all(|(k, v)| s.get(*k).copied().unwrap_or(0) == *v)
    };
    wait_until(Duration::from_secs(3), || {
        stats = respite.stats();
        matches(&stats)
    });
    for (k, v) in &want {
        assert_eq!(stats.get(*k).copied().unwrap_or(0), *v, "stat {k}");
    }
    let rq: i64 = stats
        .iter()
        .filter(|(k, _)| k.starts_with("cluster.cache.host.") && k.ends_with(".rq_total"))
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(rq, 150, "sum of cluster.cache.host.*.rq_total");
    let (status, body) = respite.admin_get("/stats/prometheus");
    assert_eq!(status, 200);
    assert!(
        body.contains("envoy_redis_command_total"),
        "prometheus body:\n{body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("envoy_redis_command_total")
                && l.contains("envoy_redis_command=\"get\"")
                && l.trim_end().ends_with(" 100")),
        "no get total of 100 in prometheus body:\n{body}"
    );
}

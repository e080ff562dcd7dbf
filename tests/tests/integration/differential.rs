//! Differential test: random command sequences sent through Respite over 3 redis-servers and
//! straight to one redis-server must get byte-identical replies, command by command.
//!
//! The key space is small (5 plain keys spread so every backend owns one, 3 tagged) so commands collide on keys and types (WRONGTYPE errors, overwrites,
//! expiry, renames). Untagged keys spread over the backends (checked below); commands that need
//! their keys together (MSETNX, RENAME, LMOVE, SMOVE, SINTER, ...) only get the hash-tagged keys
//! `{t}a`, `{t}b`, `{t}c`, which live on one backend. MSET/MGET/DEL/EXISTS/TOUCH/UNLINK get any
//! keys: Respite splits them and merges the replies, which must still equal Redis's. DBSIZE,
//! KEYS and FLUSHALL fan out to every backend and are merged. Movable-key commands (SINTERCARD,
//! ZUNIONSTORE, ZINTER, LMPOP) and containers (OBJECT ENCODING) get tagged keys.
//!
//! Normalisations (the only ones; everything else is compared byte for byte):
//! - `SMEMBERS`/`SINTER`/`SUNION`/`SDIFF`: array elements sorted. Redis 7.0 keeps string sets in
//!   a hashtable whose iteration order depends on the process's random hash seed, so two plain
//!   redis-servers already disagree on it.
//! - `KEYS`: elements sorted (Respite concatenates the backends' answers in shard order; each
//!   backend's order is its dict's).
//! - `TTL`: a positive TTL becomes `:<positive>` (the two servers' clocks tick apart; the TTLs
//!   set are 100000 s, so a key never expires during the test).
//!
//! Deterministic: proptest runs 64 cases × up to 80 commands (`DIFF_CASES` to change) from a
//! fixed seed (ChaCha
//! deterministic RNG), no failure persistence; a failure shrinks to a short sequence and prints
//! it with both replies. Between cases every server is FLUSHALLed directly.

use crate::common;

use common::{Placement, addrs, servers, show};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use respite_tests::RedisServer;
use respite_tests::respite::Respite;

/// Untagged keys per test (picked at run time so they cover every backend, see [`key_space`]).
const UNTAGGED: usize = 5;
const TAGGED: &[&str] = &["{t}a", "{t}b", "{t}c"];
const VALUES: &[&str] = &[
    "1",
    "10",
    "-3",
    "0",
    "x",
    "hello",
    "",
    "3.5",
    "9223372036854775807",
];
const FIELDS: &[&str] = &["f1", "f2", "f3"];
const MEMBERS: &[&str] = &["1", "2", "x", "y"];

/// Number of distinct operations `build` knows.
const OPS: u8 = 70;

/// One random command before it is rendered: an operation number and random picks.
#[derive(Debug, Clone)]
struct Raw {
    op: u8,
    k: [usize; 3],
    t: [usize; 3],
    v: [usize; 2],
    f: [usize; 2],
    m: [usize; 2],
    n: [i64; 2],
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        0..OPS,
        [0..NKEYS, 0..NKEYS, 0..NKEYS],
        [0..TAGGED.len(), 0..TAGGED.len(), 0..TAGGED.len()],
        [0..VALUES.len(), 0..VALUES.len()],
        [0..FIELDS.len(), 0..FIELDS.len()],
        [0..MEMBERS.len(), 0..MEMBERS.len()],
        [-4i64..8, -4i64..8],
    )
        .prop_map(|(op, k, t, v, f, m, n)| Raw {
            op,
            k,
            t,
            v,
            f,
            m,
            n,
        })
}

/// All keys: [`UNTAGGED`] plain ones, then the tagged ones.
const NKEYS: usize = UNTAGGED + 3;

/// The key space for backends at `addrs`: `UNTAGGED` keys chosen so that every backend owns at
/// least one (placement depends on the backends' ports), then the tagged keys. The candidates
/// vary in every character (`k` and a hex multiple of the golden ratio): ketama over
/// twemproxy's 32-bit FNV-1a puts keys that differ only in their last digits (`k0`…`k999`)
/// on a narrow arc of the ring, and for some ports one of three backends owned none of them.
fn key_space(addrs: &[String]) -> Vec<String> {
    let placement = Placement::new(addrs);
    let mut chosen: Vec<String> = Vec::new();
    let mut owned = vec![0usize; addrs.len()];
    for i in 0..1000u64 {
        let k = format!("k{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let o = placement.owner(k.as_bytes());
        // Take a key if its backend has fewer than its share, until UNTAGGED keys are chosen.
        if owned[o] < UNTAGGED.div_ceil(addrs.len()) {
            owned[o] += 1;
            chosen.push(k);
            if chosen.len() == UNTAGGED {
                break;
            }
        }
    }
    assert!(
        chosen.len() == UNTAGGED && owned.iter().all(|&n| n > 0),
        "cannot spread keys over the backends {addrs:?}: {owned:?}"
    );
    chosen.extend(TAGGED.iter().map(|t| t.to_string()));
    chosen
}

/// Renders a [`Raw`] into the command's arguments over the key space `keys`.
fn build(keys: &[String], r: &Raw) -> Vec<String> {
    let k = |i: usize| keys[r.k[i]].clone();
    let t = |i: usize| TAGGED[r.t[i]].to_string();
    let v = |i: usize| VALUES[r.v[i]].to_string();
    let f = |i: usize| FIELDS[r.f[i]].to_string();
    let m = |i: usize| MEMBERS[r.m[i]].to_string();
    let n = |i: usize| r.n[i].to_string();
    let off = (r.n[0].rem_euclid(8)).to_string();
    let s = |x: &str| x.to_string();
    match r.op {
        // strings
        0 => vec![s("SET"), k(0), v(0)],
        1 => vec![s("GET"), k(0)],
        2 => vec![s("APPEND"), k(0), v(0)],
        3 => vec![s("INCR"), k(0)],
        4 => vec![s("INCRBY"), k(0), n(0)],
        5 => vec![s("DECR"), k(0)],
        6 => vec![s("STRLEN"), k(0)],
        7 => vec![s("GETRANGE"), k(0), n(0), n(1)],
        8 => vec![s("SETRANGE"), k(0), off, v(0)],
        9 => vec![s("GETDEL"), k(0)],
        10 => vec![s("SETNX"), k(0), v(0)],
        11 => vec![s("MSET"), k(0), v(0), k(1), v(1)],
        12 => vec![s("MGET"), k(0), k(1), k(2)],
        13 => vec![s("MSETNX"), t(0), v(0), t(1), v(1)],
        14 => vec![s("GETSET"), k(0), v(0)],
        15 => vec![s("DECRBY"), k(0), n(0)],
        // hashes
        16 => vec![s("HSET"), k(0), f(0), v(0), f(1), v(1)],
        17 => vec![s("HGET"), k(0), f(0)],
        18 => vec![s("HDEL"), k(0), f(0), f(1)],
        19 => vec![s("HGETALL"), k(0)],
        20 => vec![s("HINCRBY"), k(0), f(0), n(0)],
        21 => vec![s("HLEN"), k(0)],
        22 => vec![s("HEXISTS"), k(0), f(0)],
        23 => vec![s("HMGET"), k(0), f(0), f(1)],
        // lists
        24 => vec![s("LPUSH"), k(0), v(0), v(1)],
        25 => vec![s("RPUSH"), k(0), v(0)],
        26 => vec![s("LPOP"), k(0)],
        27 => vec![s("RPOP"), k(0), off],
        28 => vec![s("LRANGE"), k(0), n(0), n(1)],
        29 => vec![s("LLEN"), k(0)],
        30 => vec![s("LINDEX"), k(0), n(0)],
        31 => vec![s("LREM"), k(0), n(0), v(0)],
        32 => vec![s("LMOVE"), t(0), t(1), s("LEFT"), s("RIGHT")],
        33 => vec![s("RPOPLPUSH"), t(0), t(1)],
        34 => vec![s("LSET"), k(0), n(0), v(0)],
        // sets
        35 => vec![s("SADD"), k(0), m(0), m(1)],
        36 => vec![s("SREM"), k(0), m(0)],
        37 => vec![s("SMEMBERS"), k(0)],
        38 => vec![s("SISMEMBER"), k(0), m(0)],
        39 => vec![s("SCARD"), k(0)],
        40 => vec![s(["SINTER", "SUNION", "SDIFF"][r.m[0] % 3]), t(0), t(1)],
        41 => vec![s("SMOVE"), t(0), t(1), m(0)],
        // sorted sets
        42 => vec![s("ZADD"), k(0), n(0), m(0), v(0), m(1)],
        43 => vec![s("ZRANGE"), k(0), s("0"), s("-1"), s("WITHSCORES")],
        44 => vec![s("ZINCRBY"), k(0), n(0), m(0)],
        45 => vec![s("ZSCORE"), k(0), m(0)],
        46 => vec![s("ZREM"), k(0), m(0), m(1)],
        47 => vec![s("ZRANK"), k(0), m(0)],
        // keyspace
        48 => vec![s("DEL"), k(0), k(1), k(2)],
        49 => vec![s("EXISTS"), k(0), k(1), k(2)],
        50 => vec![s("TOUCH"), k(0), k(1)],
        51 => vec![s("UNLINK"), k(0), k(1)],
        52 => vec![s("EXPIRE"), k(0), s("100000")],
        53 => vec![s(["TTL", "PERSIST"][r.m[0] % 2]), k(0)],
        54 => vec![s("TYPE"), k(0)],
        55 => vec![s(["RENAME", "RENAMENX"][r.m[0] % 2]), t(0), t(1)],
        // fan-out and movable-key commands
        56 => vec![s("DBSIZE")],
        57 => vec![s("KEYS"), s(["*", "k*", "{t}*"][r.m[0] % 3])],
        58 => vec![s("FLUSHALL")],
        59 => vec![s("INCRBYFLOAT"), k(0), s("1.5")],
        60 => vec![
            s("ZRANGEBYSCORE"),
            k(0),
            s("-inf"),
            s("+inf"),
            s("WITHSCORES"),
        ],
        61 => vec![s("ZPOPMIN"), k(0)],
        62 => vec![s("LPOS"), k(0), v(0)],
        63 => vec![s("SINTERCARD"), s("2"), t(0), t(1)],
        64 => vec![s("ZUNIONSTORE"), t(0), s("2"), t(1), t(2)],
        65 => vec![s("ZINTER"), s("2"), t(0), t(1), s("WITHSCORES")],
        66 => vec![s("LMPOP"), s("2"), t(0), t(1), s("LEFT")],
        67 => vec![s("OBJECT"), s("ENCODING"), k(0)],
        68 => vec![s("GETEX"), k(0), s("PERSIST")],
        _ => vec![s("COPY"), t(0), t(1), s("REPLACE")],
    }
}

/// Applies the documented normalisations (see the module docs) to `reply` of `args`.
fn normalise(args: &[String], reply: Vec<u8>) -> Vec<u8> {
    let name = args[0].as_str();
    match name {
        "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "KEYS" => {
            let Some(ranges) = respite::resp::array_elements(&reply) else {
                return reply;
            };
            let mut elems: Vec<&[u8]> = ranges.iter().map(|r| &reply[r.clone()]).collect();
            elems.sort();
            let mut out = format!("*{}\r\n", elems.len()).into_bytes();
            for e in elems {
                out.extend_from_slice(e);
            }
            out
        }
        "TTL" if respite::resp::integer_reply(&reply).is_some_and(|n| n > 0) => {
            b":<positive>\r\n".to_vec()
        }
        _ => reply,
    }
}

/// `DIFF_CASES` overrides the number of cases of each test.
fn cases(default: u32) -> u32 {
    std::env::var("DIFF_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

fn flush(servers: &[&RedisServer]) {
    for s in servers {
        assert_eq!(
            s.raw().cmd(&[b"FLUSHALL"]),
            b"+OK\r\n",
            "FLUSHALL {}",
            s.addr()
        );
    }
}

fn render(args: &[String]) -> String {
    args.iter()
        .map(|a| show(a.as_bytes()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn respite_replies_like_a_single_redis() {
    let backends = servers(3);
    let backend_addrs = addrs(&backends);
    let respite = Respite::over(&backend_addrs, 2);
    let direct = RedisServer::start();

    let keys = key_space(&backend_addrs);
    let config = Config {
        cases: cases(64),
        max_shrink_iters: 300,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let all: Vec<&RedisServer> = backends.iter().chain([&direct]).collect();
    let compared = std::cell::Cell::new(0usize);
    let result = runner.run(&prop::collection::vec(raw(), 1..80), |seq| {
        flush(&all);
        let mut via = respite.raw();
        let mut straight = direct.raw();
        let mut history: Vec<String> = Vec::new();
        for r in &seq {
            let args = build(&keys, r);
            let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let want = normalise(&args, straight.cmd(&argv));
            let got = normalise(&args, via.cmd(&argv));
            history.push(render(&args));
            if got != want {
                return Err(TestCaseError::fail(format!(
                    "reply differs for `{}`\n  redis:   {}\n  respite: {}\nsequence:\n  {}",
                    render(&args),
                    show(&want),
                    show(&got),
                    history.join("\n  ")
                )));
            }
            compared.set(compared.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\nrespite log:\n{}", respite.log());
    }
    let compared = compared.get();
    println!("differential: {compared} commands compared byte for byte");
    assert!(compared > 300, "only {compared} commands compared");
}

/// Pipelined: the same kind of stream written in one go (replies of split commands interleave
/// with single-backend ones); replies compared in order.
#[test]
fn pipelined_stream_matches_single_redis() {
    let backends = servers(3);
    let backend_addrs = addrs(&backends);
    let respite = Respite::over(&backend_addrs, 2);
    let direct = RedisServer::start();
    let keys = key_space(&backend_addrs);

    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: cases(16),
            max_shrink_iters: 100,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let all: Vec<&RedisServer> = backends.iter().chain([&direct]).collect();
    let result = runner.run(&prop::collection::vec(raw(), 1..200), |seq| {
        flush(&all);
        let cmds: Vec<Vec<String>> = seq.iter().map(|r| build(&keys, r)).collect();
        let bytes: Vec<Vec<Vec<u8>>> = cmds
            .iter()
            .map(|c| c.iter().map(|a| a.as_bytes().to_vec()).collect())
            .collect();
        let want = direct.raw().pipeline(&bytes);
        let got = respite.raw().pipeline(&bytes);
        for (i, c) in cmds.iter().enumerate() {
            let w = normalise(c, want[i].clone());
            let g = normalise(c, got[i].clone());
            if w != g {
                return Err(TestCaseError::fail(format!(
                    "reply {i} differs for `{}`\n  redis:   {}\n  respite: {}",
                    render(c),
                    show(&w),
                    show(&g)
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\nrespite log:\n{}", respite.log());
    }
}

//! Real client libraries through respite, each with its default connection handshake:
//! redis-py (PyPI `redis`), the Rust `redis` crate, and `redis-cli`.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use common::*;
use respite_tests::RedisServer;
use respite_tests::respite::Respite;

/// Three backends and respite over them (2 workers).
fn setup() -> (Vec<RedisServer>, Respite) {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    (backends, respite)
}

// ---- redis-py ------------------------------------------------------------------------------

/// redis-py's version (installed from PyPI if missing).
fn redis_py() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| python_module("redis", "redis"))
}

/// The redis-py script: every call asserts its result. `argv`: port, protocol ("default", "2"
/// or "3").
const REDIS_PY_SCRIPT: &str = r#"
import sys, redis
port, proto = int(sys.argv[1]), sys.argv[2]
kw = {} if proto == "default" else {"protocol": int(proto)}
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, **kw)
assert r.ping() is True
assert r.set("py:a", "1") is True
assert r.get("py:a") == b"1", r.get("py:a")
assert r.mset({"py:b": "2", "py:c": "3", "{py}x": "x", "{py}y": "y"}) is True
assert r.mget("py:a", "py:b", "py:c", "py:missing", "{py}x", "{py}y") == [b"1", b"2", b"3", None, b"x", b"y"]
assert r.incr("py:n") == 1
assert r.incr("py:n", 41) == 42
assert r.delete("py:a", "py:b", "py:missing") == 2
assert r.exists("py:a", "py:c") == 1
assert r.hset("py:h", mapping={"f1": "v1", "f2": "v2"}) == 2
assert r.hgetall("py:h") == {b"f1": b"v1", b"f2": b"v2"}, r.hgetall("py:h")
assert r.lpush("py:l", "a", "b", "c") == 3
assert r.lrange("py:l", 0, -1) == [b"c", b"b", b"a"]
p = r.pipeline(transaction=False)
for i in range(100):
    p.set(f"py:p:{i}", i)
for i in range(100):
    p.get(f"py:p:{i}")
p.mget([f"py:p:{i}" for i in range(100)])
p.delete(*[f"py:p:{i}" for i in range(50)])
res = p.execute()
assert res[:100] == [True] * 100, res[:100]
assert res[100:200] == [str(i).encode() for i in range(100)], res[100:200]
assert res[200] == [str(i).encode() for i in range(100)], res[200]
assert res[201] == 50, res[201]
assert r.get("py:p:49") is None and r.get("py:p:50") == b"50"
print("ok", redis.__version__, r.connection_pool.get_connection().protocol)
"#;

fn assert_script_ok(what: &str, out: &Output, log: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {}\nstdout: {}\nstderr: {}\nrespite log tail: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ok "),
        "{what}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// (6) `redis.Redis(port=P)` exactly as users write it: redis-py's default handshake and a round
/// of common commands, through respite. redis-py 8.1.0 (`redis/utils.py`:
/// `DEFAULT_RESP_VERSION = 3`) opens every connection with `HELLO 3` and has no RESP2 fallback,
/// so this holds only because respite speaks RESP3 to such clients.
#[test]
fn redis_py_default_client() {
    let version = redis_py();
    let (_b, respite) = setup();
    // The script itself is right: it passes against a redis-server (RESP3 there).
    let reference = RedisServer::start();
    let direct = run_python(
        REDIS_PY_SCRIPT,
        &[reference.port.to_string(), "default".into()],
        30,
    );
    assert_script_ok("redis-py default against redis-server", &direct, "");
    eprintln!(
        "redis-py {version} default against redis-server: {}",
        String::from_utf8_lossy(&direct.stdout).trim()
    );
    let out = run_python(
        REDIS_PY_SCRIPT,
        &[respite.port.to_string(), "default".into()],
        30,
    );
    eprintln!(
        "redis-py {version} default: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    assert_script_ok(
        &format!("redis-py {version}, redis.Redis(port=P)"),
        &out,
        &respite.log(),
    );
}

/// (6) The same script with `redis.Redis(port=P, protocol=2)` (RESP2, no HELLO): the handshake
/// is only `CLIENT SETINFO` (errors ignored by redis-py).
#[test]
fn redis_py_resp2_client() {
    let version = redis_py();
    let (_b, respite) = setup();
    let out = run_python(REDIS_PY_SCRIPT, &[respite.port.to_string(), "2".into()], 30);
    assert_script_ok(
        &format!("redis-py {version}, protocol=2"),
        &out,
        &respite.log(),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok {version} 2")
    );
}

/// (6) RESP3 (`HELLO 3`, redis-py's default): respite serves a RESP3 client from RESP3 upstream
/// connections, so replies keep their RESP3 types byte for byte — maps, doubles, RESP3 nulls,
/// also inside merged MGET replies — exactly as a single redis-server answers a RESP3 client.
#[test]
fn resp3_replies_equal_a_single_redis() {
    let (_b, respite) = setup();
    let reference = RedisServer::start();
    let mut via = respite.raw();
    let mut direct = reference.raw();
    for c in [&mut via, &mut direct] {
        let hello = c.cmd(&[b"HELLO", b"3"]);
        assert!(
            hello.starts_with(b"%7\r\n"),
            "{}",
            String::from_utf8_lossy(&hello)
        );
        assert!(
            hello.windows(10).any(|w| w == b"proto\r\n:3\r"),
            "{}",
            String::from_utf8_lossy(&hello)
        );
    }
    let script: &[&[&[u8]]] = &[
        &[b"HSET", b"h", b"f1", b"v1", b"f2", b"v2"],
        &[b"HGETALL", b"h"],
        &[b"ZADD", b"z", b"1.5", b"m"],
        &[b"ZSCORE", b"z", b"m"],
        &[b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"],
        &[b"GET", b"missing"],
        &[b"SET", b"a", b"1"],
        &[
            b"MGET", b"a", b"missing", b"h", b"0:other", b"1:other", b"2:other",
        ],
        &[b"SADD", b"s", b"x"],
        &[b"SMEMBERS", b"s"],
        &[b"CLIENT", b"GETNAME"],
        &[b"EXISTS", b"a", b"h", b"nope"],
        &[b"DEL", b"a", b"h", b"z", b"s"],
    ];
    for cmd in script {
        let want = direct.cmd(cmd);
        let got = via.cmd(cmd);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{:?}",
            cmd.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
    // RESET goes back to RESP2.
    assert_eq!(via.cmd(&[b"RESET"]), b"+RESET\r\n");
    assert_eq!(via.cmd(&[b"GET", b"missing"]), b"$-1\r\n");
}

// ---- the Rust redis crate -------------------------------------------------------------------

/// (7) The `redis` crate (0.32, sync), `Client::open("redis://127.0.0.1:P/")` with its default
/// handshake: SET/GET/MGET/DEL/INCR/EXISTS and a non-transactional pipeline.
#[test]
fn rust_redis_crate_client() {
    let (_b, respite) = setup();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", respite.port)).unwrap();
    let mut con = client
        .get_connection_with_timeout(std::time::Duration::from_secs(10))
        .expect("connect through respite");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let () = redis::cmd("SET")
        .arg("rs:a")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let a: String = redis::cmd("GET").arg("rs:a").query(&mut con).unwrap();
    assert_eq!(a, "1");
    let () = redis::cmd("MSET")
        .arg(&["rs:b", "2", "rs:c", "3"])
        .query(&mut con)
        .unwrap();
    let m: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["rs:a", "rs:b", "rs:missing", "rs:c"])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        m,
        vec![Some("1".into()), Some("2".into()), None, Some("3".into())]
    );
    let n: i64 = redis::cmd("INCR").arg("rs:n").query(&mut con).unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("INCRBY")
        .arg("rs:n")
        .arg(9)
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 10);
    let d: i64 = redis::cmd("DEL")
        .arg(&["rs:a", "rs:b", "rs:missing"])
        .query(&mut con)
        .unwrap();
    assert_eq!(d, 2);
    let e: i64 = redis::cmd("EXISTS")
        .arg(&["rs:a", "rs:c"])
        .query(&mut con)
        .unwrap();
    assert_eq!(e, 1);
    let bin: Vec<u8> = (0..=255u8).collect();
    let () = redis::cmd("SET")
        .arg(b"rs:\r\n\0")
        .arg(&bin)
        .query(&mut con)
        .unwrap();
    let got: Vec<u8> = redis::cmd("GET").arg(b"rs:\r\n\0").query(&mut con).unwrap();
    assert_eq!(got, bin);

    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("SET").arg(format!("rs:p:{i}")).arg(i).ignore();
    }
    for i in 0..200 {
        p.cmd("GET").arg(format!("rs:p:{i}"));
    }
    p.cmd("MGET")
        .arg((0..200).map(|i| format!("rs:p:{i}")).collect::<Vec<_>>());
    p.cmd("INCR").arg("rs:n");
    let (gets, mget, incr): (Vec<i64>, Vec<i64>, i64) = {
        let all: Vec<redis::Value> = p.query(&mut con).unwrap();
        assert_eq!(all.len(), 202);
        let gets = all[..200]
            .iter()
            .map(|v| redis::from_redis_value(v).unwrap())
            .collect();
        (
            gets,
            redis::from_redis_value(&all[200]).unwrap(),
            redis::from_redis_value(&all[201]).unwrap(),
        )
    };
    let want: Vec<i64> = (0..200).collect();
    assert_eq!(gets, want);
    assert_eq!(mget, want);
    assert_eq!(incr, 11);
    // An error inside a pipeline is that command's error; the connection stays usable.
    let r: redis::RedisResult<i64> = redis::cmd("INCR").arg("rs:c:not-a-number").query(&mut con);
    assert!(r.is_ok());
    let () = redis::cmd("SET")
        .arg("rs:s")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let r: redis::RedisResult<i64> = redis::cmd("INCR").arg("rs:s").query(&mut con);
    let e = r.unwrap_err();
    assert!(
        e.to_string().contains("not an integer"),
        "INCR of a string: {e}"
    );
    let a: Option<String> = redis::cmd("GET").arg("rs:s").query(&mut con).unwrap();
    assert_eq!(a.as_deref(), Some("x"));
}

// ---- redis-cli -------------------------------------------------------------------------------

fn redis_cli(port: u16, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("timeout")
        .args(["20", "redis-cli", "-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redis-cli");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().expect("redis-cli output")
}

/// (8) `redis-cli -p P` reading commands from stdin prints what it prints against a
/// redis-server, line for line.
#[test]
fn redis_cli_commands_on_stdin() {
    let (_b, respite) = setup();
    let reference = RedisServer::start();
    let input = "set a 1\nget a\nmset b 2 {t}c 3\nmget a b {t}c missing\nincr a\nincrby a 40\n\
                 del a b missing\nexists a {t}c\nhset h f v\nhgetall h\nrpush l x y z\n\
                 lrange l 0 -1\nping\necho \"hello world\"\nget \"\"\nset \"\" empty\nget \"\"\n\
                 strlen {t}c\nnosuchcommand x\nget\n";
    let direct = redis_cli(reference.port, &[], input);
    let proxied = redis_cli(respite.port, &[], input);
    let (d, p) = (
        String::from_utf8_lossy(&direct.stdout),
        String::from_utf8_lossy(&proxied.stdout),
    );
    assert!(direct.status.success() && proxied.status.success());
    assert!(d.starts_with("OK\n1\nOK\n1\n2\n3\n\n"), "redis-server: {d}");
    for (i, (pl, dl)) in p.lines().zip(d.lines()).enumerate() {
        assert_eq!(
            pl.trim_end(),
            dl.trim_end(),
            "line {i}: respite vs redis-server"
        );
    }
    assert_eq!(
        p.lines().count(),
        d.lines().count(),
        "respite:\n{p}\nredis:\n{d}"
    );
    // The simplest form from the docs.
    let out = redis_cli(respite.port, &[], "set a 1\nget a");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n1\n");
    // Formatted (--no-raw) output.
    let out = redis_cli(respite.port, &["--no-raw", "MGET", "{t}c", "missing"], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1) \"3\"\n2) (nil)\n");
}

/// (8) `redis-cli -p P --no-raw COMMAND COUNT` answers `(integer) N`, N the number of commands
/// respite describes; compared with redis-server's count (printed).
#[test]
fn redis_cli_command_count() {
    let (_b, respite) = setup();
    let reference = RedisServer::start();
    let out = redis_cli(respite.port, &["--no-raw", "COMMAND", "COUNT"], "");
    let direct = redis_cli(reference.port, &["--no-raw", "COMMAND", "COUNT"], "");
    let (p, d) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&direct.stdout).to_string(),
    );
    eprintln!(
        "COMMAND COUNT: respite {} / redis-server {}",
        p.trim(),
        d.trim()
    );
    let n: i64 = p
        .trim()
        .strip_prefix("(integer) ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("redis-cli --no-raw COMMAND COUNT through respite: {p:?}"));
    assert!(n >= 100, "COMMAND COUNT = {n}");
    let m: i64 = d
        .trim()
        .strip_prefix("(integer) ")
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(n <= m, "respite describes {n} commands, redis-server {m}");
}

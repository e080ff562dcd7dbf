//! `respite migrate verify` and `respite migrate copy`, run as a user would (the built binary)
//! against real redis-servers and a real six-node Redis Cluster: exit codes, the summary table,
//! `--json` counts and sample diffs, TTLs, the cursor file and `--rate`.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::wait_until;
use respite_tests::{RedisCluster, RedisServer, respite_bin};
use serde_json::Value;

/// Runs `respite migrate <args>`: (exit code, stdout, stderr).
fn migrate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(respite_bin())
        .arg("migrate")
        .args(args)
        .output()
        .expect("run respite migrate");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("respite migrate {}\n{stdout}{stderr}", args.join(" "));
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

/// `verify --json` plus `extra`: (exit code, parsed JSON).
fn verify_json(from: &str, to: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["verify", "--from", from, "--to", to, "--json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = migrate(&args);
    let json = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("verify --json printed no JSON ({e}): {stdout}{stderr}"));
    (code, json)
}

/// A count from a summary table line (`name   123`).
fn table_count(table: &str, name: &str) -> u64 {
    table
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{table}"))
}

fn q(c: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

fn int(c: &mut redis::Connection, args: &[&str]) -> i64 {
    match q(c, args) {
        redis::Value::Int(n) => n,
        other => panic!("{}: {other:?}", args.join(" ")),
    }
}

/// Keys of every type: `n` of each (`str:i`, `hash:i`, `list:i`, `set:i`, `zset:i`,
/// `stream:i`), every third one with a TTL of 300 s; `6 * n` keys. Keys spread over all
/// cluster slots (no hash tags).
fn populate(c: &mut redis::Connection, n: usize) {
    let mut p = redis::pipe();
    for i in 0..n {
        let v = format!("value-{i}");
        p.cmd("SET").arg(format!("str:{i}")).arg(&v).ignore();
        p.cmd("HSET")
            .arg(format!("hash:{i}"))
            .arg("a")
            .arg(&v)
            .arg("b")
            .arg(i)
            .ignore();
        p.cmd("RPUSH")
            .arg(format!("list:{i}"))
            .arg(&["x", "y", v.as_str(), "x"][..])
            .ignore();
        p.cmd("SADD")
            .arg(format!("set:{i}"))
            .arg(&["m1", "m2", v.as_str()][..])
            .ignore();
        p.cmd("ZADD")
            .arg(format!("zset:{i}"))
            .arg(1.5)
            .arg("a")
            .arg(i)
            .arg(&v)
            .ignore();
        p.cmd("XADD")
            .arg(format!("stream:{i}"))
            .arg("1-1")
            .arg("f")
            .arg(&v)
            .ignore();
        p.cmd("XADD")
            .arg(format!("stream:{i}"))
            .arg("2-0")
            .arg("g")
            .arg("h")
            .arg("f")
            .arg(i)
            .ignore();
        if i % 3 == 0 {
            for t in ["str", "hash", "list", "set", "zset", "stream"] {
                p.cmd("EXPIRE").arg(format!("{t}:{i}")).arg(300).ignore();
            }
        }
        if i % 50 == 49 {
            let _: () = p.query(c).expect("populate");
            p = redis::pipe();
        }
    }
    let _: () = p.query(c).expect("populate");
}

/// The keys [`plant`] changes, on both sides (9 keys, 10 commands: the stream gets two entries).
fn planted_base(c: &mut redis::Connection) {
    for cmd in [
        &["SET", "p:missing", "1"][..],
        &["SET", "p:type", "1"],
        &["SET", "p:string", "v1"],
        &["HSET", "p:hash", "f", "1", "g", "2"],
        &["RPUSH", "p:list", "a", "b", "c"],
        &["SADD", "p:set", "x", "y"],
        &["ZADD", "p:zset", "1", "m", "3", "n"],
        &["XADD", "p:stream", "1-0", "f", "v"],
        &["XADD", "p:stream", "2-0", "f", "w"],
        &["SET", "p:ttl", "v", "EX", "1000"],
    ] {
        q(c, cmd);
    }
}

/// Plants one difference of every kind on the target.
fn plant(c: &mut redis::Connection) {
    for cmd in [
        &["DEL", "p:missing"][..],
        &["DEL", "p:type"],
        &["SADD", "p:type", "1"],
        &["SET", "p:string", "v2"],
        &["HSET", "p:hash", "f", "9"],
        &["LSET", "p:list", "1", "x"],
        &["SREM", "p:set", "y"],
        &["SADD", "p:set", "z"],
        &["ZADD", "p:zset", "2", "m"],
        &["DEL", "p:stream"],
        &["XADD", "p:stream", "1-0", "f", "v"],
        &["XADD", "p:stream", "2-0", "f", "CHANGED"],
        &["EXPIRE", "p:ttl", "100"],
    ] {
        q(c, cmd);
    }
}

#[test]
fn verify_identical_data_of_every_type_finds_nothing() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    populate(&mut a.client(), 40);
    populate(&mut b.client(), 40);
    planted_base(&mut a.client());
    planted_base(&mut b.client());
    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["scanned"], 249);
    assert_eq!(json["checked"], 249);
    assert_eq!(json["equal"], 249);
    assert_eq!(json["differences"], 0);
    assert_eq!(json["source_keys"], 249);
    assert_eq!(json["diffs"], serde_json::json!([]));

    // The text form says the same.
    let (code, table, _) = migrate(&["verify", "--from", &a.addr(), "--to", &b.addr()]);
    assert_eq!(code, 0);
    assert_eq!(table_count(&table, "checked"), 249);
    assert_eq!(table_count(&table, "equal"), 249);
    assert_eq!(table_count(&table, "differences"), 0);
}

#[test]
fn verify_reports_planted_differences_of_every_kind() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    populate(&mut a.client(), 20);
    populate(&mut b.client(), 20);
    planted_base(&mut a.client());
    planted_base(&mut b.client());
    plant(&mut b.client());

    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 1, "{json}");
    assert_eq!(json["checked"], 129);
    assert_eq!(json["missing"], 1);
    assert_eq!(json["type_differs"], 1);
    assert_eq!(json["value_differs"], 6);
    assert_eq!(json["ttl_drift"], 1);
    assert_eq!(json["skipped"], 0);
    assert_eq!(json["differences"], 9);
    assert_eq!(json["equal"], 120);
    let diffs = json["diffs"].as_array().expect("diffs");
    assert_eq!(diffs.len(), 9, "{json}");
    let detail = |key: &str, kind: &str| -> String {
        let d = diffs
            .iter()
            .find(|d| d["key"] == key)
            .unwrap_or_else(|| panic!("{key} not reported: {json}"));
        assert_eq!(d["kind"], kind, "{d}");
        d["detail"].as_str().expect("detail").to_string()
    };
    assert_eq!(detail("p:missing", "missing"), "missing on target");
    assert_eq!(detail("p:type", "type"), "type: string vs set");
    assert_eq!(detail("p:string", "value"), r#"value: "v1" vs "v2""#);
    assert_eq!(detail("p:hash", "value"), r#"hash field "f": "1" vs "9""#);
    assert_eq!(detail("p:list", "value"), r#"list index 1: "b" vs "x""#);
    assert_eq!(
        detail("p:set", "value"),
        r#"set member "y": missing on target"#
    );
    assert_eq!(
        detail("p:zset", "value"),
        r#"zset member "m": score 1 vs 2"#
    );
    assert_eq!(
        detail("p:stream", "value"),
        "stream entry 2-0: fields differ"
    );
    // `ttl: 999.9s vs 99.9s`: source first, seconds.
    let ttl = detail("p:ttl", "ttl");
    let secs: Vec<f64> = ttl
        .strip_prefix("ttl: ")
        .map(|t| {
            t.split(" vs ")
                .filter_map(|s| s.trim_end_matches('s').parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        secs.len() == 2 && (990.0..=1000.0).contains(&secs[0]) && (90.0..=100.0).contains(&secs[1]),
        "{ttl}"
    );

    // The table names every key with its kind; --show bounds the samples.
    let (code, table, _) = migrate(&[
        "verify",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--show",
        "3",
    ]);
    assert_eq!(code, 1);
    assert_eq!(table_count(&table, "differences"), 9);
    assert_eq!(table_count(&table, "value differs"), 6);
    assert!(table.contains("sample differences (3 of 9)"), "{table}");
    let (_, table, _) = migrate(&["verify", "--from", &a.addr(), "--to", &b.addr()]);
    for (kind, key) in [
        ("missing", "p:missing"),
        ("type", "p:type"),
        ("value", "p:hash"),
        ("ttl", "p:ttl"),
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.trim_start().starts_with(kind) && l.contains(key)),
            "{kind} {key} not in:\n{table}"
        );
    }

    // --max-diffs: at the count → 0, below → 1.
    let (code, _) = verify_json(&a.addr(), &b.addr(), &["--max-diffs", "9"]);
    assert_eq!(code, 0);
    let (code, _) = verify_json(&a.addr(), &b.addr(), &["--max-diffs", "8"]);
    assert_eq!(code, 1);

    // --match limits the scan; --ttl-tolerance wider than the drift accepts it.
    let (code, json) = verify_json(
        &a.addr(),
        &b.addr(),
        &["--match", "p:*", "--ttl-tolerance", "1000s"],
    );
    assert_eq!(code, 1);
    assert_eq!(json["checked"], 9);
    assert_eq!(json["ttl_drift"], 0);
    assert_eq!(json["differences"], 8);

    // --sample: about N keys, the same ones on every run.
    let (_, s1) = verify_json(&a.addr(), &b.addr(), &["--sample", "40"]);
    let (_, s2) = verify_json(&a.addr(), &b.addr(), &["--sample", "40"]);
    let checked = s1["checked"].as_u64().expect("checked");
    println!("--sample 40 of 129 checked {checked}");
    assert!((15..=70).contains(&checked), "{s1}");
    assert_eq!(s1["checked"], s2["checked"]);
    assert_eq!(s1["differences"], s2["differences"]);
    assert_eq!(s1["scanned"], 129);
}

#[test]
fn bad_input_and_unreachable_endpoints_exit_2() {
    let a = RedisServer::start();
    let dead = format!("127.0.0.1:{}", respite_tests::free_port());
    for args in [
        vec!["verify", "--from", dead.as_str(), "--to", &a.addr()],
        vec!["verify", "--from", &a.addr(), "--to", "nonsense"],
        vec!["copy", "--from", &a.addr(), "--to", dead.as_str()],
        vec![
            "verify",
            "--from",
            &a.addr(),
            "--to",
            &a.addr(),
            "--rate",
            "0",
        ],
        vec![
            "verify",
            "--from",
            &a.addr(),
            "--to",
            &a.addr(),
            "--ttl-tolerance",
            "x",
        ],
    ] {
        let (code, stdout, stderr) = migrate(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.is_empty());
    }
    let bad = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(bad.path(), "garbage\n").expect("write");
    let path = bad.path().to_str().expect("utf-8");
    let b = RedisServer::start();
    let (code, _, stderr) = migrate(&[
        "copy",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--cursor-file",
        path,
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cursor file"), "{stderr}");
}

#[test]
fn copy_to_redis_cluster_then_verify_finds_nothing() {
    let source = RedisServer::start();
    let cluster = RedisCluster::start();
    let seed = cluster.seeds()[0].clone();
    populate(&mut source.client(), 200);
    let n = 1200u64;

    let (code, before) = verify_json(&source.addr(), &seed, &[]);
    assert_eq!(code, 1);
    assert_eq!(before["missing"], n);

    let (code, table, _) = migrate(&["copy", "--from", &source.addr(), "--to", &seed]);
    assert_eq!(code, 0, "{table}");
    assert_eq!(table_count(&table, "copied"), n);
    assert_eq!(table_count(&table, "failed"), 0);
    assert_eq!(cluster.dbsize(), n as i64);
    for primary in cluster.primaries() {
        let keys = respite_tests::cluster::query(&primary, &["DBSIZE"]).int();
        println!("{primary}: {keys} keys");
        assert!(keys > 200, "{primary} holds {keys} keys");
    }

    let (code, after) = verify_json(&source.addr(), &seed, &[]);
    assert_eq!(code, 0, "{after}");
    assert_eq!(after["checked"], n);
    assert_eq!(after["equal"], n);
    assert_eq!(after["differences"], 0);

    // The cluster as the source: every primary is scanned.
    let (code, back) = verify_json(&seed, &source.addr(), &[]);
    assert_eq!(code, 0, "{back}");
    assert_eq!(back["scanned"], n);
    assert_eq!(back["source_keys"], n);
    assert_eq!(back["equal"], n);

    // A difference on the cluster is found through the cluster-aware client.
    let owner = cluster.key_owner(b"hash:7");
    respite_tests::cluster::query(&owner, &["HSET", "hash:7", "b", "changed"]);
    let (code, one) = verify_json(&source.addr(), &seed, &[]);
    assert_eq!(code, 1);
    assert_eq!(one["value_differs"], 1);
    assert_eq!(one["diffs"][0]["key"], "hash:7");
    assert_eq!(
        one["diffs"][0]["detail"],
        r#"hash field "b": "7" vs "changed""#
    );
}

#[test]
fn copy_preserves_values_and_ttls_and_persistent_only_skips_ttl_keys() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    populate(&mut a.client(), 30);
    planted_base(&mut a.client());
    // Something on the target already: REPLACE overwrites it.
    q(&mut b.client(), &["SET", "hash:1", "old"]);
    let (code, table, _) = migrate(&["copy", "--from", &a.addr(), "--to", &b.addr()]);
    assert_eq!(code, 0);
    assert_eq!(table_count(&table, "copied"), 189);
    assert_eq!(table_count(&table, "skipped (expired)"), 0);

    let (code, json) = verify_json(&a.addr(), &b.addr(), &["--ttl-tolerance", "1s"]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["equal"], 189);
    let (mut src, mut dst) = (a.client(), b.client());
    for key in [
        "str:3", "hash:3", "list:3", "set:3", "zset:3", "stream:3", "p:ttl",
    ] {
        let (s, d) = (int(&mut src, &["PTTL", key]), int(&mut dst, &["PTTL", key]));
        println!("{key}: pttl {s} vs {d}");
        assert!(d > 0 && (s - d).abs() < 1000, "{key}: pttl {s} vs {d}");
    }
    for key in ["str:1", "hash:1", "stream:1", "p:list"] {
        assert_eq!(int(&mut dst, &["PTTL", key]), -1, "{key}");
    }
    assert_eq!(int(&mut dst, &["XLEN", "stream:2"]), 2);

    // --persistent-only: 10 of each type have a TTL, plus p:ttl.
    let (code, table, _) = migrate(&[
        "copy",
        "--from",
        &a.addr(),
        "--to",
        &c.addr(),
        "--persistent-only",
    ]);
    assert_eq!(code, 0);
    assert_eq!(table_count(&table, "copied"), 189 - 61);
    assert_eq!(table_count(&table, "skipped (has ttl)"), 61);
    assert_eq!(int(&mut c.client(), &["DBSIZE"]), 128);
    assert_eq!(int(&mut c.client(), &["EXISTS", "str:3", "p:ttl"]), 0);
}

#[test]
fn copy_resumes_from_its_cursor_file() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let n = 1000u64;
    let mut src = a.client();
    for chunk in 0..10 {
        let mut p = redis::pipe();
        for i in chunk * 100..(chunk + 1) * 100 {
            p.cmd("SET").arg(format!("q:{i}")).arg(i).ignore();
        }
        let _: () = p.query(&mut src).expect("populate");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let cursor = dir.path().join("copy.cursor");
    let cursor_arg = cursor.to_str().expect("utf-8");
    let args = [
        "migrate",
        "copy",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--cursor-file",
        cursor_arg,
    ];
    let mut child = Command::new(respite_bin())
        .args(args)
        .args(["--rate", "300"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn copy");
    // Interrupt it once it has saved a position past the start.
    let saved = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&cursor)
            .is_ok_and(|t| t.contains("cursor ") && !t.contains("cursor 0\n"))
    });
    child.kill().expect("kill copy");
    let _ = child.wait();
    assert!(saved, "no cursor file written");
    let text = std::fs::read_to_string(&cursor).expect("cursor file");
    println!("cursor file at kill:\n{text}");
    assert!(text.starts_with("respite-migrate-copy 1\n"), "{text}");
    let first = int(&mut b.client(), &["DBSIZE"]) as u64;
    println!("first run copied {first} of {n}");
    assert!(first > 0 && first < n, "{first}");

    let (code, table, stderr) = migrate(&args[1..]);
    assert_eq!(code, 0, "{table}{stderr}");
    assert!(stderr.contains("resuming at node"), "{stderr}");
    assert_eq!(table_count(&table, "failed"), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("resumed") && l.ends_with("true"))
    );
    let second = table_count(&table, "copied");
    println!(
        "second run copied {second}; repeated {}",
        first + second - n
    );
    // Resumed, not restarted: together they cover every key, and repeat at most the batch
    // that was in flight (SCAN COUNT 100; a batch can be a little larger).
    assert!(second < n, "{second}");
    assert!(first + second >= n, "{first} + {second}");
    assert!(first + second <= n + 200, "{first} + {second}");
    assert!(!cursor.exists(), "a finished copy removes its cursor file");
    assert_eq!(int(&mut b.client(), &["DBSIZE"]), n as i64);

    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 0);
    assert_eq!(json["equal"], n);

    // The cursor file belongs to its source: another source refuses it.
    cursor_file_for(&cursor, &a.addr(), "127.0.0.1:1");
    let (code, _, stderr) = migrate(&args[1..]);
    assert_eq!(code, 2);
    assert!(stderr.contains("source has no primary"), "{stderr}");
}

/// `calls` of `cmd` in `INFO commandstats` of `server`.
fn calls(server: &RedisServer, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.client())
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|v| v.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A live, mirrored workload: the target catches up with a write just after verify first read
/// the key (a mirror a moment behind); the re-check sees it equal. A key deleted from the
/// source after the first read is skipped.
#[test]
fn verify_rechecks_keys_that_catch_up_and_skips_keys_that_vanish() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    q(&mut a.client(), &["SET", "k", "new"]);
    q(&mut b.client(), &["SET", "k", "old"]);
    let child = Command::new(respite_bin())
        .args([
            "migrate",
            "verify",
            "--from",
            &a.addr(),
            "--to",
            &b.addr(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn verify");
    // As soon as verify has read the target once, the "mirror" write lands.
    let read = wait_until(Duration::from_secs(10), || calls(&b, "get") >= 1);
    q(&mut b.client(), &["SET", "k", "new"]);
    let out = child.wait_with_output().expect("verify");
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    println!("{json}; target GETs {}", calls(&b, "get"));
    assert!(read, "verify never read the target");
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(json["equal"], 1);
    assert_eq!(json["differences"], 0);
    assert!(calls(&b, "get") >= 2, "the key was not re-read");

    q(&mut a.client(), &["SET", "gone", "1"]);
    q(&mut b.client(), &["FLUSHALL"]);
    q(&mut b.client(), &["CONFIG", "RESETSTAT"]);
    q(&mut a.client(), &["DEL", "k"]);
    let child = Command::new(respite_bin())
        .args([
            "migrate",
            "verify",
            "--from",
            &a.addr(),
            "--to",
            &b.addr(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn verify");
    let read = wait_until(Duration::from_secs(10), || calls(&b, "type") >= 1);
    q(&mut a.client(), &["DEL", "gone"]);
    let out = child.wait_with_output().expect("verify");
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    println!("{json}");
    assert!(read, "verify never read the target");
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(json["checked"], 1);
    assert_eq!(json["skipped"], 1);
    assert_eq!(json["missing"], 0);
}

/// Writes a cursor file for `from` that points at node `node`.
fn cursor_file_for(path: &Path, from: &str, node: &str) {
    let text = format!("respite-migrate-copy 1\nfrom {from}\nnode {node}\ncursor 5\n");
    std::fs::write(path, text).expect("write cursor file");
}

#[test]
fn rate_limits_hold() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut src = a.client();
    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("SET").arg(format!("r:{i}")).arg(i).ignore();
    }
    let _: () = p.query(&mut src).expect("populate");

    // 200 keys at 100/s: at least ~2 s (the bucket starts with one token and bursts 10).
    let t = Instant::now();
    let (code, table, _) = migrate(&[
        "copy",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--rate",
        "100",
    ]);
    let copy_took = t.elapsed();
    assert_eq!(code, 0);
    assert_eq!(table_count(&table, "copied"), 200);

    let t = Instant::now();
    let (code, json) = verify_json(&a.addr(), &b.addr(), &["--rate", "100"]);
    let verify_took = t.elapsed();
    assert_eq!(code, 0);
    assert_eq!(json["equal"], 200);

    let t = Instant::now();
    let (code, _) = verify_json(&a.addr(), &b.addr(), &[]);
    let unlimited = t.elapsed();
    assert_eq!(code, 0);
    println!(
        "200 keys at --rate 100: copy {copy_took:?}, verify {verify_took:?}; unlimited verify {unlimited:?}"
    );
    for took in [copy_took, verify_took] {
        assert!(took >= Duration::from_millis(1800), "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
}

/// The HyperLogLog at `key`, as GET returns it.
fn hll_bytes(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(c).expect("GET hll")
}

#[test]
fn verify_ignores_the_cached_cardinality_of_hyperloglogs() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut src, mut dst) = (a.client(), b.client());
    for c in [&mut src, &mut dst] {
        q(c, &["PFADD", "hll", "a", "b", "c", "d"]);
        q(c, &["PFADD", "hll:other", "a", "b"]);
    }
    // A read on the source only (PFCOUNT is not mirrored) rewrites the cached cardinality.
    assert_eq!(int(&mut src, &["PFCOUNT", "hll"]), 4);
    assert_ne!(hll_bytes(&mut src, "hll"), hll_bytes(&mut dst, "hll"));
    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["equal"], 2);

    // Different registers still differ.
    q(&mut dst, &["PFADD", "hll:other", "zz"]);
    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 1, "{json}");
    assert_eq!(json["value_differs"], 1);
    assert_eq!(json["diffs"][0]["key"], "hll:other");

    // Sparse on the source, dense on the target (promoted at the first add): by PFCOUNT.
    q(&mut dst, &["CONFIG", "SET", "hll-sparse-max-bytes", "0"]);
    for c in [&mut src, &mut dst] {
        q(c, &["DEL", "hll:other"]);
        q(c, &["PFADD", "hll:enc", "x", "y", "z"]);
    }
    assert_eq!(hll_bytes(&mut src, "hll:enc")[4], 1, "sparse");
    assert_eq!(hll_bytes(&mut dst, "hll:enc")[4], 0, "dense");
    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["equal"], 2);
    q(&mut dst, &["PFADD", "hll:enc", "w"]);
    let (code, json) = verify_json(&a.addr(), &b.addr(), &[]);
    assert_eq!(code, 1, "{json}");
    assert_eq!(
        json["diffs"][0]["detail"], "hyperloglog count (PFCOUNT): 3 vs 4",
        "{json}"
    );
}

#[test]
fn verify_refuses_sample_0_and_warns_when_it_checked_nothing() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    q(&mut a.client(), &["SET", "k", "v"]);
    q(&mut b.client(), &["SET", "k", "v"]);
    let (code, stdout, stderr) = migrate(&[
        "verify",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--sample",
        "0",
    ]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("--sample"), "{stderr}");

    // Nothing matched: exit 0, but say so.
    let (code, stdout, stderr) = migrate(&[
        "verify",
        "--from",
        &a.addr(),
        "--to",
        &b.addr(),
        "--match",
        "nothing:*",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(table_count(&stdout, "checked"), 0);
    assert!(stderr.contains("checked 0 keys"), "{stderr}");
    // An empty source too; a run that checked keys does not warn.
    let c = RedisServer::start();
    let (code, _, stderr) = migrate(&["verify", "--from", &c.addr(), "--to", &b.addr()]);
    assert_eq!(code, 0);
    assert!(stderr.contains("checked 0 keys"), "{stderr}");
    let (code, _, stderr) = migrate(&["verify", "--from", &a.addr(), "--to", &b.addr()]);
    assert_eq!(code, 0);
    assert!(!stderr.contains("checked 0 keys"), "{stderr}");
}

#[test]
fn copy_and_verify_refuse_the_same_server_on_both_sides() {
    let a = RedisServer::start();
    q(&mut a.client(), &["SET", "k", "v"]);
    let port = a.addr().rsplit(':').next().expect("port").to_string();
    let localhost = format!("localhost:{port}");
    let url = format!("redis://127.0.0.1:{port}/0");
    for cmd in ["copy", "verify"] {
        for (from, to) in [
            (a.addr(), a.addr()),
            (a.addr(), localhost.clone()),
            (url.clone(), a.addr()),
        ] {
            let (code, stdout, stderr) = migrate(&[cmd, "--from", &from, "--to", &to]);
            assert_eq!(code, 2, "{cmd} {from} {to}: {stdout}{stderr}");
            assert!(stderr.contains("same server"), "{stderr}");
            assert!(stdout.is_empty(), "{stdout}");
        }
    }
    assert_eq!(calls(&a, "restore"), 0);
    // Another database of the same server is another keyspace.
    let db1 = format!("redis://127.0.0.1:{port}/1");
    let (code, table, stderr) = migrate(&["copy", "--from", &a.addr(), "--to", &db1]);
    assert_eq!(code, 0, "{table}{stderr}");
    assert_eq!(table_count(&table, "copied"), 1);
    let (code, json) = verify_json(&a.addr(), &db1, &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["equal"], 1);
}

#[test]
fn passwords_never_show_in_messages() {
    let a = RedisServer::start();
    q(&mut a.client(), &["SET", "k", "v"]);
    let dead = format!(
        "redis://user:s3cret@127.0.0.1:{}",
        respite_tests::free_port()
    );
    // Redis's default user has no password: any password is accepted.
    let live = format!("redis://default:s3cret@{}", a.addr());
    let wrong = format!("redis://nobody:s3cret@{}", a.addr());
    let b = RedisServer::start();
    let cursor = tempfile::NamedTempFile::new().expect("tmp");
    // Written for another source: the message names both.
    cursor_file_for(cursor.path(), "127.0.0.1:1", "127.0.0.1:1");
    let cursor = cursor.path().to_str().expect("utf-8").to_string();
    for (args, want) in [
        (vec!["verify", "--from", &dead, "--to", &b.addr()], 2),
        (vec!["copy", "--from", &b.addr(), "--to", &dead], 2),
        (vec!["verify", "--from", &wrong, "--to", &b.addr()], 2),
        (vec!["copy", "--from", &live, "--to", &a.addr()], 2),
        (
            vec![
                "copy",
                "--from",
                &live,
                "--to",
                &b.addr(),
                "--cursor-file",
                &cursor,
            ],
            2,
        ),
        (vec!["verify", "--from", &live, "--to", &b.addr()], 1),
        (
            vec!["verify", "--from", &live, "--to", &b.addr(), "--json"],
            1,
        ),
        (
            vec!["verify", "--from", &live, "--to", &live, "--match", "x"],
            2,
        ),
        (vec!["copy", "--from", &live, "--to", &b.addr()], 0),
        (
            vec![
                "verify",
                "--from",
                &b.addr(),
                "--to",
                "redis://u:s3cret@h:x",
            ],
            2,
        ),
    ] {
        let (code, stdout, stderr) = migrate(&args);
        assert_eq!(code, want, "{args:?}: {stdout}{stderr}");
        let all = format!("{stdout}{stderr}");
        assert!(
            !all.contains("s3cret"),
            "{args:?} leaks the password: {all}"
        );
        if code == 2 {
            assert!(stderr.contains(":***@"), "{args:?}: {stderr}");
        }
    }
}

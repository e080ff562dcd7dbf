//! Hot keys, big values and the sampled access log, through the release binary over a real
//! redis-server: a Zipf workload's top-10 against the true counts, big values counted exactly
//! and logged, one access log line per request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use respite_tests::RedisServer;
use respite_tests::respite::Respite;
use serde_json::Value;

const TOP_K: usize = 10;

/// `n` draws of a Zipf(`s`) distribution over `key:0 .. key:(keys-1)`, deterministic for `seed`.
fn zipf(n: usize, keys: usize, s: f64, seed: u64) -> Vec<String> {
    let weights: Vec<f64> = (1..=keys).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(keys);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|_| {
            let u = rng.f64();
            format!("key:{}", cdf.partition_point(|&c| c < u).min(keys - 1))
        })
        .collect()
}

fn cmd(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// `/hot_keys` of listener `main`: (top as (key, count), big values), once the report is not
/// older than a flush tick.
fn hot_keys(r: &Respite) -> (Vec<(String, u64)>, Vec<Value>) {
    std::thread::sleep(Duration::from_millis(350));
    let (status, body) = r.admin_get("/hot_keys?format=json");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let l = v["listeners"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["stat_prefix"] == "main"))
        .unwrap_or_else(|| panic!("no listener main in {body}"))
        .clone();
    let top = l["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect();
    (top, l["big_values"].as_array().unwrap().clone())
}

/// With a Zipf workload (20 000 GETs over 1 000 keys, exponent 1.1) over two connections (so
/// over both workers when the kernel spreads them), the reported top-10 is the true top-10:
/// same set; each count at least the true count and within Space-Saving's bound above it; in
/// true order wherever the true counts differ by more than the two counts' errors.
#[test]
fn zipf_top_10_is_the_true_top_10() {
    let redis = RedisServer::start();
    let extra = format!("[listeners.hot_keys]\ntop_k = {TOP_K}\nwindow = \"600s\"\n");
    let r = Respite::over_with(&[redis.addr()], 2, &extra);
    let stream = zipf(20_000, 1_000, 1.1, 7);
    let mut truth: HashMap<String, u64> = HashMap::new();
    for k in &stream {
        *truth.entry(k.clone()).or_default() += 1;
    }
    let mut clients = [r.raw(), r.raw()];
    for (i, chunk) in stream.chunks(200).enumerate() {
        let cmds: Vec<_> = chunk.iter().map(|k| cmd(&[b"GET", k.as_bytes()])).collect();
        let replies = clients[i % 2].pipeline(&cmds);
        assert!(replies.iter().all(|r| r == b"$-1\r\n"));
    }
    let (top, _) = hot_keys(&r);
    let mut expected: Vec<(String, u64)> = truth.clone().into_iter().collect();
    expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    expected.truncate(TOP_K);
    println!("reported: {top:?}");
    println!("true:     {expected:?}");
    assert_eq!(top.len(), TOP_K);
    let mut got_set: Vec<&String> = top.iter().map(|(k, _)| k).collect();
    let mut want_set: Vec<&String> = expected.iter().map(|(k, _)| k).collect();
    got_set.sort();
    want_set.sort();
    assert_eq!(got_set, want_set, "top-10 as a set");
    // Per worker, capacity max(8 * top_k, 64) = 80: error <= requests / 80.
    let bound = stream.len() as u64 / 80;
    let err: Vec<u64> = top
        .iter()
        .map(|(k, c)| {
            let t = truth[k];
            assert!(*c >= t && *c - t <= bound, "{k}: reported {c}, true {t}");
            *c - t
        })
        .collect();
    for i in 0..top.len() {
        for j in i + 1..top.len() {
            let (ti, tj) = (truth[&top[i].0], truth[&top[j].0]);
            assert!(
                ti + err[i] + err[j] >= tj,
                "{} ({ti}) reported above {} ({tj})",
                top[i].0,
                top[j].0
            );
        }
    }
}

/// Listeners without the features report nothing and register no stat.
#[test]
fn off_by_default() {
    let redis = RedisServer::start();
    let r = Respite::over(&[redis.addr()], 1);
    let mut c = r.raw();
    c.cmd(&[b"SET", b"k", &vec![b'x'; 5000]]);
    let (status, body) = r.admin_get("/hot_keys?format=json");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!((status, v), (200, serde_json::json!({ "listeners": [] })));
    assert!(!r.stats().contains_key("redis.main.big_value_total"));
}

/// `big_value_total` equals the number of big SETs plus big GET replies; each is in the ring
/// (newest first) and the WARN log is rate-limited with a count of the suppressed lines.
#[test]
fn big_values_are_counted_exactly_and_logged() {
    let redis = RedisServer::start();
    let r = Respite::over_with(&[redis.addr()], 1, "big_value_bytes = 1024\n");
    let mut c = r.raw();
    let big = vec![b'v'; 2000];
    let small = vec![b's'; 1000];
    for i in 0..3 {
        assert_eq!(
            c.cmd(&[b"SET", format!("big:{i}").as_bytes(), &big]),
            b"+OK\r\n"
        );
    }
    for i in 0..2 {
        assert_eq!(
            c.cmd(&[b"SET", format!("small:{i}").as_bytes(), &small]),
            b"+OK\r\n"
        );
    }
    // A 1000-byte value's reply is `$1000\r\n…\r\n` = 1009 bytes: under the threshold.
    for k in [
        "big:0", "big:1", "big:2", "big:0", "small:0", "small:1", "missing",
    ] {
        c.cmd(&[b"GET", k.as_bytes()]);
    }
    let expected = 3 + 4;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(r.stat("redis.main.big_value_total"), expected);
    let (top, bv) = hot_keys(&r);
    assert!(top.is_empty(), "hot keys are off: {top:?}");
    let seen: Vec<(String, String, u64, String)> = bv
        .iter()
        .map(|b| {
            (
                b["key"].as_str().unwrap().to_string(),
                b["command"].as_str().unwrap().to_string(),
                b["bytes"].as_u64().unwrap(),
                b["direction"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    println!("{seen:?}");
    assert_eq!(seen.len(), expected as usize);
    assert_eq!(
        seen[0],
        ("big:0".into(), "get".into(), 2009, "reply".into())
    );
    assert_eq!(
        seen[expected as usize - 1],
        ("big:0".into(), "set".into(), 2000, "request".into())
    );
    let ms: Vec<u64> = bv.iter().map(|b| b["unix_ms"].as_u64().unwrap()).collect();
    assert!(ms.windows(2).all(|w| w[0] >= w[1]), "newest first: {ms:?}");
    // All seven within a second: one WARN line; a second later the next one counts the rest.
    std::thread::sleep(Duration::from_millis(1100));
    c.cmd(&[b"SET", b"big:3", &big]);
    std::thread::sleep(Duration::from_millis(200));
    let log = strip_ansi(&r.log());
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("big value")).collect();
    println!("{}", lines.join("\n"));
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].contains("key=big:0") && lines[0].contains("bytes=2000"));
    assert!(lines[0].contains("WARN") && lines[0].contains("listener=main"));
    assert!(lines[1].contains("key=big:3") && lines[1].contains("suppressed=6"));
    assert_eq!(r.stat("redis.main.big_value_total"), expected + 1);
}

/// `s` without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_esc = false;
    for c in s.chars() {
        match (in_esc, c) {
            (false, '\x1b') => in_esc = true,
            (false, c) => out.push(c),
            (true, 'm') => in_esc = false,
            (true, _) => {}
        }
    }
    out
}

fn access_log_lines(path: &std::path::Path, want: usize, wait: Duration) -> Vec<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.ends_with('\n') || text.is_empty();
        let n = text.lines().count();
        if (n >= want && complete) || Instant::now() > deadline {
            return text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `sample_rate = 1.0`: exactly one line per request, with its command, key, status, reply size
/// and the client's address.
#[test]
fn access_log_has_one_line_per_request() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let extra = format!(
        "[listeners.access_log]\npath = \"{}\"\nsample_rate = 1.0\n",
        path.display()
    );
    let r = Respite::over_with(&[redis.addr()], 2, &extra);
    let mut c = r.raw();
    let local = c.stream().local_addr().unwrap().to_string();
    let mut cmds = Vec::new();
    for i in 0..30 {
        cmds.push(cmd(&[b"SET", format!("k{i}").as_bytes(), b"value"]));
    }
    for i in 0..50 {
        cmds.push(cmd(&[b"GET", format!("k{}", i % 40).as_bytes()]));
    }
    for _ in 0..5 {
        cmds.push(cmd(&[b"NOSUCHCOMMAND", b"x"]));
    }
    for _ in 0..2 {
        cmds.push(cmd(&[b"GET"]));
    }
    let replies = c.pipeline(&cmds);
    let total = cmds.len();
    let lines = access_log_lines(&path, total, Duration::from_secs(5));
    assert_eq!(lines.len(), total, "one line per request");
    let mut by: HashMap<(String, String), usize> = HashMap::new();
    for (l, reply) in lines.iter().zip(&replies) {
        assert_eq!(l["listener"], "main");
        assert_eq!(l["downstream"], local.as_str());
        assert_eq!(l["reply_bytes"].as_u64(), Some(reply.len() as u64), "{l}");
        assert!(l["duration_us"].as_u64().is_some());
        assert!(l["start_time"].as_str().unwrap().ends_with('Z'));
        *by.entry((
            l["command"].as_str().unwrap().to_string(),
            l["status"].as_str().unwrap().to_string(),
        ))
        .or_default() += 1;
    }
    let want: HashMap<(String, String), usize> = [
        (("set", "ok"), 30),
        (("get", "ok"), 50),
        (("unknown", "error"), 5),
        (("get", "error"), 2),
    ]
    .into_iter()
    .map(|((c, s), n)| ((c.to_string(), s.to_string()), n))
    .collect();
    assert_eq!(by, want);
    assert_eq!(lines[0]["key"], "k0");
    assert_eq!(lines[30]["key"], "k0");
    assert_eq!(r.stat("redis.main.access_log_dropped"), 0);
}

/// `sample_rate = 0.1`: about a tenth of the requests (5 000 requests: 500 expected, standard
/// deviation ~21; the bound is ±200).
#[test]
fn access_log_samples() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sampled.log");
    let extra = format!(
        "[listeners.access_log]\npath = \"{}\"\nsample_rate = 0.1\n",
        path.display()
    );
    let r = Respite::over_with(&[redis.addr()], 2, &extra);
    let mut c = r.raw();
    let cmds: Vec<_> = (0..5_000)
        .map(|i| cmd(&[b"GET", format!("k{i}").as_bytes()]))
        .collect();
    for chunk in cmds.chunks(500) {
        c.pipeline(chunk);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let n = access_log_lines(&path, 0, Duration::ZERO).len();
    println!("sampled {n} of 5000");
    assert!((300..=700).contains(&n), "{n}");
}

/// An access log path that cannot be opened: an ERROR in the log, requests unaffected.
#[test]
fn unopenable_access_log_is_an_error_line_not_a_failure() {
    let redis = RedisServer::start();
    let extra = "[listeners.access_log]\npath = \"/nonexistent-dir/access.log\"\n";
    let r = Respite::over_with(&[redis.addr()], 1, extra);
    let mut c = r.raw();
    for _ in 0..10 {
        assert_eq!(c.cmd(&[b"SET", b"a", b"b"]), b"+OK\r\n");
    }
    std::thread::sleep(Duration::from_millis(300));
    let log = strip_ansi(&r.log());
    assert!(
        log.contains("ERROR") && log.contains("access log: cannot open"),
        "{log}"
    );
}

/// A reload that changes the path: later lines go to the new file.
#[test]
fn reload_reopens_a_changed_path() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let extra =
        |p: &std::path::Path| format!("[listeners.access_log]\npath = \"{}\"\n", p.display());
    let r = Respite::over_with(&[redis.addr()], 1, &extra(&a));
    let mut c = r.raw();
    c.cmd(&[b"GET", b"one"]);
    assert_eq!(access_log_lines(&a, 1, Duration::from_secs(3)).len(), 1);
    let cfg = std::fs::read_to_string(r.config_path())
        .unwrap()
        .replace(&a.display().to_string(), &b.display().to_string());
    r.reload(&cfg);
    // The reload is applied between requests; poll until the new file gets a line.
    let deadline = Instant::now() + Duration::from_secs(5);
    while access_log_lines(&b, 0, Duration::ZERO).is_empty() && Instant::now() < deadline {
        c.cmd(&[b"GET", b"two"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines_b = access_log_lines(&b, 1, Duration::ZERO);
    assert!(!lines_b.is_empty());
    assert_eq!(lines_b[0]["key"], "two");
}

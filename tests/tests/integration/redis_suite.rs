//! Redis's own tcl test suite (Debian's redis 7.0.15 source package) run against one plain
//! redis-server and through Respite, unit by unit, with `tests/redis-suite/run.sh`
//! (external-server mode, `--singledb --cluster-mode --ignore-encoding --ignore-digest`, every
//! `needs:` tag excluded — see the script). Two tests, run one after the other (a lock) and
//! sharing one direct run:
//! - `redis_suite_through_respite`: Respite over 3 standalone redis-servers (ketama);
//! - `redis_suite_through_respite_cluster`: Respite over a six-node Redis Cluster
//!   (`respite_tests::RedisCluster`, 3 primaries + 3 replicas, `read_policy = "primary"`).
//!
//! For each unit, the tests that pass directly but not through Respite must be exactly the ones
//! listed for that unit in `tests/redis-suite/exceptions.txt` (with the reason); a listed test
//! that passes through Respite fails this test too (the list is stale). Both pass counts are
//! printed.
//!
//! The same exceptions and the same rule apply to both, and to the run over TLS on both sides
//! (`tls_sessions::redis_suite_over_tls`, a few units, with this module's functions). Units: `unit/type/string incr hash list
//! list-2 list-3 set zset stream stream-cgroups`, `unit/multi scripting functions pubsub`
//! (not pubsubshard: every test of it is tagged `external:skip`; its cases are replayed in
//! `pubsub.rs` and `cluster.rs`). Time on 2
//! cores: ≈4 min for the direct run (once) plus the standalone Respite run, then the cluster run.
//! `REDIS_SUITE_UNITS="unit/type/string unit/type/hash"` picks others; `REDIS_SUITE_SKIP=1`
//! skips both tests (e.g. offline: the first run fetches the source with `apt-get source redis`,
//! cached in `target/redis-src`); `REDIS_SUITE_KEEP=1` keeps the runtest logs.
//!
//! On failure the test prints, for each test missing through Respite, its error text and a
//! candidate `exceptions.txt` line with a category (sharding, a refused command, a blocked
//! client that never blocked, ...) to paste once the reason is judged legitimate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use respite_tests::cluster::cluster_config;
use respite_tests::respite::Respite;
use respite_tests::{RedisCluster, RedisServer};

const UNITS: &[&str] = &[
    "unit/type/string",
    "unit/type/incr",
    "unit/type/hash",
    "unit/type/list",
    "unit/type/list-2",
    "unit/type/list-3",
    "unit/type/set",
    "unit/type/zset",
    "unit/type/stream",
    "unit/type/stream-cgroups",
    "unit/multi",
    "unit/scripting",
    "unit/functions",
    "unit/pubsub",
];

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("redis-suite")
}

#[derive(Debug, Default, Clone)]
pub(crate) struct UnitResult {
    ok: usize,
    err: usize,
    exception: usize,
    timeout: bool,
    /// Passing test names → how many times (names repeat across encodings in some units).
    passed: BTreeMap<String, usize>,
    failed: Vec<String>,
    /// Failed test name → why (the error text runtest printed under its `[err]:` line).
    why: BTreeMap<String, String>,
}

/// Splits a runtest log into `[err]:` blocks: test name → its error text (lines joined).
fn failure_reasons(log: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = log.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("[err]: ") else {
            continue;
        };
        let name = match rest.find(" in tests/") {
            Some(i) => &rest[..i],
            None => rest,
        };
        let mut text = String::new();
        while let Some(next) = lines.peek() {
            if next.starts_with('[') {
                break;
            }
            let l = lines.next().unwrap_or_default().trim();
            if !l.is_empty() && text.len() < 2000 {
                if !text.is_empty() {
                    text.push_str(" / ");
                }
                text.push_str(l);
            }
        }
        out.insert(name.to_string(), text);
    }
    out
}

/// A short category for an error text, for exceptions.txt.
fn category(text: &str) -> String {
    let refused = |what: &str| {
        let cmd = text
            .split("ERR '")
            .nth(1)
            .and_then(|t| t.split('\'').next())
            .unwrap_or("?");
        format!("`{cmd}` refused by respite: {what}")
    };
    if text.contains("no blocked clients") || text.contains("waiting for blocked clients") {
        "waits for a blocked client that never blocked at the backend".to_string()
    } else if text.contains("CROSSSLOT") {
        "sharding: the command's keys are on different backends (CROSSSLOT)".to_string()
    } else if text.contains("is not supported by respite") {
        refused("see the reason in the error")
    } else if text.is_empty() {
        "did not run or no error text (unit aborted earlier?)".to_string()
    } else {
        format!("fails through respite: {text}")
    }
}

/// Runs `run.sh <port> <units>` and reads its per-unit results. `tls`: a directory with
/// `ca.crt`, `client.crt` and `client.key`, to connect with TLS (run.sh's `REDIS_SUITE_TLS`).
pub(crate) fn run_suite(
    port: u16,
    units: &[String],
    label: &str,
    skip: Option<&std::path::Path>,
    tls: Option<&Path>,
) -> BTreeMap<String, UnitResult> {
    let out = tempfile::Builder::new()
        .prefix(&format!("redis-suite-{label}-"))
        .tempdir()
        .expect("tempdir");
    let output = Command::new("bash")
        .arg(suite_dir().join("run.sh"))
        .arg(port.to_string())
        .args(units)
        .env("REDIS_SUITE_OUT", out.path())
        .env(
            "REDIS_SUITE_SKIP",
            skip.map(|p| p.as_os_str()).unwrap_or_default(),
        )
        .env(
            "REDIS_SUITE_TLS",
            tls.map(|p| p.as_os_str()).unwrap_or_default(),
        )
        // runtest's own test server listens from baseport-32: start at a port nobody uses.
        .env(
            "REDIS_SUITE_BASEPORT",
            (u32::from(respite_tests::free_port()) + 32)
                .min(65000)
                .to_string(),
        )
        .output()
        .expect("run tests/redis-suite/run.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "run.sh ({label}) failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut results = BTreeMap::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("UNIT ") else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let unit = fields.next().unwrap_or_default().to_string();
        let mut r = UnitResult::default();
        for f in fields {
            let (k, v) = f.split_once('=').unwrap_or((f, "0"));
            let v: usize = v.parse().unwrap_or(0);
            match k {
                "ok" => r.ok = v,
                "err" => r.err = v,
                "exception" => r.exception = v,
                "timeout" => r.timeout = v != 0,
                _ => {}
            }
        }
        let name = unit.replace('/', "_");
        let read = |ext: &str| std::fs::read_to_string(out.path().join(format!("{name}.{ext}")));
        for t in read("ok").unwrap_or_default().lines() {
            *r.passed.entry(t.to_string()).or_default() += 1;
        }
        r.why = failure_reasons(&read("log").unwrap_or_default());
        r.failed = read("err")
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if r.exception > 0 || r.timeout {
            let log = read("log").unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(25).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            println!(
                "--- {label} {unit}: exception/timeout, log tail:\n{}",
                tail.join("\n")
            );
        }
        results.insert(unit, r);
    }
    // Keep the logs when asked (REDIS_SUITE_KEEP=1), for digging into failures.
    if std::env::var_os("REDIS_SUITE_KEEP").is_some() {
        println!("{label} logs kept in {}", out.keep().display());
    }
    results
}

/// `tests/redis-suite/exceptions.txt`: `unit | test name | reason` per line, `#` comments.
fn exceptions() -> BTreeMap<String, BTreeMap<String, String>> {
    let text = std::fs::read_to_string(suite_dir().join("exceptions.txt"))
        .expect("read tests/redis-suite/exceptions.txt");
    let mut map: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, " | ");
        let (Some(unit), Some(name), Some(reason)) = (parts.next(), parts.next(), parts.next())
        else {
            panic!("exceptions.txt line {}: want `unit | test | reason`", i + 1);
        };
        map.entry(unit.trim().to_string())
            .or_default()
            .insert(name.trim().to_string(), reason.trim().to_string());
    }
    map
}

/// The units to run: `REDIS_SUITE_UNITS` or [`UNITS`].
fn units() -> Vec<String> {
    match std::env::var("REDIS_SUITE_UNITS") {
        Ok(u) => u.split_whitespace().map(str::to_string).collect(),
        Err(_) => UNITS.iter().map(|u| u.to_string()).collect(),
    }
}

/// Serializes the suite runs of this binary: two runtest processes side by side on a small
/// machine make timing-sensitive tests fail in one run and not the other.
static SUITE_LOCK: Mutex<()> = Mutex::new(());

/// The direct run (one plain redis-server) of `units`, run once per process and shared by the
/// tests here.
fn direct_results(units: &[String]) -> BTreeMap<String, UnitResult> {
    /// Units → their direct results.
    type Cached = Option<(Vec<String>, BTreeMap<String, UnitResult>)>;
    static DIRECT: Mutex<Cached> = Mutex::new(None);
    let mut cached = DIRECT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((u, r)) = cached.as_ref()
        && u == units
    {
        return r.clone();
    }
    let server = RedisServer::start();
    let r = run_suite(server.port, units, "direct", None, None);
    *cached = Some((units.to_vec(), r.clone()));
    r
}

/// Runs `units` through Respite listening on `port` (the listed exceptions skipped; with TLS
/// when `tls` is given, as in [`run_suite`]), and checks them against `direct`, the same units
/// run against a plain redis-server: the tests passing directly but not through Respite must
/// be exactly the ones in exceptions.txt. `log` gives Respite's log for the failure message.
pub(crate) fn check_through_respite(
    label: &str,
    port: u16,
    units: &[String],
    direct: &BTreeMap<String, UnitResult>,
    tls: Option<&Path>,
    log: &dyn Fn() -> String,
) {
    let exceptions = exceptions();
    // Listed exceptions are skipped through respite (not run and failed): a refused blocking
    // command inside a test that switched the client to RESP3 would otherwise leave it there.
    let skip = suite_dir().join("exceptions.txt");
    let via = run_suite(port, units, label, Some(&skip), tls);

    let mut problems = Vec::new();
    let mut new_lines: Vec<String> = Vec::new();
    println!(
        "{:<20} {:>8} {:>8} {:>10}",
        "unit", "direct", label, "excepted"
    );
    for unit in units {
        let d = direct
            .get(unit)
            .unwrap_or_else(|| panic!("no direct result for {unit}"));
        let r = via
            .get(unit)
            .unwrap_or_else(|| panic!("no {label} result for {unit}"));
        let listed = exceptions.get(unit).cloned().unwrap_or_default();
        println!(
            "{unit:<20} {:>8} {:>8} {:>10}   (direct err={} exc={} timeout={}; {label} err={} exc={} timeout={})",
            d.ok,
            r.ok,
            listed.keys().filter_map(|n| d.passed.get(n)).sum::<usize>(),
            d.err,
            d.exception,
            d.timeout,
            r.err,
            r.exception,
            r.timeout
        );
        if !d.failed.is_empty() {
            // Expected a few: tests whose setting the CONFIG shim swallowed (see run.sh).
            println!("  direct [err] in {unit}: {:?}", d.failed);
        }
        if d.ok == 0 {
            problems.push(format!(
                "{unit}: nothing passed against a plain redis-server"
            ));
        }
        if d.timeout || d.exception > 0 {
            problems.push(format!(
                "{unit}: the direct run timed out or threw; see the log above"
            ));
        }
        // Tests passing directly but not (as often) through respite. A name can occur more
        // than once per unit (loops over encodings); an excepted name must fail every time.
        let mut missing: Vec<&str> = Vec::new();
        for (name, &n) in &d.passed {
            if r.passed.get(name).copied().unwrap_or(0) < n {
                missing.push(name);
            }
        }
        for name in &missing {
            if !listed.contains_key(*name) {
                let why = r.why.get(*name).map(String::as_str).unwrap_or_default();
                let short: String = why.chars().take(300).collect();
                problems.push(format!(
                    "{unit}: `{name}` fails through {label} (not in exceptions.txt): {short}"
                ));
                // Ready to paste into exceptions.txt once the reason is judged legitimate.
                new_lines.push(format!("{unit} | {name} | {}", category(why)));
            }
        }
        for name in listed.keys() {
            if d.passed.contains_key(name) && r.passed.contains_key(name) {
                problems.push(format!(
                    "{unit}: `{name}` is in exceptions.txt but passes through {label} now"
                ));
            }
        }
        if !r.failed.is_empty() {
            println!("  {label} [err] in {unit}: {} tests", r.failed.len());
        }
        let excepted: usize = listed.keys().filter_map(|n| d.passed.get(n)).sum();
        if problems.is_empty() {
            assert_eq!(
                r.ok,
                d.ok - excepted,
                "{unit}: {label} pass count {} != direct {} minus {excepted} excepted",
                r.ok,
                d.ok
            );
        }
    }
    if !new_lines.is_empty() {
        println!(
            "--- candidate exceptions.txt lines (check each reason first):\n{}",
            new_lines.join("\n")
        );
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\n{label} log tail:\n{}",
        problems.len(),
        problems.join("\n"),
        log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Respite over three standalone redis-servers (ketama, hash tags on).
#[test]
fn redis_suite_through_respite() {
    if std::env::var_os("REDIS_SUITE_SKIP").is_some() {
        println!("REDIS_SUITE_SKIP set: skipped");
        return;
    }
    let _serial = SUITE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let units = units();
    let backends: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = backends.iter().map(|b| b.addr()).collect();
    let respite = Respite::over(&addrs, 2);
    let direct = direct_results(&units);
    check_through_respite("respite", respite.port, &units, &direct, None, &|| {
        respite.log()
    });
}

/// Respite over a six-node Redis Cluster (3 primaries + 3 replicas, `read_policy =
/// "primary"`), against the same direct run and the same exceptions.
#[test]
fn redis_suite_through_respite_cluster() {
    if std::env::var_os("REDIS_SUITE_SKIP").is_some() {
        println!("REDIS_SUITE_SKIP set: skipped");
        return;
    }
    let _serial = SUITE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let units = units();
    let cluster = RedisCluster::start();
    let (port, admin) = (respite_tests::free_port(), respite_tests::free_port());
    let config = cluster_config(port, admin, &cluster.seeds(), "primary", "");
    let respite = Respite::start(&config, port, admin);
    let direct = direct_results(&units);
    check_through_respite(
        "respite-cluster",
        respite.port,
        &units,
        &direct,
        None,
        &|| respite.log(),
    );
}

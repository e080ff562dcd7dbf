//! Smoke tests of `respite-bench compare --sockmap`. Need redis-server and the
//! release binaries `respite` and `respite-control` next to `respite-bench`
//! (`cargo build --release --bin respite --bin respite-control --bin respite-bench`).

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs the comparison with `extra` flags into a temp dir; returns the exit status, stderr and
/// the JSON report (if written).
fn compare(extra: &[&str], cases: &str) -> (std::process::ExitStatus, String, Option<Value>) {
    let (bench, respite) = common::binaries(&["redis-server"]);
    let control = bench.with_file_name("respite-control");
    assert!(control.exists(), "build respite-control first");
    let out = tempfile::tempdir().expect("temp dir");
    let o = Command::new(&bench)
        .args(["compare", "--sockmap"])
        .args(extra)
        .args([
            "--duration",
            "300ms",
            "--warmup",
            "50ms",
            "--reps",
            "2",
            "--cases",
            cases,
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .output()
        .expect("run respite-bench compare --sockmap");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let json = std::fs::read_to_string(out.path().join("latest-sockmap.json"))
        .ok()
        .map(|j| serde_json::from_str(&j).expect("valid JSON"));
    assert_eq!(
        json.is_some(),
        Path::new(&out.path().join("latest-sockmap.md")).exists()
    );
    (o.status, stderr, json)
}

fn proxy_pid(run: &Value) -> Option<u64> {
    run["report"]["cpu"]
        .as_array()?
        .iter()
        .find(|c| c["label"] == "proxy")?["pid"]
        .as_u64()
}

/// The plumbing without eBPF: every arm runs, every Respite phase gets a fresh Respite, arms
/// alternate order per rep, and the report says it was TCP-only.
#[test]
fn tcp_only_plumbing() {
    let (status, stderr, json) = compare(&["--sockmap-tcp-only"], "p1-c1,p16-c50");
    assert!(status.success(), "failed: {status}\n{stderr}");
    let v = json.expect("a JSON report");
    assert_eq!(v["mode"], "tcp-only");
    let phases = v["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 2 * 2 * 3, "2 reps × 2 cases × 3 arms");
    let order: Vec<(&str, &str)> = phases
        .iter()
        .map(|p| (p["case"].as_str().unwrap(), p["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        &order[..3],
        [
            ("p1-c1", "respite+sockmap"),
            ("p1-c1", "respite"),
            ("p1-c1", "direct")
        ]
    );
    assert_eq!(
        &order[6..9],
        [
            ("p1-c1", "direct"),
            ("p1-c1", "respite"),
            ("p1-c1", "respite+sockmap")
        ]
    );
    for p in phases {
        assert_eq!(p["verdict"], "unchecked", "{p}");
        assert!(p["requests"].as_u64().unwrap() > 0, "{p}");
    }
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 12);
    // A fresh Respite per phase: 8 Respite runs, 8 distinct pids; direct runs have no proxy.
    let pids: BTreeSet<u64> = runs.iter().filter_map(proxy_pid).collect();
    assert_eq!(pids.len(), 8, "{pids:?}");
    assert!(
        runs.iter()
            .filter(|r| r["target"] == "direct")
            .all(|r| proxy_pid(r).is_none())
    );
    for r in runs {
        assert!(r["metrics"]["rps"].as_f64().unwrap() > 0.0);
        assert_eq!(r["metrics"]["errors"], 0);
    }
    let medians = v["medians"].as_array().expect("medians");
    assert_eq!(medians.len(), 6);
    let p16 = medians
        .iter()
        .find(|m| m["case"] == "p16-c50" && m["target"] == "respite")
        .expect("p16 respite median");
    assert_eq!(p16["pipeline"], 16);
    assert!(p16["median"]["proxy_cpu_us_per_req"].as_f64().unwrap() > 0.0);
}

/// With a real sockmap (root, respite-control built with it): ON phases redirect, OFF and direct
/// phases do not, and every phase is valid. Run with `--ignored` as root.
#[test]
#[ignore = "needs root, cgroup v2 and a respite-control with sockmap support"]
fn sockmap_phases_are_valid() {
    let (status, stderr, json) = compare(&[], "p1-c10");
    assert!(status.success(), "failed: {status}\n{stderr}");
    let v = json.expect("a JSON report");
    assert_eq!(v["mode"], "sockmap");
    for p in v["phases"].as_array().expect("phases") {
        assert_eq!(p["verdict"], "ok", "{p}");
        let redirects = p["delta"]["redirect_total"].as_u64().expect("delta");
        if p["target"] == "respite+sockmap" {
            // Each request crosses 4 loopback hops (client → respite → redis → respite →
            // client); upstream writes may batch, client ones do not at P1.
            let n = p["requests"].as_u64().unwrap();
            assert!(
                redirects >= 2 * n,
                "{redirects} redirects for {n} requests: {p}"
            );
        } else {
            assert_eq!(redirects, 0, "{p}");
        }
    }
}

//! Smoke test of `respite-bench compare --stats-reader`: the respite-1w case also
//! runs with a thread fetching the admin stats in a tight loop, and the report compares both.
//! Needs the same binaries as `standalone_compare.rs`.

use crate::common;

use std::process::Command;

#[test]
fn stats_reader_runs_are_reported() {
    let (bench, respite) = common::binaries(&["redis-server", "nutcracker"]);
    let out = tempfile::tempdir().expect("temp dir");
    let status = Command::new(&bench)
        .args([
            "compare",
            "--stats-reader",
            "--duration",
            "300ms",
            "--warmup",
            "50ms",
            "--reps",
            "1",
            "--cases",
            "get-p1",
            "--scaling",
            "none",
            "--memory-conns",
            "0",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench compare --stats-reader");
    assert!(status.success(), "respite-bench compare failed: {status}");

    let json = std::fs::read_to_string(out.path().join("latest.json")).expect("latest.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let runs = v["runs"].as_array().expect("runs");
    let run = |target: &str| {
        runs.iter()
            .find(|r| r["case"] == "get-p1" && r["target"] == target)
            .unwrap_or_else(|| panic!("no run for {target}"))
    };
    let with = run("respite-1w+stats");
    let without = run("respite-1w");
    let fetches = with["stats_fetches_per_s"].as_f64().expect("fetch rate");
    println!("{fetches:.0} admin fetches/s");
    assert!(fetches > 10.0, "the reader hardly fetched: {fetches}/s");
    assert!(without.get("stats_fetches_per_s").is_none());
    for r in [with, without] {
        let w = r["threads"]["worker_cpu_us_per_req"]
            .as_f64()
            .expect("worker CPU");
        assert!(w > 0.0, "worker CPU {w}");
        assert!(r["metrics"]["rps"].as_f64().expect("rps") > 0.0);
    }
    // The reader makes the admin thread work; without it the admin thread idles.
    let admin = |r: &serde_json::Value| r["threads"]["admin_cores"].as_f64().expect("admin");
    assert!(
        admin(with) > admin(without),
        "{} vs {}",
        admin(with),
        admin(without)
    );
    let md = std::fs::read_to_string(out.path().join("latest.md")).expect("Markdown");
    assert!(md.contains("## Stats reader"), "{md}");
    assert!(md.contains("| GET P1 | respite-1w+stats |"), "{md}");
}

//! Smoke test of `respite-bench soak` at a tiny scale: 15 s of load with a reload every 3 s and
//! a backend restart every 5 s. It must pass, and its report must hold real figures.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_short_soak_passes_with_real_figures() {
    let (bench, respite) = common::binaries(&["redis-server"]);
    let out = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let status = Command::new(&bench)
        .args([
            "soak",
            "--duration",
            "15s",
            "--warmup",
            "3s",
            "--reload-every",
            "3s",
            "--restart-every",
            "5s",
            "--settle",
            "3s",
            "--sample-every",
            "1s",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench soak");
    let took = started.elapsed();
    assert!(status.success(), "respite-bench soak failed: {status}");
    assert!(took < Duration::from_secs(30), "took {took:?}");

    let report = common::only_file(out.path(), "-soak.json");
    let v: serde_json::Value = serde_json::from_str(&report).expect("valid JSON");
    assert_eq!(v["verdict"], "PASS", "{v:#}");
    let ledger = &v["ledger"];
    assert!(ledger["acknowledged"].as_u64().expect("acknowledged") > 0);
    assert_eq!(ledger["lost"], 0);
    // Every backend holds ledger keys, so every restart puts some INCRs in doubt.
    let per_backend = ledger["keys_per_backend"]
        .as_array()
        .expect("keys_per_backend");
    assert_eq!(per_backend.len(), 3);
    assert!(
        per_backend.iter().all(|n| n.as_u64() > Some(0)),
        "{per_backend:?}"
    );
    assert!(ledger["value_sum"].as_i64().expect("value_sum") > 0);
    assert!(v["load"]["requests"].as_u64().expect("requests") > 0);
    assert!(v["churn"]["connections"].as_u64().expect("churn") > 0);
    assert!(v["reloads"]["applied"].as_u64().expect("reloads") >= 2);
    assert!(!v["restarts"].as_array().expect("restarts").is_empty());
    let samples = v["samples"].as_array().expect("samples");
    assert!(samples.len() >= 10, "{} samples", samples.len());
    assert!(samples.iter().all(|s| s["rss_kib"].as_u64() > Some(0)));
    assert!(samples.iter().any(|s| s["phase"] == "settle"));
    let m = &v["memory"];
    assert!(m["warm_rss_kib"].as_u64() > Some(0) && m["end_rss_kib"].as_u64() > Some(0));
    assert!(m["warm_fds"].as_u64() > Some(0));
    let md = common::only_file(out.path(), "-soak.md");
    assert!(
        md.contains("## Verdict: PASS") && md.contains("## Ledger"),
        "{md}"
    );
}

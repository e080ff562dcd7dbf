//! Smoke test of `respite-bench compare --cluster` against a real 6-node Redis Cluster and the
//! respite binary, with tiny run durations.
//!
//! Needs `redis-server` and `redis-cli` on PATH and the `respite` binary next to `respite-bench`
//! (`cargo build --release`, or `cargo test --release --workspace`). The cluster-direct target
//! (the load generator as a cluster-aware client) is checked first, then the Respite targets with
//! their `type = "redis_cluster"` upstream; a failure names the error replies Respite gave.

use crate::common;

use std::process::Command;

#[test]
fn cluster_compare_smoke() {
    let (bench, respite) = common::binaries(&["redis-server", "redis-cli"]);
    let out = tempfile::tempdir().expect("temp dir");
    let status = Command::new(&bench)
        .args([
            "compare",
            "--cluster",
            "--quick",
            "--duration",
            "200ms",
            "--warmup",
            "50ms",
            "--cases",
            "get-p1,set-p16",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench compare --cluster");

    // The report is written even when some target failed.
    let json = std::fs::read_to_string(out.path().join("latest-cluster.json"))
        .expect("latest-cluster.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let md = std::fs::read_to_string(out.path().join("latest-cluster.md")).expect("Markdown");
    let medians = v["medians"].as_array().expect("medians array");
    let failures = v["failures"].as_array().expect("failures array");
    let median = |case: &str, target: &str| {
        medians
            .iter()
            .find(|m| m["case"] == case && m["target"] == target)
            .map(|m| &m["median"])
    };

    for case in ["get-p1", "set-p16"] {
        let m = median(case, "cluster-direct").unwrap_or_else(|| {
            panic!("no cluster-direct median for {case}; failures: {failures:?}")
        });
        assert!(m["rps"].as_f64().is_some_and(|r| r > 0.0), "{case}: {m}");
        assert_eq!(m["errors"], 0, "{case}: {m}");
        // CPU of the six redis-servers and of the load generator, no proxy.
        assert!(m["redis_cpu_us_per_req"].as_f64().is_some(), "{case}: {m}");
        assert!(m["client_cpu_us_per_req"].as_f64().is_some(), "{case}: {m}");
        assert!(m["proxy_cpu_us_per_req"].is_null(), "{case}: {m}");
    }
    assert!(md.contains("| GET P1 | cluster-direct |"), "{md}");
    // GET P1 ran against prefilled keys: no nil replies.
    let direct_get = v["runs"]
        .as_array()
        .expect("runs array")
        .iter()
        .find(|r| r["case"] == "get-p1" && r["target"] == "cluster-direct")
        .expect("a cluster-direct GET P1 run");
    assert_eq!(direct_get["report"]["nil_replies"], 0);

    // Respite over the cluster.
    for case in ["get-p1", "set-p16"] {
        for target in ["respite-1w", "respite-2w"] {
            let m = median(case, target).unwrap_or_else(|| {
                panic!("no successful {target} run for {case}; failures: {failures:?}")
            });
            assert!(
                m["rps"].as_f64().is_some_and(|r| r > 0.0),
                "{case} {target}: {m}"
            );
            assert!(
                m["proxy_cpu_us_per_req"].as_f64().is_some(),
                "{case} {target}: {m}"
            );
        }
    }
    assert!(md.contains("| SET P16 | respite-2w |"), "{md}");
    assert!(md.contains("## Respite / cluster-direct"), "{md}");
    assert!(failures.is_empty(), "failures: {failures:?}");
    assert!(
        status.success(),
        "respite-bench compare --cluster failed: {status}"
    );
}

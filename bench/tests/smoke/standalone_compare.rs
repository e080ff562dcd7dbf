//! Smoke test of `respite-bench compare` against real redis-server, nutcracker and respite
//! processes, with tiny run durations; the `respite` binary doubles as `--baseline-bin`.
//!
//! Needs `redis-server` and `nutcracker` on PATH (the test fails, saying so, when they are
//! missing; CI installs them) and the `respite` binary next to `respite-bench`: build it first
//! with `cargo build --release` (`cargo test --release --workspace` builds every binary).

use crate::common;

use std::process::Command;

#[test]
fn compare_smoke() {
    let (bench, respite) = common::binaries(&["redis-server", "nutcracker"]);
    let out = tempfile::tempdir().expect("temp dir");
    let status = Command::new(&bench)
        .args([
            "compare",
            "--duration",
            "200ms",
            "--warmup",
            "50ms",
            "--reps",
            "1",
            "--cases",
            "get-p1,open-loop",
            "--scaling",
            "none",
            "--memory-conns",
            "100",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .arg("--baseline-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench compare");
    assert!(status.success(), "respite-bench compare failed: {status}");

    let json = std::fs::read_to_string(out.path().join("latest.json")).expect("latest.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let medians = v["medians"].as_array().expect("medians array");
    for case in ["get-p1", "open-loop"] {
        for target in [
            "direct",
            "twemproxy",
            "respite-1w",
            "respite-1w-baseline",
            "respite-2w",
        ] {
            let m = medians
                .iter()
                .find(|m| m["case"] == case && m["target"] == target)
                .unwrap_or_else(|| panic!("no median for {case} {target}"));
            let rps = m["median"]["rps"].as_f64().expect("rps");
            assert!(rps > 0.0, "{case} {target}: rps {rps}");
        }
    }
    assert!(v["open_loop_rate"].as_f64().is_some_and(|r| r > 0.0));
    assert_eq!(v["memory"].as_array().map(Vec::len), Some(3));
    let pairs = v["baseline"].as_array().expect("baseline array");
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    for p in pairs {
        let ratio = p["proxy_cpu_ratio"].as_f64().expect("proxy CPU ratio");
        assert!(ratio > 0.0, "{p}");
        assert_eq!(
            p["proxy_cpu_ratio_per_rep"].as_array().map(Vec::len),
            Some(1)
        );
        assert!(
            p["baseline"]["rps"].as_f64().is_some_and(|r| r > 0.0),
            "{p}"
        );
    }
    let svg = std::fs::read_to_string(out.path().join("latest-latency.svg")).expect("SVG");
    assert!(
        svg.starts_with("<svg"),
        "not an SVG: {}",
        &svg[..svg.len().min(80)]
    );
    let md = std::fs::read_to_string(out.path().join("latest.md")).expect("Markdown");
    assert!(md.contains("| GET P1 | respite-2w |"));
    assert!(md.contains("## Current vs baseline"), "{md}");
}

//! Smoke test of `respite-bench compare --cases tx-c50,blpop-pingpong`: transactions and the
//! BLPOP/LPUSH ping-pong against Redis direct and Respite (twemproxy shown as n/a), Respite's
//! leased connections around each run, and the memory per blocked client. Needs the same
//! binaries as `standalone_compare.rs`.

use crate::common;

use std::process::Command;

/// The redis-servers behind the proxies (`--redis-servers` default).
const BACKENDS: u64 = 2;
/// Clients of the blocked-memory probe.
const BLOCKED: i64 = 100;

#[test]
fn transactions_and_blocking_commands_are_measured() {
    let (bench, respite) = common::binaries(&["redis-server", "nutcracker"]);
    let out = tempfile::tempdir().expect("temp dir");
    let status = Command::new(&bench)
        .args([
            "compare",
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--reps",
            "1",
            "--cases",
            "tx-c50,blpop-pingpong",
            "--scaling",
            "none",
            "--memory-conns",
            "0",
            "--blocked-clients",
            &BLOCKED.to_string(),
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench compare");
    assert!(status.success(), "respite-bench compare failed: {status}");

    let json = std::fs::read_to_string(out.path().join("latest.json")).expect("latest.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let medians = v["medians"].as_array().expect("medians array");
    let runs = v["runs"].as_array().expect("runs array");
    for case in ["tx-c50", "blpop-pingpong"] {
        for (target, workers) in [("direct", 0), ("respite-1w", 1), ("respite-2w", 2)] {
            let m = medians
                .iter()
                .find(|m| m["case"] == case && m["target"] == target)
                .unwrap_or_else(|| panic!("no median for {case} {target}"));
            let rps = m["median"]["rps"].as_f64().expect("rps");
            assert!(rps > 0.0, "{case} {target}: rps {rps}");
            if workers == 0 {
                continue;
            }
            let cpu = m["median"]["proxy_cpu_us_per_req"].as_f64();
            assert!(cpu.is_some_and(|c| c > 0.0), "{case} {target}: {cpu:?}");
            let run = runs
                .iter()
                .find(|r| r["case"] == case && r["target"] == target)
                .unwrap_or_else(|| panic!("no run for {case} {target}"));
            let measured = run["leased"]["measured"].as_u64().expect("leased connects");
            assert!(
                measured <= workers * BACKENDS * 2,
                "{case} {target}: {measured} leased connections opened in the measured run"
            );
            assert!(run["leased"]["pool_after"].as_i64().is_some_and(|p| p > 0));
        }
        assert!(
            !medians
                .iter()
                .any(|m| m["case"] == case && m["target"] == "twemproxy"),
            "twemproxy cannot run {case}"
        );
    }
    let blocked = v["blocked_memory"].as_array().expect("blocked_memory");
    assert_eq!(blocked.len(), 2, "{blocked:?}");
    let respite_probe = blocked
        .iter()
        .find(|b| b["target"] == "respite-1w")
        .expect("respite-1w probe");
    let bytes = respite_probe["bytes_per_blocked_client"]
        .as_f64()
        .expect("bytes");
    assert!(bytes > 0.0, "{respite_probe}");
    assert_eq!(respite_probe["proxy_blocked_gauge"].as_i64(), Some(BLOCKED));

    let md = std::fs::read_to_string(out.path().join("latest.md")).expect("Markdown");
    assert!(md.contains("## Transactions and blocking commands"), "{md}");
    assert!(
        md.contains("| MULTI+SET+INCR+EXEC c=50 | twemproxy | n/a |"),
        "{md}"
    );
    assert!(md.contains("bytes per blocked client"), "{md}");
}

//! Smoke test of `respite-bench attack` at a tiny scale: 20 never-reading clients × 200 GETs of
//! a 64 KiB value for 3 s, then one 8 MiB SET. The report must hold real figures.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_small_attack_is_measured() {
    let (bench, respite) = common::binaries(&["redis-server"]);
    let out = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let status = Command::new(&bench)
        .args([
            "attack",
            "--clients",
            "20",
            "--requests",
            "200",
            "--value-size",
            "65536",
            "--attack-for",
            "3s",
            "--settle",
            "2s",
            "--large-clients",
            "1",
            "--large-mib",
            "8",
            "--out",
        ])
        .arg(out.path())
        .arg("--respite-bin")
        .arg(&respite)
        .status()
        .expect("run respite-bench attack");
    let took = started.elapsed();
    assert!(status.success(), "respite-bench attack failed: {status}");
    assert!(took < Duration::from_secs(30), "took {took:?}");

    let report = common::only_file(out.path(), "-attack.json");
    let v: serde_json::Value = serde_json::from_str(&report).expect("valid JSON");
    assert_eq!(v["respite_healthy"], true);
    assert_eq!(v["attackers"]["connected"], 20);
    assert!(v["attackers"]["bytes_written"].as_u64() > Some(0));
    // The counters were read from /stats (-1 means they could not be).
    assert!(v["evicted_clients"].as_i64() >= Some(0));
    assert!(v["client_output_buffer_limit_disconnections"].as_i64() >= Some(0));
    let rss = &v["respite_rss"];
    assert!(rss["idle_kib"].as_u64() > Some(0));
    assert!(rss["peak_attack_kib"].as_u64() >= rss["idle_kib"].as_u64());
    assert!(rss["after_settle_kib"].as_u64() > Some(0));
    let samples = v["samples"].as_array().expect("samples");
    assert!(samples.iter().any(|s| s["phase"] == "attack"));
    assert!(
        samples
            .iter()
            .all(|s| s["respite_rss_kib"].as_u64() > Some(0))
    );
    assert!(
        samples
            .iter()
            .all(|s| s["backend_used"].as_array().map(Vec::len) == Some(3))
    );
    let probes = v["probes"].as_array().expect("probes");
    for backend in ["redis1", "redis2", "redis3"] {
        let attack = probes
            .iter()
            .find(|p| p["backend"] == backend && p["phase"] == "attack")
            .unwrap_or_else(|| panic!("no attack-phase probe of {backend}"));
        assert!(attack["samples"].as_u64() > Some(10), "{attack}");
        assert!(attack["p99_us"].as_u64() > Some(0), "{attack}");
    }
    let large = &v["large"];
    assert_eq!(large["sets"][0]["ok"], true, "{large}");
    assert!(large["respite_rss_peak_kib"].as_u64() > Some(0));
    let md = common::only_file(out.path(), "-attack.md");
    assert!(
        md.contains("## Probes") && md.contains("## Large SETs"),
        "{md}"
    );
}

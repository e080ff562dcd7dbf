//! Smoke test of `respite-bench compare --cases pubsub-1,pubsub-100`: pub/sub fan-out against
//! Redis direct and Respite (twemproxy shown as n/a), every message delivered in order, Respite
//! holding one upstream subscription per worker, Redis doing far less work per delivered message
//! through it, and the memory per subscriber. Needs the same binaries as
//! `standalone_compare.rs`.

use crate::common;

use std::process::Command;

/// Subscribers of the memory probe.
const SUBSCRIBERS: i64 = 50;
/// The redis-servers behind the proxies (`--redis-servers` default).
const BACKENDS: i64 = 2;

#[test]
fn fan_out_is_measured_and_in_order() {
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
            "pubsub-1,pubsub-100",
            "--scaling",
            "none",
            "--memory-conns",
            "0",
            "--pubsub-memory",
            &SUBSCRIBERS.to_string(),
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
    for (case, n) in [("pubsub-1", 1), ("pubsub-100", 100)] {
        for (target, workers) in [("direct", 0), ("respite-1w", 1), ("respite-2w", 2)] {
            let m = medians
                .iter()
                .find(|m| m["case"] == case && m["target"] == target)
                .unwrap_or_else(|| panic!("no median for {case} {target}"));
            assert!(m["median"]["rps"].as_f64().is_some_and(|r| r > 0.0), "{m}");
            let run = runs
                .iter()
                .find(|r| r["case"] == case && r["target"] == target)
                .unwrap_or_else(|| panic!("no run for {case} {target}"));
            let p = &run["pubsub"];
            assert_eq!(p["subscribers"].as_u64(), Some(n), "{p}");
            for k in ["reordered", "missing", "cut_off"] {
                assert_eq!(p[k].as_u64(), Some(0), "{case} {target} {k}: {p}");
            }
            let published = p["published_per_s"].as_f64().expect("published/s");
            let delivered = p["delivered_per_s"].as_f64().expect("delivered/s");
            assert!(published > 0.0, "{p}");
            // Every subscriber reads every message (the phases cut a few off at the edges).
            let per_sub = delivered / n as f64;
            assert!(
                (per_sub / published - 1.0).abs() < 0.2,
                "{case} {target}: {delivered} delivered/s for {published} published/s"
            );
            if workers == 0 {
                assert!(p["respite"].is_null(), "{p}");
                continue;
            }
            let cx = p["respite"]["upstream_cx_active"].as_i64().expect("cx");
            let channels = p["respite"]["upstream_channels"]
                .as_i64()
                .expect("channels");
            // One subscriber connection per worker and host that held a channel (they stay
            // open once made; earlier channels may have gone to the other host).
            assert!(
                (1..=workers * BACKENDS).contains(&cx),
                "{case} {target}: {cx} upstream cx"
            );
            // One subscription per worker with subscribers, whatever N is.
            assert!(
                (1..=workers).contains(&channels),
                "{case} {target}: {channels} upstream channels"
            );
        }
        assert!(
            !medians
                .iter()
                .any(|m| m["case"] == case && m["target"] == "twemproxy"),
            "twemproxy cannot run {case}"
        );
    }
    // Redis writes each message once to Respite instead of 100 times.
    let redis_cpu = |target: &str| {
        medians
            .iter()
            .find(|m| m["case"] == "pubsub-100" && m["target"] == target)
            .and_then(|m| m["median"]["redis_cpu_us_per_req"].as_f64())
            .unwrap_or_else(|| panic!("no redis CPU for {target}"))
    };
    assert!(
        redis_cpu("respite-1w") < redis_cpu("direct") * 0.5,
        "redis CPU µs/msg through respite-1w {} vs direct {}",
        redis_cpu("respite-1w"),
        redis_cpu("direct")
    );

    let memory = v["pubsub_memory"].as_array().expect("pubsub_memory");
    assert_eq!(memory.len(), 3, "{memory:?}");
    let probe = memory
        .iter()
        .find(|m| m["target"] == "respite-1w")
        .expect("respite-1w probe");
    assert_eq!(probe["subscribers"].as_i64(), Some(SUBSCRIBERS));
    assert_eq!(probe["respite"]["upstream_channels"].as_i64(), Some(1));
    assert_eq!(probe["respite"]["upstream_cx_active"].as_i64(), Some(1));

    let md = std::fs::read_to_string(out.path().join("latest.md")).expect("Markdown");
    assert!(md.contains("## Pub/sub fan-out"), "{md}");
    assert!(
        md.contains("| PUBLISH → 100 subscribers | twemproxy | n/a (no pub/sub) |"),
        "{md}"
    );
    assert!(md.contains("bytes per subscriber"), "{md}");
}

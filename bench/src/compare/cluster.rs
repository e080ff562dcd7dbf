//! `respite-bench compare --cluster`: a 6-node Redis Cluster (3 primaries + 3 replicas, started
//! here), measured through a cluster-aware client straight to it ("cluster-direct": the load
//! generator routes by slot itself, see `crate::cluster`) and through Respite with a
//! `redis_cluster` upstream (1 and 2 workers), GET and SET at pipeline 1 and 16, runs interleaved
//! like the standalone comparison. A Respite that does not start or answers with errors is
//! reported per target; its runs are left out of the medians.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::cases::{self, Case};
use super::metrics::{self, RunRecord, Summary};
use super::procs::{Fleet, Server, hosts_toml};
use super::table::{self, Layout, fmt_ratio};
use super::{CompareArgs, Output, Runner, Setup, Target, prefill, setup, write_outputs};

/// The cases a cluster comparison can run (single-key commands only).
const CASES: [&str; 4] = ["get-p1", "set-p1", "get-p16", "set-p16"];

/// Name of the cluster-aware direct target, the baseline of the ratios.
const DIRECT: &str = "cluster-direct";

/// The cluster nodes and the Respites in front of them; drops kill all and remove the directory.
struct ClusterProcs {
    fleet: Fleet,
    /// All six nodes, `redis1`..`redis6`; the first three are the initial primaries.
    nodes: Vec<Server>,
    /// `respite-1w` and `respite-2w`, or why each did not start.
    respites: Vec<(&'static str, Result<Server, String>)>,
}

impl Drop for ClusterProcs {
    fn drop(&mut self) {
        self.fleet.remove();
    }
}

/// A free port whose cluster bus port (port + 10 000) is free too.
fn cluster_port() -> Result<u16, String> {
    for _ in 0..200 {
        let port = fastrand::u16(20_000..50_000);
        let a = TcpListener::bind(("127.0.0.1", port));
        let b = TcpListener::bind(("127.0.0.1", port + 10_000));
        if a.is_ok() && b.is_ok() {
            return Ok(port);
        }
    }
    Err("no free port pair (port, port + 10000) for a cluster node".into())
}

/// `CLUSTER INFO` of the node at `port` says `cluster_state:ok`.
fn cluster_ok(port: u16) -> bool {
    let Ok(mut s) = crate::load::connect(([127, 0, 0, 1], port).into(), None) else {
        return false;
    };
    crate::load::roundtrip(&mut s, &crate::resp::command(&[b"CLUSTER", b"INFO"]))
        .is_ok_and(|r| String::from_utf8_lossy(&r).contains("cluster_state:ok"))
}

/// The last `n` non-empty lines of a log file, joined with ` | `.
fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

impl ClusterProcs {
    /// Starts six cluster-enabled redis-servers, joins them with `redis-cli --cluster create`
    /// (one replica per primary), waits for `cluster_state:ok` on every node, then starts the two
    /// Respites (failures to start them are kept, not returned).
    fn start(respite_bin: &Path) -> Result<ClusterProcs, String> {
        let mut fleet = Fleet::new("respite-compare-cluster")?;
        let mut nodes = Vec::new();
        for i in 1..=6 {
            let port = cluster_port()?;
            let conf = format!("nodes-{port}.conf");
            nodes.push(fleet.redis(
                &format!("redis{i}"),
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "5000",
                ],
            )?);
        }
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed ({}): {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !nodes.iter().all(|n| cluster_ok(n.port)) {
            if Instant::now() > deadline {
                return Err(format!(
                    "the cluster did not reach cluster_state:ok on every node within 30 s; \
                     logs in {}",
                    fleet.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let upstream = format!(
            "type = \"redis_cluster\"\nhosts = {}\n",
            hosts_toml(nodes[..3].iter().map(|n| n.port))
        );
        let mut respites = Vec::new();
        for (name, workers) in [("respite-1w", 1), ("respite-2w", 2)] {
            let r = fleet
                .respite(name, respite_bin, workers, "1s", &upstream)
                .map_err(|e| {
                    let log = log_tail(&fleet.dir.join(format!("{name}.log")), 5);
                    format!("{e}; log: {log}")
                });
            respites.push((name, r));
        }
        Ok(ClusterProcs {
            fleet,
            nodes,
            respites,
        })
    }
}

/// The selected cases: `--cases` (a subset of [`CASES`] or `all`), else all of them.
fn select(list: Option<&str>) -> Result<Vec<Case>, String> {
    let ids: Vec<&str> = match list {
        None | Some("all") => CASES.to_vec(),
        Some(l) => l
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect(),
    };
    if let Some(bad) = ids.iter().find(|id| !CASES.contains(id)) {
        return Err(format!(
            "case `{bad}` is not available with --cluster; known: {}",
            CASES.join(", ")
        ));
    }
    Ok(cases::all_cases()
        .into_iter()
        .filter(|c| ids.contains(&c.id))
        .collect())
}

/// Runs the cluster comparison and writes `<UTC>-cluster.{json,md}` and `latest-cluster.*`.
pub(super) fn run(args: &CompareArgs) -> Result<(), String> {
    let cases = select(args.cases.as_deref())?;
    let su: Setup = setup(args, 6, 0)?;
    let settings = su.settings;

    eprintln!("starting a 6-node Redis Cluster and respite (1 and 2 workers)...");
    let procs = ClusterProcs::start(&su.respite_bin)?;
    eprintln!(
        "configs and logs in {} (removed at exit)",
        procs.fleet.dir.display()
    );
    let seed = procs.nodes[0].port;
    prefill("cluster", seed, true, 3, 0)?;

    let mut targets = vec![Target {
        name: DIRECT,
        port: seed,
        proxy_pid: None,
        cluster: true,
        tls: None,
        stats_reader: None,
        admin: None,
    }];
    let mut failures = Vec::new();
    for (name, r) in &procs.respites {
        match r {
            Ok(s) => targets.push(Target {
                name,
                port: s.port,
                proxy_pid: Some(s.pid),
                cluster: false,
                tls: None,
                stats_reader: None,
                admin: s.admin_port,
            }),
            Err(e) => {
                eprintln!("{name} did not start: {e}");
                failures.push(format!("{name}: did not start: {e}"));
            }
        }
    }
    let total = settings.reps * cases.len() * targets.len();
    let mut runner = Runner::new(&settings, &procs.nodes, total, failures);
    runner.run_interleaved(&cases.iter().collect::<Vec<_>>(), &targets, None);
    let Runner { runs, failures, .. } = runner;
    drop(procs);

    // A run with error replies measured errors, not the target: keep it out of the medians.
    let ok: Vec<RunRecord> = runs
        .iter()
        .filter(|r| r.metrics.errors == 0)
        .cloned()
        .collect();
    let names: Vec<String> = ["cluster-direct", "respite-1w", "respite-2w"]
        .map(String::from)
        .to_vec();
    let medians = metrics::summarize(&ok, &cases, &names);
    let output = Output {
        timestamp: su.timestamp.clone(),
        machine: su.machine,
        settings,
        cases,
        open_loop_rate: None,
        runs,
        medians,
        memory: Vec::new(),
        blocked_memory: Vec::new(),
        pubsub_memory: Vec::new(),
        baseline: Vec::new(),
        failures,
    };
    let md = render(&output, &names);
    write_outputs(
        &output,
        &output.failures,
        &su.out_dir,
        &su.timestamp,
        "-cluster",
        &md,
        None,
    )
}

/// The Markdown report of a cluster comparison.
fn render(o: &Output, targets: &[String]) -> String {
    let mut s = String::new();
    let st = &o.settings;
    let _ = writeln!(s, "# Respite over Redis Cluster {}\n", o.timestamp);
    let _ = writeln!(s, "{}", table::machine_line(o));
    let _ = writeln!(
        s,
        "A Redis Cluster of 6 redis-servers (3 primaries + 3 replicas, `redis-cli --cluster \
         create --cluster-replicas 1`, node timeout 5 s, no persistence). `{DIRECT}`: the load \
         generator as a cluster-aware client (CLUSTER SLOTS once; per client connection one \
         connection per primary; each pipeline batch split by slot owner, one write per node). \
         `respite-Nw`: Respite with N workers and a `redis_cluster` upstream seeded with the three \
         first nodes. Medians of {} rep(s) of {} s runs ({} s warm-up), interleaved. Latency in \
         µs; CPU in µs per request: proxy = all its threads, redis = all six redis-servers summed \
         (replicas replay every SET), client = the load generator, whole machine = the three. \
         Runs with error replies are left out of the medians (see Failures). `*` = other \
         processes used more than {} core in k of n reps.\n",
        st.reps, st.duration_s, st.warmup_s, st.noisy_threshold_cores
    );
    let _ = writeln!(
        s,
        "## GET / SET (50 connections, 3-byte values, 100 000 keys)\n"
    );
    let rows: Vec<&Summary> = o.medians.iter().collect();
    if rows.is_empty() {
        let _ = writeln!(s, "No successful run.\n");
    } else {
        let layout = Layout {
            first: "case",
            baseline: DIRECT,
            client_cpu: true,
        };
        s.push_str(&table::table(&o.medians, &rows, &layout, &|x| {
            x.label.clone()
        }));
        s.push('\n');
    }
    let direct = |case: &str| {
        o.medians
            .iter()
            .find(|m| m.case == case && m.target == DIRECT)
    };
    let proxied: Vec<&Summary> = rows
        .iter()
        .copied()
        .filter(|m| m.target != DIRECT)
        .collect();
    if !proxied.is_empty() {
        let _ = writeln!(s, "## Respite / {DIRECT}\n");
        let _ = writeln!(
            s,
            "| case | target | rps | p50 | p99 | p99.9 | redis CPU/req | whole-machine CPU/req |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
        for m in proxied {
            let Some(d) = direct(&m.case) else { continue };
            let (a, b) = (&m.median, &d.median);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                m.label,
                m.target,
                fmt_ratio(Some(a.rps), Some(b.rps)),
                fmt_ratio(Some(a.p50_us), Some(b.p50_us)),
                fmt_ratio(Some(a.p99_us), Some(b.p99_us)),
                fmt_ratio(Some(a.p999_us), Some(b.p999_us)),
                fmt_ratio(a.redis_cpu_us_per_req, b.redis_cpu_us_per_req),
                fmt_ratio(a.machine_cpu_us_per_req, b.machine_cpu_us_per_req),
            );
        }
        s.push('\n');
    }
    let missing: Vec<String> = targets
        .iter()
        .filter(|t| !o.medians.iter().any(|m| &m.target == *t))
        .map(|t| {
            let first = o
                .failures
                .iter()
                .find(|f| f.contains(&format!(" {t}:")) || f.starts_with(&format!("{t}:")))
                .map_or("", String::as_str);
            format!("- {t}: no successful run ({first})")
        })
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(s, "## Targets without results\n\n{}\n", missing.join("\n"));
    }
    s.push_str(&table::failures(o));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_selection() {
        let ids = |l| select(l).unwrap().iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(None), CASES);
        assert_eq!(ids(Some("set-p16, get-p1")), ["get-p1", "set-p16"]);
        assert!(select(Some("mget10-p1")).is_err());
    }

    #[test]
    fn bus_port_pair() {
        let p = cluster_port().unwrap();
        assert!((20_000..50_000).contains(&p));
    }
}

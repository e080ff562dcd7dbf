//! `respite-bench compare`: Redis direct vs twemproxy vs Respite (1 and 2 workers) over the same
//! redis-servers, all started here on free ports, runs interleaved (rep → case → target) so drift
//! hits every target alike; medians over repetitions; JSON, Markdown and an SVG plot as output.
//! `--cluster`: a cluster-aware client vs Respite over a Redis Cluster (see `cluster.rs`);
//! `--baseline-bin`: also a baseline Respite build, compared with the current one (`baseline.rs`).
//! `--cases tx-c50,blpop-pingpong`: transactions and blocking commands (`stateful.rs`).
//! `--cases pubsub-1,pubsub-100,pubsub-1000`: pub/sub fan-out to N subscribers (`pubsub.rs`).
//! `--tls`: TLS vs plain, Respite vs redis-server's own TLS, and handshakes per second (`tls.rs`).

mod baseline;
mod cases;
mod cluster;
mod memory;
mod metrics;
mod plot;
pub(crate) mod procs;
mod pubsub;
mod sockmap;
mod sockmap_ctl;
mod stateful;
mod stats_reader;
pub(crate) mod sysstat;
mod table;
mod tls;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::load::{self, LoadConfig, Stop};
use crate::mix::parse_mix;
use crate::procstat::PidSpec;
use crate::report::Report;
use cases::{Case, Group, KEY_OFFSET_1K, KEYSPACE, Workload};
use memory::MemoryResult;
use metrics::{Metrics, RunRecord, Summary};
use procs::Procs;
use sysstat::MachineInfo;

/// `respite-bench compare` flags.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Repetitions of every case × target (medians are reported) [default: 3; --quick: 1].
    #[arg(long)]
    reps: Option<usize>,
    /// Measured time per run [default: 3s; --quick: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Unmeasured warm-up per run [default: 500ms; --quick: 200ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    warmup: Option<Duration>,
    /// Smoke test: 1 rep, 1 s runs, GET/SET P1/P16, MGET10 P1, open loop, c=10/1000, memory at
    /// 1 000 connections (with --cluster: GET/SET P1/P16).
    #[arg(long)]
    quick: bool,
    /// Compare over a Redis Cluster instead: 6 redis-servers (3 primaries + 3 replicas), a
    /// cluster-aware client straight to it ("cluster-direct") vs Respite (1 and 2 workers) with a
    /// `redis_cluster` upstream; GET/SET at pipeline 1 and 16. Writes `<UTC>-cluster.{json,md}`
    /// and `latest-cluster.{json,md}`.
    #[arg(long, conflicts_with_all = ["scaling", "memory_conns", "redis_servers"])]
    cluster: bool,
    /// Main cases: `all` or a comma list of ids (get-p1, set-p1, get-p16, set-p16, mget10-p1,
    /// mset10-p1, mget10-p16, mset10-p16, mix1k-p1, open-loop; the stateful tx-c50:
    /// MULTI+SET+INCR+EXEC at 50 clients, blpop-pingpong: BLPOP/LPUSH ping-pong over 25 pairs;
    /// and the pub/sub fan-out pubsub-1, pubsub-100, pubsub-1000: one publisher, 1/100/1000
    /// subscribers on one channel; twemproxy can run neither kind) [default: all but the
    /// stateful and pub/sub ones, or --quick's; with --cluster: get-p1, set-p1, get-p16,
    /// set-p16].
    #[arg(long, value_name = "IDS")]
    cases: Option<String>,
    /// Scaling cases: `all`, `none` or a comma list (conns-10, conns-100, conns-1000,
    /// conns-10000, pipe-4, pipe-64; P1 and P16 come from the main cases) [default: all].
    #[arg(long, value_name = "IDS")]
    scaling: Option<String>,
    /// Idle client connections for the memory probe; 0 skips it [default: 10000; --quick: 1000].
    #[arg(long, value_name = "N")]
    memory_conns: Option<usize>,
    /// With blpop-pingpong: clients blocked in BLPOP for the memory-per-blocked-client probe
    /// (Respite 1 worker and Redis direct); 0 skips it [default: 1000; --quick: 100].
    #[arg(long, value_name = "K")]
    blocked_clients: Option<usize>,
    /// With pubsub-* cases: clients subscribed to one channel for the memory-per-subscriber
    /// probe (RSS of Redis direct's redis-server and of every Respite with K subscribers minus
    /// without them); 0 skips it [default: the largest N of the selected pubsub cases].
    #[arg(long, value_name = "K")]
    pubsub_memory: Option<usize>,
    /// Number of redis-servers behind the proxies (the first one is also "direct").
    #[arg(long, default_value_t = 2, value_name = "N")]
    redis_servers: usize,
    /// The respite binary [default: `respite` next to this executable].
    #[arg(long, value_name = "PATH")]
    respite_bin: Option<PathBuf>,
    /// A baseline respite binary (e.g. a build of the commit before a change): every case also
    /// runs against it as target `respite-1w-baseline` (1 worker, respite-1w's config, same
    /// backends), right after respite-1w in every repetition; the report gets a "Current vs
    /// baseline" section (JSON `baseline`) with both binaries' rps, p50/p99, proxy and Redis CPU
    /// per request and the current / baseline ratio of proxy CPU per request, median and per rep.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["cluster", "sockmap"])]
    baseline_bin: Option<PathBuf>,
    /// Also run every case against respite-1w while a thread fetches its admin `/stats` and
    /// `/stats/prometheus` in a tight loop (target `respite-1w+stats`, interleaved with the plain
    /// runs); the report gets a "Stats reader" section with the throughput ratio and proxy CPU
    /// per request both ways.
    #[arg(long, conflicts_with = "cluster")]
    stats_reader: bool,
    /// Compare Respite with the eBPF sockmap accelerator on and off: Client → Respite
    /// (1 worker) → Redis on loopback, interleaved, fresh Respite and connections per phase,
    /// plus Redis direct; GET P1 with 1, 10 and 50 connections and GET P16 with 50 (`--cases`:
    /// p1-c1, p1-c10, p1-c50, p16-c50). Needs root, cgroup v2 and a respite-control built with
    /// sockmap support; writes `<UTC>-sockmap.{json,md}` and `latest-sockmap.*`.
    #[arg(long, conflicts_with_all = ["cluster", "stats_reader", "scaling", "memory_conns"])]
    sockmap: bool,
    /// The cgroup v2 the load generator (this process), Respite and Redis run in and
    /// respite-control attaches to (created if missing) [default:
    /// /sys/fs/cgroup/unified/respite-bench].
    #[arg(long, value_name = "PATH", requires = "sockmap")]
    sockmap_cgroup: Option<PathBuf>,
    /// Plumbing check of `--sockmap` without eBPF: respite-control runs without `--sockmap` and
    /// both Respite arms go over TCP (no root needed; the report says so in bold).
    #[arg(long, requires = "sockmap")]
    sockmap_tcp_only: bool,
    /// The respite-control binary for `--sockmap` [default: `respite-control` next to this
    /// executable].
    #[arg(long, value_name = "PATH", requires = "sockmap")]
    respite_control_bin: Option<PathBuf>,
    /// Measure TLS: one redis-server with a plain and a TLS port (`--tls-port`, mutual TLS,
    /// its default) and one Respite (1 worker) with a plain→plain, a TLS→TLS and a TLS→plain
    /// listener; the load generator direct to both Redis ports and to the three listeners, GET
    /// and SET at P1 and P16 (`--cases`: get-p1, set-p1, get-p16, set-p16), then connections
    /// that connect, handshake, PING and close in a loop (`handshake` in `--cases`): handshakes
    /// per second and CPU per handshake. Certificates are made at run time (rcgen). Writes
    /// `<UTC>-tls.{json,md}` and `latest-tls.*`; --redis-servers does not apply.
    #[arg(long, conflicts_with_all = ["cluster", "sockmap", "stats_reader", "baseline_bin", "scaling", "memory_conns"])]
    tls: bool,
    /// With --tls: concurrent clients of the handshake loop.
    #[arg(long, default_value_t = 8, value_name = "N", requires = "tls")]
    handshake_clients: usize,
    /// Output directory [default: bench/results under the workspace root; bench/results/quick
    /// with --quick].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Resolved settings, as recorded in the JSON.
#[derive(Debug, Clone, Serialize)]
struct Settings {
    reps: usize,
    duration_s: f64,
    warmup_s: f64,
    quick: bool,
    redis_servers: usize,
    memory_connections: usize,
    /// Clients of the memory-per-blocked-client probe (0: not run).
    blocked_clients: usize,
    /// Subscribers of the memory-per-subscriber probe (0: not run).
    pubsub_memory_subscribers: usize,
    keyspace: u64,
    /// Load generator threads: 1, except 2 for the 10 000-connection case.
    client_threads: &'static str,
    noisy_threshold_cores: f64,
    /// Backends form a Redis Cluster (`compare --cluster`).
    cluster: bool,
    /// `--stats-reader`: respite-1w also runs with an admin stats reader.
    stats_reader: bool,
    /// `--baseline-bin`: the baseline respite binary (target `respite-1w-baseline`).
    baseline_bin: Option<PathBuf>,
    /// `compare --tls`.
    tls: bool,
}

/// One target of every case.
#[derive(Clone)]
struct Target {
    name: &'static str,
    port: u16,
    proxy_pid: Option<u32>,
    /// `port` is a Redis Cluster seed and the load generator routes by slot itself.
    cluster: bool,
    /// Admin port whose stats a reader thread fetches in a tight loop during each run.
    stats_reader: Option<u16>,
    /// Respite's admin port, read around stateful runs (leased connections).
    admin: Option<u16>,
    /// Connect with TLS (`compare --tls`).
    tls: Option<std::sync::Arc<crate::tls::TlsClient>>,
}

/// Everything written to `<timestamp>.json`.
#[derive(Debug, Serialize)]
pub struct Output {
    timestamp: String,
    machine: MachineInfo,
    settings: Settings,
    cases: Vec<Case>,
    /// Open-loop rate: half of Redis direct's median GET P1 throughput, requests/second.
    open_loop_rate: Option<f64>,
    runs: Vec<RunRecord>,
    medians: Vec<Summary>,
    memory: Vec<MemoryResult>,
    /// Memory per client blocked in BLPOP (with blpop-pingpong).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    blocked_memory: Vec<stateful::BlockedMemory>,
    /// Memory per pub/sub subscriber (with pubsub-* cases).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pubsub_memory: Vec<pubsub::SubscriberMemory>,
    /// `--baseline-bin`: current vs baseline per case.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    baseline: Vec<baseline::Pair>,
    /// Runs that could not be made at all.
    failures: Vec<String>,
}

/// Entry point of the subcommand.
pub fn main(args: CompareArgs) -> ExitCode {
    let result = if args.cluster {
        cluster::run(&args)
    } else if args.sockmap {
        sockmap::run(&args)
    } else if args.tls {
        tls::run(&args)
    } else {
        run(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respite-bench compare: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the nearest ancestor of the executable, else of the CWD, whose
/// Cargo.toml has a `[workspace]` table.
pub(crate) fn workspace_root() -> Option<PathBuf> {
    let is_root = |d: &Path| {
        std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|s| s.contains("[workspace]"))
    };
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().find(|d| is_root(d)).map(Path::to_path_buf));
    from_exe.or_else(|| {
        std::env::current_dir()
            .ok()
            .and_then(|c| c.ancestors().find(|d| is_root(d)).map(Path::to_path_buf))
    })
}

/// What both comparisons resolve from the flags before starting anything.
struct Setup {
    settings: Settings,
    out_dir: PathBuf,
    respite_bin: PathBuf,
    timestamp: String,
    machine: MachineInfo,
}

/// Resolves the flags common to both comparisons; `redis_servers` and `memory_connections` as
/// the comparison will use them.
fn setup(
    args: &CompareArgs,
    redis_servers: usize,
    memory_connections: usize,
) -> Result<Setup, String> {
    let quick = args.quick;
    if args.reps == Some(0) {
        return Err("--reps must be >= 1".into());
    }
    let settings = Settings {
        reps: args.reps.unwrap_or(if quick { 1 } else { 3 }),
        duration_s: args
            .duration
            .unwrap_or(Duration::from_millis(if quick { 1000 } else { 3000 }))
            .as_secs_f64(),
        warmup_s: args
            .warmup
            .unwrap_or(Duration::from_millis(if quick { 200 } else { 500 }))
            .as_secs_f64(),
        quick,
        redis_servers,
        memory_connections,
        blocked_clients: 0,
        pubsub_memory_subscribers: 0,
        keyspace: KEYSPACE,
        client_threads: if args.cluster {
            "1"
        } else {
            "1 (2 for 10 000 connections)"
        },
        noisy_threshold_cores: metrics::NOISY_CORES,
        cluster: args.cluster,
        tls: args.tls,
        stats_reader: args.stats_reader,
        baseline_bin: args.baseline_bin.clone(),
    };
    if settings.duration_s <= 0.0 {
        return Err("--duration must be > 0".into());
    }
    let root = workspace_root();
    let out_dir = match (&args.out, &root) {
        (Some(o), _) => o.clone(),
        // Smoke runs go to a git-ignored subdirectory, so they never replace the committed results.
        (None, Some(r)) if quick => r.join("bench/results/quick"),
        (None, Some(r)) => r.join("bench/results"),
        (None, None) => {
            return Err(
                "cannot find the workspace root (Cargo.toml with [workspace]) from the \
                        executable or the current directory; pass --out DIR"
                    .into(),
            );
        }
    };
    let respite_bin = match &args.respite_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot locate this executable: {e}"))?
            .with_file_name("respite"),
    };
    if !respite_bin.exists() {
        return Err(format!(
            "respite binary not found at {} (build it with `cargo build --release` or pass \
             --respite-bin)",
            respite_bin.display()
        ));
    }
    if let Some(b) = settings.baseline_bin.as_ref().filter(|b| !b.exists()) {
        return Err(format!("--baseline-bin: {} not found", b.display()));
    }
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    Ok(Setup {
        settings,
        out_dir,
        respite_bin,
        timestamp: sysstat::utc_timestamp(),
        machine: MachineInfo::collect(root.as_deref()),
    })
}

fn run(args: &CompareArgs) -> Result<(), String> {
    if args.redis_servers == 0 {
        return Err("--redis-servers must be >= 1".into());
    }
    let quick = args.quick;
    let cases = cases::select(quick, args.cases.as_deref(), args.scaling.as_deref())?;
    let Setup {
        mut settings,
        out_dir,
        respite_bin,
        timestamp,
        machine,
    } = setup(
        args,
        args.redis_servers,
        args.memory_conns
            .unwrap_or(if quick { 1000 } else { 10_000 }),
    )?;
    if cases.iter().any(|c| c.workload == Workload::PingPong) {
        settings.blocked_clients = args
            .blocked_clients
            .unwrap_or(if quick { 100 } else { 1000 });
    }
    // The largest fan-out selected: N subscribers + the publisher.
    let most_subscribers = cases
        .iter()
        .filter(|c| c.workload == Workload::PubSub)
        .map(|c| c.connections - 1)
        .max();
    if let Some(n) = most_subscribers {
        settings.pubsub_memory_subscribers = args.pubsub_memory.unwrap_or(n);
    }
    // Stateful cases hold a leased upstream connection per client (a transaction while it
    // executes, BLPOP while it blocks): the per-worker, per-host bound must not make them wait.
    let max_leased = cases
        .iter()
        .filter(|c| c.group == Group::Stateful)
        .map(|c| c.connections)
        .max()
        .map(|n| n.max(settings.blocked_clients));
    let nofile = procs::raise_nofile()?;
    let most_conns = cases
        .iter()
        .map(|c| c.connections)
        .chain([
            settings.memory_connections,
            settings.blocked_clients,
            settings.pubsub_memory_subscribers,
        ])
        .max()
        .unwrap_or(0);
    if (most_conns as u64) + 200 > nofile {
        return Err(format!(
            "RLIMIT_NOFILE hard limit is {nofile}, too low for {most_conns} connections; raise \
             it (ulimit -Hn) or drop the largest cases"
        ));
    }

    eprintln!(
        "starting redis-servers, nutcracker and respite (1 and 2 workers{})...",
        if settings.baseline_bin.is_some() {
            ", and the baseline with 1"
        } else {
            ""
        }
    );
    let procs = Procs::start(
        settings.redis_servers,
        &respite_bin,
        settings.baseline_bin.as_deref(),
        max_leased,
    )?;
    eprintln!(
        "configs and logs in {} (removed at exit)",
        procs.dir().display()
    );
    let with_1k = cases.iter().any(|c| c.key_offset == KEY_OFFSET_1K);
    // The stateful cases make their own keys.
    let with_keyspace = cases.iter().any(|c| c.workload == Workload::Mix);
    for r in procs.redis.iter().filter(|_| with_keyspace) {
        prefill(&r.name, r.port, false, 3, 0)?;
        if with_1k {
            prefill(&r.name, r.port, false, 1024, KEY_OFFSET_1K)?;
        }
    }

    let proxy = |name: &'static str, s: &procs::Server| Target {
        name,
        port: s.port,
        proxy_pid: Some(s.pid),
        cluster: false,
        tls: None,
        stats_reader: None,
        admin: s.admin_port,
    };
    let mut targets = vec![
        Target {
            proxy_pid: None,
            ..proxy("direct", &procs.redis[0])
        },
        proxy("twemproxy", &procs.twemproxy),
        proxy("respite-1w", &procs.respite_1w),
    ];
    // The variants of respite-1w come next to it, so drift hits them alike.
    if let Some(b) = &procs.respite_1w_baseline {
        targets.push(proxy(baseline::TARGET, b));
    }
    if args.stats_reader {
        let admin = procs
            .respite_1w
            .admin_port
            .ok_or("internal: respite-1w has no admin port")?;
        targets.push(Target {
            stats_reader: Some(admin),
            ..proxy(stats_reader::TARGET, &procs.respite_1w)
        });
    }
    targets.push(proxy("respite-2w", &procs.respite_2w));
    let target_names: Vec<String> = targets.iter().map(|t| t.name.to_string()).collect();

    // Memory first, on fresh proxies: after a 10 000-connection load run twemproxy keeps its
    // connection structs and would show no growth.
    let mut memory_failures = Vec::new();
    let mut memory = Vec::new();
    if settings.memory_connections > 0 {
        for t in targets
            .iter()
            .filter(|t| matches!(t.name, "twemproxy" | "respite-1w" | baseline::TARGET))
        {
            let Some(pid) = t.proxy_pid else { continue };
            eprintln!(
                "memory: {} with {} idle connections...",
                t.name, settings.memory_connections
            );
            match memory::probe(t.name, t.port, pid, settings.memory_connections) {
                Ok(m) => memory.push(m),
                Err(e) => {
                    eprintln!("  failed: {e}");
                    memory_failures.push(format!("memory {e}"));
                }
            }
        }
    }
    let mut blocked_memory = Vec::new();
    if settings.blocked_clients > 0 {
        let backends: Vec<u16> = procs.redis.iter().map(|r| r.port).collect();
        let probes = [
            (&procs.redis[0], "direct", None),
            (&procs.respite_1w, "respite-1w", procs.respite_1w.admin_port),
        ];
        for (server, name, admin) in probes {
            eprintln!(
                "memory: {name} with {} clients blocked in BLPOP...",
                settings.blocked_clients
            );
            let admin = admin.map(|p| ([127, 0, 0, 1], p).into());
            match stateful::blocked_probe(
                name,
                server.port,
                server.pid,
                settings.blocked_clients,
                &backends,
                admin,
            ) {
                Ok(m) => blocked_memory.push(m),
                Err(e) => {
                    eprintln!("  failed: {e}");
                    memory_failures.push(format!("blocked-client memory {e}"));
                }
            }
        }
    }
    let mut pubsub_memory = Vec::new();
    if settings.pubsub_memory_subscribers > 0 {
        let k = settings.pubsub_memory_subscribers;
        // Redis direct and every Respite process (the stats-reader target is respite-1w again).
        for t in targets
            .iter()
            .filter(|t| t.name != "twemproxy" && t.stats_reader.is_none())
        {
            let pid = t.proxy_pid.unwrap_or(procs.redis[0].pid);
            eprintln!("memory: {} with {k} subscribers of one channel...", t.name);
            let admin = t.admin.map(|p| ([127, 0, 0, 1], p).into());
            match pubsub::memory_probe(t.name, t.port, pid, k, admin) {
                Ok(m) => pubsub_memory.push(m),
                Err(e) => {
                    eprintln!("  failed: {e}");
                    memory_failures.push(format!("subscriber memory {e}"));
                }
            }
        }
    }
    let total = settings.reps
        * cases
            .iter()
            .map(|c| {
                targets
                    .iter()
                    .filter(|t| !c.not_on.contains(&t.name))
                    .count()
            })
            .sum::<usize>();
    let mut runner = Runner::new(&settings, &procs.redis, total, memory_failures);
    // Closed-loop main cases, then the open-loop case (its rate needs GET P1), then scaling,
    // then transactions and blocking commands, then pub/sub fan-out.
    let phases: [&[Group]; 5] = [
        &[Group::Main],
        &[Group::OpenLoop],
        &[Group::Connections, Group::Pipeline],
        &[Group::Stateful],
        &[Group::PubSub],
    ];
    let mut open_loop_rate = None;
    for groups in phases {
        let phase_cases: Vec<&Case> = cases.iter().filter(|c| groups.contains(&c.group)).collect();
        if phase_cases.is_empty() {
            continue;
        }
        let mut rate = None;
        if groups.contains(&Group::OpenLoop) {
            let r = runner.open_loop_rate(&targets[0])?;
            open_loop_rate = Some(r);
            rate = Some(r);
            eprintln!("open-loop rate: {:.0} req/s (half of direct GET P1)", r);
        }
        runner.run_interleaved(&phase_cases, &targets, rate);
    }

    let Runner { runs, failures, .. } = runner;
    drop(procs);

    let medians = metrics::summarize(&runs, &cases, &target_names);
    let svg = plot::render(&medians)?;
    let baseline = baseline::pairs(&medians, &runs);
    let output = Output {
        timestamp: timestamp.clone(),
        machine,
        settings,
        cases,
        open_loop_rate,
        runs,
        medians,
        memory,
        blocked_memory,
        pubsub_memory,
        baseline,
        failures,
    };
    let md = table::render(&output);
    write_outputs(
        &output,
        &output.failures,
        &out_dir,
        &timestamp,
        "",
        &md,
        Some(&svg),
    )
}

/// Writes `<timestamp><suffix>.{json,md}` (and `-latency.svg` when given) and the same as
/// `latest<suffix>.*`, prints the Markdown, and fails if `failures` (the runs that failed) is not empty.
fn write_outputs<T: Serialize>(
    output: &T,
    failures: &[String],
    out_dir: &Path,
    timestamp: &str,
    suffix: &str,
    md: &str,
    svg: Option<&str>,
) -> Result<(), String> {
    let write = |name: &str, data: &[u8]| {
        let p = out_dir.join(name);
        std::fs::write(&p, data).map_err(|e| format!("{}: {e}", p.display()))
    };
    let json = serde_json::to_string_pretty(output).map_err(|e| format!("JSON: {e}"))?;
    for stem in [timestamp, "latest"] {
        write(&format!("{stem}{suffix}.json"), json.as_bytes())?;
        write(&format!("{stem}{suffix}.md"), md.as_bytes())?;
        if let Some(svg) = svg {
            write(&format!("{stem}{suffix}-latency.svg"), svg.as_bytes())?;
        }
    }
    eprintln!(
        "wrote {}/{timestamp}{suffix}.{{json,md}}{} (+ latest{suffix}.*)",
        out_dir.display(),
        if svg.is_some() {
            format!(" and {timestamp}{suffix}-latency.svg")
        } else {
            String::new()
        }
    );
    print!("{md}");
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} run(s) failed (see the report)", failures.len()))
    }
}

/// SETs the keyspace of `value_size`-byte values at `key_offset` through `port` (a Redis
/// Cluster seed when `cluster`).
fn prefill(
    name: &str,
    port: u16,
    cluster: bool,
    value_size: usize,
    key_offset: u64,
) -> Result<(), String> {
    eprintln!("prefill {name}: {KEYSPACE} keys of {value_size} B");
    let cfg = LoadConfig {
        target: name.to_string(),
        addr: ([127, 0, 0, 1], port).into(),
        connections: 8,
        pipeline: 1,
        threads: 1,
        mix: parse_mix("get")?,
        keyspace: KEYSPACE,
        value_size,
        stop: Stop::Requests(1),
        warmup: None,
        prefill: true,
        auth: None,
        pids: Vec::new(),
        rate: None,
        key_offset,
        quiet: true,
        cluster,
        tls: None,
    };
    let rep = load::run(cfg).map_err(|e| format!("prefill {name}: {e}"))?;
    if rep.prefill_errors > 0 || rep.failed() {
        return Err(format!(
            "prefill {name} failed: {:?} {:?}",
            rep.prefill_first_error, rep.connection_errors
        ));
    }
    Ok(())
}

/// Runs cases against targets and collects the runs and failures.
struct Runner<'a> {
    settings: &'a Settings,
    /// The redis-servers, whose CPU every run reports (labels `redis*`).
    backends: Vec<PidSpec>,
    total: usize,
    done: usize,
    runs: Vec<RunRecord>,
    failures: Vec<String>,
}

impl<'a> Runner<'a> {
    /// A runner that will make `total` runs, reporting the CPU of `backends`, starting with
    /// `failures` already known.
    fn new(
        settings: &'a Settings,
        backends: &[procs::Server],
        total: usize,
        failures: Vec<String>,
    ) -> Self {
        Runner {
            settings,
            backends: backends
                .iter()
                .map(|r| PidSpec {
                    label: r.name.clone(),
                    pid: r.pid,
                })
                .collect(),
            total,
            done: 0,
            runs: Vec::new(),
            failures,
        }
    }

    /// Every case against every target that can run it (not in its `not_on`),
    /// `settings.reps` times: rep → case → target.
    fn run_interleaved(&mut self, cases: &[&Case], targets: &[Target], rate: Option<f64>) {
        for rep in 1..=self.settings.reps {
            for case in cases {
                for t in targets.iter().filter(|t| !case.not_on.contains(&t.name)) {
                    self.run_case(rep, case, t, rate);
                }
            }
        }
    }

    fn config(&self, case: &Case, t: &Target, rate: Option<f64>) -> Result<LoadConfig, String> {
        let mut pids = Vec::new();
        if let Some(pid) = t.proxy_pid {
            pids.push(PidSpec {
                label: "proxy".into(),
                pid,
            });
        }
        pids.extend(self.backends.iter().cloned());
        Ok(LoadConfig {
            target: format!("{} (127.0.0.1:{})", t.name, t.port),
            addr: ([127, 0, 0, 1], t.port).into(),
            connections: case.connections,
            pipeline: case.pipeline,
            threads: case.threads,
            mix: match case.workload {
                Workload::Mix => parse_mix(case.mix)?,
                // Stateful workloads make their own commands.
                _ => crate::mix::Mix {
                    entries: Vec::new(),
                },
            },
            keyspace: KEYSPACE,
            value_size: case.value_size,
            stop: Stop::Duration(Duration::from_secs_f64(self.settings.duration_s)),
            warmup: Some(Duration::from_secs_f64(self.settings.warmup_s)).filter(|w| !w.is_zero()),
            prefill: false,
            auth: None,
            pids,
            rate,
            key_offset: case.key_offset,
            quiet: true,
            cluster: t.cluster,
            tls: t.tls.clone(),
        })
    }

    fn run_case(&mut self, rep: usize, case: &Case, t: &Target, rate: Option<f64>) {
        self.done += 1;
        eprint!(
            "[{}/{}] rep {rep} {} {} ... ",
            self.done, self.total, case.label, t.name
        );
        // Worker and admin thread CPU of the two targets the stats-reader section compares.
        let threads = t
            .proxy_pid
            .filter(|_| {
                self.settings.stats_reader
                    && matches!(t.name, stats_reader::BASELINE | stats_reader::TARGET)
            })
            .map(stats_reader::ThreadCpu::start);
        let reader = t
            .stats_reader
            .map(|p| stats_reader::StatsReader::start(([127, 0, 0, 1], p).into()));
        let mut leased = None;
        let mut fan_out = None;
        let report = self.config(case, t, rate).and_then(|cfg| {
            if case.workload == Workload::Mix {
                return load::run(cfg).map_err(|e| e.to_string());
            }
            let admin = t.admin.map(|p| ([127, 0, 0, 1], p).into());
            if case.workload == Workload::PubSub {
                let (report, f) = pubsub::run(cfg, case, admin).map_err(|e| e.to_string())?;
                eprint!(
                    "[{:.0} published/s, {} window waits, {} order errors{}] ",
                    f.published_per_s,
                    f.window_waits,
                    f.order_errors(),
                    f.respite.map_or_else(String::new, |r| format!(
                        "; upstream cx {}, channels {}",
                        r.upstream_cx_active, r.upstream_channels
                    ))
                );
                fan_out = Some(f);
                return Ok(report);
            }
            let (report, l) = stateful::run(cfg, case, admin).map_err(|e| e.to_string())?;
            if let Some(l) = l {
                eprint!(
                    "[leased connects: {} in warm-up, {} measured; pool {}] ",
                    l.warmup, l.measured, l.pool_after
                );
            }
            leased = l;
            Ok(report)
        });
        let reader = reader.map(stats_reader::StatsReader::finish);
        if let Some(r) = reader {
            eprint!(
                "[{:.0} stats fetches/s, {} failed] ",
                r.fetches_per_s, r.errors
            );
        }
        match report {
            Ok(report) => {
                let m = Metrics::from_report(&report);
                let threads = threads.map(|c| c.finish(m.rps));
                eprintln!(
                    "{:.0} req/s, p99 {:.0} µs{}{}",
                    m.rps,
                    m.p99_us,
                    if m.noisy { ", noisy" } else { "" },
                    if report.failed() {
                        ", FAILED connections"
                    } else if report.errors > 0 {
                        ", FAILED: error replies"
                    } else {
                        ""
                    }
                );
                if report.failed() {
                    self.failures.push(format!(
                        "rep {rep} {} {}: {}",
                        case.id,
                        t.name,
                        report.connection_errors.first().map_or("", String::as_str)
                    ));
                } else if report.errors > 0 {
                    // Error replies are cheap and fast: counted as throughput they would make a
                    // broken target look good, so the run is reported as failed.
                    self.failures.push(format!(
                        "rep {rep} {} {}: {} error replies of {} (first: {})",
                        case.id,
                        t.name,
                        report.errors,
                        report.requests,
                        report.first_error.as_deref().unwrap_or("")
                    ));
                }
                self.runs.push(RunRecord {
                    rep,
                    case: case.id.to_string(),
                    group: case.group,
                    target: t.name.to_string(),
                    metrics: m,
                    report,
                    stats_fetches_per_s: reader.map(|r| r.fetches_per_s),
                    threads,
                    leased,
                    pubsub: fan_out,
                });
            }
            Err(e) => {
                eprintln!("failed: {e}");
                self.failures
                    .push(format!("rep {rep} {} {}: {e}", case.id, t.name));
            }
        }
    }

    /// Half of direct's median GET P1 rps so far, or of a calibration run if there is none.
    fn open_loop_rate(&mut self, direct: &Target) -> Result<f64, String> {
        let rps: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.case == "get-p1" && r.target == "direct")
            .map(|r| r.metrics.rps)
            .collect();
        let median = match metrics::median(&rps) {
            Some(m) => m,
            None => {
                eprintln!("calibrating the open-loop rate: GET P1 on direct...");
                let case = cases::all_cases()
                    .into_iter()
                    .find(|c| c.id == "get-p1")
                    .ok_or("internal: no get-p1 case")?;
                let r: Report = load::run(self.config(&case, direct, None)?)
                    .map_err(|e| format!("calibration run: {e}"))?;
                r.rps
            }
        };
        if median <= 0.0 {
            return Err(
                "Redis direct GET P1 made no requests; cannot set the open-loop rate".into(),
            );
        }
        Ok(median / 2.0)
    }
}

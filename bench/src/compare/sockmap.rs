//! `respite-bench compare --sockmap`: Client → Respite (1 worker) → Redis on loopback
//! with the eBPF sockmap accelerator on and off, in one run, interleaved (rep → case → arm, the
//! arm order reversed every other rep), plus Redis direct (over TCP) for scale.
//!
//! Why Respite restarts for every phase: sockmap ON only covers connections established while it
//! is on, and a connection that once went over TCP stays on TCP for life (docs/ebpf.md), while
//! Respite keeps its upstream connections pooled for its whole life. A Respite started in an OFF
//! phase would keep TCP upstream connections in the next ON phase (a half-accelerated "ON"), and
//! one started in an ON phase would fall back in the next OFF phase anyway. So each Respite phase
//! switches first, then starts a fresh Respite (fresh upstream connections) and opens fresh
//! client connections; Redis keeps running (its sockets are per accepted connection). Every
//! phase is checked against respite-control's counters (`GET /sockmap`): redirects must grow in
//! an ON phase and stay put otherwise, or the phase is reported invalid and left out.
//!
//! Everything (this process, so the load generator, Redis and Respite) runs in one cgroup v2,
//! the one respite-control attaches its sockops program to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cases::{Case, Group, KEYSPACE, Workload};
use super::metrics::{self, RunRecord, Summary};
use super::procs::{Fleet, free_port, hosts_toml, spawn, wait_ready};
use super::sockmap_ctl::{Counters, EnvOptions, SockmapEnv};
use super::table::{self, Layout, fmt_cpu, fmt_ratio, fmt_rps};
use super::{CompareArgs, Output, Runner, Setup, Target, prefill, setup, write_outputs};

/// Respite with the sockmap on (connections made while on).
pub const ON: &str = "respite+sockmap";
/// Respite over plain TCP (connections made while off): the baseline of the ratios.
pub const OFF: &str = "respite";
/// Redis direct, sockmap off.
pub const DIRECT: &str = "direct";

/// The cgroup everything runs in unless `--sockmap-cgroup` says otherwise.
pub const DEFAULT_CGROUP: &str = "/sys/fs/cgroup/unified/respite-bench";

/// The cases: GET at pipeline 1 with 1, 10 and 50 connections, and at pipeline 16 with 50.
pub fn all_cases() -> Vec<Case> {
    let case = |id, label, connections, pipeline| Case {
        id,
        label,
        group: Group::Main,
        mix: "get",
        connections,
        pipeline,
        value_size: 3,
        key_offset: 0,
        threads: 1,
        workload: Workload::Mix,
        not_on: &[],
    };
    vec![
        case("p1-c1", "GET P1 c=1", 1, 1),
        case("p1-c10", "GET P1 c=10", 10, 1),
        case("p1-c50", "GET P1 c=50", 50, 1),
        case("p16-c50", "GET P16 c=50", 50, 16),
    ]
}

/// `--cases` for this comparison: `all` or a comma list of [`all_cases`] ids.
fn select(list: Option<&str>) -> Result<Vec<Case>, String> {
    let all = all_cases();
    let Some(list) = list.filter(|l| *l != "all") else {
        return Ok(all);
    };
    let ids: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = ids.iter().find(|id| !all.iter().any(|c| c.id == **id)) {
        let known: Vec<&str> = all.iter().map(|c| c.id).collect();
        return Err(format!(
            "case `{bad}` is not available with --sockmap; known: {}",
            known.join(", ")
        ));
    }
    Ok(all.into_iter().filter(|c| ids.contains(&c.id)).collect())
}

/// The arms of one case in rep `rep` (1-based): ON first in odd reps, last in even ones, so
/// that neither arm always runs right after Redis direct or right after a switch.
pub fn arm_order(rep: usize) -> [&'static str; 3] {
    if rep % 2 == 1 {
        [ON, OFF, DIRECT]
    } else {
        [DIRECT, OFF, ON]
    }
}

/// Whether a phase's counters agree with its label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    /// The counters contradict the label (or could not be read); the run is left out.
    Invalid(String),
    /// TCP-only plumbing mode: no counters.
    Unchecked,
}

/// The verdict of a phase that ran with the sockmap `on` (or off) and saw `delta`.
pub fn verdict(on: bool, delta: Result<Counters, String>) -> Verdict {
    match delta {
        Err(e) => Verdict::Invalid(format!("counters unreadable: {e}")),
        Ok(d) if on && d.redirect_total == 0 => {
            Verdict::Invalid("sockmap on but no message was redirected".into())
        }
        Ok(d) if !on && d.redirect_total > 0 => Verdict::Invalid(format!(
            "sockmap off but {} messages were redirected",
            d.redirect_total
        )),
        Ok(_) => Verdict::Ok,
    }
}

/// One phase: a run of one case on one arm, and what the sockmap counters did meanwhile
/// (warm-up included).
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub rep: usize,
    pub case: String,
    pub target: String,
    /// The arm wants the sockmap on.
    pub sockmap_on: bool,
    /// respite-control showed the wanted state after the switch (`None`: no switch needed).
    pub state_confirmed: Option<bool>,
    pub before: Option<Counters>,
    pub after: Option<Counters>,
    /// `after - before`.
    pub delta: Option<Counters>,
    /// Measured requests of the run (0 if it failed).
    pub requests: u64,
    /// Redirected messages per request: the counters' change over the run and its warm-up,
    /// divided by the measured requests scaled up to the warm-up at the measured rate.
    pub redirects_per_request: Option<f64>,
    /// Whole-machine busy CPU (/proc/stat, everything running) µs per request.
    pub machine_busy_us_per_req: Option<f64>,
    pub verdict: Verdict,
}

/// Everything written to `<timestamp>-sockmap.json`.
#[derive(Debug, Serialize)]
struct SockmapOutput {
    #[serde(flatten)]
    base: Output,
    /// `sockmap`, or `tcp-only` for the plumbing check (both Respite arms over TCP).
    mode: &'static str,
    cgroup: Option<PathBuf>,
    phases: Vec<Phase>,
}

/// A Respite started for one phase.
struct PhaseRespite {
    child: Child,
    pid: u32,
}

/// What stays the same across phases: the Respite config and where it listens.
struct RespiteSpec<'a> {
    bin: &'a Path,
    config: PathBuf,
    socket: PathBuf,
    port: u16,
    admin: u16,
    dir: PathBuf,
}

impl RespiteSpec<'_> {
    /// Starts `respite --config F --control-socket S` (1 worker from the file, served at once),
    /// waits for PING, then for respite-control's re-push to the restarted data plane (it checks
    /// once a second) so that it does not land mid-run.
    fn start(&self) -> Result<PhaseRespite, String> {
        let mut cmd = std::process::Command::new(self.bin);
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--control-socket")
            .arg(&self.socket);
        let mut child = spawn(&mut cmd, "respite", &self.dir.join("respite.log"))?;
        if let Err(e) = wait_ready("respite", self.port, &mut child, &self.dir) {
            let _ = child.kill();
            let _ = child.wait();
            // The directory goes with the run: the reason must travel in the error.
            let log = std::fs::read_to_string(self.dir.join("respite.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines
                .get(lines.len().saturating_sub(5)..)
                .unwrap_or_default();
            return Err(format!("{e} (respite log: {})", tail.join(" | ")));
        }
        let pid = child.id();
        let admin = ([127, 0, 0, 1], self.admin).into();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pushed = respite_tools::admin_client::get(admin, "/stats").is_ok_and(|s| {
                s.lines().any(|l| {
                    l.split_once(": ").is_some_and(|(k, v)| {
                        k == "control_socket.push_accepted" && v.trim().parse().unwrap_or(0) > 0
                    })
                })
            });
            if pushed {
                break;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "  (respite-control has not re-pushed to the restarted respite within 5 s; \
                     measuring anyway)"
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(PhaseRespite { child, pid })
    }
}

impl Drop for PhaseRespite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The respite-control binary: `--respite-control-bin`, else next to this executable.
fn control_bin(args: &CompareArgs) -> Result<PathBuf, String> {
    let p = match &args.respite_control_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot locate this executable: {e}"))?
            .with_file_name("respite-control"),
    };
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "respite-control binary not found at {} (build it with `cargo build --release -p \
             respite-control` or pass --respite-control-bin)",
            p.display()
        ))
    }
}

/// Runs the comparison and writes `<UTC>-sockmap.{json,md}` and `latest-sockmap.*`.
pub(super) fn run(args: &CompareArgs) -> Result<(), String> {
    if args.redis_servers == 0 {
        return Err("--redis-servers must be >= 1".into());
    }
    let cases = select(args.cases.as_deref())?;
    let control = control_bin(args)?;
    let Setup {
        settings,
        out_dir,
        respite_bin,
        timestamp,
        machine,
    } = setup(args, args.redis_servers, 0)?;
    let tcp_only = args.sockmap_tcp_only;
    let cgroup = (!tcp_only).then(|| {
        args.sockmap_cgroup
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CGROUP))
    });

    let mut fleet = Fleet::new("respite-compare-sockmap")?;
    let dir = fleet.dir.clone();
    let redis_ports = (0..settings.redis_servers)
        .map(|_| free_port())
        .collect::<Result<Vec<u16>, String>>()?;
    let spec = RespiteSpec {
        bin: &respite_bin,
        config: dir.join("respite.toml"),
        socket: dir.join("respite.sock"),
        port: free_port()?,
        admin: free_port()?,
        dir: dir.clone(),
    };
    let toml = format!(
        "[admin]\naddress = \"127.0.0.1:{}\"\n[runtime]\nworkers = 1\n\
         [[listeners]]\nname = \"bench\"\naddress = \"127.0.0.1:{}\"\n\
         stat_prefix = \"bench\"\nop_timeout = \"5s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"backends\"\n\
         [[clusters]]\nname = \"backends\"\ntype = \"static\"\nhosts = {}\n",
        spec.admin,
        spec.port,
        hosts_toml(redis_ports.iter().copied())
    );
    std::fs::write(&spec.config, toml).map_err(|e| format!("{}: {e}", spec.config.display()))?;

    // Private bpffs outside the fleet directory: removing that directory must not walk a
    // mounted bpffs.
    let env_dir = std::env::temp_dir().join(format!("respite-bench-bpf.{}", std::process::id()));
    std::fs::create_dir_all(&env_dir).map_err(|e| format!("{}: {e}", env_dir.display()))?;
    eprintln!(
        "starting respite-control{}...",
        match &cgroup {
            Some(cg) => format!(" --sockmap (cgroup {})", cg.display()),
            None => " (TCP-only plumbing check: no sockmap)".into(),
        }
    );
    let env = SockmapEnv::start(&EnvOptions {
        control_bin: &control,
        config: &spec.config,
        dataplane: &spec.socket,
        cgroup: cgroup.as_deref(),
        dir: &dir,
        bpffs_dir: &env_dir,
    });
    let mut env = match env {
        Ok(e) => e,
        Err(e) => {
            fleet.remove();
            let _ = std::fs::remove_dir_all(&env_dir);
            return Err(e);
        }
    };
    // From here this process is in the cgroup: the servers it starts are too.
    let result = measure(&mut env, &mut fleet, &spec, &redis_ports, &cases, &settings);
    let (runs, failures, phases) = match result {
        Ok(r) => r,
        Err(e) => {
            let tail = env.log_tail();
            fleet.remove();
            drop(env);
            let _ = std::fs::remove_dir_all(&env_dir);
            return Err(format!("{e} (respite-control log: {tail})"));
        }
    };
    fleet.remove();
    drop(env);
    let _ = std::fs::remove_dir_all(&env_dir);

    // Runs with error replies, or whose phase contradicts its label, are left out of the medians.
    let invalid = |r: &RunRecord| {
        phases.iter().any(|p| {
            p.rep == r.rep
                && p.case == r.case
                && p.target == r.target
                && matches!(p.verdict, Verdict::Invalid(_))
        })
    };
    let ok: Vec<RunRecord> = runs
        .iter()
        .filter(|r| r.metrics.errors == 0 && !invalid(r))
        .cloned()
        .collect();
    let names: Vec<String> = [DIRECT, OFF, ON].map(String::from).to_vec();
    let medians = metrics::summarize(&ok, &cases, &names);
    let output = SockmapOutput {
        base: Output {
            timestamp: timestamp.clone(),
            machine,
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
        },
        mode: if tcp_only { "tcp-only" } else { "sockmap" },
        cgroup,
        phases,
    };
    let md = render(&output);
    write_outputs(
        &output,
        &output.base.failures,
        &out_dir,
        &timestamp,
        "-sockmap",
        &md,
        None,
    )
}

type Measured = (Vec<RunRecord>, Vec<String>, Vec<Phase>);

/// Starts the redis-servers, prefills them, and runs every phase.
fn measure(
    env: &mut SockmapEnv,
    fleet: &mut Fleet,
    spec: &RespiteSpec,
    redis_ports: &[u16],
    cases: &[Case],
    settings: &super::Settings,
) -> Result<Measured, String> {
    let mut redis = Vec::new();
    for (i, port) in redis_ports.iter().enumerate() {
        redis.push(fleet.redis(&format!("redis{}", i + 1), *port, &[])?);
    }
    for r in &redis {
        prefill(&r.name, r.port, false, 3, 0)?;
    }
    let checked = env.bpffs.is_some();
    let mut sockmap_on = true; // respite-control enables it at start
    let total = settings.reps * cases.len() * 3;
    let mut runner = Runner::new(settings, &redis, total, Vec::new());
    let mut phases = Vec::new();
    for rep in 1..=settings.reps {
        for case in cases {
            for arm in arm_order(rep) {
                let want_on = arm == ON;
                let state_confirmed = if checked && sockmap_on != want_on {
                    let ok = env.switch(want_on)?;
                    sockmap_on = want_on;
                    if !ok {
                        eprintln!(
                            "  (respite-control did not show the sockmap {} within the timeout)",
                            if want_on { "enabled" } else { "disabled" }
                        );
                    }
                    Some(ok)
                } else {
                    None
                };
                // A fresh Respite per phase: its upstream connections are made in this state.
                let respite = if arm == DIRECT {
                    None
                } else {
                    Some(spec.start()?)
                };
                let target = Target {
                    name: arm,
                    port: if arm == DIRECT {
                        redis[0].port
                    } else {
                        spec.port
                    },
                    proxy_pid: respite.as_ref().map(|r| r.pid),
                    cluster: false,
                    tls: None,
                    stats_reader: None,
                    admin: None,
                };
                let before = checked.then(|| env.status().map(|s| s.counters));
                let n_runs = runner.runs.len();
                runner.run_case(rep, case, &target, None);
                let after = checked.then(|| env.fresh_status().map(|s| s.counters));
                drop(respite);
                let run = runner.runs.get(n_runs);
                let requests = run.map_or(0, |r| r.report.requests);
                let machine_busy_us_per_req = run.and_then(|r| {
                    let busy = r.report.machine_busy_us?;
                    (r.report.requests > 0).then(|| busy as f64 / r.report.requests as f64)
                });
                let (before, after) = match (before, after) {
                    (Some(b), Some(a)) => (Some(b), Some(a)),
                    _ => (None, None),
                };
                let delta = match (&before, &after) {
                    (Some(Ok(b)), Some(Ok(a))) => Some(Ok(a.since(*b))),
                    (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e.clone())),
                    _ => None,
                };
                let v = match &delta {
                    None => Verdict::Unchecked,
                    Some(d) => verdict(want_on, d.clone()),
                };
                if let Verdict::Invalid(why) = &v {
                    eprintln!("  INVALID phase: {why}");
                    runner
                        .failures
                        .push(format!("rep {rep} {} {arm}: invalid phase: {why}", case.id));
                }
                let delta = delta.and_then(Result::ok);
                phases.push(Phase {
                    rep,
                    case: case.id.to_string(),
                    target: arm.to_string(),
                    sockmap_on: want_on,
                    state_confirmed,
                    before: before.and_then(Result::ok),
                    after: after.and_then(Result::ok),
                    delta,
                    requests,
                    redirects_per_request: delta
                        .filter(|_| requests > 0)
                        .map(|d| per_request(d.redirect_total, requests, settings)),
                    machine_busy_us_per_req,
                    verdict: v,
                });
            }
        }
    }
    let Runner { runs, failures, .. } = runner;
    Ok((runs, failures, phases))
}

/// `redirects` per request of a run that measured `requests`: the counters also saw the
/// warm-up, whose requests are not counted, so they are estimated at the measured rate.
pub fn per_request(redirects: u64, requests: u64, settings: &super::Settings) -> f64 {
    let scale = if settings.duration_s > 0.0 {
        1.0 + settings.warmup_s / settings.duration_s
    } else {
        1.0
    };
    redirects as f64 / (requests as f64 * scale)
}

/// Median over the phases of `case` × `target` of `f`.
fn phase_median(
    o: &SockmapOutput,
    case: &str,
    target: &str,
    f: fn(&Phase) -> Option<f64>,
) -> Option<f64> {
    let v: Vec<f64> = o
        .phases
        .iter()
        .filter(|p| {
            p.case == case && p.target == target && !matches!(p.verdict, Verdict::Invalid(_))
        })
        .filter_map(f)
        .collect();
    metrics::median(&v)
}

fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "–".into(), |n| fmt_rps(n as f64))
}

/// The Markdown report.
fn render(o: &SockmapOutput) -> String {
    let b = &o.base;
    let st = &b.settings;
    let mut s = String::new();
    let _ = writeln!(s, "# Respite with and without sockmap {}\n", b.timestamp);
    let _ = writeln!(s, "{}", table::machine_line(b));
    if o.mode == "tcp-only" {
        let _ = writeln!(
            s,
            "**TCP-ONLY PLUMBING CHECK (`--sockmap-tcp-only`): no eBPF was loaded; both Respite \
             arms ran over plain TCP, so `{ON}` is NOT accelerated here.**\n"
        );
    }
    let _ = writeln!(
        s,
        "Client → Respite (1 worker) → {} redis-server(s) on loopback, GET of 3-byte values over \
         {} keys. `{ON}`: sockmap on (`respite-control --sockmap --sockmap-upstreams`: client ↔ \
         Respite and Respite ↔ Redis both redirected); `{OFF}`: the kill switch off, plain TCP; \
         `{DIRECT}`: the load generator straight to the first redis-server over TCP, for scale. \
         Load generator, Respite and Redis all in cgroup `{}`. Every Respite phase switches the \
         sockmap first and then starts a fresh Respite, so that its pooled upstream connections \
         are made in that phase's state (a connection made while off stays on TCP for life), and \
         opens fresh client connections. Medians of {} rep(s) of {} s runs ({} s warm-up), \
         interleaved rep → case → arm (arm order reversed every other rep). Latency in µs; CPU \
         in µs per request: proxy = Respite (all threads), redis = all redis-servers, client = \
         the load generator, whole machine = the three; `machine busy` = /proc/stat busy time of \
         the whole machine (also respite-control, softirq threads, everything else). `*` = other \
         processes used more than {} core in k of n reps.\n",
        st.redis_servers,
        fmt_rps(KEYSPACE as f64),
        o.cgroup
            .as_ref()
            .map_or_else(|| "(none: TCP-only)".into(), |c| c.display().to_string()),
        st.reps,
        st.duration_s,
        st.warmup_s,
        st.noisy_threshold_cores
    );
    let rows: Vec<&Summary> = b.medians.iter().collect();
    let _ = writeln!(s, "## Results\n");
    if rows.is_empty() {
        let _ = writeln!(s, "No valid run.\n");
    } else {
        let layout = Layout {
            first: "case",
            baseline: OFF,
            client_cpu: true,
        };
        s.push_str(&table::table(&b.medians, &rows, &layout, &|x| {
            x.label.clone()
        }));
        s.push('\n');
    }
    let med = |case: &str, target: &str| {
        b.medians
            .iter()
            .find(|m| m.case == case && m.target == target)
    };
    let _ = writeln!(s, "## {ON} / {OFF}\n");
    let _ = writeln!(
        s,
        "| case | rps | p50 | p99 | respite CPU/req | redis CPU/req | whole-machine CPU/req | machine busy µs/req {OFF} | {ON} | ratio | redirects/req ({ON}, est.) |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for c in &b.cases {
        let (Some(on), Some(off)) = (med(c.id, ON), med(c.id, OFF)) else {
            continue;
        };
        let (a, z) = (&on.median, &off.median);
        let busy = |t| phase_median(o, c.id, t, |p| p.machine_busy_us_per_req);
        let redir = phase_median(o, c.id, ON, |p| p.redirects_per_request);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label,
            fmt_ratio(Some(a.rps), Some(z.rps)),
            fmt_ratio(Some(a.p50_us), Some(z.p50_us)),
            fmt_ratio(Some(a.p99_us), Some(z.p99_us)),
            fmt_ratio(a.proxy_cpu_us_per_req, z.proxy_cpu_us_per_req),
            fmt_ratio(a.redis_cpu_us_per_req, z.redis_cpu_us_per_req),
            fmt_ratio(a.machine_cpu_us_per_req, z.machine_cpu_us_per_req),
            fmt_cpu(busy(OFF)),
            fmt_cpu(busy(ON)),
            fmt_ratio(busy(ON), busy(OFF)),
            redir.map_or_else(|| "–".into(), |r| format!("{r:.2}")),
        );
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "## Phases (respite-control `GET /sockmap` counters, change over each run, warm-up \
         included; redirects/req divides by the measured requests scaled up to the warm-up; \
         `sockets in map after` is read once the clients have closed, while Respite still holds \
         its upstream connections: both ends of each (2 per redis-server) are there when the \
         Respite → Redis hop was redirected too)\n"
    );
    let _ = writeln!(
        s,
        "| rep | case | arm | state confirmed | redirects | redirect_fail | inserts | insert_fail | sockets in map after | measured requests | redirects/req (est.) | verdict |"
    );
    let _ = writeln!(s, "|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|");
    for p in &o.phases {
        let d = p.delta;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.rep,
            p.case,
            p.target,
            match p.state_confirmed {
                None => "(no switch)",
                Some(true) => "yes",
                Some(false) => "NO",
            },
            count(d.map(|d| d.redirect_total)),
            count(d.map(|d| d.redirect_fail)),
            count(d.map(|d| d.inserts)),
            count(d.map(|d| d.insert_fail)),
            count(d.map(|d| d.sockets)),
            fmt_rps(p.requests as f64),
            p.redirects_per_request
                .map_or_else(|| "–".into(), |r| format!("{r:.2}")),
            match &p.verdict {
                Verdict::Ok => "ok".to_string(),
                Verdict::Unchecked => "unchecked (TCP-only)".to_string(),
                Verdict::Invalid(why) => format!("**INVALID**: {why}"),
            },
        );
    }
    s.push('\n');
    s.push_str(&table::failures(b));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_selection() {
        let ids = |l| select(l).unwrap().iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(None), ["p1-c1", "p1-c10", "p1-c50", "p16-c50"]);
        assert_eq!(ids(Some("all")).len(), 4);
        assert_eq!(ids(Some("p16-c50, p1-c1")), ["p1-c1", "p16-c50"]);
        assert!(select(Some("get-p1")).is_err());
        let c = &all_cases()[3];
        assert_eq!((c.connections, c.pipeline), (50, 16));
    }

    #[test]
    fn arms_alternate() {
        assert_eq!(arm_order(1), [ON, OFF, DIRECT]);
        assert_eq!(arm_order(2), [DIRECT, OFF, ON]);
        assert_eq!(arm_order(3), arm_order(1));
    }

    #[test]
    fn redirects_per_request_counts_the_warmup() {
        let st = super::super::Settings {
            reps: 3,
            duration_s: 2.0,
            warmup_s: 0.5,
            quick: false,
            redis_servers: 1,
            memory_connections: 0,
            blocked_clients: 0,
            pubsub_memory_subscribers: 0,
            keyspace: KEYSPACE,
            client_threads: "1",
            noisy_threshold_cores: 0.1,
            cluster: false,
            tls: false,
            stats_reader: false,
            baseline_bin: None,
        };
        // 2 s measured + 0.5 s warm-up: 1 000 measured requests stand for 1 250.
        assert!((per_request(5_000, 1_000, &st) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn verdicts() {
        let d = |redirects| {
            Ok(Counters {
                redirect_total: redirects,
                ..Counters::default()
            })
        };
        assert_eq!(verdict(true, d(500)), Verdict::Ok);
        assert_eq!(verdict(false, d(0)), Verdict::Ok);
        assert!(matches!(verdict(true, d(0)), Verdict::Invalid(w) if w.contains("no message")));
        assert!(matches!(verdict(false, d(7)), Verdict::Invalid(w) if w.contains("7 messages")));
        assert!(
            matches!(verdict(true, Err("gone".into())), Verdict::Invalid(w) if w.contains("gone"))
        );
    }
}

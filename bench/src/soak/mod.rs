//! `respite-bench soak`: Respite over three persistent redis-servers (`appendonly yes`,
//! `appendfsync always`, so an acknowledged write survives a backend restart) under mixed
//! pipelined load (`load.rs`) and connection churn (`churn.rs`), while the config is rewritten
//! and reloaded with SIGHUP every `--reload-every` and a backend is restarted (SIGTERM, then
//! started again on its port and data directory) every `--restart-every`. INCRs on ledger keys
//! are accounted (`ledger.rs`) and checked against Redis at the end; Respite's RSS and open
//! descriptors are sampled throughout. PASS needs no lost acknowledged write, no panic, Respite
//! alive, its idle RSS at the end within max(16 MiB, 20 %) of its RSS after the warm-up and its
//! descriptors back within a few of the warm-up count. Reports: `<UTC>-soak.{json,md}`.

mod churn;
mod ledger;
mod load;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::compare::procs::{hosts_toml, raise_nofile};
use crate::compare::sysstat::{self, MachineInfo, rss_kib};
use crate::fleet::{self, Backend, Proxy};
use churn::Churn;
use ledger::Ledger;
use load::{Load, LoadSpec};
use report::{Check, Health, Memory, Reloads, Restart, Sample, Settings, SoakReport};

/// Redis persistence of the backends: every write in the AOF before it is acknowledged.
const PERSISTENCE: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--save",
    "",
];
/// Descriptors the end may hold above the warm-up (upstream connections re-opened after a
/// restart, a log file rotated, the admin connection of the last stats read).
const FD_TOLERANCE: usize = 8;
/// The RSS the end may be above the warm-up: max(16 MiB, 20 %).
fn rss_tolerance_kib(warm: u64) -> u64 {
    (16 * 1024).max(warm / 5)
}

/// `respite-bench soak` flags.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Load time (the warm-up included; the settle comes after).
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Load before the reference RSS and fd sample [default: duration / 8, between 3 s and 60 s].
    #[arg(long, value_parser = humantime::parse_duration)]
    warmup: Option<Duration>,
    /// Idle time after the load before the final sample.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// Rewrite the config (toggling `big_value_bytes`) and send SIGHUP this often.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    reload_every: Duration,
    /// Restart one backend (in turn) this often.
    #[arg(long, default_value = "45s", value_parser = humantime::parse_duration)]
    restart_every: Duration,
    /// Sample Respite's RSS and fds this often.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    sample_every: Duration,
    /// Load connections (one thread each).
    #[arg(long, default_value_t = 6)]
    connections: usize,
    /// Requests per pipeline.
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    /// SET value size, bytes.
    #[arg(long, default_value_t = 128)]
    value_size: usize,
    /// Ledger keys (INCR only).
    #[arg(long, default_value_t = 64)]
    ledger_keys: usize,
    /// Short-lived connections opened per second.
    #[arg(long, default_value_t = 20)]
    churn_per_sec: u32,
    /// Respite's worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The respite binary [default: `respite` next to this executable].
    #[arg(long, value_name = "PATH")]
    respite_bin: Option<PathBuf>,
    /// Output directory [default: bench/results under the workspace root].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Entry point: the exit code is non-zero on FAIL or when the soak could not run.
pub fn main(args: SoakArgs) -> ExitCode {
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("respite-bench soak: {e}");
            ExitCode::from(2)
        }
    }
}

/// The respite binary and the output directory the flags name, checked.
pub fn resolve_paths(
    bin: Option<&PathBuf>,
    out: Option<&PathBuf>,
) -> Result<(PathBuf, PathBuf), String> {
    let bin = match bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot locate this executable: {e}"))?
            .with_file_name("respite"),
    };
    if !bin.exists() {
        return Err(format!(
            "respite binary not found at {} (build it with `cargo build --release --workspace \
             --bins` or pass --respite-bin)",
            bin.display()
        ));
    }
    let out = match out {
        Some(o) => o.clone(),
        None => crate::compare::workspace_root()
            .ok_or("cannot find the workspace root; pass --out DIR")?
            .join("bench/results"),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok((bin, out))
}

/// The Respite config of the soak; `big` is the toggled `big_value_bytes`.
fn config(port: u16, admin: u16, workers: usize, hosts: &str, big: u64) -> String {
    format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = {workers}\n\
         drain_timeout = \"5s\"\n[[listeners]]\nname = \"soak\"\naddress = \"127.0.0.1:{port}\"\n\
         op_timeout = \"2s\"\nbig_value_bytes = {big}\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"backends\"\n\
         [[clusters]]\nname = \"backends\"\nhosts = {hosts}\n"
    )
}

/// Periodic events on the soak's clock.
struct Every {
    period: Duration,
    next: Duration,
}

impl Every {
    fn new(period: Duration) -> Every {
        Every {
            period,
            next: period,
        }
    }

    /// Whether the event is due at `t` (and schedules the next one).
    fn due(&mut self, t: Duration) -> bool {
        if self.period.is_zero() || t < self.next {
            return false;
        }
        self.next += self.period;
        true
    }
}

fn run(args: &SoakArgs) -> Result<bool, String> {
    if args.duration.is_zero() || args.connections == 0 || args.pipeline == 0 {
        return Err("--duration, --connections and --pipeline must be > 0".into());
    }
    if args.ledger_keys == 0 {
        return Err("--ledger-keys must be > 0".into());
    }
    let (bin, out) = resolve_paths(args.respite_bin.as_ref(), args.out.as_ref())?;
    let warmup = args
        .warmup
        .unwrap_or_else(|| {
            (args.duration / 8).clamp(Duration::from_secs(3), Duration::from_secs(60))
        })
        .min(args.duration);
    raise_nofile()?;
    let timestamp = sysstat::utc_timestamp();
    let machine = MachineInfo::collect(crate::compare::workspace_root().as_deref());
    let dir = std::env::temp_dir().join(format!("respite-soak.{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    eprintln!(
        "soak: starting 3 redis-servers (AOF, appendfsync always) and respite; files in {}",
        dir.display()
    );
    let mut backends = (1..=3)
        .map(|i| Backend::start(&dir, &format!("redis{i}"), &PERSISTENCE))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = hosts_toml(backends.iter().map(|b| b.port));
    let workers = args.workers.max(1);
    let mut proxy = Proxy::start(&bin, &dir, |p, a| config(p, a, workers, &hosts, 0))?;
    let pid = proxy.pid();
    let admin_port = proxy.admin.port();

    let (names, per_backend) = pick_ledger_keys(&backends, proxy.port, args.ledger_keys)?;
    let ledger = Arc::new(Ledger::new(names));
    let spec = LoadSpec {
        port: proxy.port,
        connections: args.connections,
        pipeline: args.pipeline,
        value_size: args.value_size,
    };
    eprintln!(
        "soak: {:?} of load ({:?} warm-up), reload every {:?}, backend restart every {:?}",
        args.duration, warmup, args.reload_every, args.restart_every
    );
    let load = Load::start(&spec, ledger.clone());
    let churn = Churn::start(proxy.port, args.churn_per_sec);
    let t0 = Instant::now();

    let mut samples: Vec<Sample> = Vec::new();
    let mut warm: Option<(u64, usize)> = None;
    let mut reloads = Reloads::default();
    let mut restarts: Vec<Restart> = Vec::new();
    let (mut sample, mut reload, mut restart) = (
        Every::new(args.sample_every),
        Every::new(args.reload_every),
        Every::new(args.restart_every),
    );
    let mut big = 0u64;
    let mut next_backend = 0usize;
    let mut died_at: Option<f64> = None;
    loop {
        let t = t0.elapsed();
        if t >= args.duration {
            break;
        }
        if !proxy.alive() {
            died_at = Some(t.as_secs_f64());
            eprintln!("soak: respite exited after {:.1} s", t.as_secs_f64());
            break;
        }
        if sample.due(t) {
            let phase = if t < warmup { "warmup" } else { "load" };
            if let Some(s) = take_sample(pid, t, phase) {
                if warm.is_none() && t >= warmup {
                    warm = Some((s.rss_kib, s.fds));
                }
                samples.push(s);
            }
        }
        if reload.due(t) {
            // A harmless listener value that changes the config, so each SIGHUP applies a new one.
            big = if big == 0 { 1 << 30 } else { 0 };
            match proxy.reload(&config(proxy.port, admin_port, workers, &hosts, big)) {
                Ok(()) => reloads.sent += 1,
                Err(e) => eprintln!("soak: reload: {e}"),
            }
        }
        if restart.due(t) {
            let b = &mut backends[next_backend % 3];
            next_backend += 1;
            restarts.push(restart_backend(b, t));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let load_result = load.finish();
    let churn_result = churn.finish();
    let load_end = t0.elapsed();
    eprintln!(
        "soak: load stopped after {:.1} s; settling {:?}",
        load_end.as_secs_f64(),
        args.settle
    );
    // Samples through the settle; the last is the end figure.
    let settle_end = Instant::now() + args.settle;
    while Instant::now() < settle_end {
        std::thread::sleep(Duration::from_secs(1).min(args.settle));
        if let Some(s) = take_sample(pid, t0.elapsed(), "settle") {
            samples.push(s);
        }
    }
    let end = take_sample(pid, t0.elapsed(), "settle");
    if let Some(s) = end.clone() {
        samples.push(s);
    }
    // No warm-up sample (a run shorter than its warm-up, or respite died): the first one.
    let warm = warm.or_else(|| samples.first().map(|s| (s.rss_kib, s.fds)));

    // A backend whose restart failed gets one more try: the ledger needs every one of them.
    for b in backends.iter_mut().filter(|b| b.pid().is_none()) {
        b.spawn()?;
    }
    // The ledger, read straight from every backend (a key lives on one of them).
    let values = read_ledger(&backends, &ledger)?;
    let mut ledger_result = ledger.check(&values);
    ledger_result.keys_per_backend = per_backend;
    reloads.applied = proxy.log_count("config reloaded");
    reloads.rejected = proxy.log_count("config reload rejected");
    let alive = proxy.alive();
    let panics = proxy.log_count("panicked");

    let (warm_rss, warm_fds) = warm.unwrap_or_default();
    let (end_rss, end_fds) = end.as_ref().map_or((0, 0), |s| (s.rss_kib, s.fds));
    let memory = Memory {
        warm_rss_kib: warm_rss,
        end_rss_kib: end_rss,
        peak_rss_kib: samples.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        rss_tolerance_kib: rss_tolerance_kib(warm_rss),
        warm_fds,
        end_fds,
        peak_fds: samples.iter().map(|s| s.fds).max().unwrap_or(0),
        fd_tolerance: FD_TOLERANCE,
    };
    let failed_restarts: Vec<&Restart> = restarts.iter().filter(|r| r.error.is_some()).collect();
    let checks = vec![
        Check {
            name: "no lost acknowledged writes",
            pass: ledger_result.lost == 0 && ledger_result.unexplained == 0,
            detail: format!(
                "{} acknowledged INCRs, {} unknown, final sum {}: lost {}, unexplained {}",
                ledger_result.acknowledged,
                ledger_result.unknown,
                ledger_result.value_sum,
                ledger_result.lost,
                ledger_result.unexplained
            ),
        },
        Check {
            name: "ledger exercised",
            pass: ledger_result.acknowledged > 0,
            detail: format!("{} acknowledged INCRs", ledger_result.acknowledged),
        },
        Check {
            name: "respite alive",
            pass: alive && died_at.is_none(),
            detail: died_at.map_or_else(
                || "running at the end".into(),
                |t| format!("exited after {t:.1} s"),
            ),
        },
        Check {
            name: "no panics",
            pass: panics == 0,
            detail: format!("{panics} `panicked` lines in {}", proxy.log.display()),
        },
        Check {
            name: "RSS back after the load",
            pass: end.is_some() && end_rss <= warm_rss + memory.rss_tolerance_kib,
            detail: format!(
                "{end_rss} KiB at the end vs {warm_rss} KiB after warm-up (tolerance +{} KiB)",
                memory.rss_tolerance_kib
            ),
        },
        Check {
            name: "fds back after the load",
            pass: end.is_some() && end_fds <= warm_fds + FD_TOLERANCE,
            detail: format!(
                "{end_fds} at the end vs {warm_fds} after warm-up (tolerance +{FD_TOLERANCE})"
            ),
        },
        Check {
            name: "every reload applied",
            pass: reloads.rejected == 0 && reloads.applied as u64 == reloads.sent,
            detail: format!(
                "{} sent, {} applied, {} rejected",
                reloads.sent, reloads.applied, reloads.rejected
            ),
        },
        Check {
            name: "every backend restart came back",
            pass: failed_restarts.is_empty(),
            detail: format!(
                "{} restarts, {} failed",
                restarts.len(),
                failed_restarts.len()
            ),
        },
    ];
    let pass = checks.iter().all(|c| c.pass);
    let report = SoakReport {
        timestamp: timestamp.clone(),
        machine,
        settings: Settings {
            duration_s: args.duration.as_secs_f64(),
            warmup_s: warmup.as_secs_f64(),
            settle_s: args.settle.as_secs_f64(),
            reload_every_s: args.reload_every.as_secs_f64(),
            restart_every_s: args.restart_every.as_secs_f64(),
            sample_every_s: args.sample_every.as_secs_f64(),
            connections: args.connections,
            pipeline: args.pipeline,
            value_size: args.value_size,
            ledger_keys: args.ledger_keys,
            churn_per_sec: args.churn_per_sec,
            workers,
            backends: backends.len(),
            backend_persistence: "appendonly yes, appendfsync always",
        },
        verdict: if pass { "PASS" } else { "FAIL" },
        checks,
        ledger: ledger_result,
        load: load_result,
        churn: churn_result,
        reloads,
        restarts,
        respite: Health {
            alive,
            panics,
            log: if pass {
                String::new()
            } else {
                std::fs::read_to_string(&proxy.log).unwrap_or_default()
            },
        },
        memory,
        samples,
    };
    proxy.stop();
    drop(backends);
    let json = out.join(format!("{timestamp}-soak.json"));
    let md = out.join(format!("{timestamp}-soak.md"));
    let body = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&json, body).map_err(|e| format!("{}: {e}", json.display()))?;
    std::fs::write(&md, report.markdown()).map_err(|e| format!("{}: {e}", md.display()))?;
    print!("{}", report.summary());
    println!("reports: {} and {}", json.display(), md.display());
    if pass {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("logs and data kept in {}", dir.display());
    }
    Ok(pass)
}

/// Respite's RSS and fd count now, if /proc can still be read.
fn take_sample(pid: u32, t: Duration, phase: &'static str) -> Option<Sample> {
    Some(Sample {
        t_s: t.as_secs_f64(),
        phase,
        rss_kib: rss_kib(pid).ok()?,
        fds: fleet::fd_count(pid).ok()?,
    })
}

/// SIGTERM, wait for the exit, start again on the same port and data directory.
fn restart_backend(b: &mut Backend, t: Duration) -> Restart {
    let start = Instant::now();
    let mut r = Restart {
        t_s: t.as_secs_f64(),
        backend: b.name.clone(),
        down_ms: 0,
        clean_exit: false,
        error: None,
    };
    match b.stop() {
        Ok(clean) => r.clean_exit = clean,
        Err(e) => r.error = Some(e),
    }
    // A second try covers a port not yet released by the old process.
    let mut started = b.spawn();
    if started.is_err() {
        std::thread::sleep(Duration::from_millis(500));
        started = b.spawn();
    }
    if let Err(e) = started {
        r.error = Some(e);
    }
    r.down_ms = start.elapsed().as_millis() as u64;
    eprintln!(
        "soak: restarted {} at {:.1} s (down {} ms)",
        r.backend, r.t_s, r.down_ms
    );
    r
}

/// `keys` ledger key names, as evenly spread over the backends as the placement allows (so
/// that every restart hits some): candidates are created through Respite with `INCRBY k 0`
/// (value 0, nothing to account) and kept while their backend has fewer than its share.
/// Returns the names and how many each backend holds.
fn pick_ledger_keys(
    backends: &[Backend],
    port: u16,
    keys: usize,
) -> Result<(Vec<String>, Vec<usize>), String> {
    let mut via = fleet::Direct::connect(port)?;
    let mut direct = backends
        .iter()
        .map(Backend::connect)
        .collect::<Result<Vec<_>, _>>()?;
    let share = keys.div_ceil(backends.len().max(1));
    let mut names = Vec::with_capacity(keys);
    let mut per_backend = vec![0usize; backends.len()];
    for n in 0..keys * 50 {
        if names.len() == keys {
            break;
        }
        let name = Ledger::candidate(n);
        let r = via.cmd(&[b"INCRBY", name.as_bytes(), b"0"])?;
        if fleet::integer(&r).is_none() {
            return Err(format!("INCRBY {name} 0: {}", String::from_utf8_lossy(&r)));
        }
        for (i, d) in direct.iter_mut().enumerate() {
            if d.cmd(&[b"EXISTS", name.as_bytes()])? == b":1\r\n" {
                if per_backend.get(i).is_some_and(|c| *c < share) {
                    per_backend[i] += 1;
                    names.push(name.clone());
                }
                break;
            }
        }
    }
    if names.len() < keys {
        return Err(format!(
            "only {} of {keys} ledger keys could be spread over the backends",
            names.len()
        ));
    }
    Ok((names, per_backend))
}

/// Every ledger key's value: the sum over backends of its integer (missing = 0).
fn read_ledger(backends: &[Backend], ledger: &Ledger) -> Result<Vec<i64>, String> {
    let keys = ledger.len();
    let mut values = vec![0i64; keys];
    for b in backends {
        let mut c = b.connect().map_err(|e| format!("{}: {e}", b.name))?;
        for (i, v) in values.iter_mut().enumerate() {
            let reply = c
                .cmd(&[b"GET", ledger.name(i).as_bytes()])
                .map_err(|e| format!("{}: {e}", b.name))?;
            if let Some(n) =
                fleet::bulk(&reply).and_then(|x| std::str::from_utf8(x).ok()?.parse::<i64>().ok())
            {
                *v += n;
            }
        }
    }
    Ok(values)
}

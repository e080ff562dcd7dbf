//! `respite-bench attack`: hostile clients, measured. One value of `--value-size` is stored on a
//! backend; `--clients` connections each pipeline `--requests` `GET` of it and never read
//! (`attackers.rs`) for `--attack-for`, while one probe client per backend GETs a small key at
//! a steady rate (`probe.rs`) and Respite's RSS and every backend's memory are sampled
//! (`sampler.rs`, which also stops the attack if a backend's RSS passes
//! `--backend-rss-cap-mib`). The attackers close, and after `--settle` Respite's RSS is
//! compared with its idle baseline. Then `--large-clients` SETs of `--large-mib` MiB run at once
//! (`large.rs`) while the probes keep measuring. Respite's `evicted_clients` and
//! `client_output_buffer_limit_disconnections` come from its admin `/stats`. Reports:
//! `<UTC>-attack.{json,md}`; the exit code is non-zero when Respite died or panicked.

mod attackers;
mod large;
mod probe;
mod report;
mod sampler;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use crate::compare::procs::{hosts_toml, raise_nofile};
use crate::compare::sysstat::{self, MachineInfo, rss_kib};
use crate::fleet::{Backend, Direct, Proxy};
use attackers::Attackers;
use probe::Probe;
use report::{AttackReport, BackendMemory, Large, RespiteRss, Settings};
use sampler::{BackendSample, MemSample, Sampler};

/// The attacked key.
const BIG: &str = "attack:big";
/// Idle time before the attack (the baseline and the probes' idle figures).
const IDLE: Duration = Duration::from_secs(2);

/// The hard guard: a backend past 1.5 × `--backend-rss-cap-mib` is SIGKILLed and started again
/// empty. Stopping the attack is not always enough: the requests Respite already forwarded are
/// still being answered into Redis's output buffer (seen growing from 4 to 7 GiB after the
/// attackers closed), and the machine is shared.
fn enforce_hard_cap(backends: &mut [Backend], cap_mib: u64, t0: Instant, killed: &mut Vec<String>) {
    let hard_kib = (cap_mib + cap_mib / 2) << 10;
    for b in backends.iter_mut() {
        let Some(kib) = b.pid().and_then(|p| rss_kib(p).ok()) else {
            continue;
        };
        if kib > hard_kib {
            let at = t0.elapsed().as_secs_f64();
            let outcome = match b.kill_and_restart() {
                Ok(()) => "back".to_string(),
                Err(e) => e,
            };
            let msg = format!(
                "{} RSS {} MiB passed 1.5 × the cap at {at:.1} s: killed and restarted empty \
                 ({outcome})",
                b.name,
                kib >> 10,
            );
            eprintln!("attack: guard: {msg}");
            killed.push(msg);
        }
    }
}

/// Sleeps `d` while enforcing the hard cap every 100 ms.
fn guarded_sleep(
    d: Duration,
    backends: &mut [Backend],
    cap_mib: u64,
    t0: Instant,
    killed: &mut Vec<String>,
) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        enforce_hard_cap(backends, cap_mib, t0, killed);
        std::thread::sleep(
            Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
        );
    }
}

/// `respite-bench attack` flags.
#[derive(Args, Debug, Clone)]
pub struct AttackArgs {
    /// Size of the value the attackers GET, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    value_size: usize,
    /// Attacking connections.
    #[arg(long, default_value_t = 2000)]
    clients: usize,
    /// `GET big` requests each attacker pipelines.
    #[arg(long, default_value_t = 10_000)]
    requests: usize,
    /// How long the attackers stay connected.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    attack_for: Duration,
    /// Wait after closing the attackers before Respite's RSS is compared with its baseline.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// Clients SETting a large value at once in the large phase (0 skips it).
    #[arg(long, default_value_t = 4)]
    large_clients: usize,
    /// Size of each large value, MiB (at most 512: Redis's proto-max-bulk-len).
    #[arg(long, default_value_t = 512)]
    large_mib: u64,
    /// Stop the attack when a backend's RSS passes this, MiB.
    #[arg(long, default_value_t = 6144)]
    backend_rss_cap_mib: u64,
    /// Time between two GETs of each probe client.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    probe_interval: Duration,
    /// Time between memory samples.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    sample_every: Duration,
    /// Respite's worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Respite's `runtime.maxmemory_clients`, bytes [default: Respite's].
    #[arg(long, value_name = "BYTES")]
    maxmemory_clients: Option<u64>,
    /// Respite's `client_output_buffer_limit.hard_limit`, bytes [default: Respite's].
    #[arg(long, value_name = "BYTES")]
    output_buffer_hard_limit: Option<u64>,
    /// The respite binary [default: `respite` next to this executable].
    #[arg(long, value_name = "PATH")]
    respite_bin: Option<PathBuf>,
    /// Output directory [default: bench/results under the workspace root].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Entry point.
pub fn main(args: AttackArgs) -> ExitCode {
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("respite-bench attack: {e}");
            ExitCode::from(2)
        }
    }
}

/// Respite's config: defaults everywhere but what the flags set.
fn config(port: u16, admin: u16, args: &AttackArgs, hosts: &str) -> String {
    let mut s = format!(
        "[admin]\naddress = \"127.0.0.1:{admin}\"\n[runtime]\nworkers = {}\n",
        args.workers.max(1)
    );
    if let Some(m) = args.maxmemory_clients {
        s.push_str(&format!("maxmemory_clients = {m}\n"));
    }
    s.push_str(&format!(
        "[[listeners]]\nname = \"attack\"\naddress = \"127.0.0.1:{port}\"\nop_timeout = \"5s\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"backends\"\n"
    ));
    if let Some(h) = args.output_buffer_hard_limit {
        s.push_str(&format!(
            "[listeners.client_output_buffer_limit]\nhard_limit = {h}\n"
        ));
    }
    s.push_str(&format!(
        "[[clusters]]\nname = \"backends\"\nhosts = {hosts}\n"
    ));
    s
}

/// Index of the backend holding `key` (EXISTS on each, directly).
fn owner(backends: &[Backend], key: &str) -> Result<usize, String> {
    for (i, b) in backends.iter().enumerate() {
        if b.connect()?.cmd(&[b"EXISTS", key.as_bytes()])? == b":1\r\n" {
            return Ok(i);
        }
    }
    Err(format!("{key} is on no backend"))
}

/// SETs `key` to `value` through Respite, checking the `+OK`.
fn set(respite: &mut Direct, key: &str, value: &[u8]) -> Result<(), String> {
    let r = respite.cmd(&[b"SET", key.as_bytes(), value])?;
    if r == b"+OK\r\n" {
        Ok(())
    } else {
        Err(format!("SET {key}: {}", String::from_utf8_lossy(&r)))
    }
}

/// Peak of `f` over the samples whose time lies in [`from`, `to`).
fn peak(samples: &[MemSample], from: f64, to: f64, f: impl Fn(&MemSample) -> u64) -> u64 {
    samples
        .iter()
        .filter(|s| s.t_s >= from && s.t_s < to)
        .map(f)
        .max()
        .unwrap_or(0)
}

/// Peak of `f` over a backend's answers in [`from`, `to`).
fn backend_peak(
    samples: &[BackendSample],
    from: f64,
    to: f64,
    f: impl Fn(&BackendSample) -> u64,
) -> u64 {
    samples
        .iter()
        .filter(|s| s.t_s >= from && s.t_s < to)
        .map(f)
        .max()
        .unwrap_or(0)
}

fn run(args: &AttackArgs) -> Result<bool, String> {
    if args.clients == 0 || args.requests == 0 || args.value_size == 0 {
        return Err("--clients, --requests and --value-size must be > 0".into());
    }
    if args.large_mib > 512 {
        return Err("--large-mib: at most 512 (Redis's proto-max-bulk-len)".into());
    }
    let (bin, out) = crate::soak::resolve_paths(args.respite_bin.as_ref(), args.out.as_ref())?;
    let nofile = raise_nofile()?;
    if args.clients as u64 + 500 > nofile {
        return Err(format!(
            "RLIMIT_NOFILE hard limit is {nofile}, too low for {} clients (ulimit -Hn)",
            args.clients
        ));
    }
    let timestamp = sysstat::utc_timestamp();
    let machine = MachineInfo::collect(crate::compare::workspace_root().as_deref());
    let dir = std::env::temp_dir().join(format!("respite-attack.{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!(
        "attack: starting 3 redis-servers and respite; files in {}",
        dir.display()
    );
    let no_persistence = ["--save", "", "--appendonly", "no"];
    let mut backends = (1..=3)
        .map(|i| Backend::start(&dir, &format!("redis{i}"), &no_persistence))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = hosts_toml(backends.iter().map(|b| b.port));
    let mut proxy = Proxy::start(&bin, &dir, |p, a| config(p, a, args, &hosts))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], proxy.port));
    let pid = proxy.pid();

    // The big value, and one small probe key on each backend.
    let mut c = Direct::connect(proxy.port)?;
    set(&mut c, BIG, &vec![b'b'; args.value_size])?;
    let big_backend = backends
        .get(owner(&backends, BIG)?)
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let mut probe_keys: Vec<Option<String>> = vec![None; backends.len()];
    for n in 0..10_000 {
        if probe_keys.iter().all(Option::is_some) {
            break;
        }
        let key = format!("attack:probe:{n}");
        set(&mut c, &key, b"probe-value")?;
        let i = owner(&backends, &key)?;
        if let Some(slot @ None) = probe_keys.get_mut(i) {
            *slot = Some(key);
        }
    }
    drop(c);

    let t0 = Instant::now();
    let sampler = Sampler::start(
        pid,
        backends.iter().map(|b| b.name.clone()).collect(),
        backends.iter().map(|b| b.port).collect(),
        backends.iter().filter_map(Backend::pid).collect(),
        args.sample_every,
        args.backend_rss_cap_mib << 20,
        t0,
    );
    let probes: Vec<Probe> = backends
        .iter()
        .zip(&probe_keys)
        .filter_map(|(b, k)| {
            let k = k.clone()?;
            Some(Probe::start(
                &b.name,
                addr,
                k,
                b"probe-value".to_vec(),
                args.probe_interval,
                t0,
            ))
        })
        .collect();
    std::thread::sleep(IDLE);
    let idle_rss = rss_kib(pid)?;

    // The attack.
    sampler.set_phase(1);
    let attack_start = t0.elapsed().as_secs_f64();
    eprintln!(
        "attack: {} clients × {} GET {BIG} ({} B) for {:?}",
        args.clients, args.requests, args.value_size, args.attack_for
    );
    let request = crate::resp::command(&[b"GET", BIG.as_bytes()]);
    let attackers = Attackers::start(addr, args.clients, request, args.requests);
    let started = Instant::now();
    let mut guard = None;
    let mut killed = Vec::new();
    while started.elapsed() < args.attack_for {
        enforce_hard_cap(&mut backends, args.backend_rss_cap_mib, t0, &mut killed);
        if let Some(g) = sampler.tripped() {
            guard = Some(g);
            break;
        }
        if !proxy.alive() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let attack_s = started.elapsed().as_secs_f64();
    let attacker_result = attackers.finish();
    let attack_end = t0.elapsed().as_secs_f64();

    // The settle.
    sampler.set_phase(2);
    eprintln!("attack: attackers closed; settling {:?}", args.settle);
    guarded_sleep(
        args.settle,
        &mut backends,
        args.backend_rss_cap_mib,
        t0,
        &mut killed,
    );
    let after_settle = rss_kib(pid).unwrap_or(0);
    let settle_end = t0.elapsed().as_secs_f64();
    let stats = proxy
        .listener_stats(&[
            "evicted_clients",
            "client_output_buffer_limit_disconnections",
            "downstream_cx_active",
        ])
        .unwrap_or_else(|e| {
            eprintln!("attack: /stats: {e}");
            vec![-1, -1, -1]
        });

    // The large SETs.
    let mut large = Large {
        respite_rss_before_kib: rss_kib(pid).unwrap_or(0),
        ..Large::default()
    };
    let large_start = t0.elapsed().as_secs_f64();
    // Per backend index: peak (used_memory, RSS) during the large SETs, watched here.
    let mut large_peaks: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
    if args.large_clients > 0 && proxy.alive() {
        sampler.set_phase(3);
        eprintln!(
            "attack: {} concurrent SETs of {} MiB",
            args.large_clients, args.large_mib
        );
        let (clients, mib) = (args.large_clients, args.large_mib);
        let sets = std::thread::spawn(move || large::run(addr, clients, mib));
        // The phase can be shorter than the sampler's period: watch it closely here, from /proc
        // (INFO of a busy backend can take seconds; its used_memory comes from the sampler).
        let pids: Vec<Option<u32>> = backends.iter().map(Backend::pid).collect();
        while !sets.is_finished() {
            enforce_hard_cap(&mut backends, args.backend_rss_cap_mib, t0, &mut killed);
            large.respite_rss_peak_kib = large.respite_rss_peak_kib.max(rss_kib(pid).unwrap_or(0));
            for (i, p) in pids.iter().enumerate() {
                if let Some(kib) = p.and_then(|p| rss_kib(p).ok()) {
                    let e = large_peaks.entry(i).or_insert((0, 0));
                    e.1 = e.1.max(kib << 10);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        large.sets = sets.join().unwrap_or_default();
        // Give the backends their memory back before the next phase.
        if let Ok(mut c) = Direct::connect(proxy.port) {
            for i in 0..args.large_clients {
                let _ = c.cmd(&[b"DEL", large::key(i).as_bytes()]);
            }
        }
    }
    let large_end = t0.elapsed().as_secs_f64();
    sampler.set_phase(4);
    guarded_sleep(
        args.settle.min(Duration::from_secs(5)),
        &mut backends,
        args.backend_rss_cap_mib,
        t0,
        &mut killed,
    );
    large.respite_rss_after_kib = rss_kib(pid).unwrap_or(0);

    let probe_samples: Vec<(String, Vec<probe::ProbeSample>)> =
        probes.into_iter().map(Probe::finish).collect();
    let (samples, series) = sampler.finish();
    let end = t0.elapsed().as_secs_f64();
    large.respite_rss_peak_kib =
        large
            .respite_rss_peak_kib
            .max(peak(&samples, large_start, large_end, |s| {
                s.respite_rss_kib
            }));
    let phases = [
        ("idle", 0.0, attack_start),
        ("attack", attack_start, attack_end),
        ("settle", attack_end, settle_end),
        ("large", large_start, large_end),
        ("after", large_end, end + 1.0),
    ];
    let mut probe_stats = Vec::new();
    for (backend, s) in &probe_samples {
        for (phase, from, to) in phases {
            if to > from {
                probe_stats.push(probe::stats(backend, phase, s, from, to));
            }
        }
    }
    let backend_memory = backends
        .iter()
        .zip(&series)
        .enumerate()
        .map(|(i, (b, ser))| {
            let idle = ser.samples.iter().rev().find(|s| s.t_s < attack_start);
            let during =
                |from, to, f: fn(&BackendSample) -> u64| backend_peak(&ser.samples, from, to, f);
            let large = large_peaks.get(&i).copied().unwrap_or_default();
            BackendMemory {
                name: b.name.clone(),
                idle_used: idle.map_or(0, |s| s.used),
                idle_rss: idle.map_or(0, |s| s.rss),
                peak_used_attack: during(attack_start, attack_end, |s| s.used),
                peak_rss_attack: during(attack_start, attack_end, |s| s.rss).max(peak(
                    &samples,
                    attack_start,
                    attack_end,
                    |s| s.backend_proc_rss_kib.get(i).copied().unwrap_or(0) << 10,
                )),
                peak_used_large: during(large_start, large_end, |s| s.used).max(large.0),
                peak_rss_large: during(large_start, large_end, |s| s.rss).max(large.1),
                info_failures: ser.info_failures,
                slowest_info_ms: ser.samples.iter().map(|s| s.info_ms).max().unwrap_or(0),
            }
        })
        .collect();
    let alive = proxy.alive();
    let panics = proxy.log_count("panicked");
    let stat = |i: usize| stats.get(i).copied().unwrap_or(-1);
    let report = AttackReport {
        timestamp: timestamp.clone(),
        machine,
        settings: Settings {
            value_size: args.value_size,
            clients: args.clients,
            requests: args.requests,
            attack_for_s: args.attack_for.as_secs_f64(),
            settle_s: args.settle.as_secs_f64(),
            large_clients: args.large_clients,
            large_mib: args.large_mib,
            backend_rss_cap_mib: args.backend_rss_cap_mib,
            probe_interval_ms: args.probe_interval.as_secs_f64() * 1000.0,
            workers: args.workers.max(1),
            maxmemory_clients: args.maxmemory_clients,
            output_buffer_hard_limit: args.output_buffer_hard_limit,
        },
        respite_healthy: alive && panics == 0,
        respite_alive: alive,
        respite_panics: panics,
        big_backend,
        attackers: attacker_result,
        attack_s,
        guard,
        killed_backends: killed,
        evicted_clients: stat(0),
        client_output_buffer_limit_disconnections: stat(1),
        downstream_cx_active_after_settle: stat(2),
        respite_rss: RespiteRss {
            idle_kib: idle_rss,
            peak_attack_kib: peak(&samples, attack_start, attack_end, |s| s.respite_rss_kib),
            after_settle_kib: after_settle,
            after_settle_minus_idle_kib: after_settle as i64 - idle_rss as i64,
        },
        backends: backend_memory,
        large,
        probes: probe_stats,
        samples,
        backend_series: series,
    };
    proxy.stop();
    drop(backends);
    let json = out.join(format!("{timestamp}-attack.json"));
    let md = out.join(format!("{timestamp}-attack.md"));
    let body = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&json, body).map_err(|e| format!("{}: {e}", json.display()))?;
    std::fs::write(&md, report.markdown()).map_err(|e| format!("{}: {e}", md.display()))?;
    print!("{}", report.summary());
    println!("reports: {} and {}", json.display(), md.display());
    if report.respite_healthy {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("logs kept in {}", dir.display());
    }
    Ok(report.respite_healthy)
}

//! `respite-control`: feeds the Respite data plane from a TOML file, an Envoy bootstrap file, a
//! twemproxy nutcracker.yml or a live xDS management server (see the crate docs and the README "Config sources").

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use respite_control::admin::{self, AdminState};
use respite_control::apply::{Applier, BeforePush, Options};
use respite_control::sockmap::{self, Accelerator};
use respite_control::source::{bootstrap, envoy_file, twemproxy};
use respite_control::translate;
use respite_control::xds::{self, status::Status};

#[derive(Parser)]
#[command(
    name = "respite-control",
    version,
    about = "Respite's control process: config from a TOML file, an Envoy bootstrap, or xDS (ADS), pushed to the data plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Print the Respite TOML config an Envoy bootstrap's static_resources or a twemproxy
    /// nutcracker.yml translate to, and exit (0, or 2 with the error).
    Translate {
        #[command(flatten)]
        file: TranslateSource,
    },
    /// The sockmap kill switch and counters, working on the pinned maps directly (so it works
    /// even when the control process is stuck): `off` stops accelerating new connections at
    /// once (accelerated ones keep the redirect until they close) and the running
    /// respite-control detaches the programs; `on` accelerates connections made afterwards;
    /// `status` prints the counters.
    Sockmap {
        #[arg(value_enum)]
        action: SockmapAction,
        /// The bpf file system holding the pins (`<bpffs>/respite/`).
        #[arg(long, value_name = "PATH", default_value = sockmap::DEFAULT_BPFFS)]
        bpffs: PathBuf,
    },
}

/// The file `translate` reads: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct TranslateSource {
    /// Envoy bootstrap, YAML or JSON.
    #[arg(long, value_name = "FILE")]
    envoy_config: Option<PathBuf>,
    /// twemproxy (nutcracker) config, YAML; notes on keys taken without effect head the output.
    #[arg(long, value_name = "FILE")]
    twemproxy_config: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SockmapAction {
    Off,
    On,
    Status,
}

/// `--sockmap` and its settings (docs/ebpf.md).
#[derive(Args)]
struct SockmapArgs {
    /// Load the eBPF sockmap programs that carry loopback traffic of Respite's listeners
    /// socket-to-socket in the kernel (after a self-test); needs root or CAP_BPF + CAP_NET_ADMIN
    /// (+ CAP_SYS_ADMIN to mount bpffs). Without them it logs why and runs on without.
    #[arg(long)]
    sockmap: bool,
    /// The cgroup v2 whose processes are covered (created if missing). Default: the cgroup v2
    /// root, i.e. every process on the node (the port filter decides).
    #[arg(long, value_name = "PATH")]
    sockmap_cgroup: Option<PathBuf>,
    /// Extra ports for the filter besides the listeners' (e.g. local Redis): `6379,7000-7005`.
    #[arg(long, value_name = "LIST")]
    sockmap_ports: Option<String>,
    /// Also accelerate Respite's hop to upstream hosts on loopback (their ports join the filter).
    #[arg(long)]
    sockmap_upstreams: bool,
    /// The bpf file system for the pinned maps; mounted there if it is not. Default
    /// /sys/fs/bpf.
    #[arg(long, value_name = "PATH")]
    bpffs: Option<PathBuf>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    sockmap: SockmapArgs,
    /// The data plane's control socket (`respite --control-socket`). Without it, configs are
    /// validated and shown at /config_dump but not pushed (a dry run).
    #[arg(long, value_name = "SOCKET")]
    dataplane: Option<PathBuf>,
    /// Admin HTTP address (/config_dump, /xds).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9902")]
    admin: SocketAddr,
    /// Log filter (tracing directive); RUST_LOG wins.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    log_level: String,
}

/// Where config comes from: one of these, else GRPC_XDS_BOOTSTRAP / GRPC_XDS_BOOTSTRAP_CONFIG.
#[derive(Args)]
#[group(multiple = false)]
struct Source {
    /// A Respite TOML config (the data plane's format); re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// An Envoy bootstrap (YAML/JSON): its static_resources redis_proxy listeners and clusters;
    /// re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    envoy_config: Option<PathBuf>,
    /// A twemproxy (nutcracker) config, YAML: every pool becomes a listener and a cluster
    /// (README "Config sources"); re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    twemproxy_config: Option<PathBuf>,
    /// A gRPC xDS bootstrap (JSON): run the xDS client against its management server. Without
    /// any of the three, GRPC_XDS_BOOTSTRAP (a path) or GRPC_XDS_BOOTSTRAP_CONFIG (the JSON) is
    /// read. SIGHUP pushes the applied config to the data plane again.
    #[arg(long, value_name = "FILE")]
    bootstrap: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cli.run.log_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Some(Command::Translate { file }) => {
            let (path, kind) = match (file.envoy_config, file.twemproxy_config) {
                (Some(p), _) => (p, FileKind::Envoy),
                (None, Some(p)) => (p, FileKind::Twemproxy),
                // clap's group requires one.
                (None, None) => return ExitCode::from(2),
            };
            translate_file(&path, kind).map(|(text, _)| print!("{text}"))
        }
        Some(Command::Sockmap { action, bpffs }) => sockmap_command(action, &bpffs),
        None => run(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respite-control: {e}");
            ExitCode::from(2)
        }
    }
}

/// What a config file is.
#[derive(Clone, Copy, PartialEq)]
enum FileKind {
    /// Respite TOML, used as is.
    Respite,
    /// An Envoy bootstrap.
    Envoy,
    /// A twemproxy nutcracker.yml.
    Twemproxy,
}

/// An Envoy bootstrap or nutcracker.yml → Respite TOML text (a nutcracker.yml's notes are also
/// logged, one warning each), and the files the config was read from besides `path` (an Envoy
/// bootstrap's `dynamic_resources` files), to re-read when they change.
fn translate_file(path: &Path, kind: FileKind) -> Result<(String, Vec<PathBuf>), String> {
    if kind == FileKind::Twemproxy {
        let t = twemproxy::load(path)?;
        for n in &t.notes {
            tracing::warn!(file = %path.display(), "{n}");
        }
        return Ok((t.toml, Vec::new()));
    }
    let resources = envoy_file::load(path)?;
    let toml = translate::static_config_in_zone(
        &resources.listeners,
        &resources.clusters,
        resources.local_zone.as_deref(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let files = [resources.xds_files.lds, resources.xds_files.cds];
    Ok((toml, files.into_iter().flatten().collect()))
}

/// The bootstrap to use: `--bootstrap`, else `GRPC_XDS_BOOTSTRAP` (a path), else
/// `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON itself) — gRFC A27 and gRPC C-core's precedence.
fn load_bootstrap(path: Option<&Path>) -> Result<Option<bootstrap::Bootstrap>, String> {
    let (json, origin) = if let Some(p) = path {
        (read(p)?, p.display().to_string())
    } else if let Some(p) = std::env::var_os("GRPC_XDS_BOOTSTRAP") {
        let p = PathBuf::from(p);
        (read(&p)?, format!("GRPC_XDS_BOOTSTRAP={}", p.display()))
    } else if let Ok(inline) = std::env::var("GRPC_XDS_BOOTSTRAP_CONFIG") {
        (inline, "GRPC_XDS_BOOTSTRAP_CONFIG".to_string())
    } else {
        return Ok(None);
    };
    bootstrap::parse(&json)
        .map(Some)
        .map_err(|e| format!("{origin}: {e}"))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `respite-control sockmap off|on|status`.
fn sockmap_command(action: SockmapAction, bpffs: &Path) -> Result<(), String> {
    use respite_ebpf::Settings as _;
    use std::io::Write as _;
    let mut pinned = respite_ebpf::Pinned::open(bpffs)?;
    // A closed stdout (`| head`) is not an error worth a panic.
    let mut out = std::io::stdout();
    match action {
        SockmapAction::Off => {
            pinned.set_enabled(false)?;
            let _ = writeln!(
                out,
                "sockmap off: new connections are not accelerated from now on; accelerated ones keep the redirect until they close (restart Respite to end them); the running respite-control detaches the programs within a second"
            );
        }
        SockmapAction::On => {
            pinned.set_enabled(true)?;
            let _ = writeln!(
                out,
                "sockmap on: connections made from now on are redirected (once the running respite-control has attached the programs, within a second)"
            );
        }
        SockmapAction::Status => {
            let c = pinned.counters()?;
            let ports: Vec<String> = pinned.ports()?.iter().map(u16::to_string).collect();
            let _ = writeln!(
                out,
                "enabled {}\n{c}\nports {}",
                u8::from(pinned.enabled()?),
                ports.join(",")
            );
        }
    }
    Ok(())
}

/// `--sockmap` flags over the `[sockmap]` table of the `--config` file (read once, at start) →
/// the accelerator's options; None when neither enables it.
fn sockmap_options(
    args: &SockmapArgs,
    config_file: Option<&Path>,
) -> Result<Option<sockmap::Options>, String> {
    // A file that does not parse is reported by the first apply; here it just has no table.
    let table = config_file
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| respite::config::parse_pushed(&text, "").ok())
        .map(|c| c.sockmap)
        .unwrap_or_default();
    if !args.sockmap && !table.enabled {
        return Ok(None);
    }
    let extra_ports = match &args.sockmap_ports {
        Some(list) => respite::config::parse_port_list(list)
            .map_err(|e| format!("--sockmap-ports {list:?}: {e}"))?,
        None => table.ports,
    };
    Ok(Some(sockmap::Options {
        cgroup: args.sockmap_cgroup.clone().or(table.cgroup),
        extra_ports,
        upstreams: args.sockmap_upstreams || table.upstreams,
        bpffs: args
            .bpffs
            .clone()
            .or(table.bpffs)
            .unwrap_or_else(|| PathBuf::from(sockmap::DEFAULT_BPFFS)),
    }))
}

fn run(args: RunArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let sockmap_options = sockmap_options(&args.sockmap, args.source.config.as_deref())?;
    runtime.block_on(async move {
        let status = Status::default();
        let accelerator = match sockmap_options {
            Some(o) => tokio::task::spawn_blocking(move || Accelerator::start(o))
                .await
                .ok(),
            None => None,
        };
        let dataplane = args.dataplane.clone();
        let result = run_source(args, status, accelerator.clone()).await;
        if let Some(a) = accelerator {
            a.shutdown();
            // So the data plane's `sockmap.enabled` does not keep saying 1.
            if let Some(socket) = dataplane
                && let Err(e) = respite_control::push::push_stats(&socket, &a.tick(None))
            {
                tracing::debug!(error = %e, "sockmap: final stats not pushed");
            }
        }
        result
    })
}

async fn run_source(
    args: RunArgs,
    status: Status,
    accelerator: Option<Accelerator>,
) -> Result<(), String> {
    {
        let s = &args.source;
        let file = s
            .config
            .clone()
            .map(|p| (p, FileKind::Respite))
            .or(s.envoy_config.clone().map(|p| (p, FileKind::Envoy)))
            .or(s.twemproxy_config.clone().map(|p| (p, FileKind::Twemproxy)));
        if let Some((path, kind)) = file {
            let applier = Applier::new(
                Options {
                    dataplane: args.dataplane.clone(),
                    listener_names: Vec::new(),
                    warming_timeout: Duration::ZERO,
                    before_push: before_push(&accelerator),
                    local_zone: None,
                },
                status.clone(),
            );
            serve_admin(args.admin, &applier, &status, &accelerator)?;
            spawn_ticker(&applier, accelerator, args.dataplane.clone());
            return run_file(&path, kind, &applier).await;
        }
        let Some(b) = load_bootstrap(args.source.bootstrap.as_deref())? else {
            return Err(
                "no config source: give --config, --envoy-config, --twemproxy-config or --bootstrap (or set \
                        GRPC_XDS_BOOTSTRAP / GRPC_XDS_BOOTSTRAP_CONFIG)"
                    .into(),
            );
        };
        if args.dataplane.is_none() {
            tracing::warn!("no --dataplane: configs are validated but not pushed (dry run)");
        }
        let applier = Applier::new(
            Options {
                dataplane: args.dataplane.clone(),
                listener_names: b.listener_names.clone(),
                warming_timeout: b.warming_timeout,
                before_push: before_push(&accelerator),
                local_zone: b
                    .node
                    .locality
                    .as_ref()
                    .map(|l| l.zone.clone())
                    .filter(|z| !z.is_empty()),
            },
            status.clone(),
        );
        serve_admin(args.admin, &applier, &status, &accelerator)?;
        spawn_ticker(&applier, accelerator, args.dataplane.clone());
        let hup_applier = applier.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: pushing the applied config again");
                let a = hup_applier.clone();
                let _ = tokio::task::spawn_blocking(move || a.repush()).await;
            }
        });
        tracing::info!(server = %b.server.server_uri, delta = b.server.delta, "xDS client starting");
        tokio::select! {
            r = xds::run(b, applier, status) => r,
            r = shutdown() => r,
        }
    }
}

/// The sockmap filter takes each config's ports before the data plane connects anywhere under it.
fn before_push(accelerator: &Option<Accelerator>) -> Option<BeforePush> {
    let a = accelerator.clone()?;
    Some(BeforePush(std::sync::Arc::new(
        move |c: &respite::config::Config| a.prepare(c),
    )))
}

/// Once a second: retry a push an unreachable data plane missed, re-push to a restarted one,
/// apply listeners whose warming time is up; with sockmap, follow its switch, keep its filter on
/// the applied config's ports and push its counters to the data plane's stats.
fn spawn_ticker(applier: &Applier, accelerator: Option<Accelerator>, dataplane: Option<PathBuf>) {
    let ticker = applier.clone();
    tokio::spawn(async move {
        loop {
            let t = ticker.clone();
            let a = accelerator.clone();
            let d = dataplane.clone();
            let _ = tokio::task::spawn_blocking(move || {
                t.tick();
                if let Some(a) = a {
                    let stats = a.tick(t.applied().as_deref());
                    if let Some(socket) = d
                        && let Err(e) = respite_control::push::push_stats(&socket, &stats)
                    {
                        tracing::debug!(error = %e, "sockmap: stats not pushed");
                    }
                }
            })
            .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

fn serve_admin(
    address: SocketAddr,
    applier: &Applier,
    status: &Status,
    accelerator: &Option<Accelerator>,
) -> Result<(), String> {
    let bound = admin::spawn(
        address,
        AdminState {
            applier: applier.clone(),
            status: status.clone(),
            sockmap: accelerator.clone(),
        },
    )?;
    tracing::info!(admin = %bound, "admin listening");
    Ok(())
}

/// Applies a file source, then re-applies it on every SIGHUP, and when a file an Envoy
/// bootstrap's `dynamic_resources` names changes (its modification time, size or inode,
/// checked every second: Envoy's filesystem subscription reacts to a move into place, this
/// also to a write in place), until SIGTERM/SIGINT. A start-up failure is fatal; a reload
/// failure keeps the running config.
async fn run_file(path: &Path, kind: FileKind, applier: &Applier) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let load = |path: &Path| -> Result<Vec<PathBuf>, String> {
        let (text, watched) = match kind {
            FileKind::Respite => (read(path)?, Vec::new()),
            _ => translate_file(path, kind)?,
        };
        applier
            .apply_static(&text, &path.display().to_string())
            .map_err(|e| e.to_string())?;
        Ok(watched)
    };
    let mut watched = load(path)?;
    let mut seen = stamps(&watched);
    tracing::info!(file = %path.display(), "config applied");
    let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("SIGHUP: {e}"))?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let why = tokio::select! {
            _ = hup.recv() => "SIGHUP",
            _ = tick.tick() => {
                let now = stamps(&watched);
                if now == seen {
                    continue;
                }
                seen = now;
                "a dynamic_resources file changed"
            }
            r = shutdown() => return r,
        };
        match load(path) {
            Ok(w) => {
                tracing::info!(file = %path.display(), why, "config re-applied");
                if w != watched {
                    watched = w;
                    seen = stamps(&watched);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, why, "reload rejected; keeping the running config")
            }
        }
    }
}

/// What tells a file changed: (modification time, size, inode) each, `None` while unreadable.
fn stamps(files: &[PathBuf]) -> Vec<Option<(std::time::SystemTime, u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        })
        .collect()
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown() -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    tracing::info!("stopping");
    Ok(())
}

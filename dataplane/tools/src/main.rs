//! `respite`: the data-plane binary. It runs the proxy (`respite::engine`) and carries the
//! operator subcommands of this crate (`top`, `migrate`, `drain`) and `check-config`.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use respite::admin::LogControl;
use respite::config::LogFormat;
use respite_tools::drain;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, fmt, reload};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Respite: a thread-per-core io_uring Redis proxy (sharding, Envoy redis_proxy semantics,
/// twemproxy-compatible ketama).
#[derive(Parser)]
#[command(
    name = "respite",
    version,
    about = "Respite: a thread-per-core io_uring Redis (RESP) proxy",
    long_about = None,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// TOML config file to run with (see deploy/examples/respite.toml).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Unix socket (created mode 0600) on which respite-control pushes configs (`POST /config`,
    /// TOML) and the admin endpoints answer too. Without --config, start with no listeners and
    /// no clusters (admin on --admin, default 127.0.0.1:9901) and wait for a push.
    #[arg(long, value_name = "PATH")]
    control_socket: Option<PathBuf>,
    /// Admin endpoint address of a process started with --control-socket and no --config (a
    /// config file's `[admin]` says it otherwise; a pushed `[admin]` is ignored). Port 0 = any.
    #[arg(
        long,
        value_name = "ADDR",
        requires = "control_socket",
        conflicts_with = "config"
    )]
    admin: Option<SocketAddr>,
    /// Replace a running respite without downtime (docs/hot-restart.md): listener addresses it
    /// listens on are shared with it (`SO_REUSEPORT`) until it drains, and its admin address is
    /// taken once it lets go of it. Without this flag an address another process listens on is
    /// an error. Nothing running: starts as usual.
    #[arg(long)]
    hot_restart: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a config file: exit 0 if it loads, 2 with the error (file:line:col: key: reason).
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
    },
    /// Tell a running respite to drain and exit (hot restart, docs/hot-restart.md): it stops
    /// accepting, answers the requests it has read, closes its connections and exits 0. Exit 0
    /// once the request is accepted; 1 with the reason when nothing answers.
    #[command(group(clap::ArgGroup::new("target").required(true)))]
    Drain {
        /// POST /drain_listeners to the admin address of this config file.
        #[arg(long, value_name = "FILE", group = "target")]
        config: Option<PathBuf>,
        /// POST /drain_listeners to this admin address (host:port).
        #[arg(long, value_name = "ADDR", group = "target")]
        admin: Option<SocketAddr>,
        /// Send SIGTERM to this process.
        #[arg(long, value_name = "PID", group = "target")]
        pid: Option<i32>,
        /// Also wait until the process has exited.
        #[arg(long)]
        wait: bool,
    },
    /// Live terminal view of a running respite's admin endpoint: req/s, errors and p50/p99 per
    /// command and per upstream host (docs/observability.md).
    Top(respite_tools::top::TopArgs),
    /// Migration tools: `verify` compares a source deployment with a target key by key,
    /// `copy` copies keys with DUMP/RESTORE (docs/migration.md).
    Migrate(respite_tools::migrate::MigrateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Drain {
            config,
            admin,
            pid,
            wait,
        }) => {
            let target = match (config, admin, pid) {
                (_, _, Some(pid)) => drain::Target::Pid(pid),
                (Some(file), _, None) => drain::Target::Config(file),
                (None, Some(addr), None) => drain::Target::Admin(addr),
                (None, None, None) => {
                    eprintln!("respite drain: one of --config, --admin, --pid is required");
                    return ExitCode::FAILURE;
                }
            };
            match drain::run(target, wait) {
                Ok(msg) => {
                    println!("{msg}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("respite drain: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Top(args)) => respite_tools::top::main(&args),
        Some(Command::Migrate(args)) => respite_tools::migrate::main(&args),
        Some(Command::CheckConfig { file }) => match respite::config::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        None => {
            let config = match (&cli.config, &cli.control_socket) {
                (Some(path), _) => respite::config::load(path),
                // Started empty: everything comes from pushes (zero listeners is valid there).
                (None, Some(_)) => respite::config::parse_pushed("", "empty config"),
                (None, None) => {
                    eprintln!(
                        "respite: --config FILE or --control-socket PATH is required (or see \
                         `respite --help`)"
                    );
                    return ExitCode::from(2);
                }
            };
            let config = match config {
                Ok(mut c) => {
                    if let Some(admin) = cli.admin {
                        c.admin.address = admin;
                    }
                    c
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let log = init_logging(
                config.runtime.log_level.as_deref(),
                config.runtime.log_format,
            );
            if let Err(e) = respite::net::disable_transparent_huge_pages() {
                tracing::warn!(error = %e, "transparent huge pages stay on for this process");
            }
            match respite::engine::run(
                config,
                cli.config,
                Some(log),
                cli.control_socket,
                cli.hot_restart,
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("respite: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Installs the process's log subscriber and returns its `/logging` control.
///
/// The filter: `RUST_LOG` wins over the config's `runtime.log_level`; the default is `info`. It
/// sits in a `reload` layer, so the admin `/logging?level=` can replace it while the process
/// runs. The format: `runtime.log_format` (`text`: human-readable lines; `json`: one JSON object
/// per line, tracing-subscriber's JSON formatter, for log shippers).
fn init_logging(level: Option<&str>, format: LogFormat) -> LogControl {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = match format {
        // Colour codes only for a terminal: journald and log files get plain text.
        LogFormat::Text => fmt::layer()
            .with_target(false)
            .with_ansi(std::io::stdout().is_terminal())
            .boxed(),
        LogFormat::Json => fmt::layer().json().with_target(false).boxed(),
    };
    // rustls reports what peers do (alerts, refused renegotiations) through `log`, one line per
    // event and at WARN: any client could flood the log. Respite logs each failed handshake
    // itself, rate-limited, so rustls's own lines are never shown.
    let quiet = Targets::new()
        .with_target("rustls", LevelFilter::OFF)
        .with_default(LevelFilter::TRACE);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt.with_filter(quiet))
        .init();
    let reader = handle.clone();
    LogControl::new(
        move |directive| {
            let filter = EnvFilter::try_new(directive).map_err(|e| e.to_string())?;
            handle.reload(filter).map_err(|e| e.to_string())
        },
        move || {
            reader
                .with_current(|f| f.to_string())
                .unwrap_or_else(|e| format!("<unknown: {e}>"))
        },
    )
}

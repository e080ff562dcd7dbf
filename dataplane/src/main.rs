//! `respite`: the data-plane binary.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use respite::admin::LogControl;
use respite::config::LogFormat;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, fmt, reload};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Respite: a thread-per-core io_uring Redis proxy (sharding, Envoy redis_proxy semantics,
/// twemproxy-compatible ketama).
#[derive(Parser)]
#[command(version, about, long_about = None, args_conflicts_with_subcommands = true)]
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
    Top(respite::top::TopArgs),
    /// Migration tools: `verify` compares a source deployment with a target key by key,
    /// `copy` copies keys with DUMP/RESTORE (docs/migration.md).
    Migrate(respite::migrate::MigrateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Drain {
            config,
            admin,
            pid,
            wait,
        }) => match drain(config, admin, pid, wait) {
            Ok(msg) => {
                println!("{msg}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("respite drain: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Top(args)) => respite::top::main(&args),
        Some(Command::Migrate(args)) => respite::migrate::main(&args),
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
            match respite::engine::run(config, cli.config, Some(log), cli.control_socket) {
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

/// `respite drain`: asks the process (by pid, or through its admin endpoint) to drain; with
/// `wait`, returns once it is gone. Errors name what did not answer.
fn drain(
    config: Option<PathBuf>,
    admin: Option<SocketAddr>,
    pid: Option<i32>,
    wait: bool,
) -> Result<String, String> {
    let (pid, what) = match (config, admin, pid) {
        (_, _, Some(pid)) => {
            // A mistyped pid must not SIGTERM some other program (or init).
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map_err(|e| format!("pid {pid}: {e}"))?;
            let is_respite = exe
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("respite"));
            if !is_respite || pid <= 1 {
                return Err(format!(
                    "pid {pid} is {}, not a respite process; nothing sent",
                    exe.display()
                ));
            }
            // SAFETY: kill(2) has no memory effects.
            if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("SIGTERM to pid {pid}: {e}"));
            }
            (pid, format!("sent SIGTERM to pid {pid}"))
        }
        (Some(file), _, None) => {
            let config = respite::config::load(&file).map_err(|e| e.to_string())?;
            post_drain(config.admin.address)?
        }
        (None, Some(addr), None) => post_drain(addr)?,
        (None, None, None) => return Err("one of --config, --admin, --pid is required".into()),
    };
    if !wait {
        return Ok(what);
    }
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("{what}; pid {pid} exited"))
}

/// True while `pid` exists and has not exited (a zombie waiting for its parent has exited).
fn alive(pid: i32) -> bool {
    // Signal 0 only checks existence: ESRCH once the process is gone.
    // SAFETY: kill(2) has no memory effects.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name, which may itself hold ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    state != Some('Z')
}

/// `POST /drain_listeners` to the admin endpoint at `addr` (loopback if `addr` is unspecified):
/// the pid it reported and a message.
fn post_drain(mut addr: SocketAddr) -> Result<(i32, String), String> {
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("nothing answers on admin address {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let request = format!(
        "POST {} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n",
        respite::admin::DRAIN_PATH
    );
    let mut response = String::new();
    s.write_all(request.as_bytes())
        .and_then(|()| s.read_to_string(&mut response))
        .map_err(|e| format!("admin address {addr}: {e}"))?;
    let status = response.split_whitespace().nth(1).unwrap_or("");
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .trim();
    if status != "200" {
        return Err(format!(
            "admin address {addr} answered {status}: {body} (is it respite?)"
        ));
    }
    let pid = body
        .rsplit_once("pid=")
        .and_then(|(_, p)| p.trim().parse().ok())
        .ok_or_else(|| format!("admin address {addr}: unexpected answer {body:?}"))?;
    Ok((pid, format!("pid {pid} at {addr} is draining")))
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
    tracing_subscriber::registry().with(filter).with(fmt).init();
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

//! `respite`: the data-plane binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
            let Some(path) = cli.config else {
                eprintln!("respite: --config FILE is required (or see `respite --help`)");
                return ExitCode::from(2);
            };
            let config = match respite::config::load(&path) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            init_logging(config.runtime.log_level.as_deref());
            match respite::engine::run(config, Some(path)) {
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

/// `RUST_LOG` wins over the config's `runtime.log_level`; the default is `info`.
fn init_logging(level: Option<&str>) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

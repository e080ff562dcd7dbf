//! `respite migrate verify` and `respite migrate copy`: the verification and copy steps of a
//! migration between two Redis deployments (docs/migration.md).
//!
//! Tooling, not the data path: blocking `redis` crate clients, one key at a time, rate-limited.
//! Either side is a single server, a Respite listener (which answers SCAN across all the shards
//! of the pool it routes to, so a sharded pool is verified through a listener that routes to
//! it), or a Redis Cluster (detected from `INFO cluster`; every primary is scanned and keys are
//! read through a cluster-aware client that follows MOVED/ASK).
//!
//! Exit codes: 0 success; 1 `verify` found more differences than `--max-diffs` or `copy` failed
//! on some keys; 2 bad input or an error (unreachable endpoint, network error, bad cursor file).

mod compare;
mod copy;
mod cursor;
mod endpoint;
mod progress;
mod rate;
mod report;
mod scan;
mod value;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use endpoint::{Endpoint, KeyClient};
pub use report::{CopySummary, Diff, DiffKind, VerifySummary};

/// Arguments of `respite migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: MigrateCommand,
}

/// The `respite migrate` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum MigrateCommand {
    /// Compare every key of the source (or a sample) with the target: type, value and TTL.
    /// HyperLogLogs are compared without their cached cardinality (PFCOUNT rewrites it on the
    /// side it runs on), sparse vs dense by PFCOUNT. Warns "checked 0 keys" when nothing was
    /// compared. Exit 0 when differences <= --max-diffs, 1 above, 2 on error (also when --from
    /// and --to name the same server).
    Verify(VerifyArgs),
    /// Copy keys from the source to the target with DUMP / RESTORE … REPLACE, keeping TTLs
    /// (for keys a mirror cannot warm: no TTL, never rewritten). Exit 0 when every key was
    /// copied, 1 when some failed, 2 on error (also when --from and --to name the same server:
    /// copying would overwrite the source).
    Copy(CopyArgs),
}

/// `respite migrate verify` options.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Source: `host:port` or `redis://[user:pass@]host:port[/db]` (a server, a Respite
    /// listener or any node of a Redis Cluster). Messages show the password as `***`.
    #[arg(long, value_name = "ENDPOINT")]
    pub from: String,
    /// Target, same forms as --from.
    #[arg(long, value_name = "ENDPOINT")]
    pub to: String,
    /// Only keys matching this SCAN MATCH glob.
    #[arg(long = "match", value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// Check about N keys spread over the keyspace (each key with probability N / DBSIZE,
    /// decided by a hash of the key, so reruns check the same keys). At least 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample: Option<u64>,
    /// Exit 1 when more than N keys differ.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_diffs: u64,
    /// At most OPS keys checked per second (token bucket), to spare production servers.
    #[arg(long, value_name = "OPS", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// TTLs (PTTL) within this of each other are equal; a TTL on one side only is drift.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub ttl_tolerance: Duration,
    /// Print one JSON object on stdout instead of the table (docs/migration.md lists the fields).
    #[arg(long)]
    pub json: bool,
    /// Sample differences to print (and to put in the JSON).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub show: usize,
}

/// `respite migrate copy` options.
#[derive(clap::Args, Debug)]
pub struct CopyArgs {
    /// Source: `host:port` or `redis://[user:pass@]host:port`.
    #[arg(long, value_name = "ENDPOINT")]
    pub from: String,
    /// Target, same forms as --from.
    #[arg(long, value_name = "ENDPOINT")]
    pub to: String,
    /// Only keys matching this SCAN MATCH glob.
    #[arg(long = "match", value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// At most OPS keys copied per second (token bucket).
    #[arg(long, value_name = "OPS", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Where to keep the scan position (source node + cursor), rewritten atomically after each
    /// SCAN batch; a rerun with the same file continues there; removed when the copy finishes.
    #[arg(long, value_name = "PATH")]
    pub cursor_file: Option<PathBuf>,
    /// Copy only keys without a TTL (keys with one are left to the mirror).
    #[arg(long)]
    pub persistent_only: bool,
}

/// Errors of the migrate tools: a message for the operator (exit code 2).
pub type Result<T> = std::result::Result<T, String>;

/// Runs `respite migrate …` and returns the process exit code.
pub fn main(args: &MigrateArgs) -> ExitCode {
    let outcome = match &args.command {
        MigrateCommand::Verify(a) => verify::run(a),
        MigrateCommand::Copy(a) => copy::run(a),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("respite migrate: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. \"2s\", \"500ms\")"))
}

fn parse_rate(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{s:?}: expected a positive number of keys per second"
        )),
    }
}

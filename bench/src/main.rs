//! `respite-bench`: a RESP load generator and side-by-side benchmark reports.
//! `run` (the default): closed loop (each connection keeps `--pipeline` requests in flight) or
//! open loop (`--rate`); the report gives throughput, latency percentiles and CPU µs per request
//! of this process and of any `--pid`; `run --cluster SEED` is a cluster-aware client (see
//! `cluster.rs`). `compare`: starts Redis, twemproxy and Respite and compares them side by side
//! (see `compare/mod.rs`); `compare --cluster` does the same over a Redis Cluster. `soak`: hours
//! of mixed load, churn, reloads and backend restarts with a ledger of acknowledged writes and
//! Respite's memory checked at the end (`soak/mod.rs`). `attack`: clients that ask and never
//! read, and very large requests, measured (`attack/mod.rs`).

mod attack;
mod cluster;
mod compare;
mod fleet;
mod load;
mod mix;
mod openloop;
mod procstat;
mod report;
mod resp;
mod soak;
mod tls;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::load::{LoadConfig, Stop};
use crate::mix::{Mix, parse_mix};
use crate::procstat::PidSpec;

const AFTER_HELP: &str = "\
MIX GRAMMAR (--mix):
  MIX   := ENTRY (\",\" ENTRY)*
  ENTRY := get[:W] | set[:W] | ping[:W] | mget[:N[:W]] | mset[:N[:W]]
  W = relative weight (default 1), N = keys per MGET/MSET (default 10).
  Keys are `key:<n>`, n uniform in [0, keyspace); SET/MSET values are --value-size bytes.
  Examples: --mix get   --mix get:80,set:20   --mix mget:10   --mix mget:10:1,set:4

By default the run is closed-loop: each connection writes a batch of --pipeline requests in one
write, reads all replies, then sends the next batch. Latency = reply time - batch send time.
With --rate R it is open-loop: connection i of C sends request k at (k*C + i)/R s after the start,
whatever is outstanding; latency = reply time - intended send time (coordinated-omission aware).
With --tls-ca FILE every connection is TLS (closed loop, one target): handshake and AUTH first,
unmeasured, then the same loop over the TLS stream.
With --cluster SEED it is a cluster-aware client: CLUSTER SLOTS once from SEED, one socket per
primary for each connection, each batch split by the primary owning each key's slot (one write
per node; the batch completes when every node has answered). GET/SET/PING mixes only.
Without a subcommand the flags apply to `run`: `respite-bench -c 50 -P 16` == `respite-bench run
-c 50 -P 16`.

EXAMPLES:
  respite-bench --port 6380 -c 50 -P 16 --mix get --prefill -n 200000
  respite-bench --addr 127.0.0.1:6380 --mix get:50,set:50 --duration 10s --warmup 1s \\
      --pid respite=$(pidof respite) --json
  respite-bench run --cluster 127.0.0.1:7000 -c 50 -P 16 --mix set --prefill --duration 5s
  respite-bench --port 6390 --tls-ca ca.pem --tls-cert client.pem --tls-key client.key -P 16";

#[derive(Parser, Debug)]
#[command(
    name = "respite-bench",
    version,
    about = "RESP load generator (closed or open loop): throughput, latency percentiles and CPU µs/request",
    args_conflicts_with_subcommands = true,
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one closed- or open-loop load against one target (the default without a subcommand).
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),
    /// Start redis-servers, twemproxy and Respite (1 and 2 workers) on free ports and compare
    /// them; writes JSON, Markdown and SVG results. With --cluster: a 6-node Redis Cluster,
    /// a cluster-aware client straight to it vs Respite over it. With --sockmap: Respite with
    /// the eBPF sockmap accelerator on vs off. With --baseline-bin: also a baseline
    /// Respite build, current vs baseline in the same run.
    Compare(compare::CompareArgs),
    /// Soak: Respite over three persistent redis-servers under mixed load, connection churn, a
    /// config reload every --reload-every and a backend restart every --restart-every; checks
    /// that no acknowledged INCR was lost, no panic, and that Respite's RSS and fds come back.
    /// Writes <UTC>-soak.{json,md}; exits non-zero on FAIL.
    Soak(soak::SoakArgs),
    /// Hostile clients measured: --clients connections pipelining GETs of a big value and never
    /// reading, then --large-clients concurrent huge SETs, while probe clients measure latency;
    /// Respite's and the backends' memory over time. Writes <UTC>-attack.{json,md}.
    Attack(attack::AttackArgs),
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// Target host.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Target port.
    #[arg(short = 'p', long, default_value_t = 6380)]
    port: u16,
    /// Target as HOST:PORT (overrides --host/--port).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["host", "port"])]
    addr: Option<String>,
    /// Redis Cluster seed: route each request to the primary owning its key's slot, one socket
    /// per primary per connection (a cluster-aware client; closed loop, GET/SET/PING only).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["host", "port", "addr", "rate"])]
    cluster: Option<String>,
    /// Client connections.
    #[arg(short = 'c', long, default_value_t = 50)]
    connections: usize,
    /// Requests in flight per connection (sent as one write); closed loop only.
    #[arg(short = 'P', long, default_value_t = 1, conflicts_with = "rate")]
    pipeline: usize,
    /// Open-loop: send this many requests/second in total, evenly spaced over the connections.
    #[arg(long, value_name = "REQ_PER_S")]
    rate: Option<f64>,
    /// Keys are `key:<OFFSET + n>` (keeps a second keyspace, e.g. of 1 KiB values, apart).
    #[arg(long, default_value_t = 0, hide = true)]
    key_offset: u64,
    /// Client threads, each a tokio current_thread runtime owning an equal share of the connections.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Command mix, e.g. `get`, `get:80,set:20`, `mget:10` (grammar below).
    #[arg(long, default_value = "get", value_parser = parse_mix)]
    mix: Mix,
    /// Number of distinct keys (`key:0` .. `key:<N-1>`), chosen uniformly at random.
    #[arg(short = 'r', long, default_value_t = 100_000)]
    keyspace: u64,
    /// Value size in bytes for SET/MSET (and --prefill).
    #[arg(short = 'd', long = "value-size", default_value_t = 3)]
    value_size: usize,
    /// Measured requests in total [default: 100000 unless --duration is given].
    #[arg(short = 'n', long, conflicts_with = "duration")]
    requests: Option<u64>,
    /// Measure for this long instead of a request count (e.g. `10s`, `1m`).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// SET every key of the keyspace first (pipelined, not measured).
    #[arg(long)]
    prefill: bool,
    /// Run unmeasured load this long before measuring (e.g. `1s`).
    #[arg(long, value_parser = humantime::parse_duration)]
    warmup: Option<Duration>,
    /// Print the report as JSON on stdout (progress messages go to stderr).
    #[arg(long)]
    json: bool,
    /// Send `AUTH PASSWORD` on every connection first.
    #[arg(long, value_name = "PASSWORD")]
    auth: Option<String>,
    /// Also report CPU µs/request of this process (repeatable; label defaults to its comm).
    #[arg(long = "pid", value_name = "[LABEL=]PID")]
    pids: Vec<PidSpec>,
    /// Connect with TLS, trusting the PEM CA certificate(s) in FILE (closed loop, one target:
    /// not with --rate or --cluster). Every connection's handshake (then AUTH) happens before
    /// the load, unmeasured.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "cluster"])]
    tls_ca: Option<PathBuf>,
    /// TLS client certificate chain (PEM), for servers that verify clients (redis-server's
    /// `tls-auth-clients yes`, Respite's `require_client_certificate`).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Name the server's certificate is verified as [default: the target host].
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl RunArgs {
    fn into_config(self) -> Result<LoadConfig, String> {
        let target = match self.cluster.as_ref().or(self.addr.as_ref()) {
            Some(a) => a.clone(),
            None if self.host.contains(':') => format!("[{}]:{}", self.host, self.port),
            None => format!("{}:{}", self.host, self.port),
        };
        let addr = target
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve `{target}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{target}` resolves to no address"))?;
        if self.connections == 0 {
            return Err("--connections must be > 0".into());
        }
        if self.pipeline == 0 || self.pipeline > 1_000_000 {
            return Err("--pipeline must be in 1..=1000000".into());
        }
        if self.threads == 0 {
            return Err("--threads must be > 0".into());
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err("--rate must be a positive number of requests/second".into());
        }
        if self.cluster.is_some()
            && let Some((op, _)) = self.mix.entries.iter().find(|(op, _)| op.keys() > 1)
        {
            return Err(format!(
                "--cluster sends each request to one node: {} of several keys would cross slots; \
                 use get, set or ping",
                op.name()
            ));
        }
        if self.keyspace == 0 {
            return Err("--keyspace must be > 0".into());
        }
        let tls = match &self.tls_ca {
            None => None,
            Some(ca) => {
                let name = match &self.tls_server_name {
                    Some(n) => n.clone(),
                    None => tls_host(&target),
                };
                let client = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
                Some(Arc::new(tls::TlsClient::from_files(
                    ca, client, &name, true,
                )?))
            }
        };
        let stop = match (self.requests, self.duration) {
            (Some(0), _) => return Err("--requests must be > 0".into()),
            (Some(n), _) => Stop::Requests(n),
            (None, Some(d)) if d.is_zero() => return Err("--duration must be > 0".into()),
            (None, Some(d)) => Stop::Duration(d),
            (None, None) => Stop::Requests(100_000),
        };
        Ok(LoadConfig {
            target,
            addr,
            connections: self.connections,
            pipeline: self.pipeline,
            threads: self.threads,
            mix: self.mix,
            keyspace: self.keyspace,
            value_size: self.value_size,
            stop,
            warmup: self.warmup.filter(|w| !w.is_zero()),
            prefill: self.prefill,
            auth: self.auth,
            pids: self.pids,
            rate: self.rate,
            key_offset: self.key_offset,
            quiet: false,
            cluster: self.cluster.is_some(),
            tls,
        })
    }
}

/// The host part of `HOST:PORT` or `[V6]:PORT`, as a TLS server name.
fn tls_host(target: &str) -> String {
    let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

fn run(args: RunArgs) -> ExitCode {
    let json = args.json;
    let cfg = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("respite-bench: {e}");
            return ExitCode::from(2);
        }
    };
    match load::run(cfg) {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
            if report.failed() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("respite-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run(args)) => run(args),
        Some(Command::Compare(args)) => compare::main(args),
        Some(Command::Soak(args)) => soak::main(args),
        Some(Command::Attack(args)) => attack::main(args),
        None => run(cli.run),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_without_subcommand_and_with_run() {
        let a = Cli::try_parse_from([
            "respite-bench",
            "-c",
            "5",
            "-P",
            "16",
            "--mix",
            "get:1,set:1",
        ])
        .unwrap();
        assert!(a.command.is_none());
        assert_eq!(a.run.connections, 5);
        assert_eq!(a.run.pipeline, 16);
        let b = Cli::try_parse_from(["respite-bench", "run", "--port", "7777", "--duration", "2s"])
            .unwrap();
        match b.command {
            Some(Command::Run(r)) => {
                assert_eq!(r.port, 7777);
                assert_eq!(r.duration, Some(Duration::from_secs(2)));
            }
            _ => panic!("expected run"),
        }
        assert!(Cli::try_parse_from(["respite-bench", "-n", "5", "--duration", "1s"]).is_err());
        assert!(Cli::try_parse_from(["respite-bench", "--mix", "bogus"]).is_err());
    }

    #[test]
    fn cluster_flag() {
        let a =
            Cli::try_parse_from(["respite-bench", "run", "--cluster", "127.0.0.1:7000"]).unwrap();
        let Some(Command::Run(r)) = a.command else {
            panic!("expected run")
        };
        let cfg = r.into_config().unwrap();
        assert!(cfg.cluster);
        assert_eq!(cfg.addr.to_string(), "127.0.0.1:7000");
        for bad in [
            &[
                "respite-bench",
                "--cluster",
                "127.0.0.1:7000",
                "--rate",
                "10",
            ][..],
            &[
                "respite-bench",
                "--cluster",
                "127.0.0.1:7000",
                "--addr",
                "127.0.0.1:1",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let a = Cli::try_parse_from([
            "respite-bench",
            "--cluster",
            "127.0.0.1:7000",
            "--mix",
            "mget:3",
        ])
        .unwrap();
        assert!(a.run.into_config().unwrap_err().contains("MGET"));
    }

    #[test]
    fn config_defaults() {
        let a = Cli::try_parse_from(["respite-bench", "--pid", "redis=1"]).unwrap();
        let cfg = a.run.into_config().unwrap();
        assert_eq!(cfg.stop, Stop::Requests(100_000));
        assert_eq!(cfg.addr.to_string(), "127.0.0.1:6380");
        assert_eq!(cfg.pids[0].label, "redis");
        assert!(cfg.tls.is_none());
    }

    #[test]
    fn tls_flags() {
        assert_eq!(tls_host("127.0.0.1:6380"), "127.0.0.1");
        assert_eq!(tls_host("[::1]:6380"), "::1");
        assert_eq!(tls_host("redis.example:6380"), "redis.example");
        for bad in [
            &["respite-bench", "--tls-ca", "ca.pem", "--rate", "10"][..],
            &[
                "respite-bench",
                "--tls-ca",
                "ca.pem",
                "--cluster",
                "127.0.0.1:7000",
            ],
            &["respite-bench", "--tls-cert", "c.pem", "--tls-key", "c.key"],
            &["respite-bench", "--tls-ca", "ca.pem", "--tls-cert", "c.pem"],
            &["respite-bench", "--tls-server-name", "localhost"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let a = Cli::try_parse_from(["respite-bench", "--tls-ca", "/nonexistent/ca.pem"]).unwrap();
        assert!(
            a.run
                .into_config()
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
    }
}

//! `respite top --admin ADDR [--interval 1s] [--once]`: a live terminal view of a running
//! respite (or of anything serving Envoy's admin JSON): header (admin address, uptime when
//! known, total req/s, error ratio, active downstream connections), a per-command table and a
//! per-upstream-host table, refreshed every interval.
//!
//! Each interval it reads `GET /stats?format=json&histogram_buckets=detailed`; rates are counter
//! deltas over the time between two reads, and p50/p99 are quantiles of the difference of the
//! detailed histogram buckets of two reads, so they describe the last interval only. Host
//! health comes from `/clusters?format=json`; the unit of `command.<cmd>.latency` (ms, or µs
//! with `latency_in_micros`) from `/config_dump`, read once at start ("?" when unavailable).
//! Per-host `rq_time` is always µs. `--once` prints one 120×40 frame as text after two reads.

mod render;
mod sample;
mod view;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::admin_client;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

pub use render::{ONCE_SIZE, to_text};
pub use sample::{HostHealth, StatsSample, parse_clusters, parse_stats, parse_units};
pub use view::{CommandRow, HostRow, Summary, Unit, View, bucket_delta, compute, quantile};

/// Path read every interval (Envoy admin: `/stats?format=json&histogram_buckets=detailed`).
pub const STATS_PATH: &str = "/stats?format=json&histogram_buckets=detailed";
/// Path of the per-host health (Envoy admin `/clusters?format=json`).
pub const CLUSTERS_PATH: &str = "/clusters?format=json";
/// Path of the live config, read once for the latency units.
pub const CONFIG_DUMP_PATH: &str = "/config_dump";

/// Flags of `respite top`.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    /// Admin address of the respite to watch (host:port).
    #[arg(long, value_name = "ADDR")]
    pub admin: String,
    /// Time between two reads (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one frame (120x40) as plain text after two reads one interval apart, then exit.
    #[arg(long)]
    pub once: bool,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) {
        return Err("the interval must be at least 10ms".into());
    }
    Ok(d)
}

/// Runs `respite top`: exit 0 on `q`/Esc/Ctrl-C (or after the `--once` frame), 1 with the reason
/// when the admin endpoint cannot be read (`--once`) or the terminal cannot be set up.
pub fn main(args: &TopArgs) -> ExitCode {
    let result = if args.once {
        once(args).map(|text| print!("{text}"))
    } else {
        live(args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respite top: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The admin endpoint being watched.
struct Source {
    name: String,
    addr: SocketAddr,
    /// `stat_prefix → latency_in_micros`; `None` when `/config_dump` could not be read.
    units: Option<BTreeMap<String, bool>>,
}

impl Source {
    fn connect(admin: &str) -> Result<Source, String> {
        let addr = admin_client::resolve(admin)?;
        let units = admin_client::get(addr, CONFIG_DUMP_PATH)
            .and_then(|b| parse_units(&b))
            .ok();
        Ok(Source {
            name: admin.to_owned(),
            addr,
            units,
        })
    }

    fn read(&self) -> Result<StatsSample, String> {
        let body = admin_client::get(self.addr, STATS_PATH)?;
        parse_stats(&body, Instant::now())
    }

    fn health(&self) -> Option<Vec<HostHealth>> {
        admin_client::get(self.addr, CLUSTERS_PATH)
            .and_then(|b| parse_clusters(&b))
            .ok()
    }

    fn view(&self, prev: &StatsSample, cur: &StatsSample) -> View {
        let health = self.health();
        compute(
            &self.name,
            prev,
            cur,
            self.units.as_ref(),
            health.as_deref(),
        )
    }
}

/// Two reads `interval` apart, rendered as text.
fn once(args: &TopArgs) -> Result<String, String> {
    let src = Source::connect(&args.admin)?;
    let first = src.read()?;
    std::thread::sleep(args.interval);
    let second = src.read()?;
    to_text(&src.view(&first, &second), ONCE_SIZE.0, ONCE_SIZE.1)
}

/// Restores the terminal when dropped, so every exit path (return, `?`, unwinding panic) leaves
/// it usable; ratatui's own panic hook covers a panic before the unwinding starts.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn live(args: &TopArgs) -> Result<(), String> {
    let src = Source::connect(&args.admin)?;
    let mut prev = src.read().ok();
    let mut term = ratatui::try_init().map_err(|e| format!("terminal: {e}"))?;
    let _guard = TerminalGuard;
    let mut view = View {
        error: Some(format!(
            "waiting {:?} for a second read of {}",
            args.interval, src.name
        )),
        ..View::default()
    };
    let mut next = Instant::now() + args.interval;
    loop {
        term.draw(|f| render::draw(f, &view))
            .map_err(|e| format!("terminal: {e}"))?;
        // Keys are answered at once; a read happens when the interval is up.
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if event::poll(left).map_err(|e| format!("terminal: {e}"))? {
                match event::read().map_err(|e| format!("terminal: {e}"))? {
                    Event::Key(k)
                        if k.kind == KeyEventKind::Press && is_quit(k.code, k.modifiers) =>
                    {
                        return Ok(());
                    }
                    Event::Resize(..) => term
                        .draw(|f| render::draw(f, &view))
                        .map(|_| ())
                        .map_err(|e| format!("terminal: {e}"))?,
                    _ => {}
                }
            }
        }
        next += args.interval;
        match (src.read(), &prev) {
            (Ok(cur), Some(p)) => {
                view = src.view(p, &cur);
                prev = Some(cur);
            }
            (Ok(cur), None) => prev = Some(cur),
            (Err(e), _) => view.error = Some(e),
        }
    }
}

fn is_quit(code: KeyCode, mods: KeyModifiers) -> bool {
    matches!(code, KeyCode::Char('q') | KeyCode::Esc)
        || (code == KeyCode::Char('c') && mods.contains(KeyModifiers::CONTROL))
}

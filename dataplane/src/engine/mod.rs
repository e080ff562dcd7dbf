//! Workers, listeners and downstream sessions, and the process around them: start-up, SIGHUP
//! reload and SIGTERM drain.

mod local;
pub mod probe;
mod session;
mod sink;
mod stats;
mod worker;

use std::path::PathBuf;
use std::sync::{Arc, mpsc};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing::{error, info, warn};

use crate::config::{self, Config};
use crate::stats::Store;

/// A running data plane: its workers and their control channels.
pub struct Engine {
    config: Arc<Config>,
    config_path: Option<PathBuf>,
    workers: Vec<(
        async_channel::Sender<worker::Control>,
        std::thread::JoinHandle<()>,
    )>,
    store: Arc<Store>,
    _admin: crate::admin::AdminServer,
}

impl Engine {
    /// Starts the admin endpoint and `config.runtime.workers` workers, each with its own listeners.
    /// `config_path` is re-read on [`Engine::reload`].
    ///
    /// Errors: a listener or admin address cannot be bound, or io_uring is unavailable.
    pub fn start(config: Config, config_path: Option<PathBuf>) -> Result<Engine, String> {
        let store = Store::new();
        let admin = crate::admin::spawn(config.admin.address, store.clone())
            .map_err(|e| format!("admin: bind {}: {e}", config.admin.address))?;
        let config = Arc::new(config);
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut workers = Vec::new();
        for id in 0..config.runtime.workers {
            let cpu = config.runtime.pin_workers.then_some(id % ncpu);
            workers.push(worker::spawn(id, config.clone(), store.clone(), cpu)?);
        }
        info!(
            workers = workers.len(),
            admin = %admin.local_addr,
            "respite started"
        );
        Ok(Engine {
            config,
            config_path,
            workers,
            store,
            _admin: admin,
        })
    }

    /// The process-wide stats registry.
    pub fn stats(&self) -> &Arc<Store> {
        &self.store
    }

    /// Re-reads the config file and applies it to every worker. A file that does not load leaves
    /// the running config in place.
    ///
    /// Errors: the file is invalid, or a worker rejected it (e.g. a new address cannot be bound).
    pub fn reload(&mut self) -> Result<(), String> {
        let Some(path) = &self.config_path else {
            return Err("no config file to reload".into());
        };
        let new = config::load(path).map_err(|e| e.to_string())?;
        self.apply(new)
    }

    /// Applies a new config snapshot to every worker.
    pub fn apply(&mut self, new: Config) -> Result<(), String> {
        if new.runtime.workers != self.config.runtime.workers {
            warn!("runtime.workers changed; it takes effect at the next restart");
        }
        if new.admin != self.config.admin {
            warn!("admin.address changed; it takes effect at the next restart");
        }
        let new = Arc::new(new);
        let mut results = Vec::new();
        for (tx, _) in &self.workers {
            let (rtx, rrx) = mpsc::channel();
            tx.send_blocking(worker::Control::Apply(new.clone(), rtx))
                .map_err(|_| "a worker has stopped".to_string())?;
            results.push(rrx);
        }
        for r in results {
            r.recv().map_err(|_| "a worker has stopped".to_string())??;
        }
        self.config = new;
        Ok(())
    }

    /// Stops accepting, lets in-flight requests finish for up to `runtime.drain_timeout`, and
    /// stops every worker.
    pub fn drain(self) {
        let timeout = self.config.runtime.drain_timeout;
        for (tx, _) in &self.workers {
            let _ = tx.send_blocking(worker::Control::Drain(timeout));
        }
        for (_, join) in self.workers {
            let _ = join.join();
        }
    }
}

/// Runs the data plane until SIGTERM or SIGINT: SIGHUP reloads the config file.
///
/// Errors: start-up failed (see [`Engine::start`]).
pub fn run(config: Config, config_path: Option<PathBuf>) -> Result<(), String> {
    // Register before the workers exist, so no signal arrives unhandled.
    let mut signals =
        Signals::new([SIGHUP, SIGTERM, SIGINT]).map_err(|e| format!("signals: {e}"))?;
    let mut engine = Engine::start(config, config_path)?;
    for sig in signals.forever() {
        match sig {
            SIGHUP => match engine.reload() {
                Ok(()) => info!("config reloaded"),
                Err(e) => error!(error = %e, "config reload rejected; keeping the running config"),
            },
            _ => {
                info!("draining");
                engine.drain();
                info!("stopped");
                return Ok(());
            }
        }
    }
    Ok(())
}

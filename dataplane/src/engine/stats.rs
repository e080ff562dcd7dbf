//! This worker's shard of one listener's stats (`redis.<stat_prefix>.…`, Envoy names).

use std::cell::RefCell;
use std::sync::Arc;

use crate::command::COMMANDS;
use crate::stats::{Counter, Gauge, Store};

/// `command.<cmd>.total|success|error` of one command.
pub struct CommandStats {
    pub total: Arc<Counter>,
    pub success: Arc<Counter>,
    pub error: Arc<Counter>,
}

/// Per-worker listener stats. Per-command counters are registered the first time a command is
/// seen, so the hot path only indexes a vector.
pub struct ListenerStats {
    store: Arc<Store>,
    worker: usize,
    prefix: String,
    pub cx_total: Arc<Counter>,
    pub cx_active: Arc<Gauge>,
    pub cx_protocol_error: Arc<Counter>,
    pub cx_drain_close: Arc<Counter>,
    pub rx_bytes: Arc<Counter>,
    pub tx_bytes: Arc<Counter>,
    pub rq_total: Arc<Counter>,
    pub rq_active: Arc<Gauge>,
    pub unsupported_command: Arc<Counter>,
    pub invalid_request: Arc<Counter>,
    pub custom_total: Arc<Counter>,
    commands: RefCell<Vec<Option<CommandStats>>>,
}

impl ListenerStats {
    /// Registers this worker's shards under `redis.<stat_prefix>.`.
    pub fn new(store: Arc<Store>, worker: usize, stat_prefix: &str) -> ListenerStats {
        let prefix = format!("redis.{stat_prefix}.");
        let c = |n: &str| store.counter(&format!("{prefix}{n}"), worker);
        let g = |n: &str| store.gauge(&format!("{prefix}{n}"), worker);
        ListenerStats {
            cx_total: c("downstream_cx_total"),
            cx_active: g("downstream_cx_active"),
            cx_protocol_error: c("downstream_cx_protocol_error"),
            cx_drain_close: c("downstream_cx_drain_close"),
            rx_bytes: c("downstream_cx_rx_bytes_total"),
            tx_bytes: c("downstream_cx_tx_bytes_total"),
            rq_total: c("downstream_rq_total"),
            rq_active: g("downstream_rq_active"),
            unsupported_command: c("splitter.unsupported_command"),
            invalid_request: c("splitter.invalid_request"),
            custom_total: c("command.custom.total"),
            commands: RefCell::new(Vec::new()),
            prefix,
            worker,
            store,
        }
    }

    fn with_command<R>(&self, cmd: u16, f: impl FnOnce(&CommandStats) -> R) -> Option<R> {
        let idx = cmd as usize;
        let name = COMMANDS.get(idx)?.name;
        let mut v = self.commands.borrow_mut();
        if v.len() <= idx {
            v.resize_with(idx + 1, || None);
        }
        let slot = &mut v[idx];
        let stats = slot.get_or_insert_with(|| {
            let c = |n: &str| {
                self.store
                    .counter(&format!("{}command.{name}.{n}", self.prefix), self.worker)
            };
            CommandStats {
                total: c("total"),
                success: c("success"),
                error: c("error"),
            }
        });
        Some(f(stats))
    }

    /// Counts a request of command `cmd`.
    #[inline]
    pub fn request(&self, cmd: u16) {
        self.rq_total.inc();
        self.with_command(cmd, |s| s.total.inc());
    }

    /// Counts a request of a listener `custom_commands` entry (`command.custom.total`).
    pub fn custom_request(&self) {
        self.rq_total.inc();
        self.custom_total.inc();
    }

    /// Counts the outcome of a request of command `cmd`.
    #[inline]
    pub fn record(&self, cmd: u16, success: bool) {
        self.with_command(cmd, |s| {
            if success {
                s.success.inc()
            } else {
                s.error.inc()
            }
        });
    }
}

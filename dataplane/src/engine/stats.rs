//! This worker's shard of one listener's stats (`redis.<stat_prefix>.…`, Envoy names).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command::COMMANDS;
use crate::stats::{Counter, Gauge, LocalHistogram, Store};
use crate::upstream::SslStats;

/// Command id of a listener `custom_commands` entry in reply slots: out of the command table, so
/// its stats are `command.custom.total|success|error|latency`, registered with the first one.
pub const CUSTOM_CMD: u16 = u16::MAX - 1;

/// `command.<cmd>.total|success|error|latency` of one command.
pub struct CommandStats {
    pub total: Arc<Counter>,
    pub success: Arc<Counter>,
    pub error: Arc<Counter>,
    /// From the read of the request to its reply entering the output buffer, in ms (truncated,
    /// as Envoy) or µs with the listener's `latency_in_micros`.
    pub latency: Rc<LocalHistogram>,
}

/// Per-worker listener stats. Per-command stats are registered the first time a command is
/// seen, so the hot path only indexes a vector.
pub struct ListenerStats {
    store: Arc<Store>,
    worker: usize,
    prefix: String,
    pub cx_total: Arc<Counter>,
    pub cx_active: Arc<Gauge>,
    pub cx_protocol_error: Arc<Counter>,
    pub cx_drain_close: Arc<Counter>,
    /// Failed `accept`s on the listener (at the fd limit, out of socket memory, a connection
    /// reset while queued); each pauses the worker's accepts (10 ms doubling to 1 s).
    pub cx_accept_error: Arc<Counter>,
    pub rx_bytes: Arc<Counter>,
    pub tx_bytes: Arc<Counter>,
    /// Bytes read from clients and not yet parsed (a partial request), Envoy's
    /// `downstream_cx_rx_bytes_buffered`; moved by delta per read batch.
    pub rx_buffered: Arc<Gauge>,
    /// Reply bytes in sessions' output buffers or being written, Envoy's
    /// `downstream_cx_tx_bytes_buffered`; moved by delta as replies enter and leave.
    pub tx_buffered: Arc<Gauge>,
    pub rq_total: Arc<Counter>,
    pub rq_active: Arc<Gauge>,
    pub unsupported_command: Arc<Counter>,
    /// Requests refused `-NOPROTO` for coming before `HELLO 3` on a `protocol_version =
    /// "resp3"` listener (Envoy's `downstream_rq_noproto`).
    pub rq_noproto: Arc<Counter>,
    pub invalid_request: Arc<Counter>,
    /// EXECs that ran their transaction (the backend answered EXEC with an array).
    pub tx_committed: Arc<Counter>,
    /// EXECs that ran nothing: `-EXECABORT` (a queue-time error, a reload, a refused MULTI),
    /// nil (a WATCH conflict), an error fault, no backend or leased connection.
    pub tx_aborted: Arc<Counter>,
    /// Commands of a transaction (or WATCH) refused with `-CROSSSLOT`: keys on another backend.
    pub tx_cross_slot: Arc<Counter>,
    /// Clients blocked now in a blocking command (Redis's `blocked_clients`).
    pub blocked_clients: Arc<Gauge>,
    /// Channels, patterns and shard channels that this listener's clients subscribed to now
    /// (one per client and name: Redis's `pubsub_channels` counted per subscriber).
    pub pubsub_subscriptions: Arc<Gauge>,
    /// Subscribed clients disconnected for passing their pub/sub output-buffer limit.
    pub pubsub_slow_close: Arc<Counter>,
    /// Clients disconnected for passing their output-buffer limit, normal or pub/sub (Redis
    /// INFO `client_output_buffer_limit_disconnections`).
    pub output_buffer_limit_close: Arc<Counter>,
    /// Clients disconnected to bring their worker back under `runtime.maxmemory_clients`
    /// (Redis INFO `evicted_clients`).
    pub evicted_clients: Arc<Counter>,
    /// AUTH and `HELLO … AUTH` answered `-WRONGPASS` (Envoy's redis_proxy counts none; the name
    /// follows its `downstream_` stats).
    pub auth_failure: Arc<Counter>,
    /// AUTH and `HELLO … AUTH` refused unchecked during a back-off after repeated failures.
    pub auth_throttled: Arc<Counter>,
    /// `[listeners.external_auth]` calls that accepted the client (Envoy's redis_proxy counts
    /// none of the external auth answers).
    pub external_auth_ok: Arc<Counter>,
    /// External auth calls that refused (PERMISSION_DENIED or UNAUTHENTICATED).
    pub external_auth_denied: Arc<Counter>,
    /// External auth calls that failed: another status, a timeout, the service unreachable,
    /// too many calls in flight.
    pub external_auth_error: Arc<Counter>,
    /// `command.custom.*` of the listener's `custom_commands`, registered with the first one.
    custom: RefCell<Option<CommandStats>>,
    /// `ssl.*`, registered at the first TLS handshake (a plain listener has none).
    ssl: RefCell<Option<Rc<SslStats>>>,
    /// The listener's `latency_in_micros` (set at every config apply; a change mixes units in
    /// the histograms already recorded, as a restart would not).
    micros: Cell<bool>,
    commands: RefCell<Vec<Option<CommandStats>>>,
    /// `command.<cmd>.error_fault|delay_fault` (Envoy), by command id; registered on a
    /// command's first fault, so listeners without faults never list them.
    faults: RefCell<Vec<Option<FaultStats>>>,
}

/// `command.<cmd>.error_fault` and `.delay_fault` of one command (Envoy `redis_proxy` stats).
struct FaultStats {
    error_fault: Arc<Counter>,
    delay_fault: Arc<Counter>,
}

impl ListenerStats {
    /// This worker's `redis.<stat_prefix>.ssl.*` shard, registered on first use.
    pub fn ssl(&self) -> Rc<SslStats> {
        self.ssl
            .borrow_mut()
            .get_or_insert_with(|| {
                let scope = self.prefix.trim_end_matches('.');
                Rc::new(SslStats::under(&self.store, self.worker, scope))
            })
            .clone()
    }

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
            cx_accept_error: c("downstream_cx_accept_error"),
            rx_bytes: c("downstream_cx_rx_bytes_total"),
            tx_bytes: c("downstream_cx_tx_bytes_total"),
            rx_buffered: g("downstream_cx_rx_bytes_buffered"),
            tx_buffered: g("downstream_cx_tx_bytes_buffered"),
            rq_total: c("downstream_rq_total"),
            rq_active: g("downstream_rq_active"),
            unsupported_command: c("splitter.unsupported_command"),
            rq_noproto: c("downstream_rq_noproto"),
            invalid_request: c("splitter.invalid_request"),
            tx_committed: c("tx_committed"),
            tx_aborted: c("tx_aborted"),
            tx_cross_slot: c("tx_cross_slot"),
            blocked_clients: g("blocked_clients"),
            pubsub_subscriptions: g("pubsub_subscriptions"),
            pubsub_slow_close: c("pubsub_slow_subscriber_close"),
            output_buffer_limit_close: c("client_output_buffer_limit_disconnections"),
            evicted_clients: c("evicted_clients"),
            auth_failure: c("downstream_auth_failure"),
            auth_throttled: c("downstream_auth_throttled"),
            external_auth_ok: c("external_auth.ok"),
            external_auth_denied: c("external_auth.denied"),
            external_auth_error: c("external_auth.error"),
            custom: RefCell::new(None),
            ssl: RefCell::new(None),
            micros: Cell::new(false),
            commands: RefCell::new(Vec::new()),
            faults: RefCell::new(Vec::new()),
            prefix,
            worker,
            store,
        }
    }

    /// Sets the unit of `command.<cmd>.latency`: µs if `micros` (listener `latency_in_micros`),
    /// else ms.
    pub fn set_latency_in_micros(&self, micros: bool) {
        self.micros.set(micros);
    }

    fn histogram(&self, name: &str) -> Rc<LocalHistogram> {
        LocalHistogram::new(
            self.store
                .histogram(&format!("{}{name}", self.prefix), self.worker),
        )
    }

    fn with_command<R>(&self, cmd: u16, f: impl FnOnce(&CommandStats) -> R) -> Option<R> {
        let idx = cmd as usize;
        let name = COMMANDS.get(idx)?.name;
        let mut v = self.commands.borrow_mut();
        if v.len() <= idx {
            v.resize_with(idx + 1, || None);
        }
        let stats = v
            .get_mut(idx)?
            .get_or_insert_with(|| self.command_stats(name));
        Some(f(stats))
    }

    fn command_stats(&self, name: &str) -> CommandStats {
        let c = |n: &str| {
            self.store
                .counter(&format!("{}command.{name}.{n}", self.prefix), self.worker)
        };
        CommandStats {
            total: c("total"),
            success: c("success"),
            error: c("error"),
            latency: self.histogram(&format!("command.{name}.latency")),
        }
    }

    fn with_custom<R>(&self, f: impl FnOnce(&CommandStats) -> R) -> R {
        let mut c = self.custom.borrow_mut();
        f(c.get_or_insert_with(|| self.command_stats("custom")))
    }

    /// Counts a request of command `cmd`.
    #[inline]
    pub fn request(&self, cmd: u16) {
        self.rq_total.inc();
        self.with_command(cmd, |s| s.total.inc());
    }

    /// Counts a fault injected into a request of command `cmd` (its table id, or
    /// [`CUSTOM_CMD`]): `command.<cmd>.error_fault` if `error`, `.delay_fault` if `delayed`
    /// (an ERROR fault with a delay counts in both, as Envoy's `DelayFaultRequest` wrapping its
    /// `ErrorFaultRequest` does).
    pub fn fault(&self, cmd: u16, error: bool, delayed: bool) {
        let name = match COMMANDS.get(cmd as usize) {
            Some(spec) => spec.name,
            None if cmd == CUSTOM_CMD => "custom",
            None => return,
        };
        let idx = (cmd as usize).min(COMMANDS.len());
        let mut v = self.faults.borrow_mut();
        if v.len() <= idx {
            v.resize_with(idx + 1, || None);
        }
        let Some(slot) = v.get_mut(idx) else { return };
        let s = slot.get_or_insert_with(|| {
            let c = |n: &str| {
                self.store
                    .counter(&format!("{}command.{name}.{n}", self.prefix), self.worker)
            };
            FaultStats {
                error_fault: c("error_fault"),
                delay_fault: c("delay_fault"),
            }
        });
        if error {
            s.error_fault.inc();
        }
        if delayed {
            s.delay_fault.inc();
        }
    }

    /// Counts a request of a listener `custom_commands` entry (`command.custom.total`).
    pub fn custom_request(&self) {
        self.rq_total.inc();
        self.with_custom(|s| s.total.inc());
    }

    /// Counts the outcome of a request of command `cmd` and records its latency: from `start`
    /// (its read) to `now` (its reply entering the output buffer).
    #[inline]
    pub fn record(&self, cmd: u16, success: bool, start: Instant, now: Instant) {
        let v = latency_value(now.saturating_duration_since(start), self.micros.get());
        let count = |s: &CommandStats| {
            if success {
                s.success.inc()
            } else {
                s.error.inc()
            }
            s.latency.record(v);
        };
        if self.with_command(cmd, count).is_none() && cmd == CUSTOM_CMD {
            self.with_custom(count);
        }
    }
}

/// A latency in the histogram's unit: whole µs, or whole ms (truncated, as Envoy's
/// `std::chrono::duration_cast<milliseconds>`).
#[inline]
pub fn latency_value(d: Duration, micros: bool) -> u64 {
    if micros {
        d.as_micros() as u64
    } else {
        d.as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_units_truncate() {
        let d = Duration::from_micros(20_999);
        assert_eq!(latency_value(d, true), 20_999);
        assert_eq!(latency_value(d, false), 20);
    }

    #[test]
    fn latency_goes_to_the_command_histogram_in_its_unit() {
        let store = Store::new();
        let get = crate::command::lookup(b"GET").map(|s| s.id).unwrap_or(0);
        let stats = ListenerStats::new(store.clone(), 0, "t");
        let t0 = Instant::now();
        stats.request(get);
        stats.record(get, true, t0, t0 + Duration::from_micros(20_500));
        stats.set_latency_in_micros(true);
        stats.request(get);
        stats.record(get, false, t0, t0 + Duration::from_micros(1_234));
        stats.record(CUSTOM_CMD, true, t0, t0 + Duration::from_millis(3));
        crate::stats::flush_thread();
        let h: std::collections::HashMap<_, _> = store.histograms().into_iter().collect();
        let lat = &h["redis.t.command.get.latency"];
        assert_eq!(lat.count(), 2);
        assert_eq!(lat.sum(), 20 + 1_234);
        assert_eq!(h["redis.t.command.custom.latency"].count(), 1);
        assert_eq!(store.counter_value("redis.t.command.get.total"), Some(2));
        assert_eq!(store.counter_value("redis.t.command.get.success"), Some(1));
        assert_eq!(store.counter_value("redis.t.command.get.error"), Some(1));
        assert_eq!(
            store.counter_value("redis.t.command.custom.success"),
            Some(1)
        );
    }

    /// `command.custom.*` exists only once a custom command was seen, and counts outcomes so
    /// total = success + error holds for it too.
    #[test]
    fn custom_command_stats_are_registered_on_first_use() {
        let store = Store::new();
        let stats = ListenerStats::new(store.clone(), 0, "t");
        assert_eq!(store.counter_value("redis.t.command.custom.total"), None);
        let t0 = Instant::now();
        stats.custom_request();
        stats.custom_request();
        stats.record(CUSTOM_CMD, true, t0, t0);
        stats.record(CUSTOM_CMD, false, t0, t0);
        assert_eq!(store.counter_value("redis.t.command.custom.total"), Some(2));
        assert_eq!(
            store.counter_value("redis.t.command.custom.success"),
            Some(1)
        );
        assert_eq!(store.counter_value("redis.t.command.custom.error"), Some(1));
    }
}

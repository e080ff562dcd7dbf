//! Per-request observation of one listener on one worker: hot keys, big values and the sampled
//! access log (`[listeners.hot_keys]`, `big_value_bytes`, `[listeners.access_log]`).
//!
//! A listener with none of the three has no [`Observer`]: the request path pays one `Option`
//! branch per request and one per reply. With any of them, the session calls
//! [`Observer::request`] for each parsed request and the sink calls [`Pending::complete`] when
//! that request's reply is complete (in request order, before it is written).
//!
//! Which keys count as requested (hot keys): every key of a command whose keys sit at fixed
//! positions (the table's `first_key`/`last_key`/`step`: GET, MGET's keys, MSET's keys, DEL's
//! keys, each once per request); for commands whose keys are found by parsing arguments
//! (EVAL/FCALL `numkeys`, XREAD `STREAMS`, SORT `STORE`, ZUNION …) only the first key; none for
//! unknown commands, `custom_commands`, and commands without keys. Requests are counted when
//! parsed, whatever their outcome (an unauthenticated or failed request counts too).
//!
//! Big values: a request whose largest argument (after the command name) is at least
//! `big_value_bytes`, and a reply (the whole RESP reply sent to the client, merged for split
//! commands) of at least that size, each count one `redis.<stat_prefix>.big_value_total` and are
//! logged at WARN (rate-limited: [`crate::stats::hotkeys::BIG_VALUE_LOG_EVERY`]) and kept in the
//! `/hot_keys` ring. A big request with a big reply counts twice.
//!
//! Cost when on, per request: a command lookup, a hash-map update per counted key (no
//! allocation once the key is tracked), and for big values and sampled requests a pooled
//! [`Pending`] box (reused, so no allocation on the steady path). A sampled access log line
//! allocates its [`Record`] and is formatted on the writer thread.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::access_log::{self, Record};
use crate::command::{self, CommandSpec, KeySpec};
use crate::config::ListenerConfig;
use crate::stats::hotkeys::{BigValue, LOGGED_KEY_BYTES, LocalHotKeys};
use crate::stats::{Counter, Store};

/// [`Pending`] boxes kept for reuse per listener per worker (a session's pipeline depth bound).
const POOL_MAX: usize = 256;

/// The observation settings of one listener on one worker (rebuilt on every config apply; the
/// hot-keys summaries survive it, see [`LocalHotKeys::for_listener`]).
pub struct Observer {
    stat_prefix: Arc<str>,
    /// Hot keys or big values (`None` when both are off).
    local: Option<Rc<LocalHotKeys>>,
    hot_keys: bool,
    big_value_bytes: usize,
    /// `(path, sample_rate)` of the access log.
    access_log: Option<(Arc<str>, f64)>,
    big_value_total: Option<Arc<Counter>>,
    access_log_dropped: Option<Arc<Counter>>,
    rng: RefCell<fastrand::Rng>,
    /// Boxes, not values: a slot carries a `Box<Pending>`, and reusing the box is the point.
    #[allow(clippy::vec_box)]
    pool: RefCell<Vec<Box<Pending>>>,
}

/// What a request carries in its sink slot until its reply completes.
pub struct Pending {
    /// `None` while pooled: the pool lives in the observer, which must not keep itself alive.
    observer: Option<Rc<Observer>>,
    command: &'static str,
    /// First key, cut to [`LOGGED_KEY_BYTES`].
    key: Vec<u8>,
    /// Sampled for the access log: `start` is set.
    start: Option<(Instant, u64)>,
    downstream: Option<SocketAddr>,
}

impl Observer {
    /// The observer of listener `l` on `worker`, `None` when it observes nothing.
    pub fn new(store: &Arc<Store>, worker: usize, l: &ListenerConfig) -> Option<Rc<Observer>> {
        let hot = l.hot_keys.as_ref().map(|h| (h.top_k, h.window));
        let big = l.big_value_bytes > 0;
        if hot.is_none() && !big && l.access_log.is_none() {
            return None;
        }
        let prefix = &l.stat_prefix;
        let local = (hot.is_some() || big).then(|| {
            LocalHotKeys::for_listener(prefix, || store.hot_keys_shard(prefix, worker), hot, big)
        });
        let counter = |n: &str| store.counter(&format!("redis.{prefix}.{n}"), worker);
        if l.access_log.is_some() && worker == 0 {
            access_log::start();
        }
        Some(Rc::new(Observer {
            stat_prefix: Arc::from(prefix.as_str()),
            local,
            hot_keys: hot.is_some(),
            big_value_bytes: l.big_value_bytes,
            access_log: l
                .access_log
                .as_ref()
                .map(|a| (Arc::from(a.path.as_str()), a.sample_rate)),
            big_value_total: big.then(|| counter("big_value_total")),
            access_log_dropped: l.access_log.as_ref().map(|_| counter("access_log_dropped")),
            rng: RefCell::new(fastrand::Rng::new()),
            pool: RefCell::new(Vec::new()),
        }))
    }

    /// True if the access log is on (the session then learns its peer address).
    pub fn wants_peer(&self) -> bool {
        self.access_log.is_some()
    }

    /// Observes one parsed request (`base[args[i]]` = argv[i]); returns what its sink slot must
    /// carry until the reply completes, if anything.
    pub fn request(
        self: &Rc<Self>,
        base: &[u8],
        args: &[Range<usize>],
        downstream: Option<SocketAddr>,
    ) -> Option<Box<Pending>> {
        let arg = |i: usize| args.get(i).and_then(|r| base.get(r.clone())).unwrap_or(&[]);
        let spec = resolve(args.len(), arg);
        let first = spec.and_then(|s| first_key(s, args.len(), arg));
        if self.hot_keys
            && let (Some(local), Some(spec)) = (&self.local, spec)
        {
            match spec.keys {
                KeySpec::Range => {
                    for i in command::key_indices(spec, args.len()) {
                        local.record_key(arg(i));
                    }
                }
                _ => {
                    if let Some(k) = first {
                        local.record_key(k);
                    }
                }
            }
        }
        let command = spec.map_or("unknown", |s| s.name);
        let key = first.unwrap_or(&[]);
        if self.big_value_bytes > 0 {
            let largest = args.iter().skip(1).map(|r| r.len()).max().unwrap_or(0);
            if largest >= self.big_value_bytes {
                self.big(command, key, largest, "request");
            }
        }
        let sampled = match &self.access_log {
            Some((_, rate)) => *rate >= 1.0 || self.rng.borrow_mut().f64() < *rate,
            None => false,
        };
        if !sampled && self.big_value_bytes == 0 {
            return None;
        }
        let mut p = self.pool.borrow_mut().pop().unwrap_or_else(|| {
            Box::new(Pending {
                observer: None,
                command: "",
                key: Vec::with_capacity(LOGGED_KEY_BYTES),
                start: None,
                downstream: None,
            })
        });
        p.observer = Some(self.clone());
        p.command = command;
        p.key.clear();
        p.key
            .extend_from_slice(key.get(..LOGGED_KEY_BYTES).unwrap_or(key));
        p.start = sampled.then(|| (Instant::now(), unix_ms()));
        p.downstream = downstream;
        Some(p)
    }

    fn big(&self, command: &str, key: &[u8], bytes: usize, direction: &'static str) {
        if let Some(c) = &self.big_value_total {
            c.inc();
        }
        if let Some(local) = &self.local {
            local.record_big(
                BigValue {
                    key: key.get(..LOGGED_KEY_BYTES).unwrap_or(key).to_vec(),
                    command: command.to_owned(),
                    bytes,
                    direction,
                    unix_ms: unix_ms(),
                },
                Instant::now(),
            );
        }
    }
}

impl Pending {
    /// The request's reply is complete: `reply` is what the client gets, `success` whether it
    /// counts as a success. Checks the reply's size, logs a sampled request, and returns the box
    /// to the pool.
    pub fn complete(mut self: Box<Self>, reply: &[u8], success: bool) {
        let Some(obs) = self.observer.take() else {
            return;
        };
        if obs.big_value_bytes > 0 && reply.len() >= obs.big_value_bytes {
            obs.big(self.command, &self.key, reply.len(), "reply");
        }
        if let (Some((start, start_unix_ms)), Some((path, _))) = (self.start, &obs.access_log) {
            let record = Box::new(Record {
                path: path.clone(),
                listener: obs.stat_prefix.clone(),
                start_unix_ms,
                downstream: self.downstream,
                command: self.command,
                key: self.key.clone(),
                ok: success,
                reply_bytes: reply.len(),
                duration_us: start.elapsed().as_micros() as u64,
            });
            if access_log::send(record).is_err()
                && let Some(c) = &obs.access_log_dropped
            {
                c.inc();
            }
        }
        let mut pool = obs.pool.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(self);
        }
    }
}

/// The request's table row: as the session resolves it (a container's subcommand row), without
/// the arity check.
fn resolve<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> Option<&'static CommandSpec> {
    let spec = command::lookup(arg(0))?;
    if argc >= 2 && command::is_container(spec) {
        return command::subcommand(spec, arg(1)).or(Some(spec));
    }
    Some(spec)
}

/// The request's first key, if it has one: cheap positional rules, not a full key parse.
fn first_key<'a>(
    spec: &CommandSpec,
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
) -> Option<&'a [u8]> {
    let i = match spec.keys {
        KeySpec::Range => command::key_indices(spec, argc).next()?,
        KeySpec::NumKeys { at, fixed } => {
            if fixed > 0 {
                1
            } else {
                let n: usize = std::str::from_utf8(arg(usize::from(at)))
                    .ok()?
                    .parse()
                    .ok()?;
                if n == 0 {
                    return None;
                }
                usize::from(at) + 1
            }
        }
        KeySpec::Streams => {
            let s = (1..argc).find(|&i| arg(i).eq_ignore_ascii_case(b"STREAMS"))?;
            s + 1
        }
        KeySpec::Sort => 1,
    };
    (i < argc).then(|| arg(i))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

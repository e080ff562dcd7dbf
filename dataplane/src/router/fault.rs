//! Fault injection (Envoy `redis_proxy` `faults`, `RedisProxy.RedisFault`): which fault, if any,
//! a request gets.
//!
//! Semantics (Envoy `common/redis/fault_impl.cc`, `redis_proxy/command_splitter_impl.cc`):
//! - The faults that apply to a command are its own (`commands` names it) and the
//!   every-command ones (`commands` empty). They are tried in config order against ONE random
//!   draw per request, with amortised percentages: with ERROR 5% on every command then DELAY 10%
//!   on GET, a GET gets the error for draws in [0, 5) and the delay for draws in [5, 15). Envoy
//!   lists a command's own faults before the every-command ones; the share each fault gets is the
//!   same either way. Percentages that add up past 100 are not checked (as in Envoy): a fault
//!   whose interval starts at or past 100 never fires.
//! - Envoy draws an integer percent; here the draw has 53 bits, so fractional percentages such
//!   as 0.5 mean what they say.
//! - A fault naming a container command (`client`, `script`, …) applies to all of its
//!   subcommands, since Envoy matches the name the client sent (argv[0]).
//!
//! Which requests are eligible at all is the engine's decision (only those sent upstream; see
//! `engine::session`). The table is built per worker when a listener runtime is built, so the
//! request path only indexes a vector and draws from the worker thread's own RNG.

use std::collections::HashMap;
use std::time::Duration;

use crate::command::COMMANDS;
use crate::config::{FaultConfig, FaultType};

/// The reply to a request that gets an ERROR fault: Envoy's `FaultMessages::get().Error`
/// ("Fault Injected: Error", `common/redis/fault_impl.h`) as a RESP error.
pub const FAULT_ERROR_REPLY: &[u8] = b"-Fault Injected: Error\r\n";

/// Resolution of a draw: 2^53, the integers an `f64` percentage maps onto exactly enough.
const DRAW_SPAN: u64 = 1 << 53;

/// What happens to a request that drew a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer [`FAULT_ERROR_REPLY`] without forwarding; with `delay`, the error is held that long
    /// first (Envoy wraps the error in its `DelayFaultRequest`).
    Error { delay: Option<Duration> },
    /// Forward the request and hold its reply this long after it arrives (Envoy
    /// `DelayFaultRequest::onResponse`).
    Delay(Duration),
}

impl Fault {
    /// The delay this fault adds, if any (what `delay_fault` counts).
    pub fn delay(&self) -> Option<Duration> {
        match *self {
            Fault::Error { delay } => delay,
            Fault::Delay(d) => Some(d),
        }
    }
}

/// One fault of a command's list: it fires for draws below `below` (cumulative, amortised).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rule {
    below: u64,
    fault: Fault,
}

/// A listener's faults, per command. `None` from [`Faults::new`] when the listener has none, so
/// such a listener pays one branch on an `Option`.
#[derive(Debug)]
pub struct Faults {
    /// Distinct rule lists; list 0 is the every-command list (possibly empty).
    lists: Vec<Box<[Rule]>>,
    /// Per command table id: index into `lists`.
    of_cmd: Box<[u16]>,
}

impl Faults {
    /// Builds the table of `faults` (a listener's `[[listeners.faults]]`, validated: percentages
    /// in 0–100, lowercase command names from the command table, a delay on every DELAY fault).
    /// `None` when `faults` is empty.
    pub fn new(faults: &[FaultConfig]) -> Option<Faults> {
        if faults.is_empty() {
            return None;
        }
        let mut lists: Vec<Box<[Rule]>> = Vec::new();
        let mut index: HashMap<Vec<usize>, u16> = HashMap::new();
        let every: Vec<usize> = (0..faults.len())
            .filter(|&i| faults.get(i).is_some_and(|f| f.commands.is_empty()))
            .collect();
        index.insert(every.clone(), 0);
        lists.push(rules(faults, &every));
        let of_cmd = COMMANDS
            .iter()
            .map(|spec| {
                let top = spec.name.split('|').next().unwrap_or(spec.name);
                let applies: Vec<usize> = (0..faults.len())
                    .filter(|&i| {
                        faults.get(i).is_some_and(|f| {
                            f.commands.is_empty() || f.commands.iter().any(|n| n == top)
                        })
                    })
                    .collect();
                *index.entry(applies).or_insert_with_key(|applies| {
                    lists.push(rules(faults, applies));
                    (lists.len() - 1) as u16
                })
            })
            .collect();
        Some(Faults { lists, of_cmd })
    }

    /// The fault a request of command `cmd` (its table id) gets, if any: one draw from this
    /// thread's RNG (per worker, no shared state). Commands no fault applies to draw nothing.
    #[inline]
    pub fn pick(&self, cmd: u16) -> Option<Fault> {
        let rules = self.rules_of(cmd);
        if rules.is_empty() {
            return None;
        }
        pick(rules, fastrand::u64(..DRAW_SPAN))
    }

    fn rules_of(&self, cmd: u16) -> &[Rule] {
        let list = match self.of_cmd.get(cmd as usize) {
            Some(&l) => l as usize,
            // Out of the table (a listener `custom_commands` entry): every-command faults only.
            None => 0,
        };
        self.lists.get(list).map_or(&[], |l| l)
    }
}

/// The amortised rules of `faults[i]` for each `i` in `which`, in that (config) order.
fn rules(faults: &[FaultConfig], which: &[usize]) -> Box<[Rule]> {
    let mut cum = 0.0f64;
    which
        .iter()
        .filter_map(|&i| faults.get(i))
        .map(|f| {
            cum += f.fault_enabled;
            Rule {
                below: threshold(cum),
                fault: match f.fault_type {
                    FaultType::Error => Fault::Error {
                        delay: f.delay.filter(|d| !d.is_zero()),
                    },
                    FaultType::Delay => Fault::Delay(f.delay.unwrap_or_default()),
                },
            }
        })
        .collect()
}

/// A cumulative percentage as a draw bound: draws in [0, bound) fire. 100 (or more) covers every
/// draw, 0 none.
fn threshold(percent: f64) -> u64 {
    let share = (percent / 100.0).clamp(0.0, 1.0);
    (share * DRAW_SPAN as f64).round() as u64
}

/// The first rule whose interval holds `draw` (in [0, 2^53)).
fn pick(rules: &[Rule], draw: u64) -> Option<Fault> {
    rules.iter().find(|r| draw < r.below).map(|r| r.fault)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(t: FaultType, pct: f64, delay_ms: u64, cmds: &[&str]) -> FaultConfig {
        FaultConfig {
            fault_type: t,
            fault_enabled: pct,
            delay: (delay_ms > 0).then(|| Duration::from_millis(delay_ms)),
            commands: cmds.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn id(name: &str) -> u16 {
        crate::command::lookup_fullname(name.as_bytes())
            .map(|s| s.id)
            .unwrap_or_else(|| panic!("no command {name}"))
    }

    /// The draw at `percent` of the span.
    fn at(percent: f64) -> u64 {
        threshold(percent)
    }

    const DELAY_10MS: Fault = Fault::Delay(Duration::from_millis(10));
    const ERROR: Fault = Fault::Error { delay: None };

    #[test]
    fn no_faults_no_table() {
        assert!(Faults::new(&[]).is_none());
    }

    /// The brief's example: ERROR 5% on every command, then DELAY 10% on GET. A GET gets the
    /// error for draws in [0, 5) and the delay in [5, 15); a SET only the error, in [0, 5).
    #[test]
    fn percentages_are_amortised_in_config_order() {
        let f = Faults::new(&[
            fault(FaultType::Error, 5.0, 0, &[]),
            fault(FaultType::Delay, 10.0, 10, &["get"]),
        ])
        .unwrap();
        let get = f.rules_of(id("get"));
        assert_eq!(pick(get, 0), Some(ERROR));
        assert_eq!(pick(get, at(5.0) - 1), Some(ERROR));
        assert_eq!(pick(get, at(5.0)), Some(DELAY_10MS));
        assert_eq!(pick(get, at(15.0) - 1), Some(DELAY_10MS));
        assert_eq!(pick(get, at(15.0)), None);
        assert_eq!(pick(get, DRAW_SPAN - 1), None);
        let set = f.rules_of(id("set"));
        assert_eq!(pick(set, at(5.0) - 1), Some(ERROR));
        assert_eq!(pick(set, at(5.0)), None);
        assert_eq!(pick(set, at(10.0)), None);
    }

    /// Sampled through the real RNG: the shares match the percentages, amortised.
    #[test]
    fn shares_follow_the_percentages() {
        let f = Faults::new(&[
            fault(FaultType::Error, 20.0, 0, &[]),
            fault(FaultType::Delay, 30.0, 10, &["get"]),
        ])
        .unwrap();
        let (get, n) = (id("get"), 200_000);
        let (mut errors, mut delays) = (0, 0);
        for _ in 0..n {
            match f.pick(get) {
                Some(Fault::Error { .. }) => errors += 1,
                Some(Fault::Delay(_)) => delays += 1,
                None => {}
            }
        }
        let share = |k: i32| f64::from(k) / f64::from(n);
        assert!((share(errors) - 0.20).abs() < 0.01, "errors {errors}");
        assert!((share(delays) - 0.30).abs() < 0.01, "delays {delays}");
    }

    #[test]
    fn fractional_percentages_are_kept() {
        let f = Faults::new(&[fault(FaultType::Error, 0.5, 0, &["get"])]).unwrap();
        let get = f.rules_of(id("get"));
        assert_eq!(pick(get, at(0.49)), Some(ERROR));
        assert_eq!(pick(get, at(0.5)), None);
        // Envoy's integer percent would have made 0.5 either 0 or 1.
        assert_eq!(pick(get, at(0.9)), None);
    }

    #[test]
    fn hundred_covers_every_draw_and_zero_none() {
        let all = Faults::new(&[fault(FaultType::Error, 100.0, 0, &[])]).unwrap();
        let none = Faults::new(&[fault(FaultType::Error, 0.0, 0, &[])]).unwrap();
        for draw in [0, 1, DRAW_SPAN / 2, DRAW_SPAN - 1] {
            assert_eq!(pick(all.rules_of(id("get")), draw), Some(ERROR));
            assert_eq!(pick(none.rules_of(id("get")), draw), None);
        }
        for _ in 0..1000 {
            assert_eq!(all.pick(id("incr")), Some(ERROR));
            assert_eq!(none.pick(id("incr")), None);
        }
    }

    /// Percentages past 100 are not checked (Envoy): the later fault gets what is left.
    #[test]
    fn overlapping_percentages_saturate() {
        let f = Faults::new(&[
            fault(FaultType::Error, 80.0, 0, &[]),
            fault(FaultType::Delay, 50.0, 10, &[]),
        ])
        .unwrap();
        let get = f.rules_of(id("get"));
        assert_eq!(pick(get, at(79.0)), Some(ERROR));
        assert_eq!(pick(get, at(80.0)), Some(DELAY_10MS));
        assert_eq!(pick(get, DRAW_SPAN - 1), Some(DELAY_10MS));
    }

    #[test]
    fn command_lists_limit_a_fault() {
        let f = Faults::new(&[fault(FaultType::Delay, 100.0, 10, &["get", "client"])]).unwrap();
        assert_eq!(f.pick(id("get")), Some(DELAY_10MS));
        assert_eq!(f.pick(id("set")), None);
        assert_eq!(f.pick(id("mget")), None);
        // A container name covers its subcommands (Envoy matches argv[0]).
        assert_eq!(f.pick(id("client|list")), Some(DELAY_10MS));
        // Out of the table (custom commands): only every-command faults.
        assert_eq!(f.pick(u16::MAX - 1), None);
        let every = Faults::new(&[fault(FaultType::Error, 100.0, 0, &[])]).unwrap();
        assert_eq!(every.pick(u16::MAX - 1), Some(ERROR));
    }

    #[test]
    fn error_delay_is_kept_and_commands_share_lists() {
        let f = Faults::new(&[
            fault(FaultType::Error, 100.0, 250, &["set"]),
            fault(FaultType::Delay, 1.0, 10, &[]),
        ])
        .unwrap();
        let e = f.pick(id("set"));
        assert_eq!(
            e,
            Some(Fault::Error {
                delay: Some(Duration::from_millis(250))
            })
        );
        assert_eq!(e.and_then(|e| e.delay()), Some(Duration::from_millis(250)));
        // Two distinct lists: every-command, and set's own (not one per command).
        assert_eq!(f.lists.len(), 2);
    }
}

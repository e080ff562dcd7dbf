//! The write ledger: dedicated keys that only ever see INCR. For each key it counts the INCRs
//! acknowledged (an integer reply came back: Redis applied it and, with `appendfsync always`,
//! wrote it to its AOF first) and the unknown ones (an error reply, or the connection failed
//! before the reply: it may or may not have been applied). At the end every key's value, read
//! straight from the backends, must satisfy acknowledged ≤ value ≤ acknowledged + unknown;
//! an acknowledged INCR missing from the value is a lost write.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::Serialize;

/// Shared, lock-free counters of every ledger key.
pub struct Ledger {
    names: Vec<String>,
    keys: Vec<KeyCounts>,
}

#[derive(Default)]
struct KeyCounts {
    acknowledged: AtomicU64,
    unknown: AtomicU64,
    /// The largest value an acknowledged INCR returned: the key was at least this high once,
    /// so a final value below it is a loss even when the counts alone would not show it.
    max_reply: AtomicI64,
}

impl Ledger {
    /// A ledger of the keys `names`.
    pub fn new(names: Vec<String>) -> Ledger {
        Ledger {
            keys: names.iter().map(|_| KeyCounts::default()).collect(),
            names,
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The name of candidate key `n` (the soak picks the candidates it uses so that every
    /// backend holds its share: see `soak::pick_ledger_keys`).
    pub fn candidate(n: usize) -> String {
        format!("soak:ledger:{n}")
    }

    /// The name of key `i`.
    pub fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("", String::as_str)
    }

    /// An INCR of key `i` answered with `value`.
    pub fn acknowledged(&self, i: usize, value: i64) {
        if let Some(k) = self.keys.get(i) {
            k.acknowledged.fetch_add(1, Ordering::Relaxed);
            k.max_reply.fetch_max(value, Ordering::Relaxed);
        }
    }

    /// An INCR of key `i` whose outcome is unknown.
    pub fn unknown(&self, i: usize) {
        if let Some(k) = self.keys.get(i) {
            k.unknown.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Checks the final `values` (one per key, read from Redis; a missing key is 0).
    pub fn check(&self, values: &[i64]) -> LedgerResult {
        let mut r = LedgerResult {
            keys: self.keys.len(),
            ..LedgerResult::default()
        };
        for (i, (k, &value)) in self.keys.iter().zip(values).enumerate() {
            let ack = k.acknowledged.load(Ordering::Relaxed) as i64;
            let unknown = k.unknown.load(Ordering::Relaxed) as i64;
            let max_reply = k.max_reply.load(Ordering::Relaxed);
            r.acknowledged += ack as u64;
            r.unknown += unknown as u64;
            r.value_sum += value;
            let lost = (ack - value).max(0).max(max_reply - value);
            let extra = (value - ack - unknown).max(0);
            r.lost += lost as u64;
            r.unexplained += extra as u64;
            if lost > 0 || extra > 0 {
                r.violations.push(Violation {
                    key: self.name(i).to_string(),
                    acknowledged: ack as u64,
                    unknown: unknown as u64,
                    max_reply,
                    value,
                });
            }
        }
        r
    }
}

/// The ledger's verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LedgerResult {
    pub keys: usize,
    /// Ledger keys on each backend (redis1, redis2, …).
    pub keys_per_backend: Vec<usize>,
    /// INCRs answered with an integer.
    pub acknowledged: u64,
    /// INCRs answered with an error or never answered.
    pub unknown: u64,
    /// Sum of the final values.
    pub value_sum: i64,
    /// Acknowledged INCRs missing from the final values (max of acknowledged − value and the
    /// largest acknowledged reply − value, per key).
    pub lost: u64,
    /// Increments in the final values beyond acknowledged + unknown (should be impossible).
    pub unexplained: u64,
    /// Keys where either bound failed.
    pub violations: Vec<Violation>,
}

/// One key outside its bounds.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub key: String,
    pub acknowledged: u64,
    pub unknown: u64,
    pub max_reply: i64,
    pub value: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let l = Ledger::new((0..3).map(Ledger::candidate).collect());
        for v in 1..=5 {
            l.acknowledged(0, v);
        }
        l.unknown(0);
        l.acknowledged(1, 1);
        l.acknowledged(1, 2);
        l.acknowledged(2, 1);
        // key 0: 5 ≤ 6 ≤ 6; key 1: value 1 < 2 acknowledged; key 2: 1 ≤ 1 ≤ 1.
        let r = l.check(&[6, 1, 1]);
        assert_eq!((r.acknowledged, r.unknown, r.value_sum), (8, 1, 8));
        assert_eq!((r.lost, r.unexplained, r.violations.len()), (1, 0, 1));
        assert_eq!(r.violations[0].key, "soak:ledger:1");
        // key 0 one above acknowledged + unknown.
        let r = l.check(&[7, 2, 1]);
        assert_eq!((r.lost, r.unexplained), (0, 1));
    }

    #[test]
    fn a_reply_higher_than_the_final_value_is_a_loss() {
        let l = Ledger::new(vec![Ledger::candidate(0)]);
        for _ in 0..4 {
            l.unknown(0);
        }
        l.acknowledged(0, 5);
        // 1 ≤ 2 ≤ 5 by the counts, but the key was 5 once.
        let r = l.check(&[2]);
        assert_eq!(r.lost, 3);
    }
}

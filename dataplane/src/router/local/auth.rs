//! Downstream credentials: the password check and the throttle of repeated failures.
//!
//! **Check.** The given password and every configured one are hashed with SHA-256 and the
//! 32-byte digests compared with `subtle`'s constant-time equality, all of them, without stopping
//! at a match: neither the time to answer nor its variation says how many bytes of a guess were
//! right, nor how long the configured password is. The user name is compared the same way.
//!
//! **Throttle.** Redis answers every wrong password at once, so a client can try thousands a
//! second. Here failures are counted twice, per connection and per source address, and each
//! count follows one [`Rule`]: its first `free` failures cost nothing; the failure that reaches
//! `free` and each one after it start a back-off (`base`, doubled per further failure, at most
//! `max`) during which AUTH and `HELLO … AUTH` are refused unchecked with [`THROTTLED`] (even a
//! right password: a check would answer the guess), and a failure count with no failure and no
//! back-off for `forget` starts again from zero. A refused attempt neither counts as a failure
//! nor lengthens the back-off, so a client that waits it out gets its next try. A success
//! clears the connection's count, not its source's (another client of that address may be the
//! one guessing).
//!
//! - per connection ([`PER_CONNECTION`]): 3 free failures, then 100 ms doubling to 10 s;
//! - per source ([`PER_SOURCE`], the client's IP address; an IPv6 address by its /64, the
//!   block one host usually holds): 10 free failures, then 100 ms doubling to 10 s. The table is
//!   process-wide (every worker and listener share it) and fixed in size: [`SOURCE_BUCKETS`]
//!   atomic words (32 KiB, allocated on the first AUTH of a listener with passwords), an address
//!   picked by a keyed hash (SipHash, a random key per process, so a client cannot aim at
//!   another's bucket). Any number of hostile addresses costs no more memory; addresses that
//!   share a bucket share its back-off, which errs toward refusing.
//!
//! So one source gets its 10 free guesses, then about one every 10 s, whatever number of
//! connections it opens. With no password configured nothing is throttled: every password is
//! accepted for Redis's `default` user, so there is nothing to guess.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::config::ListenerConfig;

/// The reply to an AUTH (or `HELLO … AUTH`) refused during a back-off, unchecked. Redis has no
/// throttle, so no reply of its own for it; an `ERR` every client surfaces as an error.
pub const THROTTLED: &[u8] = b"-ERR too many failed AUTH attempts, retry later\r\n";

/// How a failure count turns into back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Failures that start no back-off.
    pub free: u32,
    /// The first back-off, in ms; each further failure doubles it.
    pub base_ms: u64,
    /// The longest back-off, in ms.
    pub max_ms: u64,
    /// A count whose last failure (or back-off) ended this long ago, in ms, starts again at 0.
    pub forget_ms: u64,
}

/// The per-connection rule: a client that mistyped gets three tries before any wait.
pub const PER_CONNECTION: Rule = Rule {
    free: 3,
    base_ms: 100,
    max_ms: 10_000,
    forget_ms: 60_000,
};

/// The per-source rule: several clients behind one address may each fail once or twice.
pub const PER_SOURCE: Rule = Rule {
    free: 10,
    base_ms: 100,
    max_ms: 10_000,
    forget_ms: 60_000,
};

/// Number of per-source buckets (a power of two): 4096 × 8 bytes.
pub const SOURCE_BUCKETS: usize = 4096;

/// Bits of a packed [`Backoff`] holding the back-off's end (ms since the throttle's epoch: 8 900
/// years); the 16 above hold the failure count.
const UNTIL_BITS: u32 = 48;
const UNTIL_MASK: u64 = (1 << UNTIL_BITS) - 1;
const MAX_FAILS: u64 = u16::MAX as u64;

/// One failure count and the end of its back-off, packed in a word so a source's can be one
/// atomic. The default is no failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff(u64);

impl Backoff {
    /// Failures counted.
    pub fn failures(self) -> u32 {
        (self.0 >> UNTIL_BITS) as u32
    }

    /// When the back-off ends (ms since the epoch); the time of the last failure when that
    /// started none.
    pub fn until_ms(self) -> u64 {
        self.0 & UNTIL_MASK
    }

    /// True while AUTH is refused at `now_ms`.
    pub fn blocked(self, now_ms: u64) -> bool {
        now_ms < self.until_ms()
    }

    /// The state after a failure at `now_ms` under `rule`.
    #[must_use]
    pub fn failed(self, now_ms: u64, rule: &Rule) -> Backoff {
        let mut fails = u64::from(self.failures());
        if now_ms >= self.until_ms().saturating_add(rule.forget_ms) {
            fails = 0;
        }
        fails = (fails + 1).min(MAX_FAILS);
        let wait = match fails.checked_sub(u64::from(rule.free)) {
            // Doubling past 2^20 × base is far beyond any sensible `max`.
            Some(over) => rule
                .base_ms
                .saturating_mul(1 << over.min(20))
                .min(rule.max_ms),
            None => 0,
        };
        let until = now_ms.saturating_add(wait).min(UNTIL_MASK);
        Backoff((fails << UNTIL_BITS) | until)
    }
}

/// The process-wide per-source failure table (see the module docs).
pub struct SourceThrottle {
    epoch: Instant,
    key: std::collections::hash_map::RandomState,
    buckets: Box<[AtomicU64]>,
}

impl Default for SourceThrottle {
    fn default() -> SourceThrottle {
        SourceThrottle::new(SOURCE_BUCKETS)
    }
}

/// The table every listener uses; allocated on first use.
pub static SOURCES: LazyLock<SourceThrottle> = LazyLock::new(SourceThrottle::default);

impl SourceThrottle {
    /// A table of `buckets` entries (rounded up to a power of two, at least one).
    pub fn new(buckets: usize) -> SourceThrottle {
        let n = buckets.max(1).next_power_of_two();
        SourceThrottle {
            epoch: Instant::now(),
            key: std::collections::hash_map::RandomState::new(),
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Now, in the ms every [`Backoff`] of this table (and of the connections that use it)
    /// counts in.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(UNTIL_MASK)
    }

    fn bucket(&self, ip: IpAddr) -> Option<&AtomicU64> {
        let source: u128 = match ip {
            IpAddr::V4(v4) => u128::from(v4.to_bits()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => u128::from(v4.to_bits()),
                // The /64, tagged apart from every IPv4 address.
                None => (v6.to_bits() >> 64) | (1 << 127),
            },
        };
        let h = self.key.hash_one(source) as usize;
        self.buckets.get(h & (self.buckets.len() - 1))
    }

    /// The back-off state of `ip`'s bucket.
    pub fn state(&self, ip: IpAddr) -> Backoff {
        self.bucket(ip)
            .map_or(Backoff::default(), |b| Backoff(b.load(Ordering::Relaxed)))
    }

    /// Counts a failure of `ip` at `now_ms` under [`PER_SOURCE`].
    pub fn failed(&self, ip: IpAddr, now_ms: u64) {
        if let Some(b) = self.bucket(ip) {
            // The closure always answers Some: fetch_update cannot fail.
            let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(Backoff(v).failed(now_ms, &PER_SOURCE).0)
            });
        }
    }
}

/// A constant-time comparison of `a` and `b` through their SHA-256 digests.
fn digest_eq(a: &[u8], b: &[u8]) -> Choice {
    let a: [u8; 32] = Sha256::digest(a).into();
    let b: [u8; 32] = Sha256::digest(b).into();
    a.ct_eq(&b)
}

/// True if `user`/`password` are the listener's downstream credentials. As in Redis, a password
/// alone means the `default` user: with `downstream_auth_username` set, that is not enough.
/// Every configured password is compared, in constant time.
pub fn credentials_ok(cfg: &ListenerConfig, user: Option<&[u8]>, password: &[u8]) -> bool {
    let want_user = cfg
        .downstream_auth_username
        .as_deref()
        .map_or(b"default".as_slice(), str::as_bytes);
    let user_ok = digest_eq(user.unwrap_or(b"default"), want_user);
    let given: [u8; 32] = Sha256::digest(password).into();
    let mut password_ok = Choice::from(0);
    for p in &cfg.downstream_auth_passwords {
        let want: [u8; 32] = Sha256::digest(p.as_bytes()).into();
        password_ok |= given.ct_eq(&want);
    }
    bool::from(user_ok & password_ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::local::tests::listener;

    #[test]
    fn backoff_starts_after_the_free_failures_and_doubles_to_the_cap() {
        let rule = PER_CONNECTION;
        let mut b = Backoff::default();
        assert!(!b.blocked(0));
        let now = 1_000;
        for i in 1..rule.free {
            b = b.failed(now, &rule);
            assert_eq!(b.failures(), i);
            assert!(!b.blocked(now), "failure {i} is free");
        }
        // The failure that reaches `free` starts the first back-off.
        b = b.failed(now, &rule);
        assert!(b.blocked(now));
        assert!(b.blocked(now + 99));
        assert!(!b.blocked(now + 100));
        let mut t = now + 100;
        let mut want = 200;
        for _ in 0..10 {
            b = b.failed(t, &rule);
            assert_eq!(b.until_ms() - t, want.min(rule.max_ms));
            t = b.until_ms();
            want *= 2;
        }
        assert_eq!(b.failures(), rule.free + 10);
    }

    #[test]
    fn a_quiet_count_is_forgotten() {
        let rule = PER_CONNECTION;
        let mut b = Backoff::default();
        for _ in 0..rule.free {
            b = b.failed(0, &rule);
        }
        assert!(b.blocked(50));
        let later = b.until_ms() + rule.forget_ms;
        b = b.failed(later, &rule);
        assert_eq!(b.failures(), 1);
        assert!(!b.blocked(later));
        // Just before the forget time the count goes on.
        let mut c = Backoff::default();
        for _ in 0..rule.free {
            c = c.failed(0, &rule);
        }
        let c = c.failed(c.until_ms() + rule.forget_ms - 1, &rule);
        assert_eq!(c.failures(), rule.free + 1);
    }

    #[test]
    fn the_count_saturates_and_the_end_fits() {
        let mut b = Backoff::default();
        for _ in 0..70_000 {
            b = b.failed(5, &PER_SOURCE);
        }
        assert_eq!(b.failures(), u16::MAX as u32);
        assert_eq!(b.until_ms(), 5 + PER_SOURCE.max_ms);
        let b = b.failed(UNTIL_MASK, &PER_SOURCE);
        assert_eq!(b.until_ms(), UNTIL_MASK);
    }

    #[test]
    fn sources_are_counted_apart_and_ipv6_by_its_64() {
        let t = SourceThrottle::new(1 << 16);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..PER_SOURCE.free {
            t.failed(a, 10);
        }
        assert!(t.state(a).blocked(10));
        // 65 536 buckets: another address shares a's only by a 1-in-65 536 chance per run.
        assert_eq!(t.state(b).failures(), 0);
        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        t.failed(v6a, 10);
        assert_eq!(t.state(v6b).failures(), 1, "same /64, same count");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(
            t.state(mapped),
            t.state(a),
            "IPv4-mapped is the IPv4 address"
        );
    }

    #[test]
    fn a_table_of_one_bucket_holds_every_source() {
        let t = SourceThrottle::new(0);
        for i in 0..PER_SOURCE.free {
            t.failed(IpAddr::from([10, 0, 0, i as u8]), 0);
        }
        assert!(t.state(IpAddr::from([172, 16, 0, 1])).blocked(0));
    }

    #[test]
    fn credentials_compare_every_password_and_the_user() {
        let l = listener(&["first", "second-longer"], None);
        assert!(credentials_ok(&l, None, b"first"));
        assert!(credentials_ok(&l, None, b"second-longer"));
        assert!(credentials_ok(&l, Some(b"default"), b"first"));
        assert!(!credentials_ok(&l, Some(b"other"), b"first"));
        assert!(!credentials_ok(&l, None, b"firs"));
        assert!(!credentials_ok(&l, None, b"first\0"));
        assert!(!credentials_ok(&l, None, b""));
        let l = listener(&["pw"], Some("app"));
        assert!(credentials_ok(&l, Some(b"app"), b"pw"));
        assert!(!credentials_ok(&l, None, b"pw"));
        assert!(!credentials_ok(&l, Some(b"default"), b"pw"));
        assert!(!credentials_ok(&l, Some(b"ap"), b"pw"));
    }
}

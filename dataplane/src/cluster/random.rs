//! The non-hashing policies, where a key has no fixed host:
//! - `random`: twemproxy 0.5.0 `distribution: random` (twitter/twemproxy
//!   `src/hashkit/nc_random.c`): `random_update` lists each live server once, whatever its
//!   weight, and `random_dispatch` takes entry `random() % ncontinuum`; `server_pool_idx`
//!   skips hashing entirely. Also Envoy's RANDOM, which ignores weights too
//!   (`RandomLoadBalancer::peekOrChoose`: `hosts_to_use[random % hosts_to_use.size()]`).
//! - `round_robin`: Envoy's ROUND_ROBIN: the next host in turn; with unequal weights in the
//!   order of Envoy's earliest-deadline-first scheduler (`EdfScheduler`, source/common/upstream/
//!   edf_scheduler.h): each host's next deadline is `picks / weight` after the start, the
//!   earliest deadline goes next, ties to the entry queued first. One period of that order
//!   (`sum(weight)` turns, host `i` in `weight_i` of them) is computed once, exactly (integer
//!   cross-products instead of Envoy's doubles), and a turn is an index into it.
//! - `least_request` (`least_request.rs`) draws its candidates from here too.
//!
//! Where the draw is made decides which requests stay together: the draw is this thread's
//! current one ([`set_draw`] / [`set_session_draw`]), which the session sets once per client
//! command, and keeps for a whole transaction. Every key of one command (and of one
//! transaction) goes to the same host; no command is split across hosts. A draw carries both a
//! random number (low 32 bits) and the worker's command count (high 32 bits, the round-robin
//! turn). `least_request` depends on load, not only on the draw, so its first pick for a draw
//! is pinned in the session's [`Draw`] and kept for the rest of the command or transaction.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::rc::Rc;

/// The longest round-robin order kept: weights whose sum is larger are scaled down to it
/// (each live host keeping at least one turn).
const MAX_TURNS: u64 = 1 << 16;

/// No host pinned.
const NO_PIN: u32 = u32::MAX;

thread_local! {
    static DRAW: Cell<u64> = const { Cell::new(0) };
    /// Client commands (and transactions) drawn for on this thread: the round-robin turn.
    static TURN: Cell<u32> = const { Cell::new(0) };
    /// The session whose draw is current, where a `least_request` pick is pinned.
    static SESSION: RefCell<Option<Rc<Draw>>> = const { RefCell::new(None) };
    /// The pin of a draw set without a session ([`set_draw`]).
    static LOOSE_PIN: Cell<u32> = const { Cell::new(NO_PIN) };
}

/// One session's draw: the number its commands are placed by, and the host a `least_request`
/// cluster picked for it (kept while the draw is).
#[derive(Debug)]
pub struct Draw {
    bits: Cell<u64>,
    pin: Cell<u32>,
}

impl Default for Draw {
    fn default() -> Draw {
        Draw {
            bits: Cell::new(0),
            pin: Cell::new(NO_PIN),
        }
    }
}

impl Draw {
    /// A fresh draw ([`new_draw`]) for the session's next command; forgets the pin.
    #[inline]
    pub fn renew(&self) {
        self.bits.set(new_draw());
        self.pin.set(NO_PIN);
    }
}

/// Makes `draw` the random number every pick on this thread uses until the next call, with no
/// session to pin a `least_request` pick in (it is pinned until the next call).
#[inline]
pub fn set_draw(draw: u64) {
    DRAW.with(|d| d.set(draw));
    LOOSE_PIN.with(|p| p.set(NO_PIN));
    SESSION.with(|s| s.borrow_mut().take());
}

/// Makes `draw` (a session's) current on this thread: [`set_draw`] with its number, and its
/// pin where `least_request` finds and keeps it.
#[inline]
pub fn set_session_draw(draw: &Rc<Draw>) {
    DRAW.with(|d| d.set(draw.bits.get()));
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        if !s.as_ref().is_some_and(|cur| Rc::ptr_eq(cur, draw)) {
            *s = Some(draw.clone());
        }
    });
}

/// The host pinned for the current draw, if any.
#[inline]
pub(super) fn pinned() -> Option<usize> {
    let pin = SESSION.with(|s| match &*s.borrow() {
        Some(d) => d.pin.get(),
        None => LOOSE_PIN.with(Cell::get),
    });
    (pin != NO_PIN).then_some(pin as usize)
}

/// Pins `host` for the current draw.
#[inline]
pub(super) fn pin(host: usize) {
    let host = u32::try_from(host).unwrap_or(NO_PIN);
    SESSION.with(|s| match &*s.borrow() {
        Some(d) => d.pin.set(host),
        None => LOOSE_PIN.with(|p| p.set(host)),
    });
}

/// A fresh draw for [`set_draw`]: this thread's next round-robin turn and a random number.
#[inline]
pub fn new_draw() -> u64 {
    let turn = TURN.with(|t| {
        let n = t.get();
        t.set(n.wrapping_add(1));
        n
    });
    (u64::from(turn) << 32) | u64::from(fastrand::u32(..))
}

/// `random` or `round_robin` over a table of host indices.
#[derive(Debug, Clone)]
pub(super) struct Random {
    /// Random: the live hosts (weight > 0), each once. Round robin: one period of the
    /// weighted order.
    hosts: Vec<u32>,
    /// Round robin: the draw's turn; random: its random number.
    turns: bool,
}

impl Random {
    /// `random` over the hosts of `weights` that are > 0, each equally likely.
    pub(super) fn new(weights: &[u32]) -> Random {
        Random {
            hosts: live(weights),
            turns: false,
        }
    }

    /// `round_robin` over the hosts of `weights` that are > 0, in weighted (EDF) order.
    pub(super) fn round_robin(weights: &[u32]) -> Random {
        Random {
            hosts: edf_order(weights),
            turns: true,
        }
    }

    #[inline]
    pub(super) fn pick(&self) -> usize {
        let n = self.hosts.len().max(1);
        let draw = DRAW.with(Cell::get);
        let draw = if self.turns {
            draw >> 32
        } else {
            draw & 0xffff_ffff
        } as usize;
        self.hosts.get(draw % n).map_or(0, |&h| h as usize)
    }
}

/// The indices of `weights` that are > 0.
pub(super) fn live(weights: &[u32]) -> Vec<u32> {
    (0..weights.len() as u32)
        .filter(|&i| weights.get(i as usize).is_some_and(|&w| w > 0))
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One host's place in the EDF queue: its next deadline `picks / weight` and the order it was
/// queued in (Envoy's `order_offset`, which breaks ties).
#[derive(PartialEq, Eq)]
struct Entry {
    picks: u64,
    weight: u64,
    queued: u64,
    host: u32,
}

impl Ord for Entry {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest deadline, then the entry
    /// queued first.
    fn cmp(&self, other: &Entry) -> Ordering {
        let mine = u128::from(self.picks) * u128::from(other.weight);
        let theirs = u128::from(other.picks) * u128::from(self.weight);
        theirs
            .cmp(&mine)
            .then_with(|| other.queued.cmp(&self.queued))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One period of Envoy's EDF round-robin order over the hosts of `weights` that are > 0:
/// `sum(weight)` entries after dividing the weights by their gcd (scaled down to at most
/// [`MAX_TURNS`] entries). Equal weights give each live host once, in config order.
pub(super) fn edf_order(weights: &[u32]) -> Vec<u32> {
    let hosts = live(weights);
    let mut w: Vec<u64> = hosts
        .iter()
        .map(|&h| weights.get(h as usize).map_or(1, |&w| u64::from(w)))
        .collect();
    let g = w.iter().fold(0, |g, &x| gcd(g, x)).max(1);
    w.iter_mut().for_each(|x| *x /= g);
    let total: u64 = w.iter().sum();
    if total > MAX_TURNS {
        w.iter_mut()
            .for_each(|x| *x = (*x * MAX_TURNS / total).max(1));
    }
    let total: u64 = w.iter().sum();
    let mut heap: BinaryHeap<Entry> = hosts
        .iter()
        .zip(&w)
        .enumerate()
        .map(|(i, (&host, &weight))| Entry {
            picks: 1,
            weight,
            queued: i as u64,
            host,
        })
        .collect();
    let mut order = Vec::with_capacity(total as usize);
    let mut queued = hosts.len() as u64;
    while (order.len() as u64) < total {
        let Some(mut e) = heap.pop() else { break };
        order.push(e.host);
        e.picks += 1;
        e.queued = queued;
        queued += 1;
        heap.push(e);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edf_equal_weights_is_plain_turns() {
        assert_eq!(edf_order(&[1, 1, 1]), [0, 1, 2]);
        assert_eq!(edf_order(&[5, 5, 0, 5]), [0, 1, 3]);
        assert_eq!(edf_order(&[]), Vec::<u32>::new());
    }

    #[test]
    fn edf_weighted_order() {
        // Deadlines: host 0 (w 2) at 1/2 and 2/2, host 1 (w 1) at 1/1. The tie at 1 goes to
        // host 1, queued at the start, before host 0's re-queued entry.
        assert_eq!(edf_order(&[2, 1]), [0, 1, 0]);
        // Weights 3:1 → 3/4 of the turns to host 0, spread: 1/3, 2/3, then 1 (host 1, queued
        // at the start), then host 0's 3/3.
        assert_eq!(edf_order(&[3, 1]), [0, 0, 1, 0]);
        // gcd reduced: 4:2 is 2:1.
        assert_eq!(edf_order(&[4, 2]), edf_order(&[2, 1]));
        let o = edf_order(&[5, 3, 2]);
        assert_eq!(o.len(), 10);
        for (h, w) in [(0, 5), (1, 3), (2, 2)] {
            assert_eq!(o.iter().filter(|&&x| x == h).count(), w);
        }
    }

    #[test]
    fn edf_huge_weights_are_scaled() {
        let o = edf_order(&[u32::MAX, 1]);
        assert!(o.len() as u64 <= MAX_TURNS + 1);
        assert_eq!(o.iter().filter(|&&x| x == 1).count(), 1);
    }

    #[test]
    fn round_robin_follows_turns() {
        let rr = Random::round_robin(&[3, 1]);
        let picks: Vec<usize> = (0..8u64)
            .map(|t| {
                set_draw(t << 32 | 12345);
                rr.pick()
            })
            .collect();
        assert_eq!(picks, [0, 0, 1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn random_ignores_weights() {
        let r = Random::new(&[9, 1, 0]);
        set_draw(1);
        assert_eq!(r.pick(), 1);
        set_draw(2);
        assert_eq!(r.pick(), 0);
    }

    #[test]
    fn pins_follow_the_session_draw() {
        let a = Rc::new(Draw::default());
        let b = Rc::new(Draw::default());
        set_session_draw(&a);
        assert_eq!(pinned(), None);
        pin(3);
        set_session_draw(&b);
        assert_eq!(pinned(), None);
        pin(1);
        set_session_draw(&a);
        assert_eq!(pinned(), Some(3));
        a.renew();
        set_session_draw(&a);
        assert_eq!(pinned(), None);
        set_draw(7);
        assert_eq!(pinned(), None);
        pin(2);
        assert_eq!(pinned(), Some(2));
    }
}

//! The non-hashing policies, where a key has no fixed host:
//! - `random`: twemproxy 0.5.0 `distribution: random` (twitter/twemproxy
//!   `src/hashkit/nc_random.c`): `random_update` lists each live server once, whatever its
//!   weight, and `random_dispatch` takes entry `random() % ncontinuum`; `server_pool_idx`
//!   skips hashing entirely. Also Envoy's RANDOM with equal weights.
//! - `round_robin`: Envoy's ROUND_ROBIN with equal weights: the next host in turn.
//!
//! Where the draw is made decides which requests stay together: the draw is this thread's
//! current one ([`set_draw`]), which the session sets once per client command, and keeps for a
//! whole transaction. Every key of one command (and of one transaction) goes to the same host;
//! no command is split across hosts. A draw carries both a random number (low 32 bits) and
//! the worker's command count (high 32 bits, the round-robin turn).

use std::cell::Cell;

thread_local! {
    static DRAW: Cell<u64> = const { Cell::new(0) };
    /// Client commands (and transactions) drawn for on this thread: the round-robin turn.
    static TURN: Cell<u32> = const { Cell::new(0) };
}

/// Makes `draw` the random number every [`Random::pick`] on this thread uses until the next
/// call (the session's per-command or per-transaction draw).
#[inline]
pub fn set_draw(draw: u64) {
    DRAW.with(|d| d.set(draw));
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

/// The live hosts (weight > 0), each once, and which part of the draw picks among them.
#[derive(Debug, Clone)]
pub(super) struct Random {
    hosts: Vec<u32>,
    /// Round robin: the draw's turn; random: its random number.
    turns: bool,
}

impl Random {
    /// `random` over the hosts of `weights` that are > 0.
    pub(super) fn new(weights: &[u32]) -> Random {
        Random::with_turns(weights, false)
    }

    /// `round_robin` over the hosts of `weights` that are > 0.
    pub(super) fn round_robin(weights: &[u32]) -> Random {
        Random::with_turns(weights, true)
    }

    fn with_turns(weights: &[u32], turns: bool) -> Random {
        Random {
            hosts: (0..weights.len() as u32)
                .filter(|&i| weights.get(i as usize).is_some_and(|&w| w > 0))
                .collect(),
            turns,
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

//! twemproxy 0.5.0 `distribution: random` (twitter/twemproxy `src/hashkit/nc_random.c`):
//! `random_update` lists each live server once, whatever its weight, and `random_dispatch`
//! takes entry `random() % ncontinuum`; `server_pool_idx` skips hashing entirely.
//!
//! A key has no home here, so where the draw is made decides which requests stay together:
//! the draw is this thread's current one ([`set_draw`]), which the session sets once per
//! client command, and keeps for a whole transaction. Every key of one command (and of one
//! transaction) goes to the same host; no command is split across hosts.

use std::cell::Cell;

thread_local! {
    static DRAW: Cell<u32> = const { Cell::new(0) };
}

/// Makes `draw` the random number every [`Random::pick`] on this thread uses until the next
/// call (the session's per-command or per-transaction draw).
#[inline]
pub fn set_draw(draw: u32) {
    DRAW.with(|d| d.set(draw));
}

/// A fresh draw for [`set_draw`].
#[inline]
pub fn new_draw() -> u32 {
    fastrand::u32(..)
}

/// The live hosts (weight > 0), each once.
#[derive(Debug, Clone)]
pub(super) struct Random {
    hosts: Vec<u32>,
}

impl Random {
    pub(super) fn new(weights: &[u32]) -> Random {
        Random {
            hosts: (0..weights.len() as u32)
                .filter(|&i| weights.get(i as usize).is_some_and(|&w| w > 0))
                .collect(),
        }
    }

    #[inline]
    pub(super) fn pick(&self) -> usize {
        let n = self.hosts.len().max(1);
        let draw = DRAW.with(Cell::get) as usize;
        self.hosts.get(draw % n).map_or(0, |&h| h as usize)
    }
}

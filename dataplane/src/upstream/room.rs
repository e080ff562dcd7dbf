//! The waiting room of a shared upstream connection: requests that arrive while its reply
//! window is full wait here, one queue per sender, and leave in round robin, one request per
//! sender per turn.
//!
//! Why: a connection is shared by every session of the worker that routes to its host. With
//! one first-in first-out queue, a client that pipelines thousands of requests for large values
//! puts them all ahead of everyone else's, and a well-behaved client of the same host waits for
//! all of them (seconds under an attack). In turns, a sender waits behind at most one request of
//! each other sender. Each sender's own requests keep their order, which is the only order a
//! client can see; between senders there is none to keep (Redis gives none across
//! connections either).
//!
//! A light sender (one that holds and awaits little, [`super::Deliver::light`]: by its own
//! recent replies, or a new client's by the worker's, it asks for small values) that had
//! nothing waiting takes a first turn instead of the last, for that one request: a well-behaved
//! client of the host waits behind the other light senders only, not behind one request of
//! every flooding client (thousands of them arriving at once, each asking for a large value).
//! What it asks for is small by that estimate, so going first delays the others little; its
//! later requests wait their turns like anyone's. First turns go at most [`FIRST_STREAK`] in a
//! row while others wait, so a stream of light requests cannot starve the rest.
//!
//! At the connection's bound (`max_pending_requests`) the room is full: a sender waiting less
//! than another takes the newest place of the one waiting most (longest-queue drop), so a
//! client sending one request at a time is not refused because others flooded the room.

use std::collections::{HashMap, VecDeque};

/// Senders looked at, next in turn, for the one waiting most when the room is full: a sample
/// keeps that bounded while thousands of senders wait (they are served soonest, so their
/// newest requests are the furthest from going out).
const SAMPLE: usize = 64;

/// First turns served in a row while senders wait in the ordinary turns: past it one of those
/// goes, so they keep at least one turn in `FIRST_STREAK + 1`.
const FIRST_STREAK: u32 = 8;

/// Requests waiting for room, by sender. `T` is the request; a sender is any key that tells
/// clients apart (the client session's id: its own requests and the mirror copies of them
/// share it).
pub(super) struct Room<T> {
    /// Each waiting sender's requests, oldest first. A sender leaves the map when its queue
    /// empties, so the map holds only senders that wait.
    queues: HashMap<usize, VecDeque<T>>,
    /// Senders with waiting requests, in turn order: the front is served next.
    turns: VecDeque<usize>,
    /// Light senders' first turns: served before `turns` (see [`FIRST_STREAK`]).
    first: VecDeque<usize>,
    /// First turns served in a row.
    streak: u32,
    /// Requests waiting, over every sender.
    len: usize,
}

impl<T> Default for Room<T> {
    fn default() -> Self {
        Room {
            queues: HashMap::new(),
            turns: VecDeque::new(),
            first: VecDeque::new(),
            streak: 0,
            len: 0,
        }
    }
}

impl<T> Room<T> {
    /// Requests waiting, over every sender.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing waits (the connection's fast path: one load).
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `item` waits behind `sender`'s earlier requests; a sender not yet waiting takes the
    /// last turn, or the first when it is `light` (see the module's doc).
    pub(super) fn push(&mut self, sender: usize, item: T, light: bool) {
        let queue = self.queues.entry(sender).or_default();
        if queue.is_empty() {
            if light {
                self.first.push_back(sender);
            } else {
                self.turns.push_back(sender);
            }
        }
        queue.push_back(item);
        self.len += 1;
    }

    /// The oldest request of the sender whose turn it is, and the sender; that sender goes to
    /// the back of the turns if it has more.
    pub(super) fn pop(&mut self) -> Option<(usize, T)> {
        while let Some(sender) = self.next_turn() {
            let Some(queue) = self.queues.get_mut(&sender) else {
                continue;
            };
            let Some(item) = queue.pop_front() else {
                self.queues.remove(&sender);
                continue;
            };
            if queue.is_empty() {
                self.queues.remove(&sender);
            } else {
                self.turns.push_back(sender);
            }
            self.len -= 1;
            return Some((sender, item));
        }
        None
    }

    /// Whose turn it is: a first turn while the streak allows, else an ordinary one.
    fn next_turn(&mut self) -> Option<usize> {
        if (self.streak < FIRST_STREAK || self.turns.is_empty())
            && let Some(sender) = self.first.pop_front()
        {
            self.streak = self.streak.saturating_add(1);
            return Some(sender);
        }
        self.streak = 0;
        self.turns.pop_front()
    }

    /// The room is full and `sender` has one more request: takes the newest request of the
    /// sender waiting most (among the [`SAMPLE`] next in each of the two turn orders) if it waits more than `sender`
    /// would with its new one, so `sender`'s takes its place; `None` when none does (the new
    /// request is then the one refused).
    pub(super) fn displace_for(&mut self, sender: usize) -> Option<T> {
        let mine = self.queues.get(&sender).map_or(0, VecDeque::len);
        // A sender already waiting its share or more is refused at once: a flood costs no
        // search.
        if mine > 0 && mine.saturating_mul(self.queues.len()) >= self.len {
            return None;
        }
        let (most, victim) = self
            .first
            .iter()
            .take(SAMPLE)
            .chain(self.turns.iter().take(SAMPLE))
            .filter_map(|s| self.queues.get(s).map(|q| (q.len(), *s)))
            .max()?;
        if most <= mine + 1 {
            return None;
        }
        let queue = self.queues.get_mut(&victim)?;
        let item = queue.pop_back()?;
        if queue.is_empty() {
            self.queues.remove(&victim);
        }
        self.len -= 1;
        Some(item)
    }

    /// Takes every waiting request of `sender` (a client that is gone), oldest first.
    pub(super) fn remove(&mut self, sender: usize) -> VecDeque<T> {
        let Some(queue) = self.queues.remove(&sender) else {
            return VecDeque::new();
        };
        self.len -= queue.len();
        // Its turn goes too: left in place, turns of gone senders would fill the sample
        // `displace_for` looks at (thousands of clients evicted at once leave thousands), and a
        // full room would then refuse a newcomer for want of anyone to displace. Clients leave
        // far less often than requests come, so the scan is cheap where it counts.
        self.turns.retain(|s| *s != sender);
        self.first.retain(|s| *s != sender);
        queue
    }

    /// Takes every waiting request (a failed or closed connection answers them).
    pub(super) fn take_all(&mut self) -> Vec<T> {
        let mut all = Vec::with_capacity(self.len);
        while let Some((_, item)) = self.pop() {
            all.push(item);
        }
        self.queues = HashMap::new();
        self.turns = VecDeque::new();
        self.first = VecDeque::new();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_room_gives_the_newest_place_of_the_longest_queue_to_a_shorter_one() {
        let mut room = Room::default();
        for i in 0..6 {
            room.push(1, (1, i), false);
        }
        for i in 0..2 {
            room.push(2, (2, i), false);
        }
        assert_eq!(room.displace_for(3), Some((1, 5)), "the flooder's newest");
        room.push(3, (3, 0), false);
        assert_eq!(room.len(), 8);
        assert_eq!(
            room.displace_for(1),
            None,
            "the longest queue loses its own"
        );
        assert_eq!(room.displace_for(2), Some((1, 4)));
        room.push(2, (2, 2), false);
        // 1 waits 4, 2 waits 3: 2's next would make it 4, as many as 1.
        assert_eq!(room.displace_for(2), None);
        let order: Vec<_> = std::iter::from_fn(|| room.pop().map(|(_, item)| item)).collect();
        assert_eq!(
            order,
            vec![
                (1, 0),
                (2, 0),
                (3, 0),
                (1, 1),
                (2, 1),
                (1, 2),
                (2, 2),
                (1, 3)
            ],
            "each keeps its own order"
        );
    }

    #[test]
    fn a_full_room_displaces_for_a_newcomer_after_many_senders_left() {
        let mut room = Room::default();
        for sender in 0..(3 * SAMPLE) {
            room.push(sender, sender, false);
            room.push(sender, sender, false);
        }
        // The first two samples' worth of senders are gone (evicted clients).
        for sender in 0..(2 * SAMPLE) {
            assert_eq!(room.remove(sender).len(), 2);
        }
        assert_eq!(room.len(), 2 * SAMPLE);
        let taken = room.displace_for(usize::MAX);
        assert!(
            taken.is_some_and(|s| s >= 2 * SAMPLE),
            "a sender still waiting gives its place: {taken:?}"
        );
        // Turns go to senders still waiting only, each once per round.
        let senders: Vec<usize> = std::iter::from_fn(|| room.pop().map(|(s, _)| s))
            .take(SAMPLE)
            .collect();
        assert_eq!(senders, (2 * SAMPLE..3 * SAMPLE).collect::<Vec<_>>());
    }

    #[test]
    fn senders_take_turns_and_keep_their_own_order() {
        let mut room = Room::default();
        assert!(room.is_empty());
        // Sender 1 floods first; 2 and 3 arrive behind it.
        for i in 0..5 {
            room.push(1, (1, i), false);
        }
        room.push(2, (2, 0), false);
        room.push(3, (3, 0), false);
        room.push(2, (2, 1), false);
        assert_eq!(room.len(), 8);
        let order: Vec<_> = std::iter::from_fn(|| room.pop().map(|(_, item)| item)).collect();
        assert_eq!(
            order,
            [
                (1, 0),
                (2, 0),
                (3, 0),
                (1, 1),
                (2, 1),
                (1, 2),
                (1, 3),
                (1, 4)
            ]
        );
        assert!(room.is_empty());
        assert_eq!(room.len(), 0);
        assert!(room.queues.is_empty() && room.turns.is_empty() && room.first.is_empty());
    }

    #[test]
    fn a_sender_that_comes_back_takes_the_last_turn() {
        let mut room = Room::default();
        room.push(1, 'a', false);
        room.push(2, 'b', false);
        assert_eq!(room.pop(), Some((1, 'a')));
        room.push(1, 'c', false);
        room.push(3, 'd', false);
        assert_eq!(room.pop(), Some((2, 'b')));
        assert_eq!(room.pop(), Some((1, 'c')));
        assert_eq!(room.pop(), Some((3, 'd')));
        assert_eq!(room.pop(), None);
    }

    #[test]
    fn a_removed_sender_loses_its_queue_and_its_turn() {
        let mut room = Room::default();
        for i in 0..3 {
            room.push(7, i, false);
        }
        room.push(8, 10, false);
        assert_eq!(room.remove(7), [0, 1, 2]);
        assert_eq!(room.len(), 1);
        assert_eq!(room.pop(), Some((8, 10)));
        assert_eq!(room.pop(), None);
        assert!(room.is_empty() && room.remove(7).is_empty());
    }

    #[test]
    fn take_all_empties_the_room() {
        let mut room = Room::default();
        for i in 0..4 {
            room.push(i % 2, i, false);
        }
        let mut all = room.take_all();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2, 3]);
        assert!(room.is_empty());
        assert_eq!(room.pop(), None);
    }

    #[test]
    fn a_light_sender_goes_first_once_then_takes_turns() {
        let mut room = Room::default();
        for sender in 1..=3 {
            room.push(sender, (sender, 0), false);
            room.push(sender, (sender, 1), false);
        }
        room.push(9, (9, 0), true);
        room.push(9, (9, 1), true);
        room.push(8, (8, 0), true);
        let order: Vec<_> = std::iter::from_fn(|| room.pop().map(|(_, item)| item)).collect();
        assert_eq!(
            order,
            [
                (9, 0),
                (8, 0),
                (1, 0),
                (2, 0),
                (3, 0),
                (9, 1),
                (1, 1),
                (2, 1),
                (3, 1)
            ],
            "light senders first, in their order, once; then every sender in turns"
        );
        // A light sender already waiting keeps its place: it is not moved ahead again.
        room.push(1, (1, 2), false);
        room.push(9, (9, 2), false);
        room.push(9, (9, 3), true);
        assert_eq!(room.pop(), Some((1, (1, 2))));
        assert_eq!(room.pop(), Some((9, (9, 2))));
        assert_eq!(room.pop(), Some((9, (9, 3))));
        assert_eq!(room.pop(), None);
    }

    #[test]
    fn first_turns_do_not_starve_the_ordinary_ones() {
        let mut room = Room::default();
        room.push(1, 1000, false);
        for light in 2..40 {
            room.push(light, light, true);
        }
        let order: Vec<_> = std::iter::from_fn(|| room.pop().map(|(_, item)| item))
            .take(10)
            .collect();
        assert_eq!(order, [2, 3, 4, 5, 6, 7, 8, 9, 1000, 10]);
    }

    #[test]
    fn a_full_room_displaces_a_flooder_that_came_in_light() {
        let mut room = Room::default();
        for i in 0..6 {
            room.push(1, (1, i), true);
        }
        room.push(2, (2, 0), false);
        assert_eq!(room.displace_for(3), Some((1, 5)));
    }
}

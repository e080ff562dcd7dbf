//! Process-wide subscription counts, so the counts clients read are Redis's own for what they
//! see. Redis counts each of Respite's upstream subscriptions as one receiver; behind it sit
//! any number of local subscribers. `PUBLISH`, `SPUBLISH`, `PUBSUB NUMSUB` and `SHARDNUMSUB`
//! are answered by Redis and then corrected: Respite's upstream subscriptions that Redis may
//! have counted come off its count (never below zero), and the local subscribers that receive
//! the message are added. A subscription being unsubscribed (its last local subscriber gone)
//! may or may not still be counted by Redis when the `PUBLISH` reaches it, since the two go on
//! different connections; taking it off a count that does not hold it would undercount, so
//! the count never goes below what Redis counted besides Respite.
//!
//! Each worker reports, per name it holds, the hosts where Redis confirmed its subscription and
//! its local subscribers; a name not yet (or no longer) confirmed anywhere has no receivers.
//! Only subscribes, unsubscribes and upstream confirmations write here, under one lock; a
//! `PUBLISH` reads it only while the process holds any subscription at all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::resp::pubsub::{Correction, Topic, pattern_matches};

/// One worker's hold on a name: the hosts where its subscription is confirmed, and its local
/// subscribers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Hold {
    homes: Vec<SocketAddr>,
    members: i64,
}

/// Every worker's hold on one name, by worker id.
type Tally = Vec<(usize, Hold)>;

type Names = HashMap<(Topic, Box<[u8]>), Tally>;

/// The subscription counts of the whole process, by cluster.
#[derive(Default)]
pub struct Counts {
    /// Names with any hold: zero means nothing to correct (the `PUBLISH` fast path).
    held: AtomicUsize,
    clusters: Mutex<HashMap<Arc<str>, Names>>,
}

/// Where a published message reaches an upstream subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Only subscriptions on the host it was published to (a hashed cluster; shard channels).
    Host(SocketAddr),
    /// Subscriptions on every node, though Redis counts only the node it was published to
    /// (classic pub/sub on a Redis Cluster).
    Everywhere(SocketAddr),
}

impl Counts {
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Names>> {
        self.clusters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True while no subscription exists in the process.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.held.load(Ordering::Relaxed) == 0
    }

    /// Worker `worker` now holds `name` with `members` local subscribers, confirmed upstream
    /// on `homes` (both zero/empty: it no longer holds it).
    pub fn set(
        &self,
        cluster: &str,
        topic: Topic,
        name: &[u8],
        worker: usize,
        homes: Vec<SocketAddr>,
        members: usize,
    ) {
        let hold = Hold {
            homes,
            members: i64::try_from(members).unwrap_or(i64::MAX),
        };
        let mut clusters = self.lock();
        if !clusters.contains_key(cluster) {
            clusters.insert(cluster.into(), Names::new());
        }
        let Some(names) = clusters.get_mut(cluster) else {
            return;
        };
        let key = (topic, Box::<[u8]>::from(name));
        let fresh = !names.contains_key(&key);
        let tally = names.entry(key.clone()).or_default();
        tally.retain(|(w, _)| *w != worker);
        if hold != Hold::default() {
            tally.push((worker, hold));
        }
        if tally.is_empty() {
            names.remove(&key);
            if !fresh {
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
        } else if fresh {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How to correct the count Redis answered to a `PUBLISH` (`topic` [`Topic::Channel`]) or
    /// `SPUBLISH` ([`Topic::Shard`]) of `channel` that reached it as `reach` says: the upstream
    /// subscriptions Redis may have counted (of the channel, and for `PUBLISH` of every
    /// matching pattern) give way to the local subscribers that receive it.
    pub fn publish_correction(
        &self,
        cluster: &str,
        topic: Topic,
        channel: &[u8],
        reach: Reach,
    ) -> Correction {
        let clusters = self.lock();
        let Some(names) = clusters.get(cluster) else {
            return Correction::default();
        };
        let add = |c: &mut Correction, tally: &Tally| {
            for (_, h) in tally {
                let (counted, receivers) = match reach {
                    Reach::Host(at) if h.homes.contains(&at) => (1, h.members),
                    Reach::Host(_) => (0, 0),
                    Reach::Everywhere(at) => {
                        let receives = if h.homes.is_empty() { 0 } else { h.members };
                        (i64::from(h.homes.contains(&at)), receives)
                    }
                };
                c.counted += counted;
                c.receivers += receivers;
            }
        };
        let mut total = Correction::default();
        if let Some(t) = names.get(&(topic, Box::from(channel))) {
            add(&mut total, t);
        }
        if topic == Topic::Channel {
            for ((kind, pattern), t) in names {
                if *kind == Topic::Pattern && pattern_matches(pattern, channel) {
                    add(&mut total, t);
                }
            }
        }
        total
    }

    /// How to correct the subscriber count of `channel` summed over every host (`PUBSUB
    /// NUMSUB`, `SHARDNUMSUB`): every upstream subscription gives way to the local subscribers.
    pub fn numsub_correction(&self, cluster: &str, topic: Topic, channel: &[u8]) -> Correction {
        let mut c = Correction::default();
        if let Some(t) = self
            .lock()
            .get(cluster)
            .and_then(|names| names.get(&(topic, Box::from(channel))))
        {
            for (_, h) in t.iter().filter(|(_, h)| !h.homes.is_empty()) {
                c.counted += h.homes.len() as i64;
                c.receivers += h.members;
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a correction adds to Redis's count when Redis counted every subscription.
    fn net(c: Correction) -> i64 {
        c.receivers - c.counted
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn deltas_replace_upstream_receivers_by_local_ones() {
        let c = Counts::default();
        let (a, b) = (addr(1), addr(2));
        assert!(c.is_empty());
        // Two workers: 3 and 1 local subscribers of "ch", each subscribed at host a.
        c.set("x", Topic::Channel, b"ch", 0, vec![a], 3);
        c.set("x", Topic::Channel, b"ch", 1, vec![a], 1);
        // A pattern on every host, 2 local subscribers on one worker.
        c.set("x", Topic::Pattern, b"c*", 0, vec![a, b], 2);
        assert!(!c.is_empty());
        let host = |h| Reach::Host(h);
        assert_eq!(
            net(c.publish_correction("x", Topic::Channel, b"ch", host(a))),
            (4 - 2) + (2 - 1)
        );
        assert_eq!(
            net(c.publish_correction("x", Topic::Channel, b"other", host(a))),
            0
        );
        assert_eq!(
            net(c.publish_correction("x", Topic::Channel, b"cx", host(b))),
            1
        );
        assert_eq!(
            net(c.publish_correction("x", Topic::Shard, b"ch", host(a))),
            0
        );
        assert_eq!(
            net(c.publish_correction("y", Topic::Channel, b"ch", host(a))),
            0
        );
        assert_eq!(net(c.numsub_correction("x", Topic::Channel, b"ch")), 2);
        // Published where nobody of ours is subscribed: nothing to correct.
        assert_eq!(
            net(c.publish_correction("x", Topic::Channel, b"ch", host(addr(3)))),
            0
        );
        // A Redis Cluster delivers classic messages everywhere but counts one node.
        assert_eq!(
            net(c.publish_correction("x", Topic::Channel, b"ch", Reach::Everywhere(b))),
            4 + (2 - 1)
        );
        // Not confirmed anywhere: no receivers, nothing counted.
        c.set("x", Topic::Shard, b"s", 0, vec![], 5);
        assert_eq!(
            net(c.publish_correction("x", Topic::Shard, b"s", host(a))),
            0
        );
        assert_eq!(net(c.numsub_correction("x", Topic::Shard, b"s")), 0);
        for (topic, name, w) in [
            (Topic::Channel, &b"ch"[..], 0),
            (Topic::Channel, b"ch", 1),
            (Topic::Pattern, b"c*", 0),
            (Topic::Shard, b"s", 0),
        ] {
            c.set("x", topic, name, w, vec![], 0);
        }
        assert!(c.is_empty());
    }

    /// Redis's `Mix SUBSCRIBE and PSUBSCRIBE` right after a client of `foo*` left: its
    /// worker's PUNSUBSCRIBE may or may not have reached Redis before the PUBLISH did. Either
    /// way the client of `foo.bar` and `foo.*` counts twice, as at Redis.
    #[test]
    fn a_subscription_being_unsubscribed_never_takes_a_receiver_off() {
        let c = Counts::default();
        let a = addr(1);
        c.set("x", Topic::Pattern, b"foo*", 0, vec![a], 0);
        c.set("x", Topic::Channel, b"foo.bar", 1, vec![a], 1);
        c.set("x", Topic::Pattern, b"foo.*", 1, vec![a], 1);
        let k = c.publish_correction("x", Topic::Channel, b"foo.bar", Reach::Host(a));
        assert_eq!(
            k,
            Correction {
                counted: 3,
                receivers: 2
            }
        );
        let still_counted = 3;
        let let_go = 2;
        assert_eq!((k.apply(still_counted), k.apply(let_go)), (2, 2));
    }
}

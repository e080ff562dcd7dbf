//! Process-wide subscription counts, so the counts clients read are Redis's own for what they
//! see. Redis counts each of Respite's upstream subscriptions as one receiver; behind it sit
//! any number of local subscribers. `PUBLISH`, `SPUBLISH`, `PUBSUB NUMSUB` and `SHARDNUMSUB`
//! are answered by Redis and then corrected by the difference: the local subscribers that
//! receive the message, less Respite's upstream subscriptions that Redis counted.
//!
//! Each worker reports, per name it holds, the hosts where Redis confirmed its subscription and
//! its local subscribers; a name not yet (or no longer) confirmed anywhere has no receivers.
//! Only subscribes, unsubscribes and upstream confirmations write here, under one lock; a
//! `PUBLISH` reads it only while the process holds any subscription at all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::resp::pubsub::{Topic, pattern_matches};

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

    /// What to add to the count Redis answered to a `PUBLISH` (`topic` [`Topic::Channel`]) or
    /// `SPUBLISH` ([`Topic::Shard`]) of `channel` that reached it as `reach` says: the local
    /// subscribers that receive it (of the channel, and for `PUBLISH` of every matching
    /// pattern) less the upstream subscriptions that Redis counted.
    pub fn publish_delta(&self, cluster: &str, topic: Topic, channel: &[u8], reach: Reach) -> i64 {
        let clusters = self.lock();
        let Some(names) = clusters.get(cluster) else {
            return 0;
        };
        let delta = |tally: &Tally| -> i64 {
            tally
                .iter()
                .map(|(_, h)| match reach {
                    Reach::Host(at) if h.homes.contains(&at) => h.members - 1,
                    Reach::Host(_) => 0,
                    Reach::Everywhere(at) => {
                        let receives = if h.homes.is_empty() { 0 } else { h.members };
                        receives - i64::from(h.homes.contains(&at))
                    }
                })
                .sum()
        };
        let mut total = names.get(&(topic, Box::from(channel))).map_or(0, &delta);
        if topic == Topic::Channel {
            for ((kind, pattern), t) in names {
                if *kind == Topic::Pattern && pattern_matches(pattern, channel) {
                    total += delta(t);
                }
            }
        }
        total
    }

    /// What to add to the subscriber count of `channel` summed over every host (`PUBSUB
    /// NUMSUB`, `SHARDNUMSUB`): local subscribers less every upstream subscription.
    pub fn numsub_delta(&self, cluster: &str, topic: Topic, channel: &[u8]) -> i64 {
        self.lock()
            .get(cluster)
            .and_then(|names| names.get(&(topic, Box::from(channel))))
            .map_or(0, |t| {
                t.iter()
                    .filter(|(_, h)| !h.homes.is_empty())
                    .map(|(_, h)| h.members - h.homes.len() as i64)
                    .sum()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            c.publish_delta("x", Topic::Channel, b"ch", host(a)),
            (4 - 2) + (2 - 1)
        );
        assert_eq!(c.publish_delta("x", Topic::Channel, b"other", host(a)), 0);
        assert_eq!(c.publish_delta("x", Topic::Channel, b"cx", host(b)), 1);
        assert_eq!(c.publish_delta("x", Topic::Shard, b"ch", host(a)), 0);
        assert_eq!(c.publish_delta("y", Topic::Channel, b"ch", host(a)), 0);
        assert_eq!(c.numsub_delta("x", Topic::Channel, b"ch"), 2);
        // Published where nobody of ours is subscribed: nothing to correct.
        assert_eq!(
            c.publish_delta("x", Topic::Channel, b"ch", host(addr(3))),
            0
        );
        // A Redis Cluster delivers classic messages everywhere but counts one node.
        assert_eq!(
            c.publish_delta("x", Topic::Channel, b"ch", Reach::Everywhere(b)),
            4 + (2 - 1)
        );
        // Not confirmed anywhere: no receivers, nothing counted.
        c.set("x", Topic::Shard, b"s", 0, vec![], 5);
        assert_eq!(c.publish_delta("x", Topic::Shard, b"s", host(a)), 0);
        assert_eq!(c.numsub_delta("x", Topic::Shard, b"s"), 0);
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
}

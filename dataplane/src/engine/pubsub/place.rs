//! Where a subscription lives in a cluster.

use std::net::SocketAddr;

use crate::cluster::{ClusterPool, hash_tag};
use crate::resp::pubsub::Topic;
use crate::router::dispatch::Pool;

/// The hosts `name` (as forwarded) of `topic` is subscribed on in `pool`, where `PUBLISH` and
/// `SPUBLISH` of a channel go too (dispatch places them the same way):
/// - a channel or a shard channel: the host that owns it as a key (the listener's hash-tag rule
///   applied as dispatch applies it); on a Redis Cluster a shard channel's slot primary, and
///   for classic channels one node, slot 0's primary ([`Pool::classic_pubsub`]): Redis Cluster
///   delivers classic messages to every node, so one node can hold every subscription and take
///   every `PUBLISH`, in order, with one server's counts;
/// - a pattern: every host of a hashed cluster, since its channels hash anywhere; on a Redis
///   Cluster that same one node (more would each receive every message);
/// - Redis's keyspace notifications, which no client publishes: `__keyspace@<db>__:<key>` on
///   the host that owns `<key>` (Redis notifies on the node that holds the key), and
///   `__keyevent@<db>__:<event>` on every host (or every primary).
///
/// On a `random` cluster (a key has no home) every channel, shard channel and pattern lives on
/// its one fixed pub/sub host ([`ClusterPool::random_pubsub_home`], where dispatch sends
/// `PUBLISH` and `SPUBLISH` too), and `__keyspace@<db>__:<key>` on every host.
///
/// `tag`: the listener's `hash_tag`. Empty when that host is unknown or unusable now (the
/// caller tries again later).
pub fn place(
    pool: &ClusterPool,
    topic: Topic,
    name: &[u8],
    tag: Option<[u8; 2]>,
) -> Vec<SocketAddr> {
    if pool.is_random() {
        return match (topic, notification(name)) {
            (Topic::Channel, Some(_)) => pool.primary_addrs(),
            _ => pool
                .random_pubsub_home()
                .and_then(|shard| pool.primary_addr(shard))
                .into_iter()
                .collect(),
        };
    }
    let owner = |key: &[u8]| {
        let key = hash_tag(tag, key);
        pool.shard_of(key)
            .and_then(|shard| pool.primary_addr(shard))
            .into_iter()
            .collect()
    };
    let classic = || {
        pool.classic_pubsub()
            .and_then(|shard| pool.primary_addr(shard))
            .into_iter()
            .collect()
    };
    match (topic, notification(name)) {
        (Topic::Channel, Some(Notification::Key(key))) => owner(key),
        (Topic::Channel, Some(Notification::Event)) => pool.primary_addrs(),
        (Topic::Shard, _) => owner(name),
        (Topic::Pattern, _) if !pool.is_redis_cluster() => pool.primary_addrs(),
        (Topic::Channel | Topic::Pattern, _) if pool.is_redis_cluster() => classic(),
        _ => owner(name),
    }
}

/// A keyspace notification channel (Redis `notify.c`): `__keyspace@<db>__:<key>` names a key,
/// `__keyevent@<db>__:<event>` an event of any key.
enum Notification<'a> {
    Key(&'a [u8]),
    Event,
}

fn notification(name: &[u8]) -> Option<Notification<'_>> {
    let (keyspace, rest) = if let Some(rest) = name.strip_prefix(b"__keyspace@") {
        (true, rest)
    } else {
        (false, name.strip_prefix(b"__keyevent@")?)
    };
    let at = rest.windows(3).position(|w| w == b"__:")?;
    let db = rest.get(..at)?;
    if db.is_empty() || !db.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let tail = rest.get(at + 3..)?;
    Some(if keyspace {
        Notification::Key(tail)
    } else {
        Notification::Event
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_channels_name_their_key() {
        assert!(matches!(
            notification(b"__keyspace@0__:user:1"),
            Some(Notification::Key(b"user:1"))
        ));
        assert!(matches!(
            notification(b"__keyspace@12__:"),
            Some(Notification::Key(b""))
        ));
        assert!(matches!(
            notification(b"__keyevent@0__:expired"),
            Some(Notification::Event)
        ));
        assert!(notification(b"__keyspace@x__:k").is_none());
        assert!(notification(b"__keyspace@0_:k").is_none());
        assert!(notification(b"news").is_none());
    }
}

//! [`Pool`] over the worker's upstream pools.

use super::{Client, Pool};
use crate::cluster::{ClusterPool, Dest};
use crate::upstream::{SendError, Target};

impl Pool for ClusterPool {
    /// [`ClusterPool::shard_of`]: `None` for a `rehash` cluster with no healthy host.
    #[inline]
    fn place(&self, key: &[u8]) -> Option<usize> {
        self.shard_of(key)
    }

    #[inline]
    fn nodes(&self) -> usize {
        self.fanout_len()
    }

    /// Slot 0 (its primary) on a Redis Cluster; the fixed pub/sub host of a `random` cluster
    /// ([`ClusterPool::random_pubsub_home`]).
    #[inline]
    fn classic_pubsub(&self) -> Option<usize> {
        if self.is_redis_cluster() {
            return Some(0);
        }
        self.random_pubsub_home()
    }

    /// Classic channels as [`Pool::classic_pubsub`]; shard channels of a `random` cluster on
    /// its fixed pub/sub host too, since a key has no home there.
    #[inline]
    fn pubsub_home(&self, classic: bool) -> Option<usize> {
        if classic {
            self.classic_pubsub()
        } else {
            self.random_pubsub_home()
        }
    }

    #[inline]
    fn send(
        &self,
        dest: Dest,
        client: Client,
        read: bool,
        request: &[u8],
        target: Target,
    ) -> Result<(), SendError> {
        ClusterPool::send(
            self,
            dest,
            client.session,
            client.resp3,
            read,
            request,
            target,
        )
    }
}

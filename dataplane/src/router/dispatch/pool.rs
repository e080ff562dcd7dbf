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

    /// Slot 0 (its primary) on a Redis Cluster.
    #[inline]
    fn classic_pubsub(&self) -> Option<usize> {
        self.is_redis_cluster().then_some(0)
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

//! [`Pool`] over the worker's upstream pools.

use super::{Client, Pool};
use crate::upstream::{ClusterPool, Dest, SendError, Target};

impl Pool for ClusterPool {
    /// [`ClusterPool::shard_of`]; its no-host value (a `rehash` cluster with no healthy host)
    /// is `None`.
    #[inline]
    fn place(&self, key: &[u8]) -> Option<usize> {
        let shard = self.shard_of(key);
        (shard != usize::MAX).then_some(shard)
    }

    #[inline]
    fn nodes(&self) -> usize {
        self.fanout_len()
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

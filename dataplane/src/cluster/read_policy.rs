//! Which node of a Redis Cluster shard serves a read: the order in which `read_policy` tries
//! the primary and the replicas (Envoy `ReadPolicy`).

use crate::config::ReadPolicy;

/// How many nodes `policy` may try for a read of a shard with `nrep` replicas.
pub(super) fn candidates(policy: ReadPolicy, nrep: usize) -> usize {
    match policy {
        ReadPolicy::Primary => 1,
        ReadPolicy::Replica => nrep,
        ReadPolicy::PreferPrimary | ReadPolicy::PreferReplica | ReadPolicy::Any => nrep + 1,
    }
}

/// Candidate `k` (< [`candidates`]) of `policy`'s order for `session`: `None` = the primary,
/// `Some(i)` = replica `i`. Sessions start at different replicas (and, for `any`, nodes), so
/// reads spread while each session keeps to one node, in order.
pub(super) fn candidate(policy: ReadPolicy, nrep: usize, session: u64, k: usize) -> Option<usize> {
    let rot = if nrep > 0 {
        (session % nrep as u64) as usize
    } else {
        0
    };
    match policy {
        ReadPolicy::Primary => None,
        ReadPolicy::PreferPrimary => (k > 0).then(|| (rot + k - 1) % nrep),
        ReadPolicy::Replica => Some((rot + k) % nrep.max(1)),
        ReadPolicy::PreferReplica => (k < nrep).then(|| (rot + k) % nrep),
        ReadPolicy::Any => ((session % (nrep as u64 + 1)) as usize + k)
            .checked_rem(nrep + 1)
            .and_then(|j| j.checked_sub(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(policy: ReadPolicy, nrep: usize, session: u64) -> Vec<Option<usize>> {
        (0..candidates(policy, nrep))
            .map(|k| candidate(policy, nrep, session, k))
            .collect()
    }

    #[test]
    fn read_policy_orders() {
        use ReadPolicy::*;
        assert_eq!(order(Primary, 2, 7), [None]);
        assert_eq!(order(PreferPrimary, 2, 1), [None, Some(1), Some(0)]);
        assert_eq!(order(Replica, 2, 0), [Some(0), Some(1)]);
        assert_eq!(order(Replica, 2, 1), [Some(1), Some(0)]);
        assert_eq!(order(Replica, 0, 5), []);
        assert_eq!(order(PreferReplica, 2, 3), [Some(1), Some(0), None]);
        assert_eq!(order(PreferReplica, 0, 3), [None]);
        assert_eq!(order(Any, 2, 0), [None, Some(0), Some(1)]);
        assert_eq!(order(Any, 2, 1), [Some(0), Some(1), None]);
        assert_eq!(order(Any, 2, 2), [Some(1), None, Some(0)]);
        // Every node is tried exactly once, whatever the session.
        for policy in [PreferPrimary, Replica, PreferReplica, Any] {
            for nrep in 0..4 {
                for session in 0..10 {
                    let mut o = order(policy, nrep, session);
                    o.sort();
                    o.dedup();
                    assert_eq!(
                        o.len(),
                        candidates(policy, nrep),
                        "{policy:?} {nrep} {session}"
                    );
                }
            }
        }
    }
}

//! Which node of a Redis Cluster shard serves a read: the order in which `read_policy` tries
//! the primary and the replicas (Envoy `ReadPolicy`).

use crate::config::ReadPolicy;

/// How many nodes `policy` may try for a read of a shard with `nrep` replicas.
pub(super) fn candidates(policy: ReadPolicy, nrep: usize) -> usize {
    match policy {
        ReadPolicy::Primary => 1,
        ReadPolicy::Replica => nrep,
        ReadPolicy::PreferPrimary
        | ReadPolicy::PreferReplica
        | ReadPolicy::Any
        | ReadPolicy::LocalZoneAffinity
        | ReadPolicy::LocalZoneAffinityReplicasAndPrimary => nrep + 1,
    }
}

/// Candidate `k` (< [`candidates`]) of `policy`'s order for `session`: `None` = the primary,
/// `Some(i)` = replica `i`. Sessions start at different replicas (and, for `any`, nodes), so
/// reads spread while each session keeps to one node, in order. The zone policies, for which
/// no node is known to be local here, take `prefer_replica`'s order (see [`zoned`] for theirs).
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
        ReadPolicy::PreferReplica
        | ReadPolicy::LocalZoneAffinity
        | ReadPolicy::LocalZoneAffinityReplicasAndPrimary => (k < nrep).then(|| (rot + k) % nrep),
        ReadPolicy::Any => ((session % (nrep as u64 + 1)) as usize + k)
            .checked_rem(nrep + 1)
            .and_then(|j| j.checked_sub(1)),
    }
}

/// Candidate `k` (< [`candidates`]) of a zone policy's order, as in [`candidate`]: `None` = the
/// primary, `Some(i)` = replica `i`. `replica_local[i]`: replica `i` is in the listener's
/// `local_zone`; `primary_local`: the primary is. Tiers (Envoy `ReadPolicy` docs,
/// `redis_proxy.proto`): `local_zone_affinity` = local replicas, other replicas, primary;
/// `local_zone_affinity_replicas_and_primary` = local replicas, the primary if local, other
/// replicas, the primary if not local. Within a tier sessions start at different nodes, as in
/// [`candidate`]. Other policies: [`candidate`]'s order.
pub(super) fn zoned(
    policy: ReadPolicy,
    primary_local: bool,
    replica_local: &[bool],
    session: u64,
    k: usize,
) -> Option<usize> {
    let nrep = replica_local.len();
    let primary_early = match policy {
        ReadPolicy::LocalZoneAffinity => false,
        ReadPolicy::LocalZoneAffinityReplicasAndPrimary => primary_local,
        _ => return candidate(policy, nrep, session, k),
    };
    let local = replica_local.iter().filter(|&&l| l).count();
    if k < local {
        return nth(replica_local, true, rotated(session, local, k));
    }
    let k = k - local;
    if primary_early {
        if k == 0 {
            return None;
        }
        return nth(replica_local, false, rotated(session, nrep - local, k - 1));
    }
    nth(replica_local, false, rotated(session, nrep - local, k))
}

/// Position `k` of a tier of `n` nodes that `session` enters at `session % n`; past the tier
/// (`k >= n`) it is returned unchanged, which [`nth`] finds nothing at.
fn rotated(session: u64, n: usize, k: usize) -> usize {
    if k >= n {
        return k;
    }
    ((session % n as u64) as usize + k) % n
}

/// The index of the `j`-th replica whose locality is `local`; `None` (the primary) if fewer.
fn nth(replica_local: &[bool], local: bool, j: usize) -> Option<usize> {
    replica_local
        .iter()
        .enumerate()
        .filter(|(_, l)| **l == local)
        .nth(j)
        .map(|(i, _)| i)
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

    fn zoned_order(
        policy: ReadPolicy,
        primary_local: bool,
        local: &[bool],
        session: u64,
    ) -> Vec<Option<usize>> {
        (0..candidates(policy, local.len()))
            .map(|k| zoned(policy, primary_local, local, session, k))
            .collect()
    }

    #[test]
    fn local_zone_affinity_tiers() {
        use ReadPolicy::*;
        // Replicas 1 and 3 local: they come first (spread by session), then 0 and 2, then
        // the primary.
        let local = [false, true, false, true];
        assert_eq!(
            zoned_order(LocalZoneAffinity, false, &local, 0),
            [Some(1), Some(3), Some(0), Some(2), None]
        );
        assert_eq!(
            zoned_order(LocalZoneAffinity, true, &local, 1),
            [Some(3), Some(1), Some(2), Some(0), None]
        );
        // No local replica: any replica, then the primary (a local primary does not matter).
        assert_eq!(
            zoned_order(LocalZoneAffinity, true, &[false, false], 1),
            [Some(1), Some(0), None]
        );
        assert_eq!(zoned_order(LocalZoneAffinity, false, &[], 3), [None]);
        // Everything local: replicas spread, then the primary.
        assert_eq!(
            zoned_order(LocalZoneAffinity, true, &[true, true], 1),
            [Some(1), Some(0), None]
        );
    }

    #[test]
    fn local_zone_affinity_replicas_and_primary_tiers() {
        use ReadPolicy::*;
        let p = LocalZoneAffinityReplicasAndPrimary;
        // Local replica, then the local primary, then the other replicas.
        assert_eq!(
            zoned_order(p, true, &[false, true, false], 0),
            [Some(1), None, Some(0), Some(2)]
        );
        assert_eq!(
            zoned_order(p, true, &[false, true, false], 1),
            [Some(1), None, Some(2), Some(0)]
        );
        // No local replica, local primary: the primary first.
        assert_eq!(
            zoned_order(p, true, &[false, false], 0),
            [None, Some(0), Some(1)]
        );
        // Primary elsewhere: local replicas, other replicas, the primary.
        assert_eq!(
            zoned_order(p, false, &[false, true], 0),
            [Some(1), Some(0), None]
        );
        assert_eq!(zoned_order(p, true, &[], 0), [None]);
    }

    #[test]
    fn zoned_orders_try_every_node_once() {
        use ReadPolicy::*;
        for policy in [LocalZoneAffinity, LocalZoneAffinityReplicasAndPrimary] {
            for nrep in 0..5usize {
                for bits in 0..(1u32 << nrep) {
                    let local: Vec<bool> = (0..nrep).map(|i| bits & (1 << i) != 0).collect();
                    for primary_local in [false, true] {
                        for session in 0..6 {
                            let mut o = zoned_order(policy, primary_local, &local, session);
                            assert_eq!(o.len(), nrep + 1);
                            o.sort();
                            o.dedup();
                            assert_eq!(o.len(), nrep + 1, "{policy:?} {local:?} {session}");
                        }
                    }
                }
            }
        }
        // Non-zone policies keep their own order.
        assert_eq!(
            zoned(PreferPrimary, true, &[true, true], 1, 1),
            candidate(PreferPrimary, 2, 1, 1)
        );
    }
}

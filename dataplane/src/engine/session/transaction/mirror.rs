//! The copy of a committed transaction for the mirrors of its route (Envoy
//! `request_mirror_policy`): whole, `MULTI` … `EXEC`, to the one shard of a mirror cluster that
//! all its keys go to, or not at all (counted). It reaches the mirror in the client's order:
//! after the client's earlier copies (a fence on their connection), and before its later ones
//! (the client's requests after `EXEC` wait until the mirror has answered it).

use std::rc::Rc;

use super::Dest;
use super::commands::Commands;
use super::exchange::EXEC;
use crate::cluster::ClusterPool;
use crate::engine::worker::ListenerRuntime;
use crate::router::MirrorStats;
use crate::router::dispatch::{Client, MirrorPlace, TxMirrors};
use crate::upstream::Piece;

/// The copy of a committed transaction for one mirror of its route.
pub(super) enum TxCopy {
    /// To this shard of the mirror's pool, the queued commands, then EXEC.
    Whole {
        stats: Rc<MirrorStats>,
        pool: Rc<ClusterPool>,
        shard: usize,
        request: Vec<Piece>,
    },
    /// Its keys go to several shards of the mirror, or to none: not copied, counted.
    Unsendable(Rc<MirrorStats>),
}

impl TxCopy {
    /// Sends the copy of a transaction of `count` commands behind `client`'s earlier copies;
    /// returns once the mirror has answered it ([`MirrorStats::send_transaction`]).
    pub(super) async fn send(self, count: usize, client: Client) {
        match self {
            TxCopy::Whole {
                stats,
                pool,
                shard,
                request,
            } => {
                stats
                    .send_transaction(&pool, shard, request, count, client)
                    .await
            }
            TxCopy::Unsendable(stats) => stats.unsendable(),
        }
    }
}

/// The copies of transaction `queued` (placed in its route's mirrors as `mirrors` says) that
/// go out if it commits: one per mirror that admits it.
pub(super) fn mirror_copies(
    rt: &ListenerRuntime,
    dest: &Dest,
    mirrors: &TxMirrors,
    queued: &Commands,
) -> Vec<TxCopy> {
    let Some(route) = rt.router.by_id(dest.route) else {
        return Vec::new();
    };
    route
        .mirrors
        .iter()
        .zip(&mirrors.places)
        .filter(|(m, _)| m.admits(!mirrors.writes, mirrors.first_key.as_deref()))
        .filter_map(|(m, place)| match *place {
            MirrorPlace::Open => None,
            MirrorPlace::Shard(shard) => {
                let request = match queued.framed(b"", EXEC) {
                    Ok(pieces) => pieces,
                    Err(bytes) => vec![Piece::Bytes(bytes)],
                };
                Some(TxCopy::Whole {
                    stats: m.stats.clone(),
                    pool: m.pool.clone(),
                    shard,
                    request,
                })
            }
            MirrorPlace::Unsendable => Some(TxCopy::Unsendable(m.stats.clone())),
        })
        .collect()
}

/// True for EXEC's reply when the transaction ran: the array of its replies (not the nil of a
/// WATCH conflict, not an error).
pub(super) fn committed(reply: &[u8]) -> bool {
    reply.first() == Some(&b'*') && reply.get(1) != Some(&b'-')
}

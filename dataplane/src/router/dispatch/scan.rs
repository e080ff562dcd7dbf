//! SCAN across nodes: the client's cursor names a node and that node's own cursor
//! ([`crate::command::scan`]); the reply's cursor is rewritten so that a full iteration walks
//! every node in turn.

use super::{Dispatch, Pool, Slots};
use crate::cluster::Dest;
use crate::command::Request;
use crate::command::split::Part;
use crate::command::{CommandSpec, Merge, scan};
use crate::resp::encode;
use crate::upstream::NO_UPSTREAM_HOST;

/// The reply to a cursor that is not a number or names a node the pool does not have.
pub const INVALID_CURSOR: &[u8] = b"-ERR invalid cursor\r\n";

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// SCAN of the catch-all route's pool: the node's part of the iteration, its cursor
    /// rewritten by the merge.
    pub fn scan(&mut self, req: &Request<'_>, spec: &'static CommandSpec) {
        let Some(route) = self.router.keyless() else {
            return self.slots.local(spec.id, NO_UPSTREAM_HOST);
        };
        let pool = &*route.pool;
        let nodes = pool.nodes();
        if nodes == 0 {
            return self.slots.local(spec.id, NO_UPSTREAM_HOST);
        }
        let Some((node, cursor)) = req.arg(1).and_then(|c| scan::decode(c, nodes)) else {
            return self.slots.local(spec.id, INVALID_CURSOR);
        };
        let mut request = Vec::new();
        encode::array_header(&mut request, req.argc());
        encode::bulk(&mut request, b"SCAN");
        let mut text = Vec::with_capacity(20);
        encode::decimal(&mut text, i64::try_from(cursor).unwrap_or(i64::MAX));
        encode::bulk(&mut request, &text);
        for a in req.args().skip(2) {
            encode::bulk(&mut request, a);
        }
        let merge = Merge::ScanCursor {
            shard: node as u32,
            shards: nodes as u32,
        };
        let part = Part {
            shard: Some(node),
            request,
            keys: Vec::new(),
        };
        self.send_parts(spec.id, false, merge, 0, vec![part], |p| {
            p.shard.map(|n| (pool, Dest::Node(n)))
        });
    }
}

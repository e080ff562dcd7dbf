//! Fan-out commands (FLUSHALL, DBSIZE, KEYS, SCRIPT LOAD, …): the request unchanged to every
//! node, the replies merged.

use super::{Dispatch, Pool, Slots};
use crate::cluster::Dest;
use crate::command::Request;
use crate::command::split::Part;
use crate::command::{CommandSpec, Merge};
use crate::upstream::NO_UPSTREAM_HOST;

impl<S: Slots, P: Pool> Dispatch<'_, S, P> {
    /// Sends the request unchanged to every node of the catch-all route's pool and merges the
    /// replies by `merge`; then copies it to the route's mirrors.
    pub fn fan_out(&mut self, req: &Request<'_>, spec: &'static CommandSpec, merge: Merge) {
        let Some(route) = self.router.keyless() else {
            return self.slots.local(spec.id, NO_UPSTREAM_HOST);
        };
        let pool = &*route.pool;
        let nodes = pool.nodes();
        if nodes == 0 {
            return self.slots.local(spec.id, NO_UPSTREAM_HOST);
        }
        let request = req.forward(&mut self.scratch.encoded).to_vec();
        let parts = (0..nodes)
            .map(|node| Part {
                shard: Some(node),
                request: request.clone(),
                keys: Vec::new(),
            })
            .collect();
        // Fan-out commands (SCRIPT LOAD, DBSIZE, WAIT, …) address every primary.
        self.send_parts(spec.id, false, merge, 0, parts, |p| {
            p.shard.map(|n| (pool, Dest::Node(n)))
        });
        self.mirror_fan_out(spec, route, &request);
    }
}

//! Routing of keys to clusters (Envoy `prefix_routes`). For now every key takes the catch-all
//! route; prefix routes, mirrors and faults slot in here without changing callers.

pub mod fault;

use std::rc::Rc;

use crate::upstream::ClusterPool;

/// Per-worker routing table of one listener.
pub struct Router {
    catch_all: Option<Rc<ClusterPool>>,
}

impl Router {
    /// A router that sends every key to `catch_all` (or nowhere: `no upstream host`).
    pub fn new(catch_all: Option<Rc<ClusterPool>>) -> Router {
        Router { catch_all }
    }

    /// The cluster `key` goes to, or `None` when no route matches.
    #[inline]
    pub fn route(&self, _key: &[u8]) -> Option<&Rc<ClusterPool>> {
        self.catch_all.as_ref()
    }
}

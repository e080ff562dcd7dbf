//! The process's blocked clients, by the client id Respite gave them (CLIENT ID), so that
//! `CLIENT UNBLOCK <id>` from any worker finds the backend and the leased connection a
//! blocking command waits on.
//!
//! Only blocking commands touch it (twice each: when the command is written, when its reply
//! came), never the shared request path.
//!
//! An upstream connection's id at Redis is never given to another connection of that server,
//! but a leased connection goes from client to client. So an entry an unblock has
//! [claimed](BlockedClients::claim) makes its holder close the connection instead of returning
//! it ([`Registration::end`]): a `CLIENT UNBLOCK` still on its way can then only reach the
//! client it was meant for, or nobody.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a blocked client waits: the cluster and host of its leased connection, and that
/// connection's id at the host (Redis `CLIENT ID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedAt {
    pub cluster: Arc<str>,
    pub addr: SocketAddr,
    pub upstream_id: u64,
}

struct Entry {
    at: BlockedAt,
    claimed: bool,
}

/// Blocked clients of every worker, by Respite client id.
#[derive(Default)]
pub struct BlockedClients {
    clients: Mutex<HashMap<u64, Entry>>,
}

impl BlockedClients {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Client `client_id` is blocked at `at` until the returned registration ends.
    pub fn register(self: &Arc<Self>, client_id: u64, at: BlockedAt) -> Registration {
        self.lock().insert(client_id, Entry { at, claimed: false });
        Registration {
            clients: self.clone(),
            client_id,
            done: false,
        }
    }

    /// Where client `client_id` is blocked, if it is; its holder will then close the
    /// connection rather than give it to another client.
    pub fn claim(&self, client_id: u64) -> Option<BlockedAt> {
        let mut clients = self.lock();
        let entry = clients.get_mut(&client_id)?;
        entry.claimed = true;
        Some(entry.at.clone())
    }
}

/// A blocked client's entry; removed by [`Registration::end`] or when dropped.
pub struct Registration {
    clients: Arc<BlockedClients>,
    client_id: u64,
    done: bool,
}

impl Registration {
    /// The blocking command has its reply: removes the entry. True when a `CLIENT UNBLOCK`
    /// claimed it, so the connection must be closed, not reused (see the module doc).
    pub fn end(mut self) -> bool {
        self.done = true;
        self.clients
            .lock()
            .remove(&self.client_id)
            .is_some_and(|e| e.claimed)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.done {
            self.clients.lock().remove(&self.client_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: u64) -> BlockedAt {
        BlockedAt {
            cluster: "c".into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 6379)),
            upstream_id: id,
        }
    }

    #[test]
    fn a_claimed_entry_tells_its_holder_to_close() {
        let clients = Arc::new(BlockedClients::default());
        let r = clients.register(7, at(42));
        assert_eq!(clients.claim(8), None);
        assert_eq!(clients.claim(7), Some(at(42)));
        assert!(r.end());
        assert_eq!(clients.claim(7), None);
    }

    #[test]
    fn an_unclaimed_entry_ends_clean_and_drop_removes_it() {
        let clients = Arc::new(BlockedClients::default());
        assert!(!clients.register(1, at(1)).end());
        drop(clients.register(2, at(2)));
        assert_eq!(clients.claim(1), None);
        assert_eq!(clients.claim(2), None);
    }
}

//! `[listeners.dns_cache]` on a Redis Cluster pool: a `MOVED` / `ASK` naming a hostname is
//! resolved through the listener's [`HostnameCache`] (off the worker) and then followed as if
//! it had named the address. While the name is being resolved the request waits, polled
//! from a task of this worker, up to `op_timeout` from its first write; a name that does not
//! resolve, a full cache, or the timeout give the client the redirection unchanged (what it
//! gets without `dns_cache`). This session's later requests of the slot are not held behind
//! the wait (they are while a redirection to an address is followed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::SlotPool;
use crate::cluster::hostname_cache::{HostnameCache, Lookup};
use crate::cluster::redirection::HostRedirect;
use crate::net;
use crate::upstream::{Redirect, Retry, Target};

/// Longest pause between two looks at a pending name.
const POLL_CAP: Duration = Duration::from_millis(20);

impl SlotPool {
    /// The listener's cache, when it has one and `reply` redirects to a hostname.
    pub(super) fn hostname_cache(&self, reply: &[u8]) -> Option<Arc<HostnameCache>> {
        let config = self.settings.dns_cache.as_ref()?;
        HostRedirect::parse(reply)?;
        Some(HostnameCache::shared(config))
    }

    /// Follows `reply`, a redirection to a hostname, once `cache` has resolved it (see the
    /// module doc).
    pub(super) fn follow_hostname(
        &self,
        cache: Arc<HostnameCache>,
        from: std::net::SocketAddr,
        reply: &[u8],
        request: Vec<u8>,
        target: Target,
        retry: Retry,
    ) {
        let Some(h) = HostRedirect::parse(reply) else {
            return self.follow(from, reply, request, target, retry);
        };
        match cache.lookup(h.host, h.port) {
            Lookup::Ready(addr) => self.redirect(from, &h.with_addr(addr), request, target, retry),
            Lookup::Failed => self.follow(from, reply, request, target, retry),
            Lookup::Pending => {
                let Some(me) = self.me.upgrade() else {
                    return self.follow(from, reply, request, target, retry);
                };
                let started = retry.started.unwrap_or_else(Instant::now);
                let deadline = started.checked_add(self.settings.op_timeout);
                let retry = Retry {
                    started: Some(started),
                    ..retry
                };
                let reply = reply.to_vec();
                net::spawn(async move {
                    let mut pause = Duration::from_millis(1);
                    loop {
                        net::sleep(pause).await;
                        pause = pause.saturating_mul(2).min(POLL_CAP);
                        let Some(h) = HostRedirect::parse(&reply) else {
                            return me.follow(from, &reply, request, target, retry);
                        };
                        match cache.lookup(h.host, h.port) {
                            Lookup::Ready(addr) => {
                                let resolved = h.with_addr(addr);
                                return me.redirect(from, &resolved, request, target, retry);
                            }
                            Lookup::Pending if deadline.is_none_or(|d| Instant::now() < d) => {}
                            Lookup::Pending | Lookup::Failed => {
                                return me.follow(from, &reply, request, target, retry);
                            }
                        }
                    }
                });
            }
        }
    }
}

//! The DNS cache behind `[listeners.dns_cache]` (Envoy `ConnPoolSettings.dns_cache_config`, a
//! dynamic forward proxy `DnsCacheConfig`): the hostnames `MOVED` / `ASK` redirections name,
//! resolved off the workers.
//!
//! One cache, with its own thread `respite-dnscache`, per distinct setting in the process (as
//! Envoy shares a cache between users of the same config). A worker asks [`HostnameCache::lookup`]
//! (a short mutex hold, taken only on a hostname redirection): a name resolved already answers
//! at once; a new one is queued for the thread and the caller polls again (the redirected
//! request waits within its `op_timeout`). Entries are resolved again every
//! `dns_refresh_rate`; a refresh that fails keeps the last address. At `max_hosts` names a
//! further name is refused ([`Lookup::Failed`]; the client gets the redirection), as Envoy's
//! cache overflows. The address used is the first of `dns_lookup_family`
//! ([`super::dns::pick_family`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::DnsCacheConfig;

use super::dns::{Lookup as Resolve, pick_family, system_lookup};

/// What the cache knows of a name now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Resolved: use this address.
    Ready(SocketAddr),
    /// Queued or being resolved: ask again shortly.
    Pending,
    /// It did not resolve (no address of the family), or the cache is full.
    Failed,
}

/// A cached name: `(host, port)`.
type Name = (String, u16);

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// `None` before the first answer; `Some(None)` when the name did not resolve.
    addr: Option<Option<SocketAddr>>,
    /// When it is due to be resolved (again).
    due: Instant,
}

/// A bounded hostname cache with its resolver thread.
pub struct HostnameCache {
    config: DnsCacheConfig,
    state: Mutex<HashMap<Name, Entry>>,
    wake: Condvar,
}

impl HostnameCache {
    /// A cache under `config` resolving through `resolve`; its thread runs for the process's
    /// life (caches are few: one per distinct setting). If the thread cannot start, every
    /// name stays pending and redirected requests time out into the redirection error.
    pub fn spawn(config: DnsCacheConfig, resolve: Arc<Resolve>) -> Arc<HostnameCache> {
        let cache = Arc::new(HostnameCache {
            config,
            state: Mutex::new(HashMap::new()),
            wake: Condvar::new(),
        });
        let me = cache.clone();
        if let Err(e) = std::thread::Builder::new()
            .name("respite-dnscache".to_owned())
            .spawn(move || me.run(&*resolve))
        {
            tracing::error!("cannot start the DNS cache thread: {e}");
        }
        cache
    }

    /// The cache shared by every listener with `config` (created on first use).
    pub fn shared(config: &DnsCacheConfig) -> Arc<HostnameCache> {
        static CACHES: OnceLock<Mutex<HashMap<DnsCacheConfig, Arc<HostnameCache>>>> =
            OnceLock::new();
        let caches = CACHES.get_or_init(Default::default);
        let mut caches = caches.lock().unwrap_or_else(|e| e.into_inner());
        caches
            .entry(*config)
            .or_insert_with(|| HostnameCache::spawn(*config, Arc::new(system_lookup)))
            .clone()
    }

    /// What is known of `host:port`; a name not cached yet is queued (if there is room).
    pub fn lookup(&self, host: &str, port: u16) -> Lookup {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = state.get(&(host.to_owned(), port)) {
            return match e.addr {
                None => Lookup::Pending,
                Some(Some(a)) => Lookup::Ready(a),
                Some(None) => Lookup::Failed,
            };
        }
        if state.len() >= self.config.max_hosts {
            return Lookup::Failed;
        }
        state.insert(
            (host.to_owned(), port),
            Entry {
                addr: None,
                due: Instant::now(),
            },
        );
        self.wake.notify_one();
        Lookup::Pending
    }

    fn run(&self, resolve: &Resolve) {
        loop {
            // The names due now, resolved without holding the lock.
            let due: Vec<(Name, Option<Option<SocketAddr>>)> = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let now = Instant::now();
                    let due: Vec<_> = state
                        .iter()
                        .filter(|(_, e)| e.due <= now)
                        .map(|(k, e)| (k.clone(), e.addr))
                        .collect();
                    if !due.is_empty() {
                        break due;
                    }
                    let wait = state
                        .values()
                        .map(|e| e.due.saturating_duration_since(now))
                        .min()
                        .unwrap_or(Duration::from_secs(3600));
                    state = match self.wake.wait_timeout(state, wait) {
                        Ok((s, _)) => s,
                        Err(e) => e.into_inner().0,
                    };
                }
            };
            for ((host, port), prev) in due {
                let found = resolve(&host, port).ok().and_then(|a| {
                    pick_family(self.config.dns_lookup_family, &a)
                        .first()
                        .copied()
                });
                if found.is_none() {
                    tracing::warn!("dns_cache: {host}:{port} does not resolve");
                }
                // A refresh that fails keeps the last address.
                let addr = match (found, prev) {
                    (Some(a), _) => Some(a),
                    (None, Some(Some(last))) => Some(last),
                    (None, _) => None,
                };
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(e) = state.get_mut(&(host, port)) {
                    e.addr = Some(addr);
                    let now = Instant::now();
                    // A rate too long to represent: once a day is as good as never.
                    e.due = now
                        .checked_add(self.config.dns_refresh_rate)
                        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
                        .unwrap_or(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DnsLookupFamily;

    fn wait(cache: &HostnameCache, host: &str) -> Lookup {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let l = cache.lookup(host, 7000);
            if l != Lookup::Pending || Instant::now() > deadline {
                return l;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn resolves_off_the_caller_bounded_by_max_hosts() {
        let resolve: Arc<Resolve> = Arc::new(|host: &str, port: u16| match host {
            "a" => Ok(vec![
                SocketAddr::new("::1".parse().unwrap(), port),
                SocketAddr::new("10.0.0.1".parse().unwrap(), port),
            ]),
            _ => Err(std::io::Error::other("nx")),
        });
        let cache = HostnameCache::spawn(
            DnsCacheConfig {
                dns_refresh_rate: Duration::from_secs(60),
                max_hosts: 2,
                dns_lookup_family: DnsLookupFamily::V4Only,
            },
            resolve,
        );
        assert_eq!(cache.lookup("a", 7000), Lookup::Pending);
        assert_eq!(
            wait(&cache, "a"),
            Lookup::Ready("10.0.0.1:7000".parse().unwrap())
        );
        assert_eq!(wait(&cache, "nx"), Lookup::Failed);
        // Two names held: a third is refused at once.
        assert_eq!(cache.lookup("c", 7000), Lookup::Failed);
    }
}

//! Routing of keys to clusters (Envoy redis_proxy docs, `prefix_routes`; semantics of
//! `router_impl.cc`): the longest matching prefix picks a route, else the catch-all route, else
//! `no upstream host`. A route names the pool its requests go to (reads may go to the
//! `read_command_policy` pool), how keys are rewritten, and where copies are mirrored.

pub mod dispatch;
pub mod fault;
pub mod local;
pub mod mirror;
pub mod trie;

use std::rc::Rc;

pub use mirror::{Mirror, MirrorStats};
pub use trie::Trie;

use crate::cluster::ClusterPool;

/// Route id of the catch-all route (prefix routes are numbered from 0 in config order).
pub const CATCH_ALL: usize = usize::MAX;

/// One route of a listener, resolved to this worker's pools (`P`: the pool type, a
/// [`dispatch::Pool`]; tests use fakes).
pub struct RouteRuntime<P = ClusterPool> {
    /// Where the route's requests go.
    pub pool: Rc<P>,
    /// `read_command_policy`: where its read commands go instead.
    pub read_pool: Option<Rc<P>>,
    /// `request_mirror_policy`, in config order.
    pub mirrors: Vec<Mirror<P>>,
    /// Bytes stripped from the front of each key: the prefix length with `remove_prefix`, else 0.
    strip: usize,
    /// `key_formatter` split at each `%KEY%`: the key goes between consecutive pieces.
    formatter: Option<Vec<Vec<u8>>>,
}

impl<P> RouteRuntime<P> {
    /// A route to `pool`. `strip`: bytes removed from each key's front (`remove_prefix`: the
    /// prefix's length); `key_formatter`: Envoy's template, every `%KEY%` replaced by the key.
    pub fn new(
        pool: Rc<P>,
        read_pool: Option<Rc<P>>,
        mirrors: Vec<Mirror<P>>,
        strip: usize,
        key_formatter: Option<&str>,
    ) -> RouteRuntime<P> {
        let formatter = key_formatter.map(|f| {
            f.split(crate::config::KEY_VARIABLE)
                .map(|p| p.as_bytes().to_vec())
                .collect()
        });
        RouteRuntime {
            pool,
            read_pool,
            mirrors,
            strip,
            formatter,
        }
    }

    /// The pool a command goes to: the read pool for a read command (see
    /// [`crate::command::is_read`]) when the route has one.
    #[inline]
    pub fn pool_for(&self, read: bool) -> &Rc<P> {
        match (&self.read_pool, read) {
            (Some(p), true) => p,
            _ => &self.pool,
        }
    }

    /// True when keys are forwarded as something other than what the client sent.
    #[inline]
    pub fn rewrites(&self) -> bool {
        self.strip > 0 || self.formatter.is_some()
    }

    /// Appends the forwarded form of `key` to `out`: `remove_prefix` first, then
    /// `key_formatter` (Envoy order). A `{…}` in the template becomes the key's hash tag, so
    /// `"{%KEY%}"` puts each key on the shard of its whole (stripped) self, and a key's own
    /// braces then sit inside the template's tag.
    pub fn rewrite(&self, key: &[u8], out: &mut Vec<u8>) {
        rewrite_key(self.strip, self.formatter.as_deref(), key, out)
    }
}

/// [`RouteRuntime::rewrite`] on its parts: strip `strip` bytes, then fill the template `pieces`
/// (the `key_formatter` split at `%KEY%`).
fn rewrite_key(strip: usize, pieces: Option<&[Vec<u8>]>, key: &[u8], out: &mut Vec<u8>) {
    let key = key.get(strip..).unwrap_or_default();
    match pieces {
        None => out.extend_from_slice(key),
        Some(pieces) => {
            for (i, p) in pieces.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(key);
                }
                out.extend_from_slice(p);
            }
        }
    }
}

/// Per-worker routing table of one listener.
pub struct Router<P = ClusterPool> {
    trie: Trie<usize>,
    routes: Vec<RouteRuntime<P>>,
    catch_all: Option<RouteRuntime<P>>,
    case_insensitive: bool,
    /// Some route rewrites keys.
    rewrites: bool,
    /// Some route mirrors.
    mirrors: bool,
}

impl<P> Router<P> {
    /// `routes` as `(prefix, route)` in config order (prefixes unique, as config validation
    /// ensures), plus the catch-all route. With `case_insensitive` prefixes are matched without
    /// ASCII case; the key forwarded keeps its case.
    pub fn new(
        routes: Vec<(Vec<u8>, RouteRuntime<P>)>,
        catch_all: Option<RouteRuntime<P>>,
        case_insensitive: bool,
    ) -> Router<P> {
        let mut trie = Trie::new();
        let mut rts = Vec::with_capacity(routes.len());
        for (i, (prefix, route)) in routes.into_iter().enumerate() {
            let prefix = if case_insensitive {
                prefix.to_ascii_lowercase()
            } else {
                prefix
            };
            trie.insert(&prefix, i);
            rts.push(route);
        }
        let all = || rts.iter().chain(catch_all.iter());
        let rewrites = all().any(|r| r.rewrites());
        let mirrors = all().any(|r| !r.mirrors.is_empty());
        Router {
            trie,
            routes: rts,
            catch_all,
            case_insensitive,
            rewrites,
            mirrors,
        }
    }

    /// The route `key` takes and its id ([`CATCH_ALL`] or the route's index), or `None`: no
    /// route matches and there is no catch-all.
    #[inline]
    pub fn route(&self, key: &[u8]) -> Option<(usize, &RouteRuntime<P>)> {
        let id = self.route_id(key)?;
        self.by_id(id).map(|r| (id, r))
    }

    /// The id of the route `key` takes (see [`Router::route`]).
    #[inline]
    pub fn route_id(&self, key: &[u8]) -> Option<usize> {
        if !self.trie.is_empty() {
            let hit = if self.case_insensitive {
                self.trie.longest(key, |b| b.to_ascii_lowercase())
            } else {
                self.trie.longest(key, |b| b)
            };
            if let Some((&i, _)) = hit {
                return Some(i);
            }
        }
        self.catch_all.as_ref().map(|_| CATCH_ALL)
    }

    /// The route with id `id`.
    #[inline]
    pub fn by_id(&self, id: usize) -> Option<&RouteRuntime<P>> {
        if id == CATCH_ALL {
            self.catch_all.as_ref()
        } else {
            self.routes.get(id)
        }
    }

    /// The route of keyless commands (fan-out commands, SCAN): the catch-all, since a prefix is
    /// never empty.
    #[inline]
    pub fn keyless(&self) -> Option<&RouteRuntime<P>> {
        self.catch_all.as_ref()
    }

    /// Every route, the catch-all last.
    pub fn routes(&self) -> impl Iterator<Item = &RouteRuntime<P>> {
        self.routes.iter().chain(self.catch_all.iter())
    }

    /// True when keys may take different routes (there are prefix routes).
    #[inline]
    pub fn has_prefixes(&self) -> bool {
        !self.trie.is_empty()
    }

    /// True when some route rewrites keys.
    #[inline]
    pub fn rewrites(&self) -> bool {
        self.rewrites
    }

    /// True when some route mirrors.
    #[inline]
    pub fn mirrors(&self) -> bool {
        self.mirrors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formatted(strip: usize, fmt: Option<&str>, key: &[u8]) -> Vec<u8> {
        let pieces: Option<Vec<Vec<u8>>> = fmt.map(|f| {
            f.split(crate::config::KEY_VARIABLE)
                .map(|p| p.as_bytes().to_vec())
                .collect()
        });
        let mut out = Vec::new();
        rewrite_key(strip, pieces.as_deref(), key, &mut out);
        out
    }

    #[test]
    fn key_formatter_replaces_every_occurrence() {
        assert_eq!(formatted(5, None, b"user:42"), b"42");
        assert_eq!(formatted(0, Some("{%KEY%}"), b"a"), b"{a}");
        assert_eq!(formatted(2, Some("x-%KEY%-%KEY%"), b"p:k"), b"x-k-k");
        assert_eq!(formatted(0, Some("%KEY%"), b""), b"");
        assert_eq!(formatted(9, None, b"short"), b"");
        assert_eq!(formatted(0, Some("pre-%KEY%"), b"k"), b"pre-k");
    }
}

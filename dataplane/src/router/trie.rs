//! Longest-prefix lookup over byte strings (Envoy redis_proxy docs, `prefix_routes`: "the longest
//! match wins", looked up with a trie in O(key length)).

/// A byte trie mapping prefixes to values `V`. Built once per config snapshot, read per request:
/// the nodes sit in one `Vec` and each node's children are a sorted edge list, so a lookup walks
/// `key.len()` nodes at most with no allocation.
#[derive(Debug, Clone)]
pub struct Trie<V> {
    nodes: Vec<Node>,
    values: Vec<V>,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// `(byte, child node index)`, sorted by byte.
    edges: Vec<(u8, u32)>,
    /// Index into `values` of the prefix ending here.
    value: Option<u32>,
}

impl<V> Default for Trie<V> {
    fn default() -> Self {
        Trie {
            nodes: vec![Node::default()],
            values: Vec::new(),
        }
    }
}

impl<V> Trie<V> {
    /// An empty trie.
    pub fn new() -> Trie<V> {
        Trie::default()
    }

    /// True when no prefix was inserted.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Maps `prefix` to `value`; a prefix inserted twice keeps the later value.
    pub fn insert(&mut self, prefix: &[u8], value: V) {
        let mut at = 0usize;
        for &b in prefix {
            let Some(node) = self.nodes.get(at) else {
                return;
            };
            at = match node.edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => node.edges.get(i).map_or(0, |e| e.1 as usize),
                Err(i) => {
                    let child = self.nodes.len();
                    self.nodes.push(Node::default());
                    if let Some(node) = self.nodes.get_mut(at) {
                        node.edges.insert(i, (b, child as u32));
                    }
                    child
                }
            };
        }
        let Some(node) = self.nodes.get_mut(at) else {
            return;
        };
        match node.value.and_then(|v| self.values.get_mut(v as usize)) {
            Some(slot) => *slot = value,
            None => {
                node.value = Some(self.values.len() as u32);
                self.values.push(value);
            }
        }
    }

    /// The value of the longest inserted prefix of `key`, and that prefix's length. `fold` maps
    /// each key byte before it is matched (ASCII lowercasing for `case_insensitive`: the prefixes
    /// must then have been inserted lowercased), so the key itself is never copied.
    #[inline]
    pub fn longest(&self, key: &[u8], fold: impl Fn(u8) -> u8) -> Option<(&V, usize)> {
        let mut best = None;
        let mut at = 0usize;
        for (depth, &b) in key.iter().enumerate() {
            let Some(node) = self.nodes.get(at) else {
                break;
            };
            if let Some(v) = node.value {
                best = Some((v, depth));
            }
            let b = fold(b);
            match node.edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => at = node.edges.get(i).map_or(0, |e| e.1 as usize),
                Err(_) => {
                    return best.and_then(|(v, d)| Some((self.values.get(v as usize)?, d)));
                }
            }
        }
        // The whole key matched a path: the node it ended on may hold a prefix equal to it.
        if let Some(v) = self.nodes.get(at).and_then(|n| n.value) {
            best = Some((v, key.len()));
        }
        best.and_then(|(v, d)| Some((self.values.get(v as usize)?, d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(b: u8) -> u8 {
        b
    }

    #[test]
    fn longest_prefix_wins() {
        let mut t = Trie::new();
        t.insert(b"a:", 1);
        t.insert(b"a:b:", 2);
        t.insert(b"b", 3);
        assert_eq!(t.longest(b"a:b:c", same), Some((&2, 4)));
        assert_eq!(t.longest(b"a:b", same), Some((&1, 2)));
        assert_eq!(t.longest(b"a:", same), Some((&1, 2)));
        assert_eq!(t.longest(b"a:b:", same), Some((&2, 4)));
        assert_eq!(t.longest(b"a", same), None);
        assert_eq!(t.longest(b"bcd", same), Some((&3, 1)));
        assert_eq!(t.longest(b"", same), None);
        assert_eq!(t.longest(b"c", same), None);
    }

    #[test]
    fn fold_lowercases_the_key_only() {
        let mut t = Trie::new();
        t.insert(b"user:", 7);
        assert_eq!(
            t.longest(b"USER:1", |b| b.to_ascii_lowercase()),
            Some((&7, 5))
        );
        assert_eq!(t.longest(b"USER:1", same), None);
    }

    #[test]
    fn reinsert_replaces() {
        let mut t = Trie::new();
        t.insert(b"x", 1);
        t.insert(b"x", 2);
        assert_eq!(t.longest(b"xy", same), Some((&2, 1)));
        assert!(!t.is_empty());
        assert!(Trie::<u8>::new().is_empty());
    }

    /// The naive definition: the longest of the prefixes that `key` starts with.
    fn naive(prefixes: &[Vec<u8>], key: &[u8]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (i, p) in prefixes.iter().enumerate() {
            if key.starts_with(p) && best.is_none_or(|(_, l)| p.len() >= l) {
                best = Some((i, p.len()));
            }
        }
        best
    }

    proptest! {
        #[test]
        fn matches_naive_scan(
            prefixes in proptest::collection::vec(proptest::collection::vec(0u8..4, 1..6), 0..12),
            keys in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..9), 1..20),
        ) {
            // Unique prefixes (config validation guarantees that); the later duplicate wins in
            // both implementations anyway.
            let mut t = Trie::new();
            for (i, p) in prefixes.iter().enumerate() {
                t.insert(p, i);
            }
            for k in &keys {
                let want = naive(&prefixes, k).map(|(i, l)| {
                    // A duplicate prefix: the trie keeps the last index inserted for it.
                    let last = prefixes.iter().rposition(|p| p.len() == l && k.starts_with(p));
                    (last.unwrap_or(i), l)
                });
                let got = t.longest(k, same).map(|(v, l)| (*v, l));
                prop_assert_eq!(got, want);
            }
        }
    }
}

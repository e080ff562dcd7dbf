//! The port filter: which loopback sockets the sockops program records. A 65 536-bit bitmap,
//! stored as the `respite_ports` array map of 1024 `u64` words (bit `port % 64` of word
//! `port / 64`), so the program tests a port with one lookup whatever the number of ports.

use std::collections::BTreeSet;

/// Words in the bitmap (`respite_ports` max_entries in the C file).
pub const WORDS: usize = 1024;

/// A set of TCP ports as the kernel's bitmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortFilter {
    words: Vec<u64>,
}

impl Default for PortFilter {
    fn default() -> Self {
        PortFilter {
            words: vec![0; WORDS],
        }
    }
}

impl PortFilter {
    /// The filter holding exactly `ports`.
    pub fn new(ports: &BTreeSet<u16>) -> PortFilter {
        let mut f = PortFilter::default();
        for &p in ports {
            f.words[usize::from(p / 64)] |= 1 << (p % 64);
        }
        f
    }

    /// Whether `port` is in the filter.
    pub fn contains(&self, port: u16) -> bool {
        self.words[usize::from(port / 64)] >> (port % 64) & 1 == 1
    }

    /// The words, index = `port / 64`.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Indices of the words that differ from `other` (what an update must write).
    pub fn changed_words(&self, other: &PortFilter) -> Vec<usize> {
        (0..WORDS)
            .filter(|&i| self.words[i] != other.words[i])
            .collect()
    }

    /// The ports in the filter, ascending.
    pub fn ports(&self) -> Vec<u16> {
        (0..=u16::MAX).filter(|&p| self.contains(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_the_kernel_layout() {
        let f = PortFilter::new(&[0u16, 63, 64, 6379, 65535].into_iter().collect());
        assert_eq!(f.words()[0], 1 | 1 << 63);
        assert_eq!(f.words()[1], 1);
        assert_eq!(f.words()[6379 / 64], 1 << (6379 % 64));
        assert_eq!(f.words()[1023], 1 << 63);
        assert_eq!(f.ports(), vec![0, 63, 64, 6379, 65535]);
        assert!(!f.contains(6380));
    }

    #[test]
    fn changed_words_names_only_the_differing_words() {
        let a = PortFilter::new(&[7000u16, 7001].into_iter().collect());
        let b = PortFilter::new(&[7000u16, 9000].into_iter().collect());
        assert_eq!(a.changed_words(&b), vec![7001 / 64, 9000 / 64]);
        assert!(a.changed_words(&a).is_empty());
    }
}

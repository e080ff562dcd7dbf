//! twemproxy 0.5.0's key hashes (`hash:` of a pool, src/hashkit/*.c), bit for bit as
//! nutcracker computes them on x86-64: `char` is signed there, so where twemproxy widens a
//! `char` the byte is sign-extended first; every result is a `uint32_t`.
//!
//! [`key_hash`] picks one by [`KeyHash`]. Keys of any length, no allocation.

use md5::{Digest, Md5};

use super::hash::fnv1a_64_twemproxy;
use crate::config::KeyHash;

/// `hash_<name>(key)` of twemproxy for `hash`.
#[inline]
pub fn key_hash(hash: KeyHash, key: &[u8]) -> u32 {
    match hash {
        KeyHash::OneAtATime => one_at_a_time(key),
        KeyHash::Md5 => md5(key),
        KeyHash::Crc16 => crc16(key),
        KeyHash::Crc32 => crc32(key),
        KeyHash::Crc32a => crc32a(key),
        KeyHash::Fnv1_64 => fnv1_64(key),
        KeyHash::Fnv1a64 => fnv1a_64_twemproxy(key),
        KeyHash::Fnv1_32 => fnv1_32(key),
        KeyHash::Fnv1a32 => fnv1a_32(key),
        KeyHash::Hsieh => hsieh(key),
        KeyHash::Murmur => murmur(key),
        KeyHash::Jenkins => jenkins(key),
    }
}

/// A `char` widened as C does on x86-64 (sign-extended).
#[inline]
fn signed(b: u8) -> u32 {
    b as i8 as i32 as u32
}

/// twemproxy `hash_one_at_a_time` (src/hashkit/nc_one_at_a_time.c): Bob Jenkins'
/// one-at-a-time over sign-extended bytes.
pub fn one_at_a_time(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &b in key {
        value = value.wrapping_add(signed(b));
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

/// twemproxy `hash_md5` (src/hashkit/nc_md5.c): the digest's first four bytes, little-endian.
pub fn md5(key: &[u8]) -> u32 {
    let d = Md5::digest(key);
    let mut w = [0u8; 4];
    for (o, i) in w.iter_mut().zip(d.iter()) {
        *o = *i;
    }
    u32::from_le_bytes(w)
}

/// twemproxy `hash_crc16` (src/hashkit/nc_crc16.c): the XMODEM table, but the state is a
/// `uint32_t` that is never masked to 16 bits, so after two bytes the result grows past 16
/// bits (unlike Redis Cluster's [`super::crc16`]).
pub fn crc16(key: &[u8]) -> u32 {
    let mut crc: u32 = 0;
    for &b in key {
        let i = ((crc >> 8) ^ signed(b)) & 0xff;
        let t = super::hash::crc16_table_entry(i as u8);
        crc = (crc << 8) ^ u32::from(t);
    }
    crc
}

/// twemproxy `hash_crc32` (src/hashkit/nc_crc32.c), libmemcached's: CRC-32 (IEEE, reflected)
/// whose result is `((~crc) >> 16) & 0x7fff`, 15 bits.
pub fn crc32(key: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in key {
        crc = (crc >> 8) ^ crc32_entry((crc ^ signed(b)) as u8);
    }
    ((!crc) >> 16) & 0x7fff
}

/// twemproxy `hash_crc32a` (src/hashkit/nc_crc32.c): the standard CRC-32 (IEEE 802.3).
pub fn crc32a(key: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in key {
        crc = crc32_entry((crc ^ u32::from(b)) as u8) ^ (crc >> 8);
    }
    !crc
}

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;

/// twemproxy `hash_fnv1_64` (src/hashkit/nc_fnv.c): FNV-1 in 64 bits over sign-extended bytes
/// (`(uint64_t)key[x]`), truncated to its low 32 bits.
pub fn fnv1_64(key: &[u8]) -> u32 {
    let mut hash = FNV_64_INIT;
    for &b in key {
        hash = hash.wrapping_mul(FNV_64_PRIME);
        hash ^= b as i8 as i64 as u64;
    }
    hash as u32
}

/// twemproxy `hash_fnv1_32` (src/hashkit/nc_fnv.c): FNV-1 over sign-extended bytes.
pub fn fnv1_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_INIT;
    for &b in key {
        hash = hash.wrapping_mul(FNV_32_PRIME);
        hash ^= signed(b);
    }
    hash
}

/// twemproxy `hash_fnv1a_32` (src/hashkit/nc_fnv.c): FNV-1a over sign-extended bytes.
pub fn fnv1a_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_INIT;
    for &b in key {
        hash ^= signed(b);
        hash = hash.wrapping_mul(FNV_32_PRIME);
    }
    hash
}

/// Two bytes little-endian (hsieh's `get16bits` off i386).
#[inline]
fn le16(k: &[u8], at: usize) -> u32 {
    let lo = k.get(at).copied().unwrap_or_default();
    let hi = k.get(at + 1).copied().unwrap_or_default();
    u32::from(lo) | (u32::from(hi) << 8)
}

/// twemproxy `hash_hsieh` (src/hashkit/nc_hsieh.c): Paul Hsieh's SuperFastHash, starting from
/// 0 (not from the length); an empty key is 0. Of the tail, a 3-byte rest adds its third byte
/// sign-extended (`(uint32_t)key[2]` on a `char`), a 1-byte rest its byte unsigned.
pub fn hsieh(key: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let mut hash: u32 = 0;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        hash = hash.wrapping_add(le16(c, 0));
        let tmp = (le16(c, 2) << 11) ^ hash;
        hash = (hash << 16) ^ tmp;
        hash = hash.wrapping_add(hash >> 11);
    }
    let rest = chunks.remainder();
    match rest.len() {
        3 => {
            hash = hash.wrapping_add(le16(rest, 0));
            hash ^= hash << 16;
            hash ^= signed(rest.get(2).copied().unwrap_or_default()) << 18;
            hash = hash.wrapping_add(hash >> 11);
        }
        2 => {
            hash = hash.wrapping_add(le16(rest, 0));
            hash ^= hash << 11;
            hash = hash.wrapping_add(hash >> 17);
        }
        1 => {
            hash = hash.wrapping_add(u32::from(rest.first().copied().unwrap_or_default()));
            hash ^= hash << 10;
            hash = hash.wrapping_add(hash >> 1);
        }
        _ => {}
    }
    hash ^= hash << 3;
    hash = hash.wrapping_add(hash >> 5);
    hash ^= hash << 4;
    hash = hash.wrapping_add(hash >> 17);
    hash ^= hash << 25;
    hash.wrapping_add(hash >> 6)
}

/// twemproxy `hash_murmur` (src/hashkit/nc_murmur.c): MurmurHash2 (32-bit) with the seed
/// `0xdeadbeef * len`, so `h0 = (0xdeadbeef * len) ^ len`; words little-endian.
pub fn murmur(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let len = key.len() as u32;
    let mut h = 0xdead_beefu32.wrapping_mul(len) ^ len;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = le32(c, 4);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        h ^= le32(rest, rest.len());
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The first `n` (at most 4) bytes of `k` as a little-endian word, unsigned.
#[inline]
fn le32(k: &[u8], n: usize) -> u32 {
    k.iter()
        .take(n.min(4))
        .enumerate()
        .fold(0, |w, (i, &b)| w | (u32::from(b) << (8 * i)))
}

/// twemproxy `hash_jenkins` (src/hashkit/nc_jenkins.c): Bob Jenkins' lookup3 `hashlittle`
/// with `initval` 13 (`JENKINS_INITVAL`), little-endian words; its aligned and unaligned
/// paths agree on little-endian machines. An empty key returns `0xdeadbeef + 13`.
pub fn jenkins(key: &[u8]) -> u32 {
    let init = 0xdead_beefu32
        .wrapping_add(key.len() as u32)
        .wrapping_add(13);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut k = key;
    while k.len() > 12 {
        a = a.wrapping_add(le32(k, 4));
        b = b.wrapping_add(le32(k.get(4..).unwrap_or_default(), 4));
        c = c.wrapping_add(le32(k.get(8..).unwrap_or_default(), 4));
        jenkins_mix(&mut a, &mut b, &mut c);
        k = k.get(12..).unwrap_or_default();
    }
    if k.is_empty() {
        return c;
    }
    a = a.wrapping_add(le32(k, 4));
    b = b.wrapping_add(le32(k.get(4..).unwrap_or_default(), 4));
    c = c.wrapping_add(le32(k.get(8..).unwrap_or_default(), 4));
    jenkins_final(&mut a, &mut b, &mut c);
    c
}

fn jenkins_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn jenkins_final(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// CRC-32 (IEEE, reflected 0xEDB88320) table entry `i`, the `crc32tab` of nc_crc32.c.
#[inline]
fn crc32_entry(i: u8) -> u32 {
    CRC32_TABLE.get(usize::from(i)).copied().unwrap_or_default()
}

const CRC32_TABLE: [u32; 256] = build_crc32_table();

// Const evaluation: an index out of range fails the build, never a request.
#[allow(clippy::indexing_slicing)]
const fn build_crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests;

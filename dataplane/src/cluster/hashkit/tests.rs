//! Vectors from twemproxy's own C: src/hashkit/nc_{crc16,crc32,fnv,hsieh,jenkins,md5,murmur,
//! one_at_a_time}.c of twitter/twemproxy 60aaf855 (hashkit unchanged since 0.5.0's July 2021
//! commits), with a stub `nc_core.h` (stdint/stddef/string/stdio), compiled on x86-64 by
//! `gcc -O2 -I. -o vec vec.c nc_crc16.c nc_crc32.c nc_fnv.c nc_hsieh.c nc_jenkins.c nc_md5.c
//! nc_murmur.c nc_one_at_a_time.c`; `vec.c` prints each hash of each key below (and checked
//! that jenkins gives the same at four alignments of the key).

use super::*;

/// Order of the columns: one_at_a_time, md5, crc16, crc32, crc32a, fnv1_64, fnv1a_64, fnv1_32,
/// fnv1a_32, hsieh, murmur, jenkins (twemproxy's `HASH_CODEC` order).
const ORDER: [KeyHash; 12] = [
    KeyHash::OneAtATime,
    KeyHash::Md5,
    KeyHash::Crc16,
    KeyHash::Crc32,
    KeyHash::Crc32a,
    KeyHash::Fnv1_64,
    KeyHash::Fnv1a64,
    KeyHash::Fnv1_32,
    KeyHash::Fnv1a32,
    KeyHash::Hsieh,
    KeyHash::Murmur,
    KeyHash::Jenkins,
];

#[rustfmt::skip]
const VECTORS: &[(&[u8], [u32; 12])] = &[
    (b"", [0x00000000, 0xd98c1dd4, 0x00000000, 0x00000000, 0x00000000, 0x84222325, 0x84222325, 0x811c9dc5, 0x811c9dc5, 0x00000000, 0x00000000, 0xdeadbefc]),
    (b"a", [0xca2e9442, 0xb975c10c, 0x00007c87, 0x000068b7, 0xe8b7be43, 0x8601b7be, 0x8601ec8c, 0x050c5d7e, 0xe40c292c, 0x93642e87, 0x4b41757c, 0xe0a38690]),
    (b"\xff", [0xae65a494, 0xd44f5900, 0x00001ef0, 0x00007f00, 0xff000000, 0x79fe4820, 0x79fe466e, 0xfaf3a2e0, 0xf9f3a14e, 0x02a6dba8, 0xdb530a9c, 0xe1964da8]),
    (b"foo", [0x238678dd, 0xdb18bdac, 0x0c3caf96, 0x00000c73, 0x8c736521, 0x6ba13533, 0xfed9d577, 0x408f5e13, 0xa9f37ed7, 0x76d4d427, 0xc4e0338f, 0x99f84f99]),
    (b"key1", [0xbef4dc2c, 0x94d6adc2, 0xeb70a3e5, 0x00002c5c, 0x2c5c6450, 0xca70ddf7, 0x5cbda787, 0x84153697, 0x374a6a67, 0x796f3b10, 0x3e978ab6, 0xd312a707]),
    (b"hello", [0xc8fd181b, 0x2a40415d, 0x6b4fc362, 0x00003610, 0x3610a686, 0xbdbdd4c7, 0x80aabd0b, 0xb6fa7167, 0x4f9f2cab, 0x13842ac5, 0x521b0bff, 0x2e0cc8f3]),
    (b"abcdefg", [0x4ac70178, 0x0f6cc67a, 0x3e3a7658, 0x0000312a, 0x312a6aa6, 0x6c18206f, 0x17aa7737, 0xac46eaaf, 0x2a9eb737, 0x3dad41af, 0xeba746f2, 0x76510984]),
    (b"user:100", [0x8e05a307, 0x10c05754, 0x6ae1645c, 0x00004499, 0xc4993650, 0x13e83c2b, 0x2998b4e3, 0x99006fcb, 0x0f7a45c3, 0xa6c4cd83, 0x59deb849, 0xc42212f0]),
    (b"counter:9", [0x190e222e, 0xa7d2d5ec, 0x9aad293d, 0x00002bf1, 0x2bf1210f, 0x1f094448, 0xcd017466, 0x7b7f4088, 0x1df10d46, 0xf5a12aa0, 0xcc16de97, 0x3cf935f7]),
    (b"abcdefghijkl", [0x605b0340, 0x06d6c99f, 0xa372b7ff, 0x00007678, 0xf6781b24, 0xda7a6075, 0xe05a5cb5, 0x65adc2d5, 0xe8fb3e15, 0x5f624189, 0xb805134a, 0xfb8b49e3]),
    (b"abcdefghijklm", [0x6d99f6dc, 0xd1bdae22, 0x72b79537, 0x00005df4, 0xddf46ea2, 0x3df1e6a2, 0x398bc308, 0xe589b522, 0x3b8356e8, 0x70ce5414, 0x2987d8bb, 0xb621e85f]),
    (b"\x80\x81\xfe", [0xcb93a6ad, 0x8ca2a981, 0x919a1d22, 0x000066e9, 0x66e9b483, 0x94a33cfa, 0x8a50f40c, 0xcfab51da, 0x1af80f8c, 0xf2f08f4a, 0x81541e01, 0xe42b8375]),
    (b"k\xe9y\xff\x90z\xc3\xa9", [0xbf29ca33, 0x5ed6c19f, 0xb6b3817b, 0x00003329, 0x33298826, 0xf22c15b3, 0xdc895bbf, 0xa05f30f3, 0x3c96217f, 0x85a67be1, 0x4a07d40f, 0xe2edfeeb]),
    (b"the quick brown fox jumps over", [0xfe704926, 0x569fd6bc, 0xe4708942, 0x000064c6, 0xe4c662da, 0x81c853b3, 0x61ba616f, 0x61085cf3, 0x0d5789af, 0x958d29fe, 0x7f9f5dd7, 0x140ab928]),
];

#[test]
fn every_hash_matches_twemproxy_c() {
    for (key, expect) in VECTORS {
        for (hash, want) in ORDER.iter().zip(expect) {
            assert_eq!(key_hash(*hash, key), *want, "{hash:?} of {key:x?}");
        }
    }
}

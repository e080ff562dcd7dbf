//! Hash functions the load balancers are defined by.
//!
//! - [`fnv1a_64_twemproxy`]: twemproxy's `hash_fnv1a_64` (src/hashkit/nc_fnv.c), which despite its
//!   name works in 32 bits and sign-extends each byte (`(uint32_t)key[x]` on a signed `char`).
//! - [`murmur2_64`]: Envoy's `MurmurHash::murmurHash2` (source/common/common/hash.{h,cc}), the
//!   libstdc++ `_Hash_bytes` variant, used for Redis keys with the default seed
//!   [`ENVOY_STD_HASH_SEED`].
//! - [`xxh64`]: xxHash64, Envoy's `HashUtil::xxHash64` (ring entries, maglev offset/skip).
//! - [`ketama_md5_point`]: twemproxy's `ketama_hash` (src/hashkit/nc_ketama.c).

use md5::{Digest, Md5};

/// Envoy `MurmurHash::STD_HASH_SEED`.
pub const ENVOY_STD_HASH_SEED: u64 = 0xc70f_6907;

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// twemproxy `hash_fnv1a_64`: `hash = (uint32)FNV_64_INIT; hash ^= (uint32)(char)byte;
/// hash *= (uint32)FNV_64_PRIME` over 32-bit arithmetic. `char` is signed on the platforms
/// twemproxy is built for (x86-64), so bytes >= 0x80 are sign-extended before the xor.
#[inline]
pub fn fnv1a_64_twemproxy(key: &[u8]) -> u32 {
    let mut hash = FNV_64_INIT as u32;
    for &b in key {
        hash ^= b as i8 as i32 as u32;
        hash = hash.wrapping_mul(FNV_64_PRIME as u32);
    }
    hash
}

#[inline]
fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// Envoy `MurmurHash::murmurHash2` (64-bit, from libstdc++ `hash_bytes.cc`).
#[inline]
pub fn murmur2_64(key: &[u8], seed: u64) -> u64 {
    const MUL: u64 = 0xc6a4_a793_5bd1_e995;
    let len = key.len() as u64;
    let mut hash = seed ^ len.wrapping_mul(MUL);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        // unaligned_load via memcpy: native (little-endian on Envoy's platforms) byte order.
        let data = shift_mix(u64::from_le_bytes(w).wrapping_mul(MUL)).wrapping_mul(MUL);
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // load_bytes: result = (result << 8) + p[n] from the last byte down to the first.
        let mut data = 0u64;
        for &b in rest.iter().rev() {
            data = (data << 8).wrapping_add(u64::from(b));
        }
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    hash = shift_mix(hash).wrapping_mul(MUL);
    shift_mix(hash)
}

/// xxHash64 with `seed` (Envoy `HashUtil::xxHash64`).
#[inline]
pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(data, seed)
}

/// The four 32-bit ketama points of one MD5 digest: point `a` is the little-endian u32 at
/// bytes `4a..4a+4` (twemproxy `ketama_hash(key, len, alignment)`).
pub fn ketama_md5_points(key: &[u8]) -> [u32; 4] {
    let digest = Md5::digest(key);
    let mut out = [0u32; 4];
    for (p, bytes) in out.iter_mut().zip(digest.chunks_exact(4)) {
        if let Ok(word) = <[u8; 4]>::try_from(bytes) {
            *p = u32::from_le_bytes(word);
        }
    }
    out
}

/// CRC16-CCITT (XMODEM: poly 0x1021, init 0, no reflection, no xor-out), the Redis Cluster key
/// hash (cluster spec, Appendix A).
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        // A u8 index into a 256-entry table: always present.
        let entry = CRC16_TABLE.get(usize::from(((crc >> 8) as u8) ^ b));
        crc = (crc << 8) ^ entry.copied().unwrap_or_default();
    }
    crc
}

/// Entry `i` of the CRC16-CCITT (XMODEM) table, twemproxy's `crc16tab` too.
#[inline]
pub(super) fn crc16_table_entry(i: u8) -> u16 {
    CRC16_TABLE.get(usize::from(i)).copied().unwrap_or_default()
}

const CRC16_TABLE: [u16; 256] = build_crc16_table();

// Const evaluation: an index out of range fails the build, never a request.
#[allow(clippy::indexing_slicing)]
const fn build_crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_spec_vector() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn fnv1a_twemproxy_values() {
        // Empty input: (uint32_t)FNV_64_INIT.
        assert_eq!(fnv1a_64_twemproxy(b""), 0x8422_2325);
        // One step by hand: (0x84222325 ^ 0x61) * 0x000001b3 mod 2^32.
        let expect = (0x8422_2325u32 ^ 0x61).wrapping_mul(0x1b3);
        assert_eq!(fnv1a_64_twemproxy(b"a"), expect);
        // A high byte is sign-extended: 0xff xors as 0xffffffff.
        let expect = (0x8422_2325u32 ^ 0xffff_ffff).wrapping_mul(0x1b3);
        assert_eq!(fnv1a_64_twemproxy(&[0xff]), expect);
    }

    #[test]
    fn murmur2_matches_reference_structure() {
        // Empty key: hash = seed; then shift_mix(seed) * mul, shift_mix.
        let mul = 0xc6a4_a793_5bd1_e995u64;
        let h = shift_mix(ENVOY_STD_HASH_SEED).wrapping_mul(mul);
        assert_eq!(murmur2_64(b"", ENVOY_STD_HASH_SEED), shift_mix(h));
        // Tail bytes load little-endian: "ab" -> 0x6261.
        let mut h = ENVOY_STD_HASH_SEED ^ 2u64.wrapping_mul(mul);
        h ^= 0x6261;
        h = h.wrapping_mul(mul);
        h = shift_mix(h).wrapping_mul(mul);
        assert_eq!(murmur2_64(b"ab", ENVOY_STD_HASH_SEED), shift_mix(h));
        // Deterministic and length-sensitive.
        assert_ne!(murmur2_64(b"foo", 0), murmur2_64(b"foo\0", 0));
    }

    #[test]
    fn murmur2_envoy_vectors() {
        // envoy test/common/common/hash_test.cc TEST(Hash, murmurHash2).
        let h = |s: &[u8]| murmur2_64(s, ENVOY_STD_HASH_SEED);
        assert_eq!(h(b"foo"), 9631199822919835226);
        assert_eq!(h(b"bar"), 11474628671133349555);
        assert_eq!(h(b"foo\nbar"), 16306510975912980159);
        assert_eq!(h(b"lyft"), 12847078931730529320);
        assert_eq!(h(b""), 6142509188972423790);
    }

    #[test]
    fn xxh64_envoy_vectors() {
        // envoy test/common/common/hash_test.cc TEST(Hash, xxHash).
        assert_eq!(xxh64(b"foo", 0), 3728699739546630719);
        assert_eq!(xxh64(b"bar", 0), 5234164152756840025);
        assert_eq!(xxh64(b"foo\nbar", 0), 8917841378505826757);
        assert_eq!(xxh64(b"lyft", 0), 4400747396090729504);
        assert_eq!(xxh64(b"", 0), 17241709254077376921);
    }

    #[test]
    fn ketama_points_little_endian_md5() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e
        let p = ketama_md5_points(b"");
        assert_eq!(p, [0xd98c_1dd4, 0x04b2_008f, 0x9809_80e9, 0x7e42_f8ec]);
    }
}

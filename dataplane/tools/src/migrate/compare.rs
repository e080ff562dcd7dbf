//! Comparing a source snapshot with the target's: the first difference, described briefly
//! (source value first).

use std::collections::{BTreeMap, BTreeSet};

use super::report::{DiffKind, quoted};
use super::value::{Data, Snapshot, StreamEntry};

/// The first difference between `src` and `dst` (`None` = the key is missing on the target),
/// or `None` when equal. TTLs within `tolerance_ms` of each other are equal; a TTL on one side
/// only is a difference.
///
/// Two HyperLogLogs (strings with the HLL header) of the same encoding are compared without
/// their cached cardinality (PFCOUNT, a read that is not mirrored, rewrites it on one side
/// only); of different encodings (sparse vs dense), by `hll_counts` (PFCOUNT on the source and
/// on the target, read by the caller when [`hll_needs_counts`]), or as a difference without it.
pub fn compare(
    src: &Snapshot,
    dst: Option<&Snapshot>,
    tolerance_ms: i64,
    hll_counts: Option<(i64, i64)>,
) -> Option<(DiffKind, String)> {
    let Some(dst) = dst else {
        return Some((DiffKind::Missing, "missing on target".to_string()));
    };
    if src.kind != dst.kind {
        return Some((
            DiffKind::Type,
            format!("type: {} vs {}", src.kind, dst.kind),
        ));
    }
    let detail = match (&src.data, &dst.data) {
        (Data::String(x), Data::String(y)) => string_diff(x, y, hll_counts),
        (x, y) => data_diff(x, y),
    };
    if let Some(detail) = detail {
        return Some((DiffKind::Value, detail));
    }
    ttl_diff(src.pttl, dst.pttl, tolerance_ms).map(|d| (DiffKind::Ttl, d))
}

/// Length of a Redis HyperLogLog header: "HYLL", encoding (0 dense, 1 sparse), 3 unused bytes,
/// 8 bytes of cached cardinality (Redis src/hyperloglog.c).
const HLL_HEADER: usize = 16;
/// Where the cached cardinality sits in the header.
const HLL_CARD: std::ops::Range<usize> = 8..16;

/// The encoding byte of `v` when it is a HyperLogLog (dense 0 or sparse 1).
fn hll_encoding(v: &[u8]) -> Option<u8> {
    match v.get(4) {
        Some(&e) if v.len() >= HLL_HEADER && v.starts_with(b"HYLL") && e <= 1 => Some(e),
        _ => None,
    }
}

/// Whether `src` and `dst` are HyperLogLogs of different encodings (sparse vs dense), which
/// only PFCOUNT on both sides can compare.
pub fn hll_needs_counts(src: &Snapshot, dst: Option<&Snapshot>) -> bool {
    match (&src.data, dst.map(|d| &d.data)) {
        (Data::String(x), Some(Data::String(y))) => {
            matches!((hll_encoding(x), hll_encoding(y)), (Some(a), Some(b)) if a != b)
        }
        _ => false,
    }
}

/// Strings compared byte for byte, HyperLogLogs as described at [`compare`].
fn string_diff(x: &[u8], y: &[u8], hll_counts: Option<(i64, i64)>) -> Option<String> {
    match (hll_encoding(x), hll_encoding(y)) {
        (Some(a), Some(b)) if a == b => {
            let equal = x.len() == y.len()
                && x[..HLL_CARD.start] == y[..HLL_CARD.start]
                && x[HLL_CARD.end..] == y[HLL_CARD.end..];
            (!equal).then(|| format!("hyperloglog: {} vs {}", quoted(x), quoted(y)))
        }
        (Some(a), Some(b)) => {
            let name = |e: u8| if e == 0 { "dense" } else { "sparse" };
            match hll_counts {
                Some((m, n)) => {
                    (m != n).then(|| format!("hyperloglog count (PFCOUNT): {m} vs {n}"))
                }
                None => Some(format!("hyperloglog encodings: {} vs {}", name(a), name(b))),
            }
        }
        _ => (x != y).then(|| format!("value: {} vs {}", quoted(x), quoted(y))),
    }
}

fn ttl_diff(a: i64, b: i64, tolerance_ms: i64) -> Option<String> {
    let show = |t: i64| {
        if t < 0 {
            "none".to_string()
        } else {
            format!("{:.1}s", t as f64 / 1000.0)
        }
    };
    let differs = match (a < 0, b < 0) {
        (true, true) => false,
        (false, false) => (a - b).abs() > tolerance_ms,
        _ => true,
    };
    differs.then(|| format!("ttl: {} vs {}", show(a), show(b)))
}

fn data_diff(a: &Data, b: &Data) -> Option<String> {
    match (a, b) {
        (Data::String(x), Data::String(y)) => {
            (x != y).then(|| format!("value: {} vs {}", quoted(x), quoted(y)))
        }
        (Data::Hash(x), Data::Hash(y)) => map_diff(x, y, "hash field", "", |v| quoted(v)),
        (Data::List(x), Data::List(y)) => list_diff(x, y),
        (Data::Set(x), Data::Set(y)) => set_diff(x, y),
        (Data::ZSet(x), Data::ZSet(y)) => {
            map_diff(x, y, "zset member", "score ", f64::to_string).filter(|_| !zset_eq(x, y))
        }
        (Data::Stream(x), Data::Stream(y)) => stream_diff(x, y),
        (Data::Dump(x), Data::Dump(y)) => (x != y).then(|| "value: DUMP payloads differ".into()),
        _ => Some("value: contents of different shapes".to_string()),
    }
}

/// Scores compared as numbers (NaN never comes from Redis; two unparsable scores compare equal
/// so that they are not reported forever).
fn zset_eq(x: &BTreeMap<Vec<u8>, f64>, y: &BTreeMap<Vec<u8>, f64>) -> bool {
    x.len() == y.len()
        && x.iter()
            .zip(y)
            .all(|((ka, va), (kb, vb))| ka == kb && (va == vb || (va.is_nan() && vb.is_nan())))
}

/// First key whose value differs or that one side lacks, in key order.
fn map_diff<V: PartialEq>(
    x: &BTreeMap<Vec<u8>, V>,
    y: &BTreeMap<Vec<u8>, V>,
    what: &str,
    label: &str,
    show: impl Fn(&V) -> String,
) -> Option<String> {
    for (k, v) in x {
        match y.get(k) {
            None => {
                return Some(format!(
                    "{what} {}: {label}{} vs missing",
                    quoted(k),
                    show(v)
                ));
            }
            Some(w) if w != v => {
                let (a, b) = (show(v), show(w));
                return Some(format!("{what} {}: {label}{a} vs {b}", quoted(k)));
            }
            Some(_) => {}
        }
    }
    let extra = y.iter().find(|(k, _)| !x.contains_key(*k))?;
    Some(format!(
        "{what} {}: missing vs {label}{}",
        quoted(extra.0),
        show(extra.1)
    ))
}

fn list_diff(x: &[Vec<u8>], y: &[Vec<u8>]) -> Option<String> {
    if let Some(i) = x.iter().zip(y).position(|(a, b)| a != b) {
        return Some(format!(
            "list index {i}: {} vs {}",
            quoted(&x[i]),
            quoted(&y[i])
        ));
    }
    (x.len() != y.len()).then(|| format!("list length: {} vs {}", x.len(), y.len()))
}

fn set_diff(x: &BTreeSet<Vec<u8>>, y: &BTreeSet<Vec<u8>>) -> Option<String> {
    if let Some(m) = x.difference(y).next() {
        return Some(format!("set member {}: missing on target", quoted(m)));
    }
    let m = y.difference(x).next()?;
    Some(format!("set member {}: only on target", quoted(m)))
}

fn stream_diff(x: &[StreamEntry], y: &[StreamEntry]) -> Option<String> {
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        if a.0 != b.0 {
            return Some(format!("stream entry #{i}: id {} vs {}", a.0, b.0));
        }
        if a.1 != b.1 {
            return Some(format!("stream entry {}: fields differ", a.0));
        }
    }
    (x.len() != y.len()).then(|| format!("stream length: {} vs {}", x.len(), y.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(kind: &str, pttl: i64, data: Data) -> Snapshot {
        Snapshot {
            kind: kind.into(),
            pttl,
            data,
        }
    }

    #[test]
    fn finds_each_kind() {
        let s = snap("string", -1, Data::String(b"a".to_vec()));
        assert_eq!(compare(&s, Some(&s), 2000, None), None);
        assert_eq!(
            compare(&s, None, 2000, None).map(|d| d.0),
            Some(DiffKind::Missing)
        );
        let h = snap("hash", -1, Data::Hash(BTreeMap::new()));
        assert_eq!(
            compare(&s, Some(&h), 2000, None),
            Some((DiffKind::Type, "type: string vs hash".into()))
        );
        let t = snap("string", -1, Data::String(b"b".to_vec()));
        assert_eq!(
            compare(&s, Some(&t), 2000, None),
            Some((DiffKind::Value, "value: \"a\" vs \"b\"".into()))
        );
        let ttl = snap("string", 100_000, Data::String(b"a".to_vec()));
        assert_eq!(
            compare(&ttl, Some(&s), 2000, None),
            Some((DiffKind::Ttl, "ttl: 100.0s vs none".into()))
        );
        let near = snap("string", 99_000, Data::String(b"a".to_vec()));
        assert_eq!(compare(&ttl, Some(&near), 2000, None), None);
        assert!(compare(&ttl, Some(&near), 500, None).is_some());
    }

    #[test]
    fn hyperloglogs_ignore_the_cached_cardinality() {
        let hll = |enc: u8, card: u8, regs: &[u8]| {
            let mut v = b"HYLL".to_vec();
            v.extend([enc, 0, 0, 0, card, 0, 0, 0, 0, 0, 0, 0x80]);
            v.extend_from_slice(regs);
            snap("string", -1, Data::String(v))
        };
        let (a, b) = (hll(1, 4, b"regs"), hll(1, 0, b"regs"));
        assert_eq!(compare(&a, Some(&b), 2000, None), None);
        assert!(!hll_needs_counts(&a, Some(&b)));
        let c = hll(1, 4, b"regz");
        let d = compare(&a, Some(&c), 2000, None).expect("registers differ");
        assert_eq!(d.0, DiffKind::Value);
        assert!(d.1.starts_with("hyperloglog: "), "{}", d.1);
        // Sparse vs dense: by PFCOUNT.
        let dense = hll(0, 0, b"other registers");
        assert!(hll_needs_counts(&a, Some(&dense)));
        assert_eq!(compare(&a, Some(&dense), 2000, Some((4, 4))), None);
        assert_eq!(
            compare(&a, Some(&dense), 2000, Some((4, 5))),
            Some((
                DiffKind::Value,
                "hyperloglog count (PFCOUNT): 4 vs 5".into()
            ))
        );
        assert_eq!(
            compare(&a, Some(&dense), 2000, None).map(|d| d.1),
            Some("hyperloglog encodings: sparse vs dense".into())
        );
        // TTLs still count.
        let mut t = hll(1, 0, b"regs");
        t.pttl = 100_000;
        assert_eq!(
            compare(&t, Some(&a), 2000, None).map(|d| d.0),
            Some(DiffKind::Ttl)
        );
        // Not an HLL (too short, or another string starting with HYLL): bytes.
        let s = |v: &[u8]| snap("string", -1, Data::String(v.to_vec()));
        assert!(compare(&s(b"HYLL\x01"), Some(&s(b"HYLL\x00")), 2000, None).is_some());
    }

    #[test]
    fn describes_values() {
        let h = |f: &[u8], v: &[u8]| Data::Hash([(f.to_vec(), v.to_vec())].into());
        assert_eq!(
            data_diff(&h(b"f", b"1"), &h(b"f", b"2")).as_deref(),
            Some("hash field \"f\": \"1\" vs \"2\"")
        );
        assert_eq!(
            data_diff(&h(b"f", b"1"), &h(b"g", b"1")).as_deref(),
            Some("hash field \"f\": \"1\" vs missing")
        );
        let z = |s: f64| Data::ZSet([(b"m".to_vec(), s)].into());
        assert_eq!(
            data_diff(&z(1.0), &z(2.0)).as_deref(),
            Some("zset member \"m\": score 1 vs 2")
        );
        assert_eq!(data_diff(&z(1.5), &z(1.5)), None);
        let l = |v: &[&[u8]]| Data::List(v.iter().map(|e| e.to_vec()).collect());
        assert_eq!(
            data_diff(&l(&[b"a", b"b"]), &l(&[b"a", b"c"])).as_deref(),
            Some("list index 1: \"b\" vs \"c\"")
        );
        assert_eq!(
            data_diff(&l(&[b"a"]), &l(&[b"a", b"c"])).as_deref(),
            Some("list length: 1 vs 2")
        );
        let st = |m: &[u8]| Data::Set([m.to_vec()].into());
        assert_eq!(
            data_diff(&st(b"x"), &st(b"y")).as_deref(),
            Some("set member \"x\": missing on target")
        );
        let x = |id: &str, v: &[u8]| {
            Data::Stream(vec![(id.to_string(), vec![(b"f".to_vec(), v.to_vec())])])
        };
        assert_eq!(
            data_diff(&x("1-0", b"a"), &x("1-0", b"b")).as_deref(),
            Some("stream entry 1-0: fields differ")
        );
        assert_eq!(
            data_diff(&x("1-0", b"a"), &x("2-0", b"a")).as_deref(),
            Some("stream entry #0: id 1-0 vs 2-0")
        );
    }
}

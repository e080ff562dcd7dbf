//! Comparing a source snapshot with the target's: the first difference, described briefly
//! (source value first).

use std::collections::{BTreeMap, BTreeSet};

use super::report::{DiffKind, quoted};
use super::value::{Data, Snapshot, StreamEntry};

/// The first difference between `src` and `dst` (`None` = the key is missing on the target),
/// or `None` when equal. TTLs within `tolerance_ms` of each other are equal; a TTL on one side
/// only is a difference.
pub fn compare(
    src: &Snapshot,
    dst: Option<&Snapshot>,
    tolerance_ms: i64,
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
    if let Some(detail) = data_diff(&src.data, &dst.data) {
        return Some((DiffKind::Value, detail));
    }
    ttl_diff(src.pttl, dst.pttl, tolerance_ms).map(|d| (DiffKind::Ttl, d))
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
        assert_eq!(compare(&s, Some(&s), 2000), None);
        assert_eq!(
            compare(&s, None, 2000).map(|d| d.0),
            Some(DiffKind::Missing)
        );
        let h = snap("hash", -1, Data::Hash(BTreeMap::new()));
        assert_eq!(
            compare(&s, Some(&h), 2000),
            Some((DiffKind::Type, "type: string vs hash".into()))
        );
        let t = snap("string", -1, Data::String(b"b".to_vec()));
        assert_eq!(
            compare(&s, Some(&t), 2000),
            Some((DiffKind::Value, "value: \"a\" vs \"b\"".into()))
        );
        let ttl = snap("string", 100_000, Data::String(b"a".to_vec()));
        assert_eq!(
            compare(&ttl, Some(&s), 2000),
            Some((DiffKind::Ttl, "ttl: 100.0s vs none".into()))
        );
        let near = snap("string", 99_000, Data::String(b"a".to_vec()));
        assert_eq!(compare(&ttl, Some(&near), 2000), None);
        assert!(compare(&ttl, Some(&near), 500).is_some());
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

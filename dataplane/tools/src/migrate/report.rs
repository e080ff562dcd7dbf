//! Results of `verify` and `copy`: counts, sample differences, the text table and the JSON
//! object (field names are stable: docs/migration.md documents them).

use std::fmt::Write as _;

use serde::Serialize;

/// How a key differs between source and target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// The key exists on the source only.
    Missing,
    /// `TYPE` differs.
    Type,
    /// Same type, different contents.
    Value,
    /// Same contents; TTLs differ by more than the tolerance, or only one side has one.
    Ttl,
}

impl DiffKind {
    /// The name used in the table and the JSON (`missing`, `type`, `value`, `ttl`).
    pub fn name(self) -> &'static str {
        match self {
            DiffKind::Missing => "missing",
            DiffKind::Type => "type",
            DiffKind::Value => "value",
            DiffKind::Ttl => "ttl",
        }
    }
}

/// One key found different (after the re-checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// The key, printable: bytes outside printable ASCII as `\xNN`, `"` and `\` escaped.
    pub key: String,
    /// What differs.
    pub kind: DiffKind,
    /// A short description, source first (`hash field "f": "1" vs "2"`, `ttl: 100.0s vs none`).
    pub detail: String,
}

/// Counts of a `verify` run. Every scanned key is checked (or sampled out); a checked key is
/// equal, skipped or counted under exactly one difference (the first found, in the order
/// missing, type, value, ttl).
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifySummary {
    /// Keys returned by SCAN on the source.
    pub scanned: u64,
    /// Keys compared (scanned minus those left out by `--sample`).
    pub checked: u64,
    /// Keys equal on both sides.
    pub equal: u64,
    /// Keys missing on the target.
    pub missing: u64,
    /// Keys of another type on the target.
    pub type_differs: u64,
    /// Keys with other contents on the target.
    pub value_differs: u64,
    /// Keys whose TTLs differ beyond the tolerance.
    pub ttl_drift: u64,
    /// Keys gone from the source before they could be compared.
    pub skipped: u64,
    /// `missing + type_differs + value_differs + ttl_drift`.
    pub differences: u64,
    /// Keys the source held at the start (DBSIZE over its primaries).
    pub source_keys: u64,
    /// Wall time of the run, seconds.
    pub elapsed_seconds: f64,
    /// Up to `--show` differences, in the order found.
    pub diffs: Vec<Diff>,
}

impl VerifySummary {
    /// Counts one difference, keeping it as a sample while fewer than `show` are kept.
    pub fn add_diff(&mut self, diff: Diff, show: usize) {
        match diff.kind {
            DiffKind::Missing => self.missing += 1,
            DiffKind::Type => self.type_differs += 1,
            DiffKind::Value => self.value_differs += 1,
            DiffKind::Ttl => self.ttl_drift += 1,
        }
        self.differences += 1;
        if self.diffs.len() < show {
            self.diffs.push(diff);
        }
    }

    /// The summary table and sample diffs, as printed on stdout.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let rows = [
            ("scanned", self.scanned),
            ("checked", self.checked),
            ("equal", self.equal),
            ("missing on target", self.missing),
            ("type differs", self.type_differs),
            ("value differs", self.value_differs),
            ("ttl drift", self.ttl_drift),
            ("skipped (gone from source)", self.skipped),
            ("differences", self.differences),
        ];
        for (name, n) in rows {
            let _ = writeln!(s, "{name:<28}{n:>12}");
        }
        let _ = writeln!(s, "{:<28}{:>11.1}s", "elapsed", self.elapsed_seconds);
        if !self.diffs.is_empty() {
            let _ = writeln!(
                s,
                "\nsample differences ({} of {}):",
                self.diffs.len(),
                self.differences
            );
            for d in &self.diffs {
                let _ = writeln!(s, "  {:<8} {}  {}", d.kind.name(), d.key, d.detail);
            }
        }
        s
    }
}

/// Counts of a `copy` run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CopySummary {
    /// Keys returned by SCAN on the source in this run.
    pub scanned: u64,
    /// Keys restored on the target.
    pub copied: u64,
    /// Keys gone (expired or deleted) from the source before DUMP.
    pub skipped_expired: u64,
    /// Keys with a TTL, left alone because of `--persistent-only`.
    pub skipped_ttl: u64,
    /// Keys whose DUMP or RESTORE failed (first error printed).
    pub failed: u64,
    /// Whether this run continued from a cursor file.
    pub resumed: bool,
    /// Wall time of the run, seconds.
    pub elapsed_seconds: f64,
}

impl CopySummary {
    /// The summary table, as printed on stdout.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let rows = [
            ("scanned", self.scanned),
            ("copied", self.copied),
            ("skipped (expired)", self.skipped_expired),
            ("skipped (has ttl)", self.skipped_ttl),
            ("failed", self.failed),
        ];
        for (name, n) in rows {
            let _ = writeln!(s, "{name:<28}{n:>12}");
        }
        let _ = writeln!(s, "{:<28}{:>12}", "resumed", self.resumed);
        let _ = writeln!(s, "{:<28}{:>11.1}s", "elapsed", self.elapsed_seconds);
        s
    }
}

/// `b` as printable text (redis-cli style): printable ASCII as is, `"` and `\` escaped, other
/// bytes as `\xNN`. Truncated to `max` bytes of input with `…`.
pub fn printable(b: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &c in b.iter().take(max) {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(char::from(c)),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    if b.len() > max {
        s.push('…');
    }
    s
}

/// `b` quoted for a diff detail.
pub fn quoted(b: &[u8]) -> String {
    format!("\"{}\"", printable(b, 40))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes() {
        assert_eq!(printable(b"a\"b\\\x01", 100), "a\\\"b\\\\\\x01");
        assert_eq!(printable(b"abcdef", 3), "abc…");
    }

    #[test]
    fn summary_counts_and_keeps_samples() {
        let mut s = VerifySummary::default();
        for kind in [DiffKind::Missing, DiffKind::Ttl, DiffKind::Ttl] {
            let d = Diff {
                key: "k".into(),
                kind,
                detail: String::new(),
            };
            s.add_diff(d, 2);
        }
        assert_eq!((s.missing, s.ttl_drift, s.differences), (1, 2, 3));
        assert_eq!(s.diffs.len(), 2);
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["diffs"][1]["kind"], "ttl");
        assert!(s.table().contains("ttl drift"));
    }
}

//! The one type of the sockmap's counters: read from the maps by the loader, shown by
//! respite-control (`GET /sockmap` JSON, `respite-control sockmap status` lines) and read back
//! from those by the benchmark and the tests. The field names are the names shown.

use std::collections::BTreeMap;
use std::fmt;

/// Counters of the programs since the maps were created (they survive restarts of the control
/// process, like the pins), and the sockets in the map now. As JSON (serde), a missing field
/// reads as 0: an unavailable sockmap shows none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Sockets in the SOCKHASH now, a gauge (closed sockets leave it by themselves).
    pub sockets: u64,
    /// Sockets recorded by sockops.
    pub inserts: u64,
    /// Sockets sockops could not record (map full: 65 536 sockets).
    pub insert_fail: u64,
    /// Messages handed to the peer socket.
    pub redirect_total: u64,
    /// Messages whose peer was not in the map: they took TCP, and so will every later message
    /// of that socket (e.g. a client outside the cgroup).
    pub redirect_fail: u64,
}

impl Counters {
    /// `self - before`, counter by counter (`sockets`, a gauge, is `self`'s); a counter that went
    /// down (maps recreated) counts from 0.
    #[must_use]
    pub fn since(self, before: Counters) -> Counters {
        let d = |a: u64, b: u64| a.checked_sub(b).unwrap_or(a);
        Counters {
            sockets: self.sockets,
            inserts: d(self.inserts, before.inserts),
            insert_fail: d(self.insert_fail, before.insert_fail),
            redirect_total: d(self.redirect_total, before.redirect_total),
            redirect_fail: d(self.redirect_fail, before.redirect_fail),
        }
    }

    /// Reads the `name value` lines that [`Counters`]' `Display` writes, among other lines
    /// (`respite-control sockmap status` adds `enabled` and `ports`). `None` when a counter's
    /// line is missing.
    pub fn from_lines(text: &str) -> Option<Counters> {
        let map: BTreeMap<&str, u64> = text
            .lines()
            .filter_map(|l| {
                let (k, v) = l.trim().split_once(' ')?;
                Some((k, v.trim().parse().ok()?))
            })
            .collect();
        Some(Counters {
            sockets: *map.get("sockets")?,
            inserts: *map.get("inserts")?,
            insert_fail: *map.get("insert_fail")?,
            redirect_total: *map.get("redirect_total")?,
            redirect_fail: *map.get("redirect_fail")?,
        })
    }
}

/// One `name value` line per counter, no trailing newline.
impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sockets {}\ninserts {}\ninsert_fail {}\nredirect_total {}\nredirect_fail {}",
            self.sockets, self.inserts, self.insert_fail, self.redirect_total, self.redirect_fail
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Counters = Counters {
        sockets: 3,
        inserts: 4,
        insert_fail: 0,
        redirect_total: 100,
        redirect_fail: 2,
    };

    #[test]
    fn lines_round_trip_among_other_lines() {
        let text = format!("enabled 1\n{C}\nports 6379,7000\n");
        assert_eq!(Counters::from_lines(&text), Some(C));
        assert_eq!(Counters::from_lines("enabled 1\nsockets 3\n"), None);
    }

    #[test]
    fn json_names_are_the_field_names_and_missing_ones_read_zero() {
        let json = serde_json::to_value(C).unwrap();
        assert_eq!(json["redirect_total"], 100);
        assert_eq!(serde_json::from_value::<Counters>(json).unwrap(), C);
        let doc = serde_json::json!({"state": "unavailable", "reason": "no clang"});
        assert_eq!(
            serde_json::from_value::<Counters>(doc).unwrap(),
            Counters::default()
        );
    }

    #[test]
    fn since_subtracts_counters_and_keeps_the_gauge() {
        let before = Counters {
            sockets: 9,
            inserts: 1,
            insert_fail: 0,
            redirect_total: 500,
            redirect_fail: 1,
        };
        let d = C.since(before);
        assert_eq!((d.sockets, d.inserts, d.redirect_fail), (3, 3, 1));
        // Maps recreated: counts from 0.
        assert_eq!(d.redirect_total, 100);
    }
}

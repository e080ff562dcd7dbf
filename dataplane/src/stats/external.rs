//! Stats owned by another process: `respite-control` reads its sockmap totals from the kernel
//! and pushes them once a second over the control socket (`POST /stats/external`). They are
//! stored like any other stat, in one reserved shard ([`EXTERNAL_SHARD`]) that no worker uses,
//! so they show in every `/stats` render without a second code path, and the workers' hot path
//! is untouched.
//!
//! Values are SET, not added: the pusher sends totals. A push is all-or-nothing: every line is
//! checked before any value is written.

use super::Store;

/// The shard index of externally-owned stats: no worker index reaches it.
pub const EXTERNAL_SHARD: usize = usize::MAX;

/// Every externally pushed name starts with this: the namespace keeps a pusher from overwriting
/// (or shadowing) the data plane's own stats.
pub const EXTERNAL_PREFIX: &str = "sockmap.";

/// One parsed line of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalStat {
    /// `counter <name> <u64>`: a total, set as the counter's value.
    Counter(String, u64),
    /// `gauge <name> <i64>`: set as the gauge's value.
    Gauge(String, i64),
}

impl ExternalStat {
    fn name(&self) -> &str {
        match self {
            ExternalStat::Counter(n, _) | ExternalStat::Gauge(n, _) => n,
        }
    }
    fn is_counter(&self) -> bool {
        matches!(self, ExternalStat::Counter(..))
    }
}

/// Parses a push body: one `counter <name> <u64>` or `gauge <name> <i64>` per line, fields
/// separated by spaces or tabs; blank lines are ignored. A name starts with
/// [`EXTERNAL_PREFIX`] and is made of `[a-z0-9_]` segments joined by single dots (so it maps
/// onto one Prometheus name, `sockmap.redirect_total` → `envoy_sockmap_redirect_total`).
///
/// # Errors
/// The first bad line, as `line N: "<line>": <reason>` (N is 1-based); also a name given twice
/// with different kinds.
pub fn parse(body: &str) -> Result<Vec<ExternalStat>, String> {
    let mut out: Vec<ExternalStat> = Vec::new();
    for (i, line) in body.lines().enumerate() {
        let bad = |why: &str| format!("line {}: \"{}\": {why}", i + 1, line.escape_debug());
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let stat = match fields.as_slice() {
            [] => continue,
            [kind, name, value] => {
                check_name(name).map_err(|e| bad(&e))?;
                let name = (*name).to_owned();
                match *kind {
                    "counter" => value
                        .parse::<u64>()
                        .map(|v| ExternalStat::Counter(name, v))
                        .map_err(|_| bad("a counter value is an unsigned 64-bit integer"))?,
                    "gauge" => value
                        .parse::<i64>()
                        .map(|v| ExternalStat::Gauge(name, v))
                        .map_err(|_| bad("a gauge value is a signed 64-bit integer"))?,
                    _ => return Err(bad("expected \"counter\" or \"gauge\" first")),
                }
            }
            _ => {
                return Err(bad(
                    "expected `counter <name> <u64>` or `gauge <name> <i64>`",
                ));
            }
        };
        if out
            .iter()
            .any(|s| s.name() == stat.name() && s.is_counter() != stat.is_counter())
        {
            return Err(bad("the same name is pushed as a counter and as a gauge"));
        }
        out.push(stat);
    }
    Ok(out)
}

fn check_name(name: &str) -> Result<(), String> {
    let Some(rest) = name.strip_prefix(EXTERNAL_PREFIX) else {
        return Err(format!(
            "the name must start with \"{EXTERNAL_PREFIX}\" (only those stats are pushed)"
        ));
    };
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if !rest.split('.').all(segment_ok) {
        return Err("a name is [a-z0-9_] segments joined by single dots".into());
    }
    Ok(())
}

impl Store {
    /// Sets each pushed stat to its value, in the [`EXTERNAL_SHARD`].
    ///
    /// Single writer: pushes are serialized here, so the shard has one writer at a time
    /// whatever thread calls.
    ///
    /// # Errors
    /// A name already registered as the other kind (a counter pushed where a gauge of that name
    /// exists, or the reverse): one Prometheus family cannot carry both. Then nothing is set.
    pub fn set_external(&self, stats: &[ExternalStat]) -> Result<(), String> {
        let _writer = self
            .external_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for s in stats {
            let other_kind = if s.is_counter() {
                self.gauge_value(s.name()).is_some()
            } else {
                self.counter_value(s.name()).is_some()
            };
            if other_kind {
                let (was, now) = if s.is_counter() {
                    ("gauge", "counter")
                } else {
                    ("counter", "gauge")
                };
                return Err(format!(
                    "{} is a {was}; it cannot be pushed as a {now}",
                    s.name()
                ));
            }
        }
        for s in stats {
            match s {
                ExternalStat::Counter(n, v) => self.counter(n, EXTERNAL_SHARD).set(*v),
                ExternalStat::Gauge(n, v) => self.gauge(n, EXTERNAL_SHARD).set(*v),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters_and_gauges_skipping_blank_lines() {
        let body = "counter sockmap.redirect_total 18446744073709551615\n\n  \n\
                    gauge sockmap.sockets -3\r\ngauge\tsockmap.enabled\t1\n\
                    counter sockmap.x_1.y2 0";
        assert_eq!(
            parse(body),
            Ok(vec![
                ExternalStat::Counter("sockmap.redirect_total".into(), u64::MAX),
                ExternalStat::Gauge("sockmap.sockets".into(), -3),
                ExternalStat::Gauge("sockmap.enabled".into(), 1),
                ExternalStat::Counter("sockmap.x_1.y2".into(), 0),
            ])
        );
        assert_eq!(parse(""), Ok(vec![]));
    }

    #[test]
    fn each_bad_line_is_named() {
        let cases: &[(&str, &str)] = &[
            (
                "counter sockmap.a 1\ncounter redis.x.downstream_cx_total 5",
                "line 2: \"counter redis.x.downstream_cx_total 5\": the name must start with \
                 \"sockmap.\" (only those stats are pushed)",
            ),
            (
                "counter sockmap.A 1",
                "line 1: \"counter sockmap.A 1\": a name is [a-z0-9_] segments joined by single dots",
            ),
            (
                "counter sockmap. 1",
                "line 1: \"counter sockmap. 1\": a name is [a-z0-9_] segments joined by single dots",
            ),
            (
                "gauge sockmap.a..b 1",
                "line 1: \"gauge sockmap.a..b 1\": a name is [a-z0-9_] segments joined by single dots",
            ),
            (
                "counter sockmap.a-b 1",
                "line 1: \"counter sockmap.a-b 1\": a name is [a-z0-9_] segments joined by single dots",
            ),
            (
                "counter sockmap.a -1",
                "line 1: \"counter sockmap.a -1\": a counter value is an unsigned 64-bit integer",
            ),
            (
                "counter sockmap.a 18446744073709551616",
                "line 1: \"counter sockmap.a 18446744073709551616\": a counter value is an \
                 unsigned 64-bit integer",
            ),
            (
                "gauge sockmap.a 1.5",
                "line 1: \"gauge sockmap.a 1.5\": a gauge value is a signed 64-bit integer",
            ),
            (
                "histogram sockmap.a 1",
                "line 1: \"histogram sockmap.a 1\": expected \"counter\" or \"gauge\" first",
            ),
            (
                "counter sockmap.a",
                "line 1: \"counter sockmap.a\": expected `counter <name> <u64>` or `gauge <name> <i64>`",
            ),
            (
                "counter sockmap.a 1 2",
                "line 1: \"counter sockmap.a 1 2\": expected `counter <name> <u64>` or \
                 `gauge <name> <i64>`",
            ),
            (
                "counter sockmap.a 1\ngauge sockmap.a 1",
                "line 2: \"gauge sockmap.a 1\": the same name is pushed as a counter and as a gauge",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(parse(body), Err((*want).to_owned()), "{body:?}");
        }
    }

    #[test]
    fn values_are_set_not_added_and_read_back_summed_with_nothing_else() {
        let store = Store::new();
        let push = |body: &str| store.set_external(&parse(body).unwrap());
        push("counter sockmap.redirect_total 10\ngauge sockmap.sockets 4").unwrap();
        push("counter sockmap.redirect_total 25\ngauge sockmap.sockets -2").unwrap();
        assert_eq!(store.counter_value("sockmap.redirect_total"), Some(25));
        assert_eq!(store.gauge_value("sockmap.sockets"), Some(-2));
        // A total may go down (the pinned maps were recreated): it is still what was pushed.
        push("counter sockmap.redirect_total 3").unwrap();
        assert_eq!(store.counter_value("sockmap.redirect_total"), Some(3));
        assert_eq!(
            store.counters(),
            vec![("sockmap.redirect_total".to_owned(), 3)]
        );
        let text = store.render_text();
        assert!(text.contains("sockmap.redirect_total: 3\n"), "{text}");
        assert!(text.contains("sockmap.sockets: -2\n"), "{text}");
        let prom = store.render_prometheus();
        assert!(
            prom.contains(
                "# TYPE envoy_sockmap_redirect_total counter\nenvoy_sockmap_redirect_total 3\n"
            ),
            "{prom}"
        );
        assert!(
            prom.contains("# TYPE envoy_sockmap_sockets gauge\nenvoy_sockmap_sockets -2\n"),
            "{prom}"
        );
    }

    #[test]
    fn a_kind_conflict_with_a_known_stat_sets_nothing() {
        let store = Store::new();
        store
            .set_external(&parse("gauge sockmap.sockets 7").unwrap())
            .unwrap();
        let err = store
            .set_external(&parse("counter sockmap.inserts 1\ncounter sockmap.sockets 9").unwrap())
            .unwrap_err();
        assert_eq!(
            err,
            "sockmap.sockets is a gauge; it cannot be pushed as a counter"
        );
        assert_eq!(store.counter_value("sockmap.inserts"), None);
        assert_eq!(store.counter_value("sockmap.sockets"), None);
        assert_eq!(store.gauge_value("sockmap.sockets"), Some(7));
    }
}

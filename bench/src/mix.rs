//! The `--mix` grammar: which commands the load generator sends and in what proportion.
//!
//! ```text
//! MIX    := ENTRY ("," ENTRY)*
//! ENTRY  := "get" [":" W] | "set" [":" W] | "ping" [":" W]
//!         | "mget" [":" N [":" W]] | "mset" [":" N [":" W]]
//! ```
//!
//! `W` is a relative weight (positive integer, default 1); `N` is the number of keys per MGET /
//! MSET command (default 10). Examples: `get`, `get:80,set:20`, `mget:10`, `mget:10:1,set:3`.
//! Names are case-insensitive; the same command may appear more than once (e.g. `mget:5,mget:50`).

use std::fmt;

/// Largest accepted key count for MGET/MSET.
pub const MAX_KEYS: u32 = 10_000;
/// Default key count for `mget` / `mset` without `:N`.
pub const DEFAULT_KEYS: u32 = 10;

/// One command kind of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Set,
    Ping,
    MGet(u32),
    MSet(u32),
}

impl OpKind {
    /// Keys per command.
    pub fn keys(self) -> u32 {
        match self {
            OpKind::Get | OpKind::Set => 1,
            OpKind::Ping => 0,
            OpKind::MGet(n) | OpKind::MSet(n) => n,
        }
    }

    /// Whether each key is followed by a value argument.
    pub fn with_value(self) -> bool {
        matches!(self, OpKind::Set | OpKind::MSet(_))
    }

    /// Command name as sent on the wire.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "GET",
            OpKind::Set => "SET",
            OpKind::Ping => "PING",
            OpKind::MGet(_) => "MGET",
            OpKind::MSet(_) => "MSET",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpKind::Get => f.write_str("get"),
            OpKind::Set => f.write_str("set"),
            OpKind::Ping => f.write_str("ping"),
            OpKind::MGet(n) => write!(f, "mget:{n}"),
            OpKind::MSet(n) => write!(f, "mset:{n}"),
        }
    }
}

/// A parsed mix: command kinds with relative weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    pub entries: Vec<(OpKind, u32)>,
}

impl Mix {
    /// Sum of all weights (> 0 for a parsed mix).
    pub fn total_weight(&self) -> u64 {
        self.entries.iter().map(|&(_, w)| u64::from(w)).sum()
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single = self.entries.len() == 1;
        for (i, (op, w)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{op}")?;
            if !single {
                write!(f, ":{w}")?;
            }
        }
        Ok(())
    }
}

fn parse_num(s: &str, what: &str, entry: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("`{entry}`: {what} `{s}` is not a positive integer"))?;
    if n == 0 {
        return Err(format!("`{entry}`: {what} must be > 0"));
    }
    Ok(n)
}

/// Parses a `--mix` value (see the module docs for the grammar).
pub fn parse_mix(s: &str) -> Result<Mix, String> {
    let mut entries = Vec::new();
    if s.trim().is_empty() {
        return Err("empty mix".into());
    }
    for raw in s.split(',') {
        let entry = raw.trim();
        if entry.is_empty() {
            return Err(format!("empty entry in mix `{s}`"));
        }
        let mut parts = entry.split(':');
        let name = parts.next().unwrap_or_default().to_ascii_lowercase();
        let rest: Vec<&str> = parts.map(str::trim).collect();
        let (op, weight) = match name.trim() {
            "get" | "set" | "ping" => {
                if rest.len() > 1 {
                    return Err(format!("`{entry}`: expected `{name}[:WEIGHT]`"));
                }
                let w = match rest.first() {
                    Some(w) => parse_num(w, "weight", entry)?,
                    None => 1,
                };
                let op = match name.trim() {
                    "get" => OpKind::Get,
                    "set" => OpKind::Set,
                    _ => OpKind::Ping,
                };
                (op, w)
            }
            "mget" | "mset" => {
                if rest.len() > 2 {
                    return Err(format!("`{entry}`: expected `{name}[:KEYS[:WEIGHT]]`"));
                }
                let n = match rest.first() {
                    Some(n) => parse_num(n, "key count", entry)?,
                    None => DEFAULT_KEYS,
                };
                if n > MAX_KEYS {
                    return Err(format!("`{entry}`: key count must be <= {MAX_KEYS}"));
                }
                let w = match rest.get(1) {
                    Some(w) => parse_num(w, "weight", entry)?,
                    None => 1,
                };
                let op = if name.trim() == "mget" {
                    OpKind::MGet(n)
                } else {
                    OpKind::MSet(n)
                };
                (op, w)
            }
            other => {
                return Err(format!(
                    "`{entry}`: unknown command `{other}` (expected get, set, ping, mget, mset)"
                ));
            }
        };
        entries.push((op, weight));
    }
    Ok(Mix { entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_commands() {
        assert_eq!(parse_mix("get").unwrap().entries, vec![(OpKind::Get, 1)]);
        assert_eq!(parse_mix("SET").unwrap().entries, vec![(OpKind::Set, 1)]);
        assert_eq!(parse_mix("ping").unwrap().entries, vec![(OpKind::Ping, 1)]);
        assert_eq!(
            parse_mix("mget").unwrap().entries,
            vec![(OpKind::MGet(DEFAULT_KEYS), 1)]
        );
        assert_eq!(
            parse_mix("mset:5").unwrap().entries,
            vec![(OpKind::MSet(5), 1)]
        );
    }

    #[test]
    fn weighted() {
        let m = parse_mix("get:80, set:20").unwrap();
        assert_eq!(m.entries, vec![(OpKind::Get, 80), (OpKind::Set, 20)]);
        assert_eq!(m.total_weight(), 100);
        let m = parse_mix("mget:10:1,set:3,mset:2:4").unwrap();
        assert_eq!(
            m.entries,
            vec![
                (OpKind::MGet(10), 1),
                (OpKind::Set, 3),
                (OpKind::MSet(2), 4)
            ]
        );
    }

    #[test]
    fn display_round_trips() {
        for s in ["get", "mget:10", "get:80,set:20", "mget:10:1,set:3"] {
            let m = parse_mix(s).unwrap();
            assert_eq!(parse_mix(&m.to_string()).unwrap(), m, "{s}");
        }
        assert_eq!(
            parse_mix("get:80,set:20").unwrap().to_string(),
            "get:80,set:20"
        );
    }

    #[test]
    fn errors() {
        for bad in [
            "",
            "get,",
            ",get",
            "foo",
            "get:0",
            "get:x",
            "get:1:2",
            "mget:0",
            "mget:10:0",
            "mget:1:2:3",
            "mget:100000",
            "set:-1",
        ] {
            assert!(parse_mix(bad).is_err(), "`{bad}` should be rejected");
        }
    }
}

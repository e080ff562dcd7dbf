//! `/hot_keys`: the most requested keys and the latest big values of each listener that tracks
//! them (beyond Envoy; [`crate::stats::hotkeys`]).
//!
//! Text: per listener, a header naming the stat prefix and the window, then one `key count`
//! line per hot key (most requested first), then the big values, newest first:
//!
//! ```text
//! redis.main: top 2 keys over 1m
//!   "user:1" 120
//!   "bin\x00key" 7
//! redis.main: 1 big values (newest first)
//!   1700000000123 request set "blob" 1048576 bytes
//! ```
//!
//! Keys are shown as `redis-cli` shows them (double-quoted; `\\`, `\"`, `\n`, `\r`, `\t`, `\a`,
//! `\b` escaped, other bytes outside printable ASCII as `\xhh`), so binary keys stay readable and
//! unambiguous. A listener with hot keys off shows `hot keys off`.
//!
//! JSON (`?format=json`): `{"listeners":[{"stat_prefix","window":"1m","top":[{"key","count"}],
//! "big_values":[{"key","command","bytes","direction","unix_ms"}]}]}`; `key` is the key itself
//! when it is valid UTF-8, else its redis-cli form without the quotes, with `"key_escaped":true`.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::stats::hotkeys::HotKeysReport;

/// `bytes` as `redis-cli` prints a bulk string (its `sdscatrepr`), quotes included.
pub fn redis_cli_repr(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// The text form (module docs).
pub fn render_text(reports: &[HotKeysReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let scope = format!("redis.{}", r.stat_prefix);
        if r.window.is_zero() {
            let _ = writeln!(out, "{scope}: hot keys off");
        } else {
            let _ = writeln!(
                out,
                "{scope}: top {} keys over {}",
                r.top.len(),
                humantime::format_duration(r.window)
            );
            for (key, count) in &r.top {
                let _ = writeln!(out, "  {} {count}", redis_cli_repr(key));
            }
        }
        if !r.big_values.is_empty() {
            let _ = writeln!(
                out,
                "{scope}: {} big values (newest first)",
                r.big_values.len()
            );
            for b in &r.big_values {
                let _ = writeln!(
                    out,
                    "  {} {} {} {} {} bytes",
                    b.unix_ms,
                    b.direction,
                    b.command,
                    redis_cli_repr(&b.key),
                    b.bytes
                );
            }
        }
    }
    out
}

/// A key as a JSON object's fields: the text itself, or its escaped form, flagged.
fn key_fields(key: &[u8], into: &mut serde_json::Map<String, Value>) {
    match std::str::from_utf8(key) {
        Ok(s) => {
            into.insert("key".into(), json!(s));
        }
        Err(_) => {
            let repr = redis_cli_repr(key);
            let inner = &repr[1..repr.len() - 1];
            into.insert("key".into(), json!(inner));
            into.insert("key_escaped".into(), json!(true));
        }
    }
}

/// The JSON form (module docs).
pub fn render_json(reports: &[HotKeysReport]) -> Value {
    let listeners: Vec<Value> = reports
        .iter()
        .map(|r| {
            let top: Vec<Value> = r
                .top
                .iter()
                .map(|(key, count)| {
                    let mut o = serde_json::Map::new();
                    key_fields(key, &mut o);
                    o.insert("count".into(), json!(count));
                    Value::Object(o)
                })
                .collect();
            let big: Vec<Value> = r
                .big_values
                .iter()
                .map(|b| {
                    let mut o = serde_json::Map::new();
                    key_fields(&b.key, &mut o);
                    o.insert("command".into(), json!(b.command));
                    o.insert("bytes".into(), json!(b.bytes));
                    o.insert("direction".into(), json!(b.direction));
                    o.insert("unix_ms".into(), json!(b.unix_ms));
                    Value::Object(o)
                })
                .collect();
            json!({
                "stat_prefix": r.stat_prefix,
                "window": humantime::format_duration(r.window).to_string(),
                "top": top,
                "big_values": big,
            })
        })
        .collect();
    json!({ "listeners": listeners })
}

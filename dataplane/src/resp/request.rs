//! Client request parsing: RESP multibulk arrays and inline commands.
//!
//! Rules and error texts follow Redis 7.0 `networking.c` (`processMultibulkBuffer`,
//! `processInlineBuffer`) and `sds.c` (`sdssplitargs`, `string2ll` in `util.c`).

use std::ops::Range;

use super::{Limits, Parsed, ProtocolError, RequestParser};

/// Where a partially parsed request stands (kept in the parser between calls).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    /// No request started: the next call begins at offset 0 and clears `args`.
    #[default]
    Fresh,
    /// Inside a multibulk array: `remaining` bulks still to read; the next bulk header starts at
    /// `pos`; `bulk` is the length of a bulk whose header is already read (data starts at `pos`).
    Multibulk {
        pos: usize,
        remaining: usize,
        bulk: Option<usize>,
    },
    /// An inline line with no newline in `buf[..scanned]`.
    Inline { scanned: usize },
}

fn err(msg: &str) -> ProtocolError {
    ProtocolError(msg.to_string())
}

/// Redis `string2ll` (util.c): optional `-`, no `+`, no leading zeros, no `-0`, no spaces, fits
/// i64. The one integer reader of request arguments and integer replies, so that e.g. `SELECT 00`
/// and `EVAL s 01` are refused as Redis refuses them.
pub(crate) fn string2ll(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        None => return None,
        Some((b'-', rest)) => (true, rest),
        Some(_) => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Finds a header line starting at `start`: returns (end of digits = index of `\r`, index after
/// the line). Like Redis, the line ends at the first `\r`, which must be followed by one more
/// byte (the `\n`, skipped without checking, as `processMultibulkBuffer` does).
fn header_line(buf: &[u8], start: usize) -> Option<(usize, usize)> {
    let rest = buf.get(start..)?;
    let cr = rest.iter().position(|&b| b == b'\r')?;
    let cr = start + cr;
    if cr + 2 > buf.len() {
        return None;
    }
    Some((cr, cr + 2))
}

impl RequestParser {
    pub(super) fn parse_impl(
        &mut self,
        buf: &[u8],
        args: &mut Vec<Range<usize>>,
        scratch: &mut Vec<u8>,
    ) -> Result<Parsed, ProtocolError> {
        let limits = self.limits;
        let res = match self.progress {
            Progress::Fresh => {
                let Some(&first) = buf.first() else {
                    return Ok(Parsed::Incomplete);
                };
                args.clear();
                if first == b'*' {
                    self.multibulk_header(buf, args, &limits)
                } else {
                    scratch.clear();
                    self.inline(buf, 0, args, scratch, &limits)
                }
            }
            Progress::Multibulk {
                pos,
                remaining,
                bulk,
            } => self.bulks(buf, pos, remaining, bulk, args, &limits),
            Progress::Inline { scanned } => self.inline(buf, scanned, args, scratch, &limits),
        };
        match res {
            Ok(Parsed::Incomplete) => {}
            Ok(_) => self.progress = Progress::Fresh,
            Err(_) => {
                self.progress = Progress::Fresh;
                args.clear();
            }
        }
        res
    }

    /// `*<n>\r\n` (Redis 7.0 `processMultibulkBuffer`, first block): any `n <= 0` is an empty
    /// request, as in Redis.
    fn multibulk_header(
        &mut self,
        buf: &[u8],
        args: &mut Vec<Range<usize>>,
        limits: &Limits,
    ) -> Result<Parsed, ProtocolError> {
        let Some((cr, next)) = header_line(buf, 0) else {
            if buf.len() > limits.max_inline_len {
                return Err(err("too big mbulk count string"));
            }
            return Ok(Parsed::Incomplete);
        };
        let n = match string2ll(buf.get(1..cr).unwrap_or_default()) {
            Some(n) if n <= 0 => return Ok(Parsed::Empty { consumed: next }),
            Some(n) if n > 0 && (n as u64) <= limits.max_multibulk_len as u64 => n as usize,
            _ => return Err(err("invalid multibulk length")),
        };
        self.bulks(buf, next, n, None, args, limits)
    }

    /// `$<len>\r\n<bytes>\r\n` × remaining (Redis 7.0 `processMultibulkBuffer`, bulk loop).
    fn bulks(
        &mut self,
        buf: &[u8],
        mut pos: usize,
        mut remaining: usize,
        mut bulk: Option<usize>,
        args: &mut Vec<Range<usize>>,
        limits: &Limits,
    ) -> Result<Parsed, ProtocolError> {
        while remaining > 0 {
            let len = match bulk {
                Some(len) => len,
                None => {
                    let Some((cr, next)) = header_line(buf, pos) else {
                        if buf.len().saturating_sub(pos) > limits.max_inline_len {
                            return Err(err("too big bulk count string"));
                        }
                        break;
                    };
                    match buf.get(pos) {
                        Some(b'$') => {}
                        Some(&c) => {
                            let mut m = String::from("expected '$', got '");
                            m.push(char::from(c));
                            m.push('\'');
                            return Err(ProtocolError(m));
                        }
                        None => break,
                    }
                    let len = match string2ll(buf.get(pos + 1..cr).unwrap_or_default()) {
                        Some(n) if n >= 0 && (n as u64) <= limits.max_bulk_len as u64 => n as usize,
                        _ => return Err(err("invalid bulk length")),
                    };
                    pos = next;
                    bulk = Some(len);
                    len
                }
            };
            // Data plus the trailing CRLF.
            let Some(end) = pos.checked_add(len) else {
                return Err(err("invalid bulk length"));
            };
            // Redis 7.0 skips the two bytes after the data without looking at them; so do we, so
            // that the same bytes mean the same commands through Respite as against Redis.
            if buf.len() < end.saturating_add(2) {
                break;
            }
            args.push(pos..end);
            pos = end + 2;
            bulk = None;
            remaining -= 1;
        }
        if remaining == 0 {
            return Ok(Parsed::Resp { consumed: pos });
        }
        self.progress = Progress::Multibulk {
            pos,
            remaining,
            bulk,
        };
        Ok(Parsed::Incomplete)
    }

    /// An inline command line (Redis 7.0 `processInlineBuffer` + `sdssplitargs`).
    fn inline(
        &mut self,
        buf: &[u8],
        scanned: usize,
        args: &mut Vec<Range<usize>>,
        scratch: &mut Vec<u8>,
        limits: &Limits,
    ) -> Result<Parsed, ProtocolError> {
        let from = scanned.min(buf.len());
        // Redis finds the end of an inline line with strchr: a NUL before the newline hides it,
        // so the line never completes (until it is too big). Same here, rather than truncating:
        // the scan stays parked on the NUL.
        let hit = buf
            .get(from..)
            .and_then(|r| r.iter().position(|&b| b == b'\n' || b == 0))
            .map(|i| from + i);
        let nl = match hit {
            Some(i) if buf.get(i) == Some(&b'\n') => i,
            _ => {
                if buf.len() > limits.max_inline_len {
                    return Err(err("too big inline request"));
                }
                self.progress = Progress::Inline {
                    scanned: hit.unwrap_or(buf.len()),
                };
                return Ok(Parsed::Incomplete);
            }
        };
        let mut line = buf.get(..nl).unwrap_or_default();
        if let [head @ .., b'\r'] = line {
            line = head;
        }
        scratch.clear();
        args.clear();
        split_args(line, args, scratch)?;
        if args.is_empty() {
            Ok(Parsed::Empty { consumed: nl + 1 })
        } else {
            Ok(Parsed::Inline { consumed: nl + 1 })
        }
    }
}

/// C `isspace` in the "C" locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Redis `sdssplitargs` (sds.c): splits `line` into arguments written to `scratch`, pushing
/// their ranges into `args`. The line ends at its first NUL byte, as the C string does.
pub(crate) fn split_args(
    line: &[u8],
    args: &mut Vec<Range<usize>>,
    scratch: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    let line = match line.iter().position(|&b| b == 0) {
        Some(z) => line.get(..z).unwrap_or_default(),
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let unbalanced = || err("unbalanced quotes in request");
    let mut p = 0usize;
    loop {
        while p < line.len() && is_space(at(p)) {
            p += 1;
        }
        if p >= line.len() {
            return Ok(());
        }
        let start = scratch.len();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = at(p);
            if inq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && let (Some(h), Some(l)) = (hex_val(at(p + 2)), hex_val(at(p + 3)))
                {
                    scratch.push(h * 16 + l);
                    p += 4;
                    continue;
                }
                if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    scratch.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a space or nothing at all.
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(unbalanced());
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(unbalanced());
                } else {
                    scratch.push(c);
                }
            } else if insq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    scratch.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(unbalanced());
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(unbalanced());
                } else {
                    scratch.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => scratch.push(c),
                }
            }
            p += 1;
        }
        args.push(start..scratch.len());
    }
}

//! A small RESP reply reader: finds where one complete reply ends and classifies it.
//!
//! It verifies framing (type bytes, CRLF terminators, bulk lengths, nested aggregates) without
//! building values. RESP2 types (`+ - : $ *`, including nil bulk `$-1` and nil array `*-1`) and
//! the common RESP3 types (`_ , # ( = ! % ~ > |`) are accepted.

/// What a complete top-level reply was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// Any non-error, non-nil reply.
    Value,
    /// A nil bulk string, nil array or RESP3 null.
    Nil,
    /// A top-level error reply; the message is `buf[start..end]` (without `-` and CRLF).
    Error { start: usize, end: usize },
}

/// A complete reply at the start of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Bytes the reply occupies.
    pub len: usize,
    pub kind: ReplyKind,
}

/// A framing violation; the connection cannot be trusted after this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// Encodes a command as a RESP array of bulk strings.
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Maximum nesting accepted, to bound work on garbage input.
const MAX_DEPTH: usize = 64;
/// Maximum bulk length (Redis' proto-max-bulk-len default is 512MB).
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// Position of the `\r\n` ending the line starting at `from`, if complete.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        // Fast skip to the next '\r'.
        match buf[i..buf.len() - 1].iter().position(|&b| b == b'\r') {
            Some(off) => {
                i += off;
                if buf[i + 1] == b'\n' {
                    return Some(i);
                }
                i += 1;
            }
            None => return None,
        }
    }
    None
}

fn parse_int(line: &[u8]) -> Result<i64, ProtocolError> {
    let (neg, digits) = match line.first() {
        Some(b'-') => (true, &line[1..]),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 18 {
        return Err(ProtocolError(format!(
            "bad length `{}`",
            String::from_utf8_lossy(line)
        )));
    }
    let mut n: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(ProtocolError(format!(
                "bad length `{}`",
                String::from_utf8_lossy(line)
            )));
        }
        n = n * 10 + i64::from(b - b'0');
    }
    Ok(if neg { -n } else { n })
}

/// Parses one reply at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some(reply))` for a complete reply.
pub fn parse_reply(buf: &[u8]) -> Result<Option<Reply>, ProtocolError> {
    let mut pos = 0usize;
    // Stack of elements still expected per open aggregate; the bottom entry is the top level.
    let mut stack: [u64; MAX_DEPTH] = [0; MAX_DEPTH];
    let mut depth = 1usize;
    stack[0] = 1;
    let mut kind = ReplyKind::Value;
    let mut first = true;

    while depth > 0 {
        if stack[depth - 1] == 0 {
            depth -= 1;
            continue;
        }
        let Some(end) = line_end(buf, pos) else {
            return Ok(None);
        };
        if end == pos {
            return Err(ProtocolError(
                "empty line where a reply type was expected".into(),
            ));
        }
        let ty = buf[pos];
        let body = &buf[pos + 1..end];
        let next = end + 2;
        stack[depth - 1] -= 1;
        match ty {
            b'+' | b':' | b',' | b'#' | b'(' => {
                pos = next;
            }
            b'_' => {
                if first {
                    kind = ReplyKind::Nil;
                }
                pos = next;
            }
            b'-' => {
                if first {
                    kind = ReplyKind::Error {
                        start: pos + 1,
                        end,
                    };
                }
                pos = next;
            }
            b'$' | b'=' | b'!' => {
                let n = parse_int(body)?;
                if n == -1 && ty == b'$' {
                    if first {
                        kind = ReplyKind::Nil;
                    }
                    pos = next;
                } else if (0..=MAX_BULK).contains(&n) {
                    let n = n as usize;
                    if buf.len() < next + n + 2 {
                        return Ok(None);
                    }
                    if &buf[next + n..next + n + 2] != b"\r\n" {
                        return Err(ProtocolError(format!(
                            "bulk string of length {n} not terminated by CRLF"
                        )));
                    }
                    if first && ty == b'!' {
                        kind = ReplyKind::Error {
                            start: next,
                            end: next + n,
                        };
                    }
                    pos = next + n + 2;
                } else {
                    return Err(ProtocolError(format!("bad bulk length {n}")));
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = parse_int(body)?;
                pos = next;
                if n == -1 && ty == b'*' {
                    if first {
                        kind = ReplyKind::Nil;
                    }
                } else if n >= 0 {
                    let mut elems = n as u64;
                    if ty == b'%' || ty == b'|' {
                        elems *= 2;
                    }
                    if ty == b'|' {
                        // An attribute precedes the real reply: expect one more element.
                        stack[depth - 1] += 1;
                    }
                    if elems > 0 {
                        if depth == MAX_DEPTH {
                            return Err(ProtocolError("replies nested too deeply".into()));
                        }
                        stack[depth] = elems;
                        depth += 1;
                    }
                } else {
                    return Err(ProtocolError(format!("bad aggregate length {n}")));
                }
            }
            other => {
                return Err(ProtocolError(format!(
                    "unexpected reply type byte 0x{other:02x} ({:?})",
                    other as char
                )));
            }
        }
        first = false;
    }
    Ok(Some(Reply { len: pos, kind }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(s: &[u8]) -> Reply {
        let r = parse_reply(s).unwrap().expect("complete");
        assert_eq!(r.len, s.len(), "length of {:?}", String::from_utf8_lossy(s));
        // Every strict prefix is incomplete, never an error.
        for i in 0..s.len() {
            assert_eq!(parse_reply(&s[..i]).unwrap(), None, "prefix {i}");
        }
        r
    }

    #[test]
    fn simple_types() {
        assert_eq!(full(b"+OK\r\n").kind, ReplyKind::Value);
        assert_eq!(full(b":12345\r\n").kind, ReplyKind::Value);
        assert_eq!(full(b"$3\r\nfoo\r\n").kind, ReplyKind::Value);
        assert_eq!(full(b"$0\r\n\r\n").kind, ReplyKind::Value);
        assert_eq!(full(b"$-1\r\n").kind, ReplyKind::Nil);
        assert_eq!(full(b"*-1\r\n").kind, ReplyKind::Nil);
        assert_eq!(full(b"*0\r\n").kind, ReplyKind::Value);
        assert_eq!(full(b"_\r\n").kind, ReplyKind::Nil);
    }

    #[test]
    fn error_text() {
        let buf = b"-ERR unknown command 'x'\r\n";
        let r = full(buf);
        match r.kind {
            ReplyKind::Error { start, end } => {
                assert_eq!(&buf[start..end], b"ERR unknown command 'x'")
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn bulk_with_crlf_inside() {
        assert_eq!(full(b"$4\r\na\r\nb\r\n").kind, ReplyKind::Value);
    }

    #[test]
    fn arrays_and_nesting() {
        let r = full(b"*3\r\n$3\r\nfoo\r\n$-1\r\n:7\r\n");
        assert_eq!(r.kind, ReplyKind::Value);
        let r = full(b"*2\r\n*2\r\n+a\r\n*1\r\n-ERR inner\r\n*0\r\n");
        // An error nested in an array does not make the whole reply an error.
        assert_eq!(r.kind, ReplyKind::Value);
        full(b"*2\r\n*-1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
        full(b"%1\r\n+k\r\n$1\r\nv\r\n");
        full(b"|1\r\n+a\r\n+b\r\n+real\r\n");
    }

    #[test]
    fn pipelined_replies_parse_one_at_a_time() {
        let buf = b"+OK\r\n$1\r\nx\r\n-ERR e\r\n*2\r\n:1\r\n:2\r\n";
        let mut pos = 0;
        let mut kinds = Vec::new();
        while let Some(r) = parse_reply(&buf[pos..]).unwrap() {
            kinds.push(r.kind);
            pos += r.len;
        }
        assert_eq!(pos, buf.len());
        assert_eq!(kinds.len(), 4);
        assert!(matches!(kinds[2], ReplyKind::Error { .. }));
    }

    #[test]
    fn framing_errors() {
        for bad in [
            &b"?x\r\n"[..],
            b"$3\r\nfooX\r\n",
            b"$x\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"\r\n",
            b"*1\r\n&\r\n",
        ] {
            assert!(
                parse_reply(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn deep_nesting_rejected() {
        let mut buf = Vec::new();
        for _ in 0..100 {
            buf.extend_from_slice(b"*1\r\n");
        }
        buf.extend_from_slice(b":1\r\n");
        assert!(parse_reply(&buf).is_err());
    }
}

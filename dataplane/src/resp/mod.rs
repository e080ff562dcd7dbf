//! RESP framing: client requests (arrays of bulk strings and inline commands), upstream reply
//! boundaries, and encoding of locally generated replies.
//!
//! Sources: Redis 7.0 `networking.c` (`processMultibulkBuffer`, `processInlineBuffer`,
//! `addReply*`), `sds.c` (`sdssplitargs`), the RESP2 and RESP3 specifications.

use std::ops::Range;

pub mod pubsub;
mod reply;
mod request;

pub use reply::{
    Elements, array_elements, array_len, bulk_body, elements, integer_reply, is_error, is_null,
    is_ok, reply_len,
};
pub(crate) use request::string2ll;

/// A RESP protocol violation; Display is the text after `ERR Protocol error: ` (Redis wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Size limits for requests; the defaults are Redis 7.0's.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest bulk argument (Redis `proto-max-bulk-len`, 512 MB); longer → `invalid bulk length`.
    pub max_bulk_len: usize,
    /// Most arguments in one array (Redis 7.0: `INT_MAX`); more → `invalid multibulk length`.
    pub max_multibulk_len: usize,
    /// Longest inline line or count line without a newline (Redis `PROTO_INLINE_MAX_SIZE`,
    /// 64 KB); longer → `too big inline request` / `too big mbulk count string` / `too big bulk
    /// count string`.
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: i32::MAX as usize,
            max_inline_len: 64 * 1024,
        }
    }
}

/// Outcome of [`RequestParser::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes needed; call again with the same buffer extended.
    Incomplete,
    /// An empty inline line (skipped, as Redis does) or empty array `*0`: `consumed` bytes.
    Empty { consumed: usize },
    /// A RESP array of bulk strings; `args` are ranges into `buf`.
    Resp { consumed: usize },
    /// An inline command; `args` are ranges into `scratch`.
    Inline { consumed: usize },
}

/// Incremental request parser (resumes where it stopped on `Incomplete`).
///
/// Follows Redis 7.0 `networking.c` `processMultibulkBuffer` / `processInlineBuffer`, including
/// its leniencies, so that the same bytes mean the same commands through Respite as against
/// Redis: `*<n>` with `n <= 0` is an empty request, the two bytes after bulk data are skipped
/// unchecked, and an inline line with a NUL before its newline never completes (Redis finds the
/// newline with `strchr`) until it is `too big inline request`.
///
/// Resumable: on `Incomplete` the offset reached, the bulks still expected and the length of a
/// bulk whose header was read are kept, so a request that arrives in many reads is scanned once.
/// Do not clear `args`/`scratch` between an `Incomplete` and the next call. After an `Err` the
/// parser is reset (the connection is expected to close, as Redis does).
#[derive(Debug, Default)]
pub struct RequestParser {
    pub limits: Limits,
    progress: request::Progress,
}

impl RequestParser {
    pub fn new(limits: Limits) -> RequestParser {
        RequestParser {
            limits,
            progress: request::Progress::Fresh,
        }
    }
    /// After [`Parsed::Incomplete`]: the bytes the buffer must hold, from the request's first
    /// byte, before the bulk argument whose header was read is complete (its data and CRLF);
    /// `None` when no bulk header is pending. Lets a reader size its buffer once for a large
    /// value instead of growing it step by step (the length is at most `max_bulk_len`).
    pub fn needs(&self) -> Option<usize> {
        match self.progress {
            request::Progress::Multibulk {
                pos,
                bulk: Some(len),
                ..
            } => Some(pos.saturating_add(len).saturating_add(2)),
            _ => None,
        }
    }

    /// Parses the request at the front of `buf`.
    ///
    /// RESP arrays give `Parsed::Resp` with `args` as ranges into `buf`; inline lines give
    /// `Parsed::Inline` with `args` as ranges into `scratch` (quoting per `sdssplitargs`).
    /// Errors carry Redis's texts (see [`ProtocolError`]).
    pub fn parse(
        &mut self,
        buf: &[u8],
        args: &mut Vec<Range<usize>>,
        scratch: &mut Vec<u8>,
    ) -> Result<Parsed, ProtocolError> {
        self.parse_impl(buf, args, scratch)
    }

    /// Drops any partial progress (the next call starts a fresh request at offset 0).
    pub fn reset(&mut self) {
        self.progress = request::Progress::Fresh;
    }
}

/// Finds where the first complete RESP2/RESP3 reply in a buffer ends (resumable).
///
/// Handles RESP2 `+ - : $ *` (with `$-1`, `*-1`) and RESP3 `_ , # ! = ( % ~ > |`, including
/// streamed strings (`$?` + `;<n>` chunks) and streamed aggregates (`*?` … `.`). Keeps a stack
/// of open aggregates and the offset reached, so a huge nested array is scanned once.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    pos: usize,
    stack: Vec<reply::Frame>,
}

impl ReplyScanner {
    /// `Ok(Some(len))` when `buf[..len]` is one whole reply; `Ok(None)` if incomplete. After
    /// `Some`, the scanner is reset for the next reply.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        self.scan_impl(buf)
    }

    /// Drops any partial progress.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.stack.clear();
    }
}

/// Encoders for locally generated replies and sub-requests (append to `out`).
pub mod encode {
    /// Appends the decimal form of `n` without allocating (itoa into a stack buffer).
    pub fn decimal(out: &mut Vec<u8>, n: i64) {
        // u64::MAX has 20 digits: the buffer always has room, written from the back.
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let mut v = n.unsigned_abs();
        for d in buf.iter_mut().rev() {
            *d = b'0' + (v % 10) as u8;
            i -= 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if n < 0 {
            out.push(b'-');
        }
        out.extend_from_slice(buf.get(i..).unwrap_or_default());
    }
    fn length(out: &mut Vec<u8>, n: usize) {
        decimal(out, i64::try_from(n).unwrap_or(i64::MAX));
    }
    /// `-ERR Protocol error: <msg>\r\n`, the reply Redis 7.0 sends before closing on a protocol
    /// error (networking.c `addReplyError(c, "Protocol error: ...")`).
    pub fn protocol_error(out: &mut Vec<u8>, e: &super::ProtocolError) {
        out.extend_from_slice(b"-ERR Protocol error: ");
        out.extend(
            e.0.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    }
    /// `-<prefix><msg>\r\n` with CR/LF in either replaced by spaces.
    pub fn error_fmt(out: &mut Vec<u8>, prefix: &[u8], msg: &[u8]) {
        out.push(b'-');
        for &b in prefix.iter().chain(msg) {
            out.push(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        out.extend_from_slice(b"\r\n");
    }
    pub fn simple(out: &mut Vec<u8>, s: &[u8]) {
        out.push(b'+');
        out.extend_from_slice(s);
        out.extend_from_slice(b"\r\n");
    }
    /// `-<msg>\r\n`; CR/LF inside `msg` are replaced by spaces (as Redis does).
    pub fn error(out: &mut Vec<u8>, msg: &[u8]) {
        out.push(b'-');
        out.extend(
            msg.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    }
    pub fn integer(out: &mut Vec<u8>, n: i64) {
        out.push(b':');
        decimal(out, n);
        out.extend_from_slice(b"\r\n");
    }
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.push(b'$');
        length(out, b.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    pub fn nil(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }
    pub fn array_header(out: &mut Vec<u8>, n: usize) {
        out.push(b'*');
        length(out, n);
        out.extend_from_slice(b"\r\n");
    }
    /// A command as a RESP array of bulk strings.
    pub fn command<'a>(out: &mut Vec<u8>, args: impl ExactSizeIterator<Item = &'a [u8]>) {
        array_header(out, args.len());
        for a in args {
            bulk(out, a);
        }
    }
}

#[cfg(test)]
mod tests;

//! RESP framing: client requests (arrays of bulk strings and inline commands), upstream reply
//! boundaries, and encoding of locally generated replies.
//!
//! CONTRACT (skeleton).

use std::ops::Range;

/// A RESP protocol violation; Display is the text after `ERR Protocol error: ` (Redis wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Size limits for requests (Redis defaults: 512 MB bulk, 1M-element... see resp docs).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bulk_len: usize,
    pub max_multibulk_len: usize,
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
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
#[derive(Debug, Default)]
pub struct RequestParser {
    pub limits: Limits,
}

impl RequestParser {
    pub fn new(limits: Limits) -> RequestParser {
        RequestParser { limits }
    }
    /// Parses the request at the front of `buf`.
    pub fn parse(
        &mut self,
        _buf: &[u8],
        _args: &mut Vec<Range<usize>>,
        _scratch: &mut Vec<u8>,
    ) -> Result<Parsed, ProtocolError> {
        Ok(Parsed::Incomplete)
    }
}

/// Finds where the first complete RESP2/RESP3 reply in a buffer ends (resumable).
#[derive(Debug, Default)]
pub struct ReplyScanner {}

impl ReplyScanner {
    /// `Ok(Some(len))` when `buf[..len]` is one whole reply; `Ok(None)` if incomplete. After
    /// `Some`, the scanner is reset for the next reply.
    pub fn scan(&mut self, _buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        Ok(None)
    }
}

/// Encoders for locally generated replies and sub-requests (append to `out`).
pub mod encode {
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
        out.extend_from_slice(n.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.push(b'$');
        out.extend_from_slice(b.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    pub fn nil(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }
    pub fn array_header(out: &mut Vec<u8>, n: usize) {
        out.push(b'*');
        out.extend_from_slice(n.to_string().as_bytes());
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

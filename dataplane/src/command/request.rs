//! The view of one parsed client request that the rest of the request path reads.

use std::ops::Range;

use crate::command::CommandSpec;
use crate::resp::encode;

/// One client request as parsed: the bytes its arguments live in, their ranges, the client's own
/// RESP frame (forwarded as is) and, once resolved, its command table row. Made once per
/// request over the session's reused buffers, so it costs no allocation.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    bytes: &'a [u8],
    args: &'a [Range<usize>],
    frame: Option<&'a [u8]>,
    spec: Option<&'static CommandSpec>,
}

impl<'a> Request<'a> {
    /// A request whose argument `i` is `bytes[args[i]]`; `frame` is its RESP encoding as the
    /// client sent it, `None` for an inline request (re-encoded when forwarded).
    #[inline]
    pub fn new(bytes: &'a [u8], args: &'a [Range<usize>], frame: Option<&'a [u8]>) -> Self {
        Request {
            bytes,
            args,
            frame,
            spec: None,
        }
    }

    /// The same request resolved to its table row `spec`.
    #[inline]
    pub fn with_spec(self, spec: &'static CommandSpec) -> Self {
        Request {
            spec: Some(spec),
            ..self
        }
    }

    /// Its table row; `None` until resolved, and for a listener's `custom_commands`.
    #[inline]
    pub fn spec(&self) -> Option<&'static CommandSpec> {
        self.spec
    }

    /// Number of arguments, the command name included.
    #[inline]
    pub fn argc(&self) -> usize {
        self.args.len()
    }

    /// Argument `i` (0 = the command name), `None` past the last.
    #[inline]
    pub fn arg(&self, i: usize) -> Option<&'a [u8]> {
        self.args.get(i).and_then(|r| self.bytes.get(r.clone()))
    }

    /// The command name as sent (argv\[0\]); empty for a request with no argument, which the
    /// parser never makes.
    #[inline]
    pub fn name(&self) -> &'a [u8] {
        self.arg(0).unwrap_or_default()
    }

    /// Argument access for the command table's readers, which take argv as a function of the
    /// index and never ask past [`Request::argc`]: an index past the last reads as empty.
    #[inline]
    pub fn argv(&self) -> impl Fn(usize) -> &'a [u8] + Copy + use<'a> {
        let (bytes, args) = (self.bytes, self.args);
        move |i| {
            args.get(i)
                .and_then(|r| bytes.get(r.clone()))
                .unwrap_or_default()
        }
    }

    /// Every argument in order (ranges the parser made always lie within the bytes).
    #[inline]
    pub fn args(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + use<'a> {
        let bytes = self.bytes;
        self.args
            .iter()
            .map(move |r| bytes.get(r.clone()).unwrap_or_default())
    }

    /// The bytes the arguments index (for observers that read ranges).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The client's RESP frame, whole (`None` for an inline request).
    #[inline]
    pub fn frame(&self) -> Option<&'a [u8]> {
        self.frame
    }

    /// The argument ranges into [`Request::bytes`].
    #[inline]
    pub fn ranges(&self) -> &'a [Range<usize>] {
        self.args
    }

    /// The request as RESP to forward: the client's own frame, or the inline request encoded
    /// into `encoded` (a reused buffer).
    #[inline]
    pub fn forward<'b>(&self, encoded: &'b mut Vec<u8>) -> &'b [u8]
    where
        'a: 'b,
    {
        match self.frame {
            Some(f) => f,
            None => {
                encoded.clear();
                encode::command(encoded, self.args());
                encoded
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_forwarded_bytes() {
        let bytes = b"GETkey";
        let args = [0..3, 3..6];
        let inline = Request::new(bytes, &args, None);
        assert_eq!(inline.argc(), 2);
        assert_eq!(inline.name(), b"GET");
        assert_eq!(inline.arg(1), Some(&b"key"[..]));
        assert_eq!(inline.arg(2), None);
        assert_eq!((inline.argv())(5), b"");
        let mut enc = Vec::new();
        assert_eq!(
            inline.forward(&mut enc),
            b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"
        );
        let frame = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
        let resp = Request::new(bytes, &args, Some(frame));
        let mut untouched = Vec::new();
        assert_eq!(resp.forward(&mut untouched), frame);
        assert!(untouched.is_empty());
        assert!(resp.spec().is_none());
        let spec = crate::command::lookup(b"get").expect("test value");
        assert_eq!(resp.with_spec(spec).spec().map(|s| s.name), Some("get"));
    }
}

//! Invariants checked by the fuzz targets (one public function per target). Each panics on a
//! violation; libFuzzer (`cargo fuzz run <target>`) and the stable bounded loops in
//! `tests/bounded.rs` call them with arbitrary bytes.
//!
//! - [`request_parser`]: `RequestParser::parse` never panics; `consumed` is within the buffer
//!   and non-zero; RESP arg ranges lie inside the request's bytes, inline ones inside `scratch`;
//!   the same bytes fed in pieces (byte by byte, and cut once at every point of short inputs)
//!   give the same requests / error as fed at once; re-encoding a request's args parses back to
//!   the same args.
//! - [`inline`]: an inline line parses exactly as a literal port of Redis 7.0 `sdssplitargs`
//!   says (`\r\n` or `\n` ends the line): same args, empty line skipped, `unbalanced quotes in
//!   request` on the same inputs; a NUL before the newline leaves the request incomplete (Redis
//!   looks for the newline with `strchr`).
//! - [`reply_scanner`]: `ReplyScanner::scan` agrees with `reply_len`, the found length is within
//!   the buffer, feeding prefixes finds the reply at exactly that length (every shorter prefix is
//!   incomplete) or the same error; a reply generated from the input (every RESP2/RESP3 type,
//!   nested) is found at exactly its length whatever follows, and all its prefixes are
//!   incomplete.
//!   A complete reply also goes through the pub/sub frame parser and count correction, and
//!   the input's halves through Redis's pattern matching (none may panic).
//! - [`split_merge`]: for every `Kind::Split` command with random keys/values over 1..4 shards,
//!   `split` covers each key exactly once, on its shard, in order; each sub-request parses to the
//!   command name plus its keys (and values); `merge` of valid, error, wrong-shape or missing
//!   part replies is exactly one complete RESP reply, and with valid replies it is the right
//!   one (MGET values back in key order, MSET `+OK`, summed integers). Fan-out merges of random
//!   replies are one complete reply too.

use std::ops::Range;

use respite::command::{self, CommandSpec, Kind, Merge, split};
use respite::resp::{self, Limits, Parsed, ProtocolError, ReplyScanner, RequestParser};

/// Limits for fuzzing: small enough that no input allocates much, the inline limit far above
/// any input length (so a line never hits it in one feeding and not in another).
pub const LIMITS: Limits = Limits {
    max_bulk_len: 1 << 20,
    max_multibulk_len: 4096,
    max_inline_len: 64 * 1024,
};

/// What one `parse` call produced, in a form comparable across feedings.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Empty(usize),
    Request {
        inline: bool,
        consumed: usize,
        args: Vec<Vec<u8>>,
    },
    Error(String),
}

/// Checks one `parse` result against `buf`, returning the event (None = incomplete).
fn event(
    res: Result<Parsed, ProtocolError>,
    buf: &[u8],
    args: &[Range<usize>],
    scratch: &[u8],
) -> Option<Event> {
    match res {
        Err(e) => Some(Event::Error(e.0)),
        Ok(Parsed::Incomplete) => None,
        Ok(Parsed::Empty { consumed }) => {
            assert!(
                consumed > 0 && consumed <= buf.len(),
                "Empty consumed {consumed} of {}",
                buf.len()
            );
            Some(Event::Empty(consumed))
        }
        Ok(Parsed::Resp { consumed }) => {
            assert!(
                consumed > 0 && consumed <= buf.len(),
                "Resp consumed {consumed} of {}",
                buf.len()
            );
            assert!(!args.is_empty(), "Resp request without args");
            for r in args {
                assert!(
                    r.start <= r.end && r.end <= consumed,
                    "arg {r:?} outside request ..{consumed}"
                );
            }
            Some(Event::Request {
                inline: false,
                consumed,
                args: args.iter().map(|r| buf[r.clone()].to_vec()).collect(),
            })
        }
        Ok(Parsed::Inline { consumed }) => {
            assert!(
                consumed > 0 && consumed <= buf.len(),
                "Inline consumed {consumed} of {}",
                buf.len()
            );
            assert!(!args.is_empty(), "Inline request without args");
            assert_eq!(
                buf[consumed - 1],
                b'\n',
                "inline request must end at a newline"
            );
            for r in args {
                assert!(
                    r.start <= r.end && r.end <= scratch.len(),
                    "inline arg {r:?} outside scratch"
                );
            }
            Some(Event::Request {
                inline: true,
                consumed,
                args: args.iter().map(|r| scratch[r.clone()].to_vec()).collect(),
            })
        }
    }
}

/// Parses `data` fed in the pieces `cuts` delimit (ascending cut offsets; none = all at once).
/// Returns the complete events and whether the parse ended on an error.
fn parse_fed(data: &[u8], cuts: &[usize]) -> Vec<Event> {
    let mut parser = RequestParser::new(LIMITS);
    let mut args = Vec::new();
    let mut scratch = Vec::new();
    let mut events = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0usize;
    let ends = cuts.iter().copied().chain([data.len()]);
    for end in ends {
        if end <= fed {
            continue;
        }
        buf.extend_from_slice(&data[fed..end]);
        fed = end;
        loop {
            if buf.is_empty() {
                break;
            }
            let res = parser.parse(&buf, &mut args, &mut scratch);
            match event(res, &buf, &args, &scratch) {
                None => break,
                Some(Event::Error(e)) => {
                    events.push(Event::Error(e));
                    return events;
                }
                Some(ev) => {
                    let consumed = match &ev {
                        Event::Empty(c) => *c,
                        Event::Request { consumed, .. } => *consumed,
                        Event::Error(_) => unreachable!(),
                    };
                    events.push(ev);
                    buf.drain(..consumed);
                    args.clear();
                    scratch.clear();
                }
            }
        }
    }
    events
}

/// Target `request_parser`: see the crate docs.
pub fn request_parser(data: &[u8]) {
    let whole = parse_fed(data, &[]);
    // Byte by byte.
    let every: Vec<usize> = (1..data.len()).collect();
    assert_eq!(
        parse_fed(data, &every),
        whole,
        "byte-by-byte feeding differs"
    );
    // One cut at every point (short inputs), else at a few points.
    let cuts: Vec<usize> = if data.len() <= 160 {
        (1..data.len()).collect()
    } else {
        (1..8).map(|i| data.len() * i / 8).collect()
    };
    for &c in &cuts {
        assert_eq!(parse_fed(data, &[c]), whole, "feeding cut at {c} differs");
    }
    // Round trip: each request's args re-encoded as RESP parse back to the same args.
    for ev in &whole {
        if let Event::Request { args, .. } = ev {
            let mut enc = Vec::new();
            resp::encode::command(&mut enc, args.iter().map(|a| a.as_slice()));
            let back = parse_fed(&enc, &[]);
            assert_eq!(
                back,
                vec![Event::Request {
                    inline: false,
                    consumed: enc.len(),
                    args: args.clone()
                }],
                "re-encoded request does not parse back"
            );
        }
    }
}

// ---- inline --------------------------------------------------------------------------------

fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn c_hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// A literal port of Redis 7.0 `sdssplitargs` (sds.c) over a C string: `None` where Redis
/// returns NULL (unbalanced quotes).
pub fn sdssplitargs(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut s = line.to_vec();
    s.push(0);
    let c = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut p = 0usize;
    let mut out = Vec::new();
    loop {
        while c(p) != 0 && c_isspace(c(p)) {
            p += 1;
        }
        if c(p) == 0 {
            return Some(out);
        }
        let (mut inq, mut insq, mut done) = (false, false, false);
        let mut cur = Vec::new();
        while !done {
            if inq {
                if c(p) == b'\\'
                    && c(p + 1) == b'x'
                    && let (Some(h), Some(l)) = (c_hex(c(p + 2)), c_hex(c(p + 3)))
                {
                    cur.push(h * 16 + l);
                    p += 3;
                } else if c(p) == b'\\' && c(p + 1) != 0 {
                    p += 1;
                    cur.push(match c(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        x => x,
                    });
                } else if c(p) == b'"' {
                    if c(p + 1) != 0 && !c_isspace(c(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if c(p) == 0 {
                    return None;
                } else {
                    cur.push(c(p));
                }
            } else if insq {
                if c(p) == b'\\' && c(p + 1) == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c(p) == b'\'' {
                    if c(p + 1) != 0 && !c_isspace(c(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if c(p) == 0 {
                    return None;
                } else {
                    cur.push(c(p));
                }
            } else {
                match c(p) {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    x => cur.push(x),
                }
            }
            if c(p) != 0 {
                p += 1;
            }
        }
        out.push(cur);
    }
}

/// Target `inline`: see the crate docs.
pub fn inline(data: &[u8]) {
    let mut buf = Vec::with_capacity(data.len() + 3);
    if data.first() == Some(&b'*') {
        buf.push(b' '); // a request starting with '*' is multibulk; keep this one inline
    }
    buf.extend_from_slice(data);
    let nl = match buf.iter().position(|&b| b == b'\n') {
        Some(nl) => nl,
        None => {
            buf.extend_from_slice(b"\r\n");
            buf.len() - 1
        }
    };
    let mut line = &buf[..nl];
    if let [head @ .., b'\r'] = line {
        line = head;
    }
    let want = sdssplitargs(line);
    let mut parser = RequestParser::new(LIMITS);
    let (mut args, mut scratch) = (Vec::new(), Vec::new());
    let res = parser.parse(&buf, &mut args, &mut scratch);
    let got = event(res, &buf, &args, &scratch);
    // Redis finds the newline with strchr: a NUL before it hides it, the request never
    // completes (until it is too big).
    let nul_first = buf[..nl].contains(&0);
    let expected = match want {
        None => Event::Error("unbalanced quotes in request".into()),
        Some(a) if a.is_empty() => Event::Empty(nl + 1),
        Some(a) => Event::Request {
            inline: true,
            consumed: nl + 1,
            args: a,
        },
    };
    let expected = if nul_first { None } else { Some(expected) };
    assert_eq!(
        got,
        expected,
        "inline line {:?}",
        String::from_utf8_lossy(line)
    );
    // The whole-buffer checks apply too.
    request_parser(&buf);
}

// ---- reply scanner -------------------------------------------------------------------------

/// Reads bytes of the input as a stream of small decisions (zeros once exhausted).
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or_default()
    }
    pub fn exhausted(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A line-safe text (no CR/LF) of up to 8 bytes.
fn text(b: &mut Bytes) -> Vec<u8> {
    let n = b.below(9);
    b.bytes(n)
        .into_iter()
        .map(|c| if c == b'\r' || c == b'\n' { b'_' } else { c })
        .collect()
}

/// Appends a valid RESP2/RESP3 reply chosen by `b` to `out` (nesting at most `depth` levels).
pub fn gen_reply(b: &mut Bytes, depth: u32, out: &mut Vec<u8>) {
    let kinds = if depth == 0 { 11 } else { 16 };
    match b.below(kinds) {
        0 => {
            out.push(b'+');
            out.extend(text(b));
            out.extend_from_slice(b"\r\n");
        }
        1 => {
            out.extend_from_slice(b"-ERR ");
            out.extend(text(b));
            out.extend_from_slice(b"\r\n");
        }
        2 => out.extend_from_slice(format!(":{}\r\n", b.byte() as i8).as_bytes()),
        3 => {
            let n = b.below(12);
            let data = b.bytes(n); // binary: CR/LF inside a bulk is fine
            out.extend_from_slice(format!("${n}\r\n").as_bytes());
            out.extend(data);
            out.extend_from_slice(b"\r\n");
        }
        4 => out.extend_from_slice(b"$-1\r\n"),
        5 => out.extend_from_slice(b"*-1\r\n"),
        6 => out.extend_from_slice(b"_\r\n"),
        7 => out.extend_from_slice(if b.byte() & 1 == 0 {
            b"#t\r\n"
        } else {
            b"#f\r\n"
        }),
        8 => out.extend_from_slice(format!(",{}\r\n", f64::from(b.byte()) / 4.0).as_bytes()),
        9 => out
            .extend_from_slice(format!("({}\r\n", u64::from(b.byte()) * 1_000_000_007).as_bytes()),
        10 => {
            let (tag, n) = if b.byte() & 1 == 0 {
                (b'!', b.below(10))
            } else {
                (b'=', 4 + b.below(6))
            };
            let mut data = if tag == b'=' {
                b"txt:".to_vec()
            } else {
                Vec::new()
            };
            data.extend(b.bytes(n - data.len()));
            out.extend_from_slice(format!("{}{}\r\n", tag as char, data.len()).as_bytes());
            out.extend(data);
            out.extend_from_slice(b"\r\n");
        }
        k => {
            // Aggregates: array, set, push (n values), map (n pairs).
            let n = b.below(4);
            let (tag, values) = match k {
                11 | 12 => (b'*', n),
                13 => (b'~', n),
                14 => (b'>', n.max(1)),
                _ => (b'%', n * 2),
            };
            let count = if tag == b'%' { n } else { values };
            out.extend_from_slice(format!("{}{}\r\n", tag as char, count).as_bytes());
            for _ in 0..values {
                gen_reply(b, depth - 1, out);
            }
        }
    }
}

/// Scans `buf` with one scanner fed growing prefixes: the first non-incomplete result and the
/// prefix length it came at.
fn scan_prefixes(buf: &[u8]) -> (Result<Option<usize>, ProtocolError>, usize) {
    let mut sc = ReplyScanner::default();
    for n in 1..=buf.len() {
        match sc.scan(&buf[..n]) {
            Ok(None) => continue,
            other => return (other, n),
        }
    }
    (Ok(None), buf.len())
}

/// Target `reply_scanner`: see the crate docs.
pub fn reply_scanner(data: &[u8]) {
    // Arbitrary bytes.
    let once = ReplyScanner::default().scan(data);
    assert_eq!(
        resp::reply_len(data),
        once,
        "reply_len disagrees with ReplyScanner::scan"
    );
    if let Ok(Some(n)) = once {
        assert!(n > 0 && n <= data.len(), "scan found {n} of {}", data.len());
        // A complete reply read from a subscriber connection: parsed or refused, never a panic.
        let _ = resp::pubsub::parse_push(data.get(..n).unwrap_or_default());
        let _ = resp::pubsub::add_to_counts(
            data.get(..n).unwrap_or_default(),
            &[
                resp::pubsub::Correction {
                    counted: 1,
                    receivers: 2,
                },
                resp::pubsub::Correction {
                    counted: 0,
                    receivers: -1,
                },
                resp::pubsub::Correction {
                    counted: 3,
                    receivers: 0,
                },
            ],
        );
    }
    // Redis's glob matching of a pattern (first half) against a channel (second half).
    let (pattern, channel) = data.split_at(data.len() / 2);
    let _ = resp::pubsub::pattern_matches(pattern, channel);
    let (inc, at) = scan_prefixes(data);
    assert_eq!(inc, once, "prefix feeding differs from one scan");
    if let Ok(Some(n)) = once {
        assert_eq!(at, n, "reply of {n} bytes found at prefix {at}");
    }
    // A reply generated from the input, followed by the rest of the input.
    let mut b = Bytes::new(data);
    let mut reply = Vec::new();
    gen_reply(&mut b, 3, &mut reply);
    let mut buf = reply.clone();
    buf.extend_from_slice(b.rest());
    assert_eq!(
        ReplyScanner::default().scan(&buf),
        Ok(Some(reply.len())),
        "generated reply {:?}",
        String::from_utf8_lossy(&reply)
    );
    let mut sc = ReplyScanner::default();
    for n in 0..reply.len() {
        assert_eq!(
            sc.scan(&reply[..n]),
            Ok(None),
            "prefix {n} of generated reply {:?}",
            String::from_utf8_lossy(&reply)
        );
    }
    assert_eq!(
        sc.scan(&buf),
        Ok(Some(reply.len())),
        "resumed scan of generated reply"
    );
}

// ---- split / merge -------------------------------------------------------------------------

/// Every command respite splits across shards.
pub fn split_commands() -> Vec<&'static CommandSpec> {
    command::COMMANDS
        .iter()
        .filter(|c| matches!(c.kind, Kind::Split(_)))
        .collect()
}

/// A key's shard among `shards`, or `None` (no host takes it) for one residue in
/// `shards + 1`, so the no-host part of a split is exercised too.
fn shard_of(key: &[u8], shards: usize) -> Option<usize> {
    let h = key.iter().fold(key.len() as u32, |h, &c| {
        h.wrapping_mul(31).wrapping_add(u32::from(c))
    });
    let s = (h as usize) % (shards + 1);
    (s < shards).then_some(s)
}

fn is_one_reply(out: &[u8]) -> bool {
    resp::reply_len(out) == Ok(Some(out.len()))
}

/// Target `split_merge`: see the crate docs.
pub fn split_merge(data: &[u8]) {
    let cmds = split_commands();
    assert!(!cmds.is_empty(), "no split commands in the table");
    let mut b = Bytes::new(data);
    let spec = cmds[b.below(cmds.len())];
    let Kind::Split(how) = spec.kind else {
        unreachable!()
    };
    let shards = 1 + b.below(4);
    let step = spec.step.max(1) as usize;
    let first = spec.first_key.max(1) as usize;
    let groups = 1 + b.below(8);
    let name = spec.name.to_ascii_uppercase().into_bytes();
    let mut args: Vec<Vec<u8>> = vec![name.clone()];
    while args.len() < first {
        args.push(text(&mut b));
    }
    for _ in 0..groups * step {
        let n = b.below(5);
        args.push(b.bytes(n));
    }
    if !spec.arity_ok(args.len()) {
        return;
    }
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let nkeys = command::key_count(spec, argv.len());
    let parts = split::split(spec, &argv, |k: &[u8]| shard_of(k, shards));

    // Coverage: every key once, on its shard, in request order within a part.
    let mut seen = vec![false; nkeys];
    let mut part_shards: Vec<Option<usize>> = parts.iter().map(|p| p.shard).collect();
    part_shards.sort();
    part_shards.dedup();
    assert_eq!(part_shards.len(), parts.len(), "two parts for one shard");
    let key_at: Vec<usize> = command::key_indices(spec, argv.len()).collect();
    assert_eq!(key_at.len(), nkeys);
    for p in &parts {
        assert!(!p.keys.is_empty(), "empty part");
        assert!(p.keys.windows(2).all(|w| w[0] < w[1]), "keys out of order");
        let mut want: Vec<Vec<u8>> = vec![name.clone()];
        for &o in &p.keys {
            let o = o as usize;
            assert!(o < nkeys && !seen[o], "key {o} twice or out of range");
            seen[o] = true;
            assert_eq!(
                shard_of(argv[key_at[o]], shards),
                p.shard,
                "key on the wrong shard"
            );
            want.extend(argv[key_at[o]..key_at[o] + step].iter().map(|a| a.to_vec()));
        }
        assert_eq!(
            parse_fed(&p.request, &[]),
            vec![Event::Request {
                inline: false,
                consumed: p.request.len(),
                args: want
            }],
            "sub-request does not parse to its keys"
        );
    }
    assert!(seen.iter().all(|&s| s), "a key is in no part");

    // Replies: per part valid (0), error (1), wrong shape (2); possibly fewer replies than parts.
    let mut replies: Vec<Vec<u8>> = Vec::new();
    let mut all_valid = true;
    let mut values: Vec<Vec<u8>> = vec![Vec::new(); nkeys];
    let mut sum = 0i64;
    for p in &parts {
        let mode = if b.exhausted() { 0 } else { b.below(6) };
        let mut r = Vec::new();
        match mode {
            1 => r.extend_from_slice(b"-ERR shard said no\r\n"),
            2 => gen_reply(&mut b, 2, &mut r),
            _ => match how {
                Merge::Mget => {
                    r.extend_from_slice(format!("*{}\r\n", p.keys.len()).as_bytes());
                    for &o in &p.keys {
                        let mut v = Vec::new();
                        if b.byte() & 3 == 0 {
                            v.extend_from_slice(b"$-1\r\n");
                        } else {
                            let n = b.below(6);
                            let d = b.bytes(n);
                            v.extend_from_slice(format!("${n}\r\n").as_bytes());
                            v.extend(d);
                            v.extend_from_slice(b"\r\n");
                        }
                        values[o as usize] = v.clone();
                        r.extend(v);
                    }
                }
                Merge::Mset => r.extend_from_slice(b"+OK\r\n"),
                _ => {
                    let n = i64::from(b.byte() as i8);
                    sum += n;
                    r.extend_from_slice(format!(":{n}\r\n").as_bytes());
                }
            },
        }
        if mode == 1 || mode == 2 {
            all_valid = false;
        }
        replies.push(r);
    }
    let missing = !b.exhausted() && b.below(8) == 0 && !replies.is_empty();
    if missing {
        replies.pop();
        all_valid = false;
    }
    let refs: Vec<&[u8]> = replies.iter().map(|r| r.as_slice()).collect();
    let mut out = Vec::new();
    split::merge(how, nkeys, &parts, &refs, &mut out);
    assert!(
        is_one_reply(&out),
        "{how:?} merge is not one reply: {:?}",
        String::from_utf8_lossy(&out)
    );
    if all_valid {
        let mut want = Vec::new();
        match how {
            Merge::Mget => {
                want.extend_from_slice(format!("*{nkeys}\r\n").as_bytes());
                for v in &values {
                    want.extend_from_slice(v);
                }
            }
            Merge::Mset => want.extend_from_slice(b"+OK\r\n"),
            _ => want.extend_from_slice(format!(":{sum}\r\n").as_bytes()),
        }
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want),
            "{how:?} merge of valid replies"
        );
    }

    // Fan-out merges of random (complete) replies.
    let n = 1 + b.below(4);
    let fan: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let mut r = Vec::new();
            gen_reply(&mut b, 2, &mut r);
            r
        })
        .collect();
    let refs: Vec<&[u8]> = fan.iter().map(|r| r.as_slice()).collect();
    let merges = [
        Merge::AllOk,
        Merge::Sum,
        Merge::Concat,
        Merge::FirstNonNil,
        Merge::MinInteger,
        Merge::MinLastSave,
        Merge::Info,
        Merge::AndArrays,
        Merge::Same,
        Merge::Union,
        Merge::MaxInteger,
        Merge::SumPairs,
        Merge::ScanCursor {
            shard: b.below(4) as u32,
            shards: 4,
        },
    ];
    for m in merges {
        let mut out = Vec::new();
        command::fanout::merge(m, &refs, &mut out);
        assert!(
            is_one_reply(&out),
            "{m:?} merge of {:?} is not one reply: {:?}",
            fan.iter()
                .map(|r| String::from_utf8_lossy(r))
                .collect::<Vec<_>>(),
            String::from_utf8_lossy(&out)
        );
    }
}

use std::ops::Range;

use proptest::prelude::*;
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::types::OwnedFrame;

use super::*;

/// A parsed request as owned args.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Empty,
    Args(Vec<Vec<u8>>),
}

fn owned(buf: &[u8], scratch: &[u8], p: Parsed, args: &[Range<usize>]) -> Req {
    let src = match p {
        Parsed::Inline { .. } => scratch,
        Parsed::Resp { .. } => buf,
        _ => return Req::Empty,
    };
    Req::Args(args.iter().map(|r| src[r.clone()].to_vec()).collect())
}

/// Feeds `input` to a parser in chunks ending at `cuts` (then the rest); the caller-side loop
/// the engine runs: grow the buffer, parse, drain consumed bytes.
fn feed(input: &[u8], cuts: &[usize], limits: Limits) -> Result<Vec<Req>, ProtocolError> {
    let mut p = RequestParser::new(limits);
    let mut buf: Vec<u8> = Vec::new();
    let mut args = Vec::new();
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    let mut ends: Vec<usize> = cuts.iter().copied().filter(|&c| c <= input.len()).collect();
    ends.sort_unstable();
    ends.push(input.len());
    let mut fed = 0;
    for end in ends {
        buf.extend_from_slice(&input[fed..end]);
        fed = end;
        loop {
            let r = p.parse(&buf, &mut args, &mut scratch)?;
            let consumed = match r {
                Parsed::Incomplete => break,
                Parsed::Empty { consumed }
                | Parsed::Resp { consumed }
                | Parsed::Inline { consumed } => consumed,
            };
            out.push(owned(&buf, &scratch, r, &args));
            buf.drain(..consumed);
        }
    }
    Ok(out)
}

fn parse_all(input: &[u8]) -> Result<Vec<Req>, ProtocolError> {
    feed(input, &[], Limits::default())
}

fn one(input: &[u8]) -> Result<Parsed, ProtocolError> {
    let mut p = RequestParser::default();
    p.parse(input, &mut Vec::new(), &mut Vec::new())
}

fn args(v: &[&[u8]]) -> Req {
    Req::Args(v.iter().map(|a| a.to_vec()).collect())
}

fn perr(s: &str) -> Result<Parsed, ProtocolError> {
    Err(ProtocolError(s.to_string()))
}

fn encode_cmd(v: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    encode::command(&mut out, v.iter().map(|a| a.as_slice()));
    out
}

#[test]
fn simple_resp_and_inline() {
    assert_eq!(
        parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n").expect("test value"),
        vec![args(&[b"GET", b"a"])]
    );
    assert_eq!(
        parse_all(b"PING\r\n").expect("test value"),
        vec![args(&[b"PING"])]
    );
    assert_eq!(
        parse_all(b"get  a\n").expect("test value"),
        vec![args(&[b"get", b"a"])]
    );
    assert_eq!(
        one(b"*1\r\n$4\r\nPING\r\nextra"),
        Ok(Parsed::Resp { consumed: 14 })
    );
    assert_eq!(one(b"PING\r\nextra"), Ok(Parsed::Inline { consumed: 6 }));
    assert_eq!(one(b""), Ok(Parsed::Incomplete));
    assert_eq!(one(b"*"), Ok(Parsed::Incomplete));
    assert_eq!(one(b"*1\r"), Ok(Parsed::Incomplete));
    assert_eq!(one(b"*1\r\n$4\r\nPI"), Ok(Parsed::Incomplete));
    assert_eq!(one(b"*1\r\n$4\r\nPING\r"), Ok(Parsed::Incomplete));
    assert_eq!(one(b"PIN"), Ok(Parsed::Incomplete));
}

#[test]
fn empty_requests() {
    assert_eq!(one(b"*0\r\n"), Ok(Parsed::Empty { consumed: 4 }));
    assert_eq!(one(b"*-1\r\n"), Ok(Parsed::Empty { consumed: 5 }));
    assert_eq!(one(b"\r\n"), Ok(Parsed::Empty { consumed: 2 }));
    assert_eq!(one(b"\n"), Ok(Parsed::Empty { consumed: 1 }));
    assert_eq!(one(b"   \t \r\n"), Ok(Parsed::Empty { consumed: 7 }));
    // Only `*` starts a multibulk request; anything else is an inline line.
    assert_eq!(
        parse_all(b"$0\r\n").expect("test value"),
        vec![args(&[b"$0"])]
    );
    assert_eq!(
        parse_all(b"*0\r\n\r\nPING\r\n").expect("test value"),
        vec![Req::Empty, Req::Empty, args(&[b"PING"])]
    );
}

#[test]
fn error_texts() {
    assert_eq!(one(b"*x\r\n"), perr("invalid multibulk length"));
    assert_eq!(one(b"*\r\n"), perr("invalid multibulk length"));
    // Redis treats any count <= 0 as an empty request.
    assert_eq!(one(b"*-2\r\n"), Ok(Parsed::Empty { consumed: 5 }));
    assert_eq!(one(b"*+1\r\n"), perr("invalid multibulk length"));
    assert_eq!(one(b"*01\r\n"), perr("invalid multibulk length"));
    assert_eq!(one(b"*1048577\r\n"), Ok(Parsed::Incomplete));
    assert_eq!(one(b"*2147483648\r\n"), perr("invalid multibulk length"));
    assert_eq!(
        one(b"*99999999999999999999\r\n"),
        perr("invalid multibulk length")
    );
    assert_eq!(one(b"*1\r\n:1\r\n"), perr("expected '$', got ':'"));
    assert_eq!(one(b"*1\r\nGET\r\n"), perr("expected '$', got 'G'"));
    assert_eq!(one(b"*1\r\n$x\r\n"), perr("invalid bulk length"));
    assert_eq!(one(b"*1\r\n$-1\r\n"), perr("invalid bulk length"));
    assert_eq!(one(b"*1\r\n$\r\n"), perr("invalid bulk length"));
    assert_eq!(one(b"*1\r\n$536870913\r\n"), perr("invalid bulk length"));
    // Redis skips the two bytes after bulk data unchecked: `*1 $4 PINGX\r\n` is PING, then an
    // empty inline line.
    assert_eq!(
        parse_all(b"*1\r\n$4\r\nPINGX\r\n").expect("test value"),
        vec![args(&[b"PING"]), Req::Empty]
    );
    assert_eq!(one(b"\"abc\n"), perr("unbalanced quotes in request"));
    let small = Limits {
        max_bulk_len: 10,
        max_multibulk_len: 3,
        max_inline_len: 16,
    };
    let lim = |b: &[u8]| RequestParser::new(small).parse(b, &mut Vec::new(), &mut Vec::new());
    assert_eq!(lim(b"*4\r\n"), perr("invalid multibulk length"));
    assert_eq!(lim(b"*3\r\n"), Ok(Parsed::Incomplete));
    assert_eq!(lim(b"*1\r\n$11\r\n"), perr("invalid bulk length"));
    assert_eq!(lim(b"*1\r\n$10\r\n"), Ok(Parsed::Incomplete));
    assert_eq!(lim(&[b'a'; 17]), perr("too big inline request"));
    assert_eq!(lim(&[b'a'; 16]), Ok(Parsed::Incomplete));
    let mut big = b"*".to_vec();
    big.extend_from_slice(&[b'1'; 20]);
    assert_eq!(lim(&big), perr("too big mbulk count string"));
    let mut big = b"*1\r\n$".to_vec();
    big.extend_from_slice(&[b'1'; 20]);
    assert_eq!(lim(&big), perr("too big bulk count string"));
    // Display is the bare text, and the wire form has Redis's prefix.
    let e = ProtocolError("invalid bulk length".into());
    assert_eq!(e.to_string(), "invalid bulk length");
    let mut out = Vec::new();
    encode::protocol_error(&mut out, &e);
    assert_eq!(out, b"-ERR Protocol error: invalid bulk length\r\n");
}

#[test]
fn binary_bulks() {
    let v = vec![
        b"SET".to_vec(),
        b"k\r\n".to_vec(),
        b"\r\n\0*1\r\n$1\r\n".to_vec(),
        Vec::new(),
    ];
    assert_eq!(
        parse_all(&encode_cmd(&v)).expect("test value"),
        vec![Req::Args(v)]
    );
}

#[test]
fn inline_quoting() {
    let cases: &[(&[u8], &[&[u8]])] = &[
        (b"set \"a b\" 'c d'", &[b"set", b"a b", b"c d"]),
        (b"\"\\n\\r\\t\\b\\a\\\\\\\"\\q\"", &[b"\n\r\t\x08\x07\\\"q"]),
        (b"\"\\x41\\x6a\\xZZ\"", &[b"AjxZZ"]),
        (b"'it\\'s' '\\n'", &[b"it's", b"\\n"]),
        (b"foo\"bar\" x", &[b"foobar", b"x"]),
        (b"\"\" ''", &[b"", b""]),
        (b"  a\t\tb  ", &[b"a", b"b"]),
        (b"\"a\"\t'b'", &[b"a", b"b"]),
    ];
    // A NUL before the newline hides it from Redis's strchr: the line never completes.
    assert_eq!(one(b"SET k a\0b\r\n"), Ok(Parsed::Incomplete));
    assert_eq!(
        parse_all(b"SET k a\0b\r\nGET k\r\n").expect("test value"),
        vec![]
    );
    let mut p = RequestParser::default();
    let (mut a, mut sc) = (Vec::new(), Vec::new());
    assert_eq!(
        p.parse(b"SET k a\0", &mut a, &mut sc),
        Ok(Parsed::Incomplete)
    );
    assert_eq!(
        p.parse(b"SET k a\0b\r\nGET k\r\n", &mut a, &mut sc),
        Ok(Parsed::Incomplete)
    );
    for (line, want) in cases {
        let mut input = line.to_vec();
        input.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_all(&input).expect("test value"),
            vec![args(want)],
            "{line:?}"
        );
    }
    for bad in [
        &b"\"abc\"def\n"[..],
        b"'abc'def\n",
        b"'abc\n",
        b"\"abc\\\"\n",
        b"\"a\\\n",
    ] {
        assert_eq!(one(bad), perr("unbalanced quotes in request"), "{bad:?}");
    }
}

const PIPELINE: &[u8] =
    b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nPING\r\n*0\r\n*3\r\n$3\r\nSET\r\n$2\r\n\r\n\r\n$0\r\n\r\n\
set \"a\\x41\" 'b c'\n\r\n*-1\r\n*1\r\n$12\r\n0123456789ab\r\n";

#[test]
fn split_at_every_boundary() {
    let want = parse_all(PIPELINE).expect("test value");
    assert_eq!(want.len(), 8);
    for cut in 0..=PIPELINE.len() {
        assert_eq!(
            feed(PIPELINE, &[cut], Limits::default()).expect("test value"),
            want,
            "cut {cut}"
        );
    }
    // One byte at a time.
    let cuts: Vec<usize> = (0..PIPELINE.len()).collect();
    assert_eq!(
        feed(PIPELINE, &cuts, Limits::default()).expect("test value"),
        want
    );
}

#[test]
fn resumes_without_rescanning() {
    // A 1000-key MGET fed in small chunks keeps its progress: args grow across calls.
    let mut v = vec![b"MGET".to_vec()];
    v.extend((0..1000).map(|i| format!("key:{i}").into_bytes()));
    let input = encode_cmd(&v);
    let mut p = RequestParser::default();
    let (mut args, mut scratch) = (Vec::new(), Vec::new());
    let half = input.len() / 2;
    assert_eq!(
        p.parse(&input[..half], &mut args, &mut scratch),
        Ok(Parsed::Incomplete)
    );
    let seen = args.len();
    assert!(seen > 400 && seen < 600, "{seen}");
    let r = p
        .parse(&input, &mut args, &mut scratch)
        .expect("test value");
    assert_eq!(
        r,
        Parsed::Resp {
            consumed: input.len()
        }
    );
    assert_eq!(owned(&input, &scratch, r, &args), Req::Args(v));
    // A big bulk waiting for its data is an O(1) check per call.
    let mut p = RequestParser::default();
    let head = b"*2\r\n$3\r\nSET\r\n$1000000\r\n";
    assert_eq!(
        p.parse(head, &mut args, &mut scratch),
        Ok(Parsed::Incomplete)
    );
    assert_eq!(args.len(), 1);
}

#[test]
fn encoders() {
    let mut out = Vec::new();
    encode::integer(&mut out, i64::MIN);
    encode::integer(&mut out, 0);
    encode::integer(&mut out, 42);
    encode::bulk(&mut out, b"ab");
    encode::array_header(&mut out, 10);
    encode::error(&mut out, b"a\r\nb");
    encode::error_fmt(&mut out, b"ERR ", b"x\ny");
    assert_eq!(
        out,
        b":-9223372036854775808\r\n:0\r\n:42\r\n$2\r\nab\r\n*10\r\n-a  b\r\n-ERR x y\r\n".to_vec()
    );
}

fn scan_one(b: &[u8]) -> Result<Option<usize>, ProtocolError> {
    ReplyScanner::default().scan(b)
}

#[test]
fn reply_scanner_types() {
    let replies: &[&[u8]] = &[
        b"+OK\r\n",
        b"-ERR x\r\n",
        b":-5\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"$0\r\n\r\n",
        b"$4\r\na\r\nb\r\n",
        b"*0\r\n",
        b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
        b"_\r\n",
        b",3.14\r\n",
        b"#t\r\n",
        b"!3\r\nerr\r\n",
        b"=7\r\ntxt:abc\r\n",
        b"(123\r\n",
        b"%1\r\n+k\r\n:1\r\n",
        b"~2\r\n+a\r\n+b\r\n",
        b">2\r\n+message\r\n+x\r\n",
        b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
        b"*1\r\n|1\r\n+a\r\n+b\r\n:1\r\n",
        b"$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n",
        b"*?\r\n:1\r\n*?\r\n.\r\n$?\r\n;0\r\n.\r\n",
        b"%?\r\n+a\r\n:1\r\n.\r\n",
    ];
    for r in replies {
        let mut input = r.to_vec();
        input.extend_from_slice(b"+NEXT\r\n");
        assert_eq!(
            scan_one(&input),
            Ok(Some(r.len())),
            "{:?}",
            String::from_utf8_lossy(r)
        );
        for cut in 0..r.len() {
            assert_eq!(scan_one(&r[..cut]), Ok(None), "{r:?} cut {cut}");
            let mut s = ReplyScanner::default();
            assert_eq!(s.scan(&r[..cut]), Ok(None));
            assert_eq!(s.scan(&input), Ok(Some(r.len())));
            // Reset after Some.
            assert_eq!(s.scan(b"+NEXT\r\n"), Ok(Some(7)));
        }
    }
    assert!(scan_one(b"@x\r\n").is_err());
    assert!(scan_one(b"$3\r\nabcd\r\n").is_err());
    assert!(scan_one(b"$x\r\n").is_err());
    assert!(scan_one(b".\r\n").is_err());
    assert!(scan_one(b"*99999999999999999999\r\n").is_err());
    assert_eq!(scan_one(b"$9223372036854775807\r\n"), Ok(None));
}

#[test]
fn reply_scanner_deep_and_huge() {
    let mut deep = Vec::new();
    for _ in 0..10_000 {
        deep.extend_from_slice(b"*1\r\n");
    }
    deep.extend_from_slice(b":1\r\n");
    assert_eq!(scan_one(&deep), Ok(Some(deep.len())));
    let mut big = b"*100000\r\n".to_vec();
    for _ in 0..100_000 {
        big.extend_from_slice(b"$3\r\nabc\r\n");
    }
    let mut s = ReplyScanner::default();
    let mut end = 0;
    while end < big.len() {
        end = (end + 4093).min(big.len());
        let r = s.scan(&big[..end]).expect("test value");
        assert_eq!(r, (end == big.len()).then_some(big.len()));
    }
}

#[test]
fn inspection_helpers() {
    assert_eq!(integer_reply(b":12\r\n"), Some(12));
    assert_eq!(integer_reply(b":-3\r\n"), Some(-3));
    assert_eq!(integer_reply(b"+12\r\n"), None);
    assert_eq!(integer_reply(b":1x\r\n"), None);
    assert!(is_error(b"-ERR\r\n") && is_error(b"!1\r\nx\r\n") && !is_error(b"+OK\r\n"));
    assert!(is_ok(b"+OK\r\n") && !is_ok(b"+OKAY\r\n"));
    assert!(is_null(b"$-1\r\n") && is_null(b"_\r\n") && !is_null(b"$0\r\n\r\n"));
    let r = b"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:1\r\n";
    let el = array_elements(r).expect("test value");
    let got: Vec<&[u8]> = el.iter().map(|x| &r[x.clone()]).collect();
    assert_eq!(got, vec![&b"$1\r\na\r\n"[..], b"$-1\r\n", b"*1\r\n:1\r\n"]);
    assert_eq!(array_len(r), Some(3));
    assert_eq!(array_elements(b"*-1\r\n"), None);
    assert_eq!(array_elements(b"*0\r\n"), Some(vec![]));
    assert_eq!(array_elements(b"+OK\r\n"), None);
    assert_eq!(array_elements(b"*2\r\n:1\r\n"), None);
}

// ---- Differential tests against the redis-protocol crate ----

fn frame_args(f: OwnedFrame) -> Option<Vec<Vec<u8>>> {
    match f {
        OwnedFrame::Array(v) => v
            .into_iter()
            .map(|e| match e {
                OwnedFrame::BulkString(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn arb_cmd() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let arg = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'$'), Just(b'*')],
            0..6
        ),
    ];
    proptest::collection::vec(arg, 1..12)
}

fn encode_frame(f: &OwnedFrame, out: &mut Vec<u8>) {
    match f {
        OwnedFrame::SimpleString(s) => encode::simple(out, s),
        OwnedFrame::Error(s) => encode::error(out, s.as_bytes()),
        OwnedFrame::Integer(n) => encode::integer(out, *n),
        OwnedFrame::BulkString(b) => encode::bulk(out, b),
        OwnedFrame::Null => encode::nil(out),
        OwnedFrame::Array(v) => {
            encode::array_header(out, v.len());
            for e in v {
                encode_frame(e, out);
            }
        }
    }
}

fn arb_frame() -> impl Strategy<Value = OwnedFrame> {
    let text = "[a-zA-Z0-9 ]{0,12}";
    let leaf = prop_oneof![
        text.prop_map(|s: String| OwnedFrame::SimpleString(s.into_bytes())),
        text.prop_map(OwnedFrame::Error),
        any::<i64>().prop_map(OwnedFrame::Integer),
        proptest::collection::vec(any::<u8>(), 0..30).prop_map(OwnedFrame::BulkString),
        Just(OwnedFrame::Null),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        proptest::collection::vec(inner, 0..8).prop_map(OwnedFrame::Array)
    })
}

proptest! {
    #[test]
    fn requests_match_redis_protocol(
        cmds in proptest::collection::vec(arb_cmd(), 1..6),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..5),
    ) {
        let mut input = Vec::new();
        for c in &cmds {
            input.extend_from_slice(&encode_cmd(c));
        }
        // The reference: decode frame after frame.
        let mut want = Vec::new();
        let mut at = 0;
        while at < input.len() {
            let (f, n) = decode(&input[at..]).expect("test value").expect("test value");
            want.push(Req::Args(frame_args(f).expect("test value")));
            at += n;
        }
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
        prop_assert_eq!(feed(&input, &cuts, Limits::default()).expect("test value"), want);
    }

    #[test]
    fn replies_match_redis_protocol(
        frames in proptest::collection::vec(arb_frame(), 1..4),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut input = Vec::new();
        for f in &frames {
            encode_frame(f, &mut input);
        }
        let mut at = 0;
        let mut s = ReplyScanner::default();
        while at < input.len() {
            let want = decode(&input[at..]).expect("test value").map(|(_, n)| n);
            // Resume from a random prefix first.
            let c = at + cut.index(input.len() - at + 1);
            let early = s.scan(&input[at..c]).expect("test value");
            let got = match early {
                Some(n) => Some(n),
                None => s.scan(&input[at..]).expect("test value"),
            };
            prop_assert_eq!(got, want);
            at += got.unwrap_or(input.len());
        }
    }

    #[test]
    fn parser_never_panics(input in proptest::collection::vec(any::<u8>(), 0..200), cut in any::<proptest::sample::Index>()) {
        let c = cut.index(input.len() + 1);
        let _ = feed(&input, &[c], Limits { max_bulk_len: 64, max_multibulk_len: 16, max_inline_len: 64 });
        let mut s = ReplyScanner::default();
        let _ = s.scan(&input[..c]);
        let _ = s.scan(&input);
    }
}

#[test]
fn resets_after_error_and_on_request() {
    let mut p = RequestParser::default();
    let (mut a, mut s) = (Vec::new(), Vec::new());
    assert_eq!(
        p.parse(b"*2\r\n$1\r\nx\r\n", &mut a, &mut s),
        Ok(Parsed::Incomplete)
    );
    p.reset();
    assert_eq!(
        p.parse(b"PING\r\n", &mut a, &mut s),
        Ok(Parsed::Inline { consumed: 6 })
    );
    assert!(p.parse(b"*1\r\n:1\r\n", &mut a, &mut s).is_err());
    assert!(a.is_empty());
    assert_eq!(
        p.parse(b"*1\r\n$1\r\nx\r\n", &mut a, &mut s),
        Ok(Parsed::Resp { consumed: 11 })
    );
    let mut r = ReplyScanner::default();
    assert_eq!(r.scan(b"*2\r\n:1\r\n"), Ok(None));
    r.reset();
    assert_eq!(r.scan(b":2\r\n"), Ok(Some(4)));
}

#[test]
fn integers_parse_as_redis_string2ll() {
    assert_eq!(string2ll(b"0"), Some(0));
    assert_eq!(string2ll(b"-12"), Some(-12));
    assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
    for bad in [
        &b""[..],
        b"00",
        b"-0",
        b"+1",
        b" 1",
        b"1 ",
        b"01",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"-",
    ] {
        assert_eq!(string2ll(bad), None, "{bad:?}");
    }
}

//! The frames of Redis's pub/sub: the three namespaces ([`Topic`]), the frames Redis pushes to a
//! subscribed connection ([`parse_push`]) and the confirmations a client reads
//! ([`confirmation`]), in RESP2 (arrays) and RESP3 (push types).

use super::encode;

/// What a subscription is to: Redis's three pub/sub namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// A channel (`SUBSCRIBE`, `PUBLISH`; frames `message`).
    Channel,
    /// A glob-style pattern over channel names (`PSUBSCRIBE`; frames `pmessage`).
    Pattern,
    /// A shard channel (`SSUBSCRIBE`, `SPUBLISH`; frames `smessage`), Redis 7.0+.
    Shard,
}

impl Topic {
    /// The subscribe command's name.
    pub fn subscribe(self) -> &'static [u8] {
        match self {
            Topic::Channel => b"SUBSCRIBE",
            Topic::Pattern => b"PSUBSCRIBE",
            Topic::Shard => b"SSUBSCRIBE",
        }
    }

    /// The unsubscribe command's name.
    pub fn unsubscribe(self) -> &'static [u8] {
        match self {
            Topic::Channel => b"UNSUBSCRIBE",
            Topic::Pattern => b"PUNSUBSCRIBE",
            Topic::Shard => b"SUNSUBSCRIBE",
        }
    }

    /// The kind word of a subscribe confirmation frame, as Redis writes it.
    pub fn subscribed_word(self) -> &'static [u8] {
        match self {
            Topic::Channel => b"subscribe",
            Topic::Pattern => b"psubscribe",
            Topic::Shard => b"ssubscribe",
        }
    }

    /// The kind word of a message frame, as Redis writes it.
    pub fn message_word(self) -> &'static [u8] {
        match self {
            Topic::Channel => b"message",
            Topic::Pattern => b"pmessage",
            Topic::Shard => b"smessage",
        }
    }

    /// The kind word of an unsubscribe confirmation frame, as Redis writes it.
    pub fn unsubscribed_word(self) -> &'static [u8] {
        match self {
            Topic::Channel => b"unsubscribe",
            Topic::Pattern => b"punsubscribe",
            Topic::Shard => b"sunsubscribe",
        }
    }
}

/// A pub/sub frame of Redis's subscribed mode (RESP2 arrays of bulk strings and an integer;
/// Redis `pubsub.c`, `addReplyPubsubMessage` and friends).
#[derive(Debug, PartialEq, Eq)]
pub enum Push<'a> {
    /// `message`, `pmessage` (with the `pattern` it matched) or `smessage`.
    Message {
        topic: Topic,
        pattern: Option<&'a [u8]>,
        channel: &'a [u8],
        payload: &'a [u8],
    },
    /// A (un)subscribe confirmation; `name` is `None` for the `unsubscribe` Redis answers when
    /// there was nothing to unsubscribe from.
    Confirm {
        subscribe: bool,
        topic: Topic,
        name: Option<&'a [u8]>,
    },
}

/// Parses a pub/sub frame (a complete RESP2 array); `None` for anything else.
pub fn parse_push<'f>(frame: &'f [u8]) -> Option<Push<'f>> {
    let mut parts = super::elements(frame)?;
    let kind = super::bulk_body(frame.get(parts.next()?)?)?;
    let mut next = || frame.get(parts.next()?);
    let confirm = |subscribe, topic, name: &'f [u8]| {
        Some(Push::Confirm {
            subscribe,
            topic,
            name: super::bulk_body(name),
        })
    };
    match kind {
        b"message" | b"smessage" => Some(Push::Message {
            topic: if kind == b"message" {
                Topic::Channel
            } else {
                Topic::Shard
            },
            pattern: None,
            channel: super::bulk_body(next()?)?,
            payload: super::bulk_body(next()?)?,
        }),
        b"pmessage" => Some(Push::Message {
            topic: Topic::Pattern,
            pattern: Some(super::bulk_body(next()?)?),
            channel: super::bulk_body(next()?)?,
            payload: super::bulk_body(next()?)?,
        }),
        b"subscribe" => confirm(true, Topic::Channel, next()?),
        b"psubscribe" => confirm(true, Topic::Pattern, next()?),
        b"ssubscribe" => confirm(true, Topic::Shard, next()?),
        b"unsubscribe" => confirm(false, Topic::Channel, next()?),
        b"punsubscribe" => confirm(false, Topic::Pattern, next()?),
        b"sunsubscribe" => confirm(false, Topic::Shard, next()?),
        _ => None,
    }
}

/// Appends a (un)subscribe confirmation as Redis writes it (`addReplyPubsubSubscribed`,
/// `addReplyPubsubUnsubscribed`): `[word, name, count]`, an array in RESP2 and a push in RESP3;
/// `name` `None` is the null Redis answers an unsubscribe from nothing.
pub fn confirmation(
    out: &mut Vec<u8>,
    resp3: bool,
    word: &[u8],
    name: Option<&[u8]>,
    count: usize,
) {
    out.extend_from_slice(if resp3 { b">3\r\n" } else { b"*3\r\n" });
    encode::bulk(out, word);
    match (name, resp3) {
        (Some(name), _) => encode::bulk(out, name),
        (None, false) => out.extend_from_slice(b"$-1\r\n"),
        (None, true) => out.extend_from_slice(b"_\r\n"),
    }
    encode::integer(out, i64::try_from(count).unwrap_or(i64::MAX));
}

/// Appends a message frame: `[kind, pattern?, channel, payload]` (kind from
/// [`Topic::message_word`]), an array in RESP2 and a push in RESP3.
pub fn message(
    out: &mut Vec<u8>,
    resp3: bool,
    topic: Topic,
    pattern: Option<&[u8]>,
    channel: &[u8],
    payload: &[u8],
) {
    let n = if pattern.is_some() { 4 } else { 3 };
    out.push(if resp3 { b'>' } else { b'*' });
    encode::decimal(out, n);
    out.extend_from_slice(b"\r\n");
    encode::bulk(out, topic.message_word());
    if let Some(p) = pattern {
        encode::bulk(out, p);
    }
    encode::bulk(out, channel);
    encode::bulk(out, payload);
}

/// How one count Redis answered is corrected for the clients behind the proxy: Redis counted
/// the proxy's upstream subscriptions (`counted` of them at most: those confirmed, and those
/// being unsubscribed, which Redis may or may not have let go yet), and the clients want their
/// own subscribers (`receivers`) counted instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Correction {
    pub counted: i64,
    pub receivers: i64,
}

impl Correction {
    /// Redis's count `n` corrected: what is left of it past the proxy's subscriptions (at
    /// least zero: the subscriptions being unsubscribed that Redis had already let go), plus
    /// the proxy's receivers.
    pub fn apply(&self, n: i64) -> i64 {
        n.saturating_sub(self.counted)
            .max(0)
            .saturating_add(self.receivers)
    }

    /// True when it adds as many receivers as it takes subscriptions off: Redis's count stands
    /// (the request carries no correction).
    pub fn is_none(&self) -> bool {
        self.counted == self.receivers
    }
}

/// `reply` with `corrections` applied to its counts in order ([`Correction::apply`]): to the
/// reply itself when it is an integer (`PUBLISH`), else to the integer elements of an array
/// (`PUBSUB NUMSUB`'s counts). Anything else (an error) comes back unchanged.
pub fn add_to_counts(reply: &[u8], corrections: &[Correction]) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.len() + 8);
    let add = |out: &mut Vec<u8>, n: i64, c: Option<&Correction>| {
        encode::integer(out, c.map_or(n, |c| c.apply(n)));
    };
    if let Some(n) = super::integer_reply(reply) {
        add(&mut out, n, corrections.first());
        return out;
    }
    let Some(elems) = super::array_elements(reply).filter(|_| reply.first() == Some(&b'*')) else {
        out.extend_from_slice(reply);
        return out;
    };
    encode::array_header(&mut out, elems.len());
    let mut corrections = corrections.iter();
    for e in elems {
        let elem = reply.get(e).unwrap_or_default();
        match super::integer_reply(elem) {
            Some(n) => add(&mut out, n, corrections.next()),
            None => out.extend_from_slice(elem),
        }
    }
    out
}

/// True when `pattern` matches `s` the way Redis matches a `PSUBSCRIBE` pattern to a channel
/// (Redis `util.c`, `stringmatchlen`, case-sensitive): `*` any run, `?` one byte, `[abc]`,
/// `[^a]`, `[a-z]` one byte of a set, `\` quotes the next byte. Bounded: a `*` that failed
/// to match a suffix stops longer attempts, as Redis's `skipLongerMatches` does.
pub fn pattern_matches(pattern: &[u8], s: &[u8]) -> bool {
    let mut skip_longer = false;
    glob(pattern, s, &mut skip_longer, 0)
}

fn glob(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: usize) -> bool {
    // Redis's guard against abusive patterns: a thousand stars deep is no match.
    if nesting > 1000 {
        return false;
    }
    while let (Some(&pc), Some(&sc)) = (p.first(), s.first()) {
        match pc {
            b'*' => {
                while p.get(1) == Some(&b'*') {
                    p = p.get(1..).unwrap_or_default();
                }
                if p.len() == 1 {
                    return true;
                }
                let rest = p.get(1..).unwrap_or_default();
                while !s.is_empty() {
                    if glob(rest, s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = s.get(1..).unwrap_or_default();
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = s.get(1..).unwrap_or_default(),
            b'[' => {
                p = p.get(1..).unwrap_or_default();
                let not = p.first() == Some(&b'^');
                if not {
                    p = p.get(1..).unwrap_or_default();
                }
                let mut matched = false;
                loop {
                    match (p.first(), p.get(1), p.get(2)) {
                        (Some(b'\\'), Some(&q), _) => {
                            p = p.get(1..).unwrap_or_default();
                            matched |= q == sc;
                        }
                        (Some(b']'), _, _) => break,
                        (None, _, _) => {
                            // An unclosed set: the loop below steps past the end once more.
                            break;
                        }
                        (Some(&a), Some(b'-'), Some(&b)) => {
                            let (lo, hi) = if a > b { (b, a) } else { (a, b) };
                            p = p.get(2..).unwrap_or_default();
                            matched |= (lo..=hi).contains(&sc);
                        }
                        (Some(&c), _, _) => matched |= c == sc,
                    }
                    p = p.get(1..).unwrap_or_default();
                }
                if matched == not {
                    return false;
                }
                s = s.get(1..).unwrap_or_default();
            }
            _ => {
                let lit = if pc == b'\\' && p.len() >= 2 {
                    p = p.get(1..).unwrap_or_default();
                    p.first().copied().unwrap_or(pc)
                } else {
                    pc
                };
                if lit != sc {
                    return false;
                }
                s = s.get(1..).unwrap_or_default();
            }
        }
        p = p.get(1..).unwrap_or_default();
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = p.get(1..).unwrap_or_default();
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_as_redis_writes_them() {
        assert_eq!(
            parse_push(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"),
            Some(Push::Message {
                topic: Topic::Channel,
                pattern: None,
                channel: b"ch",
                payload: b"hello"
            })
        );
        assert_eq!(
            parse_push(b"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$0\r\n\r\n"),
            Some(Push::Message {
                topic: Topic::Pattern,
                pattern: Some(b"c*"),
                channel: b"ch",
                payload: b""
            })
        );
        assert_eq!(
            parse_push(b"*3\r\n$10\r\nssubscribe\r\n$2\r\nch\r\n:1\r\n"),
            Some(Push::Confirm {
                subscribe: true,
                topic: Topic::Shard,
                name: Some(b"ch")
            })
        );
        assert_eq!(
            parse_push(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"),
            Some(Push::Confirm {
                subscribe: false,
                topic: Topic::Channel,
                name: None
            })
        );
        assert_eq!(parse_push(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"), None);
        assert_eq!(parse_push(b"*2\r\n$7\r\nmessage\r\n$2\r\nch\r\n"), None);
        assert_eq!(parse_push(b":1\r\n"), None);
    }

    #[test]
    fn confirmations_and_messages_encode_as_redis_does() {
        let mut out = Vec::new();
        confirmation(&mut out, false, b"subscribe", Some(b"ch"), 2);
        assert_eq!(out, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:2\r\n");
        out.clear();
        confirmation(&mut out, true, b"unsubscribe", None, 0);
        assert_eq!(out, b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n");
        out.clear();
        confirmation(&mut out, false, b"punsubscribe", None, 0);
        assert_eq!(out, b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n");
        out.clear();
        message(&mut out, true, Topic::Pattern, Some(b"c*"), b"ch", b"hi");
        assert_eq!(
            out,
            b">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
        let frame = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n";
        out.clear();
        message(&mut out, false, Topic::Channel, None, b"ch", b"hi");
        assert_eq!(out, frame);
    }

    #[test]
    fn counts_are_corrected_in_place() {
        let c = |counted, receivers| Correction { counted, receivers };
        assert_eq!(add_to_counts(b":1\r\n", &[c(0, 2)]), b":3\r\n");
        assert_eq!(add_to_counts(b":3\r\n", &[c(2, 0)]), b":1\r\n");
        assert_eq!(add_to_counts(b"-ERR x\r\n", &[c(0, 2)]), b"-ERR x\r\n");
        assert_eq!(
            add_to_counts(
                b"*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n:0\r\n",
                &[c(0, 1), c(0, 2)]
            ),
            b"*4\r\n$1\r\na\r\n:2\r\n$1\r\nb\r\n:2\r\n"
        );
        // Two subscriptions counted, one of them being unsubscribed: whether Redis let it go
        // before the PUBLISH or not, the two local receivers are all there is (a subscription
        // Redis had let go was once taken off the receivers: 1).
        assert_eq!(add_to_counts(b":2\r\n", &[c(2, 2)]), b":2\r\n");
        assert_eq!(add_to_counts(b":1\r\n", &[c(2, 2)]), b":2\r\n");
        // A direct subscriber of the backend counts as Redis counts it.
        assert_eq!(add_to_counts(b":3\r\n", &[c(2, 2)]), b":3\r\n");
    }

    #[test]
    fn patterns_match_as_redis_matches_them() {
        for (p, s, m) in [
            (&b"foo.*"[..], &b"foo.1"[..], true),
            (b"foo.*", b"foo1", false),
            (b"*", b"", false),
            (b"*", b"x", true),
            (b"", b"", true),
            (b"a?c", b"abc", true),
            (b"a?c", b"ac", false),
            (b"h[ae]llo", b"hello", true),
            (b"h[^e]llo", b"hello", false),
            (b"h[^e]llo", b"hallo", true),
            (b"h[a-b]llo", b"hbllo", true),
            (b"h[b-a]llo", b"hallo", true),
            (b"h[a-b]llo", b"hcllo", false),
            (b"h\\*llo", b"h*llo", true),
            (b"h\\*llo", b"hello", false),
            (b"ch*", b"channel", true),
            (b"a*b*c", b"axxbyyc", true),
            (b"a*b*c", b"axxbyy", false),
            (b"abc*", b"ab", false),
            (b"[abc", b"a", true),
            (b"a**", b"a", true),
        ] {
            assert_eq!(
                pattern_matches(p, s),
                m,
                "{:?} {:?}",
                String::from_utf8_lossy(p),
                String::from_utf8_lossy(s)
            );
        }
        // Bounded on a pathological pattern, and in depth.
        let p = [b"a*".repeat(30), b"b".to_vec()].concat();
        assert!(!pattern_matches(&p, &b"a".repeat(60)));
        assert!(!pattern_matches(
            &b"a*".repeat(100_000),
            &b"a".repeat(100_001)
        ));
    }
}

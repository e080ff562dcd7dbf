//! The query string of an admin request (`a=1&b&c=x%20y`), percent-decoded.

/// Decoded `key=value` pairs in request order; a bare `key` has an empty value.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    /// Splits on `&` and `=`, percent-decoding both sides (`+` is a space, as in HTML forms;
    /// a malformed `%` escape stays as written).
    pub(super) fn parse(query: &str) -> Query {
        Query(
            query
                .split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    /// The value of the first `key`, if present.
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// True if `key` is present, with or without a value.
    pub(super) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

fn percent_decode(s: &str) -> String {
    fn hex(c: u8) -> Option<u8> {
        (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'+' => out.push(b' '),
            b'%' => match (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

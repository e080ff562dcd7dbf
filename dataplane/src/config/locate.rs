//! Turning byte spans into `origin:line:col: key.path: message` errors.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// The source text and its name, shared by every error built during one parse.
pub(super) struct Source<'a> {
    pub text: &'a str,
    pub origin: &'a str,
}

impl Source<'_> {
    /// `origin:line:col: path: message`; the location part is dropped when there is no span
    /// (a required key absent from the whole document has nowhere to point).
    pub fn error(&self, span: Option<Range<usize>>, path: &str, message: &str) -> ConfigError {
        ConfigError {
            origin: self.origin.to_owned(),
            location: span.map(|span| line_col(self.text, span.start)),
            key: path.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Maps a toml/serde error onto the same format. toml keeps the key path of a serde error
    /// private, so the path is recovered by finding which key or value the error span falls in.
    pub fn toml_error(&self, err: &toml::de::Error) -> ConfigError {
        let span = err.span();
        let message = err.message().trim_end();
        let mut path = match (&span, DeTable::parse(self.text)) {
            (Some(span), Ok(root)) => path_at(root.get_ref(), span.start),
            _ => String::new(),
        };
        // A missing key has no span of its own; the error points at the enclosing table, so the
        // key named in the message completes the path.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(field);
        }
        self.error(span, &path, message)
    }

    /// The span of the value at dotted `path` (`clusters[0].connections_per_host`), for errors
    /// about a value whose span the model did not keep. A key absent from the text (a default)
    /// points at the deepest part of the path that is there (the `[[clusters]]` table), so the
    /// error still names a line; `None` only when nothing of the path is in the text.
    pub fn span_at(&self, path: &str) -> Option<Range<usize>> {
        let root = DeTable::parse(self.text).ok()?;
        let mut table = root.get_ref();
        let mut found = None;
        for segment in path.split('.') {
            let (name, indices) = match segment.split_once('[') {
                Some((name, rest)) => (name, Some(rest)),
                None => (segment, None),
            };
            let Some((_, mut value)) = table.iter().find(|(k, _)| k.get_ref() == name) else {
                return found;
            };
            found = Some(value.span());
            for index in indices.into_iter().flat_map(|r| r.split('[')) {
                let i = index.trim_end_matches(']').parse::<usize>().ok();
                let item = match (value.get_ref(), i) {
                    (DeValue::Array(items), Some(i)) => items.get(i),
                    _ => None,
                };
                let Some(item) = item else { return found };
                value = item;
                found = Some(value.span());
            }
            match value.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return found,
            }
        }
        found
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub(super) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    // Spans from toml fall on character boundaries; this only guards against a future change.
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// The dotted path (`listeners[0].op_timeout`) of the deepest key or value containing `at`.
fn path_at(table: &DeTable<'_>, at: usize) -> String {
    let mut path = String::new();
    table_path(table, at, &mut path);
    path
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && (at < span.end || (span.is_empty() && at == span.start))
}

fn table_path(table: &DeTable<'_>, at: usize, path: &mut String) -> bool {
    for (key, value) in table {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key.get_ref());
        // Container spans do not always cover their children (an array of tables is spread over
        // several headers), so descend before checking this entry's own spans.
        if value_path(value, at, path) || contains(&key.span(), at) || contains(&value.span(), at) {
            return true;
        }
        path.truncate(len);
    }
    false
}

fn value_path(value: &Spanned<DeValue<'_>>, at: usize, path: &mut String) -> bool {
    match value.get_ref() {
        DeValue::Table(t) => table_path(t, at, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if value_path(item, at, path) || contains(&item.span(), at) {
                    return true;
                }
                path.truncate(len);
            }
            false
        }
        _ => false,
    }
}

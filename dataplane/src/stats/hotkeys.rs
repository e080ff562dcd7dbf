//! Hot keys and big values per listener (beyond Envoy; admin `/hot_keys`).
//!
//! CONTRACT (stub until implemented): [`HotKeysReport`] and [`BigValue`] are what the admin
//! endpoint renders; [`super::Store::hot_keys`] returns one report per listener that has
//! `[listeners.hot_keys]` or `big_value_bytes` set.

use std::time::Duration;

/// One listener's hot keys over its sliding window, merged over workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeysReport {
    /// The listener's `stat_prefix`.
    pub stat_prefix: String,
    /// The window the counts cover (`hot_keys.window`); zero when hot keys are off.
    pub window: Duration,
    /// Up to `top_k` (key, requests in the window), most requested first; ties by key.
    pub top: Vec<(Vec<u8>, u64)>,
    /// The most recent big values (newest first, bounded), when `big_value_bytes` is set.
    pub big_values: Vec<BigValue>,
}

/// A request value or reply of at least `big_value_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BigValue {
    /// The request's first key (empty when the command has none).
    pub key: Vec<u8>,
    /// The command name, lowercase.
    pub command: String,
    /// Size in bytes: the request's largest bulk string, or the whole reply.
    pub bytes: usize,
    /// `"request"` or `"reply"`.
    pub direction: &'static str,
    /// When it was seen, milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

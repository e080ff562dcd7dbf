//! Serialization helpers for the admin `/config_dump`: the config as an operator wrote it
//! (durations as `"1s"`), secrets never in clear.

use std::time::Duration;

use serde::Serializer;
use serde::ser::SerializeSeq;

/// What a secret (upstream `auth_password`, listener `downstream_auth_passwords`) serializes as.
/// Envoy's config dump redacts secrets the same way (`"[redacted]"`).
pub const REDACTED: &str = "[redacted]";

/// A duration as the humantime string the config takes back (`"1s"`, `"250ms"`, `"1m 30s"`).
pub(super) fn duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// An optional duration as [`duration`] does, or `null`.
pub(super) fn opt_duration<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => duration(d, s),
        None => s.serialize_none(),
    }
}

/// A set secret as [`REDACTED`]; an unset one stays `null`, so the dump still tells whether
/// auth is on.
pub(super) fn redact_option<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(_) => s.serialize_str(REDACTED),
        None => s.serialize_none(),
    }
}

/// Each secret of a list as [`REDACTED`]: the count stays visible, the values do not.
pub(super) fn redact_each<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for _ in v {
        seq.serialize_element(REDACTED)?;
    }
    seq.end()
}

/// A `hash_tag` as its two-character string (`"{}"`), or `null`.
pub(super) fn hash_tag<S: Serializer>(t: &Option<[u8; 2]>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.collect_str(&String::from_utf8_lossy(t)),
        None => s.serialize_none(),
    }
}

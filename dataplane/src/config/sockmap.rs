//! `[sockmap]`: eBPF sockmap acceleration of loopback hops. The table is read by
//! `respite-control`, which loads the programs and fills their port filter; the data plane only
//! validates it (so a typo fails the load like any other key) and shows it in `/config_dump`.

use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::ConfigError;
use super::locate::Source;

/// `[sockmap]`, as parsed. The default (table absent) is everything off and unset.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Sockmap {
    /// Load and enable the sockmap programs (`respite-control --sockmap`). Default false.
    pub enabled: bool,
    /// The cgroup v2 directory whose processes the programs cover (`--sockmap-cgroup`). Default
    /// unset: respite-control uses the cgroup2 mount root.
    pub cgroup: Option<PathBuf>,
    /// Extra ports for the filter besides the listeners' ports (`--sockmap-ports`): inclusive
    /// ranges `(first, last)`, `1 <= first <= last <= 65535`, in the order written (a single
    /// port `p` is `(p, p)`). Default empty.
    pub ports: Vec<(u16, u16)>,
    /// Also put the ports of loopback (127.x) upstream hosts in the filter
    /// (`--sockmap-upstreams`). Default false.
    pub upstreams: bool,
    /// The bpffs mount under which the maps are pinned (`--bpffs`). Default unset:
    /// respite-control uses `/sys/fs/bpf`.
    pub bpffs: Option<PathBuf>,
}

/// Parses the CLI form of a port list, `6379,7000-7005`: comma-separated ports or ranges
/// `a-b` (inclusive), each within 1–65535 with `a <= b`; spaces around items are allowed.
/// Returns the ranges in the order written (`6379` → `(6379, 6379)`).
///
/// # Errors
/// An empty list or item, or an item that is not a port or range in 1–65535 (the message
/// quotes the item).
pub fn parse_port_list(text: &str) -> Result<Vec<(u16, u16)>, String> {
    if text.trim().is_empty() {
        return Err("empty port list: expected ports or ranges like 6379,7000-7005".into());
    }
    text.split(',').map(|item| port_item(item.trim())).collect()
}

/// One item of a port list: `"6379"` or `"7000-7005"`.
fn port_item(item: &str) -> Result<(u16, u16), String> {
    if item.is_empty() {
        return Err(
            "empty item in the port list: expected ports or ranges like 6379,7000-7005".into(),
        );
    }
    match item.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (port(item, a.trim())?, port(item, b.trim())?);
            if a > b {
                return Err(format!(
                    "\"{item}\": the range is reversed (write \"{b}-{a}\")"
                ));
            }
            Ok((a, b))
        }
        None => port(item, item).map(|p| (p, p)),
    }
}

/// A port number written as text in `item`.
fn port(item: &str, text: &str) -> Result<u16, String> {
    // Digits only: `parse` alone would take "+80".
    let n = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u64>().ok()
    } else {
        None
    };
    match n {
        Some(n) => in_range(item, n),
        None => Err(format!(
            "\"{item}\" is not a port or a range: expected a port 1-65535 or \"a-b\""
        )),
    }
}

fn in_range(item: &str, n: u64) -> Result<u16, String> {
    match u16::try_from(n) {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(format!("\"{item}\": port {n} is outside 1-65535")),
    }
}

/// The serde layer of `[sockmap]` (shape checks: unknown keys, types), and its file form.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSockmap {
    /// Load and enable the programs.
    #[serde(default)]
    pub enabled: bool,
    /// Absolute cgroup v2 directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Spanned<String>>,
    /// Extra ports or ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<Spanned<RawPort>>>,
    /// Add loopback upstream ports.
    #[serde(default)]
    pub upstreams: bool,
    /// Absolute bpffs mount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpffs: Option<Spanned<String>>,
}

/// One element of `ports`: a number or a `"a-b"` string, kept apart so that validation can
/// range-check both with one message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RawPort {
    /// `6379`.
    Number(i64),
    /// `"7000-7005"` (or `"6379"`).
    Text(String),
}

impl<'de> Deserialize<'de> for RawPort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawPort;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port number 1-65535 or a range string like \"7000-7005\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawPort, E> {
                Ok(RawPort::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawPort, E> {
                Ok(RawPort::Number(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawPort, E> {
                Ok(RawPort::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Meaning checks of `[sockmap]`: ports in range, paths absolute.
pub(super) fn build(src: &Source<'_>, raw: Option<RawSockmap>) -> Result<Sockmap, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Sockmap::default());
    };
    let mut ports = Vec::new();
    for (i, p) in raw.ports.unwrap_or_default().into_iter().enumerate() {
        let range = match p.get_ref() {
            RawPort::Number(n) => {
                let item = n.to_string();
                u64::try_from(*n)
                    .map_err(|_| format!("\"{item}\": port {n} is outside 1-65535"))
                    .and_then(|n| in_range(&item, n))
                    .map(|p| (p, p))
            }
            RawPort::Text(t) if t.contains(',') => Err(format!(
                "\"{t}\": one port or range per element (write [\"a-b\", c], not \"a-b,c\")"
            )),
            RawPort::Text(t) => port_item(t.trim()),
        };
        match range {
            Ok(r) => ports.push(r),
            Err(e) => return Err(src.error(Some(p.span()), &format!("sockmap.ports[{i}]"), &e)),
        }
    }
    Ok(Sockmap {
        enabled: raw.enabled,
        cgroup: path(src, "sockmap.cgroup", raw.cgroup)?,
        ports,
        upstreams: raw.upstreams,
        bpffs: path(src, "sockmap.bpffs", raw.bpffs)?,
    })
}

fn path(
    src: &Source<'_>,
    key: &str,
    p: Option<Spanned<String>>,
) -> Result<Option<PathBuf>, ConfigError> {
    match p {
        Some(p) if p.get_ref().trim().is_empty() => Err(src.error(
            Some(p.span()),
            key,
            "must not be empty (omit it for the default)",
        )),
        // respite-control may run from another directory than the one the file was written for.
        Some(p) if !p.get_ref().starts_with('/') => Err(src.error(
            Some(p.span()),
            key,
            &format!("\"{}\" must be an absolute path", p.get_ref()),
        )),
        Some(p) => Ok(Some(PathBuf::from(p.into_inner()))),
        None => Ok(None),
    }
}

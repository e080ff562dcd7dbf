//! A twemproxy (nutcracker) `nutcracker.yml`, unchanged, as a config source
//! (`--twemproxy-config`, `respite-control translate --twemproxy-config`).
//!
//! Every pool becomes one `[[listeners]]` (named as the pool, `stat_prefix` the pool name with
//! every character other than ASCII letters, digits, `_`, `-`, `:` turned into `_`) and one
//! `[[clusters]]` (named as that prefix), so that a deployment switched from twemproxy to
//! Respite sends every key to the server it was on:
//! - `listen: host:port` → `address`; a unix socket `listen` is refused (TCP listeners only).
//! - `redis: true` is required: a memcache pool is refused.
//! - `hash` → `hash` (default `fnv1a_64`), `distribution` → `lb_policy` (default `ketama`),
//!   `hash_tag` → the listener's `hash_tag`.
//! - `timeout` (ms) → `op_timeout`; absent or 0 (twemproxy waits forever) → [`pool::NO_TIMEOUT`].
//! - `redis_auth` → the listener's `downstream_auth_passwords` and the cluster's
//!   `auth_password`: clients must AUTH, and Respite AUTHs to the servers, as twemproxy does.
//! - `redis_db` → the cluster's `db` (every server connection `SELECT`s it, as twemproxy's do).
//! - `server_connections` → `connections_per_host` (per worker here, per process there).
//! - `auto_eject_hosts: true` → `[clusters.outlier_detection]` (`consecutive_5xx` =
//!   `server_failure_limit`, default 2; ejection time = `server_retry_timeout`, default 30000 ms,
//!   not growing; any share of hosts) and `on_unhealthy = "rehash"`; false →
//!   `on_unhealthy = "fail_fast"`.
//! - `servers: ["host:port:weight [name]"]` → hosts `{ address, weight, name }`.
//! - `preconnect`, `backlog`, `client_connections`, `tcpkeepalive` are taken without effect, each
//!   with a note saying why no client can tell; `reuseport: true` is refused.
//! - Any other key is refused naming it.
//!
//! The result is checked by the data plane's own parser; its errors are mapped back to the pool,
//! the twemproxy key and its line.

mod pool;
#[cfg(test)]
mod tests;
mod yaml;

use std::path::Path;

use pool::Pool;
pub use pool::{HASHES, NO_TIMEOUT, stat_name};
use respite::config::raw::{RawConfig, unspanned};
use yaml::Value;

/// A translated nutcracker.yml.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// The Respite TOML: a comment header with the notes, then the tables.
    pub toml: String,
    /// One line per key taken without an equivalent (see the module docs).
    pub notes: Vec<String>,
}

/// Reads and translates a nutcracker.yml ([`translate`]); errors are prefixed with the path.
pub fn load(path: &Path) -> Result<Translation, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    translate(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Translates a nutcracker.yml's text into Respite TOML validated by
/// [`respite::config::parse_pushed`].
///
/// Errors: `line N: pool "name": key: reason` (YAML syntax errors carry their own line and
/// column); a file without pools; two pools whose names give the same cluster name.
pub fn translate(text: &str) -> Result<Translation, String> {
    let root = yaml::parse(text)?;
    let Value::Map(pools) = &root.value else {
        return Err(format!(
            "line {}: the file must be a map of pool names to pools",
            root.line
        ));
    };
    if pools.is_empty() {
        return Err("no pools: a nutcracker.yml maps pool names to pools".into());
    }
    let mut translated: Vec<Pool> = Vec::new();
    for (name, line, node) in pools {
        let p = pool::translate(name, *line, node)?;
        if let Some(other) = translated
            .iter()
            .find(|o| o.cluster.name.get_ref() == p.cluster.name.get_ref())
        {
            return Err(format!(
                "line {line}: pool \"{name}\": its cluster name \"{}\" is also pool \"{}\"'s \
                 (line {}); rename one",
                p.cluster.name.get_ref(),
                other.name,
                other.line
            ));
        }
        translated.push(p);
    }
    let notes: Vec<String> = translated.iter().flat_map(|p| p.notes.clone()).collect();
    let body = render(&translated)?;
    if let Err(e) = respite::config::parse_pushed(&body, "translated") {
        return Err(locate(&translated, &e.key, &e.message));
    }
    let mut toml =
        String::from("# Translated from a twemproxy nutcracker.yml by respite-control.\n");
    for n in &notes {
        toml.push_str(&format!("# note: {n}\n"));
    }
    toml.push('\n');
    toml.push_str(&body);
    Ok(Translation { toml, notes })
}

/// The pools' tables as TOML text.
fn render(pools: &[Pool]) -> Result<String, String> {
    let file = RawConfig {
        listeners: pools
            .iter()
            .map(|p| unspanned(p.listener.clone()))
            .collect(),
        clusters: pools.iter().map(|p| unspanned(p.cluster.clone())).collect(),
        ..RawConfig::default()
    };
    file.to_toml()
        .map_err(|e| format!("rendering the TOML: {e}"))
}

/// The data plane's error on `key` (`listeners[i].x` / `clusters[i].x`: pool `i`'s tables) →
/// the pool, the twemproxy key it came from and that key's line.
fn locate(pools: &[Pool], key: &str, message: &str) -> String {
    let parsed = ["listeners[", "clusters["].iter().find_map(|prefix| {
        let rest = key.strip_prefix(prefix)?;
        let (i, rest) = rest.split_once(']')?;
        Some((i.parse::<usize>().ok()?, rest.trim_start_matches('.')))
    });
    let Some((i, field)) = parsed else {
        return format!("the translated config: {key}: {message}");
    };
    let Some(p) = pools.get(i) else {
        return format!("the translated config: {key}: {message}");
    };
    let line_of = |k: &str| {
        p.key_lines
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, l)| *l)
    };
    let from = |twem: &str| (twem.to_string(), line_of(twem).unwrap_or(p.line));
    let (twem, line) = if let Some(rest) = field.strip_prefix("hosts[") {
        let n = rest
            .split_once(']')
            .and_then(|(n, _)| n.parse::<usize>().ok());
        match n.and_then(|n| Some((n, *p.server_lines.get(n)?))) {
            Some((n, l)) => (format!("servers[{n}]"), l),
            None => from("servers"),
        }
    } else {
        let head = field.split(['.', '[']).next().unwrap_or(field);
        match head {
            "address" => from("listen"),
            "op_timeout" => from("timeout"),
            "hash_tag" => from("hash_tag"),
            "hash" => from("hash"),
            "lb_policy" => from("distribution"),
            "downstream_auth_passwords" | "auth_password" => from("redis_auth"),
            "connections_per_host" => from("server_connections"),
            "hosts" => from("servers"),
            "outlier_detection" => {
                if field.ends_with("consecutive_5xx") {
                    from("server_failure_limit")
                } else {
                    from("server_retry_timeout")
                }
            }
            _ => (format!("(Respite's {field})"), p.line),
        }
    };
    format!("line {line}: pool \"{}\": {twem}: {message}", p.name)
}

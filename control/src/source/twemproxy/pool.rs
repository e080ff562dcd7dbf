//! One twemproxy pool → one `[[listeners]]` and one `[[clusters]]` table (rules: the module
//! docs of [`super`]). Keys, defaults and units: twemproxy 0.5.0 `src/nc_conf.c` /
//! `src/nc_conf.h` and `conf/nutcracker.yml`.

use respite::config::raw::{
    RawCluster, RawDuration, RawHost, RawHostTable, RawListener, RawOutlierDetection,
    RawPrefixRoutes, RawRoute, unspanned,
};
use respite::config::{ClusterType, KeyHash, LbPolicy};

use super::yaml::{Node, Value};

/// twemproxy's hash functions (`src/hashkit/nc_hashkit.h`, `HASH_CODEC`).
pub const HASHES: [&str; 12] = respite::config::KeyHash::NAMES;
/// twemproxy's distributions (`DIST_CODEC`); each is also a Respite `lb_policy`.
pub const DISTRIBUTIONS: [&str; 3] = ["ketama", "modula", "random"];

/// `CONF_DEFAULT_HASH`.
const DEFAULT_HASH: &str = "fnv1a_64";
/// `CONF_DEFAULT_DIST`.
const DEFAULT_DISTRIBUTION: &str = "ketama";
/// `CONF_DEFAULT_SERVER_RETRY_TIMEOUT`, milliseconds.
const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u64 = 30_000;
/// `CONF_DEFAULT_SERVER_FAILURE_LIMIT`.
const DEFAULT_SERVER_FAILURE_LIMIT: u64 = 2;
/// The `op_timeout` of a pool without `timeout` (or `timeout: 0`): twemproxy then waits for a
/// reply forever; Respite needs a bound, so the longest one that stays harmless — a day. A
/// server silent that long gets its requests answered with a timeout error and its connection
/// closed, where twemproxy would hold the client forever.
pub const NO_TIMEOUT: &str = "24h";
/// The outlier detection's review interval, at most: ejections end within this of
/// `server_retry_timeout` (twemproxy retries exactly at it).
const EJECTION_REVIEW_MS: u64 = 1000;

/// A translated pool: its two tables, notes about keys taken without effect, and the lines
/// that the data plane's errors are mapped back to.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The pool's name as written.
    pub name: String,
    /// The line of the pool's name.
    pub line: usize,
    /// The `[[listeners]]` entry.
    pub listener: RawListener,
    /// The `[[clusters]]` entry, hosts included.
    pub cluster: RawCluster,
    /// One line per key accepted without an equivalent (for the log and the TOML's header).
    pub notes: Vec<String>,
    /// twemproxy key → its line, for mapping the data plane's errors back.
    pub key_lines: Vec<(String, usize)>,
    /// The line of each `servers` item.
    pub server_lines: Vec<usize>,
}

/// A twemproxy key's name, its value node and the line of the key.
struct Entry<'a> {
    key: &'a str,
    line: usize,
    node: &'a Node,
}

impl Entry<'_> {
    fn err(&self, pool: &str, msg: impl std::fmt::Display) -> String {
        format!("line {}: pool \"{pool}\": {}: {msg}", self.line, self.key)
    }

    fn text(&self, pool: &str) -> Result<&str, String> {
        self.node
            .text()
            .ok_or_else(|| self.err(pool, "must be a single value, not a list or map"))
    }

    /// twemproxy's `conf_set_bool`: exactly `true` or `false`.
    fn bool(&self, pool: &str) -> Result<bool, String> {
        match self.text(pool)? {
            "true" => Ok(true),
            "false" => Ok(false),
            v => Err(self.err(pool, format!("\"{v}\" is not \"true\" or \"false\""))),
        }
    }

    /// twemproxy's `conf_set_num`: decimal digits only.
    fn num(&self, pool: &str) -> Result<u64, String> {
        let v = self.text(pool)?;
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.err(pool, format!("\"{v}\" is not a non-negative whole number")));
        }
        v.parse::<u64>()
            .map_err(|_| self.err(pool, format!("\"{v}\" is too large")))
    }
}

/// Translates one pool. `name`/`line`: the pool's key and its line; `node`: its map.
///
/// Errors: `line N: pool "name": key: reason` for a missing, malformed, unknown or refused key.
pub fn translate(name: &str, line: usize, node: &Node) -> Result<Pool, String> {
    let Value::Map(entries) = &node.value else {
        return Err(format!(
            "line {line}: pool \"{name}\": must be a map of twemproxy keys (listen, servers, ...)"
        ));
    };
    let entries: Vec<Entry<'_>> = entries
        .iter()
        .map(|(key, line, node)| Entry {
            key,
            line: *line,
            node,
        })
        .collect();
    let get = |k: &str| entries.iter().find(|e| e.key == k);
    let missing = |k: &str| format!("line {line}: pool \"{name}\": {k}: required by twemproxy");

    // Refusals that make every other key moot come first.
    match get("redis") {
        Some(e) if e.bool(name)? => {}
        Some(e) => return Err(e.err(name, "memcache pools are not supported by respite")),
        None => {
            return Err(format!(
                "line {line}: pool \"{name}\": redis: absent, so a memcache pool (twemproxy's \
                 default); memcache pools are not supported by respite"
            ));
        }
    }

    let stat_name = stat_name(name);
    let listen = get("listen").ok_or_else(|| missing("listen"))?;
    let address = listen_address(name, listen)?;
    let op_timeout = match get("timeout") {
        Some(e) => match e.num(name)? {
            0 => NO_TIMEOUT.to_string(),
            ms => format!("{ms}ms"),
        },
        None => NO_TIMEOUT.to_string(),
    };
    let mut listener = RawListener::new(name.to_string(), address, RawDuration::Text(op_timeout));
    listener.stat_prefix = Some(unspanned(stat_name.clone()));
    listener.prefix_routes = Some(unspanned(RawPrefixRoutes {
        catch_all_route: Some(unspanned(RawRoute::new(stat_name.clone()))),
        ..RawPrefixRoutes::default()
    }));
    let mut cluster = RawCluster::new(stat_name.clone(), ClusterType::Static);
    let mut pool = Pool {
        name: name.to_string(),
        line,
        listener: listener.clone(),
        cluster: cluster.clone(),
        notes: Vec::new(),
        key_lines: entries
            .iter()
            .map(|e| (e.key.to_string(), e.line))
            .collect(),
        server_lines: Vec::new(),
    };
    if stat_name != name {
        pool.notes.push(format!(
            "pool \"{name}\" (line {line}): cluster and stats prefix named \"{stat_name}\" \
             (characters other than ASCII letters, digits, '_', '-' and ':' become '_')"
        ));
    }

    let hash = match get("hash") {
        Some(e) => {
            let h = e.text(name)?;
            if !HASHES.contains(&h) {
                return Err(e.err(
                    name,
                    format!(
                        "\"{h}\" is not a twemproxy hash (one of {})",
                        HASHES.join(", ")
                    ),
                ));
            }
            h
        }
        None => DEFAULT_HASH,
    };
    cluster.hash = Some(unspanned(key_hash(hash).ok_or_else(|| {
        format!("line {line}: pool \"{name}\": hash: \"{hash}\" is not supported by respite")
    })?));
    let distribution = match get("distribution") {
        Some(e) => {
            let d = e.text(name)?;
            if !DISTRIBUTIONS.contains(&d) {
                return Err(e.err(
                    name,
                    format!(
                        "\"{d}\" is not a twemproxy distribution (one of {})",
                        DISTRIBUTIONS.join(", ")
                    ),
                ));
            }
            d
        }
        None => DEFAULT_DISTRIBUTION,
    };
    cluster.lb_policy = Some(unspanned(match distribution {
        "modula" => LbPolicy::Modula,
        "random" => LbPolicy::Random,
        _ => LbPolicy::Ketama,
    }));

    if let Some(e) = get("hash_tag") {
        let t = e.text(name)?;
        if t.chars().count() != 2 {
            return Err(e.err(
                name,
                format!("\"{t}\" must be two characters, e.g. \"{{}}\""),
            ));
        }
        listener.hash_tag = Some(unspanned(t.to_string()));
    }

    if let Some(e) = get("redis_auth") {
        let p = e.text(name)?;
        if p.is_empty() {
            return Err(e.err(name, "must not be empty"));
        }
        listener.downstream_auth_passwords = vec![unspanned(p.to_string())];
        cluster.auth_password = Some(unspanned(p.to_string()));
    }

    // twemproxy SELECTs redis_db on each server connection (nc_redis.c `redis_post_connect`);
    // the cluster's `db` does the same.
    if let Some(e) = get("redis_db") {
        let n = e.num(name)?;
        let db = u32::try_from(n).map_err(|_| e.err(name, format!("{n} is too large")))?;
        if db != 0 {
            cluster.db = Some(unspanned(db));
        }
    }

    if let Some(e) = get("server_connections") {
        let n = e.num(name)?;
        cluster.connections_per_host = Some(unspanned(usize::try_from(n).unwrap_or(usize::MAX)));
        pool.notes.push(format!(
            "pool \"{name}\": server_connections {n} (line {}): connections_per_host = {n}, which \
             Respite opens per worker thread (twemproxy: per process)",
            e.line
        ));
    }

    let eject = match get("auto_eject_hosts") {
        Some(e) => e.bool(name)?,
        None => false,
    };
    let retry_ms = match get("server_retry_timeout") {
        Some(e) => match e.num(name)? {
            0 => return Err(e.err(name, "must be greater than zero")),
            ms => ms,
        },
        None => DEFAULT_SERVER_RETRY_TIMEOUT_MS,
    };
    let failure_limit = match get("server_failure_limit") {
        Some(e) => match e.num(name)? {
            0 => return Err(e.err(name, "must be greater than zero")),
            n => n,
        },
        None => DEFAULT_SERVER_FAILURE_LIMIT,
    };
    if eject {
        let retry = RawDuration::Text(format!("{retry_ms}ms"));
        cluster.outlier_detection = Some(unspanned(RawOutlierDetection {
            consecutive_5xx: Some(unspanned(u32::try_from(failure_limit).unwrap_or(u32::MAX))),
            // twemproxy ejects for the same time every time, and any number of servers.
            base_ejection_time: Some(unspanned(retry.clone())),
            max_ejection_time: Some(unspanned(retry)),
            max_ejection_percent: Some(unspanned(100)),
            interval: Some(unspanned(RawDuration::Text(format!(
                "{}ms",
                retry_ms.min(EJECTION_REVIEW_MS)
            )))),
        }));
        cluster.on_unhealthy = Some(unspanned(respite::config::OnUnhealthy::Rehash));
    } else {
        cluster.on_unhealthy = Some(unspanned(respite::config::OnUnhealthy::FailFast));
        for k in ["server_retry_timeout", "server_failure_limit"] {
            if let Some(e) = get(k) {
                pool.notes.push(format!(
                    "pool \"{name}\": {k} (line {}) has no effect without auto_eject_hosts: true, \
                     in twemproxy as here",
                    e.line
                ));
            }
        }
    }

    if let Some(e) = get("preconnect")
        && e.bool(name)?
    {
        pool.notes.push(format!(
            "pool \"{name}\": preconnect (line {}): not applied; Respite opens upstream \
             connections when the config is applied or when first needed, and either way a \
             client sees the same replies (only the first request may wait for a connect)",
            e.line
        ));
    }
    if let Some(e) = get("backlog") {
        let n = e.num(name)?;
        pool.notes.push(format!(
            "pool \"{name}\": backlog {n} (line {}): not applied; Respite's listen backlog is \
             1024 (capped by net.core.somaxconn): it only bounds connections not yet accepted, \
             which Respite accepts at once",
            e.line
        ));
    }
    if let Some(e) = get("client_connections") {
        let n = e.num(name)?;
        if n != 0 {
            pool.notes.push(format!(
                "pool \"{name}\": client_connections {n} (line {}): not applied, as in \
                 twemproxy 0.5.0, which reads it but never enforces it (src/nc_proxy.c only \
                 counts clients)",
                e.line
            ));
        }
    }
    if let Some(e) = get("tcpkeepalive")
        && e.bool(name)?
    {
        pool.notes.push(format!(
            "pool \"{name}\": tcpkeepalive (line {}): not applied; it sets SO_KEEPALIVE on \
             client connections, which only makes a vanished client's connection be reclaimed \
             sooner, never changes a reply",
            e.line
        ));
    }
    if let Some(e) = get("reuseport")
        && e.bool(name)?
    {
        return Err(e.err(
            name,
            "SO_REUSEPORT listeners shared with other processes are not supported by respite",
        ));
    }

    let servers = get("servers").ok_or_else(|| missing("servers"))?;
    let (hosts, lines) = servers_of(name, servers)?;
    cluster.hosts = unspanned(hosts);
    pool.server_lines = lines;

    const KNOWN: [&str; 18] = [
        "listen",
        "hash",
        "hash_tag",
        "distribution",
        "timeout",
        "backlog",
        "client_connections",
        "redis",
        "tcpkeepalive",
        "reuseport",
        "redis_auth",
        "redis_db",
        "preconnect",
        "auto_eject_hosts",
        "server_connections",
        "server_retry_timeout",
        "server_failure_limit",
        "servers",
    ];
    if let Some(e) = entries.iter().find(|e| !KNOWN.contains(&e.key)) {
        return Err(e.err(
            name,
            "not a twemproxy 0.5.0 pool key; not supported by respite",
        ));
    }

    pool.listener = listener;
    pool.cluster = cluster;
    Ok(pool)
}

/// A twemproxy hash name → the data plane's [`KeyHash`] (same names, by its serde names).
fn key_hash(name: &str) -> Option<KeyHash> {
    use serde::Deserialize as _;
    use serde::de::value::{Error, StrDeserializer};
    KeyHash::deserialize(StrDeserializer::<Error>::new(name)).ok()
}

/// A pool name → a cluster name and stats prefix: every character other than ASCII letters,
/// digits, `_`, `-` and `:` (what the data plane allows in a stat name) becomes `_`.
pub fn stat_name(pool: &str) -> String {
    pool.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `listen: host:port` → `"host:port"`; a unix socket path is refused.
fn listen_address(pool: &str, e: &Entry<'_>) -> Result<String, String> {
    let v = e.text(pool)?;
    if v.starts_with('/') {
        return Err(e.err(
            pool,
            format!(
                "\"{v}\" is a unix socket; unix socket listeners are not supported by respite \
                 (its listeners are TCP only)"
            ),
        ));
    }
    if v.contains(char::is_whitespace) || !v.contains(':') {
        return Err(e.err(pool, format!("\"{v}\" is not host:port")));
    }
    Ok(v.to_string())
}

/// `servers:` items, each `host:port:weight` or `host:port:weight name` (twemproxy's
/// `conf_add_server`, read from the end) → hosts, with each item's line.
fn servers_of(
    pool: &str,
    e: &Entry<'_>,
) -> Result<(Vec<respite::config::raw::Spanned<RawHost>>, Vec<usize>), String> {
    let Value::Seq(items) = &e.node.value else {
        return Err(e.err(pool, "must be a list of \"host:port:weight [name]\""));
    };
    if items.is_empty() {
        return Err(e.err(pool, "must list at least one server"));
    }
    let mut hosts = Vec::new();
    let mut lines = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let bad = |msg: String| format!("line {}: pool \"{pool}\": servers[{i}]: {msg}", item.line);
        let Some(text) = item.text() else {
            return Err(bad("must be \"host:port:weight [name]\"".into()));
        };
        let (spec, name) = match text.rsplit_once(' ') {
            Some((s, n)) => (s, Some(n.trim())),
            None => (text, None),
        };
        if spec.starts_with('/') {
            return Err(bad(format!(
                "\"{text}\" is a unix socket; unix socket servers are not supported by respite"
            )));
        }
        let Some((address, weight)) = spec.rsplit_once(':') else {
            return Err(bad(format!(
                "\"{text}\" is not \"host:port:weight [name]\""
            )));
        };
        if !address.contains(':') {
            return Err(bad(format!(
                "\"{text}\" is not \"host:port:weight [name]\""
            )));
        }
        let weight: u32 = weight
            .parse()
            .map_err(|_| bad(format!("weight \"{weight}\" is not a whole number")))?;
        if let Some(n) = name
            && n.is_empty()
        {
            return Err(bad(format!("\"{text}\" has an empty name")));
        }
        hosts.push(unspanned(RawHost::Full(RawHostTable {
            address: unspanned(address.to_string()),
            weight: Some(unspanned(weight)),
            name: name.map(|n| unspanned(n.to_string())),
        })));
        lines.push(item.line);
    }
    Ok((hosts, lines))
}

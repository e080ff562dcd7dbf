//! Meaning checks and defaults: raw spanned values in, the validated model out.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use toml::Spanned;

use super::limits::{
    MAX_BUFFER_FLUSH_TIMEOUT, MAX_BUFFER_SIZE_BEFORE_FLUSH, MAX_CONNECTIONS_PER_HOST,
    MAX_LEASED_CONNECTIONS, MAX_REPLY_BYTES_IN_FLIGHT, MAX_STAT_NAME_LEN,
    MAX_UPSTREAM_UNKNOWN_CONNECTIONS, MAX_WORKERS, MIN_REPLY_BYTES_IN_FLIGHT,
};
use super::locate::Source;
use super::raw::{
    RawAccessLog, RawAdmin, RawCluster, RawConfig, RawDownstreamTls, RawDuration, RawHealthCheck,
    RawHost, RawHotKeys, RawListener, RawOutlierDetection, RawOutputBufferLimit, RawRuntime,
    RawTcpKeepalive, RawUpstreamTls,
};
use super::routes::ClusterRef;
use super::{
    AccessLogConfig, AdminConfig, ClusterConfig, ClusterType, Config, ConfigError,
    DEFAULT_MAXMEMORY_CLIENTS, HealthCheckConfig, HostConfig, HotKeysConfig, KeyHash, LbPolicy,
    ListenerConfig, LogFormat, OnUnhealthy, OutlierDetectionConfig, OutputBufferLimit,
    RedisClusterConfig, RuntimeConfig, TcpKeepalive,
};

const DEFAULT_ADMIN_ADDRESS: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9901,
));
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_BUFFER_FLUSH_TIMEOUT: Duration = Duration::from_millis(3);
/// Redis's `proto-max-bulk-len` default.
const DEFAULT_MAX_REQUEST_BYTES: usize = 512 * 1024 * 1024;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_MAX_UPSTREAM_UNKNOWN_CONNECTIONS: usize = 100;
const DEFAULT_CONNECTION_RATE_LIMIT_PER_SEC: u32 = 100;
const DEFAULT_MAX_PENDING_REQUESTS: usize = 16384;
const DEFAULT_MAX_LEASED_CONNECTIONS: usize = 32;
const DEFAULT_MAX_REPLY_BYTES_IN_FLIGHT: usize = 64 << 20;

type Result<T> = std::result::Result<T, ConfigError>;

/// Where a config comes from: a pushed one may have no listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    File,
    Pushed,
}

/// Validates `raw` into the model. With `fd_limit` (the hard `RLIMIT_NOFILE` the config will
/// run under), the whole config's file-descriptor need is checked against it too
/// ([`super::limits::check_fds`]).
pub(super) fn build(
    src: &Source<'_>,
    raw: RawConfig,
    origin: Origin,
    fd_limit: Option<u64>,
) -> Result<Config> {
    let admin = admin(src, raw.admin)?;
    let runtime = runtime(src, raw.runtime)?;
    let sockmap = super::sockmap::build(src, raw.sockmap)?;

    // Names first, so routes can be checked; cluster bodies after listeners so that errors come
    // out roughly in file order.
    let mut cluster_names: HashMap<String, ClusterRef> = HashMap::new();
    for (i, c) in raw.clusters.iter().enumerate() {
        let name = c.get_ref().name.get_ref();
        let known = ClusterRef::new(i, c.get_ref());
        if let Some(ClusterRef { index: first, .. }) = cluster_names.insert(name.clone(), known) {
            return Err(src.error(
                Some(c.get_ref().name.span()),
                &format!("clusters[{i}].name"),
                &format!("duplicate cluster name \"{name}\" (also clusters[{first}].name)"),
            ));
        }
    }

    if raw.listeners.is_empty() && origin == Origin::File {
        return Err(src.error(
            None,
            "listeners",
            "at least one [[listeners]] table is required",
        ));
    }
    let mut listeners = Vec::with_capacity(raw.listeners.len());
    let mut listener_names: HashMap<String, usize> = HashMap::new();
    let mut listener_addrs: HashMap<SocketAddr, usize> = HashMap::new();
    for (i, l) in raw.listeners.into_iter().enumerate() {
        let path = format!("listeners[{i}]");
        let name = l.get_ref().name.get_ref().clone();
        let name_span = l.get_ref().name.span();
        let addr_span = l.get_ref().address.span();
        let built = listener(src, &path, l, &cluster_names)?;
        if let Some(first) = listener_names.insert(name.clone(), i) {
            return Err(src.error(
                Some(name_span),
                &format!("{path}.name"),
                &format!("duplicate listener name \"{name}\" (also listeners[{first}].name)"),
            ));
        }
        // Port 0 asks the kernel for a free port, so two such listeners never collide.
        if built.address.port() != 0 {
            if !admin.control_socket_only && built.address == admin.address {
                return Err(src.error(
                    Some(addr_span),
                    &format!("{path}.address"),
                    &format!("address {} is already used by admin.address", built.address),
                ));
            }
            if let Some(first) = listener_addrs.insert(built.address, i) {
                return Err(src.error(
                    Some(addr_span),
                    &format!("{path}.address"),
                    &format!(
                        "duplicate listener address {} (also listeners[{first}].address)",
                        built.address
                    ),
                ));
            }
        }
        listeners.push(built);
    }

    let mut clusters = Vec::with_capacity(raw.clusters.len());
    for (i, c) in raw.clusters.into_iter().enumerate() {
        clusters.push(cluster(src, &format!("clusters[{i}]"), c.into_inner())?);
    }
    for l in &mut listeners {
        l.select_db = super::credentials::listener_db(l, &clusters);
    }

    let config = Config {
        admin,
        runtime,
        listeners,
        clusters,
        sockmap,
    };
    if let Some(limit) = fd_limit {
        let need = super::limits::fd_need(&config, config.runtime.workers);
        if let Err((key, message)) = super::limits::check_fds(&need, limit, "hard") {
            return Err(src.error(src.span_at(&key), &key, &message));
        }
    }
    Ok(config)
}

fn admin(src: &Source<'_>, raw: Option<RawAdmin>) -> Result<AdminConfig> {
    let raw = raw.unwrap_or_default();
    let only = raw
        .control_socket_only
        .as_ref()
        .is_some_and(|o| *o.get_ref());
    let address = match &raw.address {
        Some(a) if only => {
            return Err(src.error(
                Some(a.span()),
                "admin.address",
                "not used with admin.control_socket_only = true (the admin API then answers \
                 only on the control socket): remove one of the two",
            ));
        }
        Some(a) => socket_addr(src, "admin.address", a, true)?,
        None => DEFAULT_ADMIN_ADDRESS,
    };
    Ok(AdminConfig {
        address,
        control_socket_only: only,
    })
}

fn runtime(src: &Source<'_>, raw: Option<RawRuntime>) -> Result<RuntimeConfig> {
    let Some(raw) = raw else {
        return Ok(RuntimeConfig {
            workers: default_workers(),
            pin_workers: false,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            log_level: None,
            log_format: LogFormat::default(),
            maxmemory_clients: DEFAULT_MAXMEMORY_CLIENTS,
        });
    };
    let workers = match raw.workers {
        Some(w) if *w.get_ref() == 0 => {
            return Err(src.error(
                Some(w.span()),
                "runtime.workers",
                "must be at least 1 (omit it to use one worker per CPU)",
            ));
        }
        Some(w) if *w.get_ref() > MAX_WORKERS => {
            return Err(src.error(
                Some(w.span()),
                "runtime.workers",
                &format!(
                    "must be at most {MAX_WORKERS} (one thread and io_uring ring each; omit it \
                     to use one worker per CPU)"
                ),
            ));
        }
        Some(w) => w.into_inner(),
        None => default_workers(),
    };
    let drain_timeout = opt_duration(
        src,
        "runtime.drain_timeout",
        raw.drain_timeout,
        DEFAULT_DRAIN_TIMEOUT,
    )?;
    let log_level = match raw.log_level {
        Some(level) => {
            // Checked here so a typo fails the load instead of silently logging nothing.
            match super::log_filter(level.get_ref()) {
                Ok(normal) => Some(normal),
                Err(e) => {
                    return Err(src.error(
                        Some(level.span()),
                        "runtime.log_level",
                        &format!("invalid log filter \"{}\": {e}", level.get_ref()),
                    ));
                }
            }
        }
        None => None,
    };
    Ok(RuntimeConfig {
        workers,
        pin_workers: raw.pin_workers,
        drain_timeout,
        log_level,
        log_format: raw.log_format.map(Spanned::into_inner).unwrap_or_default(),
        maxmemory_clients: raw
            .maxmemory_clients
            .map_or(DEFAULT_MAXMEMORY_CLIENTS, Spanned::into_inner),
    })
}

/// One worker per CPU, within [`MAX_WORKERS`].
fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS)
}

fn listener(
    src: &Source<'_>,
    path: &str,
    raw: Spanned<RawListener>,
    clusters: &HashMap<String, ClusterRef>,
) -> Result<ListenerConfig> {
    let span = raw.span();
    let l = raw.into_inner();
    let stat_prefix = match l.stat_prefix {
        Some(p) => {
            // The name then reaches only logs and admin JSON: any printable text will do.
            printable(src, &format!("{path}.name"), &l.name)?;
            Some(stat_name(src, &format!("{path}.stat_prefix"), p)?)
        }
        None => {
            stat_name(src, &format!("{path}.name"), l.name.clone())?;
            None
        }
    };
    let name = non_empty(src, &format!("{path}.name"), l.name)?;
    let address = socket_addr(src, &format!("{path}.address"), &l.address, true)?;
    let op_timeout = positive(src, &format!("{path}.op_timeout"), &l.op_timeout)?;
    let buffer_flush_timeout = match &l.buffer_flush_timeout {
        Some(d) => {
            let key = format!("{path}.buffer_flush_timeout");
            let v = duration(src, &key, d)?;
            if v > MAX_BUFFER_FLUSH_TIMEOUT {
                return Err(src.error(
                    Some(d.span()),
                    &key,
                    &format!(
                        "must be at most {} (requests wait that long, their bytes buffered, \
                         before being written; Envoy's default is 3ms)",
                        humantime::format_duration(MAX_BUFFER_FLUSH_TIMEOUT)
                    ),
                ));
            }
            v
        }
        None => DEFAULT_BUFFER_FLUSH_TIMEOUT,
    };
    if l.max_buffer_size_before_flush > MAX_BUFFER_SIZE_BEFORE_FLUSH {
        // The file model keeps no span for this plain number: find it in the text.
        let key = format!("{path}.max_buffer_size_before_flush");
        return Err(src.error(
            src.span_at(&key),
            &key,
            &format!(
                "must be at most {MAX_BUFFER_SIZE_BEFORE_FLUSH} bytes (64 MiB; each upstream \
                 connection may buffer that much before writing)"
            ),
        ));
    }

    let mut downstream_auth_passwords = Vec::with_capacity(l.downstream_auth_passwords.len());
    for (i, p) in l.downstream_auth_passwords.into_iter().enumerate() {
        if p.get_ref().is_empty() {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.downstream_auth_passwords[{i}]"),
                "password must not be empty",
            ));
        }
        downstream_auth_passwords.push(p.into_inner());
    }
    let downstream_auth_username = match l.downstream_auth_username {
        Some(u) if downstream_auth_passwords.is_empty() => {
            return Err(src.error(
                Some(u.span()),
                &format!("{path}.downstream_auth_username"),
                "requires downstream_auth_passwords",
            ));
        }
        Some(u) => Some(non_empty(
            src,
            &format!("{path}.downstream_auth_username"),
            u,
        )?),
        None => None,
    };

    let mut custom_commands = Vec::with_capacity(l.custom_commands.len());
    for (i, c) in l.custom_commands.into_iter().enumerate() {
        let name = c.get_ref();
        let key = format!("{path}.custom_commands[{i}]");
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(src.error(Some(c.span()), &key, "a command name is one word"));
        }
        if crate::command::lookup(name.as_bytes()).is_some() {
            return Err(src.error(
                Some(c.span()),
                &key,
                &format!("\"{name}\" is a built-in command"),
            ));
        }
        custom_commands.push(c.into_inner().to_ascii_lowercase());
    }
    let max_request_bytes = match l.max_request_bytes {
        Some(m) if *m.get_ref() == 0 || *m.get_ref() > DEFAULT_MAX_REQUEST_BYTES => {
            return Err(src.error(
                Some(m.span()),
                &format!("{path}.max_request_bytes"),
                &format!(
                    "must be between 1 and {DEFAULT_MAX_REQUEST_BYTES} (Redis's proto-max-bulk-len)"
                ),
            ));
        }
        Some(m) => m.into_inner(),
        None => DEFAULT_MAX_REQUEST_BYTES,
    };

    let (prefix_routes, any_redis_cluster) =
        super::routes::prefix_routes(src, path, l.prefix_routes, span, clusters)?;
    let faults = super::routes::faults(src, path, l.faults)?;
    // Settings that only a Redis Cluster upstream uses would be silently ignored otherwise.
    if !any_redis_cluster {
        let cluster_only = [
            ("read_policy", l.read_policy.as_ref().map(|v| v.span())),
            (
                "max_upstream_unknown_connections",
                l.max_upstream_unknown_connections
                    .as_ref()
                    .map(|v| v.span()),
            ),
        ];
        if let Some((key, Some(span))) = cluster_only.into_iter().find(|(_, s)| s.is_some()) {
            return Err(src.error(
                Some(span),
                &format!("{path}.{key}"),
                "applies only to a listener routing to a type = \"redis_cluster\" cluster (none \
                 of its routes does)",
            ));
        }
    }

    let local_zone = super::zone::local_zone(
        src,
        path,
        l.read_policy.as_ref(),
        l.local_zone,
        &prefix_routes,
        clusters,
    )?;

    let dns_cache = match l.dns_cache {
        Some(d) => Some(super::dns::cache(
            src,
            &format!("{path}.dns_cache"),
            d.into_inner(),
        )?),
        None => None,
    };
    let hot_keys = match l.hot_keys {
        Some(h) => Some(hot_keys(src, &format!("{path}.hot_keys"), h.into_inner())?),
        None => None,
    };
    let client_output_buffer_limit_pubsub = output_buffer_limit(
        src,
        &format!("{path}.client_output_buffer_limit_pubsub"),
        l.client_output_buffer_limit_pubsub,
        OutputBufferLimit::PUBSUB,
    )?;
    let client_output_buffer_limit = output_buffer_limit(
        src,
        &format!("{path}.client_output_buffer_limit"),
        l.client_output_buffer_limit,
        OutputBufferLimit::NORMAL,
    )?;
    let access_log = match l.access_log {
        Some(a) => Some(access_log(
            src,
            &format!("{path}.access_log"),
            a.into_inner(),
        )?),
        None => None,
    };

    let tls = match l.tls {
        Some(t) => Some(downstream_tls(src, &format!("{path}.tls"), t)?),
        None => None,
    };

    let hash_tag = hash_tag(src, path, l.hash_tag, l.enable_hashtagging)?;

    let external_auth = match l.external_auth {
        Some(e) if !downstream_auth_passwords.is_empty() => {
            return Err(src.error(
                Some(e.span()),
                &format!("{path}.external_auth"),
                "cannot be combined with downstream_auth_passwords (AUTH is checked by one or \
                 the other)",
            ));
        }
        Some(e) => Some(super::external_auth::validate(
            src,
            &format!("{path}.external_auth"),
            e.into_inner(),
        )?),
        None => None,
    };

    Ok(ListenerConfig {
        select_db: Some(0),
        stat_prefix: stat_prefix.unwrap_or_else(|| name.clone()),
        name,
        address,
        op_timeout,
        hash_tag,
        max_buffer_size_before_flush: l.max_buffer_size_before_flush,
        buffer_flush_timeout,
        downstream_auth_passwords,
        downstream_auth_username,
        custom_commands,
        max_request_bytes,
        prefix_routes,
        faults,
        read_policy: l.read_policy.map(Spanned::into_inner).unwrap_or_default(),
        protocol_version: l.protocol_version.map(Spanned::into_inner),
        local_zone,
        max_upstream_unknown_connections: at_most(
            src,
            &format!("{path}.max_upstream_unknown_connections"),
            l.max_upstream_unknown_connections,
            0,
            MAX_UPSTREAM_UNKNOWN_CONNECTIONS,
            "connections per worker",
        )?
        .unwrap_or(DEFAULT_MAX_UPSTREAM_UNKNOWN_CONNECTIONS),
        latency_in_micros: l.latency_in_micros,
        enable_command_stats: l.enable_command_stats,
        hot_keys,
        dns_cache,
        big_value_bytes: l.big_value_bytes,
        access_log,
        client_output_buffer_limit_pubsub,
        client_output_buffer_limit,
        tls,
        external_auth,
    })
}

/// `[listeners.tls]`: the files are read and the server config built now.
fn downstream_tls(
    src: &Source<'_>,
    path: &str,
    raw: Spanned<RawDownstreamTls>,
) -> Result<super::DownstreamTls> {
    let t = raw.into_inner();
    let mut sni = Vec::with_capacity(t.sni.len());
    // Name → the entry that serves it: a name in two entries would leave one unreachable.
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, s) in t.sni.into_iter().enumerate() {
        let span = s.span();
        let s = s.into_inner();
        if s.server_names.is_empty() {
            return Err(src.error(
                Some(span),
                &format!("{path}.sni[{i}].server_names"),
                "empty: the entry would serve no client (list the names it is for)",
            ));
        }
        let mut server_names = Vec::with_capacity(s.server_names.len());
        for n in s.server_names {
            let name = n.get_ref().to_ascii_lowercase();
            let bare = name.strip_prefix("*.").unwrap_or(&name);
            if bare.is_empty() || bare.contains('*') || !name.is_ascii() {
                return Err(src.error(
                    Some(n.span()),
                    &format!("{path}.sni[{i}].server_names"),
                    "a DNS name, or *. followed by one (one leading wildcard label only)",
                ));
            }
            if let Some(first) = seen.insert(name.clone(), i) {
                return Err(src.error(
                    Some(n.span()),
                    &format!("{path}.sni[{i}].server_names"),
                    &format!(
                        "{name} is already served by sni[{first}] (names are matched \
                         case-insensitively; each name in one entry)"
                    ),
                ));
            }
            server_names.push(name);
        }
        sni.push(super::SniCertificate {
            server_names,
            certificate_chain: s.certificate_chain.into_inner().into(),
            private_key: s.private_key.into_inner().into(),
        });
    }
    super::tls::downstream(
        t.certificate_chain.into_inner().into(),
        t.private_key.into_inner().into(),
        t.trusted_ca.map(|c| c.into_inner().into()),
        t.require_client_certificate,
        sni,
    )
    .map_err(|e| tls_error(src, path, &e))
}

/// `[clusters.tls]`: the files (or the system's roots) are read and the client config built.
fn upstream_tls(
    src: &Source<'_>,
    path: &str,
    raw: Spanned<RawUpstreamTls>,
) -> Result<super::UpstreamTls> {
    let t = raw.into_inner();
    if let Some(sni) = &t.sni
        && rustls::pki_types::ServerName::try_from(sni.get_ref().as_str()).is_err()
    {
        return Err(src.error(
            Some(sni.span()),
            &format!("{path}.sni"),
            "not a DNS name or IP address",
        ));
    }
    let tls = super::tls::upstream(
        t.trusted_ca.map(|c| c.into_inner().into()),
        t.sni.map(Spanned::into_inner),
        t.certificate_chain.map(|c| c.into_inner().into()),
        t.private_key.map(|c| c.into_inner().into()),
        t.insecure_skip_verify,
    )
    .map_err(|e| tls_error(src, path, &e))?;
    Ok(tls)
}

/// A TLS file error, pointed at the key that names the file.
fn tls_error(src: &Source<'_>, path: &str, e: &super::tls::TlsError) -> ConfigError {
    let key = format!("{path}.{}", e.key);
    let span = src.span_at(&key).or_else(|| src.span_at(path));
    src.error(span, &key, &e.message)
}

/// `[listeners.client_output_buffer_limit_pubsub]`, `[listeners.client_output_buffer_limit]`:
/// absent keys keep the class's defaults `d`.
fn output_buffer_limit(
    src: &Source<'_>,
    path: &str,
    raw: Option<Spanned<RawOutputBufferLimit>>,
    d: OutputBufferLimit,
) -> Result<OutputBufferLimit> {
    let Some(raw) = raw.map(Spanned::into_inner) else {
        return Ok(d);
    };
    let soft_limit_for = match raw.soft_limit_for {
        Some(w) => duration(src, &format!("{path}.soft_limit_for"), &w)?,
        None => d.soft_limit_for,
    };
    Ok(OutputBufferLimit {
        hard_limit: raw.hard_limit.map_or(d.hard_limit, Spanned::into_inner),
        soft_limit: raw.soft_limit.map_or(d.soft_limit, Spanned::into_inner),
        soft_limit_for,
    })
}

/// `[listeners.hot_keys]`.
fn hot_keys(src: &Source<'_>, path: &str, h: RawHotKeys) -> Result<HotKeysConfig> {
    let d = HotKeysConfig::default();
    let top_k = match h.top_k {
        Some(k) if *k.get_ref() == 0 || *k.get_ref() > 1000 => {
            return Err(src.error(
                Some(k.span()),
                &format!("{path}.top_k"),
                "must be between 1 and 1000",
            ));
        }
        Some(k) => k.into_inner(),
        None => d.top_k,
    };
    let window = match h.window {
        Some(w) => {
            let v = duration(src, &format!("{path}.window"), &w)?;
            if v < Duration::from_secs(1) {
                return Err(src.error(
                    Some(w.span()),
                    &format!("{path}.window"),
                    "must be at least 1s",
                ));
            }
            v
        }
        None => d.window,
    };
    Ok(HotKeysConfig { top_k, window })
}

/// `[listeners.access_log]`.
fn access_log(src: &Source<'_>, path: &str, a: RawAccessLog) -> Result<AccessLogConfig> {
    if a.path.get_ref().is_empty() {
        return Err(src.error(
            Some(a.path.span()),
            &format!("{path}.path"),
            "must not be empty (a file path, or \"stderr\")",
        ));
    }
    let sample_rate = match a.sample_rate {
        Some(r) if !(*r.get_ref() > 0.0 && *r.get_ref() <= 1.0) => {
            return Err(src.error(
                Some(r.span()),
                &format!("{path}.sample_rate"),
                "must be greater than 0 and at most 1 (a fraction of requests)",
            ));
        }
        Some(r) => r.into_inner(),
        None => 1.0,
    };
    Ok(AccessLogConfig {
        path: a.path.into_inner(),
        sample_rate,
    })
}

fn cluster(src: &Source<'_>, path: &str, mut c: RawCluster) -> Result<ClusterConfig> {
    let redis_cluster = redis_cluster(src, path, &c)?;
    let mut dns = super::dns::settings(src, path, &c)?;
    let mut health_checks = Vec::with_capacity(c.health_checks.len());
    for (i, h) in std::mem::take(&mut c.health_checks).into_iter().enumerate() {
        health_checks.push(health_check(
            src,
            &format!("{path}.health_checks[{i}]"),
            h.into_inner(),
        )?);
    }
    let outlier_detection = match c.outlier_detection.take() {
        Some(o) => Some(outlier_detection(
            src,
            &format!("{path}.outlier_detection"),
            o.into_inner(),
        )?),
        None => None,
    };
    let on_unhealthy = match c.on_unhealthy.take() {
        Some(o)
            if c.cluster_type == ClusterType::RedisCluster
                && *o.get_ref() == OnUnhealthy::Rehash =>
        {
            return Err(src.error(
                Some(o.span()),
                &format!("{path}.on_unhealthy"),
                "\"rehash\" does not apply to type \"redis_cluster\": a slot's keys stay with its \
                 shard (reads use replicas per the listener's read_policy)",
            ));
        }
        Some(o) => o.into_inner(),
        None => OnUnhealthy::default(),
    };
    let max_pending_requests = match c.max_pending_requests.take() {
        Some(n) if *n.get_ref() == 0 => {
            return Err(src.error(
                Some(n.span()),
                &format!("{path}.max_pending_requests"),
                "must be at least 1",
            ));
        }
        Some(n) => n.into_inner(),
        None => DEFAULT_MAX_PENDING_REQUESTS,
    };
    let max_leased_connections = at_most(
        src,
        &format!("{path}.max_leased_connections"),
        c.max_leased_connections.take(),
        1,
        MAX_LEASED_CONNECTIONS,
        "connections per host and worker",
    )?
    .unwrap_or(DEFAULT_MAX_LEASED_CONNECTIONS);
    let max_reply_bytes_in_flight = at_most(
        src,
        &format!("{path}.max_reply_bytes_in_flight"),
        c.max_reply_bytes_in_flight.take(),
        MIN_REPLY_BYTES_IN_FLIGHT,
        MAX_REPLY_BYTES_IN_FLIGHT,
        "bytes per host and worker",
    )?
    .unwrap_or(DEFAULT_MAX_REPLY_BYTES_IN_FLIGHT);
    let tcp_keepalive = match c.tcp_keepalive.take() {
        Some(k) => tcp_keepalive(src, &format!("{path}.tcp_keepalive"), k.into_inner())?,
        None => TcpKeepalive::default(),
    };
    let tls = match c.tls.take() {
        Some(t) => Some(upstream_tls(src, &format!("{path}.tls"), t)?),
        None => None,
    };
    let connection_rate_limit_per_sec = c
        .connection_rate_limit_per_sec
        .take()
        .map_or(DEFAULT_CONNECTION_RATE_LIMIT_PER_SEC, Spanned::into_inner);
    let name = stat_name(src, &format!("{path}.name"), c.name)?;
    let connect_timeout = match &c.connect_timeout {
        Some(d) => positive(src, &format!("{path}.connect_timeout"), d)?,
        None => DEFAULT_CONNECT_TIMEOUT,
    };
    let connections_per_host = at_most(
        src,
        &format!("{path}.connections_per_host"),
        c.connections_per_host.take(),
        1,
        MAX_CONNECTIONS_PER_HOST,
        "connections per host and worker, each opened at once with its buffers",
    )?
    .unwrap_or(1);
    if let (Some(user), None) = (&c.auth_username, &c.auth_password) {
        return Err(src.error(
            Some(user.span()),
            &format!("{path}.auth_username"),
            "requires auth_password",
        ));
    }
    let credentials = super::credentials::validate(
        src,
        &format!("{path}.credentials"),
        c.credentials.take(),
        c.cluster_type,
    )?;
    let db = super::credentials::db(src, &format!("{path}.db"), c.db.take(), c.cluster_type)?;

    let hosts_span = c.hosts.span();
    let raw_hosts = c.hosts.into_inner();
    if raw_hosts.is_empty() && c.cluster_type != ClusterType::Eds {
        return Err(src.error(
            Some(hosts_span),
            &format!("{path}.hosts"),
            "a cluster needs at least one host",
        ));
    }
    if c.cluster_type == ClusterType::LogicalDns && raw_hosts.len() != 1 {
        return Err(src.error(
            Some(hosts_span),
            &format!("{path}.hosts"),
            "type \"logical_dns\" takes exactly one host (Envoy LOGICAL_DNS); use \"strict_dns\" \
             for several",
        ));
    }
    let mut hosts: Vec<HostConfig> = Vec::with_capacity(raw_hosts.len());
    let mut seen_addrs: HashMap<SocketAddr, usize> = HashMap::new();
    let mut seen_names: HashMap<String, usize> = HashMap::new();
    for (i, h) in raw_hosts.into_iter().enumerate() {
        let hpath = format!("{path}.hosts[{i}]");
        let host_span = h.span();
        let (apath, address_text, address_span, weight, hname) = match h.into_inner() {
            RawHost::Short(text) => (hpath.clone(), text, host_span, None, None),
            RawHost::Full(t) => {
                let span = t.address.span();
                let apath = format!("{hpath}.address");
                (apath, t.address.into_inner(), span, t.weight, t.name)
            }
        };
        if let Some(d) = dns.as_mut() {
            let (host, port) = super::dns::target_text(&address_text)
                .map_err(|m| src.error(Some(address_span.clone()), &apath, &m))?;
            if let Some(n) = hname {
                return Err(src.error(
                    Some(n.span()),
                    &format!("{hpath}.name"),
                    "not supported by respite on DNS clusters: a resolved host is placed by its \
                     address ip:port",
                ));
            }
            if d.targets.iter().any(|t| t.host == host && t.port == port) {
                return Err(src.error(
                    Some(address_span),
                    &apath,
                    &format!("duplicate host \"{address_text}\""),
                ));
            }
            let weight = host_weight(src, &hpath, weight)?;
            d.targets.push(super::DnsTarget { host, port, weight });
            continue;
        }
        let address = socket_addr(
            src,
            &apath,
            &Spanned::new(address_span.clone(), address_text.clone()),
            false,
        )?;
        // Two spellings of one endpoint would give it twice the share of keys and two pools.
        if let Some(first) = seen_addrs.insert(address, i) {
            return Err(src.error(
                Some(address_span),
                &apath,
                &format!("duplicate host {address} (also {path}.hosts[{first}])"),
            ));
        }
        let weight = host_weight(src, &hpath, weight)?;
        let name = match hname {
            Some(n) => {
                let span = n.span();
                let n = non_empty(src, &format!("{hpath}.name"), n)?;
                // Ketama hashes the name, so two equal names would put both hosts on the same
                // points of the ring.
                if let Some(first) = seen_names.insert(n.clone(), i) {
                    return Err(src.error(
                        Some(span),
                        &format!("{hpath}.name"),
                        &format!("duplicate host name \"{n}\" (also {path}.hosts[{first}].name)"),
                    ));
                }
                Some(n)
            }
            None => None,
        };
        hosts.push(HostConfig {
            address,
            address_text,
            weight,
            name,
        });
    }

    let lb_policy = match (&c.lb_policy, c.cluster_type) {
        (Some(p), ClusterType::RedisCluster) => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.lb_policy"),
                "does not apply to type \"redis_cluster\": keys are placed by hash slot",
            ));
        }
        (Some(p), _) => *p.get_ref(),
        (None, _) => LbPolicy::default(),
    };
    let hash = match (&c.hash, c.cluster_type, lb_policy) {
        (Some(h), ClusterType::RedisCluster, _) => {
            return Err(src.error(
                Some(h.span()),
                &format!("{path}.hash"),
                "does not apply to type \"redis_cluster\": keys are placed by hash slot \
                 (crc16 of the Redis Cluster spec)",
            ));
        }
        (
            Some(h),
            _,
            LbPolicy::RingHash | LbPolicy::Maglev | LbPolicy::RoundRobin | LbPolicy::LeastRequest,
        ) => {
            return Err(src.error(
                Some(h.span()),
                &format!("{path}.hash"),
                "applies to lb_policy \"ketama\", \"modula\" and \"random\" only: \
                 ring_hash and maglev hash keys with Envoy's murmur2, round_robin and \
                 least_request hash nothing",
            ));
        }
        (Some(h), _, _) => *h.get_ref(),
        (None, _, _) => KeyHash::default(),
    };

    let least_request = super::least_request::validate(
        src,
        &format!("{path}.least_request"),
        c.least_request.take(),
        lb_policy,
    )?;

    Ok(ClusterConfig {
        name,
        cluster_type: c.cluster_type,
        hosts,
        lb_policy,
        least_request,
        hash,
        connect_timeout,
        auth_username: c.auth_username.map(Spanned::into_inner),
        auth_password: c.auth_password.map(Spanned::into_inner),
        credentials,
        db,
        connections_per_host,
        redis_cluster,
        health_checks,
        outlier_detection,
        on_unhealthy,
        connection_rate_limit_per_sec,
        max_pending_requests,
        max_leased_connections,
        max_reply_bytes_in_flight,
        tcp_keepalive,
        tls,
        dns,
    })
}

/// One `[[clusters.health_checks]]` entry.
fn health_check(src: &Source<'_>, path: &str, h: RawHealthCheck) -> Result<HealthCheckConfig> {
    let dur = |key: &str, v: &Option<Spanned<RawDuration>>, default: Duration| match v {
        Some(v) => positive(src, &format!("{path}.{key}"), v),
        None => Ok(default),
    };
    let interval = dur("interval", &h.interval, Duration::from_secs(5))?;
    let interval_jitter = match &h.interval_jitter {
        Some(v) => duration(src, &format!("{path}.interval_jitter"), v)?,
        None => interval / 10,
    };
    let timeout = dur("timeout", &h.timeout, Duration::from_secs(1))?;
    let no_traffic_interval = dur(
        "no_traffic_interval",
        &h.no_traffic_interval,
        Duration::from_secs(60),
    )?;
    let unhealthy_threshold = at_least_one(
        src,
        &format!("{path}.unhealthy_threshold"),
        &h.unhealthy_threshold,
        3,
    )?;
    let healthy_threshold = at_least_one(
        src,
        &format!("{path}.healthy_threshold"),
        &h.healthy_threshold,
        2,
    )?;
    let key = match h.key {
        Some(k) => Some(non_empty(src, &format!("{path}.key"), k)?),
        None => None,
    };
    Ok(HealthCheckConfig {
        interval,
        interval_jitter,
        timeout,
        unhealthy_threshold,
        healthy_threshold,
        no_traffic_interval,
        key,
    })
}

/// `[clusters.outlier_detection]`.
fn outlier_detection(
    src: &Source<'_>,
    path: &str,
    o: RawOutlierDetection,
) -> Result<OutlierDetectionConfig> {
    let d = OutlierDetectionConfig::default();
    let dur = |key: &str, v: &Option<Spanned<RawDuration>>, default: Duration| match v {
        Some(v) => positive(src, &format!("{path}.{key}"), v),
        None => Ok(default),
    };
    let base_ejection_time = dur(
        "base_ejection_time",
        &o.base_ejection_time,
        d.base_ejection_time,
    )?;
    let max_ejection_time = dur(
        "max_ejection_time",
        &o.max_ejection_time,
        d.max_ejection_time,
    )?;
    if let Some(v) = &o.max_ejection_time
        && max_ejection_time < base_ejection_time
    {
        return Err(src.error(
            Some(v.span()),
            &format!("{path}.max_ejection_time"),
            "must not be less than base_ejection_time",
        ));
    }
    let max_ejection_percent = match o.max_ejection_percent {
        Some(p) if *p.get_ref() > 100 => {
            return Err(src.error(
                Some(p.span()),
                &format!("{path}.max_ejection_percent"),
                "must be between 0 and 100",
            ));
        }
        Some(p) => p.into_inner(),
        None => d.max_ejection_percent,
    };
    Ok(OutlierDetectionConfig {
        consecutive_5xx: at_least_one(
            src,
            &format!("{path}.consecutive_5xx"),
            &o.consecutive_5xx,
            d.consecutive_5xx,
        )?,
        base_ejection_time,
        max_ejection_time: max_ejection_time.max(base_ejection_time),
        max_ejection_percent,
        interval: dur("interval", &o.interval, d.interval)?,
    })
}

/// `[clusters.tcp_keepalive]`.
fn tcp_keepalive(src: &Source<'_>, path: &str, k: RawTcpKeepalive) -> Result<TcpKeepalive> {
    let d = TcpKeepalive::default();
    // The kernel takes whole seconds (TCP_KEEPIDLE, TCP_KEEPINTVL).
    let secs =
        |key: &str, v: &Option<Spanned<RawDuration>>, default: Duration| -> Result<Duration> {
            let Some(v) = v else { return Ok(default) };
            let d = positive(src, &format!("{path}.{key}"), v)?;
            if d.subsec_nanos() != 0 {
                return Err(src.error(
                    Some(v.span()),
                    &format!("{path}.{key}"),
                    "must be a whole number of seconds (the kernel's unit), e.g. \"30s\"",
                ));
            }
            // Linux's MAX_TCP_KEEPIDLE / MAX_TCP_KEEPINTVL: a larger value fails every connect.
            if d.as_secs() > 32767 {
                return Err(src.error(
                    Some(v.span()),
                    &format!("{path}.{key}"),
                    "must be at most 32767s (the kernel's limit)",
                ));
            }
            Ok(d)
        };
    Ok(TcpKeepalive {
        keepalive_time: secs("keepalive_time", &k.keepalive_time, d.keepalive_time)?,
        keepalive_interval: secs(
            "keepalive_interval",
            &k.keepalive_interval,
            d.keepalive_interval,
        )?,
        keepalive_probes: match &k.keepalive_probes {
            // Linux's MAX_TCP_KEEPCNT.
            Some(n) if *n.get_ref() > 127 => {
                return Err(src.error(
                    Some(n.span()),
                    &format!("{path}.keepalive_probes"),
                    "must be between 1 and 127 (the kernel's limit)",
                ));
            }
            _ => at_least_one(
                src,
                &format!("{path}.keepalive_probes"),
                &k.keepalive_probes,
                d.keepalive_probes,
            )?,
        },
    })
}

/// A count in `min..=max`: below `min` it is refused as before ("must be at least 1"); above
/// `max` the message says what one unit of it costs (`unit`).
fn at_most(
    src: &Source<'_>,
    path: &str,
    v: Option<Spanned<usize>>,
    min: usize,
    max: usize,
    unit: &str,
) -> Result<Option<usize>> {
    match v {
        Some(n) if *n.get_ref() < min => {
            Err(src.error(Some(n.span()), path, &format!("must be at least {min}")))
        }
        Some(n) if *n.get_ref() > max => Err(src.error(
            Some(n.span()),
            path,
            &format!(
                "{} is too many: must be between {min} and {max} ({unit})",
                n.get_ref()
            ),
        )),
        Some(n) => Ok(Some(n.into_inner())),
        None => Ok(None),
    }
}

fn at_least_one(
    src: &Source<'_>,
    path: &str,
    v: &Option<Spanned<u32>>,
    default: u32,
) -> Result<u32> {
    match v {
        Some(n) if *n.get_ref() == 0 => Err(src.error(Some(n.span()), path, "must be at least 1")),
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    }
}

/// The `RedisClusterConfig` keys of a cluster: allowed only with `type = "redis_cluster"`.
fn redis_cluster(src: &Source<'_>, path: &str, c: &RawCluster) -> Result<RedisClusterConfig> {
    let d = RedisClusterConfig::default();
    let durations = [
        ("cluster_refresh_rate", &c.cluster_refresh_rate),
        ("cluster_refresh_timeout", &c.cluster_refresh_timeout),
        ("redirect_refresh_interval", &c.redirect_refresh_interval),
    ];
    let counts = [
        ("redirect_refresh_threshold", &c.redirect_refresh_threshold),
        ("failure_refresh_threshold", &c.failure_refresh_threshold),
        (
            "host_degraded_refresh_threshold",
            &c.host_degraded_refresh_threshold,
        ),
    ];
    if c.cluster_type != ClusterType::RedisCluster {
        if let Some(z) = &c.zone_discovery {
            return Err(src.error(
                Some(z.span()),
                &format!("{path}.zone_discovery"),
                "applies only to type = \"redis_cluster\"",
            ));
        }
        let span = durations
            .iter()
            .find_map(|(k, v)| v.as_ref().map(|v| (*k, v.span())))
            .or_else(|| {
                counts
                    .iter()
                    .find_map(|(k, v)| v.as_ref().map(|v| (*k, v.span())))
            });
        if let Some((key, span)) = span {
            return Err(src.error(
                Some(span),
                &format!("{path}.{key}"),
                "applies only to type = \"redis_cluster\"",
            ));
        }
        return Ok(d);
    }
    let dur = |key: &str, v: &Option<Spanned<RawDuration>>, default: Duration| match v {
        Some(v) => positive(src, &format!("{path}.{key}"), v),
        None => Ok(default),
    };
    // 0 is Envoy's "no minimum gap" (`ClusterRefreshManagerImpl::onEvent` compares the time
    // since the last triggered refresh with it): every threshold crossing refreshes. Envoy's
    // own Redis Cluster integration test sets it.
    let gap = match &c.redirect_refresh_interval {
        Some(v) => duration(src, &format!("{path}.redirect_refresh_interval"), v)?,
        None => d.redirect_refresh_interval,
    };
    let count =
        |v: &Option<Spanned<u32>>, default: u32| v.as_ref().map_or(default, |v| *v.get_ref());
    Ok(RedisClusterConfig {
        cluster_refresh_rate: dur(
            "cluster_refresh_rate",
            &c.cluster_refresh_rate,
            d.cluster_refresh_rate,
        )?,
        cluster_refresh_timeout: dur(
            "cluster_refresh_timeout",
            &c.cluster_refresh_timeout,
            d.cluster_refresh_timeout,
        )?,
        redirect_refresh_interval: gap,
        redirect_refresh_threshold: count(
            &c.redirect_refresh_threshold,
            d.redirect_refresh_threshold,
        ),
        failure_refresh_threshold: count(&c.failure_refresh_threshold, d.failure_refresh_threshold),
        host_degraded_refresh_threshold: count(
            &c.host_degraded_refresh_threshold,
            d.host_degraded_refresh_threshold,
        ),
        zone_discovery: c.zone_discovery.as_ref().is_some_and(|z| *z.get_ref()),
    })
}

/// Whether `c` may appear in a name that reaches stats ([`stat_name`]).
pub(super) fn stat_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':')
}

/// A name that becomes one segment of dotted stat names (`redis.<stat_prefix>.…`,
/// `cluster.<name>.…`), and so reaches every stats output: `/stats` text (`name: value` lines),
/// JSON, Prometheus (label values) and `/clusters`. Only ASCII letters, digits, `_`, `-` and
/// `:` are taken, at most [`MAX_STAT_NAME_LEN`] bytes: a dot would be read as a segment
/// boundary (splitting it into the wrong Prometheus series and labels), a newline would start
/// a line of its own in the text outputs, and a space or quote would break the lines that
/// tools split. Envoy's own stat names keep to the same characters (it sanitizes the others);
/// here they are refused, so that what is configured is what is exported. Every config source
/// (TOML file, Envoy file, xDS) reaches this check: they all end in [`build`].
fn stat_name(src: &Source<'_>, path: &str, s: Spanned<String>) -> Result<String> {
    let name = s.get_ref();
    if name.trim().is_empty() {
        return Err(src.error(Some(s.span()), path, "must not be empty"));
    }
    if let Some(bad) = name.chars().find(|&c| !stat_name_char(c)) {
        let message = if bad == '.' {
            format!(
                "{name:?} contains a dot; it names stats (segments are separated by dots), use \
                 '_' or '-' instead"
            )
        } else {
            format!(
                "{name:?} contains {bad:?}, which is not allowed in a name that reaches stats: \
                 use only ASCII letters, digits, '_', '-' and ':'"
            )
        };
        return Err(src.error(Some(s.span()), path, &message));
    }
    if name.len() > MAX_STAT_NAME_LEN {
        return Err(src.error(
            Some(s.span()),
            path,
            &format!(
                "is {} bytes long, more than {MAX_STAT_NAME_LEN}: it is part of every stat \
                 name it scopes",
                name.len()
            ),
        ));
    }
    Ok(s.into_inner())
}

/// A name shown in logs and admin pages but not in stat names: no control characters (a
/// newline would forge a log line).
fn printable(src: &Source<'_>, path: &str, s: &Spanned<String>) -> Result<()> {
    match s.get_ref().chars().find(|c| c.is_control()) {
        Some(bad) => Err(src.error(
            Some(s.span()),
            path,
            &format!(
                "{:?} contains the control character {bad:?}; names are printable text",
                s.get_ref()
            ),
        )),
        None => Ok(()),
    }
}

fn non_empty(src: &Source<'_>, path: &str, s: Spanned<String>) -> Result<String> {
    if s.get_ref().trim().is_empty() {
        return Err(src.error(Some(s.span()), path, "must not be empty"));
    }
    Ok(s.into_inner())
}

/// Longest duration any key accepts. Deadlines are `now + duration`: an absurd value would
/// overflow `Instant` on the request path or in the health thread.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

pub(super) fn duration(src: &Source<'_>, path: &str, d: &Spanned<RawDuration>) -> Result<Duration> {
    match d.get_ref() {
        RawDuration::Text(t) => {
            let v = humantime::parse_duration(t).map_err(|e| {
                src.error(
                    Some(d.span()),
                    path,
                    &format!("invalid duration \"{t}\": {e}"),
                )
            })?;
            if v > MAX_DURATION {
                return Err(src.error(
                    Some(d.span()),
                    path,
                    &format!("invalid duration \"{t}\": at most 365 days"),
                ));
            }
            Ok(v)
        }
        RawDuration::Number(n) => Err(src.error(
            Some(d.span()),
            path,
            &format!(
                "invalid duration {n}: a unit is required, write a string such as \"{n}s\" or \"{n}ms\""
            ),
        )),
    }
}

fn opt_duration(
    src: &Source<'_>,
    path: &str,
    d: Option<Spanned<RawDuration>>,
    default: Duration,
) -> Result<Duration> {
    d.map_or(Ok(default), |d| duration(src, path, &d))
}

/// A timeout of zero would fail every request, so it is rejected rather than taken literally.
fn positive(src: &Source<'_>, path: &str, d: &Spanned<RawDuration>) -> Result<Duration> {
    let v = duration(src, path, d)?;
    if v.is_zero() {
        return Err(src.error(Some(d.span()), path, "must be greater than zero"));
    }
    Ok(v)
}

/// A host's `weight`: at least 1, 1 when absent.
fn host_weight(src: &Source<'_>, hpath: &str, weight: Option<Spanned<u32>>) -> Result<u32> {
    match weight {
        Some(w) if *w.get_ref() == 0 => Err(src.error(
            Some(w.span()),
            &format!("{hpath}.weight"),
            "must be at least 1",
        )),
        Some(w) => Ok(w.into_inner()),
        None => Ok(1),
    }
}

/// `host:port` → the first address it resolves to. `allow_port_zero` is for local listen
/// addresses, where 0 means "any free port".
fn socket_addr(
    src: &Source<'_>,
    path: &str,
    text: &Spanned<String>,
    allow_port_zero: bool,
) -> Result<SocketAddr> {
    let err = |msg: String| src.error(Some(text.span()), path, &msg);
    let t = text.get_ref().as_str();
    let addr = match t.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => {
            let Some((host, port)) = t.rsplit_once(':') else {
                return Err(err(format!(
                    "invalid address \"{t}\": expected host:port, e.g. \"127.0.0.1:6379\""
                )));
            };
            // getaddrinfo would take "::1:9901" as host "::1", but the same text with another
            // port split is ambiguous, so IPv6 must be bracketed as everywhere else.
            if host.contains(':') && !host.starts_with('[') {
                return Err(err(format!(
                    "invalid address \"{t}\": write IPv6 addresses in brackets, e.g. \"[::1]:6379\""
                )));
            }
            // The name is shown in `/clusters` and logs: only what a DNS name can hold.
            if let Some(bad) = host
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
            {
                return Err(err(format!(
                    "invalid address {t:?}: {bad:?} is not allowed in a hostname (letters, \
                     digits, '.', '-', '_')"
                )));
            }
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(err(format!(
                    "invalid address \"{t}\": expected host:port with a port in 0-65535"
                )));
            }
            // A hostname is resolved once, at load; a reload picks up DNS changes.
            match t.to_socket_addrs() {
                Ok(mut addrs) => match addrs.next() {
                    Some(a) => a,
                    None => {
                        return Err(err(format!(
                            "invalid address \"{t}\": resolved to no addresses"
                        )));
                    }
                },
                Err(e) => {
                    return Err(err(format!("invalid address \"{t}\": cannot resolve: {e}")));
                }
            }
        }
    };
    if addr.port() == 0 && !allow_port_zero {
        return Err(err(format!("invalid address \"{t}\": port 0")));
    }
    Ok(addr)
}

/// A listener's hash tag from `hash_tag` (exactly two bytes) and Envoy's `enable_hashtagging`
/// (`"{}"`); both set to different pairs is an error.
fn hash_tag(
    src: &Source<'_>,
    path: &str,
    tag: Option<Spanned<String>>,
    enable_hashtagging: bool,
) -> Result<Option<[u8; 2]>> {
    let from_envoy = enable_hashtagging.then_some(*b"{}");
    let Some(tag) = tag else {
        return Ok(from_envoy);
    };
    let span = tag.span();
    let key = format!("{path}.hash_tag");
    let Ok(pair) = <[u8; 2]>::try_from(tag.get_ref().as_bytes()) else {
        return Err(src.error(
            Some(span),
            &key,
            &format!(
                "must be exactly two characters (bytes), e.g. \"{{}}\"; got {} bytes",
                tag.get_ref().len()
            ),
        ));
    };
    if from_envoy.is_some_and(|e| e != pair) {
        return Err(src.error(
            Some(span),
            &key,
            &format!(
                "conflicts with enable_hashtagging = true, which means hash_tag = \"{{}}\"; \
                 set one of them (got \"{}\")",
                tag.get_ref()
            ),
        ));
    }
    Ok(Some(pair))
}

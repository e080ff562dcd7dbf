//! Bounds on values that multiply threads, connections and memory, the file-descriptor budget,
//! and the characters of names that reach stats.

use super::limits::{self, FdNeed};
use super::tests::assert_err;
use super::*;

/// Nine numbered lines, as in `tests.rs`: line 10 is the first one appended to the cluster.
const MINIMAL: &str = r#"[[listeners]]
name = "main"
address = "127.0.0.1:6380"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
hosts = ["127.0.0.1:7001"]
"#;

fn edit(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from:?} not in MINIMAL");
    MINIMAL.replacen(from, to, 1)
}

/// Parses with no fd-limit check, for configs that test one value alone.
fn parse_unlimited(text: &str) -> Config {
    match parse_with_fd_limit(text, "t.toml", None) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

fn fd_err(text: &str, limit: u64) -> String {
    match parse_with_fd_limit(text, "t.toml", Some(limit)) {
        Ok(_) => panic!("accepted under a limit of {limit}:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn workers_have_a_ceiling() {
    for n in ["1025", "100000000000"] {
        let e = parse(&format!("{MINIMAL}[runtime]\nworkers = {n}\n"), "t.toml")
            .expect_err("too many workers")
            .to_string();
        assert_eq!(
            e,
            "t.toml:11:11: runtime.workers: must be at most 1024 (one thread and io_uring ring \
             each; omit it to use one worker per CPU)"
        );
    }
    let c = parse_unlimited(&format!("{MINIMAL}[runtime]\nworkers = 1024\n"));
    assert_eq!(c.runtime.workers, 1024);
}

#[test]
fn connection_counts_have_a_ceiling() {
    for n in ["257", "20000", "1000000"] {
        assert_err(
            &format!("{MINIMAL}connections_per_host = {n}\n"),
            10,
            "clusters[0].connections_per_host",
            &format!("{n} is too many: must be between 1 and 256"),
        );
    }
    let c = parse_unlimited(&format!("{MINIMAL}connections_per_host = 256\n"));
    assert_eq!(c.clusters[0].connections_per_host, 256);

    assert_err(
        &format!("{MINIMAL}max_leased_connections = 1025\n"),
        10,
        "clusters[0].max_leased_connections",
        "1025 is too many: must be between 1 and 1024",
    );
    assert_err(
        &format!("{MINIMAL}max_leased_connections = 0\n"),
        10,
        "clusters[0].max_leased_connections",
        "must be at least 1",
    );
    let c = parse_unlimited(&format!("{MINIMAL}max_leased_connections = 1024\n"));
    assert_eq!(c.clusters[0].max_leased_connections, 1024);

    assert_err(
        &format!("{MINIMAL}max_reply_bytes_in_flight = 1073741825\n"),
        10,
        "clusters[0].max_reply_bytes_in_flight",
        "1073741825 is too many: must be between 65536 and 1073741824",
    );
    assert_err(
        &format!("{MINIMAL}max_reply_bytes_in_flight = 1000\n"),
        10,
        "clusters[0].max_reply_bytes_in_flight",
        "must be at least 65536",
    );
    assert_eq!(
        parse_unlimited(MINIMAL).clusters[0].max_reply_bytes_in_flight,
        64 << 20,
        "default"
    );

    let rc = format!("{MINIMAL}type = \"redis_cluster\"\n");
    let text = rc.replace(
        "op_timeout = \"1s\"",
        "op_timeout = \"1s\"\nmax_upstream_unknown_connections = 1025",
    );
    assert_err(
        &text,
        5,
        "listeners[0].max_upstream_unknown_connections",
        "1025 is too many: must be between 0 and 1024",
    );
    let text = rc.replace(
        "op_timeout = \"1s\"",
        "op_timeout = \"1s\"\nmax_upstream_unknown_connections = 1024",
    );
    assert_eq!(
        parse_unlimited(&text).listeners[0].max_upstream_unknown_connections,
        1024
    );
}

#[test]
fn buffering_has_a_ceiling() {
    // 64 MiB + 1: the plain number keeps no span in the file model; its line is found anyway.
    let text = edit(
        "op_timeout = \"1s\"",
        "op_timeout = \"1s\"\nmax_buffer_size_before_flush = 67108865",
    );
    assert_err(
        &text,
        5,
        "listeners[0].max_buffer_size_before_flush",
        "must be at most 67108864 bytes",
    );
    let text = edit(
        "op_timeout = \"1s\"",
        "op_timeout = \"1s\"\nmax_buffer_size_before_flush = 67108864\nbuffer_flush_timeout = \"1s\"",
    );
    let c = parse_unlimited(&text);
    assert_eq!(c.listeners[0].max_buffer_size_before_flush, 64 << 20);
    assert_eq!(c.listeners[0].buffer_flush_timeout, Duration::from_secs(1));

    let text = edit(
        "op_timeout = \"1s\"",
        "op_timeout = \"1s\"\nbuffer_flush_timeout = \"1001ms\"",
    );
    assert_err(
        &text,
        5,
        "listeners[0].buffer_flush_timeout",
        "must be at most 1s",
    );
}

/// MINIMAL on 2 workers: per worker 4 (ring, eventfd, spare) + 1 listener + 1 host × (1
/// connection × 2 protocols + 32 leased) + 1 subscriber = 40; the process 64.
#[test]
fn fd_need_counts_every_connection_the_config_can_open() {
    let c = parse_unlimited(&format!("{MINIMAL}[runtime]\nworkers = 2\n"));
    let need = limits::fd_need(&c, 2);
    assert_eq!(
        need,
        FdNeed {
            total: 2 * 40 + 64,
            workers: 2,
            largest: ("clusters[0].max_leased_connections".to_owned(), 64),
        }
    );
    // The worker count given wins over the file's (a reload runs on the running workers).
    assert_eq!(limits::fd_need(&c, 3).total, 3 * 40 + 64);

    // Three hosts, 8 connections each, a health check, a second listener on the same cluster
    // (its own pool at most) with an access log file.
    let text = format!(
        "{}connections_per_host = 8\n[[clusters.health_checks]]\n\
         [[listeners]]\nname = \"second\"\naddress = \"127.0.0.1:6381\"\nop_timeout = \"2s\"\n\
         [listeners.access_log]\npath = \"/tmp/x.log\"\n\
         [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n\
         [runtime]\nworkers = 2\n",
        edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]"#
        )
    );
    let c = parse_unlimited(&text);
    // Per worker: 4 + 2 listeners + 2 pools × 3 hosts × (8 × 2 + 32) + 3 subscribers = 297.
    // The process: 64 + 3 health-check connections + 1 access log.
    let need = limits::fd_need(&c, 2);
    assert_eq!(need.total, 2 * 297 + 64 + 3 + 1);
    assert_eq!(
        need.largest,
        (
            "clusters[0].max_leased_connections".to_owned(),
            2 * 2 * 3 * 32
        )
    );
}

#[test]
fn fd_budget_keeps_a_quarter_for_clients() {
    let text = format!("{MINIMAL}[runtime]\nworkers = 2\n");
    // Needs 144: limits of 192 and 191 allow exactly that (a quarter rounded down is kept),
    // 190 one less.
    assert_eq!(limits::fd_allowance(192), 144);
    assert_eq!(limits::fd_allowance(191), 144);
    assert_eq!(limits::fd_allowance(190), 143);
    parse_with_fd_limit(&text, "t.toml", Some(191)).expect("fits");
    let e = fd_err(&text, 190);
    // The largest part is the leases, whose key is not in the file: the cluster's table is
    // named instead (line 7).
    assert!(
        e.starts_with("t.toml:7:") && e.contains(": clusters[0].max_leased_connections: "),
        "{e}"
    );
    assert!(
        e.contains("the config can hold 144 file descriptors open on 2 worker(s)")
            && e.contains("the hard RLIMIT_NOFILE is 190"),
        "{e}"
    );
}

/// A hostile file that stays under every single bound still cannot outgrow the fd limit: 256
/// connections to 40 hosts on 64 workers.
#[test]
fn fd_budget_names_the_key_and_line() {
    let hosts: Vec<String> = (0..40)
        .map(|i| format!("\"127.0.0.1:{}\"", 7001 + i))
        .collect();
    let text = format!(
        "{}connections_per_host = 256\n[runtime]\nworkers = 64\n",
        edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            &format!("hosts = [{}]", hosts.join(", "))
        )
    );
    let e = fd_err(&text, 1_048_576);
    assert!(
        e.starts_with("t.toml:10:24: clusters[0].connections_per_host: the config can hold"),
        "{e}"
    );
    assert!(e.contains("1310720 of them for this key"), "{e}");
    assert!(e.contains("LimitNOFILE"), "{e}");
}

/// `parse` checks against this process's hard limit: what a loaded file is held to.
#[test]
fn parse_checks_the_process_hard_limit() {
    let Some((_, hard)) = limits::nofile() else {
        return;
    };
    let hosts: Vec<String> = (0..200)
        .map(|i| format!("\"127.0.0.1:{}\"", 7001 + i))
        .collect();
    let workers = 1024;
    let text = format!(
        "{}connections_per_host = 256\n[runtime]\nworkers = {workers}\n",
        edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            &format!("hosts = [{}]", hosts.join(", "))
        )
    );
    // 1024 workers × 200 hosts × 512 connections: past any hard limit a system sets.
    if hard >= 1024 * 200 * 512 {
        return;
    }
    let e = match parse(&text, "t.toml") {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("the hard RLIMIT_NOFILE is {hard}")),
        "{e}"
    );
}

/// Every name that reaches stats text: only ASCII letters, digits, `_`, `-` and `:`; the error
/// names the key, the line and the offending character.
#[test]
fn stat_names_take_only_safe_characters() {
    // A newline in stat_prefix would add a line to `/stats`.
    let text = edit(
        "op_timeout = \"1s\"",
        "stat_prefix = \"main\\nfake 1\"\nop_timeout = \"1s\"",
    );
    assert_err(
        &text,
        4,
        "listeners[0].stat_prefix",
        r#""main\nfake 1" contains '\n', which is not allowed in a name that reaches stats"#,
    );
    for (bad, shown) in [
        ("a b", "' '"),
        ("a\\\"b", "'\"'"),
        ("a{b}", "'{'"),
        ("a=b", "'='"),
        ("a,b", "','"),
        ("é", "'é'"),
        ("a\\tb", "'\\t'"),
    ] {
        // The listener's name is its stat prefix when it has none.
        assert_err(
            &edit("name = \"main\"", &format!("name = \"{bad}\"")),
            2,
            "listeners[0].name",
            &format!("contains {shown}, which is not allowed"),
        );
        let text = edit("name = \"cache\"", &format!("name = \"{bad}\""))
            .replace("cluster = \"cache\"", &format!("cluster = \"{bad}\""));
        assert_err(
            &text,
            8,
            "clusters[0].name",
            &format!("contains {shown}, which is not allowed"),
        );
    }
    let long = "a".repeat(256);
    assert_err(
        &edit("name = \"main\"", &format!("name = \"{long}\"")),
        2,
        "listeners[0].name",
        "is 256 bytes long, more than 255",
    );
    let ok = "Ab0_-:x".to_owned() + &"a".repeat(248);
    let text = edit("name = \"cache\"", &format!("name = \"{ok}\""))
        .replace("cluster = \"cache\"", &format!("cluster = \"{ok}\""))
        .replace("name = \"main\"", "name = \"edge-1:v2_x\"");
    let c = parse_unlimited(&text);
    assert_eq!(c.clusters[0].name, ok);
    assert_eq!(c.listeners[0].stat_prefix, "edge-1:v2_x");
}

/// With a `stat_prefix`, the listener's name is free text, but printable.
#[test]
fn listener_names_are_printable() {
    let text = edit(
        "name = \"main\"",
        "name = \"main v2.0\"\nstat_prefix = \"main\"",
    );
    assert_eq!(parse_unlimited(&text).listeners[0].name, "main v2.0");
    let text = edit(
        "name = \"main\"",
        "name = \"main\\rx\"\nstat_prefix = \"main\"",
    );
    assert_err(
        &text,
        2,
        "listeners[0].name",
        r#""main\rx" contains the control character '\r'"#,
    );
}

/// Pushed configs (respite-control: Envoy files and xDS) go through the same checks.
#[test]
fn pushed_configs_take_the_same_names_and_bounds() {
    let text = edit(
        "op_timeout = \"1s\"",
        "stat_prefix = \"main\\nfake 1\"\nop_timeout = \"1s\"",
    );
    let e = parse_pushed(&text, "push").expect_err("newline in stat_prefix");
    assert_eq!(e.key, "listeners[0].stat_prefix");
    assert_eq!(e.location.map(|l| l.0), Some(4));
    let e = parse_pushed(
        &format!("{MINIMAL}connections_per_host = 1000000\n"),
        "push",
    )
    .expect_err("too many connections");
    assert_eq!(e.key, "clusters[0].connections_per_host");
}

#[test]
fn hostnames_take_only_dns_characters() {
    assert_err(
        &edit(
            r#"hosts = ["127.0.0.1:7001"]"#,
            r#"hosts = ["redis\nfake:7001"]"#,
        ),
        9,
        "clusters[0].hosts[0]",
        r#"invalid address "redis\nfake:7001": '\n' is not allowed in a hostname"#,
    );
}

//! The command line: `respite check-config`, `respite --config` on bad files, `--version`.

use std::path::Path;
use std::process::{Command, Output};

use respite_tests::respite_bin;

/// A valid config; line numbers matter to the cases below.
const BASE: &str = r#"[admin]
address = "127.0.0.1:0"
[runtime]
workers = 1
[[listeners]]
name = "main"
address = "127.0.0.1:0"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
hosts = ["127.0.0.1:7001"]
"#;

const SECOND_LISTENER: &str = r#"[[listeners]]
name = "main"
address = "127.0.0.1:1"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
"#;

fn replace_line(text: &str, line: usize, with: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { with } else { l })
        .map(|l| format!("{l}\n"))
        .collect()
}

fn run(args: &[&str], file: &Path) -> Output {
    Command::new(respite_bin())
        .args(args)
        .arg(file)
        .output()
        .expect("run respite")
}

/// Each bad file: (what, text, dotted key, line).
fn cases() -> Vec<(&'static str, String, &'static str, usize)> {
    // Listener/cluster blocks copied after line 13 start at line 14.
    let dup_listener = format!("{BASE}{SECOND_LISTENER}");
    let dup_cluster =
        format!("{BASE}[[clusters]]\nname = \"cache\"\nhosts = [\"127.0.0.1:7002\"]\n");
    let mut no_timeout: Vec<&str> = BASE.lines().collect();
    no_timeout.remove(7);
    vec![
        (
            "unknown key",
            replace_line(BASE, 8, "op_timeout = \"1s\"\nbogus_key = 3"),
            "listeners[0].bogus_key",
            9,
        ),
        (
            "bad duration",
            replace_line(BASE, 8, "op_timeout = \"5\""),
            "listeners[0].op_timeout",
            8,
        ),
        (
            "dangling cluster name",
            replace_line(BASE, 10, "cluster = \"nope\""),
            "listeners[0].prefix_routes.catch_all_route.cluster",
            10,
        ),
        (
            "duplicate listener name",
            dup_listener,
            "listeners[1].name",
            15,
        ),
        (
            "duplicate cluster name",
            dup_cluster,
            "clusters[1].name",
            15,
        ),
        (
            "missing op_timeout",
            no_timeout.join("\n") + "\n",
            "listeners[0].op_timeout",
            5,
        ),
        (
            "connections_per_host past its ceiling",
            format!("{BASE}connections_per_host = 1000000\n"),
            "clusters[0].connections_per_host",
            14,
        ),
        (
            "workers past their ceiling",
            replace_line(BASE, 4, "workers = 100000000000"),
            "runtime.workers",
            4,
        ),
        (
            "a newline in stat_prefix",
            replace_line(
                BASE,
                8,
                "op_timeout = \"1s\"\nstat_prefix = \"main\\nfake 1\"",
            ),
            "listeners[0].stat_prefix",
            9,
        ),
    ]
}

/// (Test 6) Bad files: exit 2 and `file:line:col: key: message` on stderr, from both `check-config`
/// and `--config`.
#[test]
fn bad_config_files_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, BASE).unwrap();
    let out = run(&["check-config"], &good);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the base file must be valid: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    for (i, (what, text, key, line)) in cases().into_iter().enumerate() {
        let file = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&file, &text).unwrap();
        let at = format!("{}:{line}:", file.display());
        for args in [&["check-config"][..], &["--config"][..]] {
            let out = run(args, &file);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let ok = out.status.code() == Some(2)
                && stderr.contains(&at)
                && stderr.contains(&format!(": {key}: "));
            if !ok {
                failures.push(format!(
                    "{what} ({args:?}): want exit 2 and {at:?} and key {key:?}; got exit {:?}, \
                     stderr {stderr:?}\nfile:\n{text}",
                    out.status.code()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `check-config` holds a file to the hard RLIMIT_NOFILE it runs under (the limit respite can
/// raise its own to): 64 connections to each of 4 hosts on 2 workers need 2 × (4 + 1 + 4 ×
/// (64 × 2 + 32) + 4) + 64 = 1362 descriptors, more than three quarters of 1024.
#[test]
fn check_config_holds_the_file_to_the_fd_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fds.toml");
    let text = replace_line(
        BASE,
        13,
        "hosts = [\"127.0.0.1:7001\", \"127.0.0.1:7002\", \"127.0.0.1:7003\", \"127.0.0.1:7004\"]\n\
         connections_per_host = 64",
    )
    .replace("workers = 1", "workers = 2");
    std::fs::write(&file, &text).unwrap();
    let under = |nofile: &str| {
        Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg(respite_bin())
            .arg("check-config")
            .arg(&file)
            .output()
            .expect("run prlimit respite check-config")
    };
    let out = under("1024:1024");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let want = format!(
        "{}:14:24: clusters[0].connections_per_host: the config can hold 1362 file descriptors \
         open on 2 worker(s)",
        file.display()
    );
    assert!(
        stderr.contains(&want) && stderr.contains("the hard RLIMIT_NOFILE is 1024"),
        "stderr: {stderr}"
    );
    // Under the limit this test runs with, it passes.
    let (_, hard) = crate::common::nofile_limits(std::process::id());
    assert!(
        hard >= 1816,
        "the hard limit {hard} cannot hold the 1362 of this test"
    );
    let out = under(&format!("{hard}:{hard}"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (Test 6b) The shipped example passes check-config.
#[test]
fn example_config_passes_check() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/respite.toml");
    let out = run(&["check-config"], &example);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (Test 6c) `respite --version` prints the crate version.
#[test]
fn version_flag() {
    let out = Command::new(respite_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(text.trim(), format!("respite {version}"), "stdout {text:?}");
}

//! The top-level modules of `src/` import in one direction. [`ALLOWED`] lists, per module, the
//! top-level modules it may name; the test reads every source file and fails with the file and
//! line of each path that names another one (`crate::x`, `crate::{x, …}`, or `super::` chains
//! that climb to the crate root). Comments are skipped: a doc link is not an import.
//!
//! The same check by hand, e.g. for `upstream/`:
//! `grep -rn "crate::\(engine\|admin\|router\|command\|cluster\)" dataplane/src/upstream`.

use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module and the modules it may import, from the top of the request path down:
/// the session (`engine`) over the admin endpoint and dispatch (`router`), the command table,
/// placement and pools (`cluster`), sockets (`upstream`), framing (`resp`) and the runtime
/// (`net`). `stats` (counters, histograms, the clock) imports nothing. `config` validates
/// command names against the command table, so `command` sits below `config` and below every
/// module that reads the config; it uses only `resp` and `stats`.
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "engine",
        &[
            "admin", "router", "command", "cluster", "upstream", "resp", "net", "stats", "config",
        ],
    ),
    (
        "admin",
        &[
            "router", "command", "cluster", "upstream", "resp", "net", "stats", "config",
        ],
    ),
    (
        "router",
        &[
            "command", "cluster", "upstream", "resp", "net", "stats", "config",
        ],
    ),
    ("cluster", &["upstream", "resp", "net", "stats", "config"]),
    ("upstream", &["resp", "net", "stats", "config"]),
    ("net", &["stats", "config"]),
    ("config", &["command", "stats"]),
    ("command", &["resp", "stats"]),
    ("resp", &["stats"]),
    ("stats", &[]),
];

/// Files that are not inside a layer: the crate root and this test.
const OUTSIDE: &[&str] = &["lib.rs", "layers_test.rs"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn allowed(module: &str) -> Option<&'static [&'static str]> {
    ALLOWED.iter().find(|(m, _)| *m == module).map(|(_, a)| *a)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file relative to `src/`: `cluster/health/mod.rs` → `[cluster, health]`,
/// `upstream/conn.rs` → `[upstream, conn]`, `net.rs` → `[net]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first name of each item of a `{a::b, c, …}` group that starts `s` (after the `{`).
fn group_heads(s: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if c.is_whitespace() => {}
            _ if item_start && depth == 0 => {
                heads.push(ident_at(&s[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// The top-level modules named by the source `text` of the file at module path `path`, with
/// their 1-based line numbers. Multi-line `use crate::{…}` groups are read to their end.
fn imports_of(path: &[String], text: &str) -> Vec<(usize, String)> {
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect();
    let joined = code.join("\n");
    let line_of = |at: usize| joined[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut push = |at: usize, name: &str| {
        if allowed(name).is_some() {
            found.push((line_of(at), name.to_string()));
        }
    };
    let is_word_start = |at: usize| {
        joined[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
    };
    for (at, _) in joined.match_indices("crate::") {
        if !is_word_start(at) {
            continue;
        }
        let rest = &joined[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => group_heads(group).iter().for_each(|h| push(at, h)),
            None => push(at, ident_at(rest)),
        }
    }
    // `super::` climbing out of the file's top-level module reaches the crate root.
    for (at, _) in joined.match_indices("super::") {
        if !is_word_start(at) || joined[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &joined[at..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        if ups < path.len() {
            continue;
        }
        match rest.strip_prefix('{') {
            Some(group) => group_heads(group).iter().for_each(|h| push(at, h)),
            None => push(at, ident_at(rest)),
        }
    }
    found
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 50, "no sources under {}", root.display());
    let mut bad = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap_or(file);
        if OUTSIDE.iter().any(|o| rel == Path::new(o)) {
            continue;
        }
        let path = module_path(rel);
        let Some(module) = path.first() else { continue };
        let Some(may) = allowed(module) else {
            bad.push(format!(
                "{}: top-level module `{module}` has no row in ALLOWED",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(file).unwrap_or_default();
        for (line, name) in imports_of(&path, &text) {
            if name != *module && !may.contains(&name.as_str()) {
                bad.push(format!(
                    "{}:{line}: `{module}` imports `{name}`, which it may not",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layers:\n{}",
        bad.join("\n")
    );
}

/// `cluster/` decides and schedules; only `upstream/` moves bytes to Redis (test files,
/// which start their own servers, aside).
#[test]
fn cluster_opens_reads_and_writes_no_socket() {
    let root = src().join("cluster");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 10, "no sources under {}", root.display());
    let socket_io = [
        "net::connect(",
        "net::write_all(",
        "net::read_append(",
        "TcpStream::connect",
    ];
    let bad: Vec<String> = files
        .iter()
        .filter(|f| !f.to_string_lossy().contains("tests"))
        .flat_map(|f| {
            let text = fs::read_to_string(f).unwrap_or_default();
            socket_io
                .iter()
                .filter(|p| text.contains(*p))
                .map(|p| format!("{}: {p}", f.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "socket I/O in cluster/:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_allowed_table_has_no_cycle() {
    fn visit(m: &str, stack: &mut Vec<String>) {
        if stack.iter().any(|s| s == m) {
            panic!("cycle: {} -> {m}", stack.join(" -> "));
        }
        stack.push(m.to_string());
        for dep in allowed(m).unwrap_or(&[]) {
            assert!(
                allowed(dep).is_some(),
                "`{m}` may import `{dep}`, which has no row"
            );
            visit(dep, stack);
        }
        stack.pop();
    }
    for (m, _) in ALLOWED {
        visit(m, &mut Vec::new());
    }
}

/// The scanner finds what the test must catch, and nothing in comments.
#[test]
fn scanner_finds_paths_groups_and_climbs() {
    let path: Vec<String> = vec!["upstream".into(), "conn".into()];
    let text = "use crate::cluster::X;\n\
                use crate::{\n    engine::a,\n    stats::{b, c},\n};\n\
                // crate::router::Y\n\
                /// [`Z`]: crate::admin::Z\n\
                pub(crate) fn f() { super::super::command::lookup(); super::Limit; }\n\
                let s = my_crate::net::x;\n";
    let found = imports_of(&path, text);
    let want: Vec<(usize, String)> = [(1, "cluster"), (2, "engine"), (2, "stats"), (8, "command")]
        .iter()
        .map(|(l, n)| (*l, n.to_string()))
        .collect();
    assert_eq!(found, want);
}

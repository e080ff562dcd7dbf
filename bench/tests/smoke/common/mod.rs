//! What the comparison smoke tests need before they start.

use std::path::PathBuf;
use std::process::Command;

/// Checks that every program in `programs` runs (`PROGRAM --version`) and that the `respite`
/// binary sits next to `respite-bench`; returns the paths of `respite-bench` and `respite`.
/// Panics saying what to install or build when something is missing.
pub fn binaries(programs: &[&str]) -> (PathBuf, PathBuf) {
    for p in programs {
        assert!(
            Command::new(p).arg("--version").output().is_ok(),
            "`{p}` is not on PATH: install it (e.g. `apt-get install redis-server nutcracker`; \
             redis-server brings redis-cli) to run this test"
        );
    }
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_respite-bench"));
    let respite = bench.with_file_name("respite");
    assert!(
        respite.exists(),
        "{} is missing: build it first with `cargo build --release` (or run `cargo test --release \
         --workspace`, which builds every binary)",
        respite.display()
    );
    (bench, respite)
}

/// The contents of the one file in `dir` whose name ends with `suffix`.
pub fn only_file(dir: &std::path::Path, suffix: &str) -> String {
    let names: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the output directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(names.len(), 1, "files ending with {suffix}: {names:?}");
    std::fs::read_to_string(&names[0]).expect("read the report")
}

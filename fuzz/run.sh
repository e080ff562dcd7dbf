#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, through cargo-fuzz) of the request parser, the inline parser,
# the reply scanner and the command splitter: a soak, run by hand or on a schedule, not by the
# README's test command (which runs the same invariants as stable bounded loops).
#
#   fuzz/run.sh [seconds per target, default 60] [target...]
#
# Installs cargo-fuzz from crates.io if missing. RUSTC_BOOTSTRAP=1 lets stable Rust take its
# sanitizer flags. Each run works on a scratch copy of the seed corpus (fuzz/corpus stays small);
# a crash is written to fuzz/artifacts/<target>/ and fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_parser inline reply_scanner split_merge)
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  cp -r "fuzz/corpus/$t" "$work/$t"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "$work/$t" -- -max_total_time="$secs" -max_len=4096
done

#!/usr/bin/env bash
# The README's test command: installs what the tests need on a Debian machine, builds in release
# mode and runs every test of the workspace against real redis-server / nutcracker processes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v nutcracker >/dev/null || [ -x /usr/sbin/nutcracker ] || need+=(nutcracker)
command -v curl >/dev/null || need+=(curl)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v tclsh >/dev/null || need+=(tcl)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${need[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust 1.95+ (rustup)" >&2; exit 1; }

cargo build --release --workspace --bins
cargo test --release --workspace -- --test-threads "${TEST_THREADS:-2}"

#!/usr/bin/env bash
# The README's test command: installs what the tests need on a Debian machine, builds in release
# mode and runs every test of the workspace against real redis-server / nutcracker processes,
# including the eBPF sockmap tests (ebpf/tests, tests/tests/sockmap.rs: root + cgroup v2, else skipped),
# tests/tests/integration/cluster.rs (six-node Redis Cluster made with `redis-cli --cluster`, hence
# redis-tools) and the tcl suite through Respite over standalone servers and over that cluster.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v nutcracker >/dev/null || [ -x /usr/sbin/nutcracker ] || need+=(nutcracker)
command -v curl >/dev/null || need+=(curl)
# openssl: tests/tests/integration/tls_sessions.rs makes X.509 v1 certificates the way Redis's
# own test scripts do.
command -v openssl >/dev/null || need+=(openssl)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v tclsh >/dev/null || need+=(tcl)
# valkey-server: the Valkey 8 tests (its Redis Cluster reports each node's availability zone).
# Debian has it in bookworm-backports only: that suite is added below when it is missing.
command -v valkey-server >/dev/null || need+=(valkey-server valkey-tools)
# Tcl's tls package: the tcl suite over TLS (tests/tests/integration/tls_sessions.rs).
echo 'package require tls' | tclsh >/dev/null 2>&1 || need+=(tcl-tls)
# node + npm: tests/tests/integration/pubsub.rs runs ioredis subscribers (npm install ioredis).
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# nft: tests/tests/integration/reconnect.rs drops a backend's packets to check TCP keepalive (root only;
# the test is skipped, saying why, without root or nft).
command -v nft >/dev/null || [ "$(id -u)" -ne 0 ] || need+=(nftables)
# clang + libbpf headers: ebpf/build.rs compiles the sockmap programs; without them the build
# still succeeds and the sockmap tests skip, saying why (docs/ebpf.md).
command -v clang >/dev/null || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${need[*]}"
  backports=()
  if [[ " ${need[*]} " == *" valkey-server "* ]] && grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
    grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
      echo 'deb http://deb.debian.org/debian bookworm-backports main' |
      $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    backports=(-t bookworm-backports)
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${backports[@]}" "${need[@]}"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust 1.95+ (rustup)" >&2; exit 1; }

# The command table is generated from Redis's own COMMAND output: regenerating it must reproduce
# the checked-in files byte for byte (seconds; skipped, saying why, without redis-server 7.0.15).
dataplane/command-table/check.sh
# Lints are part of the tests: the data plane's no-panic rules (workspace [lints]) and formatting.
cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings
# Binaries and tests in one build: built apart, the tests' dev-dependencies change the features of
# shared crates and every crate from serde up to the data plane is compiled twice (~9 min more).
cargo build --release --workspace --bins --tests
# Every test binary, two at a time where they share nothing (deploy/run-tests.sh says which).
deploy/run-tests.sh

# Fuzz targets (fuzz/, not a workspace member): their stable bounded loops (FUZZ_SECS per target,
# default 5). The coverage-guided libFuzzer runs are a soak, outside the tests: fuzz/run.sh.
cargo test --release --manifest-path fuzz/Cargo.toml

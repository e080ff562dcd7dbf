#!/usr/bin/env bash
# Runs units of Redis's own tcl test suite (Debian's redis 7.0 source package) against an
# external server — a plain redis-server or Respite — and prints pass/fail counts per unit.
#
#   tests/redis-suite/run.sh <port> <unit>...        e.g. run.sh 6379 unit/type/string unit/type/incr
#
# Each unit runs in its own `./runtest` process (an exception in one unit does not end the
# others), in external + cluster-compatible mode:
#   --host 127.0.0.1 --port <port> --singledb --cluster-mode --ignore-encoding --ignore-digest
#   --tags -needs:debug -needs:repl -needs:save -needs:reset -needs:config-maxmemory
#          -needs:config-resetstat -needs:pfdebug -needs:latency -needs:local-process
#   -resp3
# (every `needs:` tag Redis 7.0.15's tests/ use, and `resp3`: list.tcl switches protocols with
# HELLO outside any test, where a failure ends the unit; tests named "... RESP3" in hash/zset
# still switch to RESP3 inside the test). --cluster-mode also skips `cluster:skip` tests
# and implies --singledb; external mode skips `external:skip` tests.
#
# Environment:
#   REDIS_SUITE_OUT   directory for per-unit result files <unit with / → _>.{ok,err,log}
#                     (test names one per line); default: a temp dir, printed at the end.
#   REDIS_SUITE_UNIT_TIMEOUT   wall-clock seconds per unit (default 400); on expiry the unit is
#                     killed and reported with `timeout=1` (counts are what finished); so is a
#                     unit ended by a test that ran past REDIS_SUITE_TEST_TIMEOUT.
#   REDIS_SUITE_TEST_TIMEOUT   runtest --timeout, seconds per test (default 90: the `slow`
#                     stress tests of list-2 and list-3 take 15-27 s on 2 busy cores, directly
#                     as through a proxy, one round trip per command).
#   REDIS_SUITE_BASEPORT  runtest --baseport: its test server listens on the first free port from
#                     baseport-32 (default: random in 20000..31999, below the kernel's ephemeral
#                     port range so client sockets never hold it, and parallel runs rarely collide).
#   REDIS_SRC         an extracted redis source tree to use instead of target/redis-src.
#   REDIS_SUITE_NO_SHIM=1  run the pristine suite (see "CONFIG shim" below).
#   REDIS_SUITE_TLS   a directory holding ca.crt, client.crt and client.key: the suite connects
#                     with TLS (runtest --tls, Tcl's tls package: Debian tcl-tls, installed if
#                     missing), trusting ca.crt and presenting client.crt. Needs the shim, which
#                     reads the directory from this variable (runtest's own is tests/tls).
#
# CONFIG shim (default): the suite changes server settings with `r config set/get` (mostly
# encoding thresholds, irrelevant with --ignore-encoding; also as start_server "overrides", where
# a refused CONFIG aborts the whole unit). A proxy cannot honour CONFIG for its backends (Respite
# refuses it, like Envoy and twemproxy), so by default a patched copy of the tree is used in
# which the `r` helper answers `config set` with OK and `config get` with an empty list without
# sending them. Use it for both the direct and the proxied run: tests that depend on a setting
# then fail (or pass) the same way against both.
#
# --durable keeps a unit running after a test throws (a refused command, a timeout): the test is
# counted as [err] and the next one runs.
#
# The source tree is fetched once with `apt-get source redis` into target/redis-src (deb-src is
# enabled in /etc/apt if needed, with sudo when not root); tclsh is installed (package tcl) if
# missing.
#
# Output, one line per unit:
#   UNIT unit/type/string ok=NN err=NN exception=NN timeout=0|1
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 <port> <unit>..." >&2; exit 2; }
port="$1"; shift

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
apt() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }

if ! command -v tclsh >/dev/null; then
  apt update -q >&2 && apt install -y -q tcl >&2
fi
tls=()
if [ -n "${REDIS_SUITE_TLS:-}" ]; then
  [ -z "${REDIS_SUITE_NO_SHIM:-}" ] || { echo "REDIS_SUITE_TLS needs the shim" >&2; exit 2; }
  for f in ca.crt client.crt client.key; do
    [ -f "$REDIS_SUITE_TLS/$f" ] || { echo "REDIS_SUITE_TLS: no $f in $REDIS_SUITE_TLS" >&2; exit 2; }
  done
  if ! echo 'package require tls' | tclsh >/dev/null 2>&1; then
    apt update -q >&2 && apt install -y -q tcl-tls >&2
  fi
  tls=(--tls)
fi

src="${REDIS_SRC:-}"
if [ -z "$src" ]; then
  cache="$root/target/redis-src"
  src="$(ls -d "$cache"/redis-*/ 2>/dev/null | head -n1 || true)"
  if [ -z "$src" ] || [ ! -x "$src/runtest" ]; then
    # Enable deb-src (Debian 12 deb822 sources or classic sources.list), then fetch.
    if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        $sudo sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources
      else
        grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
          | $sudo tee /etc/apt/sources.list.d/respite-deb-src.list >/dev/null
      fi
      apt update -q >&2
    fi
    command -v dpkg-source >/dev/null || apt install -y -q dpkg-dev >&2
    mkdir -p "$cache"
    (cd "$cache" && apt-get source redis >&2) || { echo "apt-get source redis failed" >&2; exit 1; }
    src="$(ls -d "$cache"/redis-*/ | head -n1)"
  fi
fi
src="${src%/}"

if [ -z "${REDIS_SUITE_NO_SHIM:-}" ]; then
  shim="$(dirname "$src")/shim-$(basename "$src")"
  # The marker names the shim's version: a tree patched by an older run.sh is made again.
  if [ ! -f "$shim/.respite-shim-2" ]; then
    rm -rf "$shim"
    cp -a "$src" "$shim"
    # In proc r: answer CONFIG SET/GET/RESETSTAT locally in external mode.
    awk '
      /^    \[srv \$level "client"\] \{\*\}\$args$/ && !done {
        print "    if {$::external && [string equal -nocase [lindex $args 0] config]} {"
        print "        switch -- [string tolower [lindex $args 1]] {"
        print "            set - resetstat { return OK }"
        print "            get { return {} }"
        print "        }"
        print "    }"
        done = 1
      }
      { print }
      END { if (!done) exit 1 }
    ' "$src/tests/test_helper.tcl" >"$shim/tests/test_helper.tcl" \
      || { echo "cannot patch test_helper.tcl for the CONFIG shim" >&2; exit 1; }
    # The TLS certificates' directory from REDIS_SUITE_TLS (runtest and its helpers hard-code
    # tests/tls, which would be one directory shared by every run of the tree).
    for f in "$shim"/tests/test_helper.tcl "$shim"/tests/helpers/*.tcl; do
      sed -i 's|^set ::tlsdir "tests/tls"$|set ::tlsdir [expr {[info exists ::env(REDIS_SUITE_TLS)] ? $::env(REDIS_SUITE_TLS) : "tests/tls"}]|' "$f"
    done
    grep -q 'env(REDIS_SUITE_TLS)' "$shim/tests/test_helper.tcl" \
      || { echo "cannot patch test_helper.tcl's tlsdir" >&2; exit 1; }
    touch "$shim/.respite-shim-2"
  fi
  src="$shim"
fi

out="${REDIS_SUITE_OUT:-$(mktemp -d /tmp/redis-suite.XXXXXX)}"
mkdir -p "$out"
unit_timeout="${REDIS_SUITE_UNIT_TIMEOUT:-400}"
test_timeout="${REDIS_SUITE_TEST_TIMEOUT:-90}"
baseport="${REDIS_SUITE_BASEPORT:-$((20000 + (RANDOM * 32768 + RANDOM) % 12000))}"

tags=(--tags -needs:debug --tags -needs:repl --tags -needs:save --tags -needs:reset
      --tags -needs:config-maxmemory --tags -needs:config-resetstat --tags -needs:pfdebug
      --tags -needs:latency --tags -needs:local-process --tags -resp3)

# Tests that hang under the shim: they turn keyspace notifications on with CONFIG SET, which
# the shim swallows, then wait for a notification that never comes until the per-test timeout,
# and a timed-out test ends its unit (the rest of unit/pubsub). After --skipfile, which
# replaces runtest's list.
hang=()
[ -n "${REDIS_SUITE_NO_SHIM:-}" ] || hang=(--skiptest "/^Keyspace notifications: ")

for unit in "$@"; do
  name="${unit//\//_}"
  log="$out/$name.log"
  # REDIS_SUITE_SKIP=<exceptions file>: skip this unit's listed tests instead of running them, so
  # a refused command cannot leave the test client in a state (e.g. RESP3 after a `hello 3`
  # whose matching `hello 2` never ran) that fails the tests after it.
  skip=()
  if [ -n "${REDIS_SUITE_SKIP:-}" ]; then
    skipfile="$out/$name.skip"
    awk -F ' [|] ' -v u="$unit" '$1 == u { print $2 }' "$REDIS_SUITE_SKIP" >"$skipfile"
    skip=(--skipfile "$skipfile")
  fi
  set +e
  # runtest forks its test client; run in its own process group so a timeout kills all of it.
  (cd "$src" && exec timeout -k 5 "$unit_timeout" setsid tclsh tests/test_helper.tcl \
      --host 127.0.0.1 --port "$port" --singledb --cluster-mode --ignore-encoding \
      --ignore-digest "${tls[@]}" "${tags[@]}" --timeout "$test_timeout" --clients 1 --durable --baseport "$baseport" \
      "${skip[@]}" "${hang[@]}" --single "$unit") >"$log" 2>&1 </dev/null
  rc=$?
  set -e
  timed_out=0
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then timed_out=1; fi
  # Drop the colour escapes runtest prints around "ok"/"err".
  sed -i 's/\x1b\[[0-9;]*m//g' "$log"
  # A test past --timeout ends the unit too, the tests after it never run.
  if grep -q '^\[TIMEOUT\]:' "$log"; then timed_out=1; fi
  # "[ok]: name (12 ms)" / "[err]: name in tests/unit/..." / "[exception]: ..."
  sed -n 's/^\[ok\]: \(.*\) ([0-9]* ms)$/\1/p' "$log" >"$out/$name.ok"
  sed -n 's/^\[err\]: \(.*\) in tests\/.*$/\1/p; s/^\[err\]: \(.*\)$/\1/p' "$log" | sort -u >"$out/$name.err"
  ok=$(wc -l <"$out/$name.ok")
  err=$(wc -l <"$out/$name.err")
  exc=$(grep -c '^\[exception\]:' "$log" || true)
  echo "UNIT $unit ok=$ok err=$err exception=$exc timeout=$timed_out"
done
echo "results in $out" >&2

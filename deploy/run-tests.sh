#!/usr/bin/env bash
# Runs every test binary of the workspace, built once (each module of the two many-module
# binaries, tests/tests/integration and bench/tests/smoke, as a process of its own): most of them
# two at a time (TEST_JOBS), the ones that touch state of the whole machine (eBPF programs and
# cgroups, nftables rules) or measure time and allocations one at a time after them. Test ports are claimed across processes
# (respite_tests::free_port), so binaries running together never share one. Each binary's output
# is printed when it ends; the first failure fails the run (the others still finish).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${TEST_JOBS:-2}"
threads="${TEST_THREADS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo test --release --workspace --no-run --message-format=json-render-diagnostics \
  >"$work/build.json"
# One line per test binary: <package dir> <executable> <name> <filter> ("-": all its tests).
python3 - "$work/build.json" >"$work/all" <<'EOF'
import json, os, sys
seen = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m.get("profile", {}).get("test"):
        continue
    exe = m["executable"]
    if exe in seen:
        continue
    seen.add(exe)
    pkg = os.path.dirname(m["manifest_path"])
    name = m["target"]["name"] + ("" if m["target"]["kind"] != ["lib"] else " (unit)")
    print(pkg, exe, name.replace(" ", "_"), "-", sep="\t")
EOF

# The integration and smoke binaries (one binary of many modules each, so one link) become one
# line per module, filtered by `<module>::`, a filter that must match only that module's tests
# (libtest filters match anywhere in a test's name).
python3 - "$work/all" >"$work/expanded" <<'EOF'
import subprocess, sys
for line in open(sys.argv[1]):
    pkg, exe, name, _ = line.rstrip("\n").split("\t")
    if name not in ("integration", "smoke"):
        print(line, end="")
        continue
    listed = subprocess.run([exe, "--list", "--format", "terse"], capture_output=True,
                            text=True, check=True).stdout
    tests = [l.rsplit(": ", 1)[0] for l in listed.splitlines() if l.endswith(": test")]
    modules = sorted({t.split("::", 1)[0] for t in tests})
    for m in modules:
        mine = [t for t in tests if t.startswith(m + "::")]
        # A module whose name ends with this one's (`external_auth` for `auth`) is skipped by
        # name; libtest's --skip matches substrings too, so check it spares this module's tests.
        others = sorted({o for o in modules if o != m and (m + "::") in (o + "::")})
        skips = [o + "::" for o in others]
        matched = [t for t in tests if (m + "::") in t and not any(s in t for s in skips)]
        if mine != matched:
            sys.exit(f"filter {m}:: (skipping {skips}) selects {sorted(set(matched) ^ set(mine))}")
        print(pkg, exe, m, " ".join([m + "::"] + [f"--skip {s}" for s in skips]), sep="\t")
EOF
mv "$work/expanded" "$work/all"
# Alone, after the others: machine-wide state, or timing and allocation figures.
alone='^(sockmap|sockmap_compare|kernel|reconnect|latency|alloc|restart|respite_ebpf.*)$'
# Longest first, so the two lanes end together.
first='^(cluster|redis_suite|hostile|chaos|health|migration|mirror|xds_e2e|xds_transport)$'
awk -F'\t' -v a="$alone" '$3 !~ a' "$work/all" >"$work/rest"
awk -F'\t' -v f="$first" '$3 ~ f' "$work/rest" >"$work/together"
awk -F'\t' -v f="$first" '$3 !~ f' "$work/rest" >>"$work/together"
awk -F'\t' -v a="$alone" '$3 ~ a' "$work/all" >"$work/alone"

run_one() {
  local pkg="$1" exe="$2" name="$3" filter="$4" log
  log="$(mktemp)"
  local start=$SECONDS
  local args=(--test-threads "$threads")
  local filters
  # The filter field is the module's filter followed by `--skip` pairs, words without spaces.
  [ "$filter" = "-" ] || { read -ra filters <<<"$filter"; args+=("${filters[@]}"); }
  if (cd "$pkg" && CARGO_MANIFEST_DIR="$pkg" "$exe" "${args[@]}") >"$log" 2>&1; then
    echo "== $name: ok ($((SECONDS - start)) s)"
    grep -E '^test result' "$log" || true
    rm -f "$log"
  else
    echo "== $name: FAILED ($((SECONDS - start)) s)"
    cat "$log"
    rm -f "$log"
    return 1
  fi
}
export -f run_one
export threads

status=0
tr '\t' '\n' <"$work/together" | xargs -d '\n' -n 4 -P "$jobs" bash -c 'run_one "$@"' _ || status=1
tr '\t' '\n' <"$work/alone" | xargs -d '\n' -n 4 -P 1 bash -c 'run_one "$@"' _ || status=1
# Doc tests are not in the binaries above, and the workspace has none (its doc comments hold
# text and JSON examples only); `cargo test --doc` would rebuild every library to find that.
exit $status

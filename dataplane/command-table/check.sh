#!/usr/bin/env bash
# Checks that the checked-in command table is what gen_table.py writes: regenerates it from a
# fresh redis-server into a temporary directory and compares the three files byte for byte.
# Takes about two seconds. Exit 0 when they match, 1 (with a diff) when not. Skipped (exit 0,
# saying why) without redis-server 7.0.15, whose table this is.
#
#   dataplane/command-table/check.sh [--redis-server PATH]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/../src/command"
redis_server=redis-server
if [ "${1:-}" = "--redis-server" ]; then redis_server="${2:?--redis-server PATH}"; fi

if ! command -v "$redis_server" >/dev/null; then
  echo "command-table check skipped: $redis_server not found"
  exit 0
fi
version="$("$redis_server" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
if [ "$version" != "7.0.15" ]; then
  echo "command-table check skipped: $redis_server is $version, the table is Redis 7.0.15's"
  exit 0
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
python3 "$here/gen_table.py" --redis-server "$redis_server" --out "$out" >/dev/null
status=0
for f in table.rs table_raw.rs redis70.rs; do
  if ! cmp -s "$out/$f" "$src/$f"; then
    echo "dataplane/src/command/$f differs from what gen_table.py writes:"
    diff -u "$src/$f" "$out/$f" | head -40 | cut -c1-200
    status=1
  fi
done
if [ "$status" -eq 0 ]; then
  echo "command table: regenerated from redis-server $version, identical"
else
  echo "regenerate with: python3 dataplane/command-table/gen_table.py"
fi
exit "$status"

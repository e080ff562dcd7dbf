#!/usr/bin/env bash
# Side-by-side benchmark on this machine: Redis direct vs twemproxy vs Respite over the same two
# redis-servers, GET and SET at pipeline 1 and 16, interleaved, with CPU µs/request per process.
# Usage: bench/compare.sh [requests-per-case] [repetitions]
# Prints one respite-bench report per case; pass JSON=1 to get --json reports.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
n="${1:-300000}"
reps="${2:-2}"
bin="$root/target/release"
dir="$(mktemp -d /tmp/respite-compare.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not ready" >&2; exit 1; }

r1=$(free_port); r2=$(free_port); rp=$(free_port); ra=$(free_port); tw=$(free_port); tws=$(free_port)
for p in $r1 $r2; do
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --logfile "$dir/redis-$p.log" &
  pids+=($!)
done
wait_port "$r1"; wait_port "$r2"
cat > "$dir/respite.toml" <<TOML
[admin]
address = "127.0.0.1:$ra"
[runtime]
workers = ${WORKERS:-1}
[[listeners]]
name = "bench"
address = "127.0.0.1:$rp"
stat_prefix = "bench"
op_timeout = "5s"
[listeners.prefix_routes.catch_all_route]
cluster = "backends"
[[clusters]]
name = "backends"
type = "static"
hosts = ["127.0.0.1:$r1", "127.0.0.1:$r2"]
TOML
"$bin/respite" --config "$dir/respite.toml" >"$dir/respite.log" 2>&1 &
rpid=$!; pids+=($rpid)
cat > "$dir/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$tw
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:$r1:1
   - 127.0.0.1:$r2:1
YML
nutcracker -c "$dir/nutcracker.yml" -s "$tws" -a 127.0.0.1 -o "$dir/nutcracker.log" &
tpid=$!; pids+=($tpid)
wait_port "$rp"; wait_port "$tw"

rpids=$(pgrep -f "redis-server 127.0.0.1:$r1"),$(pgrep -f "redis-server 127.0.0.1:$r2")
IFS=, read -r rpid1 rpid2 <<<"$rpids"
"$bin/respite-bench" --port "$r1" --prefill -r 100000 -n 1 >/dev/null
"$bin/respite-bench" --port "$r2" --prefill -r 100000 -n 1 >/dev/null
json=(); [ "${JSON:-0}" = 1 ] && json=(--json)
for rep in $(seq "$reps"); do
  for mix in get set; do
    for p in 1 16; do
      for target in direct twemproxy respite; do
        case $target in
          direct) port=$r1; extra=(--pid "redis=$rpid1") ;;
          twemproxy) port=$tw; extra=(--pid "nutcracker=$tpid" --pid "redis1=$rpid1" --pid "redis2=$rpid2") ;;
          respite) port=$rp; extra=(--pid "respite=$rpid" --pid "redis1=$rpid1" --pid "redis2=$rpid2") ;;
        esac
        echo "### rep=$rep mix=$mix P=$p target=$target"
        "$bin/respite-bench" --port "$port" -c 50 -P "$p" --mix "$mix" -r 100000 -n "$n" "${extra[@]}" "${json[@]}"
      done
    done
  done
done

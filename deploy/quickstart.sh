#!/usr/bin/env bash
# Respite quickstart: build Respite, start three throwaway redis-servers and a Respite proxy in
# front of them (one ketama cluster), run a short smoke load, and leave everything running.
#
#   deploy/quickstart.sh            # start (default); prints where to connect
#   deploy/quickstart.sh --no-keep  # same, then stop everything (CI); or QUICKSTART_KEEP=0
#   deploy/quickstart.sh status     # show what a previous run left running
#   deploy/quickstart.sh stop       # stop what a previous run left running
#
# Works on a fresh Debian/Ubuntu machine: installs redis-server/redis-tools (and a C linker for
# cargo) with apt-get if missing, using sudo when not root. Rust (cargo) must be installed.
#
# Development knobs: QUICKSTART_SKIP_BUILD=1, RESPITE_BIN=..., RESPITE_BENCH_BIN=...,
# QUICKSTART_STATE_DIR (default /tmp/respite-quickstart).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
STATE_DIR=${QUICKSTART_STATE_DIR:-/tmp/respite-quickstart}
STATE_FILE=$STATE_DIR/state
KEEP=${QUICKSTART_KEEP:-1}
SKIP_BUILD=${QUICKSTART_SKIP_BUILD:-0}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
RESPITE_BIN=${RESPITE_BIN:-$TARGET_DIR/release/respite}
BENCH_BIN=${RESPITE_BENCH_BIN:-$TARGET_DIR/release/respite-bench}

if [[ -t 1 ]]; then
    BOLD=$'\033[1m' RED=$'\033[31m' RESET=$'\033[0m'
else
    BOLD='' RED='' RESET=''
fi

log() { printf '%s==> %s%s\n' "$BOLD" "$*" "$RESET"; }
warn() { printf '%swarning:%s %s\n' "$RED" "$RESET" "$*" >&2; }
die() {
    printf '%serror:%s %s\n' "$RED" "$RESET" "$*" >&2
    exit 1
}

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------------------------------------
# Process bookkeeping: the state file has one "KIND NAME PID" line per process we started,
# plus "dir PATH" for the working directory.

state_add() { printf '%s\n' "$*" >>"$STATE_FILE"; }

# Is PID alive and still the program we started (guards against a recycled pid)?
pid_is() {
    local pid=$1 prog=$2
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$prog"
}

# Sends SIGTERM to every recorded process (respite first, so it can drain), waits, then SIGKILL.
stop_all() {
    [[ -f $STATE_FILE ]] || {
        echo "nothing to stop (no $STATE_FILE)"
        return 0
    }
    local kind name pid prog order
    for order in respite redis; do
        while read -r kind name pid; do
            [[ $kind == "$order" ]] || continue
            prog=respite
            [[ $kind == redis ]] && prog=redis-server
            if pid_is "$pid" "$prog"; then
                echo "stopping $kind $name (pid $pid)"
                kill -TERM "$pid" 2>/dev/null || true
                # respite drains in-flight requests for up to runtime.drain_timeout (10s).
                local i
                for ((i = 0; i < 150; i++)); do
                    pid_is "$pid" "$prog" || break
                    sleep 0.1
                done
                if pid_is "$pid" "$prog"; then
                    warn "$kind $name (pid $pid) did not exit after 15s; sending SIGKILL"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            fi
        done <"$STATE_FILE"
    done
    local dir
    dir=$(awk '$1 == "dir" { print $2 }' "$STATE_FILE")
    rm -f "$STATE_FILE"
    [[ -n $dir ]] && echo "logs and config kept in $dir"
    return 0
}

# Prints the recorded processes and whether they still run; returns 1 if none is alive.
status() {
    [[ -f $STATE_FILE ]] || {
        echo "not running (no $STATE_FILE)"
        return 1
    }
    local kind name pid prog alive=0
    while read -r kind name pid; do
        if [[ $kind == dir ]]; then
            echo "dir      $name"
            continue
        fi
        prog=respite
        [[ $kind == redis ]] && prog=redis-server
        if pid_is "$pid" "$prog"; then
            echo "$kind $name pid $pid: running"
            alive=1
        else
            echo "$kind $name pid $pid: not running"
        fi
    done <"$STATE_FILE"
    ((alive))
}

# ---------------------------------------------------------------------------------------------
# Prerequisites

# Runs a command as root: directly when root, else through sudo.
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    else
        command -v sudo >/dev/null || die "need root or sudo to run: $*"
        sudo "$@"
    fi
}

ensure_packages() {
    local missing=()
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v redis-cli >/dev/null || missing+=(redis-tools)
    # cargo links with the system C compiler driver, which also builds mimalloc (C).
    command -v cc >/dev/null || missing+=(gcc libc6-dev)
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null ||
        die "missing ${missing[*]} and apt-get is not available: install them and re-run"
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    # The Debian redis-server package starts a system instance on 6379; we never use it.
}

ensure_cargo() {
    if ! command -v cargo >/dev/null && [[ -x $HOME/.cargo/bin/cargo ]]; then
        PATH=$HOME/.cargo/bin:$PATH
    fi
    command -v cargo >/dev/null || die "cargo not found. Install Rust (1.95 or newer) with rustup:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
then open a new shell (or: . \"\$HOME/.cargo/env\") and re-run $0"
}

# ---------------------------------------------------------------------------------------------
# Ports

TAKEN_PORTS=()

port_in_use() {
    local port=$1 p
    for p in "${TAKEN_PORTS[@]}"; do
        [[ $p == "$port" ]] && return 0
    done
    # Something accepts connections on it?
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 0
    fi
    # Something listens on it on any address?
    if command -v ss >/dev/null && [[ -n $(ss -Htln "sport = :$port" 2>/dev/null) ]]; then
        return 0
    fi
    return 1
}

# Sets FREE_PORT to the first free port >= $1 and reserves it for this run.
pick_port() {
    local port=$1
    while port_in_use "$port"; do
        port=$((port + 1))
        ((port < 65535)) || die "no free port found from $1 up"
    done
    TAKEN_PORTS+=("$port")
    FREE_PORT=$port
}

# Waits until `redis-cli -p PORT ping` answers PONG; returns 1 after TIMEOUT seconds.
wait_pong() {
    local port=$1 timeout=$2 pid=${3:-} i
    for ((i = 0; i < timeout * 10; i++)); do
        if [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]]; then
            return 0
        fi
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------------------------------------
# start

STARTED=0
on_exit() {
    local rc=$?
    if ((rc != 0 && STARTED == 0)) && [[ -f $STATE_FILE ]]; then
        warn "quickstart failed; stopping what it started"
        stop_all || true
    fi
    exit "$rc"
}

start() {
    if [[ -f $STATE_FILE ]]; then
        if status >/dev/null; then
            die "a quickstart is already running (see $STATE_FILE); run: $0 stop"
        fi
        rm -f "$STATE_FILE"
    fi

    ensure_packages
    ensure_cargo

    if [[ $SKIP_BUILD != 1 ]]; then
        log "building respite and respite-bench (release)"
        (cd "$REPO_ROOT" && cargo build --release --bin respite --bin respite-bench)
    fi
    [[ -x $RESPITE_BIN ]] || die "$RESPITE_BIN not found (build failed?)"
    [[ -x $BENCH_BIN ]] || die "$BENCH_BIN not found (build failed?)"

    mkdir -p "$STATE_DIR"
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/respite-quickstart.XXXXXX")
    : >"$STATE_FILE"
    state_add "dir $dir"
    trap on_exit EXIT

    # Three redis-servers.
    log "starting 3 redis-servers in $dir"
    local redis_ports=() redis_pids=() port pid i j hosts=""
    FREE_PORT=7001
    for i in 1 2 3; do
        pick_port "$FREE_PORT"
        port=$FREE_PORT
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize yes --dir "$dir" --pidfile "$dir/redis-$port.pid" \
            --logfile "$dir/redis-$port.log"
        wait_pong "$port" 10 || {
            cat "$dir/redis-$port.log" >&2 || true
            die "redis-server on port $port did not answer PING"
        }
        for ((j = 0; j < 50; j++)); do
            [[ -s $dir/redis-$port.pid ]] && break
            sleep 0.1
        done
        pid=$(<"$dir/redis-$port.pid")
        state_add "redis 127.0.0.1:$port $pid"
        redis_ports+=("$port")
        redis_pids+=("$pid")
        hosts+="${hosts:+, }\"127.0.0.1:$port\""
        echo "    redis-server 127.0.0.1:$port (pid $pid)"
    done

    # Respite config: one listener, admin, one ketama cluster over the three servers.
    local listen admin conf="$dir/respite.toml"
    pick_port 6380
    listen=$FREE_PORT
    pick_port 9901
    admin=$FREE_PORT
    cat >"$conf" <<EOF
[admin]
address = "127.0.0.1:$admin"
[runtime]
workers = 2
[[listeners]]
name = "main"
address = "127.0.0.1:$listen"
stat_prefix = "main"
op_timeout = "1s"
enable_hashtagging = true
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
type = "static"
lb_policy = "ketama"
hosts = [$hosts]
EOF
    log "config $conf"
    sed 's/^/    /' "$conf"

    log "starting respite on 127.0.0.1:$listen (admin 127.0.0.1:$admin)"
    nohup "$RESPITE_BIN" --config "$conf" >"$dir/respite.log" 2>&1 </dev/null &
    local rpid=$!
    state_add "respite 127.0.0.1:$listen $rpid"
    if ! wait_pong "$listen" 10 "$rpid"; then
        echo "---- $dir/respite.log ----" >&2
        tail -n 50 "$dir/respite.log" >&2 || true
        echo "--------------------------" >&2
        if kill -0 "$rpid" 2>/dev/null; then
            die "respite (pid $rpid) did not answer PING on 127.0.0.1:$listen within 10s"
        fi
        die "respite exited before answering PING on 127.0.0.1:$listen"
    fi
    echo "    respite pid $rpid answers PING"

    # Smoke load, with CPU per request of every process.
    local pid_args=(--pid "respite=$rpid")
    for i in 0 1 2; do
        pid_args+=(--pid "redis-${redis_ports[$i]}=${redis_pids[$i]}")
    done
    local pipeline
    for pipeline in 1 16; do
        log "smoke load: GET/SET 50/50, 50 connections, pipeline $pipeline"
        "$BENCH_BIN" --port "$listen" -c 50 -P "$pipeline" --mix get:50,set:50 --prefill \
            -r 10000 -n 100000 "${pid_args[@]}"
    done

    log "a key through the proxy"
    echo "    \$ redis-cli -p $listen set hello world"
    echo "    $(redis-cli -p "$listen" set hello world)"
    echo "    \$ redis-cli -p $listen get hello"
    echo "    $(redis-cli -p "$listen" get hello)"
    for port in "${redis_ports[@]}"; do
        if [[ $(redis-cli -p "$port" exists hello) == 1 ]]; then
            echo "    'hello' is stored on backend 127.0.0.1:$port (ketama)"
        fi
    done

    if command -v curl >/dev/null; then
        log "admin stats: curl -s http://127.0.0.1:$admin/stats | head"
        # head closes the pipe early; that is not an error.
        { curl -s --max-time 3 "http://127.0.0.1:$admin/stats" || true; } | head -n 15 || true
    fi

    STARTED=1
    echo
    log "Respite is running"
    cat <<EOF
    connect:   redis-cli -p $listen
    admin:     http://127.0.0.1:$admin/stats   (also /stats/prometheus, /clusters, /help)
    live view: $RESPITE_BIN top --admin 127.0.0.1:$admin
    config:    $conf   (edit, then: kill -HUP $rpid)
    logs:      $dir/respite.log, $dir/redis-*.log
    bench:     $BENCH_BIN --port $listen -c 50 -P 16 --mix get --prefill --duration 10s
    stop:      $0 stop
EOF
    if [[ $KEEP == 0 ]]; then
        echo
        log "stopping (--no-keep)"
        stop_all
    fi
}

main() {
    local cmd=start arg
    for arg in "$@"; do
        case $arg in
            start) cmd=start ;;
            stop) cmd=stop ;;
            status) cmd=status ;;
            --no-keep) KEEP=0 ;;
            --keep) KEEP=1 ;;
            -h | --help | help)
                usage
                exit 0
                ;;
            *)
                usage >&2
                die "unknown argument: $arg"
                ;;
        esac
    done
    case $cmd in
        start) start ;;
        stop) stop_all ;;
        status) status ;;
    esac
}

main "$@"

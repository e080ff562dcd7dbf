#!/usr/bin/env python3
"""Writes Respite's command table from what a real redis-server reports.

    python3 dataplane/command-table/gen_table.py [--out DIR] [--redis-server PATH]

Starts its own redis-server (on a unix socket in a temporary directory, no port, no
persistence), asks it `COMMAND`, `COMMAND INFO <name>` and `COMMAND DOCS <name>` for every
command and subcommand, stops it, then writes into DIR (default: dataplane/src/command/) and
formats with `rustfmt --edition 2024`:

- table.rs      the rows: Redis's name, arity, first/last key, step, `write` flag, plus the kind
                and key shape chosen below (the only hand-made part of the table);
- table_raw.rs  Redis's own `COMMAND INFO` key specs and `COMMAND DOCS` maps, byte for byte;
- redis70.rs    name, arity and key range as Redis reports them (test data).

The table is Redis 7.0.15's: any other server version is refused (exit 2). Redis lists a
container's subcommands in the order of its hash table, whose seed is random per process, so
the subcommands inside each `COMMAND DOCS` map are written in name order: two runs write the
same bytes (check.sh beside this script verifies that the checked-in files are this output).
"""

import argparse
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter

REDIS_VERSION = "7.0.15"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "src", "command")

# ---------------------------------------------------------------------------------------------
# Row choices: how Respite executes each command. A row not named here is `Kind::Keyed`
# (routed whole by its keys; zero-key rows go to shard 0), or `Kind::Container` if Redis lists
# subcommands for it.
# ---------------------------------------------------------------------------------------------

# Keys grouped per shard, sent as sub-requests and merged (`Merge::<value>`).
SPLIT = {
    "mget": "Mget",
    "mset": "Mset",
    "del": "SumIntegers",
    "unlink": "SumIntegers",
    "exists": "SumIntegers",
    "touch": "SumIntegers",
}

# Sent unchanged to every shard, the replies merged (`Merge::<value>`).
FAN_OUT = {
    "flushall": "AllOk",
    "flushdb": "AllOk",
    "dbsize": "Sum",
    "keys": "Concat",
    "randomkey": "FirstNonNil",
    "wait": "MinInteger",
    "lastsave": "MinLastSave",
    "info": "Info",
    "script|load": "Same",
    "script|exists": "AndArrays",
    "script|flush": "AllOk",
    "function|load": "Same",
    "function|delete": "AllOk",
    "function|flush": "AllOk",
    "function|restore": "AllOk",
    "pubsub|channels": "Union",
    "pubsub|shardchannels": "Union",
    "pubsub|numpat": "MaxInteger",
}

# Answered by the proxy itself (`Local::<value>`).
LOCAL = {
    "ping": "Ping",
    "echo": "Echo",
    "quit": "Quit",
    "auth": "Auth",
    "select": "Select",
    "hello": "Hello",
    "client|setname": "Client",
    "client|getname": "Client",
    "client|id": "Client",
    "client|no-evict": "Client",
    "client|reply": "Client",
    "command": "Command",
    "command|count": "Command",
    "command|info": "Command",
    "command|docs": "Command",
    "command|list": "Command",
    "command|getkeys": "Command",
    "cluster|info": "Cluster",
    "cluster|keyslot": "Cluster",
    "cluster|myid": "Cluster",
    "cluster|nodes": "Cluster",
    "cluster|shards": "Cluster",
    "cluster|slots": "Cluster",
    "reset": "Reset",
    "time": "Time",
    "readonly": "Ok",
    "readwrite": "Ok",
}

# SCAN: the cursor names the shard it continues on.
SCAN = {"scan"}

# Blocking commands: run on a leased upstream connection for their own timeout (`Kind::Blocking`;
# XREAD/XREADGROUP block only with BLOCK, decided per request).
BLOCKING = {"blpop", "brpop", "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop"}

# MULTI, EXEC, DISCARD, WATCH, UNWATCH: the session's transaction modes, on leased upstream
# connections (`Kind::Transaction(Transaction::<value>)`).
TRANSACTION = {"multi": "Multi", "exec": "Exec", "discard": "Discard", "watch": "Watch",
               "unwatch": "Unwatch"}

# About the script a backend may be running (Redis serves them while it runs): sent to every
# backend over leased connections, never behind the script on a shared one
# (`Kind::ScriptControl`).
SCRIPT_CONTROL = {"script|kill", "function|kill", "function|stats"}

# CLIENT UNBLOCK: Respite's client ids are its own; the blocked client's leased upstream
# connection is found by that id and unblocked at its backend (`Kind::ClientUnblock`).
CLIENT_UNBLOCK = {"client|unblock"}

# Pub/sub: the session's subscriptions, held upstream once per worker and fanned out; PUBLISH
# and the subscriber counts are answered by Redis and corrected for the proxy's own upstream
# subscriptions (`Kind::PubSub(PubSub::<value>)`).
PUBSUB = {
    "subscribe": "Subscribe(Topic::Channel)",
    "psubscribe": "Subscribe(Topic::Pattern)",
    "ssubscribe": "Subscribe(Topic::Shard)",
    "unsubscribe": "Unsubscribe(Topic::Channel)",
    "punsubscribe": "Unsubscribe(Topic::Pattern)",
    "sunsubscribe": "Unsubscribe(Topic::Shard)",
    "publish": "Publish(Topic::Channel)",
    "spublish": "Publish(Topic::Shard)",
    "pubsub|numsub": "NumSub(Topic::Channel)",
    "pubsub|shardnumsub": "NumSub(Topic::Shard)",
}

# Refused with a reason (`Reason::<value>`, whose sentence is in src/command/refused.rs).
REFUSED = {}
for _reason, _names in {
    "Replication": ["sync", "psync", "replconf", "replicaof", "slaveof", "failover", "role"],
    "Administration": [
        "monitor", "debug", "shutdown", "save", "bgsave", "bgrewriteaof", "memory|doctor",
        "memory|malloc-stats", "memory|purge", "memory|stats",
    ],
    "LuaDebugger": ["script|debug"],
    "Migrate": ["migrate"],
    "Database": ["move", "swapdb"],
    "Cluster": ["asking"],
    "KeyFlags": ["command|getkeysandflags"],
    "ClientCaching": ["client|caching", "client|tracking", "client|trackinginfo", "client|getredir"],
    "SharedConnections": [
        "client|info", "client|list", "client|kill", "client|pause", "client|unpause",
    ],
}.items():
    for _n in _names:
        REFUSED[_n] = _reason

# Every subcommand of these containers is refused for the reason given, except `<container>|help`
# (sent to shard 0) and the rows chosen above (CLUSTER INFO, … are local).
REFUSED_CONTAINERS = {
    "config": "Administration",
    "acl": "Administration",
    "module": "Administration",
    "latency": "Administration",
    "slowlog": "Administration",
    "cluster": "Cluster",
}

# Where the keys are when first/last/step does not say (`KeySpec::…`).
NUMKEYS = {}  # name -> (argv index of numkeys, fixed keys before it)
for _n in ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"]:
    NUMKEYS[_n] = (2, 0)
for _n in ["zunionstore", "zinterstore", "zdiffstore"]:
    NUMKEYS[_n] = (2, 1)
for _n in ["zunion", "zinter", "zdiff", "zintercard", "sintercard", "lmpop", "zmpop"]:
    NUMKEYS[_n] = (1, 0)
for _n in ["blmpop", "bzmpop"]:
    NUMKEYS[_n] = (2, 0)
SORT = {"sort", "sort_ro", "georadius", "georadiusbymember"}
STREAMS = {"xread", "xreadgroup"}

# Routed by argv[1] although Redis reports no key (Envoy routes PUBLISH by its channel).
ROUTED_BY_FIRST_ARG = {"publish"}


def kind(name, containers):
    if name in SPLIT:
        return "Kind::Split(Merge::%s)" % SPLIT[name]
    if name in FAN_OUT:
        return "Kind::FanOut(Merge::%s)" % FAN_OUT[name]
    if name in LOCAL:
        return "Kind::Local(Local::%s)" % LOCAL[name]
    if name in TRANSACTION:
        return "Kind::Transaction(Transaction::%s)" % TRANSACTION[name]
    if name in BLOCKING:
        return "Kind::Blocking"
    if name in SCRIPT_CONTROL:
        return "Kind::ScriptControl"
    if name in CLIENT_UNBLOCK:
        return "Kind::ClientUnblock"
    if name in PUBSUB:
        return "Kind::PubSub(PubSub::%s)" % PUBSUB[name]
    if name in REFUSED:
        return "Kind::Refused(Reason::%s)" % REFUSED[name]
    container, bar, sub = name.partition("|")
    if bar and sub != "help" and container in REFUSED_CONTAINERS:
        return "Kind::Refused(Reason::%s)" % REFUSED_CONTAINERS[container]
    if name in SCAN:
        return "Kind::Scan"
    if name in containers:
        return "Kind::Container"
    return "Kind::Keyed"


def key_spec(name):
    if name in NUMKEYS:
        return "KeySpec::NumKeys { at: %d, fixed: %d }" % NUMKEYS[name]
    if name in SORT:
        return "KeySpec::Sort"
    if name in STREAMS:
        return "KeySpec::Streams"
    return "KeySpec::Range"


# ---------------------------------------------------------------------------------------------
# RESP2 over a unix socket.
# ---------------------------------------------------------------------------------------------


class Redis:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")

    def raw(self, *args):
        """The reply to `args`, as the bytes Redis sent."""
        args = [a.encode() for a in args]
        self.sock.sendall(
            b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        )
        return read_raw(self.file)

    def call(self, *args):
        """The reply to `args`, decoded (bulk strings as str, errors raised)."""
        return decode(io.BytesIO(self.raw(*args)))


def read_raw(f):
    line = f.readline()
    t = line[:1]
    if t in b"+-:":
        return line
    n = int(line[1:-2])
    if t == b"$":
        return line if n < 0 else line + f.read(n + 2)
    if t == b"*":
        return line + b"".join(read_raw(f) for _ in range(max(n, 0)))
    raise ValueError("unexpected reply %r" % line)


def decode(f):
    line = f.readline()[:-2]
    t, rest = line[:1], line[1:]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    n = int(rest)
    if n < 0:
        return None
    if t == b"$":
        return f.read(n + 2)[:-2].decode()
    return [decode(f) for _ in range(n)]


def elements(raw):
    """The raw elements of a raw array reply."""
    f = io.BytesIO(raw)
    n = int(f.readline()[1:-2])
    return [read_raw(f) for _ in range(n)]


def array(items):
    return b"*%d\r\n" % len(items) + b"".join(items)


def sorted_subcommands(docs):
    """`docs` (a raw `COMMAND DOCS` map) with its `subcommands` map in name order."""
    fields = elements(docs)
    for i in range(0, len(fields), 2):
        if fields[i] == b"$11\r\nsubcommands\r\n":
            subs = elements(fields[i + 1])
            pairs = sorted(zip(subs[::2], subs[1::2]), key=lambda p: decode(io.BytesIO(p[0])))
            fields[i + 1] = array([x for p in pairs for x in p])
    return array(fields)


# ---------------------------------------------------------------------------------------------
# Rust text.
# ---------------------------------------------------------------------------------------------


def rust_str(s):
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\u{%x}" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rust_strs(xs):
    return "&[" + ", ".join(rust_str(x) for x in xs) + "]"


def rust_bytes(b):
    out = []
    for c in b:
        if c == 13:
            out.append("\\r")
        elif c == 10:
            out.append("\\n")
        elif c in (34, 92):
            out.append("\\" + chr(c))
        elif 32 <= c < 127:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return 'b"' + "".join(out) + '"'


GENERATED = "Generated by `dataplane/command-table/gen_table.py`: regenerate, do not edit by hand."

TABLE_HEAD = """\
//! The rows of [`super::COMMANDS`]: every command and subcommand Redis 7.0.15 lists in
//! `COMMAND LIST`, in name order (containers before their `container|sub` rows).
//!
//! %s
//!
//! Arity, first/last key, step and the `write` flag are Redis 7.0.15's `COMMAND INFO` values,
//! except PUBLISH, which is routed by its channel (argv[1]) as Envoy does; [`INFO`] keeps what
//! Redis reports. The kind of each row (keyed, split, fan-out, local, scan, transaction, blocking,
//! refused, container, …) is Respite's choice, made in the generator.

use super::{CommandSpec, KeySpec, Kind, Local, Merge, PubSub, Reason, Topic, Transaction};

/// What `COMMAND INFO` / `COMMAND DOCS` report for a row, beyond [`CommandSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// Redis command flags (`write`, `readonly`, `fast`, …).
    pub flags: &'static [&'static str],
    /// ACL categories (`@read`, `@string`, …).
    pub acl: &'static [&'static str],
    /// Command tips (`nondeterministic_output`, `request_policy:all_shards`, …).
    pub tips: &'static [&'static str],
    /// first key, last key, step as Redis reports them.
    pub range: (i16, i16, i16),
    pub summary: &'static str,
    pub since: &'static str,
    pub group: &'static str,
}

#[allow(clippy::too_many_arguments)]
const fn c(
    name: &'static str,
    arity: i16,
    first_key: i16,
    last_key: i16,
    step: i16,
    write: bool,
    kind: Kind,
    keys: KeySpec,
) -> CommandSpec {
    CommandSpec {
        name,
        id: 0,
        arity,
        first_key,
        last_key,
        step,
        write,
        kind,
        keys,
    }
}

const fn i(
    flags: &'static [&'static str],
    acl: &'static [&'static str],
    tips: &'static [&'static str],
    range: (i16, i16, i16),
    summary: &'static str,
    since: &'static str,
    group: &'static str,
) -> Info {
    Info {
        flags,
        acl,
        tips,
        range,
        summary,
        since,
        group,
    }
}

""" % GENERATED

TABLE_TAIL = """\
const N: usize = RAW.len();

/// Copies `RAW` into an array with `id` = row index.
const fn numbered() -> [CommandSpec; N] {
    let mut out = [c("", 0, 0, 0, 0, false, Kind::Keyed, KeySpec::Range); N];
    let mut i = 0;
    while i < N {
        out[i] = RAW[i];
        out[i].id = i as u16;
        i += 1;
    }
    out
}

pub(super) static TABLE: [CommandSpec; N] = numbered();

const _: () = assert!(INFO.len() == N);
const _: () = assert!(super::table_raw::KEY_SPECS.len() == N);
const _: () = assert!(super::table_raw::DOCS.len() == N);
"""


def table_rs(names, cmds, docs):
    containers = {n for n in names if cmds[n]["subs"]}
    rows, infos = [], []
    for n in names:
        e = cmds[n]
        fk, lk, step = (1, 1, 1) if n in ROUTED_BY_FIRST_ARG else (e["fk"], e["lk"], e["step"])
        write = "true" if "write" in e["flags"] else "false"
        rows.append(
            "    c(%s, %d, %d, %d, %d, %s, %s, %s),"
            % (rust_str(n), e["arity"], fk, lk, step, write, kind(n, containers), key_spec(n))
        )
        d = docs[n]
        infos.append(
            "    i(%s, %s, %s, (%d, %d, %d), %s, %s, %s),"
            % (
                rust_strs(e["flags"]), rust_strs(e["acl"]), rust_strs(e["tips"]),
                e["fk"], e["lk"], e["step"],
                rust_str(d.get("summary", "")), rust_str(d.get("since", "")),
                rust_str(d.get("group", "")),
            )
        )
    summary = Counter(kind(n, containers).split("(")[0] for n in names)
    text = (
        TABLE_HEAD
        + "const RAW: &[CommandSpec] = &[\n" + "\n".join(rows) + "\n];\n\n"
        + "/// Redis 7.0 `COMMAND`/`COMMAND DOCS` data of each row, in row order.\n"
        + "pub(super) static INFO: &[Info] = &[\n" + "\n".join(infos) + "\n];\n\n"
        + TABLE_TAIL
    )
    return text, summary


def table_raw_rs(key_specs, docs_raw):
    return (
        "//! Raw Redis 7.0.15 reply fragments per row (row order): the key specs array of\n"
        "//! `COMMAND INFO` and the docs map of `COMMAND DOCS` (RESP2), subcommands in name order.\n"
        "//!\n//! %s\n\n"
        "/// `COMMAND INFO` element 9 (key specs) of each row.\n"
        "pub(super) static KEY_SPECS: &[&[u8]] = &[\n%s];\n\n"
        "/// `COMMAND DOCS` value (the docs map, subcommands included) of each row.\n"
        "pub(super) static DOCS: &[&[u8]] = &[\n%s];\n"
    ) % (
        GENERATED,
        "".join("    %s,\n" % rust_bytes(x) for x in key_specs),
        "".join("    %s,\n" % rust_bytes(x) for x in docs_raw),
    )


def redis70_rs(names, cmds):
    rows = "".join(
        '    (%s, %d, %d, %d, %d),\n'
        % (rust_str(n), cmds[n]["arity"], cmds[n]["fk"], cmds[n]["lk"], cmds[n]["step"])
        for n in names
    )
    return (
        "//! What a real redis-server 7.0.15 reported (`COMMAND LIST`, `COMMAND INFO`): name, arity,\n"
        "//! first key, last key, step of every command and subcommand. Test data.\n"
        "//!\n//! %s\n\n"
        "pub(super) const REDIS_7_0_15: &[(&str, i16, i16, i16, i16)] = &[\n%s];\n"
    ) % (GENERATED, rows)


# ---------------------------------------------------------------------------------------------
# Reading the server.
# ---------------------------------------------------------------------------------------------


def read_server(r):
    version = next(
        (l.split(":", 1)[1] for l in r.call("INFO", "server").splitlines()
         if l.startswith("redis_version:")),
        None,
    )
    if version != REDIS_VERSION:
        sys.exit("gen_table.py: redis-server %s, the table is Redis %s's" % (version, REDIS_VERSION))

    cmds = {}

    def walk(e):
        name, arity, flags, fk, lk, step, acl, tips, _key_specs, subs = e
        cmds[name] = dict(arity=arity, flags=flags, fk=fk, lk=lk, step=step, acl=acl, tips=tips,
                          subs=[s[0] for s in subs])
        for s in subs:
            walk(s)

    for e in r.call("COMMAND"):
        walk(e)

    docs = {}

    def walk_docs(flat):
        for name, fields in zip(flat[::2], flat[1::2]):
            d = dict(zip(fields[::2], fields[1::2]))
            docs[name] = d
            walk_docs(d.get("subcommands", []))

    walk_docs(r.call("COMMAND", "DOCS"))

    names = sorted(cmds)
    key_specs, docs_raw = [], []
    for n in names:
        info = elements(elements(r.raw("COMMAND", "INFO", n))[0])
        key_specs.append(info[8])
        docs_raw.append(sorted_subcommands(elements(r.raw("COMMAND", "DOCS", n))[1]))
    return names, cmds, docs, key_specs, docs_raw


def with_server(redis_server, body):
    """Runs `body(Redis)` against a fresh redis-server of its own."""
    tmp = tempfile.mkdtemp(prefix="gen_table.")
    sock = os.path.join(tmp, "redis.sock")
    child = subprocess.Popen(
        [redis_server, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
         "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                r = Redis(sock)
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    sys.exit("gen_table.py: %s did not start" % redis_server)
                time.sleep(0.01)
        return body(r)
    finally:
        child.kill()
        child.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="directory to write the three files into")
    ap.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    a = ap.parse_args()

    names, cmds, docs, key_specs, docs_raw = with_server(a.redis_server, read_server)
    table, summary = table_rs(names, cmds, docs)
    files = {
        "table.rs": table,
        "table_raw.rs": table_raw_rs(key_specs, docs_raw),
        "redis70.rs": redis70_rs(names, cmds),
    }
    paths = []
    for name, text in files.items():
        path = os.path.join(a.out, name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        paths.append(path)
    subprocess.run(["rustfmt", "--edition", "2024", *paths], check=True)
    print("%d rows: %s" % (len(names), ", ".join(
        "%d %s" % (n, k.removeprefix("Kind::")) for k, n in summary.most_common())))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates table.rs, table_raw.rs and redis70.rs from a running redis-server.

Usage: redis-server --port 7799 --save '' &  then  python3 gen_table.py [port]
then `rustfmt --edition 2024 *.rs`. The kind of each row (keyed, split, fan-out, local,
refused, container) is chosen below; everything else comes from the server.
"""
import io, json, os, socket, sys

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 7799
HERE = os.path.dirname(os.path.abspath(__file__))
sock = socket.create_connection(("127.0.0.1", PORT))
f = sock.makefile("rb")


def enc(*a):
    a = [x.encode() if isinstance(x, str) else x for x in a]
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)


def parse(g):
    l = g.readline()[:-2]
    t, r = l[:1], l[1:]
    if t == b"+":
        return r.decode()
    if t == b"-":
        return ("ERR", r.decode())
    if t == b":":
        return int(r)
    if t == b"$":
        n = int(r)
        return None if n < 0 else g.read(n + 2)[:-2].decode("latin1")
    if t == b"*":
        n = int(r)
        return None if n < 0 else [parse(g) for _ in range(n)]
    raise Exception(l)


def raw_reply(g):
    l = g.readline()
    t = l[:1]
    if t in b"+-:_,#":
        return l
    n = int(l[1:-2])
    if t == b"$":
        return l if n < 0 else l + g.read(n + 2)
    return l + b"".join(raw_reply(g) for _ in range(max(n, 0)))


def send(*a):
    sock.sendall(enc(*a))
    return parse(f)


def send_raw(*a):
    sock.sendall(enc(*a))
    return raw_reply(f)


def elems(raw):
    g = io.BytesIO(raw)
    n = int(g.readline()[1:-2])
    return [raw_reply(g) for _ in range(n)]


# ---- COMMAND data ----
d = {}


def walk(e):
    name, arity, flags, fk, lk, st, acl, tips, ks, subs = e
    d[name] = dict(arity=arity, flags=flags, fk=fk, lk=lk, step=st, acl=acl, tips=tips, ks=ks,
                   subs=[x[0] for x in subs])
    for x in subs:
        walk(x)


for e in send("COMMAND"):
    walk(e)
docs = {}


def walkd(lst):
    for i in range(0, len(lst), 2):
        n, m = lst[i], lst[i + 1]
        dd = dict(zip(m[::2], m[1::2]))
        docs[n] = dict(summary=dd.get("summary", ""), since=dd.get("since", ""),
                       group=dd.get("group", ""))
        if "subcommands" in dd:
            walkd(dd["subcommands"])


walkd(send("COMMAND", "DOCS"))
HEAD = "//! The rows of [`super::COMMANDS`]: every command and subcommand Redis 7.0.15 lists in\n//! `COMMAND LIST`, in name order (containers before their `container|sub` rows).\n//!\n//! By `gen_table.py` from redis-server 7.0.15 (`COMMAND`, `COMMAND DOCS`): arity, first/last key,\n//! step and the `write` flag are Redis's `COMMAND INFO` values, except PUBLISH, which is routed\n//! by its channel (argv[1]) as Envoy does; [`INFO`] keeps what Redis reports. The kind of each row\n//! (keyed, split, fan-out, local, scan, refused, container) is Respite's choice.\n\nuse super::{CommandSpec, KeySpec, Kind, Local, Merge};\n\n/// What `COMMAND INFO` / `COMMAND DOCS` report for a row, beyond [`CommandSpec`].\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub struct Info {\n    /// Redis command flags (`write`, `readonly`, `fast`, …).\n    pub flags: &'static [&'static str],\n    /// ACL categories (`@read`, `@string`, …).\n    pub acl: &'static [&'static str],\n    /// Command tips (`nondeterministic_output`, `request_policy:all_shards`, …).\n    pub tips: &'static [&'static str],\n    /// first key, last key, step as Redis reports them.\n    pub range: (i16, i16, i16),\n    pub summary: &'static str,\n    pub since: &'static str,\n    pub group: &'static str,\n}\n\n#[allow(clippy::too_many_arguments)]\nconst fn c(\n    name: &'static str,\n    arity: i16,\n    first_key: i16,\n    last_key: i16,\n    step: i16,\n    write: bool,\n    kind: Kind,\n    keys: KeySpec,\n) -> CommandSpec {\n    CommandSpec {\n        name,\n        id: 0,\n        arity,\n        first_key,\n        last_key,\n        step,\n        write,\n        kind,\n        keys,\n    }\n}\n\nconst fn i(\n    flags: &'static [&'static str],\n    acl: &'static [&'static str],\n    tips: &'static [&'static str],\n    range: (i16, i16, i16),\n    summary: &'static str,\n    since: &'static str,\n    group: &'static str,\n) -> Info {\n    Info {\n        flags,\n        acl,\n        tips,\n        range,\n        summary,\n        since,\n        group,\n    }\n}\n\n"
TAIL = 'const N: usize = RAW.len();\n\n/// Copies `RAW` into an array with `id` = row index.\nconst fn numbered() -> [CommandSpec; N] {\n    let mut out = [c("", 0, 0, 0, 0, false, Kind::Keyed, KeySpec::Range); N];\n    let mut i = 0;\n    while i < N {\n        out[i] = RAW[i];\n        out[i].id = i as u16;\n        i += 1;\n    }\n    out\n}\n\npub(super) static TABLE: [CommandSpec; N] = numbered();\n\nconst _: () = assert!(INFO.len() == N);\nconst _: () = assert!(super::table_raw::KEY_SPECS.len() == N);\nconst _: () = assert!(super::table_raw::DOCS.len() == N);\n'
names = sorted(d)
SPLIT={'mget':'Split(Merge::Mget)','mset':'Split(Merge::Mset)','del':'Split(Merge::SumIntegers)','unlink':'Split(Merge::SumIntegers)','exists':'Split(Merge::SumIntegers)','touch':'Split(Merge::SumIntegers)'}
FAN={'flushall':'AllOk','flushdb':'AllOk','dbsize':'Sum','keys':'Concat','randomkey':'FirstNonNil','wait':'MinInteger','lastsave':'MinLastSave','info':'Info','script|load':'Same','script|exists':'AndArrays','script|flush':'AllOk','function|load':'Same','function|delete':'AllOk','function|flush':'AllOk','function|restore':'AllOk'}
LOCAL={'ping':'Ping','echo':'Echo','quit':'Quit','auth':'Auth','select':'Select','hello':'Hello','client|setname':'Client','client|getname':'Client','client|id':'Client','client|no-evict':'Client','command':'Command','command|count':'Command','command|info':'Command','command|docs':'Command','command|list':'Command','command|getkeys':'Command','reset':'Reset','time':'Time','readonly':'Ok','readwrite':'Ok'}
NUMKEYS={}
for n in ['eval','evalsha','eval_ro','evalsha_ro','fcall','fcall_ro']: NUMKEYS[n]=(2,0)
for n in ['zunionstore','zinterstore','zdiffstore']: NUMKEYS[n]=(2,1)
for n in ['zunion','zinter','zdiff','zintercard','sintercard','lmpop','zmpop']: NUMKEYS[n]=(1,0)
SORT={'sort','sort_ro','georadius','georadiusbymember'}
STREAMS={'xread','xreadgroup'}
def R(why): return lambda n: "ERR '%s' is not supported by respite: %s" % (n, why)
TX=R('transactions need a dedicated upstream connection (not yet implemented)')
PUBSUB=R('pub/sub is not supported through a sharding proxy')
BLOCK=R('blocking commands would stall the shared upstream connection')
REPL=R('replication is managed on each Redis server directly')
ADMIN=R('server administration must be sent to each Redis server directly')
CLUSTER=R('Redis Cluster commands are not exposed by the proxy')
DB=R('the proxy serves database 0 only')
REFUSE={}
for n in ['multi','exec','discard','watch','unwatch']: REFUSE[n]=TX
for n in ['subscribe','psubscribe','ssubscribe','unsubscribe','punsubscribe','sunsubscribe','pubsub|channels','pubsub|numpat','pubsub|numsub','pubsub|shardchannels','pubsub|shardnumsub']: REFUSE[n]=PUBSUB
for n in ['blpop','brpop','brpoplpush','blmove','blmpop','bzpopmin','bzpopmax','bzmpop']: REFUSE[n]=BLOCK
for n in ['sync','psync','replconf','replicaof','slaveof','failover','role']: REFUSE[n]=REPL
for n in ['monitor','debug','shutdown','save','bgsave','bgrewriteaof','memory|doctor','memory|malloc-stats','memory|purge','memory|stats','script|kill','function|kill','function|stats']: REFUSE[n]=ADMIN
REFUSE['script|debug']=R('the Lua debugger needs a dedicated upstream connection')
REFUSE['migrate']=R('it moves keys between servers behind the proxy')
for n in ['move','swapdb']: REFUSE[n]=DB
REFUSE['asking']=CLUSTER
REFUSE['command|getkeysandflags']=R('key flags are not tracked by the proxy')
for n in ['client|caching','client|tracking','client|trackinginfo','client|getredir']: REFUSE[n]=R('client-side caching needs a dedicated upstream connection')
REFUSE['client|reply']=R('reply suppression is not supported through a proxy')
for n in ['client|info','client|list','client|kill','client|pause','client|unpause','client|unblock']: REFUSE[n]=R('upstream client connections are shared and owned by the proxy')
for pre,why in [('config|',ADMIN),('acl|',ADMIN),('module|',ADMIN),('latency|',ADMIN),('slowlog|',ADMIN),('cluster|',CLUSTER)]:
    for n in names:
        if n.startswith(pre) and not n.endswith('|help'): REFUSE[n]=why
CONTAINERS=[n for n in names if d[n]['subs']]
def kind(n):
    if n in SPLIT: return 'Kind::'+SPLIT[n]
    if n in FAN: return 'Kind::FanOut(Merge::%s)'%FAN[n]
    if n in LOCAL: return 'Kind::Local(Local::%s)'%LOCAL[n]
    if n in REFUSE: return 'Kind::Refused(%s)'%json.dumps(REFUSE[n](n))
    if n=='scan': return 'Kind::Scan'
    if n in CONTAINERS: return 'Kind::Container'
    return 'Kind::Keyed'
def keys(n):
    if n in NUMKEYS: return 'KeySpec::NumKeys { at: %d, fixed: %d }'%NUMKEYS[n]
    if n in SORT: return 'KeySpec::Sort'
    if n in STREAMS: return 'KeySpec::Streams'
    return 'KeySpec::Range'
def s(x): return json.dumps(x, ensure_ascii=False)
def sl(xs): return '&[' + ', '.join(s(x) for x in xs) + ']'
rows=[];infos=[]
for n in names:
    e=d[n]; fk,lk,st=e['fk'],e['lk'],e['step']
    rng=(fk,lk,st)
    if n=='publish': fk,lk,st=1,1,1
    w='true' if 'write' in e['flags'] else 'false'
    rows.append('    c(%s, %d, %d, %d, %d, %s, %s, %s),'%(s(n),e['arity'],fk,lk,st,w,kind(n),keys(n)))
    dd=docs[n]
    infos.append('    i(%s, %s, %s, (%d, %d, %d), %s, %s, %s),'%(sl(e['flags']),sl(e['acl']),sl(e['tips']),rng[0],rng[1],rng[2],s(dd['summary']),s(dd['since']),s(dd['group'])))
out=HEAD
out+='const RAW: &[CommandSpec] = &[\n'+'\n'.join(rows)+'\n];\n\n'
out+='/// Redis 7.0 `COMMAND`/`COMMAND DOCS` data of each row, in row order.\npub(super) static INFO: &[Info] = &[\n'+'\n'.join(infos)+'\n];\n\n'
out+=TAIL
open(os.path.join(HERE, 'table.rs'), 'w').write(out)
from collections import Counter
print(Counter(kind(n).split('(')[0] for n in names), len(names))


# ---- redis70.rs (test data) ----
lines = ["//! What a real redis-server 7.0.15 reported (`COMMAND LIST`, `COMMAND INFO`): name, arity,",
         "//! first key, last key, step of every command and subcommand. Test data.", "",
         "pub(super) const REDIS_7_0_15: &[(&str, i16, i16, i16, i16)] = &["]
for n in names:
    e = d[n]
    lines.append('    ("%s", %d, %d, %d, %d),' % (n, e["arity"], e["fk"], e["lk"], e["step"]))
lines.append("];")
open(os.path.join(HERE, "redis70.rs"), "w").write("\n".join(lines) + "\n")


def lit(b):
    o=[]
    for c in b:
        if c==13: o.append('\\r')
        elif c==10: o.append('\\n')
        elif c in (34,92): o.append('\\'+chr(c))
        elif 32<=c<127: o.append(chr(c))
        else: o.append('\\x%02x'%c)
    return 'b"'+''.join(o)+'"'
ks=[];docs_raw=[]
for n in names:
    info=send_raw('COMMAND','INFO',n); e=elems(elems(info)[0]); ks.append(e[8])
    dd=send_raw('COMMAND','DOCS',n); docs_raw.append(elems(dd)[1])
out='''//! Raw Redis 7.0.15 reply fragments per row (row order), generated from a real redis-server:
//! the key specs array of `COMMAND INFO` and the docs map of `COMMAND DOCS` (RESP2).

/// `COMMAND INFO` element 9 (key specs) of each row.
pub(super) static KEY_SPECS: &[&[u8]] = &[
'''+''.join('    %s,\n'%lit(x) for x in ks)+'''];

/// `COMMAND DOCS` value (the docs map, subcommands included) of each row.
pub(super) static DOCS: &[&[u8]] = &[
'''+''.join('    %s,\n'%lit(x) for x in docs_raw)+'''];
'''
open(os.path.join(HERE, 'table_raw.rs'), 'w').write(out)
print(len(names), 'rows')

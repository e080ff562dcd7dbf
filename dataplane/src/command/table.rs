//! The rows of [`super::COMMANDS`].
//!
//! Arity, first/last key, step and the `write` flag are Redis 7.0's `COMMAND INFO` values
//! (redis/redis 7.0 `src/commands/*.json`, compiled into `src/commands.c`). Container commands
//! (`object`, `xgroup`, `xinfo`) get one row with the container's arity (-2) and the key of their
//! key-taking subcommands at argv[2]. Blocking commands and commands whose keys must all be
//! together (rename, smove, lmove, …) are not here yet.

use super::{CommandSpec, KeySpec, Kind, Local, Merge};

const fn row(
    name: &'static str,
    arity: i16,
    first_key: i16,
    last_key: i16,
    step: i16,
    write: bool,
    kind: Kind,
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
        keys: KeySpec::Range,
    }
}

/// A single-key read command (key at argv[1]).
const fn r(name: &'static str, arity: i16) -> CommandSpec {
    row(name, arity, 1, 1, 1, false, Kind::Keyed)
}

/// A single-key write command (key at argv[1]).
const fn w(name: &'static str, arity: i16) -> CommandSpec {
    row(name, arity, 1, 1, 1, true, Kind::Keyed)
}

/// A container command whose subcommands take their key at argv[2].
const fn sub(name: &'static str, write: bool) -> CommandSpec {
    row(name, -2, 2, 2, 1, write, Kind::Keyed)
}

const fn local(name: &'static str, arity: i16, l: Local) -> CommandSpec {
    row(name, arity, 0, 0, 0, false, Kind::Local(l))
}

const RAW: &[CommandSpec] = &[
    // Strings (Redis 7.0 @string).
    w("append", 3),
    w("decr", 2),
    w("decrby", 3),
    r("get", 2),
    w("getdel", 2),
    w("getex", -2),
    r("getrange", 4),
    w("getset", 3),
    w("incr", 2),
    w("incrby", 3),
    w("incrbyfloat", 3),
    w("psetex", 4),
    w("set", -3),
    w("setex", 4),
    w("setnx", 3),
    w("setrange", 4),
    r("strlen", 2),
    r("substr", 4),
    // Hashes (@hash).
    w("hdel", -3),
    r("hexists", 3),
    r("hget", 3),
    r("hgetall", 2),
    w("hincrby", 4),
    w("hincrbyfloat", 4),
    r("hkeys", 2),
    r("hlen", 2),
    r("hmget", -3),
    w("hmset", -4),
    r("hrandfield", -2),
    r("hscan", -3),
    w("hset", -4),
    w("hsetnx", 4),
    r("hstrlen", 3),
    r("hvals", 2),
    // Lists (@list).
    r("lindex", 3),
    w("linsert", 5),
    r("llen", 2),
    w("lpop", -2),
    r("lpos", -3),
    w("lpush", -3),
    w("lpushx", -3),
    r("lrange", 4),
    w("lrem", 4),
    w("lset", 4),
    w("ltrim", 4),
    w("rpop", -2),
    w("rpush", -3),
    w("rpushx", -3),
    // Sets (@set).
    w("sadd", -3),
    r("scard", 2),
    r("sismember", 3),
    r("smembers", 2),
    r("smismember", -3),
    w("spop", -2),
    r("srandmember", -2),
    w("srem", -3),
    r("sscan", -3),
    // Sorted sets (@sortedset).
    w("zadd", -4),
    r("zcard", 2),
    r("zcount", 4),
    w("zincrby", 4),
    r("zlexcount", 4),
    r("zmscore", -3),
    w("zpopmax", -2),
    w("zpopmin", -2),
    r("zrandmember", -2),
    r("zrange", -4),
    r("zrangebylex", -4),
    r("zrangebyscore", -4),
    r("zrank", 3),
    w("zrem", -3),
    w("zremrangebylex", 4),
    w("zremrangebyrank", 4),
    w("zremrangebyscore", 4),
    r("zrevrange", -4),
    r("zrevrangebylex", -4),
    r("zrevrangebyscore", -4),
    r("zrevrank", 3),
    r("zscan", -3),
    r("zscore", 3),
    // Bitmaps (@bitmap).
    r("bitcount", -2),
    w("bitfield", -2),
    r("bitfield_ro", -2),
    r("bitpos", -3),
    r("getbit", 3),
    w("setbit", 4),
    // HyperLogLog (@hyperloglog). PFCOUNT's key spec is 1..-1 in Redis; it is routed by its
    // first key (Envoy treats it as a simple command), so several keys must share a shard.
    w("pfadd", -2),
    row("pfcount", -2, 1, -1, 1, false, Kind::Keyed),
    // Geo (@geo). GEORADIUS[BYMEMBER] are write commands because of their STORE option.
    w("geoadd", -5),
    r("geodist", -4),
    r("geohash", -2),
    r("geopos", -2),
    w("georadius", -6),
    r("georadius_ro", -6),
    w("georadiusbymember", -5),
    r("georadiusbymember_ro", -5),
    r("geosearch", -7),
    // Streams (@stream).
    w("xack", -4),
    w("xadd", -5),
    w("xautoclaim", -6),
    w("xclaim", -6),
    w("xdel", -3),
    sub("xgroup", true),
    sub("xinfo", false),
    r("xlen", 2),
    r("xpending", -3),
    r("xrange", -4),
    r("xrevrange", -4),
    w("xsetid", -3),
    w("xtrim", -4),
    // Generic keyspace (@keyspace).
    r("dump", 2),
    w("expire", -3),
    w("expireat", -3),
    r("expiretime", 2),
    sub("object", false),
    w("persist", 2),
    w("pexpire", -3),
    w("pexpireat", -3),
    r("pexpiretime", 2),
    r("pttl", 2),
    w("restore", -4),
    w("sort", -2),
    r("sort_ro", -2),
    r("ttl", 2),
    r("type", 2),
    // Split across shards and merged (Envoy command_splitter_impl.cc).
    row("mget", -2, 1, -1, 1, false, Kind::Split(Merge::Mget)),
    row("mset", -3, 1, -1, 2, true, Kind::Split(Merge::Mset)),
    row("del", -2, 1, -1, 1, true, Kind::Split(Merge::SumIntegers)),
    row(
        "unlink",
        -2,
        1,
        -1,
        1,
        true,
        Kind::Split(Merge::SumIntegers),
    ),
    row(
        "exists",
        -2,
        1,
        -1,
        1,
        false,
        Kind::Split(Merge::SumIntegers),
    ),
    row(
        "touch",
        -2,
        1,
        -1,
        1,
        false,
        Kind::Split(Merge::SumIntegers),
    ),
    // Answered by the proxy.
    local("ping", -1, Local::Ping),
    local("echo", 2, Local::Echo),
    local("quit", -1, Local::Quit),
    local("auth", -2, Local::Auth),
    local("select", 2, Local::Select),
];

const N: usize = RAW.len();

/// Copies `RAW` into an array with `id` = row index.
const fn numbered() -> [CommandSpec; N] {
    let mut out = [row("", 0, 0, 0, 0, false, Kind::Keyed); N];
    let mut i = 0;
    while i < N {
        out[i] = RAW[i];
        out[i].id = i as u16;
        i += 1;
    }
    out
}

pub(super) static TABLE: [CommandSpec; N] = numbered();

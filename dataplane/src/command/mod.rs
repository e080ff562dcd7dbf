//! The command table: names, arity, key positions, read/write class and how each command is
//! executed (routed by key, split and merged, or answered locally).
//!
//! Every command and subcommand of Redis 7.0.15's `COMMAND LIST` has a row (366): keyed
//! (routed whole; multi-key ones need their keys on one shard), split, fan-out, SCAN, local,
//! refused with a reason, or a container of `container|sub` rows. Zero-key rows that are
//! Keyed (`*|help`, LOLWUT, FUNCTION LIST, …) go to shard 0. The rows are generated from a real
//! redis-server by `dataplane/command-table/gen_table.py`, where each row's kind is chosen.
//!
//! Sources: Redis 7.0 `COMMAND INFO` data (`src/commands/*.json`), Redis 7.0 `server.c`
//! `processCommand` (error texts), Envoy `redis_proxy` `command_splitter_impl.cc` (split/merge).

use std::sync::OnceLock;

pub mod fanout;
mod introspect;
mod keys;
mod refused;
mod request;
pub use request::Request;
pub mod split;
// Built by const evaluation: an index out of range fails the build, never a request.
#[allow(clippy::indexing_slicing)]
mod table;
mod table_raw;

pub use crate::resp::pubsub::Topic;
pub use keys::{BlockTimeout, block_timeout, is_blocking};
pub use refused::{Reason, refused_reply};

/// True if `spec` only reads, so that a Redis Cluster replica may serve it (`read_policy`).
/// Commands Redis does not flag `readonly` although they do not write themselves — scripts and
/// functions that may write, and PUBLISH — count as writes, so they always reach a primary.
pub fn is_read(spec: &CommandSpec) -> bool {
    !spec.write
        && !matches!(
            spec.name,
            "eval" | "evalsha" | "fcall" | "publish" | "spublish"
        )
}

/// How a command is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Routed whole by its first key; every key (per [`CommandSpec::keys`]) must hash to the same
    /// shard, else `-CROSSSLOT`. A command with zero keys (EVAL with numkeys 0) goes to shard 0.
    Keyed,
    /// Keys are grouped per shard, sent as sub-requests of the same command, and merged.
    Split(Merge),
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: the session's transaction mode, on a leased upstream
    /// connection from WATCH or EXEC on.
    Transaction(Transaction),
    /// Blocks until served or its own timeout (BLPOP, BZPOPMIN, BLMOVE, …): runs alone on a
    /// leased upstream connection to its keys' backend (one backend or `-CROSSSLOT`). XREAD and
    /// XREADGROUP are [`Kind::Keyed`] and block only with `BLOCK` (see [`is_blocking`]).
    Blocking,
    /// SCRIPT KILL, FUNCTION KILL, FUNCTION STATS: about the script a backend may be running,
    /// which Redis serves while it runs; sent to every backend over leased connections (never
    /// queued behind the running script on a shared one), the replies merged as one server's.
    ScriptControl,
    /// CLIENT UNBLOCK: the id is one Respite gave (CLIENT ID); the client it names is unblocked
    /// at the backend its blocking command waits on, over a leased connection of its own.
    ClientUnblock,
    /// Pub/sub: the session's subscriptions (held upstream once per worker and fanned out), and
    /// the commands whose counts Redis gives for the proxy's upstream subscriptions rather than
    /// its clients.
    PubSub(PubSub),
    /// Answered by the proxy itself.
    Local(Local),
    /// Sent unchanged to every shard; the replies are merged.
    FanOut(Merge),
    /// SCAN: the cursor names the shard it continues on (see [`scan`]).
    Scan,
    /// Refused for the given reason: reply [`refused_reply`] (`-ERR 'monitor' is not supported
    /// by respite: <reason>\r\n`, naming the command). The connection stays open.
    Refused(Reason),
    /// A container (`SCRIPT`, `CLIENT`, `OBJECT`, …) resolved by [`resolve`] into the row of its
    /// subcommand (`script|load`). `COMMAND` is a container too but is `Local(Command)`, since
    /// Redis also runs it alone (see [`is_container`]). [`resolve`] never returns this kind.
    Container,
}

/// How the replies of a split command are merged (Envoy `command_splitter_impl.cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// MGET: array, original key order, nils kept, per-key errors inline.
    Mget,
    /// MSET: `+OK` if every part said OK, else `finished with N error(s)`.
    Mset,
    /// DEL/UNLINK/EXISTS/TOUCH: integers summed; any non-integer → `finished with N error(s)`.
    SumIntegers,
    /// FLUSHALL/FLUSHDB/SCRIPT FLUSH: `+OK` if all OK, else the first error.
    AllOk,
    /// DBSIZE: integers summed; an error reply from any shard is passed through.
    Sum,
    /// KEYS: arrays concatenated in shard order.
    Concat,
    /// RANDOMKEY: the first non-nil bulk reply, else nil.
    FirstNonNil,
    /// WAIT: the minimum integer.
    MinInteger,
    /// LASTSAVE: the minimum integer (the oldest save of any shard).
    MinLastSave,
    /// INFO: keyspace and stats summed across shards, other sections from shard 0, plus `# Proxy`.
    Info,
    /// SCRIPT EXISTS: element-wise AND (1 only if every shard has the script).
    AndArrays,
    /// SCRIPT LOAD, FUNCTION LOAD: every shard must give the same reply, which is returned once;
    /// else the first error, else `-ERR shards gave different replies`.
    Same,
    /// PUBSUB CHANNELS, SHARDCHANNELS: arrays joined, each element once, in first-seen order.
    Union,
    /// PUBSUB NUMPAT: the largest integer (each node holds the proxy's patterns).
    MaxInteger,
    /// PUBSUB NUMSUB, SHARDNUMSUB: `[name, count, …]` arrays with the counts summed by position.
    SumPairs,
    /// SCAN's single part: rewrite the cursor of shard `shard` of `shards` (see [`scan`]).
    ScanCursor { shard: u32, shards: u32 },
}

/// The pub/sub commands the session handles itself (Redis `pubsub.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PubSub {
    /// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE.
    Subscribe(Topic),
    /// UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE.
    Unsubscribe(Topic),
    /// PUBLISH, SPUBLISH: routed by the channel like a key; the receiver count is corrected.
    Publish(Topic),
    /// PUBSUB NUMSUB, PUBSUB SHARDNUMSUB: to every node, counts summed and corrected.
    NumSub(Topic),
}

/// The transaction commands (Redis `multi.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transaction {
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
}

/// Commands answered locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    Ping,
    Echo,
    Quit,
    Auth,
    Select,
    Hello,
    /// `CLIENT <sub>` rows carry the subcommand in [`CommandSpec::name`]: `client|setname`,
    /// `client|getname`, `client|id`, `client|no-evict`, `client|reply` (Redis 7.0.15 has no SETINFO/NO-TOUCH;
    /// the other CLIENT subcommands are refused, `client|help` goes to shard 0).
    Client,
    /// `COMMAND [COUNT|INFO|DOCS|LIST|GETKEYS]`, answered from this table by [`command_reply`]
    /// (`command|help` goes to shard 0, `command|getkeysandflags` is refused).
    Command,
    Reset,
    Time,
    /// READONLY / READWRITE: accepted with `+OK`.
    Ok,
    /// `CLUSTER INFO|SLOTS|SHARDS|NODES|MYID|KEYSLOT`: Respite presents itself as a one-node
    /// cluster owning every slot at the address the client connected to, so clients that insist
    /// on cluster mode work through it.
    Cluster,
}

/// Where a command's keys are (Redis 7.0 key specs, reduced to the shapes Redis 7.0 uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySpec {
    /// `first_key`/`last_key`/`step` (legacy range spec; `last_key` negative counts from the end).
    Range,
    /// `numkeys` at argv[`at`], then that many keys starting at argv[`at`+1]; `fixed` keys before
    /// `at` starting at argv[1] (ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE: 1 = the destination).
    /// EVAL/EVALSHA/FCALL (at 2), ZUNION/ZINTER/ZDIFF/SINTERCARD/LMPOP/ZMPOP (at 1).
    NumKeys { at: u8, fixed: u8 },
    /// XREAD/XREADGROUP: the keys are the first half of the arguments after `STREAMS`.
    Streams,
    /// SORT/SORT_RO: argv[1], plus (SORT only) the argument after the last `STORE` (Redis
    /// `sortGetKeys`). GEORADIUS/GEORADIUSBYMEMBER: argv[1], plus the argument after the last
    /// `STORE`/`STOREDIST` from argv[5] on (Redis `georadiusGetKeys`).
    Sort,
}

/// One row of the command table (Redis `COMMAND INFO` conventions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    /// Lowercase canonical name.
    pub name: &'static str,
    /// Dense index in [`COMMANDS`], for per-command stat arrays.
    pub id: u16,
    /// Redis arity: `n` = exactly n args including the name; `-n` = at least n.
    pub arity: i16,
    /// Index of the first key (0 = no key).
    pub first_key: i16,
    /// Index of the last key (negative counts from the end: -1 = last arg).
    pub last_key: i16,
    /// Distance between keys (MSET: 2).
    pub step: i16,
    /// Writes data (drives read_policy and mirroring later).
    pub write: bool,
    pub kind: Kind,
    /// Where the keys are; [`KeySpec::Range`] uses `first_key`/`last_key`/`step`.
    pub keys: KeySpec,
}

impl CommandSpec {
    /// True if `argc` (including the command name) satisfies the arity and, for commands whose
    /// keys run to the last argument in groups (MSET's key/value pairs), the groups are whole —
    /// Redis answers both with the same "wrong number of arguments" error.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let count_ok = if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        };
        count_ok && (self.last_key != -1 || keys_complete(self, argc))
    }
}

/// Every supported command; `COMMANDS[i].id == i`.
pub static COMMANDS: &[CommandSpec] = &table::TABLE;

/// True when command id `cmd` runs a script (EVAL, EVALSHA, FCALL and their `_RO` forms: the
/// keyed rows whose keys follow `numkeys` at argument 2), which may keep a backend busy and
/// silent for long. False for ids out of the table.
#[inline]
pub fn runs_script(cmd: u16) -> bool {
    COMMANDS
        .get(usize::from(cmd))
        .is_some_and(|c| c.kind == Kind::Keyed && c.keys == KeySpec::NumKeys { at: 2, fixed: 0 })
}

/// Size of the lowercase buffer; every command name is shorter, so longer names cannot match.
const MAX_NAME: usize = 32;

/// Slots of the name index: a power of two, about 3× the number of rows, so an open-addressing
/// probe ends after ~1.2 slots on average.
const NAME_SLOTS: usize = 1024;

/// FNV-1a (32-bit) of the ASCII-lowercased `name`, lowercasing into `lower` on the way, so the
/// request path reads the name once.
#[inline]
fn lower_and_hash(name: &[u8], lower: &mut [u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (d, &s) in lower.iter_mut().zip(name) {
        let c = s.to_ascii_lowercase();
        *d = c;
        h = (h ^ u32::from(c)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Open-addressing hash index over the (lowercase) full names: slot = row id + 1, 0 = empty,
/// linear probing. Built once; replaces a binary search whose ~9 string compares per request
/// were a fifth of the proxy's user time at pipeline 16 (bench/NOTES.md).
fn name_index() -> &'static [u16; NAME_SLOTS] {
    static INDEX: OnceLock<Box<[u16; NAME_SLOTS]>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut slots = Box::new([0u16; NAME_SLOTS]);
        let mut scratch = [0u8; MAX_NAME];
        for c in COMMANDS {
            let name = c.name.as_bytes();
            let mut i = lower_and_hash(name, &mut scratch) as usize & (NAME_SLOTS - 1);
            // The table is at most half full, so a free slot is always found.
            while let Some(slot) = slots.get_mut(i) {
                if *slot == 0 {
                    *slot = c.id + 1;
                    break;
                }
                i = (i + 1) & (NAME_SLOTS - 1);
            }
        }
        slots
    })
}

/// Case-insensitive lookup of a command name as a client sends it, without allocating
/// (ASCII-lowercased into a stack buffer while hashing, then one probe of a hash index). Subcommand rows
/// (`script|load`) are not found this way, as in Redis: see [`lookup_fullname`], [`subcommand`].
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.contains(&b'|') {
        return None;
    }
    lookup_fullname(name)
}

/// Case-insensitive lookup by Redis 7 full name (`get`, `script|load`).
pub fn lookup_fullname(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = buf.get_mut(..name.len())?;
    let mut i = lower_and_hash(name, lower) as usize;
    let lower = &*lower;
    let slots = name_index();
    // The table is at most half full, so an empty slot always ends the probe.
    loop {
        i &= NAME_SLOTS - 1;
        let row = usize::from(*slots.get(i)?);
        if row == 0 {
            return None;
        }
        let spec = COMMANDS.get(row - 1)?;
        if spec.name.as_bytes() == lower {
            return Some(spec);
        }
        i += 1;
    }
}

/// Indexes in `args` (args[0] = name) of the keys of a command with `argc` args, per the
/// `first_key`/`last_key`/`step` convention of Redis `COMMAND INFO` (`getKeysUsingLegacyRangeSpec`
/// in Redis 7.0 db.c). Empty when the command has no key or `argc` is too small.
pub fn key_indices(spec: &CommandSpec, argc: usize) -> impl Iterator<Item = usize> + use<> {
    let (first, step) = (spec.first_key, spec.step.max(1));
    let last = if spec.last_key < 0 {
        argc as i64 + i64::from(spec.last_key)
    } else {
        i64::from(spec.last_key).min(argc as i64 - 1)
    };
    let range = if first <= 0 || last < i64::from(first) {
        0..0
    } else {
        i64::from(first)..last + 1
    };
    range.step_by(step as usize).map(|i| i as usize)
}

/// Number of keys of a command with `argc` args (see [`key_indices`]).
pub fn key_count(spec: &CommandSpec, argc: usize) -> usize {
    key_indices(spec, argc).count()
}

/// The routing key: `args[first_key]` (args[0] = name), if the command has one and it is there.
pub fn key_of<'a>(spec: &CommandSpec, args: &[&'a [u8]]) -> Option<&'a [u8]> {
    if spec.first_key <= 0 {
        return None;
    }
    args.get(spec.first_key as usize).copied()
}

/// True if the keys of a split command come in whole groups of `step` (MSET needs key+value
/// pairs; Envoy `MSETRequest::create` answers `wrong number of arguments` otherwise).
pub fn keys_complete(spec: &CommandSpec, argc: usize) -> bool {
    if spec.first_key <= 0 || spec.step <= 1 {
        return true;
    }
    let first = spec.first_key as usize;
    argc >= first && (argc - first).is_multiple_of(spec.step as usize)
}

/// The bytes of an argument up to its first NUL, as C's `%s` prints it.
fn c_str(a: &[u8]) -> &[u8] {
    match a.iter().position(|&b| b == 0) {
        Some(z) => a.get(..z).unwrap_or_default(),
        None => a,
    }
}

/// Redis 7.0's reply to an unknown command (server.c `processCommand`):
/// `-ERR unknown command '<name>', with args beginning with: '<a1>' '<a2>' \r\n`. Args are added
/// as `'%.*s' ` while the args text is shorter than 128 bytes, each cut to what is left of 128;
/// the name is cut to 128 bytes; CR/LF become spaces (`rejectCommandFormat`).
pub fn unknown_command_error(args: &[&[u8]]) -> Vec<u8> {
    let mut text: Vec<u8> = Vec::with_capacity(200);
    for a in args.iter().skip(1) {
        if text.len() >= 128 {
            break;
        }
        let room = 128 - text.len();
        let a = c_str(a);
        text.push(b'\'');
        text.extend_from_slice(a.get(..room.min(a.len())).unwrap_or_default());
        text.extend_from_slice(b"' ");
    }
    let name = c_str(args.first().copied().unwrap_or_default());
    let name = name.get(..name.len().min(128)).unwrap_or_default();
    let mut msg = Vec::with_capacity(64 + name.len() + text.len());
    msg.extend_from_slice(b"ERR unknown command '");
    msg.extend_from_slice(name);
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&text);
    let mut out = Vec::with_capacity(msg.len() + 3);
    crate::resp::encode::error(&mut out, &msg);
    out
}

/// Redis 7.0's arity error (server.c `processCommand`; also Envoy's wording):
/// `-ERR wrong number of arguments for '<name>' command\r\n`.
pub fn arity_error(spec: &CommandSpec) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + spec.name.len());
    out.extend_from_slice(b"-ERR wrong number of arguments for '");
    out.extend_from_slice(spec.name.as_bytes());
    out.extend_from_slice(b"' command\r\n");
    out
}

#[cfg(test)]
mod live_tests;
#[cfg(test)]
mod redis70;
#[cfg(test)]
mod tests;

/// True if `spec` has subcommand rows (`script` → `script|load`, …; also `command`, which
/// Redis also runs alone).
pub fn is_container(spec: &CommandSpec) -> bool {
    spec.kind == Kind::Container || spec.kind == Kind::Local(Local::Command)
}

/// The `container|sub` row (case-insensitive `sub`, no allocation), if there is one.
pub fn subcommand(container: &CommandSpec, sub: &[u8]) -> Option<&'static CommandSpec> {
    let n = container.name.len();
    if sub.contains(&b'|') || n + 1 + sub.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let full = buf.get_mut(..n + 1 + sub.len())?;
    let (head, tail) = full.split_at_mut(n);
    head.copy_from_slice(container.name.as_bytes());
    let (bar, rest) = tail.split_first_mut()?;
    *bar = b'|';
    rest.copy_from_slice(sub);
    lookup_fullname(full)
}

/// Redis 7.0's reply to an unknown subcommand (server.c `processCommand`):
/// `-ERR unknown subcommand '<sub>'. Try <CONTAINER> HELP.\r\n` (`<sub>` as sent, cut at a NUL
/// and to 128 bytes, CR/LF as spaces; the container name uppercased).
pub fn unknown_subcommand_error(container: &[u8], sub: &[u8]) -> Vec<u8> {
    subcommand_error(b"ERR unknown subcommand '", container, sub)
}

/// Redis 7.0's reply to a known subcommand with arguments it does not take
/// (networking.c `addReplySubcommandSyntaxError`): `-ERR unknown subcommand or wrong number of
/// arguments for '<sub>'. Try <CONTAINER> HELP.\r\n`, `<sub>` as for
/// [`unknown_subcommand_error`].
pub fn subcommand_syntax_error(container: &[u8], sub: &[u8]) -> Vec<u8> {
    subcommand_error(
        b"ERR unknown subcommand or wrong number of arguments for '",
        container,
        sub,
    )
}

fn subcommand_error(prefix: &[u8], container: &[u8], sub: &[u8]) -> Vec<u8> {
    let sub = c_str(sub);
    let sub = sub.get(..sub.len().min(128)).unwrap_or_default();
    let mut msg = Vec::with_capacity(prefix.len() + 16 + sub.len() + container.len());
    msg.extend_from_slice(prefix);
    msg.extend_from_slice(sub);
    msg.extend_from_slice(b"'. Try ");
    msg.extend(c_str(container).iter().map(u8::to_ascii_uppercase));
    msg.extend_from_slice(b" HELP.");
    let mut out = Vec::with_capacity(msg.len() + 3);
    crate::resp::encode::error(&mut out, &msg);
    out
}

/// Why [`resolve`] found no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// Not a command: reply with `unknown_command_error` (counts as unsupported).
    Unknown(Vec<u8>),
    /// A command with a bad subcommand or wrong arity: the reply to send.
    Invalid(Vec<u8>),
}

/// Resolves a request (args[0] = name, `arg(i)` = argv[i], `argc` args) to its table row:
/// lookup, container → `container|sub` row, then arity (Redis texts: unknown command, `ERR unknown
/// subcommand 'x'. Try SCRIPT HELP.`, wrong number of arguments).
pub fn resolve<'a>(
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
) -> Result<&'static CommandSpec, ResolveError> {
    let Some(mut spec) = lookup(arg(0)) else {
        let argv: Vec<&[u8]> = (0..argc).map(&arg).collect();
        return Err(ResolveError::Unknown(unknown_command_error(&argv)));
    };
    if argc >= 2 && is_container(spec) {
        match subcommand(spec, arg(1)) {
            Some(sub) => spec = sub,
            None => {
                return Err(ResolveError::Invalid(unknown_subcommand_error(
                    arg(0),
                    arg(1),
                )));
            }
        }
    }
    if !spec.arity_ok(argc) {
        return Err(ResolveError::Invalid(arity_error(spec)));
    }
    Ok(spec)
}

/// Appends to `out` the argv indexes of the request's keys, in order.
///
/// Errors: the reply for a malformed key list, byte-identical to what one Redis 7.0 answers
/// (`ERR Number of keys can't be greater than number of args`, `ERR numkeys should be greater
/// than 0`, `ERR at least 1 input key is needed for 'zunion' command`, …). Where Redis's answer
/// depends on more than the key list (EVALSHA of a short sha, FCALL of a missing function, XREAD
/// without STREAMS, …), no error is returned and no key is added: the request goes to shard 0,
/// which rejects it with its own words.
pub fn keys<'a>(
    spec: &CommandSpec,
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
    out: &mut Vec<usize>,
) -> Result<(), Vec<u8>> {
    keys::keys(spec, argc, &arg, out)
}

/// Reply to `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS name…`,
/// `COMMAND LIST`, `COMMAND GETKEYS …` built from this table (Redis 7.0 reply shapes).
pub fn command_reply<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8], out: &mut Vec<u8>) {
    introspect::command_reply(argc, &arg, out)
}

/// SCAN cursors across shards: the shard index lives in the top 8 bits of the client's cursor and
/// the shard's own cursor in the low 56 bits (Redis cursors of tables under 2^56 buckets fit).
pub mod scan {
    /// Splits a client cursor into (shard, shard cursor); `None` if it is not a number or names a
    /// shard beyond `shards` (→ `-ERR invalid cursor`).
    pub fn decode(cursor: &[u8], shards: usize) -> Option<(usize, u64)> {
        let c: u64 = std::str::from_utf8(cursor).ok()?.parse().ok()?;
        let shard = (c >> 56) as usize;
        (shard < shards).then_some((shard, c & MASK))
    }

    /// The low 56 bits: a shard's own cursor.
    pub const MASK: u64 = (1 << 56) - 1;

    /// The client cursor for `cursor` on `shard` (inverse of [`decode`]). A shard cursor wider
    /// than 56 bits is truncated (Redis cursors of tables under 2^56 buckets fit).
    pub fn encode(shard: usize, cursor: u64) -> u64 {
        ((shard as u64) << 56) | (cursor & MASK)
    }
}

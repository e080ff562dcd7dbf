//! The command table: names, arity, key positions, read/write class and how each command is
//! executed (routed by key, split and merged, or answered locally).
//!
//! CONTRACT (skeleton).

/// How a command is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Routed whole by its first key (`first_key`).
    Keyed,
    /// Keys are grouped per shard, sent as sub-requests of the same command, and merged.
    Split(Merge),
    /// Answered by the proxy itself.
    Local(Local),
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
}

/// Commands answered locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    Ping,
    Echo,
    Quit,
    Auth,
    Select,
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
}

impl CommandSpec {
    /// True if `argc` (including the command name) satisfies the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }
}

/// Every supported command.
pub static COMMANDS: &[CommandSpec] = &[];

/// Case-insensitive lookup, without allocating.
pub fn lookup(_name: &[u8]) -> Option<&'static CommandSpec> {
    None
}

/// Splitting of multi-key commands across shards and merging of their replies.
pub mod split {
    use super::{CommandSpec, Merge};

    /// One sub-request of a split command.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Part {
        /// Shard index returned by `shard_of`.
        pub shard: usize,
        /// The encoded RESP sub-request (same command, this shard's keys [and values]).
        pub request: Vec<u8>,
        /// Ordinal (0-based, in the original request) of each key in this part, in order.
        pub keys: Vec<u32>,
    }

    /// Groups the keys of `args` (args[0] is the command name) by `shard_of(key)`, keeping each
    /// shard's keys in request order; parts are ordered by first appearance.
    pub fn split(
        _spec: &CommandSpec,
        _args: &[&[u8]],
        _shard_of: &mut dyn FnMut(&[u8]) -> usize,
    ) -> Vec<Part> {
        Vec::new()
    }

    /// Merges one reply per part (same order as `parts`) into the client's reply, appended to
    /// `out`. `nkeys` is the number of keys of the original request.
    pub fn merge(
        _merge: Merge,
        _nkeys: usize,
        _parts: &[Part],
        _replies: &[&[u8]],
        _out: &mut Vec<u8>,
    ) {
    }
}

/// Redis 7's unknown-command error (temporary stub until the table lands).
pub fn unknown_command_error(_args: &[&[u8]]) -> Vec<u8> {
    b"-ERR unknown command\r\n".to_vec()
}

/// `-ERR wrong number of arguments for '<name>' command`.
pub fn arity_error(spec: &CommandSpec) -> Vec<u8> {
    format!(
        "-ERR wrong number of arguments for '{}' command\r\n",
        spec.name
    )
    .into_bytes()
}

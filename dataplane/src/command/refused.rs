//! Why a command is refused, and the error line the client gets for it.
//!
//! Rows of many commands share one reason; the reply names the command, as Redis's own error
//! lines do (`ERR unknown command 'x'`), so it is built from the row's name at reply time.

use super::CommandSpec;

/// Why a [`super::Kind::Refused`] row is not served. [`Reason::text`] is the sentence after the
/// colon of the reply ([`refused_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// SYNC, PSYNC, REPLICAOF, FAILOVER, ROLE, …
    Replication,
    /// MONITOR, DEBUG, SHUTDOWN, SAVE, CONFIG, ACL, MODULE, LATENCY, SLOWLOG, MEMORY DOCTOR, …
    Administration,
    /// ASKING and the CLUSTER subcommands the proxy does not answer itself.
    Cluster,
    /// MOVE, SWAPDB.
    Database,
    /// SCRIPT DEBUG.
    LuaDebugger,
    /// MIGRATE.
    Migrate,
    /// COMMAND GETKEYSANDFLAGS.
    KeyFlags,
    /// CLIENT CACHING, TRACKING, TRACKINGINFO, GETREDIR.
    ClientCaching,
    /// CLIENT INFO, LIST, KILL, PAUSE, UNPAUSE, UNBLOCK.
    SharedConnections,
}

impl Reason {
    /// The sentence saying why: lowercase, no final period, no CR or LF.
    pub const fn text(self) -> &'static str {
        match self {
            Reason::Replication => "replication is managed on each Redis server directly",
            Reason::Administration => {
                "server administration must be sent to each Redis server directly"
            }
            Reason::Cluster => "Redis Cluster commands are not exposed by the proxy",
            Reason::Database => "the proxy serves database 0 only",
            Reason::LuaDebugger => "the Lua debugger needs a dedicated upstream connection",
            Reason::Migrate => "it moves keys between servers behind the proxy",
            Reason::KeyFlags => "key flags are not tracked by the proxy",
            Reason::ClientCaching => "client-side caching needs a dedicated upstream connection",
            Reason::SharedConnections => {
                "upstream client connections are shared and owned by the proxy"
            }
        }
    }
}

/// The reply to a refused row: `-ERR '<name>' is not supported by respite: <reason>\r\n`, with
/// the row's full name (`client|kill`). Names and reasons hold no CR or LF, so the parts are
/// copied as they are. The connection stays open.
pub fn refused_reply(spec: &CommandSpec, reason: Reason) -> Vec<u8> {
    let parts: [&[u8]; 5] = [
        b"-ERR '",
        spec.name.as_bytes(),
        b"' is not supported by respite: ",
        reason.text().as_bytes(),
        b"\r\n",
    ];
    parts.concat()
}

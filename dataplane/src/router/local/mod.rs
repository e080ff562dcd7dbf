//! Commands about the connection itself, answered by the proxy: PING, ECHO, QUIT, AUTH, SELECT,
//! HELLO, CLIENT, COMMAND, CLUSTER, RESET, TIME, READONLY/READWRITE. Reply texts are Redis 7.0's
//! (`networking.c`, `server.c`, `acl.c`), byte for byte. AUTH and `HELLO … AUTH` answer as a
//! Redis 7.0 whose `default` user has the listener's `downstream_auth_passwords` (none: `nopass`)
//! would, or, with `downstream_auth_username`, as one with that user and the `default` user off;
//! failures are counted and throttled ([`auth`]).

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

pub mod auth;
mod cluster;

use crate::command::{self, CommandSpec, Local};
use crate::config::{ListenerConfig, ProtocolVersion};
use crate::resp::{encode, string2ll};

/// The Redis version whose command surface Respite serves, reported by HELLO.
const REDIS_VERSION: &[u8] = b"7.0.0";

/// Per-connection state that local commands read and change.
pub struct ConnState {
    /// CLIENT ID: unique within the process.
    pub client_id: u64,
    /// The client may run commands: it authenticated, or the listener has no password.
    pub authed: bool,
    /// CLIENT SETNAME / HELLO SETNAME; `None` when unset or set to the empty name.
    pub name: Option<Vec<u8>>,
    /// QUIT was received: stop reading, close after the replies.
    pub quit: bool,
    /// The client chose RESP3 with `HELLO 3`: its requests go to RESP3 upstream connections and
    /// their replies are forwarded as they are.
    pub resp3: bool,
    /// The address the client connected to (what `CLUSTER SLOTS` reports as the node).
    pub local_addr: std::net::SocketAddr,
    /// The client has a channel, pattern or shard channel: a RESP2 client is in Redis's
    /// subscribed mode, where PING answers `[pong, arg]`.
    pub subscribed: bool,
    /// `CLIENT REPLY`: which replies the client reads.
    pub replies: Replies,
    /// The client's address, which AUTH failures are counted against ([`auth::SourceThrottle`]).
    pub peer: Option<IpAddr>,
    /// This connection's AUTH failures and back-off ([`auth::PER_CONNECTION`]).
    pub auth_failures: auth::Backoff,
    /// When the authentication an external auth service gave ends (its `expiration`, with
    /// `enable_auth_expiration`); `None`: it does not.
    pub auth_expires: Option<SystemTime>,
}

/// What a local answer did that the listener's stats count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to count beyond the command itself.
    Answered,
    /// AUTH or `HELLO … AUTH` with wrong credentials (`downstream_auth_failure`).
    AuthFailed,
    /// AUTH or `HELLO … AUTH` refused unchecked during a back-off (`downstream_auth_throttled`).
    AuthThrottled,
}

/// Which replies a client reads (Redis `CLIENT REPLY ON|OFF|SKIP`). Pub/sub frames
/// (confirmations and messages) are not replies: they are always written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replies {
    /// Every reply.
    #[default]
    On,
    /// None, until `CLIENT REPLY ON`.
    Off,
    /// Not the next command's (set by `CLIENT REPLY SKIP`).
    SkipNext,
}

impl Replies {
    /// Whether the reply of the command now starting is dropped; moves past a SKIP.
    #[inline]
    pub fn silences_next_command(&mut self) -> bool {
        match *self {
            Replies::On => false,
            Replies::Off => true,
            Replies::SkipNext => {
                *self = Replies::On;
                true
            }
        }
    }
}

impl ConnState {
    /// A fresh connection of a listener from `peer`: authenticated when no password is
    /// configured.
    pub fn new(
        client_id: u64,
        listener: &ListenerConfig,
        local_addr: Option<std::net::SocketAddr>,
        peer: Option<IpAddr>,
    ) -> ConnState {
        ConnState {
            local_addr: local_addr.unwrap_or(listener.address),
            client_id,
            authed: open_by_default(listener),
            name: None,
            quit: false,
            resp3: false,
            subscribed: false,
            replies: Replies::On,
            peer,
            auth_failures: auth::Backoff::default(),
            auth_expires: None,
        }
    }
}

/// A new (or RESET) connection of `listener` may run commands: no password and no external
/// auth service to check one.
fn open_by_default(listener: &ListenerConfig) -> bool {
    listener.downstream_auth_passwords.is_empty() && listener.external_auth.is_none()
}

/// Appends the reply to a local command to `out`; `listener` is the config of the listener the
/// client reached (its credentials), `conn` the connection's state, which AUTH, HELLO, CLIENT,
/// QUIT and RESET change. Returns what the stats count of it.
pub fn answer<'a>(
    conn: &mut ConnState,
    listener: &ListenerConfig,
    spec: &CommandSpec,
    local: Local,
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
    out: &mut Vec<u8>,
) -> Outcome {
    match local {
        Local::Auth => return auth(conn, listener, argc, &arg, out),
        Local::Hello => return hello(conn, listener, argc, &arg, out),
        // Subscribed RESP2 clients read PING's answer among messages (Redis `pingCommand`).
        Local::Ping if conn.subscribed && !conn.resp3 && argc <= 2 => {
            encode::array_header(out, 2);
            encode::bulk(out, b"pong");
            encode::bulk(out, if argc == 2 { arg(1) } else { b"" });
        }
        Local::Ping => match argc {
            1 => out.extend_from_slice(b"+PONG\r\n"),
            2 => encode::bulk(out, arg(1)),
            _ => out.extend_from_slice(&command::arity_error(spec)),
        },
        Local::Echo => encode::bulk(out, arg(1)),
        Local::Quit => {
            out.extend_from_slice(b"+OK\r\n");
            conn.quit = true;
        }
        // A cluster's `db` is the client's database: SELECT of it is a no-op (config/credentials.rs
        // `listener_db`), any other is refused rather than silently served from it.
        Local::Select => match string2ll(arg(1)) {
            Some(n) if listener.select_db.is_some_and(|d| i64::from(d) == n) => {
                out.extend_from_slice(b"+OK\r\n")
            }
            Some(_) => out.extend_from_slice(b"-ERR DB index is out of range\r\n"),
            None => out.extend_from_slice(b"-ERR value is not an integer or out of range\r\n"),
        },
        Local::Client => client(conn, spec, argc, &arg, out),
        Local::Command => command::command_reply(argc, arg, out),
        Local::Cluster => cluster::answer(spec.name, arg, conn.local_addr, conn.resp3, out),
        Local::Reset => {
            conn.replies = Replies::On;
            conn.name = None;
            conn.resp3 = false;
            conn.authed = open_by_default(listener);
            conn.auth_expires = None;
            out.extend_from_slice(b"+RESET\r\n");
        }
        Local::Time => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            encode::array_header(out, 2);
            encode::bulk(out, now.as_secs().to_string().as_bytes());
            encode::bulk(out, now.subsec_micros().to_string().as_bytes());
        }
        Local::Ok => out.extend_from_slice(b"+OK\r\n"),
    }
    Outcome::Answered
}

/// Redis 7.0's reply to wrong credentials, AUTH's and HELLO's alike (`acl.c`).
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

/// Checks `user`/`password` (a password alone names Redis's `default` user) against `cfg`,
/// through the throttle; on success the connection is authenticated. Writes only the failure's
/// reply, so AUTH answers `+OK` and HELLO its map on success.
fn authenticate(
    conn: &mut ConnState,
    cfg: &ListenerConfig,
    user: Option<&[u8]>,
    password: &[u8],
    out: &mut Vec<u8>,
) -> Outcome {
    if cfg.external_auth.is_some() {
        // The session sends every AUTH to the service; one that reached here is refused rather
        // than checked against no password (which accepts any).
        out.extend_from_slice(WRONGPASS);
        return Outcome::AuthFailed;
    }
    if cfg.downstream_auth_passwords.is_empty() {
        // Redis's `default` user with `nopass`: any password is right for it, and no other
        // user exists.
        return if user.is_none_or(|u| u == b"default") {
            conn.authed = true;
            Outcome::Answered
        } else {
            out.extend_from_slice(WRONGPASS);
            Outcome::AuthFailed
        };
    }
    let sources = &*auth::SOURCES;
    let now = sources.now_ms();
    let source = conn.peer.map(|ip| (ip, sources.state(ip)));
    if conn.auth_failures.blocked(now) || source.is_some_and(|(_, s)| s.blocked(now)) {
        out.extend_from_slice(auth::THROTTLED);
        return Outcome::AuthThrottled;
    }
    if auth::credentials_ok(cfg, user, password) {
        conn.authed = true;
        conn.auth_failures = auth::Backoff::default();
        return Outcome::Answered;
    }
    conn.auth_failures = conn.auth_failures.failed(now, &auth::PER_CONNECTION);
    if let Some((ip, _)) = source {
        sources.failed(ip, now);
    }
    out.extend_from_slice(WRONGPASS);
    Outcome::AuthFailed
}

/// `AUTH [username] password` (Redis 7.0 `authCommand`).
fn auth<'a>(
    conn: &mut ConnState,
    cfg: &ListenerConfig,
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
    out: &mut Vec<u8>,
) -> Outcome {
    let (user, password) = match argc {
        2 => (None, arg(1)),
        3 => (Some(arg(1)), arg(2)),
        _ => {
            out.extend_from_slice(b"-ERR syntax error\r\n");
            return Outcome::Answered;
        }
    };
    if user.is_none() && cfg.downstream_auth_passwords.is_empty() {
        out.extend_from_slice(
            b"-ERR AUTH <password> called without any password configured for the default \
              user. Are you sure your configuration is correct?\r\n",
        );
        return Outcome::Answered;
    }
    let outcome = authenticate(conn, cfg, user, password, out);
    if outcome == Outcome::Answered {
        out.extend_from_slice(b"+OK\r\n");
    }
    outcome
}

/// Redis's reply to a protocol version it does not serve; Envoy's to a request before the
/// `HELLO 3` a RESP3 listener requires.
pub const NOPROTO: &[u8] = b"-NOPROTO unsupported protocol version\r\n";

/// Whether a listener serves RESP version `proto` (2 or 3): any of them without
/// `protocol_version`, only its own with one (Envoy matches `HELLO`'s version, or the
/// connection's current one for a bare `HELLO`, exactly against it).
fn version_allowed(cfg: &ListenerConfig, proto: i64) -> bool {
    match cfg.protocol_version {
        None => true,
        Some(ProtocolVersion::Resp2) => proto == 2,
        Some(ProtocolVersion::Resp3) => proto == 3,
    }
}

/// Whether `HELLO` with first argument `protover` (`None`: a bare `HELLO`) asks for a version
/// the listener refuses with [`NOPROTO`]; an argument that is not 2 or 3 is left to [`answer`].
pub fn hello_version_refused(
    conn: &ConnState,
    cfg: &ListenerConfig,
    protover: Option<&[u8]>,
) -> bool {
    let proto = match protover.map(string2ll) {
        None => {
            if conn.resp3 {
                3
            } else {
                2
            }
        }
        Some(Some(v @ (2 | 3))) => v,
        Some(_) => return false,
    };
    !version_allowed(cfg, proto)
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]` (Redis 7.0 `helloCommand`).
/// RESP2 and RESP3: a RESP3 session is served by RESP3 upstream connections, so replies keep
/// their RESP3 types (maps, doubles, nulls) byte for byte.
fn hello<'a>(
    conn: &mut ConnState,
    cfg: &ListenerConfig,
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
    out: &mut Vec<u8>,
) -> Outcome {
    let mut proto = if conn.resp3 { 3 } else { 2 };
    if argc >= 2 {
        match string2ll(arg(1)) {
            Some(v @ (2 | 3)) => proto = v,
            Some(_) => {
                out.extend_from_slice(NOPROTO);
                return Outcome::Answered;
            }
            None => {
                out.extend_from_slice(
                    b"-ERR Protocol version is not an integer or out of range\r\n",
                );
                return Outcome::Answered;
            }
        }
    }
    if !version_allowed(cfg, proto) {
        out.extend_from_slice(NOPROTO);
        return Outcome::Answered;
    }
    let mut i = 2;
    let mut auth: Option<(&[u8], &[u8])> = None;
    let mut name: Option<&[u8]> = None;
    while i < argc {
        let opt = arg(i).to_ascii_lowercase();
        let more = argc - i - 1;
        if opt == b"auth" && more >= 2 {
            auth = Some((arg(i + 1), arg(i + 2)));
            i += 3;
        } else if opt == b"setname" && more >= 1 {
            name = Some(arg(i + 1));
            i += 2;
        } else {
            out.extend_from_slice(b"-ERR Syntax error in HELLO option '");
            out.extend(arg(i).iter().filter(|b| !matches!(b, b'\r' | b'\n')));
            out.extend_from_slice(b"'\r\n");
            return Outcome::Answered;
        }
    }
    if let Some((user, password)) = auth {
        let outcome = authenticate(conn, cfg, Some(user), password, out);
        if outcome != Outcome::Answered {
            return outcome;
        }
    }
    if !conn.authed {
        out.extend_from_slice(
            b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
              HELLO AUTH <user> <pass> option can be used to authenticate the client and select \
              the RESP protocol version at the same time\r\n",
        );
        return Outcome::Answered;
    }
    if let Some(n) = name {
        if !valid_name(n) {
            out.extend_from_slice(INVALID_NAME);
            return Outcome::Answered;
        }
        conn.name = (!n.is_empty()).then(|| n.to_vec());
    }
    conn.resp3 = proto == 3;
    if conn.resp3 {
        // RESP3 map of 7 pairs.
        out.extend_from_slice(b"%7\r\n");
    } else {
        encode::array_header(out, 14);
    }
    encode::bulk(out, b"server");
    encode::bulk(out, b"redis");
    encode::bulk(out, b"version");
    encode::bulk(out, REDIS_VERSION);
    encode::bulk(out, b"proto");
    encode::integer(out, proto);
    encode::bulk(out, b"id");
    encode::integer(out, conn.client_id as i64);
    encode::bulk(out, b"mode");
    encode::bulk(out, b"standalone");
    encode::bulk(out, b"role");
    encode::bulk(out, b"master");
    encode::bulk(out, b"modules");
    encode::array_header(out, 0);
    Outcome::Answered
}

const INVALID_NAME: &[u8] =
    b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n";

/// Redis accepts names of printable ASCII without spaces (`validateClientName`).
fn valid_name(n: &[u8]) -> bool {
    n.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// The `CLIENT` subcommands answered locally; `spec.name` is `client|<sub>`.
fn client<'a>(
    conn: &mut ConnState,
    spec: &CommandSpec,
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
    out: &mut Vec<u8>,
) {
    let sub = spec.name.strip_prefix("client|").unwrap_or(spec.name);
    match sub {
        "setname" => {
            let n = arg(2);
            if !valid_name(n) {
                out.extend_from_slice(INVALID_NAME);
            } else {
                conn.name = (!n.is_empty()).then(|| n.to_vec());
                out.extend_from_slice(b"+OK\r\n");
            }
        }
        "getname" => match &conn.name {
            Some(n) => encode::bulk(out, n),
            None if conn.resp3 => out.extend_from_slice(b"_\r\n"),
            None => encode::nil(out),
        },
        "id" => encode::integer(out, conn.client_id as i64),
        "setinfo" => {
            let attr = arg(2).to_ascii_lowercase();
            if attr == b"lib-name" || attr == b"lib-ver" {
                out.extend_from_slice(b"+OK\r\n");
            } else {
                out.extend_from_slice(b"-ERR Unrecognized option '");
                out.extend(arg(2).iter().filter(|b| !matches!(b, b'\r' | b'\n')));
                out.extend_from_slice(b"'\r\n");
            }
        }
        // Redis `clientCommand`: ON answers +OK; OFF and SKIP answer nothing.
        "reply" => match arg(2).to_ascii_lowercase().as_slice() {
            b"on" => {
                conn.replies = Replies::On;
                out.extend_from_slice(b"+OK\r\n");
            }
            b"off" => conn.replies = Replies::Off,
            b"skip" if conn.replies == Replies::Off => {}
            b"skip" => conn.replies = Replies::SkipNext,
            _ => out.extend_from_slice(b"-ERR syntax error\r\n"),
        },
        "no-evict" | "no-touch" => {
            let v = arg(2).to_ascii_lowercase();
            if argc == 3 && (v == b"on" || v == b"off") {
                out.extend_from_slice(b"+OK\r\n");
            } else {
                out.extend_from_slice(b"-ERR syntax error\r\n");
            }
        }
        _ => {
            let mut msg = Vec::new();
            msg.extend_from_slice(b"ERR 'client ");
            msg.extend_from_slice(sub.as_bytes());
            msg.extend_from_slice(b"' is not supported by respite");
            encode::error(out, &msg);
        }
    }
}

#[cfg(test)]
mod tests;

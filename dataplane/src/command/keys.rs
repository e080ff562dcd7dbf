//! Key positions of movable-key commands (Redis 7.0 `db.c`: `evalGetKeys`,
//! `zunionInterDiffGetKeys`, `sintercardGetKeys`, `lmpopGetKeys`, `xreadGetKeys`, `sortGetKeys`,
//! `georadiusGetKeys`) and the numkeys errors the commands themselves answer (`eval.c`,
//! `t_zset.c`, `t_set.c`, `t_list.c`).

use super::{CommandSpec, KeySpec, key_indices};
use crate::resp::{encode, string2ll};

fn err(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 3);
    encode::error(&mut out, msg);
    out
}

const NOT_INTEGER: &[u8] = b"ERR value is not an integer or out of range";
const SYNTAX: &[u8] = b"ERR syntax error";

pub(super) fn keys<'a>(
    spec: &CommandSpec,
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
    out: &mut Vec<usize>,
) -> Result<(), Vec<u8>> {
    match spec.keys {
        KeySpec::Range => out.extend(key_indices(spec, argc)),
        KeySpec::NumKeys { at, fixed } => numkeys(spec, usize::from(at), fixed, argc, arg, out)?,
        KeySpec::Streams => {
            if let Some((from, n)) = streams(argc, arg).1 {
                out.extend(from..from + n);
            }
        }
        KeySpec::Sort => {
            if argc >= 2 {
                out.push(1);
            }
            let store = match spec.name {
                "sort" => sort_store(argc, arg),
                "georadius" | "georadiusbymember" => geo_store(argc, arg),
                _ => None,
            };
            out.extend(store);
        }
    }
    Ok(())
}

fn numkeys<'a>(
    spec: &CommandSpec,
    at: usize,
    fixed: u8,
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
    out: &mut Vec<usize>,
) -> Result<(), Vec<u8>> {
    if argc <= at {
        return Ok(());
    }
    let parsed = string2ll(arg(at));
    // Arguments after numkeys.
    let room = (argc - at - 1) as i64;
    let n = match spec.name {
        // eval.c evalGenericCommand: checked first (EVALSHA: after its 40-char sha check).
        "eval" | "eval_ro" | "evalsha" | "evalsha_ro" => {
            if spec.name.starts_with("evalsha") && arg(1).len() != 40 {
                // NOSCRIPT comes first: a bad numkeys goes to a shard, which answers it.
                if let Some(n) = parsed.filter(|n| (0..=room).contains(n)) {
                    out.extend(at + 1..at + 1 + n as usize);
                }
                return Ok(());
            }
            let n = parsed.ok_or_else(|| err(NOT_INTEGER))?;
            if n > room {
                return Err(err(
                    b"ERR Number of keys can't be greater than number of args",
                ));
            }
            if n < 0 {
                return Err(err(b"ERR Number of keys can't be negative"));
            }
            n
        }
        // FCALL looks the function up before numkeys: a bad numkeys goes to a shard.
        "fcall" | "fcall_ro" => match parsed {
            Some(n) if (0..=room).contains(&n) => n,
            _ => return Ok(()),
        },
        // t_set.c sinterCardCommand.
        "sintercard" => {
            let n = parsed
                .filter(|&n| n >= 1)
                .ok_or_else(|| err(b"ERR numkeys should be greater than 0"))?;
            if n > room {
                return Err(err(
                    b"ERR Number of keys can't be greater than number of args",
                ));
            }
            n
        }
        // BLMPOP/BZMPOP check their timeout before numkeys: a bad numkeys (no keys found here)
        // goes to a backend, which answers both errors in Redis's order at once.
        "blmpop" | "bzmpop" => match parsed {
            Some(n) if n >= 1 && n < room => n,
            _ => return Ok(()),
        },
        // t_list.c lmpopGenericCommand, t_zset.c zmpopGenericCommand: the direction follows.
        "lmpop" | "zmpop" => {
            let n = parsed
                .filter(|&n| n >= 1)
                .ok_or_else(|| err(b"ERR numkeys should be greater than 0"))?;
            if n >= room {
                return Err(err(SYNTAX));
            }
            n
        }
        // t_zset.c zunionInterDiffGenericCommand (zunion/zinter/zdiff[store], zintercard).
        _ => {
            let n = parsed.ok_or_else(|| err(NOT_INTEGER))?;
            if n < 1 {
                let mut msg = b"ERR at least 1 input key is needed for '".to_vec();
                msg.extend_from_slice(spec.name.as_bytes());
                msg.extend_from_slice(b"' command");
                return Err(err(&msg));
            }
            if n > room {
                return Err(err(SYNTAX));
            }
            n
        }
    };
    out.extend(1..=usize::from(fixed));
    out.extend(at + 1..at + 1 + n as usize);
    Ok(())
}

/// Redis `xreadGetKeys`: (the argument after the last BLOCK, Some((first key, number of keys)))
/// — `None` on a syntax error (no STREAMS, or an odd number of arguments after it).
fn streams<'a>(
    argc: usize,
    arg: &impl Fn(usize) -> &'a [u8],
) -> (Option<usize>, Option<(usize, usize)>) {
    let mut block = None;
    let mut i = 1;
    while i < argc {
        let a = arg(i);
        if a.eq_ignore_ascii_case(b"block") {
            block = Some(i + 1);
            i += 1;
        } else if a.eq_ignore_ascii_case(b"count") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"group") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"noack") {
        } else if a.eq_ignore_ascii_case(b"streams") {
            let num = argc - i - 1;
            if num == 0 || !num.is_multiple_of(2) {
                return (block, None);
            }
            return (block, Some((i + 1, num / 2)));
        } else {
            break;
        }
        i += 1;
    }
    (block, None)
}

/// True for a request that may block at the backend: a [`super::Kind::Blocking`] row, or
/// XREAD/XREADGROUP with a `BLOCK` option. It cannot share a pipelined upstream connection.
#[inline]
pub fn is_blocking<'a>(spec: &CommandSpec, argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> bool {
    spec.kind == super::Kind::Blocking
        || (spec.keys == KeySpec::Streams && streams(argc, &arg).0.is_some())
}

/// A century in seconds: blocking timeouts longer than this count as "until served" (an
/// `Instant` that far away may not exist).
const CENTURY_SECS: f64 = 100.0 * 365.25 * 86_400.0;

/// How long a blocking request may block at the backend (its own timeout argument).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BlockTimeout {
    /// Timeout 0: until served.
    Forever,
    /// This long; `at` is the argument holding it and `millis` says whether it counts
    /// milliseconds (XREAD … BLOCK) or seconds (the list and sorted-set commands, decimals
    /// allowed since Redis 6).
    For {
        wait: std::time::Duration,
        at: usize,
        millis: bool,
    },
    /// Not a valid timeout: the backend answers the error at once.
    Invalid,
}

/// The timeout argument of blocking request `spec` (Redis 7.0 `blocking.c`
/// `getTimeoutFromObjectOrReply`: seconds as a double for BLPOP & co., milliseconds as an
/// integer for XREAD's BLOCK; negative is an error).
pub fn block_timeout<'a>(
    spec: &CommandSpec,
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
) -> BlockTimeout {
    let (at, millis) = match spec.name {
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => (argc.saturating_sub(1), false),
        "brpoplpush" => (3, false),
        "blmove" => (5, false),
        "blmpop" | "bzmpop" => (1, false),
        "xread" | "xreadgroup" => match streams(argc, &arg).0 {
            Some(i) => (i, true),
            None => return BlockTimeout::Invalid,
        },
        _ => return BlockTimeout::Invalid,
    };
    if at == 0 || at >= argc {
        return BlockTimeout::Invalid;
    }
    let Some(text) = std::str::from_utf8(arg(at)).ok() else {
        return BlockTimeout::Invalid;
    };
    let seconds = if millis {
        match text.parse::<i64>() {
            Ok(ms) if ms >= 0 => ms as f64 / 1000.0,
            _ => return BlockTimeout::Invalid,
        }
    } else {
        match text.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => s,
            _ => return BlockTimeout::Invalid,
        }
    };
    // Redis refuses what passes LLONG_MAX milliseconds from now ("timeout is out of range").
    if seconds > 9.0e15 {
        return BlockTimeout::Invalid;
    }
    // 0 blocks until served; so, for every timer here, does anything over a century.
    if seconds == 0.0 || seconds > CENTURY_SECS {
        return BlockTimeout::Forever;
    }
    // Redis keeps milliseconds: a timeout under 1 ms is 0 ms and still blocks (and times out
    // at once); years-long timeouts stay representable.
    match std::time::Duration::try_from_secs_f64(seconds) {
        Ok(wait) => BlockTimeout::For { wait, at, millis },
        Err(_) => BlockTimeout::Invalid,
    }
}

/// Redis `sortGetKeys`: the argument after the last STORE, skipping LIMIT's two and GET's and
/// BY's one argument.
fn sort_store<'a>(argc: usize, arg: &impl Fn(usize) -> &'a [u8]) -> Option<usize> {
    let mut store = None;
    let mut i = 2;
    while i < argc {
        let a = arg(i);
        if a.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"store") && i + 1 < argc {
            store = Some(i + 1);
        } else if a.eq_ignore_ascii_case(b"get") || a.eq_ignore_ascii_case(b"by") {
            i += 1;
        }
        i += 1;
    }
    store
}

/// Redis `georadiusGetKeys`: the argument after the last STORE/STOREDIST, from argv[5] on.
fn geo_store<'a>(argc: usize, arg: &impl Fn(usize) -> &'a [u8]) -> Option<usize> {
    let mut store = None;
    let mut i = 5;
    while i < argc {
        let a = arg(i);
        if (a.eq_ignore_ascii_case(b"store") || a.eq_ignore_ascii_case(b"storedist"))
            && i + 1 < argc
        {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    store
}

//! The sampled access log (`[listeners.access_log]`): one JSON object per line, written by one
//! thread per process, off the workers.
//!
//! A worker sends a finished [`Record`] through a bounded channel ([`CHANNEL_CAPACITY`]
//! records); when the channel is full the record is dropped and the caller counts
//! `redis.<stat_prefix>.access_log_dropped`: a slow disk never slows requests.
//!
//! The writer opens each path on its first record (append mode, created if missing; `"stderr"`
//! is the process's standard error). A path that cannot be opened is not a config error (the
//! config loader opens no files): the writer logs an ERROR, drops that path's records, and tries
//! again at most every [`REOPEN_FAILED_EVERY`]. Lines are buffered and flushed whenever the
//! channel runs empty, and at least every [`FLUSH_EVERY`].
//!
//! Rotation: every applied config (SIGHUP reload or push) makes the writer close its files and
//! reopen them on the next record, so a changed path takes effect at once and logrotate's
//! `create` mode works with a `postrotate` SIGHUP; `copytruncate` works without it, since the
//! files are opened with `O_APPEND`. A file no record was written to for [`CLOSE_IDLE_AFTER`] is
//! closed.
//!
//! Line shape (keys in this order):
//! `{"start_time":"2026-11-30T02:39:32.123Z","listener":"<stat_prefix>","downstream":"ip:port",
//! "command":"get","key":"<escaped, cut to 100 bytes>","status":"ok"|"error","reply_bytes":N,
//! "duration_us":N}`. `start_time` is when the request was parsed (UTC, ms),
//! `duration_us` from then until its reply was complete and queued for the client;
//! `downstream` is `"-"` when unknown; the key is escaped as in
//! [`crate::stats::hotkeys::escape_key`] and then as a JSON string.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::stats::hotkeys::{LOGGED_KEY_BYTES, escape_key};
use crate::stats::log_limit::log_limited;

/// Records that may wait for the writer before new ones are dropped.
pub const CHANNEL_CAPACITY: usize = 16 * 1024;
/// Buffered lines reach the file at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// A path that failed to open is tried again at most this often.
pub const REOPEN_FAILED_EVERY: Duration = Duration::from_secs(10);
/// A file without records for this long is closed.
pub const CLOSE_IDLE_AFTER: Duration = Duration::from_secs(60);

/// One access log line, filled by the worker, formatted by the writer.
#[derive(Debug, Clone)]
pub struct Record {
    /// Where it goes: a file path or `"stderr"`.
    pub path: Arc<str>,
    /// The listener's `stat_prefix`.
    pub listener: Arc<str>,
    /// When the request was parsed, milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
    /// The client's address, when known.
    pub downstream: Option<SocketAddr>,
    /// The command name, lowercase (`"unknown"` for commands not in the table).
    pub command: &'static str,
    /// The request's first key, at most [`LOGGED_KEY_BYTES`] bytes (empty: none).
    pub key: Vec<u8>,
    /// The reply was not an error (for a split command: no part was).
    pub ok: bool,
    /// Size of the reply sent to the client.
    pub reply_bytes: usize,
    /// From parse to reply complete, microseconds.
    pub duration_us: u64,
}

static SENDER: OnceLock<SyncSender<Box<Record>>> = OnceLock::new();
static REOPEN: AtomicBool = AtomicBool::new(false);

/// Starts the writer thread if it is not running, and asks it to reopen its files (called when a
/// config with an access log is applied).
pub fn start() {
    SENDER.get_or_init(|| {
        let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
        let spawned = std::thread::Builder::new()
            .name("respite-access-log".to_owned())
            .spawn(move || write_loop(&rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "access log: cannot start the writer thread; access log off");
        }
        tx
    });
    REOPEN.store(true, Ordering::Relaxed);
}

/// Queues `record` for the writer without blocking. `Err(record)` when the channel is full or
/// the writer is not running: the caller counts the drop.
pub fn send(record: Box<Record>) -> Result<(), Box<Record>> {
    let Some(tx) = SENDER.get() else {
        return Err(record);
    };
    tx.try_send(record).map_err(|e| match e {
        TrySendError::Full(r) | TrySendError::Disconnected(r) => r,
    })
}

enum Out {
    Stderr(io::Stderr),
    File(BufWriter<File>),
}

impl Out {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Out::Stderr(e) => e,
            Out::File(f) => f,
        }
    }
}

struct Dest {
    /// `None`: opening failed at `last_used` (retried after [`REOPEN_FAILED_EVERY`]).
    out: Option<Out>,
    last_used: Instant,
    dirty: bool,
    /// Opening failed at `last_used`: wait [`REOPEN_FAILED_EVERY`] before the next try.
    failed: bool,
}

fn open(path: &str) -> io::Result<Out> {
    if path == "stderr" {
        return Ok(Out::Stderr(io::stderr()));
    }
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(Out::File(BufWriter::with_capacity(64 * 1024, f)))
}

fn write_loop(rx: &Receiver<Box<Record>>) {
    let mut dests: HashMap<Arc<str>, Dest> = HashMap::new();
    let mut line = String::with_capacity(256);
    let mut last_flush = Instant::now();
    loop {
        if REOPEN.swap(false, Ordering::Relaxed) {
            flush_all(&mut dests);
            dests.clear();
        }
        let first = match rx.recv_timeout(FLUSH_EVERY) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                flush_all(&mut dests);
                return;
            }
        };
        let mut next = first;
        let mut n = 0u32;
        while let Some(r) = next {
            write_one(&mut dests, &r, &mut line);
            n = n.wrapping_add(1);
            // A channel that never runs empty still reaches the file every FLUSH_EVERY.
            if n.is_multiple_of(1024) && last_flush.elapsed() >= FLUSH_EVERY {
                flush_all(&mut dests);
                last_flush = Instant::now();
            }
            next = rx.try_recv().ok();
        }
        // The channel is empty: flush, so a quiet log is on disk within a moment.
        flush_all(&mut dests);
        let now = Instant::now();
        last_flush = now;
        dests.retain(|_, d| now.saturating_duration_since(d.last_used) < CLOSE_IDLE_AFTER);
    }
}

fn flush_all(dests: &mut HashMap<Arc<str>, Dest>) {
    for (path, d) in dests.iter_mut() {
        if !d.dirty {
            continue;
        }
        d.dirty = false;
        if let Some(out) = &mut d.out
            && let Err(e) = out.writer().flush()
        {
            // A full disk fails every line: one log line per window.
            log_limited!(ERROR, "access log: write failed"; path = %path, error = %e);
        }
    }
}

fn write_one(dests: &mut HashMap<Arc<str>, Dest>, r: &Record, line: &mut String) {
    let now = Instant::now();
    let d = dests.entry(r.path.clone()).or_insert_with(|| Dest {
        out: None,
        last_used: now,
        dirty: false,
        failed: false,
    });
    if d.out.is_none() {
        // Instant has no "long ago" (it counts from boot): a flag says whether to wait.
        if d.failed && now.saturating_duration_since(d.last_used) < REOPEN_FAILED_EVERY {
            return;
        }
        match open(&r.path) {
            Ok(out) => {
                d.out = Some(out);
                d.failed = false;
            }
            Err(e) => {
                tracing::error!(
                    path = %r.path, error = %e,
                    "access log: cannot open; its lines are dropped (retried every 10s)"
                );
                d.last_used = now;
                d.failed = true;
                return;
            }
        }
    }
    d.last_used = now;
    line.clear();
    format_line(r, line);
    if let Some(out) = &mut d.out
        && let Err(e) = out.writer().write_all(line.as_bytes())
    {
        log_limited!(ERROR, "access log: write failed"; path = %r.path, error = %e);
    }
    d.dirty = true;
}

/// Appends `r` as one JSON line (with its `\n`) to `out`.
pub fn format_line(r: &Record, out: &mut String) {
    use std::fmt::Write as _;
    out.push_str("{\"start_time\":\"");
    rfc3339_ms(r.start_unix_ms, out);
    out.push_str("\",\"listener\":");
    json_str(&r.listener, out);
    out.push_str(",\"downstream\":\"");
    match r.downstream {
        Some(a) => {
            let _ = write!(out, "{a}");
        }
        None => out.push('-'),
    }
    out.push_str("\",\"command\":");
    json_str(r.command, out);
    out.push_str(",\"key\":");
    json_str(&escape_key(&r.key, LOGGED_KEY_BYTES), out);
    let _ = writeln!(
        out,
        ",\"status\":\"{}\",\"reply_bytes\":{},\"duration_us\":{}}}",
        if r.ok { "ok" } else { "error" },
        r.reply_bytes,
        r.duration_us
    );
}

/// `s` as a JSON string literal (RFC 8259 escapes).
pub fn json_str(s: &str, out: &mut String) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `unix_ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC; days to civil date after Howard Hinnant's
/// `civil_from_days`).
fn rfc3339_ms(unix_ms: u64, out: &mut String) {
    use std::fmt::Write as _;
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_json_object() {
        let r = Record {
            path: "stderr".into(),
            listener: "redis".into(),
            start_unix_ms: 1_795_998_372_123,
            downstream: "127.0.0.1:4000".parse().ok(),
            command: "get",
            key: b"a\"b\x00".to_vec(),
            ok: true,
            reply_bytes: 7,
            duration_us: 42,
        };
        let mut s = String::new();
        format_line(&r, &mut s);
        assert_eq!(
            s,
            "{\"start_time\":\"2026-11-30T00:26:12.123Z\",\"listener\":\"redis\",\
             \"downstream\":\"127.0.0.1:4000\",\"command\":\"get\",\"key\":\"a\\\\\\\"b\\\\x00\",\
             \"status\":\"ok\",\"reply_bytes\":7,\"duration_us\":42}\n"
        );
    }

    #[test]
    fn dates() {
        let f = |ms| {
            let mut s = String::new();
            rfc3339_ms(ms, &mut s);
            s
        };
        assert_eq!(f(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(f(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(f(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }
}

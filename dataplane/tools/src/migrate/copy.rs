//! `respite migrate copy`: DUMP on the source, RESTORE … REPLACE on the target with the
//! source's remaining TTL, for keys a mirror cannot warm (no TTL: queues, counters, write-once
//! data).
//!
//! The race: a key written on the target (by a mirror) between this DUMP and RESTORE is
//! overwritten with the older dump. Run `verify` after `copy` and copy again the keys it
//! reports, or copy write-once data before turning the mirror on.

use std::time::Instant;

use redis::Value;

use super::cursor;
use super::endpoint::{Endpoint, KeyClient};
use super::progress;
use super::rate::TokenBucket;
use super::report::{CopySummary, printable};
use super::scan::{Position, Scanner};
use super::value::cmd1;
use super::{CopyArgs, Result};

/// What happened to one key.
enum Outcome {
    Copied,
    Expired,
    HasTtl,
    Failed(String),
}

/// Runs copy; the exit code: 0 when every key was copied or skipped, 1 when some failed.
pub fn run(args: &CopyArgs) -> Result<u8> {
    let started = Instant::now();
    let source = Endpoint::open(&args.from)?;
    let target = Endpoint::open(&args.to)?;
    // RESTORE … REPLACE onto the live source would rewrite every key with its own older dump.
    super::verify::refuse_same_server(&source, &target)?;
    let mut src = source.key_client()?;
    let mut dst = target.key_client()?;
    let total = source.dbsize()?;
    let resume = match &args.cursor_file {
        Some(path) => cursor::load(path, &source)?,
        None => None,
    };
    let mut summary = CopySummary {
        resumed: resume.is_some(),
        ..CopySummary::default()
    };
    if let Some(pos) = &resume {
        eprintln!(
            "respite migrate copy: resuming at node {} cursor {}",
            source
                .nodes
                .get(pos.node)
                .map_or("(done)", |n| n.addr.as_str()),
            pos.cursor
        );
    }

    let bar = progress::bar(total, "copy");
    let mut bucket = TokenBucket::new(args.rate);
    let mut scanner = Scanner::new(
        &source,
        resume.unwrap_or_else(Position::start),
        args.pattern.clone(),
    );
    while let Some(keys) = scanner.next_batch()? {
        for key in keys {
            summary.scanned += 1;
            bar.inc(1);
            bucket.take();
            match copy_key(&mut src, &mut dst, &key, args.persistent_only)? {
                Outcome::Copied => summary.copied += 1,
                Outcome::Expired => summary.skipped_expired += 1,
                Outcome::HasTtl => summary.skipped_ttl += 1,
                Outcome::Failed(why) => {
                    if summary.failed == 0 {
                        bar.suspend(|| {
                            eprintln!("respite migrate copy: first failure: {why}");
                        });
                    }
                    summary.failed += 1;
                }
            }
        }
        // Only once the whole batch is on the target: a rerun repeats at most one batch.
        if let Some(path) = &args.cursor_file {
            cursor::save(path, &source, scanner.position())?;
        }
    }
    bar.finish_and_clear();
    if let Some(path) = &args.cursor_file {
        std::fs::remove_file(path)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| format!("cursor file {}: {e}", path.display()))?;
    }
    summary.elapsed_seconds = started.elapsed().as_secs_f64();
    print!("{}", summary.table());
    Ok(if summary.failed > 0 { 1 } else { 0 })
}

/// Copies one key. A connection-level error aborts the run (`Err`, exit 2, the cursor file
/// keeps the last finished batch); a per-key error reply (e.g. RESTORE refused) is a failure.
fn copy_key(
    src: &mut KeyClient,
    dst: &mut KeyClient,
    key: &[u8],
    persistent_only: bool,
) -> Result<Outcome> {
    let shown = || printable(key, 80);
    let fatal = |side: &str, e: redis::RedisError| -> Result<Outcome> {
        if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
            Err(format!("{side}: key {}: {e}", shown()))
        } else {
            Ok(Outcome::Failed(format!("{side}: key {}: {e}", shown())))
        }
    };
    let replies = match src.pipe(&[cmd1("PTTL", key), cmd1("DUMP", key)]) {
        Ok(r) => r,
        Err(e) => return fatal("source", e),
    };
    let (pttl, payload) = match (replies.first(), replies.get(1)) {
        (Some(Value::Int(t)), Some(Value::BulkString(p))) => (*t, p),
        (Some(_), Some(Value::Nil)) => return Ok(Outcome::Expired),
        other => {
            return Ok(Outcome::Failed(format!(
                "source: key {}: unexpected PTTL/DUMP replies {other:?}",
                shown()
            )));
        }
    };
    // -2: gone between SCAN and now; 0: expires this millisecond (RESTORE's 0 would make it
    // persistent).
    if pttl == -2 || pttl == 0 {
        return Ok(Outcome::Expired);
    }
    if pttl > 0 && persistent_only {
        return Ok(Outcome::HasTtl);
    }
    let mut restore = cmd1("RESTORE", key);
    restore
        .arg(pttl.max(0))
        .arg(payload.as_slice())
        .arg("REPLACE");
    match dst.query(&restore) {
        Ok(_) => Ok(Outcome::Copied),
        Err(e) => fatal("target", e),
    }
}

//! The four-step zero-downtime migration of docs/migration.md, end to end, while a mixed
//! read/write load with TTLs runs through Respite: from a standalone redis-server `old` to a real
//! 6-node Redis Cluster `new`, every step applied by SIGHUP reload.
//!
//! 0. catch-all → old.
//! 1. add cluster `new` (unused).
//! 2. catch-all → old, mirror → new; run for longer than the longest TTL in the load; copy the
//!    keys without TTL with `respite migrate copy --persistent-only`.
//! 3. `respite migrate verify --from old --to new`: zero differences (a copy that raced a
//!    mirrored write shows up here as a difference and is copied again; see docs/migration.md).
//! 4. catch-all → new, mirror → old; `verify --from new --to old`: zero differences (the old
//!    cluster still receives every write). Rollback: one reload back to step 2.
//!
//! The load: three client threads, each on its own keys, each iteration one pipeline of
//! `SET s EX 3`, `HSET h f1 v f2 v` + `EXPIRE h 3`, `INCR` of a counter (no TTL), `LPUSH` on a
//! queue (no TTL), five `INCR`s of a hot counter, and reads (`GET`, `HGET`) of the previous
//! iteration's writes. Every reply is checked: an INCR/LPUSH reply that is not the previous one
//! plus one is a lost (or reordered) write, a read that is not the last acknowledged value is a
//! stale read. At the end every acknowledged write is read back through Respite. While copy and
//! verify run, the threads skip the hot keys (queue, hot counter, `log:0`): a key written every
//! couple of milliseconds differs on every read of a live verify (docs/migration.md, step 3).
//!
//! The hot counters check the ordering fact the switch depends on: across it, a client's writes
//! to one key go first to `new` as a mirror copy, then to `new` as the primary; an INCR that
//! overtook an earlier mirror copy would answer one less than expected.

use crate::common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::{RawClient, RedisCluster, RedisServer, Respite, free_port, respite_bin};

/// The longest TTL in the load, seconds.
const TTL_SECS: u64 = 3;
const THREADS: usize = 3;
const COUNTERS: usize = 20;
const STRING_KEYS: usize = 500;
const HASH_KEYS: usize = 300;
const HOT_INCRS: usize = 5;
/// Thread 0 also APPENDs a chunk this big to `log:0` every iteration (and restarts it with SET
/// every [`LOG_RESET`] iterations). Redis reads a client's bytes 16 KiB at a time, so a copy this
/// size that sits on another connection than the next request of the same client would be
/// overtaken by it: the reply length would show it.
const LOG_CHUNK: usize = 48 * 1024;
const LOG_RESET: u64 = 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// catch-all → old; only `old` configured.
    OldOnly,
    /// Step 1: `new` added, unused.
    AddNew,
    /// Step 2: catch-all → old, mirror → new.
    Mirror,
    /// Step 4: catch-all → new, mirror → old.
    Switch,
}

fn config(port: u16, admin: u16, old: &str, new_seeds: &[String], step: Step) -> String {
    let route = match step {
        Step::OldOnly | Step::AddNew => "cluster = \"old\"\n".to_string(),
        Step::Mirror => "cluster = \"old\"\n\
             [[listeners.prefix_routes.catch_all_route.request_mirror_policy]]\n\
             cluster = \"new\"\nexclude_read_commands = true\nruntime_fraction = 100.0\n"
            .to_string(),
        Step::Switch => "cluster = \"new\"\n\
             [[listeners.prefix_routes.catch_all_route.request_mirror_policy]]\n\
             cluster = \"old\"\nexclude_read_commands = true\nruntime_fraction = 100.0\n"
            .to_string(),
    };
    let new_cluster = if step == Step::OldOnly {
        String::new()
    } else {
        let seeds: Vec<String> = new_seeds.iter().map(|s| format!("\"{s}\"")).collect();
        format!(
            "[[clusters]]\nname = \"new\"\ntype = \"redis_cluster\"\nhosts = [{}]\n\
             cluster_refresh_rate = \"1s\"\n",
            seeds.join(", ")
        )
    };
    format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
drain_timeout = "2s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
stat_prefix = "main"
op_timeout = "2s"
[listeners.prefix_routes.catch_all_route]
{route}[[clusters]]
name = "old"
hosts = ["{old}"]
{new_cluster}"#
    )
}

/// What one load thread saw and must find at the end.
#[derive(Default)]
struct Record {
    writes: u64,
    reads: u64,
    errors: Vec<String>,
    error_count: u64,
    /// INCR / LPUSH replies that were not the previous one plus one.
    gaps: Vec<String>,
    /// Reads that did not return the last acknowledged value.
    stale: Vec<String>,
    counters: Vec<i64>,
    hot: i64,
    /// Length of `log:0` after the last acknowledged SET/APPEND (thread 0 only).
    log_len: i64,
    queue_len: i64,
    last_pushed: u64,
    /// key → (value, when its pipeline was sent)
    strings: HashMap<String, (String, Instant)>,
    /// key → (f1 value, when its pipeline was sent)
    hashes: HashMap<String, (String, Instant)>,
}

fn int_reply(r: &[u8]) -> Option<i64> {
    std::str::from_utf8(r.strip_prefix(b":")?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// One load thread: `t` owns every key with `:{t}:` in it. While `quiet` is set it skips the
/// hot keys (the queue, the hot counter and `log:0`, written every iteration): a key written more often
/// than verify's re-check pauses differs on every read while writes land, and verify cannot
/// tell it from a lost write (docs/migration.md, step 3).
fn load(addr: String, t: usize, stop: Arc<AtomicBool>, quiet: Arc<AtomicBool>) -> Record {
    let mut rec = Record {
        counters: vec![0; COUNTERS],
        ..Record::default()
    };
    let mut c = RawClient::connect(&addr);
    let mut i: u64 = 0;
    let mut prev: Option<(String, String, String, String)> = None; // s key, s value, h key, f1
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let skey = format!("s:{t}:{}", i as usize % STRING_KEYS);
        let sval = format!("v{i}");
        let hkey = format!("h:{t}:{}", i as usize % HASH_KEYS);
        let hval = format!("f{i}");
        let ctr = i as usize % COUNTERS;
        let ckey = format!("c:{t}:{ctr}");
        let qkey = format!("q:{t}");
        let hot = format!("hot:{t}");
        let mut cmds = vec![
            cmd(&[b"SET", skey.as_bytes(), sval.as_bytes(), b"EX", b"3"]),
            cmd(&[
                b"HSET",
                hkey.as_bytes(),
                b"f1",
                hval.as_bytes(),
                b"f2",
                sval.as_bytes(),
            ]),
            cmd(&[b"EXPIRE", hkey.as_bytes(), b"3"]),
            cmd(&[b"INCR", ckey.as_bytes()]),
        ];
        let hot_part = !quiet.load(Ordering::Relaxed);
        let log_part = hot_part && t == 0;
        if hot_part {
            cmds.push(cmd(&[b"LPUSH", qkey.as_bytes(), i.to_string().as_bytes()]));
            for _ in 0..HOT_INCRS {
                cmds.push(cmd(&[b"INCR", hot.as_bytes()]));
            }
        }
        let log_reset = i.is_multiple_of(LOG_RESET) || rec.log_len == 0;
        if log_part {
            let mut chunk = format!("[{i}]").into_bytes();
            chunk.resize(LOG_CHUNK, b'.');
            let verb: &[u8] = if log_reset { b"SET" } else { b"APPEND" };
            cmds.push(cmd(&[verb, b"log:0", &chunk]));
        }
        let writes = cmds.len();
        if let Some((pk, _, ph, _)) = &prev {
            cmds.push(cmd(&[b"GET", pk.as_bytes()]));
            cmds.push(cmd(&[b"HGET", ph.as_bytes(), b"f1"]));
        }
        // Expiry counts from when Redis ran the SET, which is after this and before the
        // reply: a reply held back (a reload, a loaded machine) must not make a key that
        // expired look fresh at the final check.
        let sent = Instant::now();
        let replies = match pipeline(&mut c, &cmds) {
            Ok(r) => r,
            Err(e) => {
                rec.error_count += 1;
                rec.errors.push(format!("connection: {e}"));
                std::thread::sleep(Duration::from_millis(50));
                match RawClient::try_connect(&addr) {
                    Ok(n) => c = n,
                    Err(e) => rec.errors.push(format!("reconnect: {e}")),
                }
                prev = None;
                continue;
            }
        };
        for (k, r) in replies.iter().enumerate() {
            if r.starts_with(b"-") {
                rec.error_count += 1;
                if rec.errors.len() < 10 {
                    rec.errors
                        .push(format!("{}: {}", show(&cmds[k].concat()), show(r)));
                }
            }
        }
        if replies[..writes].iter().any(|r| r.starts_with(b"-")) {
            // The error is counted (and fails the test); the values are now unknown.
            prev = None;
            continue;
        }
        rec.writes += writes as u64;
        rec.strings.insert(skey.clone(), (sval.clone(), sent));
        rec.hashes.insert(hkey.clone(), (hval.clone(), sent));
        let mut expect = |what: &str, got: &[u8], want: i64| {
            if int_reply(got) != Some(want) && rec.gaps.len() < 10 {
                rec.gaps
                    .push(format!("{what}: want {want}, got {}", show(got)));
            }
        };
        expect(&ckey, &replies[3], rec.counters[ctr] + 1);
        rec.counters[ctr] = int_reply(&replies[3]).unwrap_or(0);
        if hot_part {
            expect(&qkey, &replies[4], rec.queue_len + 1);
            rec.queue_len = int_reply(&replies[4]).unwrap_or(0);
            rec.last_pushed = i;
            for r in &replies[5..5 + HOT_INCRS] {
                expect(&hot, r, rec.hot + 1);
                rec.hot = int_reply(r).unwrap_or(0);
            }
        }
        if log_part {
            let r = &replies[5 + HOT_INCRS];
            if log_reset {
                rec.log_len = LOG_CHUNK as i64;
            } else {
                expect("log:0 (APPEND length)", r, rec.log_len + LOG_CHUNK as i64);
                rec.log_len = int_reply(r).unwrap_or(0);
            }
        }
        if let Some((pk, pv, ph, pf)) = &prev {
            rec.reads += 2;
            let (g, h) = (&replies[writes], &replies[writes + 1]);
            // The previous iteration's writes were acknowledged a moment ago, TTL 3 s: a read
            // must see them unless this iteration overwrote the same key.
            let want_s = if *pk == skey { &sval } else { pv };
            let want_h = if *ph == hkey { &hval } else { pf };
            if *g != bulk(want_s.as_bytes()) && rec.stale.len() < 10 {
                rec.stale
                    .push(format!("GET {pk}: want {want_s}, got {}", show(g)));
            }
            if *h != bulk(want_h.as_bytes()) && rec.stale.len() < 10 {
                rec.stale
                    .push(format!("HGET {ph} f1: want {want_h}, got {}", show(h)));
            }
        }
        prev = Some((skey, sval, hkey, hval));
        std::thread::sleep(Duration::from_millis(1));
    }
    rec
}

/// What the streaming client saw: INCRs acknowledged, the last reply, gaps.
struct Streamed {
    acked: u64,
    last: i64,
    gaps: Vec<String>,
    errors: Vec<String>,
}

/// A client that pipelines `INCR stream` without waiting for replies (a writer thread keeps up
/// to 2000 in flight, a reader checks each reply is the previous one plus one). Unlike the
/// request/reply load above, it always has copies in flight when a reload lands, so it is the
/// one that would see a mirror copy overtaken by the next primary request across the switch
/// (mirror and primary on different connections to `new`). Pauses while `quiet` is set.
fn streamer(addr: String, stop: Arc<AtomicBool>, quiet: Arc<AtomicBool>) -> Streamed {
    use std::io::Write;
    use std::sync::atomic::AtomicU64;
    let mut c = RawClient::connect(&addr);
    let t0 = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut w = c.stream().try_clone().expect("clone stream");
        let (sent, acked, done) = (sent.clone(), acked.clone(), done.clone());
        std::thread::spawn(move || {
            let mut batch = Vec::new();
            for _ in 0..50 {
                RawClient::encode_into(&mut batch, &[b"INCR", b"stream"]);
            }
            while !stop.load(Ordering::Relaxed) {
                let in_flight = sent.load(Ordering::Relaxed) - acked.load(Ordering::Relaxed);
                if quiet.load(Ordering::Relaxed) || in_flight > 2000 {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                sent.fetch_add(50, Ordering::Relaxed);
                if w.write_all(&batch).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_micros(300));
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let mut out = Streamed {
        acked: 0,
        last: 0,
        gaps: Vec::new(),
        errors: Vec::new(),
    };
    loop {
        if done.load(Ordering::Relaxed)
            && acked.load(Ordering::Relaxed) == sent.load(Ordering::Relaxed)
        {
            break;
        }
        if acked.load(Ordering::Relaxed) == sent.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let r = match c.try_read_reply() {
            Ok(r) => r,
            Err(e) => {
                out.errors.push(format!("stream read: {e}"));
                break;
            }
        };
        acked.fetch_add(1, Ordering::Relaxed);
        match int_reply(&r) {
            Some(n) if n == out.last + 1 => {
                out.last = n;
                out.acked += 1;
            }
            Some(n) => {
                if out.gaps.len() < 10 {
                    out.gaps.push(format!(
                        "INCR stream: want {}, got {n} at {:?}",
                        out.last + 1,
                        t0.elapsed()
                    ));
                }
                out.last = n;
                out.acked += 1;
            }
            None => {
                if out.errors.len() < 10 {
                    out.errors.push(format!("INCR stream: {}", show(&r)));
                }
            }
        }
    }
    let _ = writer.join();
    out
}

/// Sends `cmds` as one pipeline and reads every reply, returning I/O errors.
fn pipeline(c: &mut RawClient, cmds: &[Vec<Vec<u8>>]) -> std::io::Result<Vec<Vec<u8>>> {
    use std::io::Write;
    let mut buf = Vec::new();
    for a in cmds {
        let args: Vec<&[u8]> = a.iter().map(|x| x.as_slice()).collect();
        RawClient::encode_into(&mut buf, &args);
    }
    let mut s = c.stream();
    s.write_all(&buf)?;
    cmds.iter().map(|_| c.try_read_reply()).collect()
}

/// Runs `respite migrate <args>`: (exit code, stdout, stderr).
fn migrate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(respite_bin())
        .arg("migrate")
        .args(args)
        .output()
        .expect("run respite migrate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `respite migrate verify --from <from> --to <to> --json`: (exit code, keys checked, the
/// JSON). Panics on exit 2 or output that is not JSON.
fn verify(from: &str, to: &str) -> (i32, i64, serde_json::Value) {
    let (code, out, err) = migrate(&["verify", "--from", from, "--to", to, "--json"]);
    assert!(
        code == 0 || code == 1,
        "verify {from} → {to} exited {code}:\n{out}\n{err}"
    );
    let json: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("verify --json printed no JSON ({e}):\n{out}\n{err}"));
    let checked = json
        .get("checked")
        .and_then(|v| v.as_i64())
        .unwrap_or_else(|| panic!("no \"checked\" count in {json}"));
    (code, checked, json)
}

/// Waits until respite has logged `config reloaded` `n` times.
fn wait_reloaded(r: &Respite, n: usize) {
    let ok = wait_until(Duration::from_secs(10), || {
        r.log().matches("config reloaded").count() >= n
    });
    assert!(ok, "reload {n} not applied; log:\n{}", r.log());
}

fn mirror_stats(r: &Respite, cluster: &str) -> String {
    let s = r.stats();
    ["total", "success", "error", "overflow", "active"]
        .iter()
        .map(|n| {
            let v = s
                .get(&format!("cluster.{cluster}.mirror_rq_{n}"))
                .copied()
                .unwrap_or(0);
            format!("{n}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn four_step_migration_under_load() {
    let old = RedisServer::start();
    let new = RedisCluster::start();
    let seeds = new.seeds();
    let (port, admin) = (free_port(), free_port());
    let cfg = |step| config(port, admin, &old.addr(), &seeds, step);
    let r = Respite::start(&cfg(Step::OldOnly), port, admin);
    let started = Instant::now();
    let phase = |what: &str| println!("[{:>6.2}s] {what}", started.elapsed().as_secs_f64());

    let stop = Arc::new(AtomicBool::new(false));
    let quiet = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (addr, stop, quiet) = (r.addr(), stop.clone(), quiet.clone());
            std::thread::spawn(move || load(addr, t, stop, quiet))
        })
        .collect();
    let stream = {
        let (addr, stop, quiet) = (r.addr(), stop.clone(), quiet.clone());
        std::thread::spawn(move || streamer(addr, stop, quiet))
    };
    let ttl = Duration::from_secs(TTL_SECS);
    std::thread::sleep(Duration::from_secs(1));

    // Step 1: add cluster new.
    phase("step 1: add cluster new");
    r.reload(&cfg(Step::AddNew));
    wait_reloaded(&r, 1);
    std::thread::sleep(Duration::from_secs(1));

    // Step 2: mirror to new for longer than the longest TTL, then copy the persistent keys.
    phase("step 2: mirror old → new");
    r.reload(&cfg(Step::Mirror));
    wait_reloaded(&r, 2);
    std::thread::sleep(ttl + Duration::from_secs(1));
    let new_seed = seeds[0].clone();
    // The hot keys pause while copy and verify run (see `load`); everything else keeps going.
    quiet.store(true, Ordering::Relaxed);
    let mut rounds = 0;
    let (verified_old_new, json) = loop {
        rounds += 1;
        phase(&format!("step 2: copy --persistent-only (round {rounds})"));
        let (code, out, err) = migrate(&[
            "copy",
            "--from",
            &old.addr(),
            "--to",
            &new_seed,
            "--persistent-only",
        ]);
        assert_eq!(code, 0, "migrate copy:\n{out}\n{err}");
        println!("{}", out.trim());
        // Step 3: verify. A copy that raced a mirrored write leaves a difference: copy again.
        phase("step 3: verify old → new");
        let (code, checked, json) = verify(&old.addr(), &new_seed);
        if code == 0 {
            break (checked, json);
        }
        assert!(
            rounds < 4,
            "verify old → new still differs after {rounds} copies: {json}"
        );
        println!("verify found differences, copying again: {json}");
    };
    quiet.store(false, Ordering::Relaxed);
    println!("verify old → new: {verified_old_new} keys checked, 0 differences: {json}");
    assert!(verified_old_new > 0, "verify checked no key: {json}");

    // Step 4: switch, reverse mirror.
    phase("step 4: catch-all → new, mirror → old");
    r.reload(&cfg(Step::Switch));
    wait_reloaded(&r, 3);
    std::thread::sleep(Duration::from_secs(2));
    phase("step 4: verify new → old");
    quiet.store(true, Ordering::Relaxed);
    let (code, verified_new_old, json) = verify(&new_seed, &old.addr());
    quiet.store(false, Ordering::Relaxed);
    assert_eq!(code, 0, "after the switch, verify new → old: {json}");
    println!("verify new → old: {verified_new_old} keys checked, 0 differences");
    std::thread::sleep(Duration::from_secs(1));

    // Rollback: one reload back to step 2.
    phase("rollback: back to step 2");
    r.reload(&cfg(Step::Mirror));
    wait_reloaded(&r, 4);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let records: Vec<Record> = threads
        .into_iter()
        .map(|h| h.join().expect("load thread"))
        .collect();
    let streamed = stream.join().expect("stream thread");
    phase("load stopped");

    // Every acknowledged write, read back through Respite (primary: old again).
    let mut c = r.raw();
    let mut lost = Vec::new();
    let mut final_reads = 0u64;
    // Sent within the TTL less a margin at the moment of the check (the final reads take a
    // while on a loaded machine): still there.
    let fresh = |at: &Instant| at.elapsed() + Duration::from_millis(300) < ttl;
    let got = c.cmd(&[b"GET", b"stream"]);
    final_reads += 1;
    if got != bulk(streamed.last.to_string().as_bytes()) {
        lost.push(format!(
            "GET stream: want {}, got {}",
            streamed.last,
            show(&got)
        ));
    }
    for (t, rec) in records.iter().enumerate() {
        let mut check = |args: &[&[u8]], want: Vec<u8>| {
            final_reads += 1;
            let got = c.cmd(args);
            if got != want && lost.len() < 20 {
                lost.push(format!(
                    "{}: want {}, got {}",
                    show(&args.join(&b' ')),
                    show(&want),
                    show(&got)
                ));
            }
        };
        for (j, v) in rec.counters.iter().enumerate() {
            check(
                &[b"GET", format!("c:{t}:{j}").as_bytes()],
                bulk(v.to_string().as_bytes()),
            );
        }
        check(
            &[b"GET", format!("hot:{t}").as_bytes()],
            bulk(rec.hot.to_string().as_bytes()),
        );
        check(&[b"LLEN", format!("q:{t}").as_bytes()], int(rec.queue_len));
        if t == 0 {
            check(&[b"STRLEN", b"log:0"], int(rec.log_len));
        }
        check(
            &[b"LINDEX", format!("q:{t}").as_bytes(), b"0"],
            bulk(rec.last_pushed.to_string().as_bytes()),
        );
        for (k, (v, at)) in &rec.strings {
            if fresh(at) {
                check(&[b"GET", k.as_bytes()], bulk(v.as_bytes()));
            }
        }
        for (k, (v, at)) in &rec.hashes {
            if fresh(at) {
                check(&[b"HGET", k.as_bytes(), b"f1"], bulk(v.as_bytes()));
            }
        }
    }

    let writes: u64 = records.iter().map(|r| r.writes).sum::<u64>() + streamed.acked;
    let reads: u64 = records.iter().map(|r| r.reads).sum();
    let errors: u64 =
        records.iter().map(|r| r.error_count).sum::<u64>() + streamed.errors.len() as u64;
    let gaps: Vec<&String> = records
        .iter()
        .flat_map(|r| &r.gaps)
        .chain(&streamed.gaps)
        .collect();
    let stale: Vec<&String> = records.iter().flat_map(|r| &r.stale).collect();
    println!(
        "migration: {writes} writes and {reads} reads acknowledged over {:.1}s by {THREADS} \
         clients and a streaming INCR client ({} INCRs); {errors} client errors; {} INCR/LPUSH gaps; {} stale reads; {final_reads} \
         final reads, {} lost; copy rounds {rounds}; verify checked {verified_old_new} keys old → \
         new and {verified_new_old} new → old",
        started.elapsed().as_secs_f64(),
        streamed.acked,
        gaps.len(),
        stale.len(),
        lost.len(),
    );
    println!(
        "mirror stats: new [{}], old [{}]",
        mirror_stats(&r, "new"),
        mirror_stats(&r, "old")
    );
    let errs: Vec<&String> = records
        .iter()
        .flat_map(|r| &r.errors)
        .chain(&streamed.errors)
        .collect();
    assert_eq!(errors, 0, "client errors, e.g. {errs:?}");
    assert!(gaps.is_empty(), "lost or reordered writes: {gaps:?}");
    assert!(stale.is_empty(), "stale reads: {stale:?}");
    assert!(
        lost.is_empty(),
        "acknowledged writes not readable: {lost:?}"
    );
    for cluster in ["new", "old"] {
        for stat in ["error", "overflow"] {
            assert_eq!(
                r.stat(&format!("cluster.{cluster}.mirror_rq_{stat}")),
                0,
                "cluster.{cluster}.mirror_rq_{stat}"
            );
        }
    }
    assert!(
        writes > 10_000,
        "too little load to mean anything: {writes} writes"
    );
}

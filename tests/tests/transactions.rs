//! Transactions through Respite. MULTI is refused for now; what must hold is that nothing a
//! client queues after the refused MULTI runs: every request up to EXEC or DISCARD is refused
//! unrun and EXEC answers `-EXECABORT`, as Redis does for a transaction with a queue-time error.

mod common;

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer};

const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

/// True if `key` exists on any of `backends`.
fn exists_anywhere(backends: &[RedisServer], key: &[u8]) -> bool {
    backends.iter().any(|b| exists_on(&mut b.raw(), key))
}

/// The pipeline of the bug report, byte for byte: before the fix SET and INCR ran although MULTI
/// and EXEC were refused, so `GET tx1` answered 2.
#[test]
fn commands_after_a_refused_multi_do_not_run() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"tx1", b"1"]),
        cmd(&[b"INCR", b"tx1"]),
        cmd(&[b"EXEC"]),
        cmd(&[b"GET", b"tx1"]),
    ]);
    assert!(
        replies[0].starts_with(b"-ERR 'multi' is not supported by respite"),
        "{}",
        show(&replies[0])
    );
    for (r, name) in replies[1..3].iter().zip(["set", "incr"]) {
        let want = format!(
            "-ERR '{name}' was not run: MULTI was refused on this connection, so the \
             transaction is discarded; EXEC or DISCARD ends it\r\n"
        );
        assert_eq!(show(r), show(want.as_bytes()));
    }
    assert_eq!(show(&replies[3]), show(EXECABORT));
    assert_eq!(show(&replies[4]), show(NIL), "GET after EXEC runs again");
    assert!(!exists_anywhere(&backends, b"tx1"));
    // The connection is back to normal after EXEC.
    assert_eq!(c.cmd(&[b"SET", b"tx1", b"x"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"tx1"]), bulk(b"x"));
}

/// Every kind of request — keyed, split over backends, fan-out, SCAN, scripts, local, inline —
/// is refused unrun inside the refused transaction; nested MULTI and WATCH get Redis's errors.
#[test]
fn every_kind_of_request_is_refused_until_exec_or_discard() {
    let backends = servers(3);
    let respite = Respite::over(&addrs(&backends), 2);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"keep", b"1"]), OK);
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    for i in 0..30 {
        mset.push(format!("m{i}").into_bytes());
        mset.push(b"v".to_vec());
    }
    let queued = [
        cmd(&[b"SET", b"a", b"1"]),
        mset,
        cmd(&[b"DEL", b"keep"]),
        cmd(&[b"FLUSHALL"]),
        cmd(&[b"SCAN", b"0"]),
        cmd(&[b"EVAL", b"redis.call('set','lua','1')", b"0"]),
        cmd(&[b"PING"]),
    ];
    assert!(is_error(&c.cmd(&[b"MULTI"])));
    for q in &queued {
        let r = c.pipeline(std::slice::from_ref(q)).remove(0);
        assert!(
            show(&r).contains("was not run: MULTI was refused on this connection"),
            "{}: {}",
            show(&q[0]),
            show(&r)
        );
    }
    // An inline request takes the same path.
    c.send_raw(b"SET inline 1\r\n");
    assert!(show(&c.read_reply()).contains("was not run"));
    assert_eq!(
        c.cmd(&[b"MULTI"]),
        b"-ERR MULTI calls can not be nested\r\n"
    );
    assert_eq!(
        c.cmd(&[b"WATCH", b"a"]),
        b"-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(c.cmd(&[b"DISCARD"]), OK);
    // Nothing ran: the key set before is still there, none of the queued writes happened.
    assert_eq!(c.cmd(&[b"GET", b"keep"]), bulk(b"1"));
    for key in [&b"a"[..], b"m0", b"m29", b"lua", b"inline"] {
        assert!(!exists_anywhere(&backends, key), "{}", show(key));
    }
    // DISCARD ended it: requests run again, and EXEC is refused as before (no transaction open).
    assert_eq!(c.cmd(&[b"SET", b"a", b"2"]), OK);
    assert!(
        c.cmd(&[b"EXEC"])
            .starts_with(b"-ERR 'exec' is not supported")
    );
    assert_eq!(c.cmd(&[b"GET", b"a"]), bulk(b"2"));
}

/// RESET ends the refused transaction like DISCARD (Redis: RESET discards MULTI); QUIT closes.
#[test]
fn reset_ends_and_quit_closes_a_refused_transaction() {
    let backends = servers(1);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    assert!(is_error(&c.cmd(&[b"MULTI"])));
    assert!(is_error(&c.cmd(&[b"SET", b"r", b"1"])));
    assert_eq!(c.cmd(&[b"RESET"]), b"+RESET\r\n");
    assert_eq!(c.cmd(&[b"SET", b"r", b"2"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"r"]), bulk(b"2"));

    let mut q = respite.raw();
    let replies = q.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"SET", b"q", b"1"]),
        cmd(&[b"QUIT"]),
    ]);
    assert_eq!(replies[2], OK);
    assert!(q.is_closed(std::time::Duration::from_secs(5)));
    assert!(!exists_anywhere(&backends, b"q"));
}

/// Requests Redis rejects while queuing keep the state (a malformed RESET, DISCARD or WATCH must
/// not end it and let later writes run, also on a mirror); a malformed EXEC aborts it, as in
/// Redis. Replies are Redis's own texts.
#[test]
fn malformed_requests_do_not_end_the_refused_transaction() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let replies = c.pipeline(&[
        cmd(&[b"MULTI"]),
        cmd(&[b"RESET", b"x"]),
        cmd(&[b"DISCARD", b"y"]),
        cmd(&[b"WATCH"]),
        cmd(&[b"MULTI", b"x"]),
        cmd(&[b"SET", b"leak", b"1"]),
        cmd(&[b"EXEC", b"x"]),
        cmd(&[b"GET", b"leak"]),
        cmd(&[b"EXEC"]),
    ]);
    let want: [&[u8]; 8] = [
        b"-ERR wrong number of arguments for 'reset' command\r\n",
        b"-ERR wrong number of arguments for 'discard' command\r\n",
        b"-ERR wrong number of arguments for 'watch' command\r\n",
        b"-ERR wrong number of arguments for 'multi' command\r\n",
        b"-ERR 'set' was not run: MULTI was refused on this connection, so the transaction is \
          discarded; EXEC or DISCARD ends it\r\n",
        b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' \
          command\r\n",
        NIL,
        b"-ERR 'exec' is not supported by respite: transactions need a dedicated upstream \
          connection (not yet implemented)\r\n",
    ];
    for (got, want) in replies[1..].iter().zip(want) {
        assert_eq!(show(got), show(want));
    }
    assert!(!exists_anywhere(&backends, b"leak"));
}

/// A client that disconnects inside the refused transaction leaves nothing of it applied, and
/// the state belongs to that connection only: another client runs its commands as usual.
#[test]
fn disconnect_inside_the_refused_transaction_applies_nothing() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let mut c = respite.raw();
    let mut other = respite.raw();
    assert!(is_error(&c.cmd(&[b"MULTI"])));
    assert!(is_error(&c.cmd(&[b"SET", b"gone", b"1"])));
    assert_eq!(other.cmd(&[b"SET", b"other", b"1"]), OK);
    c.send_raw(&RawClient::encode(&[b"SET", b"gone", b"2"]));
    drop(c);
    let mut again = respite.raw();
    assert_eq!(again.cmd(&[b"GET", b"gone"]), NIL);
    assert_eq!(again.cmd(&[b"SET", b"after", b"1"]), OK);
    assert!(!exists_anywhere(&backends, b"gone"));
    assert!(exists_anywhere(&backends, b"other"));
}

/// A real client library's transaction API: the Rust `redis` crate's atomic pipeline sends
/// MULTI, the commands and EXEC in one write. It must fail, and none of its writes may land.
#[test]
fn redis_crate_atomic_pipeline_fails_without_side_effects() {
    let backends = servers(2);
    let respite = Respite::over(&addrs(&backends), 1);
    let port: u16 = respite.addr().rsplit(':').next().unwrap().parse().unwrap();
    let mut conn = respite_tests::redis_client(port);
    let result: redis::RedisResult<(String, i64)> = redis::pipe()
        .atomic()
        .set("crate:a", 1)
        .incr("crate:a", 5)
        .query(&mut conn);
    assert!(result.is_err(), "{result:?}");
    assert!(!exists_anywhere(&backends, b"crate:a"));
    // The same connection works afterwards.
    let v: i64 = redis::cmd("INCR").arg("crate:b").query(&mut conn).unwrap();
    assert_eq!(v, 1);
}

/// The direct Redis answers the same pipeline the same way where both define it: queued
/// commands are not run and EXEC aborts (Redis: a queue-time error flags the transaction).
#[test]
fn execabort_text_is_redis_own() {
    let redis = RedisServer::start();
    let mut d: RawClient = redis.raw();
    let replies = d.pipeline(&[cmd(&[b"MULTI"]), cmd(&[b"NOSUCHCOMMAND"]), cmd(&[b"EXEC"])]);
    assert_eq!(show(&replies[2]), show(EXECABORT));
}

//! Log lines rate-limited per event kind: a hung backend with hundreds of requests timing out
//! on it, and `accept` failing at the fd limit, each leave a handful of lines in respite's log,
//! not one per request or per accept, and the accept loop backs off instead of spinning.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::{Respite, simple_config};
use respite_tests::{RawClient, RedisServer, free_port};

const DOWN_ERRORS: [&[u8]; 3] = [
    b"-no upstream host\r\n",
    b"-upstream failure\r\n",
    b"-upstream overflow: too many requests queued for this host (max_pending_requests)\r\n",
];

/// Lines of `log` containing `text`.
fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

/// A SIGSTOPped backend while 300 pipelined requests time out on it, and a client keeps asking
/// for 3 s more: respite closes the hung connection once (one "sent nothing" line, not 300),
/// its reconnects fail at the handshake's PING (one "connect failed" line per 10 s), every
/// request is answered with an error, and after SIGCONT the backend serves again.
#[test]
fn hung_backend_logs_a_handful_of_lines() {
    let backend = RedisServer::start();
    let (port, admin) = (free_port(), free_port());
    let cfg = simple_config(port, admin, &[backend.addr()], 1, "")
        .replace("op_timeout = \"1s\"", "op_timeout = \"500ms\"");
    let respite = Respite::start(&cfg, port, admin);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);

    let stopped = Stopped::new(backend.pid());
    let mut batch = Vec::new();
    for i in 0..300 {
        RawClient::encode_into(&mut batch, &[b"GET", format!("k{i}").as_bytes()]);
    }
    c.send_raw(&batch);
    for i in 0..300 {
        let r = c.read_reply();
        assert!(
            DOWN_ERRORS.contains(&r.as_slice()),
            "reply {i}: {}",
            show(&r)
        );
    }
    // More requests while the host stays stopped: reconnects, timeouts, fast failures.
    let until = Instant::now() + Duration::from_secs(3);
    let mut more = 0;
    while Instant::now() < until {
        let r = c.cmd(&[b"GET", b"k"]);
        assert!(DOWN_ERRORS.contains(&r.as_slice()), "{}", show(&r));
        more += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = respite.log();
    let hung = lines_with(&log, "sent nothing for op_timeout");
    let connect = lines_with(&log, "upstream connect failed");
    let warns = lines_with(&log, "WARN");
    eprintln!(
        "hung backend: 300 pipelined + {more} later requests failed; log: {hung} hung, \
         {connect} connect failed, {warns} WARN lines"
    );
    assert!(
        (1..=2).contains(&hung),
        "{hung} 'sent nothing' lines; log:\n{log}"
    );
    assert!(
        connect <= 2,
        "{connect} 'connect failed' lines; log:\n{log}"
    );
    assert!(warns <= 8, "{warns} WARN lines; log:\n{log}");

    drop(stopped);
    let mut last = Vec::new();
    assert!(
        wait_until(Duration::from_secs(15), || {
            last = c.cmd(&[b"GET", b"k"]);
            last == bulk(b"v")
        }),
        "after SIGCONT: {}",
        show(&last)
    );
}

/// Respite at its fd limit (soft `RLIMIT_NOFILE` lowered under it with prlimit) while 60
/// clients connect: accepts fail with EMFILE, each failure pauses the accept loop (10 ms
/// doubling to 1 s) and is counted in `downstream_cx_accept_error`; the log has one "accept
/// failed" line, not one per attempt. Once the limit is raised again, new clients are served.
#[test]
fn accept_at_fd_limit_backs_off_with_one_log_line() {
    let backend = RedisServer::start();
    let respite = Respite::over(&[backend.addr()], 1);
    let mut c = respite.raw();
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), OK);
    let pid = respite.pid();
    let (soft, hard) = nofile_limits(pid);
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count() as u64;
    let low = open + 8;
    let ok = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={low}:{hard}"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "prlimit --nofile={low}:{hard}");

    let stat = "redis.main.downstream_cx_accept_error";
    let before = respite.stat(stat);
    let t0 = Instant::now();
    let clients: Vec<_> = (0..60)
        .filter_map(|_| RawClient::try_connect(&respite.addr()).ok())
        .collect();
    let connected = clients.len();
    std::thread::sleep(Duration::from_secs(3));
    // The admin endpoint needs a descriptor too: read the stats once the limit is back.
    drop(clients);
    assert_eq!(raise_nofile(pid, soft), soft, "soft RLIMIT_NOFILE back");
    let elapsed = t0.elapsed();
    let errors = respite.stat(stat) - before;
    let log = respite.log();
    let lines = lines_with(&log, "accept failed");
    eprintln!(
        "fd limit {low} (was {soft}), {connected} clients: {errors} accept errors in \
         {elapsed:?}, {lines} log lines"
    );
    assert!(errors > 0, "no accept error counted; log:\n{log}");
    // Backing off 10 ms → 1 s: about a dozen failed attempts in 3 s, not hundreds.
    assert!(errors <= 40, "{errors} accept errors in {elapsed:?}");
    assert!(
        (1..=2).contains(&lines),
        "{lines} 'accept failed' lines; log:\n{log}"
    );
    // The paused loop tries again within its pause (at most 1 s) and serves new clients.
    assert!(
        wait_until(Duration::from_secs(5), || {
            let Ok(mut f) = RawClient::try_connect(&respite.addr()) else {
                return false;
            };
            f.stream()
                .set_read_timeout(Some(Duration::from_secs(2)))
                .ok();
            f.try_cmd(&[b"GET", b"k"]).is_ok_and(|r| r == bulk(b"v"))
        }),
        "a new client is not served after the limit was raised"
    );
}

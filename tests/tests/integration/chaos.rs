//! Chaos: for a bounded time, backends are killed, hung (SIGSTOP) and restarted at
//! random under load; afterwards the invariants must hold:
//!
//! - Respite did not panic and still serves;
//! - every request got an answer (a value, or one of the proxy's documented errors, or an error
//!   Redis itself gives while it loads its data) within `op_timeout` + connect + slack;
//! - every acknowledged write is readable afterwards with its value, and no read ever returned
//!   a wrong value or lost an acknowledged write.
//!
//! Writes are write-once keys: a write that timed out may still be executed by Redis later (it
//! was already in the socket), so overwriting one key could legitimately end with an older
//! value; write-once keys make "acknowledged ⇒ readable" exact. Backends run with
//! `appendfsync always`, so an acknowledged write survives SIGKILL.
//!
//! `CHAOS_SECS` (default 20) bounds the chaos phase; the seed is printed and can be replayed
//! with `CHAOS_SEED`.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer, free_port};

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// Every request must be answered within this: op_timeout from the write, plus a connect, plus
/// a hung connection's second op_timeout, plus scheduling noise on two shared cores.
const ANSWER_BOUND: Duration = Duration::from_millis(300 + 300 + 200 + 1500);

/// Replies a client may see for a request while backends fail: Respite's documented errors and
/// Redis's own `-LOADING` while a restarted backend replays its AOF.
fn allowed_error(reply: &[u8]) -> bool {
    [
        &b"-no upstream host"[..],
        b"-upstream failure",
        b"-upstream overflow",
        b"-LOADING",
    ]
    .iter()
    .any(|p| reply.starts_with(p))
}

fn config(port: u16, admin: u16, backends: &[String]) -> String {
    let hosts: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        r#"[admin]
address = "127.0.0.1:{admin}"
[runtime]
workers = 2
drain_timeout = "2s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
op_timeout = "{op}ms"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
[[clusters]]
name = "cache"
connect_timeout = "{connect}ms"
on_unhealthy = "fail_fast"
hosts = [{hosts}]
[[clusters.health_checks]]
interval = "200ms"
timeout = "100ms"
unhealthy_threshold = 2
healthy_threshold = 1
[clusters.outlier_detection]
consecutive_5xx = 3
base_ejection_time = "500ms"
max_ejection_percent = 100
"#,
        op = OP_TIMEOUT.as_millis(),
        connect = CONNECT_TIMEOUT.as_millis(),
        hosts = hosts.join(", ")
    )
}

/// What one client saw.
#[derive(Default)]
struct ClientLog {
    /// Acknowledged writes: key → value.
    acked: HashMap<String, String>,
    requests: u64,
    errors: HashMap<String, u64>,
    slowest: Duration,
    /// Violations found while running (wrong values, unexpected replies, late answers).
    violations: Vec<String>,
}

impl ClientLog {
    fn error(&mut self, reply: &[u8]) {
        let text = String::from_utf8_lossy(reply);
        let kind = text.trim_end().chars().take(40).collect::<String>();
        *self.errors.entry(kind).or_default() += 1;
    }
}

/// One load client: write-once SETs and GETs of keys it wrote before, in pipelines of 4,
/// checking every reply as it comes.
fn client(id: usize, addr: String, stop: Arc<AtomicBool>, seed: u64) -> ClientLog {
    let mut rng = fastrand::Rng::with_seed(seed ^ ((id as u64 + 1) * 0x9e37_79b9));
    let mut log = ClientLog::default();
    let mut written: Vec<String> = Vec::new();
    let mut c = RawClient::connect(&addr);
    c.stream()
        .set_read_timeout(Some(ANSWER_BOUND + Duration::from_secs(3)))
        .expect("read timeout");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Two fresh writes, two reads of earlier acknowledged ones.
        let mut batch: Vec<(bool, String, String)> = Vec::new();
        for _ in 0..2 {
            n += 1;
            batch.push((true, format!("chaos:{id}:{n}"), format!("v{id}.{n}")));
        }
        for _ in 0..2 {
            if let Some(k) = (!written.is_empty()).then(|| &written[rng.usize(..written.len())]) {
                let v = log.acked[k].clone();
                batch.push((false, k.clone(), v));
            }
        }
        let mut buf = Vec::new();
        for (write, k, v) in &batch {
            if *write {
                RawClient::encode_into(&mut buf, &[b"SET", k.as_bytes(), v.as_bytes()]);
            } else {
                RawClient::encode_into(&mut buf, &[b"GET", k.as_bytes()]);
            }
        }
        let sent = Instant::now();
        c.stream().write_all(&buf).expect("client write");
        for (write, k, v) in batch {
            let reply = match c.try_read_reply() {
                Ok(r) => r,
                Err(e) => {
                    log.violations.push(format!(
                        "client {id}: no answer for {k} within {:?}: {e}",
                        sent.elapsed()
                    ));
                    return log;
                }
            };
            let took = sent.elapsed();
            log.requests += 1;
            log.slowest = log.slowest.max(took);
            if took > ANSWER_BOUND {
                log.violations
                    .push(format!("client {id}: {k} answered after {took:?}"));
            }
            if write {
                if reply == OK {
                    log.acked.insert(k.clone(), v);
                    written.push(k);
                } else if allowed_error(&reply) {
                    log.error(&reply);
                } else {
                    log.violations
                        .push(format!("client {id}: SET {k} -> {}", show(&reply)));
                }
            } else if reply == bulk(v.as_bytes()) {
            } else if allowed_error(&reply) {
                log.error(&reply);
            } else {
                // Nil here is a lost acknowledged write; anything else a wrong value.
                log.violations.push(format!(
                    "client {id}: GET {k} (acknowledged {v}) -> {}",
                    show(&reply)
                ));
            }
        }
    }
    log
}

#[derive(Debug, Clone, Copy)]
enum Action {
    /// SIGKILL, then start again on the same port after a pause (AOF replayed).
    KillRestart,
    /// SIGSTOP for a while, then SIGCONT.
    Hang,
    /// SIGKILL and start again at once.
    Bounce,
}

#[test]
fn random_kills_hangs_and_restarts_under_load_keep_every_invariant() {
    let secs: u64 = std::env::var("CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("chaos: {secs}s, CHAOS_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);

    let backends: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]))
        .collect();
    let addrs = addrs(&backends);
    let (port, admin) = (free_port(), free_port());
    let respite = Respite::start(&config(port, admin, &addrs), port, admin);

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|id| {
            let (addr, stop) = (respite.addr(), stop.clone());
            std::thread::spawn(move || client(id, addr, stop, seed))
        })
        .collect();

    // The chaos: one action at a time on a random backend, with random pauses, for `secs`.
    let backends = Arc::new(Mutex::new(backends));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut actions: HashMap<&'static str, u32> = HashMap::new();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.u64(150..600)));
        let b = rng.usize(..3);
        let action = match rng.u8(..3) {
            0 => Action::KillRestart,
            1 => Action::Hang,
            _ => Action::Bounce,
        };
        let mut servers = backends.lock().unwrap_or_else(|e| e.into_inner());
        let server = &mut servers[b];
        match action {
            Action::KillRestart => {
                server.kill();
                std::thread::sleep(Duration::from_millis(rng.u64(50..900)));
                server.restart();
                *actions.entry("kill+restart").or_default() += 1;
            }
            Action::Hang => {
                let hung = Stopped::new(server.pid());
                std::thread::sleep(Duration::from_millis(rng.u64(100..1500)));
                drop(hung);
                *actions.entry("hang").or_default() += 1;
            }
            Action::Bounce => {
                server.restart();
                *actions.entry("bounce").or_default() += 1;
            }
        }
    }
    // Calm: let health checks and reconnects settle under load, then stop the clients.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<ClientLog> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread panicked"))
        .collect();

    let requests: u64 = logs.iter().map(|l| l.requests).sum();
    let acked: usize = logs.iter().map(|l| l.acked.len()).sum();
    let slowest = logs.iter().map(|l| l.slowest).max().unwrap_or_default();
    let mut errors: HashMap<String, u64> = HashMap::new();
    for l in &logs {
        for (k, n) in &l.errors {
            *errors.entry(k.clone()).or_default() += n;
        }
    }
    println!(
        "chaos: actions {actions:?}; {requests} requests, {acked} acknowledged writes, \
         errors {errors:?}, slowest answer {slowest:?}"
    );
    let violations: Vec<&String> = logs.iter().flat_map(|l| &l.violations).collect();
    assert!(
        violations.is_empty(),
        "{} violations (first 20): {:#?}\nrespite log tail:\n{}",
        violations.len(),
        violations.iter().take(20).collect::<Vec<_>>(),
        tail(&respite.log())
    );
    assert!(requests > 1000, "too little load got through: {requests}");
    assert!(
        acked > 100,
        "too few acknowledged writes to mean anything: {acked}"
    );

    // Every acknowledged write is readable through Respite once every backend is back.
    let mut c = respite.raw();
    let all: Vec<(&String, &String)> = logs.iter().flat_map(|l| &l.acked).collect();
    let settled = wait_until(Duration::from_secs(15), || {
        all.chunks(500).all(|chunk| {
            let cmds: Vec<Vec<Vec<u8>>> = chunk
                .iter()
                .map(|(k, _)| vec![b"GET".to_vec(), k.as_bytes().to_vec()])
                .collect();
            c.pipeline(&cmds).iter().all(|r| r.first() != Some(&b'-'))
        })
    });
    assert!(
        settled,
        "backends did not all come back through respite within 15s"
    );
    let mut lost = Vec::new();
    for chunk in all.chunks(500) {
        let cmds: Vec<Vec<Vec<u8>>> = chunk
            .iter()
            .map(|(k, _)| vec![b"GET".to_vec(), k.as_bytes().to_vec()])
            .collect();
        for ((k, v), reply) in chunk.iter().zip(c.pipeline(&cmds)) {
            if reply != bulk(v.as_bytes()) {
                lost.push(format!("{k}: acknowledged {v}, now {}", show(&reply)));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes not readable (first 20): {:#?}",
        lost.len(),
        all.len(),
        &lost[..lost.len().min(20)]
    );

    // No panic, and the process is still the one we started.
    let log = respite.log();
    assert!(
        !log.contains("panicked"),
        "respite panicked:\n{}",
        tail(&log)
    );
    assert_eq!(
        show(&c.cmd(&[b"PING"])),
        show(b"+PONG\r\n"),
        "respite still serves"
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

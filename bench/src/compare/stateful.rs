//! The stateful cases of `compare` (`--cases tx-c50,blpop-pingpong`): transactions and a
//! BLPOP/LPUSH ping-pong, which Respite serves on leased upstream connections; and the memory a
//! client costs while it is blocked in BLPOP.
//!
//! A run is closed-loop like the other cases (one load thread, warm-up, then the measured
//! phase), but its unit is a whole transaction or a completed BLPOP, and every reply is checked.
//! Against Respite the admin `/stats` are read before the run, when the measured phase starts
//! and after it: new leased connections opened in the measured run (`cluster.*.leased_cx_connect`)
//! show whether the pool churns (a warm pool opens none).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::Output;
use super::cases::{Case, Group, Workload};
use super::metrics::{RunRecord, Summary};
use super::sysstat::rss_kib;
use super::table::{fmt_rps, standalone, table};
use crate::load::{self, Conn, DONE, LoadConfig, MEASURE, Stop, ThreadStats, WARMUP};
use crate::resp::{ReplyKind, command, parse_reply};

/// Respite's lease stats at one moment, summed over clusters and workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// `cluster.*.leased_cx_connect`: leased upstream connections opened since start.
    pub connects: u64,
    /// `cluster.*.leased_cx_active`: leased connections held by a client now.
    pub active: i64,
    /// `cluster.*.leased_cx_idle`: leased connections idle in the pools now.
    pub idle: i64,
    /// `redis.*.blocked_clients`: clients blocked in a blocking command now.
    pub blocked: i64,
}

/// The `/stats` query [`lease_stats`] makes (`filter=leased_cx_|blocked_clients`).
const STATS_PATH: &str = "/stats?filter=leased_cx_%7Cblocked_clients";

/// Sums the lease stats out of `/stats` text (`name: value` lines).
pub fn parse_lease_stats(text: &str) -> LeaseStats {
    let mut s = LeaseStats::default();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Ok(v) = value.trim().parse::<i64>() else {
            continue;
        };
        let (Some(scope), Some(stat)) = (name.split('.').next(), name.rsplit('.').next()) else {
            continue;
        };
        match (scope, stat) {
            ("cluster", "leased_cx_connect") => s.connects += v.max(0) as u64,
            ("cluster", "leased_cx_active") => s.active += v,
            ("cluster", "leased_cx_idle") => s.idle += v,
            ("redis", "blocked_clients") => s.blocked += v,
            _ => {}
        }
    }
    s
}

/// Reads [`LeaseStats`] from the admin endpoint at `admin`.
pub fn lease_stats(admin: SocketAddr) -> Result<LeaseStats, String> {
    respite_tools::admin_client::get(admin, STATS_PATH).map(|t| parse_lease_stats(&t))
}

/// Respite's leased upstream connections around one stateful run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LeasedConnects {
    /// Leased connections opened during the warm-up (the pool growing to what the load needs).
    pub warmup: u64,
    /// Leased connections opened during the measured run: 0 (or nearly) when the pool does
    /// not churn.
    pub measured: u64,
    /// Leased connections open after the run (`leased_cx_active` + `leased_cx_idle`): the
    /// pool size, every earlier run included.
    pub pool_after: i64,
}

/// Runs `case` (a stateful workload) with `cfg` (its mix is ignored; `stop` must be a
/// duration); `admin` is Respite's admin address, read for [`LeasedConnects`]. The report
/// counts units: transactions or completed BLPOPs.
pub fn run(
    cfg: LoadConfig,
    case: &Case,
    admin: Option<SocketAddr>,
) -> io::Result<(crate::report::Report, Option<LeasedConnects>)> {
    let Stop::Duration(duration) = cfg.stop else {
        return Err(io::Error::other("a stateful case runs for a duration"));
    };
    match case.workload {
        Workload::Mix => return Err(io::Error::other("not a stateful case")),
        Workload::PingPong if !cfg.connections.is_multiple_of(2) => {
            return Err(io::Error::other(
                "a ping-pong needs an even connection count",
            ));
        }
        _ => {}
    }
    let stats = || admin.map(lease_stats).transpose().map_err(io::Error::other);
    let mut socks = Vec::with_capacity(cfg.connections);
    for i in 0..cfg.connections {
        let s = load::connect(cfg.addr, cfg.auth.as_deref()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("connecting to {} (connection {i}): {e}", cfg.target),
            )
        })?;
        s.set_nonblocking(true)?;
        socks.push(s);
    }
    let before = stats()?;
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let barrier = Arc::new(Barrier::new(2));
    let thread = {
        let (phase, barrier, workload) = (phase.clone(), barrier.clone(), case.workload);
        std::thread::Builder::new()
            .name("bench-stateful".into())
            .spawn(move || thread_main(socks, workload, phase, &barrier))?
    };
    barrier.wait();
    if let Some(w) = cfg.warmup {
        std::thread::sleep(w);
    }
    let at_start = match stats() {
        Ok(s) => s,
        Err(e) => {
            // Stop the load before giving up.
            phase.store(DONE, Ordering::Relaxed);
            let _ = thread.join();
            return Err(e);
        }
    };
    let cpu_before = load::cpu_snapshot(&cfg);
    let machine_before = crate::procstat::machine_busy().ok();
    let start = Instant::now();
    phase.store(MEASURE, Ordering::Relaxed);
    let deadline = start + duration;
    while !thread.is_finished() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
    phase.store(DONE, Ordering::Relaxed);
    let results = thread
        .join()
        .map_err(|_| io::Error::other("the stateful load thread panicked"))?;
    let mut report = load::finish_report(&cfg, 1, vec![results], start, cpu_before, machine_before);
    report.params.mix = case.mix.to_string();
    let after = stats()?;
    let leased = match (before, at_start, after) {
        (Some(b), Some(s), Some(a)) => Some(LeasedConnects {
            warmup: s.connects.saturating_sub(b.connects),
            measured: a.connects.saturating_sub(s.connects),
            pool_after: a.active + a.idle,
        }),
        _ => None,
    };
    Ok((report, leased))
}

fn thread_main(
    socks: Vec<StdTcpStream>,
    workload: Workload,
    phase: Arc<AtomicU8>,
    barrier: &Barrier,
) -> ThreadStats {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current_thread runtime");
    let local = tokio::task::LocalSet::new();
    let stats = Rc::new(RefCell::new(ThreadStats::new()));
    let conns: Vec<Conn> = {
        let _guard = rt.enter();
        socks
            .into_iter()
            .map(|s| Conn::new(TcpStream::from_std(s).expect("register socket with tokio")))
            .collect()
    };
    barrier.wait();
    local.block_on(&rt, async {
        let mut handles = Vec::new();
        let mut conns = conns.into_iter();
        let mut n = 0;
        while let Some(mut a) = conns.next() {
            let (stats, phase) = (stats.clone(), phase.clone());
            let second = if workload == Workload::PingPong {
                conns.next()
            } else {
                None
            };
            handles.push(tokio::task::spawn_local(async move {
                let r = match second {
                    Some(mut b) => pingpong(&mut a, &mut b, n, &phase, &stats).await,
                    None => transactions(&mut a, n, &phase, &stats).await,
                };
                let now = Instant::now();
                let mut st = stats.borrow_mut();
                st.finished = Some(st.finished.map_or(now, |f| f.max(now)));
                if let Err(e) = r {
                    st.conn_errors.push(format!("client {n}: {e}"));
                }
            }));
            n += 1;
        }
        for h in handles {
            h.await.expect("connection task");
        }
    });
    Rc::try_unwrap(stats)
        .ok()
        .expect("all tasks finished")
        .into_inner()
}

/// Checks that the reply at `at` starts with `want`; otherwise the message to count as the
/// unit's error (`what` names the command).
fn check(conn: &Conn, at: usize, kind: ReplyKind, what: &str, want: &[u8]) -> Result<(), String> {
    if let Some(e) = conn.error_text(at, kind) {
        return Err(format!("{what}: {e}"));
    }
    let got = conn.reply_bytes(at);
    if got.starts_with(want) {
        Ok(())
    } else {
        let shown = &got[..got.len().min(60)];
        Err(format!(
            "{what}: unexpected reply {:?}",
            String::from_utf8_lossy(shown)
        ))
    }
}

/// Records one unit: its latency from `sent` to `done` when measured, and its error if any.
fn record(
    stats: &RefCell<ThreadStats>,
    measure: bool,
    sent: Instant,
    done: Instant,
    bad: Option<String>,
) {
    if !measure {
        return;
    }
    let mut st = stats.borrow_mut();
    let ns = done.saturating_duration_since(sent).as_nanos() as u64;
    st.hist.saturating_record(ns.max(1));
    st.requests += 1;
    if let Some(e) = bad {
        st.errors += 1;
        if st.first_error.is_none() {
            st.first_error = Some(e);
        }
    }
}

/// A reply slower than this fails its client: a lost wake-up must not hang the run.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The next reply on `conn` (`what` names its command), within [`REPLY_TIMEOUT`].
async fn next(conn: &mut Conn, what: &str) -> io::Result<(usize, ReplyKind)> {
    tokio::time::timeout(REPLY_TIMEOUT, conn.next_reply())
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply to {what} within {} s", REPLY_TIMEOUT.as_secs()),
            ))
        })
}

/// Client `n` loops `MULTI`, `SET {cN}k v`, `INCR {cN}n`, `EXEC`, written at once.
async fn transactions(
    conn: &mut Conn,
    n: usize,
    phase: &AtomicU8,
    stats: &RefCell<ThreadStats>,
) -> io::Result<()> {
    let (k, c) = (format!("{{c{n}}}k"), format!("{{c{n}}}n"));
    let mut req = command(&[b"MULTI"]);
    req.extend(command(&[b"SET", k.as_bytes(), b"v"]));
    req.extend(command(&[b"INCR", c.as_bytes()]));
    req.extend(command(&[b"EXEC"]));
    let expect: [(&str, &[u8]); 4] = [
        ("MULTI", b"+OK\r\n"),
        ("SET", b"+QUEUED\r\n"),
        ("INCR", b"+QUEUED\r\n"),
        ("EXEC", b"*2\r\n+OK\r\n:"),
    ];
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == DONE {
            return Ok(());
        }
        let sent = Instant::now();
        conn.stream.write_all(&req).await?;
        let mut bad = None;
        for (what, want) in expect {
            let (at, kind) = next(conn, what).await?;
            if bad.is_none() {
                bad = check(conn, at, kind, what, want).err();
            }
        }
        record(stats, p == MEASURE, sent, conn.last_read, bad);
    }
}

/// Pair `n`: `BLPOP {pN}l 0` on `pop`, `LPUSH {pN}l x` on `push`, both replies read, again.
async fn pingpong(
    pop: &mut Conn,
    push: &mut Conn,
    n: usize,
    phase: &AtomicU8,
    stats: &RefCell<ThreadStats>,
) -> io::Result<()> {
    let key = format!("{{p{n}}}l");
    // An earlier run cut short may have left an element.
    push.stream
        .write_all(&command(&[b"DEL", key.as_bytes()]))
        .await?;
    let (at, kind) = next(push, "DEL").await?;
    check(push, at, kind, "DEL", b":").map_err(io::Error::other)?;
    let blpop = command(&[b"BLPOP", key.as_bytes(), b"0"]);
    let lpush = command(&[b"LPUSH", key.as_bytes(), b"x"]);
    let popped = format!("*2\r\n${}\r\n{key}\r\n$1\r\nx\r\n", key.len()).into_bytes();
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == DONE {
            return Ok(());
        }
        let sent = Instant::now();
        pop.stream.write_all(&blpop).await?;
        push.stream.write_all(&lpush).await?;
        let (at, kind) = next(push, "LPUSH").await?;
        // Without the element the BLPOP would wait for ever: the pair stops here.
        check(push, at, kind, "LPUSH", b":").map_err(io::Error::other)?;
        let (at, kind) = next(pop, "BLPOP").await?;
        let bad = check(pop, at, kind, "BLPOP", &popped).err();
        record(
            stats,
            p == MEASURE,
            sent,
            pop.last_read.max(push.last_read),
            bad,
        );
    }
}

/// Memory of one server with K clients blocked in `BLPOP`, against the same K idle.
#[derive(Debug, Clone, Serialize)]
pub struct BlockedMemory {
    pub target: String,
    /// K.
    pub clients: usize,
    /// VmRSS with the K clients connected and idle for 1 s, KiB.
    pub rss_idle_kib: u64,
    /// VmRSS 1 s after all K were blocked in `BLPOP {bN}l 0`, KiB.
    pub rss_blocked_kib: u64,
    /// (blocked − idle) × 1024 / K: bytes per blocked client (Respite: its leased upstream
    /// connection included). Signed: RSS moves in pages, so a server that allocates little per
    /// blocked client (Redis) can come out slightly negative.
    pub bytes_per_blocked_client: f64,
    /// Respite's `redis.*.blocked_clients` gauge with all K blocked (`None`: Redis direct).
    pub proxy_blocked_gauge: Option<i64>,
}

/// Sends `req` on a blocking connection and reads `n` replies (5 s read timeout), returning
/// the raw bytes.
pub(super) fn exchange(s: &mut StdTcpStream, req: &[u8], n: usize) -> Result<Vec<u8>, String> {
    s.write_all(req).map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let (mut pos, mut got) = (0, 0);
    while got < n {
        match parse_reply(&buf[pos..]).map_err(|e| e.to_string())? {
            Some(r) => {
                if let ReplyKind::Error { start, end } = r.kind {
                    return Err(String::from_utf8_lossy(&buf[pos + start..pos + end]).into_owned());
                }
                pos += r.len;
                got += 1;
            }
            None => {
                let k = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
                if k == 0 {
                    return Err("server closed the connection".into());
                }
                buf.extend_from_slice(&chunk[..k]);
            }
        }
    }
    Ok(buf)
}

/// `blocked_clients` of every redis-server in `conns` (one `INFO clients` each), summed.
fn backends_blocked(conns: &mut [StdTcpStream]) -> Result<i64, String> {
    let mut sum = 0;
    for c in conns {
        let info = exchange(c, &command(&[b"INFO", b"clients"]), 1)?;
        let text = String::from_utf8_lossy(&info);
        sum += text
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .ok_or("INFO clients has no blocked_clients")?;
    }
    Ok(sum)
}

/// Polls `backends_blocked` until it is `want`, for at most `within`.
fn wait_blocked(conns: &mut [StdTcpStream], want: i64, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let now = backends_blocked(conns)?;
        if now == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{now} clients blocked at the redis-servers after {} s, expected {want}",
                within.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Opens `k` idle clients to `port` (server process `pid`), measures RSS, blocks each in
/// `BLPOP {bN}l 0`, waits until the redis-servers at `backends` count all `k` blocked, waits
/// 1 s, measures RSS again, then closes them (and waits until the backends count none).
/// `admin`: Respite's admin address, for its blocked-clients gauge.
pub fn blocked_probe(
    target: &str,
    port: u16,
    pid: u32,
    k: usize,
    backends: &[u16],
    admin: Option<SocketAddr>,
) -> Result<BlockedMemory, String> {
    let err = |e: String| format!("{target}: {e}");
    let mut info: Vec<StdTcpStream> = backends
        .iter()
        .map(|&p| load::connect(([127, 0, 0, 1], p).into(), None))
        .collect::<io::Result<_>>()
        .map_err(|e| err(format!("connecting to a redis-server: {e}")))?;
    wait_blocked(&mut info, 0, Duration::from_secs(10)).map_err(err)?;
    let keys: Vec<String> = (0..k).map(|i| format!("{{b{i}}}l")).collect();
    // The lists must be empty, or BLPOP would not block.
    let mut conns = super::memory::open_idle(target, port, k)?;
    let mut dels = Vec::new();
    for key in &keys {
        dels.extend(command(&[b"DEL", key.as_bytes()]));
    }
    if let Some(c) = conns.first_mut() {
        exchange(c, &dels, k).map_err(|e| err(format!("DEL: {e}")))?;
    }
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(pid)?;
    for (c, key) in conns.iter_mut().zip(&keys) {
        c.write_all(&command(&[b"BLPOP", key.as_bytes(), b"0"]))
            .map_err(|e| err(format!("BLPOP: {e}")))?;
    }
    wait_blocked(&mut info, k as i64, Duration::from_secs(30)).map_err(err)?;
    std::thread::sleep(Duration::from_secs(1));
    let blocked = rss_kib(pid)?;
    let gauge = admin
        .map(lease_stats)
        .transpose()
        .map_err(err)?
        .map(|s| s.blocked);
    drop(conns);
    wait_blocked(&mut info, 0, Duration::from_secs(10))
        .map_err(|e| err(format!("after the clients left: {e}")))?;
    Ok(BlockedMemory {
        target: target.to_string(),
        clients: k,
        rss_idle_kib: idle,
        rss_blocked_kib: blocked,
        bytes_per_blocked_client: (blocked as f64 - idle as f64) * 1024.0 / k.max(1) as f64,
        proxy_blocked_gauge: gauge,
    })
}

/// The `## Transactions and blocking commands` section: the usual table per case with `n/a`
/// rows for the targets that cannot run it, Respite's leased connections per run, and the
/// memory per blocked client. Empty without stateful cases.
pub fn render(o: &Output) -> String {
    render_parts(&o.cases, &o.medians, &o.runs, &o.blocked_memory)
}

fn render_parts(
    cases: &[Case],
    medians: &[Summary],
    runs: &[RunRecord],
    blocked: &[BlockedMemory],
) -> String {
    let cases: Vec<&Case> = cases
        .iter()
        .filter(|c| c.group == Group::Stateful)
        .collect();
    if cases.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Transactions and blocking commands (closed loop; rps and CPU µs/req count units: one \
         transaction of 4 commands, or one completed BLPOP)\n"
    );
    let layout = standalone("case");
    let head = table(medians, &[], &layout, &|_| String::new());
    let columns = head.lines().next().map_or(0, |l| l.matches('|').count());
    s.push_str(&head);
    for case in &cases {
        let rows: Vec<&Summary> = medians.iter().filter(|m| m.case == case.id).collect();
        let body = table(medians, &rows, &layout, &|x| x.label.clone());
        for line in body.lines().skip(2) {
            let _ = writeln!(s, "{line}");
        }
        for t in case.not_on {
            let dashes = " – |".repeat(columns.saturating_sub(4));
            let _ = writeln!(s, "| {} | {t} | n/a |{dashes}", case.label);
        }
    }
    let leased: Vec<(&Case, &str, Vec<LeasedConnects>)> = cases
        .iter()
        .flat_map(|c| {
            let mut targets: Vec<&str> = Vec::new();
            for r in runs.iter().filter(|r| r.case == c.id && r.leased.is_some()) {
                if !targets.contains(&r.target.as_str()) {
                    targets.push(&r.target);
                }
            }
            targets.into_iter().map(move |t| {
                let l = runs
                    .iter()
                    .filter(|r| r.case == c.id && r.target == t)
                    .filter_map(|r| r.leased)
                    .collect();
                (*c, t, l)
            })
        })
        .collect();
    if !leased.is_empty() {
        let _ = writeln!(
            s,
            "\nLeased upstream connections (Respite's `cluster.*.leased_cx_connect` and \
             `leased_cx_active` + `leased_cx_idle`, all workers), per rep:\n"
        );
        let _ = writeln!(
            s,
            "| case | target | opened in warm-up | opened in measured run | pool after run |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|");
        for (c, t, l) in leased {
            let join = |f: &dyn Fn(&LeasedConnects) -> String| {
                l.iter().map(f).collect::<Vec<_>>().join(" ")
            };
            let _ = writeln!(
                s,
                "| {} | {t} | {} | {} | {} |",
                c.label,
                join(&|x| x.warmup.to_string()),
                join(&|x| x.measured.to_string()),
                join(&|x| x.pool_after.to_string()),
            );
        }
    }
    if !blocked.is_empty() {
        let _ = writeln!(
            s,
            "\nMemory per blocked client: RSS with K clients blocked in `BLPOP {{bN}}l 0` minus \
             RSS with the same K connected and idle (Respite: its leased upstream connection \
             included):\n"
        );
        let _ = writeln!(
            s,
            "| target | blocked clients | RSS idle KiB | RSS blocked KiB | bytes per blocked client | proxy blocked_clients |"
        );
        let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|");
        for m in blocked {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                m.target,
                fmt_rps(m.clients as f64),
                fmt_rps(m.rss_idle_kib as f64),
                fmt_rps(m.rss_blocked_kib as f64),
                if m.bytes_per_blocked_client < 0.0 {
                    format!("−{}", fmt_rps(-m.bytes_per_blocked_client))
                } else {
                    fmt_rps(m.bytes_per_blocked_client)
                },
                m.proxy_blocked_gauge
                    .map_or_else(|| "–".into(), |g| g.to_string()),
            );
        }
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_stats_are_summed() {
        let text = "cluster.backends.leased_cx_active: 2\n\
                    cluster.backends.leased_cx_connect: 40\n\
                    cluster.other.leased_cx_connect: 2\n\
                    cluster.backends.leased_cx_idle: 38\n\
                    cluster.backends.leased_cx_wait_ms: P0(nan,0)\n\
                    redis.bench.blocked_clients: 7\n";
        assert_eq!(
            parse_lease_stats(text),
            LeaseStats {
                connects: 42,
                active: 2,
                idle: 38,
                blocked: 7
            }
        );
        assert_eq!(parse_lease_stats(""), LeaseStats::default());
    }

    #[test]
    fn section_marks_unsupported_targets() {
        let cases = super::super::cases::all_cases();
        let tx = cases.iter().find(|c| c.id == "tx-c50").expect("tx-c50");
        let summary = Summary {
            case: tx.id.into(),
            label: tx.label.into(),
            group: Group::Stateful,
            target: "direct".into(),
            connections: 50,
            pipeline: 1,
            rate: None,
            reps: 1,
            noisy_reps: 0,
            median: super::super::metrics::Metrics {
                rps: 30_000.0,
                ..Default::default()
            },
            latency_curve_us: Vec::new(),
        };
        let blocked = BlockedMemory {
            target: "respite-1w".into(),
            clients: 1000,
            rss_idle_kib: 20_000,
            rss_blocked_kib: 30_000,
            bytes_per_blocked_client: 10_240.0,
            proxy_blocked_gauge: Some(1000),
        };
        let redis = BlockedMemory {
            target: "direct".into(),
            bytes_per_blocked_client: -20.5,
            proxy_blocked_gauge: None,
            ..blocked.clone()
        };
        let md = render_parts(&cases, &[summary], &[], &[blocked, redis]);
        let lines: Vec<&str> = md.lines().collect();
        let header = lines
            .iter()
            .find(|l| l.starts_with("| case |"))
            .expect("header");
        let na = lines
            .iter()
            .find(|l| l.starts_with("| MULTI+SET+INCR+EXEC c=50 | twemproxy | n/a |"))
            .expect("n/a row");
        assert_eq!(header.matches('|').count(), na.matches('|').count());
        assert!(md.contains("| MULTI+SET+INCR+EXEC c=50 | direct | 30 000 | 1.00 |"));
        assert!(md.contains("| BLPOP/LPUSH ping-pong, 25 pairs | twemproxy | n/a |"));
        assert!(md.contains("| respite-1w | 1 000 | 20 000 | 30 000 | 10 240 | 1000 |"));
        assert!(
            md.contains("| direct | 1 000 | 20 000 | 30 000 | −20 | – |"),
            "{md}"
        );
        assert_eq!(render_parts(&cases[..1], &[], &[], &[]), "");
    }
}

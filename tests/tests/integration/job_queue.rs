//! Real applications of transactions and blocking commands through Respite: the rq job queue
//! (PyPI `rq`: enqueue, two workers dequeuing with BLMOVE and finishing jobs with WATCH/MULTI/EXEC,
//! a backend restart in the middle) and redis-py's transaction APIs (`pipeline()`, WATCH
//! optimistic locking, `Redis.transaction`), in RESP2 and RESP3. The redis-py script is first
//! shown to pass against a redis-server directly, then run through Respite with the same
//! assertions; the rq scenarios have reference runs against a redis-server (`--ignored`).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use respite_tests::respite::Respite;
use respite_tests::{RawClient, RedisServer};

// ---- python, redis-py and rq ---------------------------------------------------------------

/// redis-py's version (installed if missing).
fn redis_py() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| python_module("redis", "redis"))
}

/// rq's version (installed if missing; it brings redis-py).
fn rq() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| python_module("rq", "rq"))
}

/// Panics unless the script exited 0 and printed a line starting `ok`.
fn assert_script_ok(what: &str, out: &Output, respite_log: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().any(|l| l.starts_with("ok")),
        "{what}: exit {}\nstdout: {stdout}\nstderr: {}\nrespite log tail:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        tail(respite_log, 15)
    );
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---- rq ------------------------------------------------------------------------------------

/// Jobs enqueued per scenario.
const JOBS: usize = 1000;

/// The job module the workers import: job `n` increments `done:<n>` once, through the same
/// address the workers use (Respite, or the redis-server in the direct runs).
const JOBS_MODULE: &str = r#"
import os
import redis

_conn = None


def work(n):
    global _conn
    if _conn is None:
        _conn = redis.Redis(host="127.0.0.1", port=int(os.environ["RESPITE_JOBS_PORT"]),
                            socket_timeout=10)
    _conn.incr(f"done:{n}")
    return n
"#;

/// Enqueues `count` jobs `respite_jobs.work(n)` with ids `job-<n>` (rq's `enqueue_many`: one
/// MULTI/EXEC per 100 jobs). argv: port, count.
const ENQUEUE: &str = r#"
import sys, redis
from rq import Queue
port, count = int(sys.argv[1]), int(sys.argv[2])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
q = Queue("default", connection=r)
jobs = [Queue.prepare_data("respite_jobs.work", args=(n,), job_id=f"job-{n}") for n in range(count)]
for i in range(0, count, 100):
    q.enqueue_many(jobs[i:i + 100])
assert q.count == count, q.count
print("ok", count)
"#;

/// Checks, on the backend itself, where each job ended. argv: port, count, interrupted: how many
/// jobs may have been cut off by a worker that died with them (each must then still be held by
/// rq, in its started registry or intermediate queue, for rq's own recovery; 0 = none). Always:
/// no job ran twice (`done:<n>` ≤ 1), none is lost, none failed, none is still queued.
const CHECK: &str = r#"
import sys, redis
from rq import Queue
from rq.job import Job
from rq.registry import FailedJobRegistry, FinishedJobRegistry
port, count, interrupted = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
q = Queue("default", connection=r)
done = [int(r.get(f"done:{n}") or 0) for n in range(count)]
finished = set(FinishedJobRegistry(queue=q).get_job_ids())
failed = FailedJobRegistry(queue=q).get_job_ids()
started = {m.decode().split(":")[0] for m in r.zrange("rq:wip:default", 0, -1)}
held = {m.decode() for m in r.lrange("rq:queue:default:intermediate", 0, -1)} | started
problems = []
twice = [(n, d) for n, d in enumerate(done) if d > 1]
if twice:
    problems.append(f"{len(twice)} jobs ran more than once (job, runs): {twice[:10]}")
if failed:
    why = [(j, (Job.fetch(j, connection=r).exc_info or "")[-300:]) for j in failed[:3]]
    problems.append(f"{len(failed)} jobs in the failed registry: {failed[:10]}; first: {why}")
if q.count:
    problems.append(f"{q.count} jobs still queued")
unfinished = [f"job-{n}" for n in range(count) if f"job-{n}" not in finished]
lost = [j for j in unfinished if j not in held and j not in failed]
if lost:
    problems.append(f"{len(lost)} jobs neither finished nor held by rq: {lost[:10]}")
cut = [j for j in unfinished if j in held]
if len(cut) > interrupted:
    problems.append(f"{len(cut)} jobs cut off by a dying worker (at most {interrupted} may be): {cut[:10]}")
not_run = [f"job-{n}" for n in range(count) if f"job-{n}" in finished and done[n] != 1]
if not_run:
    problems.append(f"{len(not_run)} finished jobs whose function did not run once: {not_run[:10]}")
if problems:
    print("FAIL", "; ".join(problems))
    sys.exit(1)
print("ok", "finished", len(finished), "cut off", len(cut), "runs", sum(done))
"#;

/// A directory holding the job module and the workers' logs.
struct JobDir(tempfile::TempDir);

impl JobDir {
    fn new() -> JobDir {
        let dir = tempfile::Builder::new()
            .prefix("respite-rq-")
            .tempdir()
            .expect("temp dir for rq");
        fs::write(dir.path().join("respite_jobs.py"), JOBS_MODULE).expect("write job module");
        JobDir(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// One `rq worker` process.
struct Worker {
    name: String,
    child: Child,
    log: PathBuf,
}

/// Two `rq worker` slots kept running like a supervisor (systemd, supervisord) keeps them: a
/// worker that exits while jobs are still queued is replaced by a new one (a new name: rq
/// refuses a second live worker of one name). Workers are `SimpleWorker`s (the job runs in the
/// worker process, no fork per job, to fit the time budget) with `--max-idle-time 2`: once the
/// queue is empty each blocks in `BLMOVE … 2` (longer than Respite's `op_timeout`), then exits.
/// Dropping kills them.
struct Workers {
    dir: PathBuf,
    /// The address workers and jobs use.
    port: u16,
    slots: Vec<Option<Worker>>,
    started: usize,
    /// Workers that exited: name, status, whether it was the clean idle exit.
    exited: Vec<(String, ExitStatus, bool)>,
}

impl Workers {
    fn start(dir: &Path, port: u16, count: usize) -> Workers {
        let mut w = Workers {
            dir: dir.to_path_buf(),
            port,
            slots: (0..count).map(|_| None).collect(),
            started: 0,
            exited: Vec::new(),
        };
        for slot in 0..count {
            w.spawn(slot);
        }
        w
    }

    fn spawn(&mut self, slot: usize) {
        let name = format!("w{slot}-{}", self.started);
        self.started += 1;
        let log = self.dir.join(format!("{name}.log"));
        let file = fs::File::create(&log).expect("worker log");
        let child = Command::new("python3")
            .args(["-m", "rq.cli", "worker", "-w", "rq.worker.SimpleWorker"])
            .args(["--max-idle-time", "2", "-n", &name])
            .arg("-u")
            .arg(format!("redis://127.0.0.1:{}/", self.port))
            .arg("-P")
            .arg(&self.dir)
            .arg("default")
            .env("PYTHONPATH", &self.dir)
            // A worker still running when the test fails is sent SIGABRT ([`Workers::report`]):
            // Python's fault handler then writes every thread's stack to its log.
            .env("PYTHONFAULTHANDLER", "1")
            .env("RESPITE_JOBS_PORT", self.port.to_string())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("spawn python3 -m rq.cli worker");
        self.slots[slot] = Some(Worker { name, child, log });
    }

    /// Reaps workers that exited, replacing each while `jobs_queued`; true once none runs.
    fn supervise(&mut self, jobs_queued: bool) -> bool {
        for slot in 0..self.slots.len() {
            let Some(w) = self.slots[slot].as_mut() else {
                continue;
            };
            let Ok(Some(status)) = w.child.try_wait() else {
                continue;
            };
            let log = fs::read_to_string(&w.log).unwrap_or_default();
            let clean = status.success() && log.contains("seconds, quitting");
            self.exited.push((w.name.clone(), status, clean));
            self.slots[slot] = None;
            if jobs_queued {
                self.spawn(slot);
            }
        }
        self.slots.iter().all(Option::is_none)
    }

    /// Names of the running workers.
    fn running(&self) -> Vec<String> {
        self.slots
            .iter()
            .flatten()
            .map(|w| w.name.clone())
            .collect()
    }

    /// Workers that exited other than by the clean idle exit (each may have cut off a job).
    fn died(&self) -> usize {
        self.exited.iter().filter(|(_, _, clean)| !clean).count()
    }

    /// Every worker's log tail that mentions an error, for failure messages; and for each worker
    /// still running, where its threads wait (SIGABRT to Python's fault handler) and the end of
    /// its log.
    fn report(&self) -> String {
        let mut out = format!("exits: {:?}\n", self.exited);
        let running: Vec<&Worker> = self.slots.iter().flatten().collect();
        for w in &running {
            let _ = Command::new("kill")
                .args(["-ABRT", &w.child.id().to_string()])
                .status();
        }
        if !running.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
        for w in &running {
            let log = fs::read_to_string(&w.log).unwrap_or_default();
            out.push_str(&format!(
                "--- {} was still running; its log ends:\n{}\n",
                w.name,
                tail(&log, 40)
            ));
        }
        for i in 0..self.started {
            for slot in 0..self.slots.len() {
                let path = self.dir.join(format!("w{slot}-{i}.log"));
                let Ok(log) = fs::read_to_string(&path) else {
                    continue;
                };
                let errors: Vec<&str> = log
                    .lines()
                    .filter(|l| {
                        l.contains("Error")
                            || l.contains("quitting")
                            || l.contains("retrying")
                            || l.contains("exception")
                    })
                    .collect();
                out.push_str(&format!(
                    "--- w{slot}-{i}: {}\n",
                    tail(&errors.join("\n"), 6)
                ));
            }
        }
        out
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in self.slots.iter_mut().flatten() {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

/// One integer (or bulk text parsed as one) from the backend directly; None if it cannot be
/// asked now (restarting) or the reply is nil / not a number.
fn backend_value(port: u16, args: &[&[u8]]) -> Option<String> {
    let mut c = RawClient::try_connect(&format!("127.0.0.1:{port}")).ok()?;
    let _ = c.stream().set_read_timeout(Some(Duration::from_secs(2)));
    let reply = c.try_cmd(args).ok()?;
    let text = String::from_utf8_lossy(&reply).to_string();
    match reply.first() {
        Some(b':') => Some(text[1..].trim().to_string()),
        Some(b'$') if reply != NIL => text.split("\r\n").nth(1).map(str::to_string),
        _ => None,
    }
}

/// `LLEN rq:queue:default` at the backend; None while it cannot answer.
fn queued(backend_port: u16) -> Option<i64> {
    backend_value(backend_port, &[b"LLEN", b"rq:queue:default"])?
        .parse()
        .ok()
}

/// How the backend is restarted in the middle of the processing.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Restart {
    /// As an operator does for maintenance: `rq suspend` (the `rq:suspended` key), wait until
    /// every worker has finished its job and sits suspended, restart, `rq resume`.
    Planned,
    /// A crash: the backend is killed while the workers are inside jobs, and started again.
    Unplanned,
}

/// A redis-server that keeps its data across [`RedisServer::restart`]: AOF with `appendfsync
/// always`, its data in `data` (on tmpfs when there is one: fsync per write on a disk would
/// triple the run time).
fn persistent_backend(data: &Path) -> RedisServer {
    let dir = data.to_string_lossy().to_string();
    RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        &dir,
    ])
}

/// A temp dir for a backend's data: under /dev/shm when it exists.
fn data_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut b = tempfile::Builder::new();
    b.prefix("respite-rq-data-");
    if shm.is_dir() {
        b.tempdir_in(shm)
    } else {
        b.tempdir()
    }
    .expect("temp dir for redis data")
}

/// rq scenarios run one at a time: each keeps two workers, a backend and Respite busy, and two
/// at once on a 2-CPU machine would double each one's time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The rq scenario: enqueue [`JOBS`] jobs through `port`, run two supervised workers against
/// `port`, restart `backend` (how: `restart`) once 30% of the jobs are dequeued, wait until the
/// workers have drained the queue and exited, then check every job on the backend itself.
/// `what` names the run in messages; `log` gives Respite's log (empty in direct runs).
fn rq_scenario(
    port: u16,
    backend: &mut RedisServer,
    restart: Restart,
    what: &str,
    log: &dyn Fn() -> String,
) {
    let version = rq();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = JobDir::new();
    let started = Instant::now();
    let out = run_python(ENQUEUE, &[port.to_string(), JOBS.to_string()], 60);
    assert_script_ok(&format!("{what}: rq {version} enqueue"), &out, &log());
    let enqueued = started.elapsed();
    let mut workers = Workers::start(dir.path(), port, 2);
    let backend_port = backend.port;
    let deadline = Instant::now() + Duration::from_secs(60);
    let supervise = |workers: &mut Workers, phase: &str| {
        let left = queued(backend_port);
        let all_exited = workers.supervise(left != Some(0));
        assert!(
            Instant::now() < deadline,
            "{what}: {phase} not done after 60 s ({left:?} jobs queued)\n{}\nrespite log:\n{}",
            workers.report(),
            tail(&log(), 16)
        );
        all_exited
    };
    // 30% dequeued.
    while queued(backend_port).is_none_or(|n| n > (JOBS as i64) * 7 / 10) {
        supervise(&mut workers, "the first 30%");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut client = RawClient::connect(&format!("127.0.0.1:{port}"));
    if restart == Restart::Planned {
        assert_eq!(client.cmd(&[b"SET", b"rq:suspended", b"1"]), OK);
        // Every worker suspended, no job in flight.
        loop {
            supervise(&mut workers, "suspending the workers");
            let suspended = workers.running().iter().all(|name| {
                let key = format!("rq:worker:{name}");
                backend_value(backend_port, &[b"HGET", key.as_bytes(), b"state"]).as_deref()
                    == Some("suspended")
            });
            let in_flight = backend_value(backend_port, &[b"ZCARD", b"rq:wip:default"]).zip(
                backend_value(backend_port, &[b"LLEN", b"rq:queue:default:intermediate"]),
            );
            if suspended && in_flight == Some(("0".to_string(), "0".to_string())) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let at = queued(backend_port);
    backend.restart();
    eprintln!(
        "{what}: backend restarted ({restart:?}) with {at:?} of {JOBS} jobs queued, {:?} after \
         the start",
        started.elapsed()
    );
    if restart == Restart::Planned {
        // `rq resume`, through the same address (Respite may answer errors until it has
        // reconnected to the restarted backend).
        let resumed = wait_until(Duration::from_secs(10), || {
            client = RawClient::connect(&format!("127.0.0.1:{port}"));
            client
                .try_cmd(&[b"DEL", b"rq:suspended"])
                .is_ok_and(|r| r == b":1\r\n")
        });
        assert!(
            resumed,
            "{what}: DEL rq:suspended never answered 1 after the restart"
        );
    }
    while !supervise(&mut workers, "processing") {
        std::thread::sleep(Duration::from_millis(20));
    }
    let allowed = match restart {
        Restart::Planned => 0,
        Restart::Unplanned => workers.died(),
    };
    eprintln!(
        "{what}: enqueued in {enqueued:?}, all workers exited after {:?}; {} workers ran, {} \
         of them died (exit other than the idle one)",
        started.elapsed(),
        workers.started,
        workers.died()
    );
    let out = run_python(
        CHECK,
        &[
            backend_port.to_string(),
            JOBS.to_string(),
            allowed.to_string(),
        ],
        60,
    );
    eprintln!("{what}: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        out.status.success(),
        "{what}: {}{}\n{}\nrespite log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        workers.report(),
        tail(&log(), 16)
    );
}

/// rq end to end through Respite over one backend (rq's transactions span its own keys, which
/// only one backend serves), across a planned backend restart in the middle: 1,000 jobs, two
/// workers, every job's function ran exactly once (`done:<n>` = 1), every job is in the
/// finished registry, none failed or was lost (a worker that dies while suspended, when a
/// request meets the restart, is replaced and cuts off nothing). The same run passes
/// against the redis-server directly (`rq_planned_restart_directly`).
#[test]
fn rq_runs_every_job_once_across_a_planned_backend_restart() {
    let data = data_dir();
    let mut backend = persistent_backend(data.path());
    let respite = Respite::over(&[backend.addr()], 2);
    rq_scenario(
        respite.port,
        &mut backend,
        Restart::Planned,
        "through respite, planned restart",
        &|| log_and_requests(&respite),
    );
}

/// Respite's log, then its counts of requests and connections still open (a worker that waits
/// for ever on a request Respite holds shows here).
fn log_and_requests(respite: &Respite) -> String {
    let active: Vec<String> = respite
        .stats()
        .into_iter()
        .filter(|(k, v)| *v != 0 && (k.contains("rq_active") || k.contains("cx_active")))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    format!("{}\nactive: {active:?}", respite.log())
}

/// rq through Respite across an unplanned backend restart (killed while the workers are inside
/// jobs): no job's function ran twice, none is lost, none failed; a job is unfinished only if a
/// worker died with it (at most one per dead worker), and rq still holds it (started
/// registry or intermediate queue) for its own recovery. Redis itself gives no more than that:
/// `rq_unplanned_restart_directly` holds the same assertions against the redis-server.
#[test]
fn rq_loses_no_job_across_an_unplanned_backend_restart() {
    let data = data_dir();
    let mut backend = persistent_backend(data.path());
    let respite = Respite::over(&[backend.addr()], 2);
    rq_scenario(
        respite.port,
        &mut backend,
        Restart::Unplanned,
        "through respite, unplanned restart",
        &|| log_and_requests(&respite),
    );
}

/// The planned-restart rq scenario passes against a redis-server directly (the scripts and
/// the assertions are right). A reference run, not run by default (about 12 s).
#[test]
#[ignore = "reference run against redis-server directly: cargo test --test integration -- job_queue:: --ignored"]
fn rq_planned_restart_directly() {
    let data = data_dir();
    let mut backend = persistent_backend(data.path());
    let port = backend.port;
    rq_scenario(
        port,
        &mut backend,
        Restart::Planned,
        "redis-server directly, planned restart",
        &String::new,
    );
}

/// The unplanned-restart rq scenario passes against a redis-server directly: what it allows
/// (jobs cut off by a worker that dies with the connection) is what Redis itself gives. A
/// reference run, not run by default (about 15 s).
#[test]
#[ignore = "reference run against redis-server directly: cargo test --test integration -- job_queue:: --ignored"]
fn rq_unplanned_restart_directly() {
    let data = data_dir();
    let mut backend = persistent_backend(data.path());
    let port = backend.port;
    rq_scenario(
        port,
        &mut backend,
        Restart::Unplanned,
        "redis-server directly, unplanned restart",
        &String::new,
    );
}

// ---- redis-py transactions -----------------------------------------------------------------

/// redis-py's transaction APIs; every call asserts its result. argv: port, protocol (2 or 3),
/// and two keys on different backends (`-` `-` against a single redis-server: that part is
/// skipped; through Respite it must raise redis-py's `ClusterCrossSlotError`, the
/// `ResponseError` for `-CROSSSLOT`). Prints `ok <version> <protocol> <WATCH conflicts>`.
const REDIS_PY_TRANSACTIONS: &str = r#"
import sys, threading, redis
port, proto, cross_a, cross_b = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = redis.Redis(host="127.0.0.1", port=port, protocol=proto, socket_timeout=10)
assert r.connection_pool.get_connection().protocol == proto
r.delete(*["{tx}" + k for k in ("a", "l", "h", "s", "after", "counter", "balance", "spent")])

# pipeline() is transactional by default: MULTI ... EXEC in one round trip.
p = r.pipeline()
p.set("{tx}a", "1").incr("{tx}a").incrby("{tx}a", 40).lpush("{tx}l", "x", "y")
p.lrange("{tx}l", 0, -1).hset("{tx}h", mapping={"f": "v"}).hgetall("{tx}h").get("{tx}missing")
res = p.execute()
assert res == [True, 2, 42, 2, [b"y", b"x"], 1, {b"f": b"v"}, None], res
# A command that fails at run time fails alone; the others ran (EXEC's semantics).
p = r.pipeline()
p.set("{tx}s", "str").incr("{tx}s").set("{tx}after", "ok")
res = p.execute(raise_on_error=False)
assert res[0] is True and isinstance(res[1], redis.ResponseError) and res[2] is True, res
assert r.get("{tx}after") == b"ok"

# WATCH / MULTI optimistic locking: 10 threads x 50 increments of one counter.
THREADS, EACH = 10, 50
conflicts = [0] * THREADS
def worker(i):
    c = redis.Redis(host="127.0.0.1", port=port, protocol=proto, socket_timeout=10)
    with c.pipeline() as pipe:
        for _ in range(EACH):
            while True:
                try:
                    pipe.watch("{tx}counter")
                    n = int(pipe.get("{tx}counter") or 0)
                    pipe.multi()
                    pipe.set("{tx}counter", n + 1)
                    pipe.execute()
                    break
                except redis.WatchError:
                    conflicts[i] += 1
threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert r.get("{tx}counter") == str(THREADS * EACH).encode(), r.get("{tx}counter")

# r.transaction(func, *watches): WATCH, the callable's reads, MULTI/EXEC, retried on conflict.
r.set("{tx}balance", 100)
def move(pipe):
    bal = int(pipe.get("{tx}balance"))
    pipe.multi()
    pipe.set("{tx}balance", bal - 30)
    pipe.incrby("{tx}spent", 30)
res = r.transaction(move, "{tx}balance", "{tx}spent")
assert res == [True, 30], res
assert r.get("{tx}balance") == b"70" and r.get("{tx}spent") == b"30"
def read_back(pipe):
    return int(pipe.get("{tx}balance")) * 2
assert r.transaction(read_back, "{tx}balance", value_from_callable=True) == 140
# The connection is an ordinary one again after the transactions.
assert r.incr("{tx}a") == 43

# A transaction over keys on two backends: refused with CROSSSLOT, nothing of it runs.
if cross_a != "-":
    p = r.pipeline()
    p.set(cross_a, "1").set(cross_b, "2").incr(cross_a)
    try:
        p.execute()
        raise AssertionError("a pipeline over two backends ran")
    except redis.ResponseError as e:
        # redis-py turns the -CROSSSLOT error code into ClusterCrossSlotError.
        assert isinstance(e, redis.exceptions.ClusterCrossSlotError), repr(e)
        assert "Keys in request don't hash to the same slot" in str(e), e
    assert r.exists(cross_a, cross_b) == 0, (r.get(cross_a), r.get(cross_b))
    assert r.ping() is True
print("ok", redis.__version__, proto, sum(conflicts))
"#;

/// Runs the redis-py transaction script in `protocol` against a redis-server, then through
/// Respite over three backends (with two keys on different backends for the CROSSSLOT part);
/// checks on the backends that nothing of the refused pipeline ran.
fn redis_py_transactions(protocol: u32) {
    let version = redis_py();
    let reference = RedisServer::start();
    let direct = run_python(
        REDIS_PY_TRANSACTIONS,
        &[
            reference.port.to_string(),
            protocol.to_string(),
            "-".into(),
            "-".into(),
        ],
        60,
    );
    assert_script_ok(
        &format!("redis-py {version} protocol={protocol} against redis-server"),
        &direct,
        "",
    );
    let backends = servers(3);
    let placement = Placement::new(&addrs(&backends));
    let (a, b) = (placement.key_on(0, "pyx"), placement.key_on(1, "pyx"));
    let respite = Respite::over(&addrs(&backends), 2);
    let out = run_python(
        REDIS_PY_TRANSACTIONS,
        &[
            respite.port.to_string(),
            protocol.to_string(),
            a.clone(),
            b.clone(),
        ],
        60,
    );
    assert_script_ok(
        &format!("redis-py {version} protocol={protocol} through respite"),
        &out,
        &respite.log(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("through respite: {}", stdout.trim());
    let conflicts: u64 = stdout
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no conflict count in {stdout:?}"));
    assert!(
        conflicts > 0,
        "10 threads never conflicted: WATCH cannot have been tested"
    );
    for key in [&a, &b] {
        assert!(
            !backends
                .iter()
                .any(|s| exists_on(&mut s.raw(), key.as_bytes())),
            "{key} exists: the refused pipeline ran in part"
        );
    }
    assert!(
        wait_until(Duration::from_secs(2), || respite
            .stat("cluster.cache.leased_cx_active")
            == 0),
        "leased connections still active after the script: {}",
        respite.stat("cluster.cache.leased_cx_active")
    );
}

/// redis-py's transaction APIs through Respite in RESP2 (`protocol=2`): `pipeline()`, WATCH
/// optimistic locking (10 threads × 50 increments = exactly 500), `Redis.transaction`, and a
/// pipeline over two backends refused with CROSSSLOT with nothing run.
#[test]
fn redis_py_transactions_resp2() {
    redis_py_transactions(2);
}

/// The same in RESP3 (`protocol=3`, redis-py 8's default): replies inside EXEC keep their
/// RESP3 types (HGETALL's map).
#[test]
fn redis_py_transactions_resp3() {
    redis_py_transactions(3);
}

//! Hot keys and big values add no allocation per request on the steady GET/SET path (keys
//! already tracked, no value over the threshold). The engine runs in this process under a
//! counting global allocator, as in `alloc.rs`; only allocations made while a worker is on the
//! request path (`engine::probe`) are asserted, so the runtime's own per-operation records do not
//! count. The sampled access log is not covered: a sampled line allocates its record by design.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use respite_tests::{RedisServer, free_port, respite::simple_config, wait_for_port};

struct Counting;

/// Allocations made while a thread was on Respite's request path.
static IN_PATH: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    if respite::stats::probe::in_request_path() {
        IN_PATH.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends `batch` (`n` requests) `rounds` times on every connection and reads `n` replies of
/// `reply_len` bytes each round into `buf`.
fn drive(conns: &mut [TcpStream], batch: &[u8], n: usize, reply_len: usize, rounds: usize) {
    let mut buf = vec![0u8; 1 << 16];
    let want = reply_len * n;
    for _ in 0..rounds {
        for c in conns.iter_mut() {
            c.write_all(batch).expect("write");
        }
        for c in conns.iter_mut() {
            let mut got = 0;
            while got < want {
                let k = c.read(&mut buf[got..want]).expect("read");
                assert!(k > 0, "respite closed the connection");
                got += k;
            }
        }
    }
}

#[test]
fn hot_keys_and_big_values_add_no_allocation_per_request() {
    let redis = RedisServer::start();
    let port = free_port();
    let admin = free_port();
    let extra = "big_value_bytes = 1000000\n[listeners.hot_keys]\ntop_k = 10\nwindow = \"600s\"\n";
    let cfg = simple_config(port, admin, &[redis.addr()], 1, extra);
    let config = respite::config::parse(&cfg, "hot_keys_alloc.toml").expect("config");
    let engine = respite::engine::Engine::start(config, None, None).expect("engine");
    assert!(wait_for_port(port, Duration::from_secs(10)));
    let mut conns: Vec<TcpStream> = (0..8)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            s
        })
        .collect();
    let keys: Vec<String> = (0..16).map(|i| format!("key:{i:02}")).collect();
    let set: Vec<u8> = keys
        .iter()
        .flat_map(|k| encode(&[b"SET", k.as_bytes(), b"abc"]))
        .collect();
    let get: Vec<u8> = keys
        .iter()
        .flat_map(|k| encode(&[b"GET", k.as_bytes()]))
        .collect();
    let mut report = Vec::new();
    let mut in_path = 0;
    for (name, batch, reply_len) in [("SET P16", &set, 5), ("GET P16", &get, 9)] {
        drive(&mut conns, batch, 16, reply_len, 200);
        let (before, before_all) = (
            IN_PATH.load(Ordering::Relaxed),
            ALLOCS.load(Ordering::Relaxed),
        );
        let rounds = 800;
        drive(&mut conns, batch, 16, reply_len, rounds);
        let n = IN_PATH.load(Ordering::Relaxed) - before;
        let all = ALLOCS.load(Ordering::Relaxed) - before_all;
        in_path += n;
        report.push(format!(
            "{name}: {} requests, {all} allocations in all, {n} on the request path",
            rounds * 16 * conns.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    // The premise: hot keys were on and saw these requests.
    std::thread::sleep(Duration::from_millis(300));
    let reports = engine.stats().hot_keys();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].top.len(), 10);
    assert!(reports[0].top[0].1 >= 2 * 1000 * 8, "{:?}", reports[0].top);
    assert_eq!(in_path, 0, "{}", report.join("\n"));
}

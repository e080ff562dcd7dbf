//! Connection churn: short-lived clients at a steady rate, each ending its connection in one of
//! the ways real clients do — after a reply, right after a request without waiting for it,
//! without sending anything, or in the middle of a command — so that session set-up and
//! tear-down (buffers, reply slots, upstream requests still in flight) run all the time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

/// What the churn did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ChurnResult {
    /// Connections opened and closed.
    pub connections: u64,
    /// Connects that failed.
    pub connect_failures: u64,
    /// PINGs that got no `+PONG`.
    pub ping_failures: u64,
}

/// The running churn thread.
pub struct Churn {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<ChurnResult>,
}

impl Churn {
    /// Opens `per_sec` connections a second to 127.0.0.1:`port` until finished.
    pub fn start(port: u16, per_sec: u32) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run(port, per_sec.max(1), &flag));
        Churn { stop, thread }
    }

    pub fn finish(self) -> ChurnResult {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn run(port: u16, per_sec: u32, stop: &AtomicBool) -> ChurnResult {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let gap = Duration::from_secs(1) / per_sec;
    let mut r = ChurnResult::default();
    let mut next = Instant::now();
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        next += gap;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        } else {
            // Behind schedule (a busy machine): do not try to catch up in a burst.
            next = Instant::now();
        }
        i += 1;
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            r.connect_failures += 1;
            continue;
        };
        r.connections += 1;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let key = format!("soak:churn:{}", i % 1000);
        match i % 4 {
            // A reply, then close.
            0 => {
                let mut pong = [0u8; 7];
                let ok = s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
                    && s.read_exact(&mut pong).is_ok()
                    && &pong == b"+PONG\r\n";
                if !ok {
                    r.ping_failures += 1;
                }
            }
            // Requests sent, replies never read.
            1 => {
                let mut req = crate::resp::command(&[b"SET", key.as_bytes(), b"x"]);
                req.extend(crate::resp::command(&[b"GET", key.as_bytes()]));
                let _ = s.write_all(&req);
            }
            // Nothing sent at all.
            2 => {}
            // Half a command.
            _ => {
                let _ = s.write_all(b"*2\r\n$3\r\nGET\r\n$10\r\nsoak:");
            }
        }
        drop(s);
    }
    r
}

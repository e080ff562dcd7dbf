//! The hostile clients: many connections that each write a long pipeline of `GET big` and never
//! read a byte. They run as tasks of one tokio current-thread runtime on a thread of their own
//! (thousands of connections without thousands of threads); each writes until its pipeline is
//! out, Respite stops reading it, or Respite closes it, then holds the connection open until
//! the attack ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// What the attackers managed.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AttackerResult {
    /// Connections opened.
    pub connected: u64,
    /// Connects refused or timed out.
    pub connect_failures: u64,
    /// Connections that wrote their whole pipeline.
    pub wrote_all: u64,
    /// Connections whose writes failed (Respite closed them: evicted or over the output limit).
    pub write_errors: u64,
    /// Request bytes written in total.
    pub bytes_written: u64,
}

#[derive(Default)]
struct Counters {
    connected: AtomicU64,
    connect_failures: AtomicU64,
    wrote_all: AtomicU64,
    write_errors: AtomicU64,
    bytes_written: AtomicU64,
}

/// The running attack.
pub struct Attackers {
    stop: watch::Sender<bool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl Attackers {
    /// Opens `clients` connections to `addr`, each writing `requests` copies of `request`.
    pub fn start(addr: SocketAddr, clients: usize, request: Vec<u8>, requests: usize) -> Attackers {
        let (stop, rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let pipeline: Arc<Vec<u8>> = Arc::new(request.repeat(requests));
        let c = counters.clone();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let mut tasks = Vec::with_capacity(clients);
                for _ in 0..clients {
                    tasks.push(tokio::spawn(attacker(
                        addr,
                        pipeline.clone(),
                        c.clone(),
                        rx.clone(),
                    )));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        Attackers {
            stop,
            counters,
            thread: Some(thread),
        }
    }

    /// Counts so far.
    pub fn snapshot(&self) -> AttackerResult {
        let c = &self.counters;
        AttackerResult {
            connected: c.connected.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
            wrote_all: c.wrote_all.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
        }
    }

    /// Closes every connection and returns the counts.
    pub fn finish(mut self) -> AttackerResult {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.snapshot()
    }
}

impl Drop for Attackers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn attacker(
    addr: SocketAddr,
    pipeline: Arc<Vec<u8>>,
    c: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let connect = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::net::TcpStream::connect(addr),
    );
    let mut s = tokio::select! {
        r = connect => match r {
            Ok(Ok(s)) => s,
            _ => {
                c.connect_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
        },
        _ = stop.wait_for(|s| *s) => return,
    };
    c.connected.fetch_add(1, Ordering::Relaxed);
    let write = async {
        for chunk in pipeline.chunks(64 * 1024) {
            if s.write_all(chunk).await.is_err() {
                c.write_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            c.bytes_written
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        c.wrote_all.fetch_add(1, Ordering::Relaxed);
    };
    tokio::select! {
        () = write => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    // Hold the connection, still never reading, until the attack ends.
    let _ = stop.wait_for(|s| *s).await;
}

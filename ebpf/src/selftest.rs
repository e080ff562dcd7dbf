//! The start-up self-test: before redirecting anyone's traffic, prove on this kernel that a
//! redirected connection carries small messages both ways and a multi-megabyte stream intact
//! (kernel pitfalls this catches: stalls and truncation of large redirected writes, docs/ebpf.md).
//! The calling process must already be in the sockmap's cgroup.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::Sockmap;

/// Round trips of [`PING_BYTES`] in the ping-pong.
pub const PINGS: u32 = 1000;
/// Size of one ping, in bytes.
pub const PING_BYTES: usize = 64;
/// Bytes of the bulk transfer (sent, echoed back, checksummed).
pub const BULK_BYTES: usize = 8 << 20;
/// A read or write that makes no progress for this long fails the test (a stall).
pub const STALL: Duration = Duration::from_secs(10);

/// What the self-test measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Mean ping-pong round trip, in microseconds.
    pub ping_pong_rtt_us: f64,
    /// Bytes sent and received back intact in the bulk transfer.
    pub bulk_bytes: u64,
    /// Messages the programs redirected during the test.
    pub redirects: u64,
}

/// Runs the test over a loopback connection inside the process, with the listener's port added
/// to the filter for the duration (`base` is the filter to restore). The programs must be
/// attached and enabled.
///
/// Errors: the bytes did not come back equal, a stall, or the connection was not redirected
/// (the counters did not grow): each with the detail.
pub fn run(sockmap: &mut Sockmap, base: &BTreeSet<u16>) -> Result<Report, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("self-test bind: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("self-test: {e}"))?
        .port();
    let mut with = base.clone();
    with.insert(port);
    sockmap.set_ports(&with)?;
    let result = exchange(sockmap, listener);
    sockmap.set_ports(base)?;
    result
}

fn exchange(sockmap: &Sockmap, listener: TcpListener) -> Result<Report, String> {
    let before = sockmap.counters()?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = std::thread::spawn(move || echo(listener));
    let outcome = client(addr);
    let served = server
        .join()
        .map_err(|_| "self-test: the echo thread panicked".to_string())?;
    let (rtt, bulk) = outcome?;
    served?;
    let after = sockmap.counters()?;
    let redirects = after.redirect_total.wrapping_sub(before.redirect_total);
    if redirects < u64::from(PINGS) * 2 {
        return Err(format!(
            "self-test: only {redirects} messages were redirected for {} round trips (is this \
             process in the sockmap's cgroup?)",
            PINGS
        ));
    }
    Ok(Report {
        ping_pong_rtt_us: rtt,
        bulk_bytes: bulk,
        redirects,
    })
}

fn echo(listener: TcpListener) -> Result<(), String> {
    let (mut s, _) = listener
        .accept()
        .map_err(|e| format!("self-test accept: {e}"))?;
    s.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(STALL))
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = Patient(&s)
            .read(&mut buf)
            .map_err(|e| format!("self-test echo read: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n])
            .map_err(|e| format!("self-test echo write: {e}"))?;
    }
}

fn client(addr: std::net::SocketAddr) -> Result<(f64, u64), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("self-test connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(STALL))
        .map_err(|e| e.to_string())?;

    let mut ping = [0u8; PING_BYTES];
    let mut pong = [0u8; PING_BYTES];
    let start = Instant::now();
    for i in 0..PINGS {
        ping.fill(i as u8);
        s.write_all(&ping)
            .map_err(|e| format!("self-test ping {i}: {e}"))?;
        Patient(&s)
            .read_exact(&mut pong)
            .map_err(|e| format!("self-test pong {i}: {e}"))?;
        if pong != ping {
            return Err(format!("self-test: round trip {i} came back altered"));
        }
    }
    let rtt = start.elapsed().as_secs_f64() * 1e6 / f64::from(PINGS);

    let data = pattern(BULK_BYTES);
    let sent = xxhash_rust::xxh64::xxh64(&data, 0);
    let mut writer = s.try_clone().map_err(|e| e.to_string())?;
    let send = std::thread::spawn(move || -> Result<(), String> {
        for chunk in data.chunks(256 << 10) {
            writer
                .write_all(chunk)
                .map_err(|e| format!("self-test bulk write: {e}"))?;
        }
        writer
            .shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())
    });
    let mut got = Vec::with_capacity(BULK_BYTES);
    let read = Patient(&s).read_to_end(&mut got);
    let wrote = send
        .join()
        .map_err(|_| "self-test: the writer thread panicked".to_string())?;
    read.map_err(|e| format!("self-test bulk read after {} bytes: {e}", got.len()))?;
    wrote?;
    if got.len() != BULK_BYTES || xxhash_rust::xxh64::xxh64(&got, 0) != sent {
        return Err(format!(
            "self-test: bulk transfer came back as {} bytes of {BULK_BYTES}{}",
            got.len(),
            if got.len() == BULK_BYTES {
                " with a different checksum"
            } else {
                ""
            }
        ));
    }
    Ok((rtt, BULK_BYTES as u64))
}

/// A reader that takes a spurious `EAGAIN` as "try again" until [`STALL`] passes without
/// progress. A blocking read on a redirected socket returns `EAGAIN` when something else wakes
/// it with nothing to read (`tcp_bpf_recvmsg` waits only once), e.g. another thread's write on
/// the same socket, as in the bulk transfer.
struct Patient<'a>(&'a TcpStream);

impl Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let start = Instant::now();
        loop {
            match (&mut &*self.0).read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) && start.elapsed() < STALL => {}
                other => return other,
            }
        }
    }
}

/// Bytes that are not all alike, so a reordered or duplicated chunk changes the checksum.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

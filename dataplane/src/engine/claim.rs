//! Listener addresses belong to one process. The workers bind with `SO_REUSEPORT`, so a second
//! respite started on an address another one listens on would silently join its listeners and
//! take part of its connections; instead, every address a start or a reload is about to bind is
//! probed first ([`crate::net::probe_unshared`]) and one another process listens on is refused.
//! The exception is a hot restart's hand-over (`respite --hot-restart`, docs/hot-restart.md):
//! there the new process shares the old one's listeners until the old one drains.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tracing::info;

use crate::config::ListenerConfig;

/// How long an address found in use is probed again before it is refused. A process killed a
/// moment ago still listens for a while: the kernel tears its io_uring down after the process is
/// reaped, and a pending accept keeps the listening socket open until then (26–50 ms measured on
/// an idle 2-core machine, longer under load). A supervisor restarting respite right after a
/// crash must not be refused for it; a live process holding the address is still refused, only
/// later.
pub(super) const IN_USE_GRACE: Duration = Duration::from_secs(2);

/// Pause between two probes of an address in use.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// The advice every "in use" error ends with.
pub(super) const IN_USE_HINT: &str = "another process is listening on it (is a respite already \
     running on this address? to replace a running respite, start the new one with \
     --hot-restart: docs/hot-restart.md)";

/// Checks, before any worker binds, that no other process listens on the addresses of
/// `listeners` this process does not listen on yet. `running` holds the addresses its workers
/// listen on now (the running config's listeners; empty at start): those, and addresses that
/// overlap them, are not probed, since this process's own sockets would make the probe fail (the
/// workers' bind joins their own listeners there). `hand_over`: a hot restart whose old process
/// has not begun to drain; an address in use is then shared with it (logged) instead of refused.
/// `grace`: how long, in all, addresses in use are probed again before one is refused
/// ([`IN_USE_GRACE`]; zero in tests).
///
/// Errors: the first address another process listens on, as `listener <name>: bind <address>:
/// another process is listening on it (…)`; or any other bind error of the probe, as
/// `listener <name>: bind <address>: <error>` (the worker's bind would fail the same way).
pub(super) fn check_listeners(
    listeners: &[ListenerConfig],
    running: &[SocketAddr],
    hand_over: bool,
    grace: Duration,
) -> Result<(), String> {
    // A hand-over shares an address in use at once: nothing to wait for.
    let deadline = Instant::now() + if hand_over { Duration::ZERO } else { grace };
    for l in listeners {
        if running.iter().any(|&r| overlaps(r, l.address)) {
            continue;
        }
        match probe(l.address, deadline) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && hand_over => {
                info!(
                    listener = %l.name,
                    address = %l.address,
                    "hot restart: sharing the listener address with the process being replaced \
                     until it drains"
                );
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                return Err(format!(
                    "listener {}: bind {}: {IN_USE_HINT}",
                    l.name, l.address
                ));
            }
            Err(e) => return Err(format!("listener {}: bind {}: {e}", l.name, l.address)),
        }
    }
    Ok(())
}

/// [`crate::net::probe_unshared`] until it succeeds, fails otherwise than `AddrInUse`, or
/// `deadline` passes.
fn probe(address: SocketAddr, deadline: Instant) -> io::Result<()> {
    loop {
        match crate::net::probe_unshared(address) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(PROBE_EVERY);
            }
            result => return result,
        }
    }
}

/// True when sockets bound to `a` and to `b` claim the same port: the same IP, or either one the
/// wildcard (`0.0.0.0` or `[::]`, which also covers IPv4 unless `IPV6_V6ONLY`).
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Socket, Type};

    /// A listening socket as another respite's worker has it (`SO_REUSEPORT`, the same uid:
    /// exactly what a plain bind with `SO_REUSEPORT` would join).
    fn foreign_listener(addr: &str) -> (Socket, SocketAddr) {
        let addr: SocketAddr = addr.parse().unwrap();
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).unwrap();
        s.set_reuse_address(true).unwrap();
        s.set_reuse_port(true).unwrap();
        s.bind(&addr.into()).unwrap();
        s.listen(16).unwrap();
        let bound = s.local_addr().unwrap().as_socket().unwrap();
        (s, bound)
    }

    fn listeners(addrs: &[SocketAddr]) -> Vec<ListenerConfig> {
        let mut text = String::new();
        for (i, a) in addrs.iter().enumerate() {
            text.push_str(&format!(
                "[[listeners]]\nname = \"l{i}\"\naddress = \"{a}\"\nop_timeout = \"1s\"\n\
                 [listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n"
            ));
        }
        text.push_str("[[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n");
        crate::config::parse_pushed(&text, "t").unwrap().listeners
    }

    #[test]
    fn an_address_another_process_listens_on_is_refused_naming_listener_and_address() {
        let (_held, addr) = foreign_listener("127.0.0.1:0");
        let free = {
            let (s, a) = foreign_listener("127.0.0.1:0");
            drop(s);
            a
        };
        let err =
            check_listeners(&listeners(&[free, addr]), &[], false, Duration::ZERO).unwrap_err();
        assert_eq!(
            err,
            format!(
                "listener l1: bind {addr}: another process is listening on it (is a respite \
                 already running on this address? to replace a running respite, start the new \
                 one with --hot-restart: docs/hot-restart.md)"
            )
        );
        // The wildcard on the same port covers it, and the other way round.
        let any: SocketAddr = format!("0.0.0.0:{}", addr.port()).parse().unwrap();
        assert!(check_listeners(&listeners(&[any]), &[], false, Duration::ZERO).is_err());
        let (_any_held, any_addr) = foreign_listener("0.0.0.0:0");
        let local: SocketAddr = format!("127.0.0.1:{}", any_addr.port()).parse().unwrap();
        assert!(check_listeners(&listeners(&[local]), &[], false, Duration::ZERO).is_err());
    }

    #[test]
    fn a_hand_over_shares_and_own_listeners_are_not_probed() {
        let (_held, addr) = foreign_listener("127.0.0.1:0");
        let ls = listeners(&[addr]);
        assert_eq!(check_listeners(&ls, &[], true, Duration::ZERO), Ok(()));
        // Held by this process's own workers (a reload that keeps or renames the listener).
        assert_eq!(check_listeners(&ls, &[addr], false, Duration::ZERO), Ok(()));
        let any: SocketAddr = format!("0.0.0.0:{}", addr.port()).parse().unwrap();
        assert_eq!(check_listeners(&ls, &[any], false, Duration::ZERO), Ok(()));
        // Another port of this process's does not cover it.
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(check_listeners(&ls, &[other], false, Duration::ZERO).is_err());
    }

    #[test]
    fn port_zero_and_connections_left_by_a_closed_listener_do_not_count() {
        let zero: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(
            check_listeners(&listeners(&[zero]), &[], false, Duration::ZERO),
            Ok(())
        );
        // A connection the server side closed first stays in TIME_WAIT on the listener's port
        // after the listener is gone; a restart on that port must not be refused for it.
        let (l, addr) = foreign_listener("127.0.0.1:0");
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (server, _) = l.accept().unwrap();
        drop(server);
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &client, &mut buf).unwrap(), 0);
        drop(client);
        drop(l);
        assert_eq!(
            check_listeners(&listeners(&[addr]), &[], false, Duration::ZERO),
            Ok(())
        );
    }

    #[test]
    fn an_address_released_within_the_grace_is_taken_and_one_held_longer_is_refused() {
        let (held, addr) = foreign_listener("127.0.0.1:0");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(held);
        });
        let started = Instant::now();
        let ls = listeners(&[addr]);
        assert_eq!(
            check_listeners(&ls, &[], false, Duration::from_secs(5)),
            Ok(())
        );
        assert!(started.elapsed() >= Duration::from_millis(100));
        releaser.join().unwrap();

        let (_held, addr) = foreign_listener("127.0.0.1:0");
        let started = Instant::now();
        let grace = Duration::from_millis(200);
        assert!(check_listeners(&listeners(&[addr]), &[], false, grace).is_err());
        assert!(started.elapsed() >= grace);
    }
}

//! Who may change state over the admin HTTP port: not a web page.
//!
//! The admin port has no authentication: whoever can connect to it may read every stat and the
//! config (passwords redacted), and change state. That is why it binds `127.0.0.1` by default.
//! A local process is trusted; a browser on the same machine is not, since any page it shows can
//! send requests to `127.0.0.1`: a cross-origin form or `fetch` (which carries an `Origin`
//! header), or a page of a DNS name rebound to `127.0.0.1` (whose requests name that DNS name in
//! `Host`). So a request that may change state — every method but `GET` and `HEAD`, which are
//! `POST /healthcheck/fail`, `POST /healthcheck/ok`, `POST /logging` and `POST /drain_listeners`
//! (other methods are `405` anyway) — is refused with `403` when it
//!
//! - carries an `Origin` header (any value, `null` too: curl, `respite drain` and other tools
//!   send none), or
//! - names in `Host` anything but `localhost`, a loopback address, or the admin address's IP
//!   (any IP address when the admin address is unspecified, `0.0.0.0` or `[::]`: each local
//!   address is then the admin address; a page never reaches it by an IP address without being
//!   cross-origin). The port in `Host` is not looked at. A request without `Host` (HTTP/1.0)
//!   passes: browsers always send one.
//!
//! Reads (`GET`, `HEAD`) are not checked: a cross-origin page cannot read their answers (the
//! endpoint sends no CORS headers), and a rebound page could read only what any local process
//! can. The control socket is a Unix socket of mode 0600, out of any browser's reach, and is not
//! checked either.

use std::net::{IpAddr, SocketAddr};

use super::{Reply, text};

/// The `403` for a request that may change state (`is_get` false) with `origin` (the `Origin`
/// header, if any) or `hosts` (every `Host` header) that a browser page would send; `None`
/// when it may go on. `admin` is the admin address as configured.
pub fn refused<'a>(
    is_get: bool,
    origin: Option<&str>,
    hosts: impl IntoIterator<Item = &'a str>,
    admin: SocketAddr,
) -> Option<Reply> {
    if is_get {
        return None;
    }
    if let Some(o) = origin {
        return Some(text(
            403,
            format!(
                "forbidden: a request that changes state must not carry an Origin header \
                 (got {o:?}): the admin endpoint takes no browser requests\n"
            ),
        ));
    }
    for host in hosts {
        if !local_host(host, admin.ip()) {
            return Some(text(
                403,
                format!(
                    "forbidden: Host {host:?} is neither localhost, a loopback address nor the \
                     admin address\n"
                ),
            ));
        }
    }
    None
}

/// True if `host` (a `Host` header value: a name or IP address, with an optional port) is
/// `localhost`, a loopback address, or `admin` (any address when `admin` is unspecified).
fn local_host(host: &str, admin: IpAddr) -> bool {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((inside, tail)) if tail.is_empty() || tail.starts_with(':') => inside,
            _ => return false,
        },
        // `name`, `v4`, `name:port` or `v4:port`; a bare IPv6 address without brackets is not
        // a valid Host.
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => {
            let ip = ip.to_canonical();
            ip.is_loopback() || admin.is_unspecified() || ip == admin.to_canonical()
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(a: &str) -> SocketAddr {
        a.parse().unwrap()
    }

    fn status(is_get: bool, origin: Option<&str>, host: &[&str], at: &str) -> u16 {
        refused(is_get, origin, host.iter().copied(), admin(at)).map_or(200, |r| r.status)
    }

    #[test]
    fn reads_are_never_refused() {
        let at = "127.0.0.1:9901";
        assert_eq!(
            status(true, Some("https://evil.example"), &["evil.example"], at),
            200
        );
    }

    #[test]
    fn a_post_with_an_origin_is_refused() {
        let at = "127.0.0.1:9901";
        for origin in ["https://evil.example", "null", "http://127.0.0.1:9901"] {
            let r = refused(false, Some(origin), ["127.0.0.1:9901"], admin(at)).unwrap();
            assert_eq!(r.status, 403);
            assert!(r.body.contains("Origin"), "{}", r.body);
        }
    }

    #[test]
    fn a_post_names_a_local_host() {
        let at = "127.0.0.1:9901";
        for ok in [
            "localhost",
            "LocalHost:9901",
            "127.0.0.1:9901",
            "127.0.0.2",
            "[::1]:9901",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(status(false, None, &[ok], at), 200, "{ok}");
        }
        assert_eq!(status(false, None, &[], at), 200, "no Host");
        for bad in [
            "evil.example",
            "evil.example:9901",
            "localhost.evil.example",
            "10.0.0.5:9901",
            "[::1",
            "[::1]x",
            "::1",
            "",
        ] {
            let r = refused(false, None, [bad], admin(at)).unwrap();
            assert_eq!(r.status, 403, "{bad}");
            assert!(r.body.contains("Host"), "{}", r.body);
        }
        assert_eq!(
            status(false, None, &["localhost", "evil.example"], at),
            403,
            "every Host header counts"
        );
    }

    #[test]
    fn the_admin_address_is_a_local_host() {
        assert_eq!(
            status(false, None, &["10.0.0.5:9901"], "10.0.0.5:9901"),
            200
        );
        assert_eq!(
            status(false, None, &["10.0.0.6:9901"], "10.0.0.5:9901"),
            403
        );
        // Unspecified: every local address is the admin address; names still are not.
        assert_eq!(status(false, None, &["10.0.0.6:9901"], "0.0.0.0:9901"), 200);
        assert_eq!(status(false, None, &["[fe80::1]:9901"], "[::]:9901"), 200);
        assert_eq!(
            status(false, None, &["admin.example:9901"], "0.0.0.0:9901"),
            403
        );
    }
}

//! Which ports the filter holds: those of the live config's listeners, the operator's extra
//! ports, and with `upstreams` the ports of upstream hosts on loopback (the Respite → local
//! Redis hop). The kernel side only records sockets whose both ends are loopback, so a port
//! here never affects traffic to other addresses.

use std::collections::BTreeSet;

use respite::config::Config;

/// The filter for `config` (None before any config is applied): listener ports (a listener on
/// port 0 has no known port and is skipped), `extra` ranges, and loopback upstream ports when
/// `upstreams`.
pub fn wanted(config: Option<&Config>, extra: &[(u16, u16)], upstreams: bool) -> BTreeSet<u16> {
    let mut ports: BTreeSet<u16> = extra.iter().flat_map(|&(a, b)| a..=b).collect();
    if let Some(c) = config {
        ports.extend(
            c.listeners
                .iter()
                .map(|l| l.address.port())
                .filter(|&p| p != 0),
        );
        if upstreams {
            ports.extend(
                c.clusters
                    .iter()
                    .flat_map(|c| &c.hosts)
                    .filter(|h| h.address.ip().is_loopback())
                    .map(|h| h.address.port()),
            );
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        respite::config::parse_pushed(text, "test").expect("valid config")
    }

    const TWO_CLUSTERS: &str = r#"
[[listeners]]
name = "main"
address = "127.0.0.1:7001"
op_timeout = "1s"
[[listeners.prefix_routes.routes]]
prefix = "remote:"
cluster = "remote"
[listeners.prefix_routes.catch_all_route]
cluster = "local"

[[clusters]]
name = "local"
hosts = ["127.0.0.1:6379", "127.0.0.2:6380"]

[[clusters]]
name = "remote"
hosts = ["10.0.0.9:6379"]
"#;

    #[test]
    fn listeners_and_extra_ranges() {
        let c = config(TWO_CLUSTERS);
        let got = wanted(Some(&c), &[(9000, 9002)], false);
        assert_eq!(got, BTreeSet::from([7001, 9000, 9001, 9002]));
    }

    #[test]
    fn upstreams_adds_only_loopback_hosts() {
        let c = config(TWO_CLUSTERS);
        assert_eq!(
            wanted(Some(&c), &[], true),
            BTreeSet::from([6379, 6380, 7001])
        );
    }

    #[test]
    fn no_config_yet_means_only_the_extra_ports() {
        assert_eq!(wanted(None, &[(6379, 6379)], true), BTreeSet::from([6379]));
    }
}

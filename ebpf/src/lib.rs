//! Respite's sockmap accelerator: the eBPF programs (`src/bpf/sockmap.bpf.c`, compiled by clang in
//! `build.rs` and embedded here) and their loader, used by `respite-control --sockmap`.
//!
//! What the programs do (kernel docs, `Documentation/bpf/map_sockmap.rst`): a `sockops` program on
//! a cgroup v2 records each established IPv4 loopback socket whose local or remote port is in the
//! port filter in a SOCKHASH keyed by its 4-tuple; an `sk_msg` program on that SOCKHASH hands every
//! message to the peer socket's receive queue (`bpf_msg_redirect_hash`, `BPF_F_INGRESS`), skipping
//! the loopback TCP stack. A socket whose message once took TCP stays on TCP (see the C file):
//! this keeps bytes in order. Switching off ([`Settings`]) stops recording new sockets; recorded
//! ones keep redirecting until they close (moving a live connection to TCP breaks blocking
//! readers, docs/ebpf.md). Switching on covers connections established afterwards.
//!
//! Maps are pinned under `<bpffs>/respite/` ([`PIN_DIR`]) so that a stopping control process
//! never removes live sockets from the SOCKHASH (the kernel discards redirected bytes a socket has
//! not read yet when it leaves the map); the next start reuses them. Requirements, privileges and
//! pitfalls: `docs/ebpf.md`.

mod counters;
mod filter;
mod host;
mod loader;
mod pinned;
pub mod selftest;

pub use counters::Counters;
pub use filter::PortFilter;
pub use host::{cgroup2_root, ensure_bpffs, ensure_cgroup, join_cgroup};
pub use loader::Sockmap;
pub use pinned::{Pinned, Settings};

/// Name of the directory under the bpffs mount that holds Respite's pinned maps.
pub const PIN_DIR: &str = "respite";

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o"));
static UNAVAILABLE: &str = include_str!(concat!(env!("OUT_DIR"), "/unavailable.txt"));

/// The compiled eBPF object (ELF, BTF maps), or why this build has none (built without clang or
/// libbpf headers; see `build.rs`).
pub fn object() -> Result<&'static [u8], &'static str> {
    if UNAVAILABLE.is_empty() && !OBJECT.is_empty() {
        Ok(OBJECT)
    } else {
        Err(UNAVAILABLE)
    }
}

/// Map names in the object; the C file defines them.
pub(crate) mod names {
    pub const SOCKS: &str = "respite_socks";
    pub const PORTS: &str = "respite_ports";
    pub const SETTINGS: &str = "respite_settings";
    pub const COUNTERS: &str = "respite_counters";
    pub const SOCKOPS: &str = "respite_sockops";
    pub const SK_MSG: &str = "respite_sk_msg";
}

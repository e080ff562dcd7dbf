//! `respite-control --sockmap`: loads Respite's sockmap programs ([`respite_ebpf`]), proves them
//! with the self-test, keeps the port filter in step with the live config, follows the kill
//! switch (`respite-control sockmap off|on`, which writes the pinned settings map), and reports
//! counters (admin `/sockmap`, and the data plane's `/stats` as `sockmap.*`).
//!
//! Never fatal: anything that stops it (no privileges, no cgroup v2, no bpffs, an old kernel, a
//! build without clang, a failed self-test) is one "sockmap unavailable: <reason>" log line, and
//! the control process goes on without it. Docs: `docs/ebpf.md`.

pub mod ports;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use respite::config::Config;
use respite_ebpf::{Counters, Settings, Sockmap, selftest};
use serde_json::{Value, json};

/// Where and what to accelerate.
#[derive(Debug, Clone)]
pub struct Options {
    /// The cgroup v2 whose processes are covered (created if missing); None = the cgroup v2
    /// mount root, i.e. the whole node.
    pub cgroup: Option<PathBuf>,
    /// Ports added to the filter besides the listeners' (inclusive ranges).
    pub extra_ports: Vec<(u16, u16)>,
    /// Also the ports of loopback upstream hosts of the live config.
    pub upstreams: bool,
    /// The bpf file system for the pinned maps (mounted if it is not).
    pub bpffs: PathBuf,
}

/// Default bpffs mount point (libbpf's and bpftool's).
pub const DEFAULT_BPFFS: &str = "/sys/fs/bpf";

/// The accelerator's state, shared by the ticker, the admin endpoint and shutdown.
#[derive(Clone)]
pub struct Accelerator(Arc<Mutex<Inner>>);

struct Inner {
    options: Options,
    sockmap: Option<Sockmap>,
    reason: Option<String>,
    cgroup: Option<PathBuf>,
    self_test: Option<selftest::Report>,
    counters: Counters,
}

impl Accelerator {
    /// Sets everything up and runs the self-test, blocking (≈ a second). Never fails: on any
    /// error the accelerator is unavailable with the reason, logged once.
    pub fn start(options: Options) -> Accelerator {
        let mut inner = Inner {
            options,
            sockmap: None,
            reason: None,
            cgroup: None,
            self_test: None,
            counters: Counters::default(),
        };
        match setup(&inner.options) {
            Ok((sockmap, report)) => {
                tracing::info!(
                    cgroup = %sockmap.cgroup().display(),
                    rtt_us = format!("{:.1}", report.ping_pong_rtt_us),
                    bulk_bytes = report.bulk_bytes,
                    "sockmap enabled: self-test passed"
                );
                inner.cgroup = Some(sockmap.cgroup().to_path_buf());
                inner.self_test = Some(report);
                inner.sockmap = Some(sockmap);
            }
            Err(reason) => {
                tracing::error!("sockmap unavailable: {reason}; Respite runs without it");
                inner.reason = Some(reason);
            }
        }
        Accelerator(Arc::new(Mutex::new(inner)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Once a second: follow the kill switch (detach when it is off, attach again when it is
    /// on), make the filter match `config`, read the counters. Returns the `POST /stats/external`
    /// body for the data plane.
    pub fn tick(&self, config: Option<&Config>) -> String {
        let mut inner = self.lock();
        let Inner {
            options,
            sockmap,
            counters,
            ..
        } = &mut *inner;
        if let Some(s) = sockmap.as_mut() {
            follow_switch(s);
            update_filter(s, options, config);
            match s.counters() {
                Ok(c) => *counters = c,
                Err(e) => tracing::warn!(error = %e, "sockmap: reading counters"),
            }
        }
        let enabled = inner.sockmap.as_ref().is_some_and(Sockmap::attached);
        stats_body(&inner.counters, enabled)
    }

    /// Makes the filter hold the ports of `config`: called before each push, so that the data
    /// plane's first connections under a new config are already covered.
    pub fn prepare(&self, config: &Config) {
        let mut inner = self.lock();
        let Inner {
            options, sockmap, ..
        } = &mut *inner;
        if let Some(s) = sockmap.as_mut() {
            update_filter(s, options, Some(config));
        }
    }

    /// The admin `/sockmap` JSON (shape in the crate's admin docs).
    pub fn status(&self) -> Value {
        let inner = self.lock();
        let state = match &inner.sockmap {
            None => "unavailable",
            Some(s) if s.attached() => "enabled",
            Some(_) => "disabled",
        };
        let ports: Vec<u16> = inner
            .sockmap
            .as_ref()
            .map(|s| s.ports().ports())
            .unwrap_or_default();
        let c = &inner.counters;
        json!({
            "state": state,
            "reason": match (&inner.sockmap, &inner.reason) {
                (None, r) => r.clone(),
                (Some(s), _) if !s.attached() =>
                    Some("switched off (respite-control sockmap off); `sockmap on` re-enables".to_string()),
                _ => None,
            },
            "cgroup": inner.cgroup.as_ref().map(|p| p.display().to_string()),
            "ports": ports,
            "self_test": inner.self_test.as_ref().map(|r| json!({
                "ok": true,
                "ping_pong_rtt_us": r.ping_pong_rtt_us,
                "bulk_bytes": r.bulk_bytes,
                "detail": format!("{} round trips of {} B and {} B echoed intact; {} messages redirected",
                    selftest::PINGS, selftest::PING_BYTES, r.bulk_bytes, r.redirects),
            })),
            "sockets": c.sockets,
            "inserts": c.inserts,
            "insert_fail": c.insert_fail,
            "redirect_total": c.redirect_total,
            "redirect_fail": c.redirect_fail,
        })
    }

    /// Switches recording off and detaches the programs (the pinned maps stay for the sockets
    /// still in them). Called on exit.
    pub fn shutdown(&self) {
        if self.lock().sockmap.take().is_some() {
            tracing::info!("sockmap: switched off and detached");
        }
    }
}

fn update_filter(s: &mut Sockmap, options: &Options, config: Option<&Config>) {
    let want = ports::wanted(config, &options.extra_ports, options.upstreams);
    if want != s.ports().ports().into_iter().collect::<BTreeSet<u16>>() {
        match s.set_ports(&want) {
            Ok(()) => tracing::info!(ports = ?want, "sockmap: port filter updated"),
            Err(e) => tracing::warn!(error = %e, "sockmap: port filter not updated"),
        }
    }
}

/// The programs follow the pinned settings flag, which `respite-control sockmap off|on` writes.
fn follow_switch(s: &mut Sockmap) {
    match (s.enabled(), s.attached()) {
        (Ok(false), true) => match s.detach() {
            Ok(()) => {
                tracing::warn!("sockmap switched off: programs detached; new connections take TCP")
            }
            Err(e) => tracing::error!(error = %e, "sockmap switched off, but detaching failed"),
        },
        (Ok(true), false) => match s.attach() {
            Ok(()) => tracing::info!("sockmap switched on: new connections are redirected"),
            Err(e) => tracing::error!(error = %e, "sockmap switched on, but attaching failed"),
        },
        (Err(e), _) => tracing::warn!(error = %e, "sockmap: reading the switch"),
        _ => {}
    }
}

fn stats_body(c: &Counters, enabled: bool) -> String {
    format!(
        "counter sockmap.redirect_total {}\ncounter sockmap.redirect_fail {}\n\
         counter sockmap.insert_total {}\ncounter sockmap.insert_fail {}\n\
         gauge sockmap.sockets {}\ngauge sockmap.enabled {}\n",
        c.redirect_total,
        c.redirect_fail,
        c.inserts,
        c.insert_fail,
        c.sockets,
        u8::from(enabled)
    )
}

fn setup(options: &Options) -> Result<(Sockmap, selftest::Report), String> {
    respite_ebpf::object().map_err(str::to_string)?;
    let hint = |e: String| {
        if e.contains("Operation not permitted") || e.contains("Permission denied") {
            format!(
                "{e} (needs root, or CAP_BPF + CAP_NET_ADMIN, and CAP_SYS_ADMIN to mount bpffs)"
            )
        } else {
            e
        }
    };
    let cgroup = match &options.cgroup {
        Some(p) => p.clone(),
        None => respite_ebpf::cgroup2_root()?,
    };
    respite_ebpf::ensure_cgroup(&cgroup).map_err(hint)?;
    if respite_ebpf::ensure_bpffs(&options.bpffs).map_err(hint)? {
        tracing::info!(path = %options.bpffs.display(), "mounted bpffs");
    }
    // The self-test's sockets must be covered: they are if this process is in the cgroup's
    // subtree already, otherwise it moves in.
    if !in_subtree(&cgroup) {
        respite_ebpf::join_cgroup(&cgroup, std::process::id()).map_err(hint)?;
    }
    let mut sockmap = Sockmap::load(&options.bpffs, &cgroup).map_err(hint)?;
    // Attach before switching on: if another respite-control holds these pins, attaching fails
    // and its switch is left alone.
    sockmap.attach().map_err(hint)?;
    sockmap.set_enabled(true).map_err(hint)?;
    let base = ports::wanted(None, &options.extra_ports, false);
    let report = selftest::run(&mut sockmap, &base)
        .map_err(|e| format!("self-test failed, not enabled: {e}"))?;
    Ok((sockmap, report))
}

/// Whether this process's cgroup (`/proc/self/cgroup`, the `0::` line) is `cgroup` or below it.
fn in_subtree(cgroup: &Path) -> bool {
    let Ok(root) = respite_ebpf::cgroup2_root() else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|rel| root.join(rel.trim_start_matches('/')))
        .is_some_and(|mine| mine.starts_with(cgroup))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_body_names_every_stat() {
        let c = Counters {
            inserts: 4,
            insert_fail: 0,
            redirect_total: 100,
            redirect_fail: 2,
            sockets: 3,
        };
        assert_eq!(
            stats_body(&c, true),
            "counter sockmap.redirect_total 100\ncounter sockmap.redirect_fail 2\n\
             counter sockmap.insert_total 4\ncounter sockmap.insert_fail 0\n\
             gauge sockmap.sockets 3\ngauge sockmap.enabled 1\n"
        );
    }
}

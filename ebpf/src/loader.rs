//! Loading and attaching the programs (aya: `EbpfLoader`, `SockOps::attach` to a cgroup,
//! `SkMsg::attach` to the SOCKHASH).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use aya::programs::sk_msg::SkMsgLinkId;
use aya::programs::sock_ops::SockOpsLinkId;
use aya::programs::{CgroupAttachMode, SkMsg, SockOps};
use aya::{Ebpf, EbpfLoader};

use crate::Counters;
use crate::pinned::{Maps, Settings};
use crate::{PIN_DIR, PortFilter, names};

/// The loaded programs and their maps. Attached or not ([`Sockmap::attach`],
/// [`Sockmap::detach`]); dropping it switches recording off ([`Settings`]) if it ever attached,
/// detaches both programs, and leaves the pinned maps for the sockets still in them.
pub struct Sockmap {
    ebpf: Ebpf,
    maps: Maps,
    cgroup: PathBuf,
    cgroup_dir: File,
    sockops: Option<SockOpsLinkId>,
    sk_msg: Option<SkMsgLinkId>,
    filter: PortFilter,
    /// Whether this loader ever attached the programs, i.e. owns the pins' switch.
    owner: bool,
    /// An exclusive `flock` on the pin directory, held for the loader's life: one loader per
    /// set of pins. A second one would replace the first one's sk_msg program on the shared
    /// SOCKHASH and switch it off on exit.
    _lock: nix::fcntl::Flock<File>,
}

impl Sockmap {
    /// Loads the embedded object with its maps pinned under `<bpffs>/respite/` (reused when
    /// already pinned, e.g. by a previous run), and loads both programs into the kernel, not yet
    /// attached. `bpffs` must be a mounted bpf file system ([`crate::ensure_bpffs`]), `cgroup` a
    /// cgroup v2 directory ([`crate::ensure_cgroup`]).
    ///
    /// Errors, each a sentence for the log: the build has no object, another loader holds the
    /// pins, no privileges (CAP_BPF and CAP_NET_ADMIN, or root), a kernel without sockmap or
    /// sk_storage, a pinned map of another shape (from another version: remove
    /// `<bpffs>/respite`).
    pub fn load(bpffs: &Path, cgroup: &Path) -> Result<Sockmap, String> {
        let object = crate::object().map_err(str::to_string)?;
        let pins = bpffs.join(PIN_DIR);
        std::fs::create_dir_all(&pins).map_err(|e| format!("creating {}: {e}", pins.display()))?;
        let dir = File::open(&pins).map_err(|e| format!("opening {}: {e}", pins.display()))?;
        let lock = nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| {
                format!(
                    "{} is in use by another respite-control ({e}); one loader per bpffs",
                    pins.display()
                )
            })?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(&pins)
            .load(object)
            .map_err(|e| {
                format!(
                    "loading the eBPF object (pins in {}): {}",
                    pins.display(),
                    chain(&e)
                )
            })?;
        let maps = Maps::from(|name| {
            ebpf.take_map(name)
                .ok_or_else(|| format!("the object has no map {name}"))
        })?;
        for name in [names::SOCKOPS, names::SK_MSG] {
            let program = ebpf
                .program_mut(name)
                .ok_or_else(|| format!("the object has no program {name}"))?;
            let loaded = match name {
                names::SOCKOPS => <&mut SockOps>::try_from(program).and_then(|p| p.load()),
                _ => <&mut SkMsg>::try_from(program).and_then(|p| p.load()),
            };
            loaded.map_err(|e| format!("loading program {name}: {}", chain(&e)))?;
        }
        let cgroup_dir =
            File::open(cgroup).map_err(|e| format!("opening cgroup {}: {e}", cgroup.display()))?;
        let mut sockmap = Sockmap {
            ebpf,
            maps,
            cgroup: cgroup.to_path_buf(),
            cgroup_dir,
            sockops: None,
            sk_msg: None,
            filter: PortFilter::default(),
            owner: false,
            _lock: lock,
        };
        // A reused pin holds the last run's ports: start from what the kernel has.
        sockmap.filter = sockmap.maps.read_ports()?;
        Ok(sockmap)
    }

    /// Attaches sk_msg to the SOCKHASH and sockops to the cgroup. Idempotent. On kernels ≥ 5.7
    /// the cgroup attach is a BPF link, which runs alongside other programs on the cgroup (links
    /// take no flags: `Single` asks for none).
    ///
    /// Errors: the kernel refused an attach (privileges, cgroup).
    pub fn attach(&mut self) -> Result<(), String> {
        if self.sk_msg.is_none() {
            let fd = self.maps.socks.fd();
            let p: &mut SkMsg = program(&mut self.ebpf, names::SK_MSG)?;
            self.sk_msg = Some(
                p.attach(fd)
                    .map_err(|e| format!("attaching sk_msg to the SOCKHASH: {}", chain(&e)))?,
            );
            self.owner = true;
        }
        if self.sockops.is_none() {
            let p: &mut SockOps = program(&mut self.ebpf, names::SOCKOPS)?;
            self.sockops = Some(
                p.attach(&self.cgroup_dir, CgroupAttachMode::Single)
                    .map_err(|e| {
                        format!(
                            "attaching sockops to cgroup {}: {}",
                            self.cgroup.display(),
                            chain(&e)
                        )
                    })?,
            );
        }
        Ok(())
    }

    /// Detaches both programs. Sockets already in the map keep the sk_msg program until they
    /// close, and keep redirecting.
    pub fn detach(&mut self) -> Result<(), String> {
        if let Some(id) = self.sockops.take() {
            program::<SockOps>(&mut self.ebpf, names::SOCKOPS)?
                .detach(id)
                .map_err(|e| format!("detaching sockops: {}", chain(&e)))?;
        }
        if let Some(id) = self.sk_msg.take() {
            program::<SkMsg>(&mut self.ebpf, names::SK_MSG)?
                .detach(id)
                .map_err(|e| format!("detaching sk_msg: {}", chain(&e)))?;
        }
        Ok(())
    }

    /// Whether both programs are attached.
    pub fn attached(&self) -> bool {
        self.sockops.is_some() && self.sk_msg.is_some()
    }

    /// The cgroup the sockops program is (or would be) attached to.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// Makes the port filter hold exactly `ports`, writing only the words that change.
    pub fn set_ports(&mut self, ports: &BTreeSet<u16>) -> Result<(), String> {
        let want = PortFilter::new(ports);
        self.maps.write_ports(&want, &self.filter)?;
        self.filter = want;
        Ok(())
    }

    /// The port filter as last written.
    pub fn ports(&self) -> &PortFilter {
        &self.filter
    }

    /// The counters and the number of sockets in the map.
    pub fn counters(&self) -> Result<Counters, String> {
        self.maps.counters()
    }
}

impl Settings for Sockmap {
    fn enabled(&self) -> Result<bool, String> {
        self.maps.enabled()
    }
    fn set_enabled(&mut self, on: bool) -> Result<(), String> {
        self.maps.set_enabled(on)
    }
}

impl Drop for Sockmap {
    fn drop(&mut self) {
        // Off first, so no new socket is recorded; those in the (pinned) map keep redirecting
        // until they close. aya detaches the programs when `ebpf` drops.
        if self.owner
            && let Err(e) = self.maps.set_enabled(false)
        {
            tracing::warn!(error = %e, "sockmap: could not switch recording off");
        }
        if let Err(e) = self.detach() {
            tracing::warn!(error = %e, "sockmap: detaching");
        }
    }
}

fn program<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, String>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("the object has no program {name}"))?;
    p.try_into().map_err(|e| format!("program {name}: {e}"))
}

/// An error with its sources, which aya keeps the kernel's errno and verifier log in.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        // aya's messages often repeat their source's text already.
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

//! The host set-up sockmap needs: a bpffs mount for the pinned maps and a cgroup v2 for the
//! sockops program (kernel docs: `Documentation/admin-guide/cgroup-v2.rst`, "Organizing
//! Processes"; `bpf(2)` pinning needs a bpf filesystem).

use std::path::{Path, PathBuf};

use nix::sys::statfs::{BPF_FS_MAGIC, CGROUP2_SUPER_MAGIC, statfs};

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mounts` (`/sys/fs/cgroup` on a
/// unified host, `/sys/fs/cgroup/unified` on a hybrid one).
///
/// Errors: no `cgroup2` mount (a cgroup-v1-only host), or `/proc` unreadable.
pub fn cgroup2_root() -> Result<PathBuf, String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map_err(|e| format!("reading /proc/self/mounts: {e}"))?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount_path(dir)))
        })
        .next()
        .ok_or_else(|| {
            "no cgroup v2 hierarchy is mounted (cgroup v1 only); sockmap needs cgroup v2"
                .to_string()
        })
}

/// `/proc/mounts` writes space, tab, newline and backslash in paths as octal escapes.
fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Makes sure `path` is a cgroup v2 directory, creating it (one level) when it does not exist.
///
/// Errors: the path is on another file system (e.g. a cgroup v1 controller), its parent is not a
/// cgroup v2 directory, or it cannot be created (no privileges).
pub fn ensure_cgroup(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if !path.exists() {
        let parent = path.parent().unwrap_or(Path::new("/"));
        check_cgroup2(parent).map_err(|e| format!("cannot create cgroup {shown}: {e}"))?;
        std::fs::create_dir(path).map_err(|e| format!("creating cgroup {shown}: {e}"))?;
    }
    check_cgroup2(path)
}

fn check_cgroup2(path: &Path) -> Result<(), String> {
    let fs = statfs(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if fs.filesystem_type() == CGROUP2_SUPER_MAGIC {
        Ok(())
    } else {
        Err(format!(
            "{} is not a cgroup v2 directory (see `mount -t cgroup2`)",
            path.display()
        ))
    }
}

/// Moves process `pid` (all its threads) into the cgroup at `path`. Sockets take their cgroup
/// when created, so this covers the sockets the process opens afterwards, and those of the
/// children it starts.
pub fn join_cgroup(path: &Path, pid: u32) -> Result<(), String> {
    std::fs::write(path.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("moving pid {pid} into cgroup {}: {e}", path.display()))
}

/// Makes sure `path` is a bpf file system, mounting one there if not (as `mount -t bpf bpf
/// PATH`). Returns whether it mounted one.
///
/// Errors: the directory cannot be created or mounted on (needs CAP_SYS_ADMIN).
pub fn ensure_bpffs(path: &Path) -> Result<bool, String> {
    let shown = path.display();
    if path.exists()
        && statfs(path)
            .map_err(|e| format!("{shown}: {e}"))?
            .filesystem_type()
            == BPF_FS_MAGIC
    {
        return Ok(false);
    }
    std::fs::create_dir_all(path).map_err(|e| format!("creating {shown}: {e}"))?;
    nix::mount::mount(
        Some("bpf"),
        path,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| format!("mounting bpffs on {shown}: {e}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b\\134c"), "/a b\\c");
    }

    #[test]
    fn a_plain_directory_is_not_a_cgroup() {
        let err = ensure_cgroup(Path::new("/tmp")).unwrap_err();
        assert!(err.contains("is not a cgroup v2 directory"), "{err}");
    }
}

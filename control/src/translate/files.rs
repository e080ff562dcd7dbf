//! Files the translation writes for the data plane: the bytes of an inline Envoy `DataSource`
//! (`inline_string` / `inline_bytes`) of a TLS certificate, key or CA bundle, which the data
//! plane only takes as a file path.
//!
//! Each file is named by the SHA-256 of its bytes, so the same bytes always give the same path:
//! a re-sent resource translates to the same text and is not a change. Files are never removed
//! while the process runs (a config being applied, or the one running, may name them); they
//! are small, and a rotated certificate adds one file.
//!
//! The directory is private (mode 0700, owned by this process's effective user) and each file
//! mode 0600, since a file may be a private key. The data plane reads them, so it must run as
//! the same user and see the same directory (no separate private /tmp).

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The directory's name under `$XDG_RUNTIME_DIR`.
const RUNTIME_SUBDIR: &str = "respite-control";

/// Where inline `DataSource`s are written: `$XDG_RUNTIME_DIR/respite-control` when the variable
/// is set (a per-user runtime directory, stable across restarts), else
/// `<temp dir>/respite-control-<euid>`: per user and the same for every run, so runs that
/// translate the same bytes share one file instead of leaving a directory each (another user's
/// directory at that path is refused by [`write_in`]'s checks).
pub fn dir() -> PathBuf {
    dir_in(
        std::env::var_os("XDG_RUNTIME_DIR"),
        &std::env::temp_dir(),
        nix::unistd::geteuid().as_raw(),
    )
}

/// [`dir`] for a given `$XDG_RUNTIME_DIR`, temp dir and effective uid.
fn dir_in(runtime: Option<std::ffi::OsString>, temp: &Path, euid: u32) -> PathBuf {
    match runtime.filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join(RUNTIME_SUBDIR),
        None => temp.join(format!("respite-control-{euid}")),
    }
}

/// Writes `bytes` to `<dir()>/<sha256>.pem` (see [`write_in`]).
///
/// Errors: as [`write_in`].
pub fn write(bytes: &[u8]) -> Result<PathBuf, String> {
    write_in(&dir(), bytes)
}

/// Writes `bytes` to `<dir>/<sha256 of bytes>.pem` with mode 0600, creating `dir` with mode
/// 0700 if needed, and returns the path. A file already there with the same bytes is kept
/// as is; anything else is replaced atomically (written aside, then renamed), so the data
/// plane never reads a half-written file.
///
/// Errors: `dir` cannot be created, is a symlink or not a directory, belongs to another user
/// or is open to group or others (then another user could swap a certificate); the file cannot
/// be written.
pub fn write_in(dir: &Path, bytes: &[u8]) -> Result<PathBuf, String> {
    private_dir(dir)?;
    let digest = Sha256::digest(bytes);
    let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{name}.pem"));
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(path);
    }
    let aside = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&aside)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&aside, &path));
    if let Err(e) = written {
        // Best effort: the leftover would only hold bytes this process already holds.
        let _ = std::fs::remove_file(&aside);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(path)
}

/// Creates `dir` (mode 0700) or checks that the existing one is as private.
fn private_dir(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create the directory {shown}: {e}")),
    }
    // symlink_metadata: a symlink planted at the path would send the files elsewhere.
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{shown}: {e}"))?;
    if !m.file_type().is_dir() {
        return Err(format!("{shown} exists and is not a directory"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Err(format!(
            "{shown} belongs to uid {}, not to this process's uid {me}",
            m.uid()
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown} has mode {:o}: it must not be open to group or others (0700)",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// Without `$XDG_RUNTIME_DIR` the directory is per user and the same for every run (it was
    /// per process, and every `translate` left one behind).
    #[test]
    fn the_directory_is_per_user_not_per_run() {
        let tmp = Path::new("/tmp");
        assert_eq!(
            dir_in(None, tmp, 1000),
            Path::new("/tmp/respite-control-1000")
        );
        assert_eq!(
            dir_in(Some("".into()), tmp, 0),
            Path::new("/tmp/respite-control-0")
        );
        assert_eq!(
            dir_in(Some("/run/user/1000".into()), tmp, 1000),
            Path::new("/run/user/1000/respite-control")
        );
        assert_eq!(dir(), dir());
    }

    #[test]
    fn same_bytes_same_private_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("files");
        let a = write_in(&dir, b"one").unwrap();
        let b = write_in(&dir, b"one").unwrap();
        let c = write_in(&dir, b"two").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // A file of that name with other bytes (a torn earlier write) is replaced.
        std::fs::write(&a, b"torn").unwrap();
        assert_eq!(write_in(&dir, b"one").unwrap(), a);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
    }

    #[test]
    fn an_open_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = write_in(&dir, b"key").unwrap_err();
        assert!(e.contains("must not be open to group or others"), "{e}");

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        let e = write_in(&link, b"key").unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
    }
}

//! Removing what a stage left in its sandbox without reaching outside it.
//!
//! A stage owns its sandbox while it runs, so nothing in it is trusted when heddle empties it:
//! - **Mounts.** A root stage can `mount --bind /some/dir work/x` and exit with it mounted.
//!   `std::fs::remove_dir_all` descends into the mount and deletes the outside folder's files
//!   (it did: a bind-mounted folder lost every file when its run ended, and its mode became
//!   0777). A bind mount of the same filesystem has the same `st_dev`, so the check of
//!   `rm --one-file-system` does not see it; the mount id (`statx(STATX_MNT_ID)`, Linux 5.8)
//!   does, and `st_dev` is the fallback where there is none. A folder on another mount than
//!   the tree is detached (`umount2(MNT_DETACH | UMOUNT_NOFOLLOW)`, as `umount -l` does) and
//!   only entered once it is back on the tree's own mount. Why detach rather than leave it:
//!   only a process with the right to mount can have made it, so heddle as the same user may
//!   undo it; a detach removes the mount point from this namespace and never touches what was
//!   mounted; and a mount left in place would pin the scratch folder forever. Where the detach
//!   fails (heddle is not root, the mount is locked) nothing beneath it is touched and the
//!   error names it.
//! - **Permissions.** `chmod 000` or `chmod -w` on a folder stops a non-root user reading or
//!   emptying it, and the scratch folder then leaked for good. A folder on the tree's mount
//!   gets `u+rwx` before it is read; no more than that (the old fallback cleared the read-only
//!   flag, which made the folders world-writable), and never a folder on another mount.
//! - **Links** are removed, never followed.
//!
//! The walk costs one `statx` per folder and an unlink per file (the file type comes from the
//! directory entry), about what `remove_dir_all` costs.

use std::fs;
use std::io;
use std::path::Path;

/// Remove a file or a tree (see the module docs). Everything that can be removed is; the first
/// failure is returned, naming its path.
pub fn remove_tree(p: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(p);
    }
    imp::remove_dir_tree(p)
}

#[cfg(unix)]
mod imp {
    use std::fs;
    use std::io;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    /// How often a folder is detached before it counts as stuck (mounts can be stacked).
    const MAX_DETACH: usize = 8;

    pub(super) fn remove_dir_tree(root: &Path) -> io::Result<()> {
        // The tree's mount is its parent's: `root` itself may be what a stage mounted (a
        // sandbox's `work/x` is removed on its own when the sandbox is reused).
        let mount = match root.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => mount_of(parent)?,
            None => mount_of(root)?,
        };
        on_mount(root, mount)?;
        let mut first_err = None;
        empty_dir(root, mount, &mut first_err);
        if let Some(e) = first_err {
            return Err(e);
        }
        fs::remove_dir(root).map_err(|e| named(root, e))
    }

    /// Remove what `dir` (on the tree's mount, `mount`) holds, keeping the first error.
    fn empty_dir(dir: &Path, mount: u64, first_err: &mut Option<io::Error>) {
        if let Err(e) = give_owner_rwx(dir) {
            keep(first_err, named(dir, e));
        }
        let entries = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => return keep(first_err, named(dir, e)),
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => return keep(first_err, named(dir, e)),
            };
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Err(e) = remove_file(&path) {
                    keep(first_err, e);
                }
                continue;
            }
            if let Err(e) = on_mount(&path, mount) {
                keep(first_err, e);
                continue;
            }
            empty_dir(&path, mount, first_err);
            if let Err(e) = fs::remove_dir(&path) {
                keep(first_err, named(&path, e));
            }
        }
    }

    fn keep(first_err: &mut Option<io::Error>, e: io::Error) {
        first_err.get_or_insert(e);
    }

    /// A file, a link, or a file a stage bind-mounted something onto (detached first: an
    /// unlink of a mount point fails with EBUSY and leaves it).
    fn remove_file(path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && detach(path).is_ok() => {
                fs::remove_file(path).map_err(|e| named(path, e))
            }
            r => r.map_err(|e| named(path, e)),
        }
    }

    /// `Ok` once the folder `path` is on the tree's mount, detaching what a stage mounted on
    /// it; the error says it is a mount point that stays.
    fn on_mount(path: &Path, mount: u64) -> io::Result<()> {
        for _ in 0..MAX_DETACH {
            if mount_of(path).map_err(|e| named(path, e))? == mount {
                return Ok(());
            }
            if let Err(e) = detach(path) {
                return Err(io::Error::other(format!(
                    "{} is a mount point a stage left in its sandbox, and unmounting it failed \
                     ({e}); nothing beneath it is removed",
                    path.display()
                )));
            }
        }
        Err(io::Error::other(format!(
            "{} is still a mount point after {MAX_DETACH} unmounts; nothing beneath it is removed",
            path.display()
        )))
    }

    /// `u+rwx` on a folder that lacks it, so it can be read and emptied.
    fn give_owner_rwx(dir: &Path) -> io::Result<()> {
        let mode = fs::symlink_metadata(dir)?.permissions().mode();
        if mode & 0o700 != 0o700 {
            fs::set_permissions(dir, fs::Permissions::from_mode((mode | 0o700) & 0o7777))?;
        }
        Ok(())
    }

    fn named(path: &Path, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("failed to remove {}: {e}", path.display()),
        )
    }

    /// The mount a folder is on: its mount id where the kernel says (Linux ≥ 5.8), else its
    /// device.
    fn mount_of(path: &Path) -> io::Result<u64> {
        #[cfg(target_os = "linux")]
        if let Some(id) = statx_mount_id(path)? {
            return Ok(id);
        }
        use std::os::unix::fs::MetadataExt;
        Ok(fs::symlink_metadata(path)?.dev())
    }

    #[cfg(target_os = "linux")]
    fn statx_mount_id(path: &Path) -> io::Result<Option<u64>> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a zeroed statx is a valid out-buffer; the path is NUL-terminated.
        let mut buf: libc::statx = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                c.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC,
                libc::STATX_MNT_ID,
                &mut buf,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::EPERM) => Ok(None),
                _ => Err(e),
            };
        }
        Ok((buf.stx_mask & libc::STATX_MNT_ID != 0).then_some(buf.stx_mnt_id))
    }

    #[cfg(target_os = "linux")]
    fn detach(path: &Path) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: the path is NUL-terminated. UMOUNT_NOFOLLOW: a link is never unmounted through.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn detach(_path: &Path) -> io::Result<()> {
        Err(io::Error::other("unmounting is only done on Linux"))
    }
}

#[cfg(not(unix))]
mod imp {
    use std::fs;
    use std::io;
    use std::path::Path;

    /// Windows has no mount a stage can leave in a folder that `remove_dir_all` would cross;
    /// read-only attributes are cleared when a first attempt fails.
    pub(super) fn remove_dir_tree(p: &Path) -> io::Result<()> {
        if fs::remove_dir_all(p).is_ok() {
            return Ok(());
        }
        make_writable(p);
        fs::remove_dir_all(p)
    }

    fn make_writable(p: &Path) {
        let Ok(meta) = fs::symlink_metadata(p) else {
            return;
        };
        if meta.is_dir() {
            let mut perm = meta.permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            let _ = fs::set_permissions(p, perm);
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    make_writable(&e.path());
                }
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn locked_and_read_only_folders_are_removed_and_links_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("kept"), "kept").unwrap();
        let mode_before = fs::metadata(outside.path()).unwrap().permissions().mode();
        let root = t.path().join("tree");
        fs::create_dir_all(root.join("locked/sub")).unwrap();
        fs::write(root.join("locked/sub/f"), "f").unwrap();
        fs::write(root.join("locked/g"), "g").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        for (d, mode) in [("locked/sub", 0o000), ("locked", 0o000), ("", 0o555)] {
            fs::set_permissions(root.join(d), fs::Permissions::from_mode(mode)).unwrap();
        }
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert!(outside.path().join("kept").exists());
        let mode = fs::metadata(outside.path()).unwrap().permissions().mode();
        assert_eq!(mode, mode_before, "the link's target keeps its mode");
    }

    #[test]
    fn a_file_or_a_missing_path_is_fine() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("f"), "f").unwrap();
        remove_tree(&t.path().join("f")).unwrap();
        remove_tree(&t.path().join("missing")).unwrap();
    }
}

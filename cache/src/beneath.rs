//! Resolving a path beneath a root without following any symlink on the way.
//!
//! A stage owns its sandbox while it runs: it can replace `out/<name>` (a folder heddle made)
//! with a link to `/etc`, and a later open of `out/<name>/<file>` would then read a host file
//! into the cache. Opening the last component with `O_NOFOLLOW` does not help, since the link
//! sits in the middle. So the folders an output lives in are resolved here, from the root's
//! descriptor, refusing every symlink:
//! - Linux ≥ 5.6: one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, which also refuses
//!   `..` that would climb above the root.
//! - Older kernels, seccomp filters that deny openat2 (some container runtimes), other unixes:
//!   the same walk by hand, one `openat(O_NOFOLLOW | O_DIRECTORY)` per component.
//! - Elsewhere (Windows): each component is checked with `symlink_metadata`.
//!
//! Both unix paths are race-free: every step opens relative to a descriptor already checked.

use std::fs::File;
use std::io;
use std::path::{Component, Path};

/// Why a path could not be resolved beneath its root.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// A component is a symlink (or `..` would leave the root): the path escapes.
    #[error("`{component}` is a symlink or leaves the folder; nothing beneath it is read")]
    Escapes { component: String },
    /// The OS refused for another reason (missing, permissions, not a folder).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Open the folder `rel` beneath `root`, refusing any symlink or `..` on the way. `root` itself
/// is trusted (heddle made it); everything after it is not.
pub fn open_dir_beneath(root: &Path, rel: &Path) -> Result<File, BeneathError> {
    for c in rel.components() {
        if !matches!(c, Component::Normal(_)) {
            return Err(BeneathError::Escapes {
                component: c.as_os_str().to_string_lossy().into_owned(),
            });
        }
    }
    imp::open_dir_beneath(root, rel)
}

#[cfg(unix)]
mod imp {
    use std::ffi::CString;
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use super::BeneathError;

    pub(super) fn open_dir_beneath(root: &Path, rel: &Path) -> Result<File, BeneathError> {
        let root = File::open(root)?;
        if rel.as_os_str().is_empty() {
            return Ok(root);
        }
        if let Some(done) = try_openat2(&root, rel) {
            return done;
        }
        walk(&root, rel)
    }

    /// `None` when openat2 is not available here (old kernel, a seccomp filter, not Linux),
    /// so the caller walks by hand.
    #[cfg(target_os = "linux")]
    fn try_openat2(root: &File, rel: &Path) -> Option<Result<File, BeneathError>> {
        match openat2_beneath(root, rel) {
            Ok(f) => Some(Ok(f)),
            // ELOOP: a symlink on the way; EXDEV: `..` or an absolute link would leave root.
            // The walk names the component.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV)) => {
                Some(Err(walk(root, rel).err().unwrap_or_else(|| escapes(rel))))
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::E2BIG)
                ) =>
            {
                None
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn try_openat2(_root: &File, _rel: &Path) -> Option<Result<File, BeneathError>> {
        None
    }

    fn escapes(rel: &Path) -> BeneathError {
        BeneathError::Escapes {
            component: rel.to_string_lossy().into_owned(),
        }
    }

    fn cstr(p: &std::ffi::OsStr) -> io::Result<CString> {
        CString::new(p.as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    #[cfg(target_os = "linux")]
    fn openat2_beneath(root: &File, rel: &Path) -> io::Result<File> {
        let path = cstr(rel.as_os_str())?;
        // linux/openat2.h's `struct open_how` (libc's is non-exhaustive, so not buildable).
        #[repr(C)]
        struct OpenHow {
            flags: u64,
            mode: u64,
            resolve: u64,
        }
        let how = OpenHow {
            flags: (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
        };
        // SAFETY: the path is NUL-terminated, `how` lives across the call and its size is
        // passed; a non-negative return is a descriptor we now own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above.
        Ok(unsafe { File::from_raw_fd(fd as i32) })
    }

    /// One `openat(O_NOFOLLOW | O_DIRECTORY)` per component; names which component escapes.
    pub(super) fn walk(root: &File, rel: &Path) -> Result<File, BeneathError> {
        let mut dir = root.try_clone()?;
        for c in rel.components() {
            let name = cstr(c.as_os_str())?;
            // SAFETY: a NUL-terminated name relative to a descriptor we hold.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                // ELOOP: the component is a symlink (O_NOFOLLOW); ENOTDIR may also be one
                // (a link to a file), so look before blaming the type.
                let is_link = e.raw_os_error() == Some(libc::ELOOP)
                    || is_symlink_at(&dir, &name).unwrap_or(false);
                if is_link {
                    return Err(BeneathError::Escapes {
                        component: c.as_os_str().to_string_lossy().into_owned(),
                    });
                }
                return Err(e.into());
            }
            // SAFETY: a fresh descriptor we own.
            dir = unsafe { File::from_raw_fd(fd) };
        }
        Ok(dir)
    }

    fn is_symlink_at(dir: &File, name: &CString) -> io::Result<bool> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstatat fills `st` on success, which is the only case we read it.
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: rc == 0.
        let st = unsafe { st.assume_init() };
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFLNK)
    }
}

#[cfg(not(unix))]
mod imp {
    use std::fs::{self, File};
    use std::path::Path;

    use super::BeneathError;

    /// Windows has no `openat`; check each component's own metadata. A race needs a live
    /// writer in the sandbox, and heddle reads outputs only after the stage's job ended.
    pub(super) fn open_dir_beneath(root: &Path, rel: &Path) -> Result<File, BeneathError> {
        let mut p = root.to_path_buf();
        for c in rel.components() {
            p.push(c);
            if fs::symlink_metadata(&p)?.file_type().is_symlink() {
                return Err(BeneathError::Escapes {
                    component: c.as_os_str().to_string_lossy().into_owned(),
                });
            }
        }
        // A folder opens on Windows only with backup semantics.
        use std::os::windows::fs::OpenOptionsExt;
        const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;
        Ok(std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
            .open(&p)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("out/a/b")).unwrap();
        t
    }

    #[test]
    fn plain_folders_open() {
        let t = tree();
        assert!(open_dir_beneath(t.path(), Path::new("out/a/b")).is_ok());
        assert!(open_dir_beneath(t.path(), Path::new("")).is_ok());
    }

    #[test]
    fn dot_dot_and_absolute_are_refused_before_any_io() {
        let t = tree();
        for rel in ["out/../..", "../x", "/etc"] {
            let e = open_dir_beneath(t.path(), Path::new(rel)).unwrap_err();
            assert!(matches!(e, BeneathError::Escapes { .. }), "{rel}: {e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_middle_folder_is_refused_and_named() {
        let t = tree();
        let host = tempfile::tempdir().unwrap();
        std::fs::remove_dir_all(t.path().join("out/a")).unwrap();
        std::os::unix::fs::symlink(host.path(), t.path().join("out/a")).unwrap();
        let e = open_dir_beneath(t.path(), Path::new("out/a")).unwrap_err();
        match e {
            BeneathError::Escapes { component } => assert_eq!(component, "a"),
            other => panic!("expected an escape, got {other}"),
        }
        // Even a link that stays inside is refused: outputs name real folders.
        std::fs::remove_file(t.path().join("out/a")).unwrap();
        std::os::unix::fs::symlink("b", t.path().join("out/a")).unwrap();
        std::fs::create_dir(t.path().join("out/b")).unwrap();
        assert!(open_dir_beneath(t.path(), Path::new("out/a")).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn the_hand_walk_agrees_with_openat2() {
        let t = tree();
        let root = File::open(t.path()).unwrap();
        assert!(imp::walk(&root, Path::new("out/a/b")).is_ok());
        std::fs::remove_dir_all(t.path().join("out/a/b")).unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("out/a/b")).unwrap();
        match imp::walk(&root, Path::new("out/a/b")).unwrap_err() {
            BeneathError::Escapes { component } => assert_eq!(component, "b"),
            other => panic!("expected an escape, got {other}"),
        }
    }

    #[test]
    fn a_missing_folder_is_an_io_error_not_an_escape() {
        let t = tree();
        let e = open_dir_beneath(t.path(), Path::new("out/zzz")).unwrap_err();
        assert!(matches!(e, BeneathError::Io(_)), "{e}");
    }
}

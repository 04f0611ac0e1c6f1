//! Serving blobs: each is checked before use (its sentinel mtime, else a re-hash) and a blob
//! that no longer matches its name is quarantined, so the caller sees a miss, never bad bytes.
//! Outputs are materialised beside their destination and renamed over it.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{BlobState, Serve, Store};
use crate::digest::SMALL_FILE;
use crate::fsutil::{
    self, blob_mtime, remove_any, rename_replace, set_readonly, unique_name, TempPath,
};
use crate::tree::{decode_tree, TreeEntry};
use crate::{hash_file, CacheError, Digest, OutputEntry, StatCache};

impl Store {
    /// Check a blob before serving it. A blob whose mtime is still the sentinel (and whose size
    /// matches when known) is trusted; otherwise it is re-hashed, and a blob that no longer
    /// matches its name is quarantined (removed if that fails) so that it becomes a miss.
    pub(crate) fn blob_state(
        &self,
        d: &Digest,
        size: Option<u64>,
    ) -> Result<BlobState, CacheError> {
        let meta = match self.blob_lstat(d) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BlobState::Missing),
            Err(e) => {
                return Err(CacheError::Io {
                    op: "stat",
                    path: self.blob_path(d),
                    source: e,
                })
            }
        };
        if !meta.is_file {
            if self.quarantine(d).is_err() {
                let _ = remove_any(&self.blob_path(d));
            }
            return Ok(BlobState::Corrupt);
        }
        // A size other than the caller's says the caller's record is wrong unless the blob
        // itself changed: a write or truncation through a link moves the sentinel mtime. An
        // entry that lies about a size (a remote's) must never cost the store a good blob.
        let sized = match size {
            Some(s) if s != meta.len => BlobState::WrongSize { actual: meta.len },
            _ => BlobState::Ok,
        };
        if meta.mtime == Some(blob_mtime()) {
            return Ok(sized);
        }
        // The path is built only past the sentinel: a no-op's hits never need it.
        let p = self.blob_path(d);
        match hash_file(&p) {
            Ok(actual) if actual == *d => {
                fsutil::reset_blob_mtime(&p).map_err(CacheError::io("set mtime of", &p))?;
                self.mark_verified(d);
                Ok(sized)
            }
            Ok(_) => {
                if self.quarantine(d).is_err() {
                    let _ = remove_any(&p);
                }
                Ok(BlobState::Corrupt)
            }
            Err(CacheError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(BlobState::Missing)
            }
            Err(e) => Err(e),
        }
    }

    fn require_blob(&self, d: &Digest, size: Option<u64>) -> Result<(), CacheError> {
        match self.blob_state(d, size)? {
            BlobState::Ok => Ok(()),
            BlobState::Missing => Err(CacheError::MissingBlob { digest: *d }),
            BlobState::Corrupt => Err(CacheError::CorruptBlob { digest: *d }),
            BlobState::WrongSize { actual } => Err(CacheError::WrongSize {
                digest: *d,
                expected: size.unwrap_or(0),
                actual,
            }),
        }
    }

    /// Read and decode a tree manifest blob, checking its digest (it is small).
    pub(crate) fn read_tree(&self, d: &Digest) -> Result<Vec<TreeEntry>, CacheError> {
        let p = self.blob_path(d);
        let bytes = match fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(CacheError::MissingBlob { digest: *d })
            }
            Err(e) => {
                return Err(CacheError::Io {
                    op: "read",
                    path: p,
                    source: e,
                })
            }
        };
        if Digest::of_bytes(&bytes) != *d {
            if self.quarantine(d).is_err() {
                let _ = remove_any(&p);
            }
            return Err(CacheError::CorruptBlob { digest: *d });
        }
        decode_tree(*d, &bytes)
    }

    /// Materialise a stored output at `dest`, replacing whatever is there: the new file or
    /// tree is built beside `dest` and renamed over it. Files are reflinked where the
    /// filesystem can, else hard-linked (large non-executable files), else copied; small files
    /// are always copied. Everything materialised is read-only.
    pub fn materialize(&self, entry: &OutputEntry, dest: &Path) -> Result<(), CacheError> {
        self.materialize_inner(entry, dest, None, Serve::Restore)
    }

    /// [`Store::materialize`], then record every materialised file in `stats` so that
    /// [`Store::is_materialized`] is a stat comparison.
    pub fn materialize_recorded(
        &self,
        entry: &OutputEntry,
        dest: &Path,
        stats: &StatCache,
    ) -> Result<(), CacheError> {
        self.materialize_inner(entry, dest, Some(stats), Serve::Restore)
    }

    fn materialize_inner(
        &self,
        entry: &OutputEntry,
        dest: &Path,
        stats: Option<&StatCache>,
        serve: Serve,
    ) -> Result<(), CacheError> {
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fsutil::create_dir_all(&parent)?;
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = TempPath::new(parent.join(unique_name(&format!(".{name}.heddle-"))));
        let mut recorded: Vec<(PathBuf, Digest)> = Vec::new();
        match entry {
            OutputEntry::File {
                digest,
                size,
                executable,
            } => {
                self.require_served(digest, *size, serve)?;
                self.place_file(digest, tmp.path(), *size, *executable)?;
                recorded.push((dest.to_path_buf(), *digest));
            }
            OutputEntry::Dir { digest, .. } => {
                let entries = self.read_tree(digest)?;
                fs::create_dir(tmp.path())
                    .map_err(CacheError::io("create directory", tmp.path()))?;
                // A blob a tree lists many times is placed once and linked for the rest: a
                // manifest (a remote's, say) naming one 1 MiB blob 300 times costs 1 MiB of
                // disk, not 300. Files with one content and mode share an inode, which
                // nothing can tell apart from copies since materialised files are read-only.
                let mut placed: HashMap<(Digest, bool), PathBuf> = HashMap::new();
                for e in &entries {
                    let at = tmp.path().join(e.path());
                    match e {
                        TreeEntry::Dir { .. } => fsutil::create_dir_all(&at)?,
                        TreeEntry::File {
                            digest,
                            size,
                            executable,
                            path,
                        } => {
                            let first = placed.get(&(*digest, *executable));
                            if first.is_none_or(|first| fs::hard_link(first, &at).is_err()) {
                                self.require_served(digest, *size, serve)?;
                                self.place_file(digest, &at, *size, *executable)?;
                                placed.insert((*digest, *executable), at.clone());
                            }
                            recorded.push((dest.join(path), *digest));
                        }
                        TreeEntry::Symlink { target, .. } => make_symlink(target, &at)?,
                    }
                }
            }
        }
        replace_path(tmp.path(), dest, matches!(entry, OutputEntry::Dir { .. }))?;
        tmp.keep();
        if let Some(stats) = stats {
            for (p, d) in recorded {
                stats.record(&p, d);
            }
        }
        Ok(())
    }

    /// Place `entry` at `dest` for a reader heddle controls and removes afterwards (a stage's
    /// sandbox): a file is a hard link to its blob whatever its size, so laying out an input
    /// creates no inode and removing it frees none. The link shares the blob's read-only mode;
    /// a stage that writes through it anyway changes the blob's mtime, and a blob whose mtime
    /// is not the sentinel is re-hashed before it is served again ([`Store::blob_state`]).
    /// Executables, folders, and filesystems without hard links get [`Store::materialize`].
    pub fn link_into(&self, entry: &OutputEntry, dest: &Path) -> Result<(), CacheError> {
        if let OutputEntry::File {
            digest,
            size,
            executable: false,
        } = entry
        {
            self.require_fed(digest, *size)?;
            if fs::hard_link(self.blob_path(digest), dest).is_ok() {
                return Ok(());
            }
        }
        self.materialize_inner(entry, dest, None, Serve::Feed)
    }

    fn require_served(&self, d: &Digest, size: u64, serve: Serve) -> Result<(), CacheError> {
        match serve {
            Serve::Restore => self.require_blob(d, Some(size)),
            Serve::Feed => self.require_fed(d, size),
        }
    }

    /// Put a copy of blob `d` at `to` (which does not exist), by the cheapest safe means.
    fn place_file(
        &self,
        d: &Digest,
        to: &Path,
        size: u64,
        executable: bool,
    ) -> Result<(), CacheError> {
        let blob = self.blob_path(d);
        if size > SMALL_FILE {
            if reflink_copy::reflink(&blob, to).is_ok() {
                set_readonly(to, executable).map_err(CacheError::io("set permissions of", to))?;
                return Ok(());
            }
            // A hard link shares the blob's inode and so its mode: only for non-executables.
            if !executable && fs::hard_link(&blob, to).is_ok() {
                return Ok(());
            }
        }
        if size <= SMALL_FILE {
            // Read anyway to be copied: check the bytes on the way (rot that kept the mtime).
            // Its size is known: no `fstat` to size the buffer.
            let bytes = fs::File::open(&blob)
                .and_then(|mut f| fsutil::read_all(&mut f, size as usize + 1))
                .map_err(CacheError::io("read", &blob))?;
            if Digest::of_bytes(&bytes) != *d {
                if self.quarantine(d).is_err() {
                    let _ = remove_any(&blob);
                }
                return Err(CacheError::CorruptBlob { digest: *d });
            }
            fs::write(to, &bytes).map_err(CacheError::io("write", to))?;
        } else {
            fs::copy(&blob, to).map_err(|source| CacheError::Copy {
                from: blob.clone(),
                to: to.to_path_buf(),
                source,
            })?;
        }
        set_readonly(to, executable).map_err(CacheError::io("set permissions of", to))?;
        Ok(())
    }

    /// Whether `dest` still holds `entry`: a stat comparison against `stats`' records, with a
    /// re-hash only for files whose stat changed (or that were never recorded).
    pub fn is_materialized(&self, entry: &OutputEntry, dest: &Path, stats: &StatCache) -> bool {
        let Ok(meta) = fs::symlink_metadata(dest) else {
            return false;
        };
        match entry {
            OutputEntry::File {
                digest, executable, ..
            } => {
                meta.is_file()
                    && (!cfg!(unix) || fsutil::is_executable(&meta) == *executable)
                    // A regular file's lstat is its stat: no second stat for the stat cache.
                    && stats
                        .hash_with_meta(dest, &meta)
                        .is_ok_and(|d| d == *digest)
            }
            OutputEntry::Dir { digest, .. } => {
                meta.is_dir() && stats.hash_dir(dest).is_ok_and(|d| d == *digest)
            }
        }
    }
}

fn make_symlink(target: &str, at: &Path) -> Result<(), CacheError> {
    #[cfg(unix)]
    let r = std::os::unix::fs::symlink(target, at);
    #[cfg(windows)]
    let r = {
        // Windows needs to know the kind of the target; resolve it relative to the link.
        let resolved = at
            .parent()
            .map(|p| p.join(target))
            .unwrap_or_else(|| PathBuf::from(target));
        if resolved.is_dir() {
            std::os::windows::fs::symlink_dir(target, at)
        } else {
            std::os::windows::fs::symlink_file(target, at)
        }
    };
    r.map_err(CacheError::io("create symlink", at))
}

/// Move `tmp` (a folder when `tmp_is_dir`) onto `dest`. A file replaces a file atomically;
/// when a directory is involved on either side, the old `dest` is first moved aside and then
/// removed.
///
/// A file is renamed first and `dest` looked at only if that fails: `rename` refuses to put a
/// file over a folder (`EISDIR`), so the common case (a file over a file or over nothing)
/// costs one system call instead of three; every output a run stores or restores passes
/// here (benches/RESULTS.md, M15).
fn replace_path(tmp: &Path, dest: &Path, tmp_is_dir: bool) -> Result<(), CacheError> {
    #[cfg(unix)]
    if !tmp_is_dir {
        match fs::rename(tmp, dest) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
            Err(e) => return Err(CacheError::io("rename into", dest)(e)),
        }
    }
    match fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() || tmp_is_dir => {
            let parent = dest.parent().unwrap_or(Path::new("."));
            let trash = TempPath::new(parent.join(unique_name(".heddle-old-")));
            fs::rename(dest, trash.path()).map_err(CacheError::io("move aside", dest))?;
            fs::rename(tmp, dest).map_err(CacheError::io("rename into", dest))?;
            drop(trash);
            Ok(())
        }
        _ => rename_replace(tmp, dest).map_err(CacheError::io("rename into", dest)),
    }
}

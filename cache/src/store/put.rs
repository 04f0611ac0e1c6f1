//! Putting produced outputs into the store: a file becomes a blob (hard-linked, reflinked or
//! copied; see the crate docs for which and why), a folder becomes a tree manifest over blobs.
//! Nothing is fsynced on the way in: blobs wait in `pending` for the next group commit (on
//! Windows each is flushed before it is named; see [`Store::rename_blob`]).

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{BlobState, Durability, Store};
use crate::digest::{hash_reader, SMALL_FILE};
use crate::fsutil::{self, blob_mtime, create_with, set_readonly, unique_name, TempPath};
use crate::tree::{check_tree, encode_tree, scan_tree};
use crate::{CacheError, Digest, OutputEntry};

impl Store {
    /// Store a produced output (a regular file, or a directory tree whose symlinks are
    /// recorded as symlinks) and describe it. A symlink at `path` itself is followed.
    ///
    /// Large files are hard-linked into the store when `path` is their only link (no copy;
    /// `path` stays, now read-only and sharing the blob's inode, until its owner deletes it),
    /// else reflinked, else copied. Small files are copied. Nothing is fsynced here: see
    /// [`Store::sync_pending`].
    pub fn put_output(&self, path: &Path) -> Result<OutputEntry, CacheError> {
        self.put_output_inner(path, false)
    }

    /// [`Store::put_output`] for a file or tree its caller is about to delete unread (a
    /// stage's sandbox): small files become blobs by hard link too, so storing them creates no
    /// inode and the caller's removal frees none. The caller must not write to `path` again.
    pub fn adopt_output(&self, path: &Path) -> Result<OutputEntry, CacheError> {
        self.put_output_inner(path, true)
    }

    fn put_output_inner(&self, path: &Path, adopt: bool) -> Result<OutputEntry, CacheError> {
        // Never follow a link: a declared output that is a symlink could name any host file,
        // and storing it would make heddle chmod, re-time and hard-link a file it does not own.
        let meta = fs::symlink_metadata(path).map_err(CacheError::io("stat", path))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            return Err(CacheError::SymlinkOutput {
                path: path.to_path_buf(),
                target: fs::read_link(path).unwrap_or_default(),
            });
        }
        if ft.is_file() {
            let (digest, size, executable) = self.put_file(path, adopt)?;
            Ok(OutputEntry::File {
                digest,
                size,
                executable,
            })
        } else if ft.is_dir() {
            let mut scan = scan_tree(path, &mut |p, _| self.put_file(p, adopt).map(|(d, _, _)| d))?;
            scan.entries.sort_by(|a, b| a.path().cmp(b.path()));
            check_tree(&scan.entries).map_err(|violation| CacheError::UnsafeTree {
                path: path.to_path_buf(),
                violation,
            })?;
            let bytes = encode_tree(&mut scan.entries);
            let digest = Digest::of_bytes(&bytes);
            if self.has_blob(&digest) {
                self.note_existing(&digest);
            } else {
                self.write_blob_bytes(&digest, &bytes)?;
            }
            Ok(OutputEntry::Dir {
                digest,
                size: scan.size,
                files: scan.files,
            })
        } else {
            Err(CacheError::UnsupportedFileType {
                path: path.to_path_buf(),
                kind: fsutil::odd_kind(&ft),
            })
        }
    }

    /// Store one regular file; returns (digest, size, executable). The file is opened without
    /// following links and everything after that reads the open descriptor, so what is hashed
    /// is what is stored.
    fn put_file(&self, path: &Path, adopt: bool) -> Result<(Digest, u64, bool), CacheError> {
        let mut file = match fsutil::open_nofollow(path) {
            Ok(f) => f,
            Err(_) if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                return Err(CacheError::SymlinkOutput {
                    path: path.to_path_buf(),
                    target: fs::read_link(path).unwrap_or_default(),
                })
            }
            Err(e) => return Err(CacheError::io("open", path)(e)),
        };
        let meta = file.metadata().map_err(CacheError::io("stat", path))?;
        if !meta.is_file() {
            return Err(CacheError::UnsupportedFileType {
                path: path.to_path_buf(),
                kind: fsutil::odd_kind(&meta.file_type()),
            });
        }
        let executable = fsutil::is_executable(&meta);
        if meta.len() <= SMALL_FILE {
            // One read serves both the hash and the copy.
            let bytes = fsutil::read_all(&mut file, meta.len() as usize + 1)
                .map_err(CacheError::io("read", path))?;
            let digest = Digest::of_bytes(&bytes);
            if self.has_blob(&digest) {
                self.note_existing(&digest);
            } else if !(adopt && self.link_blob(path, &meta, executable, &digest)?) {
                self.write_blob_bytes(&digest, &bytes)?;
            }
            self.mark_verified(&digest);
            return Ok((digest, bytes.len() as u64, executable));
        }
        let digest = hash_reader(&mut file).map_err(CacheError::io("read", path))?;
        if self.blob_state(&digest, Some(meta.len()))? == BlobState::Ok {
            self.note_existing(&digest);
            return Ok((digest, meta.len(), executable));
        }
        if !self.link_blob(path, &meta, executable, &digest)? {
            let tmp = TempPath::new(self.tmp.join(unique_name("b-")));
            file.seek(SeekFrom::Start(0))
                .map_err(CacheError::io("read", path))?;
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(tmp.path())
                .map_err(CacheError::io("create", tmp.path()))?;
            // copy_file_range on Linux: a reflink where the filesystem shares extents.
            io::copy(&mut file, &mut out).map_err(|source| CacheError::Copy {
                from: path.to_path_buf(),
                to: tmp.path().to_path_buf(),
                source,
            })?;
            drop(out);
            self.seal_blob(tmp, &digest)?;
        }
        self.mark_verified(&digest);
        Ok((digest, meta.len(), executable))
    }

    /// Make `path` itself the blob by a hard link, when that is safe; false when it is not.
    /// For adopted small files too: a new blob inode now and a freed sandbox inode later cost
    /// more than the copy on filesystems that scan past recently freed inodes. Only a file
    /// nobody else links to: a produced file that is itself a link to some user file must not
    /// have that file's inode become a read-only blob. Not executables: the blob's read-only
    /// mode would strip their exec bit. Not on Windows, where the read-only attribute would
    /// stop the owner deleting its scratch file. `meta` is the open file's own stat; the new
    /// link must name that very inode (and be a regular file), or it is undone: heddle changes
    /// the mode and times only of an inode it has checked is the stage's file.
    fn link_blob(
        &self,
        path: &Path,
        meta: &fs::Metadata,
        executable: bool,
        digest: &Digest,
    ) -> Result<bool, CacheError> {
        if !cfg!(unix) || fsutil::nlink(meta) != 1 || executable {
            return Ok(false);
        }
        let tmp = TempPath::new(self.tmp.join(unique_name("b-")));
        if fs::hard_link(path, tmp.path()).is_err() {
            return Ok(false);
        }
        match fs::symlink_metadata(tmp.path()) {
            Ok(linked) if linked.is_file() && fsutil::same_inode(&linked, meta) => {}
            _ => return Ok(false),
        }
        self.seal_blob(tmp, digest)?;
        Ok(true)
    }

    /// A blob this call did not write may have been written by another process a moment ago
    /// and not be durable yet; include it in the next group commit (fsync of a clean file is
    /// cheap).
    fn note_existing(&self, digest: &Digest) {
        // On Windows its writer flushed it before naming it (`rename_blob`).
        if self.durability != Durability::None && cfg!(not(windows)) {
            self.pending
                .lock()
                .expect("pending poisoned")
                .push(self.blob_path(digest));
        }
    }

    /// Store bytes as a blob named `digest` (the caller computed it).
    pub(crate) fn write_blob_bytes(&self, digest: &Digest, bytes: &[u8]) -> Result<(), CacheError> {
        let tmp = TempPath::new(self.tmp.join(unique_name("b-")));
        let f = create_with(tmp.path(), bytes)?;
        // Stamp through the open descriptor: no second open of the file.
        f.set_modified(blob_mtime())
            .map_err(CacheError::io("set mtime of", tmp.path()))?;
        self.sync_before_naming(&f, tmp.path())?;
        drop(f);
        set_readonly(tmp.path(), false).map_err(CacheError::io("make read-only", tmp.path()))?;
        self.rename_blob(tmp, digest)
    }

    /// Give a temp file the blob mtime sentinel and read-only mode, then rename it into place.
    fn seal_blob(&self, tmp: TempPath, digest: &Digest) -> Result<(), CacheError> {
        fsutil::reset_blob_mtime(tmp.path()).map_err(CacheError::io("set mtime of", tmp.path()))?;
        set_readonly(tmp.path(), false).map_err(CacheError::io("make read-only", tmp.path()))?;
        self.rename_blob(tmp, digest)
    }

    pub(super) fn rename_blob(&self, tmp: TempPath, digest: &Digest) -> Result<(), CacheError> {
        let dest = self.blob_path(digest);
        fsutil::rename_into_shard(tmp.path(), &dest, |from, to| fs::rename(from, to))?;
        tmp.keep();
        // On Windows the blob was flushed before its rename (`sync_before_naming`, and
        // `fsutil::reset_blob_mtime` for a sealed one): an fsync there needs a handle that can
        // write, and once named the blob may be open in a stage through a hard link with write
        // sharing denied (`cmd`'s `type`), which then fails with a sharing violation (seen in
        // CI under Wine). Renames need no fsync there: NTFS journals them.
        if self.durability != Durability::None && cfg!(not(windows)) {
            self.pending.lock().expect("pending poisoned").push(dest);
        }
        Ok(())
    }

    /// On Windows, flush a blob through the handle that wrote it, before it is named (see
    /// [`Store::rename_blob`]); elsewhere the group commit does it.
    pub(super) fn sync_before_naming(
        &self,
        file: &fs::File,
        path: &Path,
    ) -> Result<(), CacheError> {
        if cfg!(windows) && self.durability != Durability::None {
            file.sync_all().map_err(CacheError::io("fsync", path))?;
        }
        Ok(())
    }

    /// Make every blob written so far durable (the group commit). `record_action` calls this
    /// before its entry becomes visible; callers may call it earlier to bound the batch.
    pub fn sync_pending(&self) -> Result<(), CacheError> {
        self.sync_pending_with(&[])
    }

    pub(super) fn sync_pending_with(&self, extra: &[PathBuf]) -> Result<(), CacheError> {
        if self.durability == Durability::None {
            return Ok(());
        }
        let _commit = self.sync_lock.lock().expect("sync lock poisoned");
        let batch = std::mem::take(&mut *self.pending.lock().expect("pending poisoned"));
        if batch.is_empty() && extra.is_empty() {
            return Ok(());
        }
        let result = sync_files(&self.root, &batch, extra);
        if result.is_err() {
            // Keep them pending so a later commit retries; never report them durable.
            self.pending.lock().expect("pending poisoned").extend(batch);
        }
        result
    }
}

/// fsync a batch of renamed-into-place files and the folders holding them (so the renames
/// are durable too), plus `contents_only` files (temp files about to be renamed, whose
/// directory entries do not matter). On Linux a very large batch is one `syncfs` instead: it
/// is one journal flush however many files it covers, but it also flushes every other dirty
/// file on the filesystem, so it is not used for the usual handful.
fn sync_files(root: &Path, files: &[PathBuf], contents_only: &[PathBuf]) -> Result<(), CacheError> {
    #[cfg(target_os = "linux")]
    if files.len() + contents_only.len() > SYNCFS_THRESHOLD {
        return fsutil::syncfs(root).map_err(CacheError::io("syncfs", root));
    }
    let _ = root;
    let mut dirs = BTreeSet::new();
    for f in files.iter().chain(contents_only) {
        fsutil::fsync_path(f).map_err(CacheError::io("fsync", f))?;
    }
    for f in files {
        if let Some(d) = f.parent() {
            dirs.insert(d.to_path_buf());
        }
    }
    for d in dirs {
        fsutil::fsync_path(&d).map_err(CacheError::io("fsync", &d))?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
pub(super) const SYNCFS_THRESHOLD: usize = 64;

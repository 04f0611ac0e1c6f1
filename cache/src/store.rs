//! [`Store`]: the on-disk CAS of blobs and trees, the action cache and the family index.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::digest::{hash_reader, SMALL_FILE};
use crate::fsutil::{
    self, blob_mtime, remove_any, rename_replace, set_readonly, unique_name, TempPath,
};
use crate::tree::{decode_tree, encode_tree, scan_tree, TreeEntry};
use crate::tree_check::check_tree;
use crate::{hash_file, ActionEntry, CacheError, Digest, OutputEntry, StatCache};

/// How hard the store works to survive a power loss (a killed process never loses anything
/// that was renamed into place, whichever is chosen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Blobs are written without fsync and synced as one group right before the action entry
    /// that references them becomes visible. The default.
    #[default]
    GroupCommit,
    /// Never fsync. A power loss may leave torn blobs or entries, which `verify` finds and
    /// removes (they read as misses until then). For throwaway stores and tests.
    None,
}

/// Options for [`Store::open_with`].
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    pub durability: Durability,
}

/// State of a blob when it is about to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlobState {
    Ok,
    Missing,
    /// It was there but did not hash to its name; it has been removed.
    Corrupt,
}

/// Why a blob is being served: to restore an output (trusted on its stat) or to feed a stage
/// (verified; see [`crate::integrity`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serve {
    Restore,
    Feed,
}

/// The local content-addressed store. Cheap to share between threads (`&self` everywhere).
pub struct Store {
    pub(crate) root: PathBuf,
    pub(crate) objects: PathBuf,
    pub(crate) actions: PathBuf,
    pub(crate) families: PathBuf,
    pub(crate) locks: PathBuf,
    pub(crate) tmp: PathBuf,
    durability: Durability,
    /// Files written since the last group commit, not yet fsynced.
    pending: Mutex<Vec<PathBuf>>,
    /// Held for a whole group commit, so a second caller waits until the first caller's
    /// fsyncs (which may cover its files) have finished rather than returning early.
    sync_lock: Mutex<()>,
    /// A shared lock on `locks/store.lock` held for the store's lifetime; `verify` and `gc`
    /// try to upgrade it to learn whether any other process has the store open.
    pub(crate) presence: Mutex<File>,
    /// Blobs this process vouches for (see [`crate::integrity`]).
    pub(crate) verified: crate::integrity::Verified,
}

impl Store {
    /// Open (creating if needed) a store rooted at `root`.
    pub fn open(root: &Path) -> Result<Store, CacheError> {
        Store::open_with(root, StoreOptions::default())
    }

    pub fn open_with(root: &Path, options: StoreOptions) -> Result<Store, CacheError> {
        let objects = root.join("objects");
        let actions = root.join("actions");
        let families = root.join("families");
        let locks = root.join("locks");
        let tmp = root.join("tmp");
        // Shard folders are made on first use (a rename that finds no folder creates it):
        // making all 512 up front costs a visible fraction of a second on a busy disk.
        for d in [&objects, &actions, &families, &locks, &tmp] {
            fsutil::create_dir_all(d)?;
        }
        let presence_path = locks.join("store.lock");
        let presence = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&presence_path)
            .map_err(CacheError::io("open", &presence_path))?;
        presence
            .lock_shared()
            .map_err(CacheError::io("lock", &presence_path))?;
        Ok(Store {
            root: root.to_path_buf(),
            objects,
            actions,
            families,
            locks,
            tmp,
            durability: options.durability,
            pending: Mutex::new(Vec::new()),
            sync_lock: Mutex::new(()),
            presence: Mutex::new(presence),
            verified: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `objects/ab/<hex>`.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        let hex = d.to_string();
        self.objects.join(&hex[..2]).join(hex)
    }

    pub(crate) fn action_path(&self, key: &Digest) -> PathBuf {
        let hex = key.to_string();
        self.actions.join(&hex[..2]).join(format!("{hex}.json"))
    }

    fn family_path(&self, family: &str) -> PathBuf {
        let mut tagged = b"heddle/family/v1\0".to_vec();
        tagged.extend_from_slice(family.as_bytes());
        self.families.join(format!(
            "{}.keys",
            &Digest::of_bytes(&tagged).to_string()[..32]
        ))
    }

    /// Whether a blob is present (a stat; its content is checked when it is served).
    pub fn has_blob(&self, d: &Digest) -> bool {
        fs::symlink_metadata(self.blob_path(d))
            .map(|m| m.is_file())
            .unwrap_or(false)
    }

    // ---------------------------------------------------------------- put

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
            });
        }
        let executable = fsutil::is_executable(&meta);
        if meta.len() <= SMALL_FILE {
            // One read serves both the hash and the copy.
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            file.read_to_end(&mut bytes)
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
        if self.durability != Durability::None {
            self.pending
                .lock()
                .expect("pending poisoned")
                .push(self.blob_path(digest));
        }
    }

    /// Store bytes as a blob named `digest` (the caller computed it).
    pub(crate) fn write_blob_bytes(&self, digest: &Digest, bytes: &[u8]) -> Result<(), CacheError> {
        let tmp = TempPath::new(self.tmp.join(unique_name("b-")));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp.path())
            .map_err(CacheError::io("create", tmp.path()))?;
        f.write_all(bytes)
            .map_err(CacheError::io("write", tmp.path()))?;
        // Stamp through the open descriptor: no second open of the file.
        f.set_modified(blob_mtime())
            .map_err(CacheError::io("set mtime of", tmp.path()))?;
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

    fn rename_blob(&self, tmp: TempPath, digest: &Digest) -> Result<(), CacheError> {
        let dest = self.blob_path(digest);
        if let Err(e) = fs::rename(tmp.path(), &dest) {
            // The shard folder may have been removed by hand; anything else is real.
            if e.kind() != io::ErrorKind::NotFound {
                return Err(CacheError::Io {
                    op: "rename into",
                    path: dest,
                    source: e,
                });
            }
            fsutil::create_dir_all(dest.parent().expect("blob path has a shard"))?;
            fs::rename(tmp.path(), &dest).map_err(CacheError::io("rename into", &dest))?;
        }
        tmp.keep();
        if self.durability != Durability::None {
            self.pending.lock().expect("pending poisoned").push(dest);
        }
        Ok(())
    }

    /// Make every blob written so far durable (the group commit). `record_action` calls this
    /// before its entry becomes visible; callers may call it earlier to bound the batch.
    pub fn sync_pending(&self) -> Result<(), CacheError> {
        self.sync_pending_with(&[])
    }

    fn sync_pending_with(&self, extra: &[PathBuf]) -> Result<(), CacheError> {
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

    // ---------------------------------------------------------------- serve

    /// Check a blob before serving it. A blob whose mtime is still the sentinel (and whose size
    /// matches when known) is trusted; otherwise it is re-hashed, and a blob that no longer
    /// matches its name is removed so that it becomes a miss.
    pub(crate) fn blob_state(
        &self,
        d: &Digest,
        size: Option<u64>,
    ) -> Result<BlobState, CacheError> {
        let p = self.blob_path(d);
        let meta = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BlobState::Missing),
            Err(e) => {
                return Err(CacheError::Io {
                    op: "stat",
                    path: p,
                    source: e,
                })
            }
        };
        if !meta.is_file() || size.is_some_and(|s| s != meta.len()) {
            if self.quarantine(d).is_err() {
                let _ = remove_any(&p);
            }
            return Ok(BlobState::Corrupt);
        }
        if meta.modified().ok() == Some(blob_mtime()) {
            return Ok(BlobState::Ok);
        }
        match hash_file(&p) {
            Ok(actual) if actual == *d => {
                fsutil::reset_blob_mtime(&p).map_err(CacheError::io("set mtime of", &p))?;
                self.mark_verified(d);
                Ok(BlobState::Ok)
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
                            self.require_served(digest, *size, serve)?;
                            self.place_file(digest, &at, *size, *executable)?;
                            recorded.push((dest.join(path), *digest));
                        }
                        TreeEntry::Symlink { target, .. } => make_symlink(target, &at)?,
                    }
                }
            }
        }
        replace_path(tmp.path(), dest)?;
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
            let bytes = fs::read(&blob).map_err(CacheError::io("read", &blob))?;
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
                // A regular file's lstat is its stat: no second stat for the stat cache.
                meta.is_file()
                    && (!cfg!(unix) || fsutil::is_executable(&meta) == *executable)
                    && stats
                        .hash_with_meta(dest, &meta)
                        .is_ok_and(|d| d == *digest)
            }
            OutputEntry::Dir { digest, .. } => {
                meta.is_dir() && stats.hash_dir(dest).is_ok_and(|d| d == *digest)
            }
        }
    }

    // ---------------------------------------------------------------- actions

    /// Look up an action. A missing, torn or unparsable entry, or one whose blobs are missing
    /// or corrupt, is a miss (`Ok(None)`).
    pub fn lookup_action(&self, key: &Digest) -> Result<Option<ActionEntry>, CacheError> {
        let Some(entry) = self.read_action(key)? else {
            return Ok(None);
        };
        for out in entry.outputs.values() {
            if !self.output_servable(out)? {
                return Ok(None);
            }
        }
        Ok(Some(entry))
    }

    /// [`Store::lookup_action`] for a hit that needs only the outputs (a run's cache hit, a
    /// preview): the same entries are hits, but the rest of the entry is skipped, not decoded.
    /// Decoding the expanded key of every hit only to drop it was a visible share of a no-op run.
    pub fn lookup_outputs(
        &self,
        key: &Digest,
    ) -> Result<Option<BTreeMap<String, OutputEntry>>, CacheError> {
        let Some(bytes) = self.read_action_bytes(key)? else {
            return Ok(None);
        };
        let Some(head) = serde_json::from_slice::<ActionOutputs>(&bytes)
            .ok()
            .filter(|e| e.key == *key)
        else {
            return Ok(None);
        };
        for out in head.outputs.values() {
            if !self.output_servable(out)? {
                return Ok(None);
            }
        }
        Ok(Some(head.outputs))
    }

    /// Read an action entry without checking its blobs.
    pub(crate) fn read_action(&self, key: &Digest) -> Result<Option<ActionEntry>, CacheError> {
        let Some(bytes) = self.read_action_bytes(key)? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<ActionEntry>(&bytes)
            .ok()
            .filter(|e| e.key == *key))
    }

    fn read_action_bytes(&self, key: &Digest) -> Result<Option<Vec<u8>>, CacheError> {
        let p = self.action_path(key);
        match fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CacheError::Io {
                op: "read",
                path: p,
                source: e,
            }),
        }
    }

    fn output_servable(&self, out: &OutputEntry) -> Result<bool, CacheError> {
        match out {
            OutputEntry::File { digest, size, .. } => {
                Ok(self.blob_state(digest, Some(*size))? == BlobState::Ok)
            }
            OutputEntry::Dir { digest, .. } => {
                let entries = match self.read_tree(digest) {
                    Ok(e) => e,
                    Err(
                        CacheError::MissingBlob { .. }
                        | CacheError::CorruptBlob { .. }
                        | CacheError::BadTree { .. },
                    ) => return Ok(false),
                    Err(e) => return Err(e),
                };
                for e in &entries {
                    if let TreeEntry::File { digest, size, .. } = e {
                        if self.blob_state(digest, Some(*size))? != BlobState::Ok {
                            return Ok(false);
                        }
                    }
                }
                Ok(true)
            }
        }
    }

    /// Every blob an output references (a file's blob; a tree's manifest and member blobs).
    pub(crate) fn output_blobs(
        &self,
        out: &OutputEntry,
        into: &mut BTreeSet<Digest>,
    ) -> Result<(), CacheError> {
        into.insert(out.digest());
        if let OutputEntry::Dir { digest, .. } = out {
            for e in self.read_tree(digest)? {
                if let TreeEntry::File { digest, .. } = e {
                    into.insert(digest);
                }
            }
        }
        Ok(())
    }

    /// Record an action. Fails if a blob it references is missing; makes every pending blob
    /// durable (one group commit, which also covers the entry's own temp file) before the
    /// entry is renamed into place; then appends the key to its family's index.
    pub fn record_action(&self, entry: &ActionEntry) -> Result<(), CacheError> {
        self.record_actions(std::slice::from_ref(entry))
    }

    /// Record several actions with one group commit: every pending blob and every entry's
    /// temp file are made durable together, then the entries are renamed into place. A runner
    /// that finishes many stages at once saves an fsync round per stage this way.
    pub fn record_actions(&self, entries: &[ActionEntry]) -> Result<(), CacheError> {
        let mut temps = Vec::with_capacity(entries.len());
        for entry in entries {
            let mut blobs = BTreeSet::new();
            for out in entry.outputs.values() {
                self.output_blobs(out, &mut blobs)?;
            }
            for d in &blobs {
                if !self.has_blob(d) {
                    return Err(CacheError::MissingBlob { digest: *d });
                }
            }
            let bytes =
                serde_json::to_vec_pretty(entry).map_err(|source| CacheError::EncodeAction {
                    key: entry.key,
                    source,
                })?;
            let tmp = TempPath::new(self.tmp.join(unique_name("a-")));
            fs::write(tmp.path(), &bytes).map_err(CacheError::io("write", tmp.path()))?;
            temps.push(tmp);
        }
        let paths: Vec<PathBuf> = temps.iter().map(|t| t.path().to_path_buf()).collect();
        self.sync_pending_with(&paths)?;
        for (entry, tmp) in entries.iter().zip(temps) {
            let dest = self.action_path(&entry.key);
            if let Err(e) = rename_replace(tmp.path(), &dest) {
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(CacheError::Io {
                        op: "rename into",
                        path: dest,
                        source: e,
                    });
                }
                fsutil::create_dir_all(dest.parent().expect("action path has a shard"))?;
                rename_replace(tmp.path(), &dest).map_err(CacheError::io("rename into", &dest))?;
            }
            tmp.keep();
            self.append_family(&entry.family, &entry.key)?;
        }
        Ok(())
    }

    pub(crate) fn append_family(&self, family: &str, key: &Digest) -> Result<(), CacheError> {
        let p = self.family_path(family);
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(CacheError::io("open", &p))?;
        // One write of 65 bytes with O_APPEND: concurrent appenders do not interleave.
        f.write_all(format!("{key}\n").as_bytes())
            .map_err(CacheError::io("append to", &p))
    }

    /// Every recorded action of `family` still in the store, newest first. Entries are read
    /// without checking their blobs: this is for explaining misses by diffing `key_parts`.
    pub fn actions_in_family(&self, family: &str) -> Result<Vec<ActionEntry>, CacheError> {
        let p = self.family_path(family);
        let text = match fs::read(&p) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(CacheError::Io {
                    op: "read",
                    path: p,
                    source: e,
                })
            }
        };
        let keys: BTreeSet<Digest> = text.lines().filter_map(|l| l.parse().ok()).collect();
        let mut out = Vec::new();
        for k in keys {
            if let Some(e) = self.read_action(&k)? {
                if e.family == family {
                    out.push(e);
                }
            }
        }
        out.sort_by(|a, b| {
            b.created_unix_ms
                .cmp(&a.created_unix_ms)
                .then(a.key.cmp(&b.key))
        });
        Ok(out)
    }
}

/// An [`ActionEntry`] read for its outputs: every other field must be there, as for a full
/// read, but is skipped unread.
#[derive(serde::Deserialize)]
struct ActionOutputs {
    key: Digest,
    outputs: BTreeMap<String, OutputEntry>,
    #[serde(rename = "family")]
    _family: serde::de::IgnoredAny,
    #[serde(rename = "key_parts")]
    _key_parts: serde::de::IgnoredAny,
    #[serde(rename = "duration_ms")]
    _duration_ms: serde::de::IgnoredAny,
    #[serde(rename = "created_unix_ms")]
    _created_unix_ms: serde::de::IgnoredAny,
    #[serde(rename = "meta")]
    _meta: serde::de::IgnoredAny,
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
const SYNCFS_THRESHOLD: usize = 64;

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

/// Move `tmp` onto `dest`. A file replaces a file atomically; when a directory is involved on
/// either side, the old `dest` is first moved aside and then removed.
fn replace_path(tmp: &Path, dest: &Path) -> Result<(), CacheError> {
    let tmp_is_dir = fs::symlink_metadata(tmp)
        .map(|m| m.is_dir())
        .unwrap_or(false);
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

/// A blob on its way in from elsewhere (a remote cache), written chunk by chunk to the
/// store's `tmp/` and hashed as it is written, so its bytes are read once. Start one with
/// [`Store::start_blob_import`], feed it with [`BlobImport::write`], and hand it to
/// [`Store::import_verified_blob`], which moves it into place only if it hashed to the digest
/// it was started for. Dropped unfinished, it removes its temp file.
pub struct BlobImport {
    tmp: TempPath,
    file: File,
    hasher: sha2::Sha256,
    size: u64,
    expected: Digest,
}

impl BlobImport {
    /// Append a chunk (blocking file I/O: async callers run it on a blocking thread).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), CacheError> {
        use sha2::Digest as _;
        self.hasher.update(chunk);
        self.size += chunk.len() as u64;
        self.file
            .write_all(chunk)
            .map_err(CacheError::io("write", self.tmp.path()))
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn expected(&self) -> Digest {
        self.expected
    }
}

/// What [`Store::import_verified_blob`] did with a [`BlobImport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    /// The bytes hashed to the expected digest and are now that blob.
    Stored { size: u64 },
    /// The bytes hashed to `actual` instead; they were discarded and the store is unchanged.
    Mismatch { actual: Digest, size: u64 },
}

impl Store {
    /// Begin importing the blob `expected` (see [`BlobImport`]).
    pub fn start_blob_import(&self, expected: Digest) -> Result<BlobImport, CacheError> {
        use sha2::Digest as _;
        let tmp = TempPath::new(self.tmp.join(unique_name("i-")));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp.path())
            .map_err(CacheError::io("create", tmp.path()))?;
        Ok(BlobImport {
            tmp,
            file,
            hasher: sha2::Sha256::new(),
            size: 0,
            expected,
        })
    }

    /// Finish an import: if the bytes written hashed to the digest the import was started for,
    /// seal the file (blob mtime sentinel, read-only) and rename it into place, where it joins
    /// the next group commit like any new blob; otherwise remove it. The hash computed while
    /// writing is the only one: nothing is read back.
    pub fn import_verified_blob(&self, import: BlobImport) -> Result<ImportOutcome, CacheError> {
        use sha2::Digest as _;
        let BlobImport {
            tmp,
            mut file,
            hasher,
            size,
            expected,
        } = import;
        let actual = Digest::from_bytes(hasher.finalize().into());
        if actual != expected {
            return Ok(ImportOutcome::Mismatch { actual, size });
        }
        file.flush().map_err(CacheError::io("write", tmp.path()))?;
        file.set_modified(blob_mtime())
            .map_err(CacheError::io("set mtime of", tmp.path()))?;
        drop(file);
        set_readonly(tmp.path(), false).map_err(CacheError::io("make read-only", tmp.path()))?;
        self.rename_blob(tmp, &expected)?;
        self.mark_verified(&expected);
        Ok(ImportOutcome::Stored { size })
    }
}

#[cfg(test)]
mod import_tests {
    use super::*;

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        (dir, store)
    }

    fn tmp_files(store: &Store) -> usize {
        fs::read_dir(&store.tmp).unwrap().count()
    }

    #[test]
    fn an_import_in_chunks_becomes_the_blob() {
        let (_dir, store) = open();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let digest = Digest::of_bytes(&bytes);
        let mut import = store.start_blob_import(digest).unwrap();
        for chunk in bytes.chunks(65_000) {
            import.write(chunk).unwrap();
        }
        assert_eq!(import.size(), bytes.len() as u64);
        let outcome = store.import_verified_blob(import).unwrap();
        assert_eq!(
            outcome,
            ImportOutcome::Stored {
                size: bytes.len() as u64
            }
        );
        assert_eq!(fs::read(store.blob_path(&digest)).unwrap(), bytes);
        // Sealed like any blob: served on its stat, without a re-hash.
        assert_eq!(
            store.blob_state(&digest, Some(bytes.len() as u64)).unwrap(),
            BlobState::Ok
        );
        assert_eq!(tmp_files(&store), 0);
    }

    #[test]
    fn an_import_of_other_bytes_is_discarded() {
        let (_dir, store) = open();
        let wanted = Digest::of_bytes(b"the real bytes");
        let mut import = store.start_blob_import(wanted).unwrap();
        import.write(b"some other bytes").unwrap();
        let outcome = store.import_verified_blob(import).unwrap();
        assert_eq!(
            outcome,
            ImportOutcome::Mismatch {
                actual: Digest::of_bytes(b"some other bytes"),
                size: 16
            }
        );
        assert!(!store.has_blob(&wanted));
        assert_eq!(tmp_files(&store), 0);
    }

    #[test]
    fn an_abandoned_import_leaves_nothing() {
        let (_dir, store) = open();
        let mut import = store.start_blob_import(Digest::of_bytes(b"x")).unwrap();
        import.write(b"half").unwrap();
        drop(import);
        assert_eq!(tmp_files(&store), 0);
    }
}

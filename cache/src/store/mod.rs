//! [`Store`]: the on-disk CAS of blobs and trees, the action cache and the family index.
//!
//! This file holds the store's layout (where each kind of file lives) and opening it; the
//! rest is split by what a caller does with the store:
//! - `put`: produced outputs into blobs and trees, and the group commit that makes them durable;
//! - `serve`: checking a blob before it is served, and materialising outputs from it;
//! - `actions`: action entries (lookup, record) and the family index;
//! - `import`: a blob streamed in from a remote cache, verified against its digest;
//! - `imports_journal`: how a large imported blob is kept safe from a power loss without an
//!   fsync of its bytes, and what opening the store does with the journals others left.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::fsutil;
use crate::{CacheError, Digest};

mod actions;
mod import;
mod import_hash;
mod imports_journal;
mod put;
mod serve;

pub use import::{BlobImport, ImportOutcome};

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
    /// It hashes to its name but is not the size the caller was told: the caller's record
    /// (an entry, perhaps a remote's) is wrong. The blob is kept.
    WrongSize {
        actual: u64,
    },
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
    /// `actions/` held open, so a lookup walks two path components (`ab/<key>.json`) instead
    /// of the whole absolute path: a plan of a million instances is a million lookups, and in
    /// a cache without those keys the path walk to each missing name was a quarter of its time
    /// (benches/RESULTS.md, M25). The folder is never replaced while a store is open.
    #[cfg(unix)]
    actions_dir: File,
    /// `objects/` held open for the same reason: a hit's blob is checked on its `lstat`
    /// (`ab/<hex>`, two components), and a no-op checks one per output.
    #[cfg(unix)]
    objects_dir: File,
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
    /// Large imported blobs not yet fsynced (see `imports_journal`).
    imports: imports_journal::ImportsJournal,
}

impl Store {
    /// Open (creating if needed) a store rooted at `root`.
    pub fn open(root: &Path) -> Result<Store, CacheError> {
        Store::open_with(root, StoreOptions::default())
    }

    /// Open with `options`. Journals of imports left by other stores are dealt with first
    /// (see `imports_journal`): after a reboot, the blobs they list are re-hashed before this
    /// returns, once (benches/RESULTS.md, M9).
    pub fn open_with(root: &Path, options: StoreOptions) -> Result<Store, CacheError> {
        Store::open_booted(root, options, imports_journal::boot_id())
    }

    /// [`Store::open_with`] as if this boot's id were `boot_id` (tests simulate a reboot).
    pub(crate) fn open_booted(
        root: &Path,
        options: StoreOptions,
        boot_id: Option<String>,
    ) -> Result<Store, CacheError> {
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
        #[cfg(unix)]
        let actions_dir = fsutil::open_dir(&actions).map_err(CacheError::io("open", &actions))?;
        #[cfg(unix)]
        let objects_dir = fsutil::open_dir(&objects).map_err(CacheError::io("open", &objects))?;
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
        let store = Store {
            root: root.to_path_buf(),
            objects,
            actions,
            #[cfg(unix)]
            actions_dir,
            #[cfg(unix)]
            objects_dir,
            families,
            locks,
            tmp,
            durability: options.durability,
            pending: Mutex::new(Vec::new()),
            sync_lock: Mutex::new(()),
            presence: Mutex::new(presence),
            verified: Default::default(),
            imports: imports_journal::ImportsJournal::new(root, boot_id),
        };
        store.recover_imports()?;
        Ok(store)
    }

    /// How many files wait for the next group commit.
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.lock().expect("pending poisoned").len()
    }

    /// This store's imports journal, once it has imported a journaled blob.
    #[cfg(test)]
    pub(crate) fn imports_journal_path(&self) -> Option<PathBuf> {
        self.imports.own_path()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `objects/ab/<hex>`.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        let hex = d.to_string();
        self.objects.join(&hex[..2]).join(hex)
    }

    /// `lstat` of blob `d`, walked from the open `objects/` (see [`Store::blob_path`]).
    #[cfg(unix)]
    pub(crate) fn blob_lstat(&self, d: &Digest) -> std::io::Result<fsutil::NameStat> {
        let mut rel = [0u8; 67];
        shard_name(d, &mut rel);
        fsutil::lstat_in(&self.objects_dir, &rel)
    }

    #[cfg(not(unix))]
    pub(crate) fn blob_lstat(&self, d: &Digest) -> std::io::Result<fsutil::NameStat> {
        std::fs::symlink_metadata(self.blob_path(d)).map(|m| fsutil::NameStat::from(&m))
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
        self.blob_lstat(d).is_ok_and(|m| m.is_file)
    }
}

/// `ab/<64 hex>` for `d` at the start of `rel` (at least 67 bytes), as a shard folder names it:
/// built on the stack, for the `*at` calls relative to an open `objects/` or `actions/`.
#[cfg(unix)]
pub(crate) fn shard_name(d: &Digest, rel: &mut [u8]) {
    hex::encode_to_slice(d.as_bytes(), &mut rel[3..67]).expect("64 bytes of room");
    rel.copy_within(3..5, 0);
    rel[2] = b'/';
}

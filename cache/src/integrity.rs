//! Keeping blobs honest while stages hold them: verification before a blob is fed to a stage,
//! a check after the stage that nothing it held was written, and quarantine for a blob found
//! wrong.
//!
//! # When a blob is re-hashed
//!
//! - **Fed to a stage** (laid out as an input of an instance that runs): always verified, once
//!   per process. A blob this process wrote or already hashed is trusted while its stat still
//!   carries the sentinel mtime; any other is re-hashed first. So results are never computed
//!   from rotted bytes and stored for good. In a chain, every input was produced (and hashed)
//!   earlier in the same run, so this costs nothing; a stage that reads a 1 GiB blob from an
//!   earlier run pays one sha256 pass over it (`examples/feed_bench.rs`; benches/RESULTS.md, M9)
//!   before the stage starts.
//! - **Served on a hit** (materialised into `out/`): a small file (≤ 64 KiB) is read anyway to
//!   be copied and is hashed on the way; a large one is trusted on its stat (sentinel mtime and
//!   size), so a 1 GiB artefact is still restored in milliseconds. Rot that keeps the mtime in
//!   a large blob is caught by `heddle cache verify` and the next time the blob is fed to a
//!   stage, not on a plain restore: that is the price of a millisecond restore.
//! - **After a stage** (host stages see their inputs as hard links to blobs): each blob the
//!   stage held is stat'ed; a moved mtime or size means a write through the link (even as
//!   root, where the read-only mode does not stop it). The blob is re-hashed; a changed one is
//!   moved to `quarantine/` and the stage fails with [`CacheError::InputModified`]. Every stage
//!   that held the blob at the time fails the same way, so a sibling that read the edited
//!   bytes never stores a result under the key of the true ones.
//!
//! # Quarantine
//!
//! A blob found wrong (here, when served, or torn by a power loss in an import:
//! `store/imports_journal.rs`) is renamed into `<root>/quarantine/<digest>-<unique>`, out of
//! the store, so an entry naming it reads as a miss. The file is kept as evidence:
//! `heddle cache verify` prints how many files and bytes are there (the report lists each
//! file) and leaves them; `heddle cache gc` removes them all, or, while another process has
//! the store open, those quarantined over an hour ago.
//!
//! Container stages get their inputs through read-only bind mounts and cannot write them.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::PathBuf;

use crate::fsutil::{self, blob_mtime, unique_name};
use crate::tree::TreeEntry;
use crate::{hash_file, CacheError, Digest, OutputEntry, Store};

/// Blobs this process has hashed (or written from bytes it hashed) since it opened the store.
#[derive(Default)]
pub(crate) struct Verified(std::sync::Mutex<HashSet<Digest>>);

impl Verified {
    fn contains(&self, d: &Digest) -> bool {
        self.0.lock().expect("verified poisoned").contains(d)
    }
    fn insert(&self, d: Digest) {
        self.0.lock().expect("verified poisoned").insert(d);
    }
    fn remove(&self, d: &Digest) {
        self.0.lock().expect("verified poisoned").remove(d);
    }
}

impl Store {
    pub(crate) fn mark_verified(&self, d: &Digest) {
        self.verified.insert(*d);
    }

    /// Where blobs found not to match their name are kept until `gc`.
    pub(crate) fn quarantine_dir(&self) -> PathBuf {
        self.root.join("quarantine")
    }

    /// Move a blob that does not match its name out of the store, into `quarantine/`, where
    /// `verify` lists it (count, bytes, files) and leaves it, and `gc` removes it (with other
    /// processes on the store, once it has been there an hour). Returns where it went.
    pub(crate) fn quarantine(&self, d: &Digest) -> io::Result<PathBuf> {
        self.verified.remove(d);
        let dir = self.quarantine_dir();
        fs::create_dir_all(&dir)?;
        let to = dir.join(unique_name(&format!("{d}-")));
        fs::rename(self.blob_path(d), &to)?;
        Ok(to)
    }

    /// Check blob `d` before it is laid out for a stage to read: re-hashed unless this
    /// process already vouches for it and its stat has not moved since.
    pub(crate) fn require_fed(&self, d: &Digest, size: u64) -> Result<(), CacheError> {
        let p = self.blob_path(d);
        let meta = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(CacheError::MissingBlob { digest: *d })
            }
            Err(e) => return Err(CacheError::io("stat", &p)(e)),
        };
        let stat_ok =
            meta.is_file() && meta.len() == size && meta.modified().ok() == Some(blob_mtime());
        if stat_ok && self.verified.contains(d) {
            return Ok(());
        }
        if meta.is_file() && hash_file(&p)? == *d {
            if meta.modified().ok() != Some(blob_mtime()) {
                fsutil::reset_blob_mtime(&p).map_err(CacheError::io("set mtime of", &p))?;
            }
            self.mark_verified(d);
            // The blob is good; the record that gave `size` is not (a remote's entry may lie).
            if meta.len() != size {
                return Err(CacheError::WrongSize {
                    digest: *d,
                    expected: size,
                    actual: meta.len(),
                });
            }
            return Ok(());
        }
        let _ = self.quarantine(d);
        Err(CacheError::CorruptBlob { digest: *d })
    }

    /// After a stage held `entry`'s blobs as inputs: fail with [`CacheError::InputModified`]
    /// if any of them was written meanwhile (the blob is quarantined). One stat per blob when
    /// nothing happened.
    pub fn check_fed(&self, entry: &OutputEntry) -> Result<(), CacheError> {
        match entry {
            OutputEntry::File { digest, size, .. } => self.check_fed_blob(digest, *size),
            OutputEntry::Dir { digest, .. } => {
                for e in self.read_tree(digest)? {
                    if let TreeEntry::File { digest, size, .. } = e {
                        self.check_fed_blob(&digest, size)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn check_fed_blob(&self, d: &Digest, size: u64) -> Result<(), CacheError> {
        let p = self.blob_path(d);
        let modified = |quarantined: PathBuf| CacheError::InputModified {
            digest: *d,
            quarantined,
        };
        let meta = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            // Quarantined by a stage beside this one that saw the same write: this stage may
            // have read the edited bytes too.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(modified(self.quarantine_dir()))
            }
            Err(e) => return Err(CacheError::io("stat", &p)(e)),
        };
        if meta.is_file() && meta.len() == size && meta.modified().ok() == Some(blob_mtime()) {
            return Ok(());
        }
        if meta.is_file() && meta.len() == size && hash_file(&p)? == *d {
            // Touched, not changed.
            fsutil::reset_blob_mtime(&p).map_err(CacheError::io("set mtime of", &p))?;
            return Ok(());
        }
        let to = self
            .quarantine(d)
            .map_err(CacheError::io("quarantine", &p))?;
        Err(modified(to))
    }
}

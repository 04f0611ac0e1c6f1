//! What `verify`, `du` and `gc` report: the bad entries `verify` found (with the line
//! `heddle cache verify` prints for each) and each pass's counts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::Digest;

/// Something `verify` found wrong (and repaired by removing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadEntry {
    /// A blob whose content does not hash to its name (torn or edited). Moved to
    /// `quarantine/` (`to`), as a run moves one it finds, so the evidence stays until `gc`.
    BlobMismatch {
        digest: Digest,
        actual: Digest,
        to: PathBuf,
    },
    /// A file in `objects/` that is not named by a digest, or is not a regular file. Removed.
    StrayObject { path: PathBuf },
    /// An action entry that does not parse or does not match its file name. Removed.
    BadAction { path: PathBuf, reason: String },
    /// An action entry referencing a blob that is missing (or was just removed). Removed.
    MissingBlob { key: Digest, digest: Digest },
    /// A tree manifest that does not decode. Removed.
    BadTree { digest: Digest, reason: String },
}

/// One line for `heddle cache verify`: what is wrong and what was done about it.
impl std::fmt::Display for BadEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadEntry::BlobMismatch { digest, actual, to } => write!(
                f,
                "blob {digest} hashes to {actual}; moved to {}",
                to.display()
            ),
            BadEntry::StrayObject { path } => {
                write!(f, "{} is not a blob heddle wrote; removed", path.display())
            }
            BadEntry::BadAction { path, reason } => {
                write!(f, "action entry {}: {reason}; removed", path.display())
            }
            BadEntry::MissingBlob { key, digest } => write!(
                f,
                "action {key} names blob {digest}, which is gone; the action is removed"
            ),
            BadEntry::BadTree { digest, reason } => {
                write!(
                    f,
                    "tree manifest {digest} does not decode ({reason}); removed"
                )
            }
        }
    }
}

/// What `verify` did.
#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    pub blobs_checked: u64,
    pub bytes_checked: u64,
    pub actions_checked: u64,
    pub bad: Vec<BadEntry>,
    /// Leftover temp files removed (not a fault: a killed writer leaves them).
    pub tmp_removed: Vec<PathBuf>,
    /// Keys added back to a family index that had lost them.
    pub family_keys_restored: u64,
    /// Files in `quarantine/`, sorted: blobs moved out of the store because they did not match
    /// their digest (a stage wrote through a hard-linked input, rot, a torn import). Not a
    /// fault of the store (nothing serves them) and kept as evidence: `verify` leaves them,
    /// `gc` removes them.
    pub quarantined: Vec<PathBuf>,
    /// Their total size.
    pub quarantined_bytes: u64,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.bad.is_empty()
    }
}

/// Space used by one family's actions: the bytes of blobs that only this family's entries
/// reference, so that families, [`DuReport::shared_bytes`] and
/// [`DuReport::unreferenced_bytes`] add up to [`DuReport::blob_bytes`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FamilyUsage {
    pub actions: u64,
    pub output_bytes: u64,
}

#[derive(Debug, Default, Clone)]
pub struct DuReport {
    pub blob_count: u64,
    pub blob_bytes: u64,
    pub action_count: u64,
    pub action_bytes: u64,
    pub families: BTreeMap<String, FamilyUsage>,
    /// Bytes of blobs that entries of more than one family reference.
    pub shared_bytes: u64,
    /// Bytes of blobs no entry references (gc removes them once they are an hour old).
    pub unreferenced_bytes: u64,
    /// Files in `quarantine/` and their bytes: not served, but on the disk until `gc`.
    pub quarantined_count: u64,
    pub quarantined_bytes: u64,
}

#[derive(Debug, Default, Clone)]
pub struct GcReport {
    /// Actions evicted, in eviction order.
    pub evicted: Vec<Digest>,
    pub blobs_removed: u64,
    pub bytes_freed: u64,
    /// Blob bytes left after the sweep.
    pub bytes_remaining: u64,
    /// Unreferenced blobs kept because they were too recent while others use the store.
    pub blobs_spared: u64,
    /// Scratch folders of dead runs removed (their sandboxes; see `scratch.rs`).
    pub stale_scratch_removed: u64,
    /// Files removed from `quarantine/` (not counted in `blobs_removed`).
    pub quarantine_removed: u64,
    /// Their bytes (not counted in `bytes_freed`).
    pub quarantine_bytes_freed: u64,
    /// Quarantined files kept because they were too recent while others use the store (the
    /// process that quarantined one may just have named it in an error).
    pub quarantine_spared: u64,
    /// Per-key lock files nobody held, left by a killed holder or by an older heddle (which
    /// never deleted them), removed (unix).
    pub stale_locks_removed: u64,
}

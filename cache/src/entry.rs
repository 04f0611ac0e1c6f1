//! The records the store keeps: [`OutputEntry`] (one stored output) and [`ActionEntry`]
//! (one cached action and everything it produced).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Digest;

/// One stored output: a regular file, or a directory tree (by the digest of its manifest).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputEntry {
    File {
        digest: Digest,
        size: u64,
        executable: bool,
    },
    /// `digest` is the tree manifest blob's; `size` the total of its files' sizes.
    Dir {
        digest: Digest,
        size: u64,
        files: u64,
    },
}

impl OutputEntry {
    pub fn digest(&self) -> Digest {
        match self {
            OutputEntry::File { digest, .. } | OutputEntry::Dir { digest, .. } => *digest,
        }
    }

    pub fn size(&self) -> u64 {
        match self {
            OutputEntry::File { size, .. } | OutputEntry::Dir { size, .. } => *size,
        }
    }
}

/// One cached action: its key, the expanded key it was hashed from, and its outputs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ActionEntry {
    pub key: Digest,
    /// Opaque grouping chosen by the caller (e.g. `"pipeline/stage"`), for [`crate::Store::actions_in_family`].
    pub family: String,
    /// The expanded key, opaque to this crate, kept so a miss can be explained by diffing.
    pub key_parts: serde_json::Value,
    pub outputs: BTreeMap<String, OutputEntry>,
    pub duration_ms: u64,
    pub created_unix_ms: u64,
    /// Opaque extra (labels, image ids, ...).
    pub meta: serde_json::Value,
}

impl ActionEntry {
    /// Total bytes of this action's outputs (shared blobs counted once per output).
    pub fn output_bytes(&self) -> u64 {
        self.outputs.values().map(OutputEntry::size).sum()
    }
}

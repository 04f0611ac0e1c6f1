//! The action cache: an entry maps an action key to the outputs it produced, and is renamed
//! into place only after the blobs it names are durable. The family index lists every key
//! recorded for a family, so a miss can be explained against earlier entries.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;

use super::{BlobState, Store};
use crate::fsutil::{self, rename_replace, unique_name, TempPath};
use crate::tree::TreeEntry;
use crate::{ActionEntry, CacheError, Digest, OutputEntry};

/// Room for an entry of a few outputs in one read; a larger one grows the buffer as it reads.
const ENTRY_READ_CAPACITY: usize = 2048;

impl Store {
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

    /// An entry's bytes; `None` if there is none. An entry is one small JSON document, and a
    /// no-op run reads one per instance: [`fsutil::read_all`] reads it without sizing it first.
    fn read_action_bytes(&self, key: &Digest) -> Result<Option<Vec<u8>>, CacheError> {
        let io_err = |source| CacheError::Io {
            op: "read",
            path: self.action_path(key),
            source,
        };
        let mut f = match self.open_action(key) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(e)),
        };
        fsutil::read_all(&mut f, ENTRY_READ_CAPACITY)
            .map(Some)
            .map_err(io_err)
    }

    #[cfg(unix)]
    fn open_action(&self, key: &Digest) -> io::Result<fs::File> {
        // `ab/<64 hex>.json`, relative to the open `actions/`.
        let mut rel = [0u8; 72];
        super::shard_name(key, &mut rel);
        rel[67..].copy_from_slice(b".json");
        fsutil::open_in(&self.actions_dir, &rel)
    }

    #[cfg(not(unix))]
    fn open_action(&self, key: &Digest) -> io::Result<fs::File> {
        fs::File::open(self.action_path(key))
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
            self.entry_blobs(entry)?;
            temps.push(self.write_entry_temp(entry)?);
        }
        let paths: Vec<PathBuf> = temps.iter().map(|t| t.path().to_path_buf()).collect();
        self.sync_pending_with(&paths)?;
        for (entry, tmp) in entries.iter().zip(temps) {
            self.place_entry(entry, tmp)?;
        }
        Ok(())
    }

    /// Record an action fetched from a remote cache, its blobs brought in by
    /// [`Store::import_verified_blob`]: as [`Store::record_action`], but with no fsync when none
    /// of the blobs it names waits for this store's group commit. A journaled import is safe
    /// from a power loss without one (`imports_journal`), and the entry needs none: lost or
    /// torn, it reads as a miss and is fetched again. Per remote hit, the fsyncs of
    /// `record_action` (the blob, its folder, the entry) cost milliseconds each on a busy disk,
    /// most of a cold no-op against a fast remote (benches/RESULTS.md, remote no-op).
    /// Where imports are not journaled (no boot id), it is `record_action`.
    pub fn record_fetched_action(&self, entry: &ActionEntry) -> Result<(), CacheError> {
        if !self.journals_imports() {
            return self.record_action(entry);
        }
        let blobs = self.entry_blobs(entry)?;
        {
            // A commit in progress has taken its files out of `pending` and not yet made them
            // durable: wait for it, then look.
            let _commit = self.sync_lock.lock().expect("sync lock poisoned");
            let pending = self.pending.lock().expect("pending poisoned");
            if !pending.is_empty() && blobs.iter().any(|d| pending.contains(&self.blob_path(d))) {
                drop(pending);
                drop(_commit);
                return self.record_action(entry);
            }
        }
        let tmp = self.write_entry_temp(entry)?;
        self.place_entry(entry, tmp)
    }

    /// Every blob `entry` names, each present in the store (else [`CacheError::MissingBlob`]).
    fn entry_blobs(&self, entry: &ActionEntry) -> Result<BTreeSet<Digest>, CacheError> {
        let mut blobs = BTreeSet::new();
        for out in entry.outputs.values() {
            self.output_blobs(out, &mut blobs)?;
        }
        for d in &blobs {
            if !self.has_blob(d) {
                return Err(CacheError::MissingBlob { digest: *d });
            }
        }
        Ok(blobs)
    }

    /// The entry written to a temp file, not yet synced or in place.
    fn write_entry_temp(&self, entry: &ActionEntry) -> Result<TempPath, CacheError> {
        let bytes =
            serde_json::to_vec_pretty(entry).map_err(|source| CacheError::EncodeAction {
                key: entry.key,
                source,
            })?;
        let tmp = TempPath::new(self.tmp.join(unique_name("a-")));
        fs::write(tmp.path(), &bytes).map_err(CacheError::io("write", tmp.path()))?;
        Ok(tmp)
    }

    /// Rename the entry's temp file into place and list its key in its family's index.
    fn place_entry(&self, entry: &ActionEntry, tmp: TempPath) -> Result<(), CacheError> {
        let dest = self.action_path(&entry.key);
        fsutil::rename_into_shard(tmp.path(), &dest, rename_replace)?;
        tmp.keep();
        self.append_family(&entry.family, &entry.key)
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

    /// Whether `family` has ever had an action recorded here: one `stat`, cheap enough to ask
    /// without the blocking pool before [`Store::actions_in_family`] reads them all. A folder
    /// that cannot be read answers `true`, so the full read reports it.
    pub fn family_recorded(&self, family: &str) -> bool {
        !matches!(
            fs::symlink_metadata(self.family_path(family)),
            Err(e) if e.kind() == io::ErrorKind::NotFound
        )
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

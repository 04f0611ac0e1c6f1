//! [`StatCache`]: remembers which digest a file had at a given stat, so unchanged files are
//! not re-hashed.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FileStamp};
use crate::tree::{encode_tree, scan_tree};
use crate::{hash_file, CacheError, Digest};

/// Format tag of the saved file; a file with another tag is ignored (an empty cache).
const STAT_TAG: &str = "heddle/statcache/v1";

/// A file modified this close to the moment it was stat'ed may be modified again within the
/// same timestamp tick without its stat changing ("racy git"). Such records are not trusted;
/// the file is re-hashed (and re-recorded) until it is older than this. 2 s covers
/// filesystems with coarse (FAT-like) timestamps.
const RACY_NS: i128 = 2_000_000_000;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Record {
    stamp: FileStamp,
    digest: Digest,
    /// When the stat was taken (ns since the epoch); see [`RACY_NS`].
    seen_ns: i128,
    /// Recorded by `record` (the caller vouches for the content), so never racy.
    vouched: bool,
}

impl Record {
    fn trusted(&self) -> bool {
        self.vouched || (self.seen_ns - self.stamp.mtime_ns) > RACY_NS
    }
}

#[derive(Serialize, Deserialize)]
struct SavedFile {
    format: String,
    entries: Vec<(PathBuf, Record)>,
}

/// path → (dev, inode, size, mtime, ctime) → digest. Loaded once, saved atomically; a stale,
/// torn or foreign file loads as an empty cache. Shareable between threads.
pub struct StatCache {
    path: PathBuf,
    map: Mutex<HashMap<PathBuf, Record>>,
    hashes: AtomicU64,
    /// Whether the map differs from the saved file: a no-op run changes nothing, and rewriting
    /// a record per materialised file was 8 % of a 1,000-instance no-op.
    dirty: AtomicBool,
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

impl StatCache {
    /// Load the cache saved at `path`; never fails (anything unreadable is an empty cache).
    pub fn load(path: &Path) -> StatCache {
        let saved = fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<SavedFile>(&b).ok())
            .filter(|f| f.format == STAT_TAG);
        // A missing, torn or foreign file is rewritten at the first save.
        let dirty = AtomicBool::new(saved.is_none());
        let map = saved
            .map(|f| f.entries.into_iter().collect())
            .unwrap_or_default();
        StatCache {
            path: path.to_path_buf(),
            map: Mutex::new(map),
            hashes: AtomicU64::new(0),
            dirty,
        }
    }

    /// Save atomically (temp file beside it, then rename). Concurrent savers: last one wins.
    pub fn save(&self) -> Result<(), CacheError> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let entries: Vec<(PathBuf, Record)> = self
            .map
            .lock()
            .expect("stat cache poisoned")
            .iter()
            .map(|(p, r)| (p.clone(), *r))
            .collect();
        let bytes = serde_json::to_vec(&SavedFile {
            format: STAT_TAG.to_string(),
            entries,
        })
        .expect("stat cache always serialises");
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let written = fsutil::create_dir_all(&dir)
            .and_then(|_| fsutil::write_atomic(&dir, &self.path, &bytes, false));
        if written.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        written
    }

    /// How many files this cache has actually hashed (not served from a record).
    pub fn hash_count(&self) -> u64 {
        self.hashes.load(Ordering::Relaxed)
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.map.lock().expect("stat cache poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The digest of the file at `path` (symlinks followed): the recorded one if its stat is
    /// unchanged, else hashed and recorded.
    pub fn hash(&self, path: &Path) -> Result<Digest, CacheError> {
        let meta = fs::metadata(path).map_err(CacheError::io("stat", path))?;
        self.hash_with_meta(path, &meta)
    }

    /// [`StatCache::hash`] with the file's stat already taken (of the file itself, not of a
    /// symlink to it).
    pub(crate) fn hash_with_meta(
        &self,
        path: &Path,
        meta: &fs::Metadata,
    ) -> Result<Digest, CacheError> {
        if !meta.is_file() {
            // Not even opened: opening some devices has effects of its own.
            return Err(CacheError::NotAFile {
                path: path.to_path_buf(),
                kind: crate::fsutil::odd_kind(&meta.file_type()),
            });
        }
        let stamp = FileStamp::of(meta);
        if let Some(r) = self.map.lock().expect("stat cache poisoned").get(path) {
            if r.stamp.unchanged(&stamp) && r.trusted() {
                return Ok(r.digest);
            }
        }
        let seen_ns = now_ns();
        let digest = hash_file(path)?;
        self.hashes.fetch_add(1, Ordering::Relaxed);
        // Record only if the file did not change while it was being hashed.
        if let Ok(after) = fs::metadata(path) {
            if FileStamp::of(&after) == stamp {
                let rec = Record {
                    stamp,
                    digest,
                    seen_ns,
                    vouched: false,
                };
                self.map
                    .lock()
                    .expect("stat cache poisoned")
                    .insert(path.to_path_buf(), rec);
                self.dirty.store(true, Ordering::Release);
            }
        }
        Ok(digest)
    }

    /// Record that the file at `path`, as it is now, holds `d` (after materialising it).
    /// A directory is not recorded (its tree digest is recomputed from its files' records);
    /// use [`crate::Store::materialize_recorded`] to record every file of a tree.
    pub fn record(&self, path: &Path, d: Digest) {
        if let Ok(meta) = fs::metadata(path).and_then(|m| {
            if m.is_file() {
                Ok(m)
            } else {
                Err(std::io::ErrorKind::Other.into())
            }
        }) {
            let rec = Record {
                stamp: FileStamp::of(&meta),
                digest: d,
                seen_ns: now_ns(),
                vouched: true,
            };
            let old = self
                .map
                .lock()
                .expect("stat cache poisoned")
                .insert(path.to_path_buf(), rec);
            // Re-recording the same file as it was is no change.
            if old.is_none_or(|o| o.stamp != rec.stamp || o.digest != rec.digest || !o.vouched) {
                self.dirty.store(true, Ordering::Release);
            }
        }
    }

    /// Forget everything recorded about `path`.
    pub fn forget(&self, path: &Path) {
        if self
            .map
            .lock()
            .expect("stat cache poisoned")
            .remove(path)
            .is_some()
        {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// The tree digest of a directory, in the same encoding as the store's tree manifests,
    /// hashing only the files whose stat changed.
    pub fn hash_dir(&self, path: &Path) -> Result<Digest, CacheError> {
        let mut scan = scan_tree(path, &mut |p, m| self.hash_with_meta(p, m))?;
        Ok(Digest::of_bytes(&encode_tree(&mut scan.entries)))
    }
}

//! [`StatCache`]: remembers which digest a file had at a given stat, so unchanged files are
//! not re-hashed.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FileStamp};
use crate::tree::{encode_tree, scan_tree};
use crate::{hash_file, CacheError, Digest};

/// Format tag of the JSON file earlier heddles saved; still read, then saved as [`MAGIC`].
const STAT_TAG: &str = "heddle/statcache/v1";

/// First bytes of the saved file (v2, binary): then the entry count (u64) and each entry as
/// [`encode`] writes it. Parsing the JSON of v1 (each digest in hex, each number in decimal)
/// was a tenth of a no-op run's instructions at 10,000 instances, for a file nobody reads.
const MAGIC: &[u8] = b"heddle/statcache/v2\n";

/// A file modified this close to the moment it was stat'ed may be modified again within the
/// same timestamp tick without its stat changing ("racy git"). Such records are not trusted;
/// the file is re-hashed (and re-recorded) until it is older than this. 2 s covers
/// filesystems with coarse (FAT-like) timestamps.
const RACY_NS: i128 = 2_000_000_000;

/// How many unused records a save checks on disk ([`StatCache::save`]) when the run used fewer:
/// a save checks as many as the run used, so it costs at most about the run's own stats, and a
/// run of one stage of a large project does not stat every other stage's outputs each time (on
/// a cold disk a stat can cost a read: 256 of them stay well under a second).
const PRUNE_CHECKS: usize = 256;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Record {
    stamp: FileStamp,
    digest: Digest,
    /// When the stat was taken (ns since the epoch); see [`RACY_NS`].
    seen_ns: i128,
    /// Recorded by `record` (the caller vouches for the content), so never racy.
    vouched: bool,
    /// Looked up or recorded since this cache was loaded (never saved): a record nobody used is
    /// checked against its file before it is saved again.
    #[serde(skip)]
    used: bool,
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
///
/// Keyed by the path's bytes: a `PathBuf` key hashes and compares component by component, which
/// at a million records cost seconds of a no-op's CPU (`benches/RESULTS.md`). heddle spells each
/// path one way (joined from the same root), and a path spelled another way is only a re-hash.
pub struct StatCache {
    path: PathBuf,
    map: Mutex<HashMap<OsString, Record>>,
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
        let bytes = fs::read(path).unwrap_or_default();
        let (map, current) = match decode(&bytes) {
            Some(map) => (Some(map), true),
            None => (decode_v1(&bytes), false),
        };
        // A missing, torn, foreign or v1 file is rewritten at the first save.
        let dirty = AtomicBool::new(!current);
        let map = map.unwrap_or_default();
        StatCache {
            path: path.to_path_buf(),
            map: Mutex::new(map),
            hashes: AtomicU64::new(0),
            dirty,
        }
    }

    /// Save atomically (temp file beside it, then rename). Concurrent savers: last one wins.
    ///
    /// Records this cache's users did not touch are checked first ([`prune`]): one whose file
    /// is gone or changed can never serve again and is dropped, so the file does not keep every
    /// output that ever existed (old matrix values, renamed stages).
    pub fn save(&self) -> Result<(), CacheError> {
        let mut map = self.map.lock().expect("stat cache poisoned");
        if prune(&mut map) > 0 {
            self.dirty.store(true, Ordering::Release);
        }
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let bytes = encode(&map);
        drop(map);
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
        if let Some(r) = self
            .map
            .lock()
            .expect("stat cache poisoned")
            .get_mut(path.as_os_str())
        {
            if r.stamp.unchanged(&stamp) && r.trusted() {
                r.used = true;
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
                    used: true,
                };
                self.map
                    .lock()
                    .expect("stat cache poisoned")
                    .insert(path.as_os_str().to_owned(), rec);
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
                used: true,
            };
            let old = self
                .map
                .lock()
                .expect("stat cache poisoned")
                .insert(path.as_os_str().to_owned(), rec);
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
            .remove(path.as_os_str())
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

/// Drop the records nobody used since the load that can never serve again: untrusted ones (a
/// racy record is re-hashed, never served) and those whose file is gone or no longer matches
/// the stamp. Checks at most [`PRUNE_CHECKS`] or as many records as were used, whichever is
/// more, so a save costs at most about what the run's own stats did; the map's order differs
/// from run to run, so later saves check others. A record that is not checked is kept: a run
/// of some stages keeps the other stages' records, and inputs outside the project keep theirs.
/// Returns how many were dropped.
fn prune(map: &mut HashMap<OsString, Record>) -> usize {
    let used = map.values().filter(|r| r.used).count();
    if used == map.len() {
        return 0;
    }
    let mut budget = PRUNE_CHECKS.max(used);
    let before = map.len();
    map.retain(|path, r| {
        if r.used || budget == 0 {
            return true;
        }
        if !r.trusted() {
            return false;
        }
        budget -= 1;
        // As `hash` stats: following a symlink to the file.
        let alive = fs::metadata(Path::new(path))
            .is_ok_and(|m| m.is_file() && r.stamp.unchanged(&FileStamp::of(&m)));
        // Checked and alive: not checked again by a later save of this cache.
        r.used = alive;
        alive
    });
    before - map.len()
}

/// The bytes of v2 ([`MAGIC`]). A path heddle cannot spell as bytes (not UTF-8, off unix) is
/// left out: it is hashed again next run.
fn encode(map: &HashMap<OsString, Record>) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + map.len() * 160);
    out.extend_from_slice(MAGIC);
    let count_at = out.len();
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut count = 0u64;
    for (path, r) in map {
        let Some(p) = path_bytes(path) else {
            continue;
        };
        let Ok(len) = u32::try_from(p.len()) else {
            continue;
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(p);
        let s = &r.stamp;
        for n in [s.dev, s.ino, s.size] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for n in [s.mtime_ns, s.ctime_ns, r.seen_ns] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(r.digest.as_bytes());
        out.push(u8::from(r.vouched));
        count += 1;
    }
    out[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
    out
}

/// The map saved as v2, or `None` for anything else (another format, or a torn file: every
/// entry must end within the file and the last exactly at its end).
fn decode(bytes: &[u8]) -> Option<HashMap<OsString, Record>> {
    let mut r = bytes.strip_prefix(MAGIC)?;
    let r = &mut r;
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let i128_of = |b: &[u8]| i128::from_le_bytes(b.try_into().expect("16 bytes"));
    let count = u64_of(take(r, 8)?);
    // Each entry takes at least 101 bytes: a count the file cannot hold is a torn file.
    let mut map = HashMap::with_capacity(usize::try_from(count).ok()?.min(bytes.len() / 101));
    for _ in 0..count {
        let len = u32::from_le_bytes(take(r, 4)?.try_into().expect("4 bytes")) as usize;
        let path = path_of(take(r, len)?)?;
        let stamp = FileStamp {
            dev: u64_of(take(r, 8)?),
            ino: u64_of(take(r, 8)?),
            size: u64_of(take(r, 8)?),
            mtime_ns: i128_of(take(r, 16)?),
            ctime_ns: i128_of(take(r, 16)?),
        };
        let seen_ns = i128_of(take(r, 16)?);
        let digest = Digest::from_bytes(take(r, 32)?.try_into().expect("32 bytes"));
        let vouched = match take(r, 1)?[0] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let rec = Record {
            stamp,
            digest,
            seen_ns,
            vouched,
            used: false,
        };
        map.insert(path, rec);
    }
    r.is_empty().then_some(map)
}

/// The first `n` bytes of `r`, which then starts after them.
fn take<'a>(r: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if r.len() < n {
        return None;
    }
    let (head, rest) = r.split_at(n);
    *r = rest;
    Some(head)
}

/// The map saved as v1 (JSON), as heddles before v2 wrote it.
fn decode_v1(bytes: &[u8]) -> Option<HashMap<OsString, Record>> {
    let saved = serde_json::from_slice::<SavedFile>(bytes).ok()?;
    (saved.format == STAT_TAG).then(|| {
        saved
            .entries
            .into_iter()
            .map(|(p, r)| (p.into_os_string(), r))
            .collect()
    })
}

#[cfg(unix)]
fn path_bytes(p: &OsStr) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    Some(p.as_bytes())
}

#[cfg(not(unix))]
fn path_bytes(p: &OsStr) -> Option<&[u8]> {
    p.to_str().map(str::as_bytes)
}

#[cfg(unix)]
fn path_of(b: &[u8]) -> Option<OsString> {
    use std::os::unix::ffi::OsStrExt;
    Some(OsStr::from_bytes(b).to_owned())
}

#[cfg(not(unix))]
fn path_of(b: &[u8]) -> Option<OsString> {
    std::str::from_utf8(b).ok().map(OsString::from)
}

//! `verify`, `du` and `gc`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::fsutil::{self, blob_mtime, read_dir_sorted, read_prefix, remove_any};
use crate::tree::{decode_tree, TREE_TAG};
use crate::{
    hash_file, ActionEntry, BadEntry, CacheError, Digest, DuReport, GcReport, Store, VerifyReport,
};

/// Without exclusive use of the store, temp files and unreferenced blobs younger than this
/// are left alone: another process may be about to rename or reference them.
const GRACE: Duration = Duration::from_secs(3600);

/// An action entry file and its parse result.
type ActionFile = (PathBuf, Result<ActionEntry, BadActionFile>);

/// Why an action entry file is not one; its text is [`BadEntry::BadAction`]'s reason.
#[derive(Debug, thiserror::Error)]
enum BadActionFile {
    #[error("{0}")]
    Read(std::io::Error),
    #[error("{0}")]
    Parse(serde_json::Error),
    #[error("entry key {key} does not match its file name")]
    WrongName { key: Digest },
}

fn age(meta: &fs::Metadata) -> Duration {
    #[cfg(unix)]
    let changed = {
        use std::os::unix::fs::MetadataExt;
        SystemTime::UNIX_EPOCH
            + Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec().max(0) as u32)
    };
    #[cfg(not(unix))]
    let changed = meta.created().unwrap_or(SystemTime::now());
    SystemTime::now()
        .duration_since(changed)
        .unwrap_or_default()
}

impl Store {
    /// Run `f` knowing whether this is the only open `Store` on this root in any process
    /// (the presence lock could be taken exclusively).
    fn with_exclusivity<T>(&self, f: impl FnOnce(bool) -> T) -> T {
        let presence = self.presence.lock().expect("presence poisoned");
        // Release our shared lock and try for an exclusive one; then return to shared.
        let _ = presence.unlock();
        let exclusive = presence.try_lock().is_ok();
        let out = f(exclusive);
        let _ = presence.unlock();
        let _ = presence.lock_shared();
        out
    }

    /// Every blob in `objects/` with its size; stray files are reported through `stray`.
    fn list_blobs(
        &self,
        stray: &mut dyn FnMut(PathBuf),
    ) -> Result<Vec<(Digest, PathBuf, fs::Metadata)>, CacheError> {
        let mut out = Vec::new();
        for shard in read_dir_sorted(&self.objects)? {
            if !shard.is_dir() {
                stray(shard);
                continue;
            }
            for p in read_dir_sorted(&shard)? {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let digest = name
                    .parse::<Digest>()
                    .ok()
                    .filter(|d| self.blob_path(d) == p);
                let meta = match fs::symlink_metadata(&p) {
                    Ok(m) => m,
                    Err(_) => continue,
                };
                match digest {
                    Some(d) if meta.is_file() => out.push((d, p, meta)),
                    _ => stray(p),
                }
            }
        }
        Ok(out)
    }

    /// Every action entry file with its parse result.
    fn list_actions(&self) -> Result<Vec<ActionFile>, CacheError> {
        let mut out = Vec::new();
        for shard in read_dir_sorted(&self.actions)? {
            if !shard.is_dir() {
                continue;
            }
            for p in read_dir_sorted(&shard)? {
                let parsed = fs::read(&p)
                    .map_err(BadActionFile::Read)
                    .and_then(|b| {
                        serde_json::from_slice::<ActionEntry>(&b).map_err(BadActionFile::Parse)
                    })
                    .and_then(|e| {
                        if self.action_path(&e.key) == p {
                            Ok(e)
                        } else {
                            Err(BadActionFile::WrongName { key: e.key })
                        }
                    });
                out.push((p, parsed));
            }
        }
        Ok(out)
    }

    /// Every file in `quarantine/` with its metadata (one removed meanwhile is skipped).
    fn list_quarantine(&self) -> Result<Vec<(PathBuf, fs::Metadata)>, CacheError> {
        Ok(read_dir_sorted(&self.quarantine_dir())?
            .into_iter()
            .filter_map(|p| fs::symlink_metadata(&p).ok().map(|m| (p, m)))
            .collect())
    }

    /// Re-hash every blob and check every action entry. Everything bad is reported and
    /// removed, so it becomes a miss; a blob that does not match its name is moved to
    /// `quarantine/` rather than deleted; leftover temp files are removed. What is in
    /// `quarantine/` is reported and left for `gc`. A store that only ever saw killed
    /// processes (no power loss) verifies clean.
    pub fn verify(&self) -> Result<VerifyReport, CacheError> {
        let mut report = VerifyReport::default();
        for (p, meta) in self.list_quarantine()? {
            report.quarantined_bytes += meta.len();
            report.quarantined.push(p);
        }
        self.verify_tmp(&mut report)?;
        let mut good = self.verify_blobs(&mut report)?;
        report.quarantined.sort();
        let trees = self.verify_trees(&mut good, &mut report)?;
        self.verify_actions(&good, &trees, &mut report)?;
        Ok(report)
    }

    /// Remove leftover temp files: all of them with the store to ourselves, else the old ones.
    fn verify_tmp(&self, report: &mut VerifyReport) -> Result<(), CacheError> {
        self.with_exclusivity(|exclusive| -> Result<(), CacheError> {
            for p in read_dir_sorted(&self.tmp)? {
                let old = fs::symlink_metadata(&p)
                    .map(|m| age(&m) > GRACE)
                    .unwrap_or(false);
                if (exclusive || old) && remove_any(&p).is_ok() {
                    report.tmp_removed.push(p);
                }
            }
            Ok(())
        })
    }

    /// Remove stray files and blobs that do not hash to their name; the blobs that do.
    fn verify_blobs(&self, report: &mut VerifyReport) -> Result<HashSet<Digest>, CacheError> {
        let mut strays = Vec::new();
        let blobs = self.list_blobs(&mut |p| strays.push(p))?;
        for p in strays {
            let _ = remove_any(&p);
            report.bad.push(BadEntry::StrayObject { path: p });
        }
        let mut good: HashSet<Digest> = HashSet::with_capacity(blobs.len());
        for (d, p, len, actual) in hash_blobs(&blobs) {
            report.blobs_checked += 1;
            report.bytes_checked += len;
            match actual {
                Ok(a) if a == d => {
                    if fs::metadata(&p).ok().and_then(|m| m.modified().ok()) != Some(blob_mtime()) {
                        let _ = fsutil::reset_blob_mtime(&p);
                    }
                    good.insert(d);
                }
                Ok(a) => {
                    let to = match self.quarantine(&d) {
                        Ok(to) => to,
                        // Moved or removed under us (a concurrent gc or run): nothing to keep.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(CacheError::io("quarantine", &p)(e)),
                    };
                    report.quarantined_bytes += len;
                    report.quarantined.push(to.clone());
                    report.bad.push(BadEntry::BlobMismatch {
                        digest: d,
                        actual: a,
                        to,
                    });
                }
                // Removed under us (a concurrent gc): not a fault.
                Err(CacheError::Io { ref source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(good)
    }

    /// A good blob that looks like a manifest must decode; returns each tree's member blobs.
    fn verify_trees(
        &self,
        good: &mut HashSet<Digest>,
        report: &mut VerifyReport,
    ) -> Result<HashMap<Digest, Vec<Digest>>, CacheError> {
        let mut trees: HashMap<Digest, Vec<Digest>> = HashMap::new();
        for d in good.clone() {
            let p = self.blob_path(&d);
            let Ok(head) = read_prefix(&p, TREE_TAG.len() + 1) else {
                continue;
            };
            if head != format!("{TREE_TAG}\n").as_bytes() {
                continue;
            }
            let bytes = fs::read(&p).map_err(CacheError::io("read", &p))?;
            match decode_tree(d, &bytes) {
                Ok(entries) => {
                    let members = entries
                        .iter()
                        .filter_map(|e| match e {
                            crate::TreeEntry::File { digest, .. } => Some(*digest),
                            _ => None,
                        })
                        .collect();
                    trees.insert(d, members);
                }
                Err(e) => {
                    let _ = remove_any(&p);
                    good.remove(&d);
                    report.bad.push(BadEntry::BadTree {
                        digest: d,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(trees)
    }

    /// Remove entries that do not parse or name a missing blob; restore lost family keys.
    fn verify_actions(
        &self,
        good: &HashSet<Digest>,
        trees: &HashMap<Digest, Vec<Digest>>,
        report: &mut VerifyReport,
    ) -> Result<(), CacheError> {
        let mut family_keys: HashMap<String, HashSet<Digest>> = HashMap::new();
        for (p, parsed) in self.list_actions()? {
            report.actions_checked += 1;
            let entry = match parsed {
                Ok(e) => e,
                Err(bad) => {
                    let _ = remove_any(&p);
                    let reason = bad.to_string();
                    report.bad.push(BadEntry::BadAction { path: p, reason });
                    continue;
                }
            };
            if let Some(digest) = self.missing_blob(&entry, good, trees) {
                let _ = remove_any(&p);
                report.bad.push(BadEntry::MissingBlob {
                    key: entry.key,
                    digest,
                });
                continue;
            }
            let known = family_keys
                .entry(entry.family.clone())
                .or_insert_with(|| self.family_index(&entry.family).unwrap_or_default());
            if !known.contains(&entry.key) {
                self.append_family(&entry.family, &entry.key)?;
                known.insert(entry.key);
                report.family_keys_restored += 1;
            }
        }
        Ok(())
    }

    /// The first blob `entry` references that is not there. A blob not seen by the scan but
    /// present now was written by a concurrent process after the scan: not missing.
    fn missing_blob(
        &self,
        entry: &ActionEntry,
        good: &HashSet<Digest>,
        trees: &HashMap<Digest, Vec<Digest>>,
    ) -> Option<Digest> {
        let present = |d: &Digest| good.contains(d) || self.has_blob(d);
        for out in entry.outputs.values() {
            let d = out.digest();
            if !present(&d) {
                return Some(d);
            }
            if let crate::OutputEntry::Dir { .. } = out {
                let members = match trees.get(&d) {
                    Some(m) => m.clone(),
                    None => {
                        let mut all = BTreeSet::new();
                        match self.output_blobs(out, &mut all) {
                            Ok(()) => all.into_iter().collect(),
                            Err(_) => vec![d],
                        }
                    }
                };
                if let Some(m) = members.iter().find(|m| !present(m)) {
                    return Some(*m);
                }
            }
        }
        None
    }

    fn family_index(&self, family: &str) -> Result<HashSet<Digest>, CacheError> {
        Ok(self
            .actions_in_family(family)?
            .into_iter()
            .map(|e| e.key)
            .collect())
    }

    /// Bytes and counts of blobs and actions, and per family.
    pub fn du(&self) -> Result<DuReport, CacheError> {
        let mut r = DuReport::default();
        let mut sizes: HashMap<Digest, u64> = HashMap::new();
        for (d, _, meta) in self.list_blobs(&mut |_| {})? {
            r.blob_count += 1;
            r.blob_bytes += meta.len();
            sizes.insert(d, meta.len());
        }
        // Each blob counts once: for the one family whose entries reference it, else as shared
        // (an output two stages produce alike is stored once), else as unreferenced.
        let mut owner: HashMap<Digest, Option<String>> = HashMap::new();
        for (p, parsed) in self.list_actions()? {
            r.action_count += 1;
            r.action_bytes += fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            let Ok(e) = parsed else { continue };
            r.families.entry(e.family.clone()).or_default().actions += 1;
            let mut refs = BTreeSet::new();
            for out in e.outputs.values() {
                let _ = self.output_blobs(out, &mut refs);
            }
            for d in refs {
                owner
                    .entry(d)
                    .and_modify(|o| {
                        if o.as_deref() != Some(e.family.as_str()) {
                            *o = None;
                        }
                    })
                    .or_insert_with(|| Some(e.family.clone()));
            }
        }
        for (d, size) in &sizes {
            match owner.get(d) {
                Some(Some(family)) => {
                    r.families.entry(family.clone()).or_default().output_bytes += size;
                }
                Some(None) => r.shared_bytes += size,
                None => r.unreferenced_bytes += size,
            }
        }
        for (_, meta) in self.list_quarantine()? {
            r.quarantined_count += 1;
            r.quarantined_bytes += meta.len();
        }
        Ok(r)
    }

    /// Keep every action in `keep`; evict the others cheapest-to-recompute-per-byte first
    /// (`duration_ms / output bytes` ascending) until the blobs still referenced fit in
    /// `max_bytes` (`None`: evict all not kept); then remove every blob no remaining action
    /// references. Unparsable entries are removed too, and so is everything in `quarantine/`.
    /// Without exclusive use of the store, unreferenced blobs and quarantined files younger
    /// than an hour are spared.
    pub fn gc(
        &self,
        keep: &HashSet<Digest>,
        max_bytes: Option<u64>,
    ) -> Result<GcReport, CacheError> {
        self.with_exclusivity(|exclusive| self.gc_inner(keep, max_bytes, exclusive))
    }

    fn gc_inner(
        &self,
        keep: &HashSet<Digest>,
        max_bytes: Option<u64>,
        exclusive: bool,
    ) -> Result<GcReport, CacheError> {
        let mut report = GcReport {
            stale_scratch_removed: crate::scratch::remove_stale(&self.root().join("scratch"))
                .removed,
            ..GcReport::default()
        };
        self.gc_quarantine(exclusive, &mut report)?;
        report.stale_locks_removed = self.gc_locks();
        let blobs = self.list_blobs(&mut |_| {})?;
        let sizes: HashMap<Digest, u64> = blobs.iter().map(|(d, _, m)| (*d, m.len())).collect();
        let actions = self.gc_actions()?;
        let mut refcount: HashMap<Digest, u32> = HashMap::new();
        for (_, _, refs) in &actions {
            for d in refs {
                *refcount.entry(*d).or_default() += 1;
            }
        }
        let live: u64 = refcount
            .keys()
            .map(|d| sizes.get(d).copied().unwrap_or(0))
            .sum();
        let order = eviction_order(&actions, keep);
        let eviction = Eviction {
            max_bytes,
            sizes: &sizes,
            live,
        };
        eviction.run(&actions, order, &mut refcount, &mut report)?;
        for (d, p, meta) in &blobs {
            if refcount.contains_key(d) {
                report.bytes_remaining += meta.len();
                continue;
            }
            if !exclusive && age(meta) < GRACE {
                report.blobs_spared += 1;
                report.bytes_remaining += meta.len();
                continue;
            }
            if remove_any(p).is_ok() {
                report.blobs_removed += 1;
                report.bytes_freed += meta.len();
            }
        }
        Ok(report)
    }

    /// Remove what is in `quarantine/`: all of it with the store to ourselves, else what was
    /// quarantined over an hour ago (a rename sets the ctime `age` reads).
    fn gc_quarantine(&self, exclusive: bool, report: &mut GcReport) -> Result<(), CacheError> {
        for (p, meta) in self.list_quarantine()? {
            if !exclusive && age(&meta) < GRACE {
                report.quarantine_spared += 1;
                continue;
            }
            if remove_any(&p).is_ok() {
                report.quarantine_removed += 1;
                report.quarantine_bytes_freed += meta.len();
            }
        }
        Ok(())
    }

    /// Remove the per-key lock files nobody holds, each taken and deleted as a holder does on
    /// release (`lock.rs`), so one held meanwhile is left alone. Returns how many went.
    #[cfg(unix)]
    fn gc_locks(&self) -> u64 {
        let Ok(dir) = std::fs::read_dir(&self.locks) else {
            return 0;
        };
        let mut removed = 0;
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(key) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|hex| hex.parse::<Digest>().ok())
            else {
                continue; // `store.lock`, or not a key's lock
            };
            if let Ok(Some(lock)) = self.try_lock_key(&key) {
                drop(lock);
                removed += 1;
            }
        }
        removed
    }

    #[cfg(not(unix))]
    fn gc_locks(&self) -> u64 {
        0
    }

    /// Every action that parses, with the blobs it references; the others are removed.
    fn gc_actions(&self) -> Result<Vec<GcAction>, CacheError> {
        let mut actions = Vec::new();
        for (p, parsed) in self.list_actions()? {
            let Ok(entry) = parsed else {
                let _ = remove_any(&p);
                continue;
            };
            let mut refs = BTreeSet::new();
            for out in entry.outputs.values() {
                // A tree whose manifest is gone still pins its own digest (which is missing).
                let _ = self.output_blobs(out, &mut refs);
            }
            actions.push((p, entry, refs));
        }
        Ok(actions)
    }
}

/// An action entry's file, the entry, and every blob it references.
type GcAction = (PathBuf, ActionEntry, BTreeSet<Digest>);

/// The actions not kept, cheapest to recompute per byte first (then oldest first).
fn eviction_order(actions: &[GcAction], keep: &HashSet<Digest>) -> Vec<usize> {
    let mut candidates: Vec<usize> = (0..actions.len())
        .filter(|&i| !keep.contains(&actions[i].1.key))
        .collect();
    // Cost per byte; an action with no output bytes frees nothing and goes last.
    let cost = |e: &ActionEntry| -> f64 {
        match e.output_bytes() {
            0 => f64::INFINITY,
            b => e.duration_ms as f64 / b as f64,
        }
    };
    candidates.sort_by(|&a, &b| {
        let (ea, eb) = (&actions[a].1, &actions[b].1);
        cost(ea)
            .total_cmp(&cost(eb))
            .then(ea.created_unix_ms.cmp(&eb.created_unix_ms))
    });
    candidates
}

/// Evicting actions until the referenced blobs fit in `max_bytes`.
struct Eviction<'a> {
    max_bytes: Option<u64>,
    sizes: &'a HashMap<Digest, u64>,
    /// Bytes of the blobs still referenced.
    live: u64,
}

impl Eviction<'_> {
    fn run(
        mut self,
        actions: &[GcAction],
        order: Vec<usize>,
        refcount: &mut HashMap<Digest, u32>,
        report: &mut GcReport,
    ) -> Result<(), CacheError> {
        for i in order {
            if self.max_bytes.is_some_and(|m| self.live <= m) {
                break;
            }
            let (p, entry, refs) = &actions[i];
            remove_any(p).map_err(CacheError::io("remove", p))?;
            report.evicted.push(entry.key);
            for d in refs {
                let c = refcount.get_mut(d).expect("counted above");
                *c -= 1;
                if *c == 0 {
                    refcount.remove(d);
                    self.live -= self.sizes.get(d).copied().unwrap_or(0);
                }
            }
        }
        Ok(())
    }
}

/// Hash every blob, on every core (verify is bound by sha256): (name, path, size, hash).
fn hash_blobs(
    blobs: &[(Digest, PathBuf, fs::Metadata)],
) -> Vec<(Digest, PathBuf, u64, Result<Digest, CacheError>)> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    let chunk = blobs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = blobs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(d, p, m)| (*d, p.clone(), m.len(), hash_file(p)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("verify thread panicked"))
            .collect()
    })
}

//! The imports journal: how a blob imported from a remote cache is kept safe from a power loss
//! without an fsync of its bytes.
//!
//! An imported blob is a copy of a blob the remote holds durably, and it was hashed as it
//! streamed in. A killed process loses nothing (the page cache survives it); only a power loss
//! or kernel crash can leave the file torn or zero-filled while its metadata (size, sentinel
//! mtime) survived, and a blob is served on a hit trusted on its stat
//! ([`crate::integrity`]). Fsyncing a large blob before its action entry is recorded costs
//! more than the download (benches/RESULTS.md, M11), and an fsync per small blob was most of
//! a cold no-op against a fast remote; the journal closes the same hole for a share of one
//! small `fdatasync`:
//!
//! - each [`Store`] that imports a blob (Linux only) keeps one journal,
//!   `imports/<boot id>-<pid>-<n>-<t>.unsynced`, locked (`flock`) for as long as it lives, and
//!   appends the blob's digest to it, durably, *before* the blob is renamed into place;
//! - [`Store::open`] looks at the journals of others: one written before the last boot (the
//!   machine went down since, maybe by a crash) has each blob it lists re-hashed, and a torn
//!   one quarantined, so an entry naming it reads as a miss and the remote is asked again; one
//!   from this boot whose owner is gone has its blobs fsynced in a background thread (the page
//!   cache still holds the verified bytes; many of them, one `syncfs`) and is then removed; a
//!   live owner's is left alone.
//!
//! The boot id (`/proc/sys/kernel/random/boot_id`) is what tells a reboot apart from a process
//! that merely exited: without it (not Linux) imports are fsynced by the group commit as before.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use super::Store;
use crate::fsutil::{self, unique_name, TempPath};
use crate::{hash_file, CacheError, Digest};

const SUFFIX: &str = ".unsynced";
/// A journal being created (see [`ImportsJournal::create`]); it never lists a digest.
const NEW: &str = ".new";
/// Age after which a `.new` journal is taken for a leftover.
const NEW_STALE: std::time::Duration = std::time::Duration::from_secs(60);

/// This boot's id, read once; `None` where the platform has none (then nothing is journaled).
pub(crate) fn boot_id() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        BOOT_ID
            .get_or_init(|| {
                fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .clone()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// A store's own journal, created on its first journaled import.
pub(crate) struct ImportsJournal {
    dir: PathBuf,
    boot_id: Option<String>,
    own: Mutex<Own>,
    /// Signalled when an `fdatasync` of the journal ends.
    synced: Condvar,
}

/// The journal file and how far it is durable. Records are appended under the mutex; the
/// `fdatasync` runs outside it, so records appended meanwhile wait for the next one and many
/// concurrent imports share one (a group commit of the journal).
#[derive(Default)]
struct Own {
    /// The open, exclusively locked journal file (the lock goes with the descriptor).
    file: Option<(PathBuf, Arc<File>)>,
    /// Records appended, and records known durable.
    appended: u64,
    durable: u64,
    /// Whether some thread is in `fdatasync` now.
    syncing: bool,
    /// An `fdatasync` failed: the kernel may have dropped the dirty pages, so no later one
    /// can vouch for what was appended before. Every record from then on fails.
    broken: bool,
}

impl ImportsJournal {
    pub(crate) fn new(root: &Path, boot_id: Option<String>) -> ImportsJournal {
        ImportsJournal {
            dir: root.join("imports"),
            boot_id,
            own: Mutex::new(Own::default()),
            synced: Condvar::new(),
        }
    }

    /// Whether imports can be journaled instead of fsynced (a boot id to tell reboots by).
    pub(crate) fn enabled(&self) -> bool {
        self.boot_id.is_some()
    }

    /// Append `digest` to this store's journal and make it durable (`fdatasync`, plus the
    /// folder once when the journal is created). Called before the blob is renamed into place,
    /// so a blob that reached the store unsynced is always listed. Concurrent callers share
    /// `fdatasync`s: one started after a record was appended covers it, so a cold no-op that
    /// imports hundreds of blobs at once waits for a few journal flushes, not one per blob.
    pub(crate) fn record(&self, digest: &Digest) -> Result<(), CacheError> {
        let mut own = self.own.lock().expect("imports journal poisoned");
        if own.broken {
            return Err(self.broken(&own));
        }
        if own.file.is_none() {
            own.file = Some(self.create()?);
        }
        let (path, file) = own.file.clone().expect("created above");
        if let Err(e) = (&*file).write_all(format!("{digest}\n").as_bytes()) {
            // A partial line would swallow the next record: append nothing more.
            own.broken = true;
            return Err(CacheError::io("append to", &path)(e));
        }
        own.appended += 1;
        let mine = own.appended;
        loop {
            if own.broken {
                return Err(self.broken(&own));
            }
            if own.durable >= mine {
                return Ok(());
            }
            if own.syncing {
                own = self.synced.wait(own).expect("imports journal poisoned");
                continue;
            }
            // Lead a flush of everything appended so far, without holding the lock.
            own.syncing = true;
            let upto = own.appended;
            let (path, file) = own.file.clone().expect("created above");
            drop(own);
            let result = file.sync_data();
            own = self.own.lock().expect("imports journal poisoned");
            own.syncing = false;
            match &result {
                Ok(()) => own.durable = own.durable.max(upto),
                Err(_) => own.broken = true,
            }
            self.synced.notify_all();
            result.map_err(CacheError::io("fsync", &path))?;
        }
    }

    fn broken(&self, own: &Own) -> CacheError {
        let path = own
            .file
            .as_ref()
            .map_or(self.dir.clone(), |(p, _)| p.clone());
        CacheError::io("fsync", &path)(io::Error::other(
            "an earlier write or fsync of this imports journal failed",
        ))
    }

    /// Create the journal under a name no other store looks at, lock it, then rename it to
    /// its real name: a store opening meanwhile never finds it unlocked (and takes it for a
    /// dead owner's).
    fn create(&self) -> Result<(PathBuf, Arc<File>), CacheError> {
        let boot = self.boot_id.as_deref().unwrap_or("none");
        fsutil::create_dir_all(&self.dir)?;
        let name = format!("{boot}-{}{SUFFIX}", unique_name(""));
        let path = self.dir.join(&name);
        let new = TempPath::new(self.dir.join(format!("{name}{NEW}")));
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(new.path())
            .map_err(CacheError::io("create", new.path()))?;
        file.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => CacheError::io("lock", new.path())(e),
            TryLockError::WouldBlock => CacheError::io("lock", new.path())(io::Error::other(
                "a journal just created is locked by someone else",
            )),
        })?;
        fs::rename(new.path(), &path).map_err(CacheError::io("rename into", &path))?;
        new.keep();
        // The journal's name must survive a power loss too, or the blobs it lists would not be
        // checked. (On ext4 this commit also carries `imports/` itself, made just before.)
        fsutil::fsync_path(&self.dir).map_err(CacheError::io("fsync", &self.dir))?;
        Ok((path, Arc::new(file)))
    }

    #[cfg(test)]
    pub(crate) fn own_path(&self) -> Option<PathBuf> {
        let own = self.own.lock().expect("imports journal poisoned");
        own.file.as_ref().map(|(p, _)| p.clone())
    }
}

/// Another store's journal, locked by this one.
struct Foreign {
    path: PathBuf,
    file: File,
    digests: BTreeSet<Digest>,
}

impl Store {
    /// Deal with the journals other stores left (see the module docs): re-hash the blobs of
    /// one from an earlier boot now, before anything is served; fsync the blobs of one from
    /// this boot whose owner is gone in the background; leave a live owner's alone.
    pub(super) fn recover_imports(&self) -> Result<(), CacheError> {
        let dir = &self.imports.dir;
        let names = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(CacheError::io("read", dir)(e)),
        };
        let this_boot = self.imports.boot_id.as_deref().map(|b| format!("{b}-"));
        let mut same_boot = Vec::new();
        for entry in names {
            let entry = entry.map_err(CacheError::io("read", dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.ends_with(NEW) {
                // Left by a store killed while creating its journal (before any digest). A
                // young one may be a live store's between its creation and its lock.
                let stale = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > NEW_STALE));
                if stale {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            if !name.ends_with(SUFFIX) {
                continue;
            }
            let ours = this_boot.as_deref().is_some_and(|b| name.starts_with(b));
            // Another boot's journal can only be locked by a store recovering it right now:
            // wait for it, so nothing is served before the blobs are checked. Without a boot id
            // a lock may be a live owner's, so that journal is left for later.
            let wait = !ours && this_boot.is_some();
            let Some(journal) = lock_foreign(&path, wait)? else {
                continue;
            };
            if ours {
                same_boot.push(journal);
            } else {
                self.recheck_after_reboot(journal)?;
            }
        }
        if !same_boot.is_empty() {
            let root = self.root.clone();
            let work: Vec<(Foreign, Vec<PathBuf>)> = same_boot
                .into_iter()
                .map(|j| {
                    let blobs = j.digests.iter().map(|d| self.blob_path(d)).collect();
                    (j, blobs)
                })
                .collect();
            // A failure to spawn leaves the journals for the next open.
            let _ = std::thread::Builder::new()
                .name("heddle-imports-sync".into())
                .spawn(move || {
                    for (journal, blobs) in work {
                        sync_and_forget(journal, &root, &blobs);
                    }
                });
        }
        Ok(())
    }

    /// After a reboot: every listed blob is hashed again; one that does not match its name
    /// (torn by the power loss) is quarantined, so an entry naming it reads as a miss. The
    /// journal goes once all of them are settled; on an error it stays for the next open.
    fn recheck_after_reboot(&self, journal: Foreign) -> Result<(), CacheError> {
        for d in &journal.digests {
            let p = self.blob_path(d);
            match fs::symlink_metadata(&p) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CacheError::io("stat", &p)(e)),
                Ok(_) => {}
            }
            if matches!(hash_file(&p), Ok(actual) if actual == *d) {
                self.mark_verified(d);
                continue;
            }
            // Unreadable counts as torn: it cannot be vouched for.
            match self.quarantine(d) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(CacheError::io("quarantine", &p)(e)),
            }
        }
        fs::remove_file(&journal.path).map_err(CacheError::io("remove", &journal.path))?;
        drop(journal.file);
        Ok(())
    }
}

/// Open and lock a journal another store wrote, and read it; `None` when it is not ours to
/// handle: locked by a live store (and `wait` is false), or removed by whoever held it.
fn lock_foreign(path: &Path, wait: bool) -> Result<Option<Foreign>, CacheError> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CacheError::io("open", path)(e)),
    };
    if wait {
        file.lock().map_err(CacheError::io("lock", path))?;
    } else {
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(CacheError::io("lock", path)(e)),
        }
    }
    // The holder we waited for may have finished with it and removed it.
    let locked = file.metadata().map_err(CacheError::io("stat", path))?;
    match fs::symlink_metadata(path) {
        Ok(now) if fsutil::same_inode(&now, &locked) => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CacheError::io("stat", path)(e)),
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(CacheError::io("read", path))?;
    // A line torn by a crash names no blob that was renamed into place: its fdatasync had not
    // returned. Skip whatever does not parse.
    let digests = text.lines().filter_map(|l| l.parse().ok()).collect();
    Ok(Some(Foreign {
        path: path.to_path_buf(),
        file,
        digests,
    }))
}

/// Same boot, owner gone: fsync each listed blob (cheap once the kernel has written it back)
/// and its shard folder, then remove the journal, still holding its lock. Any failure other
/// than a blob that is gone keeps the journal, so a later open tries again; nothing panics (a
/// test's temp folder may vanish under this thread).
fn sync_and_forget(journal: Foreign, root: &Path, blobs: &[PathBuf]) {
    // A run's worth of small imports is one `syncfs`, not an fsync per blob and folder.
    #[cfg(target_os = "linux")]
    if blobs.len() > super::put::SYNCFS_THRESHOLD {
        if fsutil::syncfs(root).is_ok() {
            let _ = fs::remove_file(&journal.path);
        }
        return;
    }
    let _ = root;
    let mut dirs = BTreeSet::new();
    for p in blobs {
        match fsutil::fsync_path(p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => return,
        }
        if let Some(d) = p.parent() {
            dirs.insert(d.to_path_buf());
        }
    }
    for d in dirs {
        if fsutil::fsync_path(&d).is_err() {
            return;
        }
    }
    let _ = fs::remove_file(&journal.path);
    drop(journal.file);
}

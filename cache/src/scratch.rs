//! Per-run scratch folders under `<root>/scratch/`, and the removal of those whose run is gone.
//!
//! A run's sandboxes live in `scratch/run-<pid>-<n>-<clock>/`, which holds a `lock` file that the run
//! keeps locked (`File::try_lock`: `flock` on unix, `LockFileEx` on Windows) for as long as it
//! lives. The OS drops the lock when the process ends however it ends (`kill -9`, SIGHUP, a
//! power cut before reboot), so "the lock can be taken" means exactly "the run is dead", with
//! no pid to be reused and no clock to trust. [`remove_stale`] (at the start of every run and in
//! `gc`) takes each folder's lock without waiting: a live run's folder is skipped, a dead run's
//! is removed.
//!
//! The creation order closes the race with a concurrent remover: the folder is made, then its
//! `lock` file is created and locked, then the folder is checked to still be there. A remover
//! that got in between (it found the lock file unlocked and removed the folder) makes the
//! creator's lock fail or the check fail, and the creator starts over with a new folder. A
//! folder with no `lock` file is one being created, or one whose creator died within those
//! microseconds: it is removed only once it is an hour old.
//!
//! Sandboxes of heddle versions before this layout (`scratch/sandbox-*`, no lock) are removed
//! once a day old: no run lasts that long without its stage writing into its sandbox.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use crate::remove_tree::remove_tree;
use crate::CacheError;

/// A folder with no lock file this old is a creator's leftover, not a creation under way.
const UNLOCKED_GRACE: Duration = Duration::from_secs(3600);

/// A sandbox of an older heddle (no lock) this old is a dead run's.
const LEGACY_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How many times creation starts over after losing a race with a remover.
const ATTEMPTS: usize = 16;

/// This run's scratch folder, locked while the value lives.
#[derive(Debug)]
pub struct RunScratch {
    dir: PathBuf,
    lock: Option<File>,
}

impl RunScratch {
    /// Create and lock a new run folder in `scratch` (created if missing).
    pub fn create(scratch: &Path) -> Result<RunScratch, CacheError> {
        fs::create_dir_all(scratch).map_err(CacheError::io("create directory", scratch))?;
        for _ in 0..ATTEMPTS {
            let dir = scratch.join(crate::fsutil::unique_name("run-"));
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(CacheError::io("create directory", &dir)(e)),
            }
            let lock_path = dir.join("lock");
            let file = match OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock_path)
            {
                Ok(f) => f,
                // A remover took the folder away already.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CacheError::io("create", &lock_path)(e)),
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => return Err(CacheError::io("lock", &lock_path)(e)),
            }
            if lock_path.exists() {
                return Ok(RunScratch {
                    dir,
                    lock: Some(file),
                });
            }
        }
        Err(CacheError::io("create a run folder in", scratch)(
            std::io::Error::other("removed by a concurrent cleanup every time"),
        ))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Remove the folder (the end of the run).
    pub fn remove(mut self) {
        remove_locked(&self.dir, self.lock.take());
    }
}

impl Drop for RunScratch {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            remove_locked(&self.dir, Some(lock));
        }
    }
}

/// What [`remove_stale`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StaleReport {
    /// Folders of dead runs (and old lock-less sandboxes) removed.
    pub removed: u64,
    /// Folders of live runs left alone.
    pub live: u64,
}

/// Remove the scratch folders of runs that are no longer alive. Never fails: what cannot be
/// removed now is tried again next time.
pub fn remove_stale(scratch: &Path) -> StaleReport {
    let mut report = StaleReport::default();
    let Ok(entries) = fs::read_dir(scratch) else {
        return report;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let path = e.path();
        if name.starts_with("run-") {
            match try_lock_dead(&path) {
                Some(Ok(lock)) => {
                    remove_locked(&path, Some(lock));
                    report.removed += 1;
                }
                Some(Err(())) => report.live += 1,
                None if older_than(&path, UNLOCKED_GRACE) => {
                    let _ = remove_tree(&path);
                    report.removed += 1;
                }
                None => report.live += 1,
            }
        } else if name.starts_with("sandbox-") && older_than(&path, LEGACY_GRACE) {
            let _ = remove_tree(&path);
            report.removed += 1;
        }
    }
    report
}

/// `Some(Ok(lock))`: the run is dead and the caller holds its lock; `Some(Err)`: alive;
/// `None`: no lock file.
fn try_lock_dead(dir: &Path) -> Option<Result<File, ()>> {
    let file = OpenOptions::new().write(true).open(dir.join("lock")).ok()?;
    Some(match file.try_lock() {
        Ok(()) => Ok(file),
        Err(_) => Err(()),
    })
}

/// Remove a run folder whose lock is held. On Windows an open file cannot be removed, so the
/// lock file goes last, after its handle is closed; nobody locks it again, since a creator only
/// locks the file of a folder it has just made. When something in the folder cannot be removed
/// (a stage's immutable file), the lock file stays: a folder with an unlocked lock file is a
/// dead run's, which the next sweep removes at once, while one without could be a run still
/// being created, which a sweep spares for [`UNLOCKED_GRACE`].
fn remove_locked(dir: &Path, lock: Option<File>) {
    let mut emptied = true;
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name() != "lock" && remove_tree(&e.path()).is_err() {
                emptied = false;
            }
        }
    }
    drop(lock);
    if emptied {
        let _ = remove_tree(dir);
    }
}

fn older_than(path: &Path, age: Duration) -> bool {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() > age)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn live_and_young_folders_are_kept() {
        let root = tempfile::tempdir().unwrap();
        let scratch = root.path().join("scratch");
        let live = RunScratch::create(&scratch).unwrap();
        fs::create_dir_all(live.path().join("sandbox-a/work")).unwrap();
        // A lock-less young folder (a creation under way) and a young legacy sandbox.
        fs::create_dir_all(scratch.join("run-young")).unwrap();
        fs::create_dir_all(scratch.join("sandbox-legacy")).unwrap();
        let r = remove_stale(&scratch);
        assert_eq!(
            r,
            StaleReport {
                removed: 0,
                live: 2
            }
        );
        assert!(live.path().join("sandbox-a").exists());
        assert!(scratch.join("sandbox-legacy").exists());
        let live_dir = live.path().to_path_buf();
        live.remove();
        assert!(!live_dir.exists());
    }

    #[test]
    fn a_folder_whose_lock_is_free_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let scratch = root.path().join("scratch");
        let live = RunScratch::create(&scratch).unwrap();
        // A dead run's folder: a lock file nobody holds, and a read-only tree in it.
        let dead = scratch.join("run-dead");
        fs::create_dir_all(dead.join("sandbox-x/work/ro")).unwrap();
        fs::write(dead.join("lock"), "").unwrap();
        let mut perm = fs::metadata(dead.join("sandbox-x/work/ro"))
            .unwrap()
            .permissions();
        perm.set_readonly(true);
        fs::set_permissions(dead.join("sandbox-x/work/ro"), perm).unwrap();
        let r = remove_stale(&scratch);
        assert_eq!(
            r,
            StaleReport {
                removed: 1,
                live: 1
            }
        );
        assert_eq!(
            names(&scratch),
            [live.path().file_name().unwrap().to_string_lossy()]
        );
        drop(live);
        assert!(
            names(&scratch).is_empty(),
            "a run's folder goes when it ends"
        );
    }
}

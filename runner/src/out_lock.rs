//! One run at a time per pipeline's `out/` folder, across processes.
//!
//! Two runs of one pipeline with different `--set` values would otherwise materialise their
//! instances into the same `out/<pipeline>/` folders at once and leave a mix of both. Each
//! instance's materialisation is atomic (built beside its destination and renamed over it),
//! but a run is many instances; so a run holds an OS file lock
//! (`<root>/.heddle/locks/<pipeline>.out.lock`, `flock`/`LockFileEx`) from before its first
//! instance until its last output is in place. A second run waits for it, saying whom it
//! waits for, then runs against the finished first run's cache: `out/` ends exactly as the
//! later run made it and each run record names what that run did. The OS drops the lock when
//! its holder dies, so a killed run never blocks the next.
//!
//! Per-run staging folders were the alternative; they would double the inodes a run writes and
//! still need a lock for the final swap, for a case (two concurrent runs of one pipeline in
//! one checkout) that is rare.

use std::fs::{File, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::units::holder_file;

/// The held lock; released on drop (or when the process dies).
#[derive(Debug)]
pub struct OutLock {
    _file: File,
    path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("failed to lock {path} (the run lock of this pipeline's out/ folder)")]
pub struct OutLockError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Someone else holds it: what they wrote into the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub run_id: Option<String>,
}

impl OutLock {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Take the lock without waiting; `Ok(Err(holder))` when another run has it.
    pub fn try_acquire(
        root: &Path,
        pipeline: &str,
        run_id: &str,
    ) -> Result<Result<OutLock, Holder>, OutLockError> {
        let (mut file, path) = open(root, pipeline)?;
        match file.try_lock() {
            Ok(()) => {
                note_holder(&mut file, run_id);
                Ok(Ok(OutLock { _file: file, path }))
            }
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let mut words = text.split_whitespace();
                Ok(Err(Holder {
                    pid: words.next().and_then(|w| w.parse().ok()),
                    run_id: words.next().map(str::to_owned),
                }))
            }
            Err(TryLockError::Error(source)) => Err(OutLockError { path, source }),
        }
    }

    /// Take the lock, waiting for the holder. Blocking: call from `spawn_blocking`.
    pub fn acquire(root: &Path, pipeline: &str, run_id: &str) -> Result<OutLock, OutLockError> {
        let (mut file, path) = open(root, pipeline)?;
        if let Err(source) = file.lock() {
            return Err(OutLockError { path, source });
        }
        note_holder(&mut file, run_id);
        Ok(OutLock { _file: file, path })
    }
}

fn open(root: &Path, pipeline: &str) -> Result<(File, PathBuf), OutLockError> {
    let path = root
        .join(".heddle")
        .join("locks")
        .join(format!("{pipeline}.out.lock"));
    match holder_file::open(&path) {
        Ok(file) => Ok((file, path)),
        Err(source) => Err(OutLockError { path, source }),
    }
}

/// Diagnostics only: who holds it, for the waiting run's message.
fn note_holder(file: &mut File, run_id: &str) {
    holder_file::say_holder(file, &format!("{} {run_id}", std::process::id()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_learns_who_holds_it_and_gets_it_after() {
        let root = tempfile::tempdir().unwrap();
        let held = OutLock::try_acquire(root.path(), "p", "run-a")
            .unwrap()
            .unwrap();
        let holder = OutLock::try_acquire(root.path(), "p", "run-b")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            holder,
            Holder {
                pid: Some(std::process::id()),
                run_id: Some("run-a".into())
            }
        );
        // Another pipeline is not affected.
        assert!(OutLock::try_acquire(root.path(), "q", "run-c")
            .unwrap()
            .is_ok());
        drop(held);
        assert!(OutLock::try_acquire(root.path(), "p", "run-b")
            .unwrap()
            .is_ok());
    }
}

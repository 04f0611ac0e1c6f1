//! Per-key locks: single flight across threads and processes.
//!
//! A lock is an OS file lock (`File::lock`, i.e. `flock` on unix, `LockFileEx` on Windows) on
//! `locks/<hex>.lock`. The OS releases it when the holder's descriptor closes, including when
//! the process dies, so a crashed holder never blocks anyone. Lock files are never deleted:
//! deleting a lock file while someone waits on its old inode would let two holders in.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{CacheError, Digest, Store};

/// A held per-key lock; released on drop.
#[derive(Debug)]
pub struct KeyLock {
    file: File,
    path: PathBuf,
    key: Digest,
}

impl KeyLock {
    pub fn key(&self) -> &Digest {
        &self.key
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn note_holder(&mut self) {
        // Diagnostics only: a failure to write the pid does not make the lock less held.
        let _ = self.file.set_len(0);
        let _ = self.file.seek(SeekFrom::Start(0));
        let _ = self
            .file
            .write_all(std::process::id().to_string().as_bytes());
    }
}

impl Store {
    fn lock_path(&self, key: &Digest) -> PathBuf {
        self.locks.join(format!("{key}.lock"))
    }

    fn open_lock_file(&self, key: &Digest) -> Result<(File, PathBuf), CacheError> {
        let path = self.lock_path(key);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(CacheError::io("open", &path))?;
        Ok((file, path))
    }

    /// Take the lock for `key`, waiting for the current holder (in any process) to release it.
    /// From async code: `tokio::task::spawn_blocking(move || store.lock_key(&key))`.
    pub fn lock_key(&self, key: &Digest) -> Result<KeyLock, CacheError> {
        let (file, path) = self.open_lock_file(key)?;
        file.lock().map_err(CacheError::io("lock", &path))?;
        let mut lock = KeyLock {
            file,
            path,
            key: *key,
        };
        lock.note_holder();
        Ok(lock)
    }

    /// Take the lock for `key` if it is free; `Ok(None)` if someone holds it
    /// (see [`Store::lock_holder`] for who).
    pub fn try_lock_key(&self, key: &Digest) -> Result<Option<KeyLock>, CacheError> {
        let (file, path) = self.open_lock_file(key)?;
        match file.try_lock() {
            Ok(()) => {
                let mut lock = KeyLock {
                    file,
                    path,
                    key: *key,
                };
                lock.note_holder();
                Ok(Some(lock))
            }
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(CacheError::Io {
                op: "lock",
                path,
                source: e,
            }),
        }
    }

    /// The pid written by the last holder of `key`'s lock, if readable. Diagnostics only: the
    /// holder may have exited since, and on Windows a held lock file cannot be read at all.
    pub fn lock_holder(&self, key: &Digest) -> Option<u32> {
        let mut s = String::new();
        File::open(self.lock_path(key))
            .ok()?
            .read_to_string(&mut s)
            .ok()?;
        s.trim().parse().ok()
    }
}

//! Per-key locks: single flight across threads and processes.
//!
//! A lock is an OS file lock (`File::lock`, i.e. `flock` on unix, `LockFileEx` on Windows) on
//! `locks/<hex>.lock`. The OS releases it when the holder's descriptor closes, including when
//! the process dies, so a crashed holder never blocks anyone.
//!
//! On unix a holder deletes its lock file before it lets go, so `locks/` holds only the locks
//! held now (it used to keep one file per key ever run: a third of a million-entry cache's
//! files). Deleting alone would let two holders in: a waiter that opened the old file would
//! take the lock on a file no longer at the path while a newcomer locks a new one. So a taker
//! checks, once it holds the lock, that its descriptor is still the file at the path, and
//! starts over if not. Elsewhere (Windows cannot delete a file another process has open) lock
//! files stay; an older heddle, which never deletes them and does not check, must not share a
//! cache with this one while both run the same key.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
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
        // Diagnostics only: a failure to write the pid does not make the lock less held. The
        // file is opened at offset 0; truncating drops a longer pid left by a lock file that
        // was not deleted (Windows, an older heddle).
        let _ = self.file.set_len(0);
        let _ = self
            .file
            .write_all(std::process::id().to_string().as_bytes());
    }
}

#[cfg(unix)]
impl Drop for KeyLock {
    fn drop(&mut self) {
        // Deleted while still held (the descriptor closes after this): whoever takes the lock
        // on this file next sees that it is no longer at the path and opens the new one.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether `file` is still the file at `path`: its holder deletes a lock file before letting
/// go, so a lock taken on a file opened before that is a lock on nothing.
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> Result<bool, CacheError> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map_err(CacheError::io("stat", path))?;
    match std::fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(CacheError::io("stat", path)(e)),
    }
}

#[cfg(not(unix))]
fn still_at(_file: &File, _path: &Path) -> Result<bool, CacheError> {
    Ok(true)
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
        loop {
            let (file, path) = self.open_lock_file(key)?;
            file.lock().map_err(CacheError::io("lock", &path))?;
            if let Some(lock) = held(file, path, key)? {
                return Ok(lock);
            }
        }
    }

    /// Take the lock for `key` if it is free; `Ok(None)` if someone holds it
    /// (see [`Store::lock_holder`] for who).
    pub fn try_lock_key(&self, key: &Digest) -> Result<Option<KeyLock>, CacheError> {
        loop {
            let (file, path) = self.open_lock_file(key)?;
            match file.try_lock() {
                Ok(()) => {
                    if let Some(lock) = held(file, path, key)? {
                        return Ok(Some(lock));
                    }
                }
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => {
                    return Err(CacheError::Io {
                        op: "lock",
                        path,
                        source: e,
                    })
                }
            }
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

/// The lock just taken on `file`, if `file` is still the lock file at `path`; `None` (and the
/// lock let go) if its holder deleted it meanwhile, and the caller must open the path again.
fn held(file: File, path: PathBuf, key: &Digest) -> Result<Option<KeyLock>, CacheError> {
    if !still_at(&file, &path)? {
        return Ok(None);
    }
    let mut lock = KeyLock {
        file,
        path,
        key: *key,
    };
    lock.note_holder();
    Ok(Some(lock))
}

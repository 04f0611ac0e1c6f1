//! Importing a blob from elsewhere (a remote cache): streamed into `tmp/`, hashed as it is
//! written, and moved into place only if it hashed to the digest it was asked for.

use std::fs::{self, File, OpenOptions};
use std::io::Write;

use bytes::Bytes;

use super::import_hash::ImportHash;
use super::{Durability, Store};
use crate::fsutil::{self, blob_mtime, set_readonly, unique_name, TempPath};
use crate::{CacheError, Digest};

/// A blob on its way in from elsewhere (a remote cache), written chunk by chunk to the
/// store's `tmp/` and hashed as it is written (a large one on a thread of its own:
/// [`ImportHash`]), so its bytes are read once. Start one with
/// [`Store::start_blob_import`], feed it with [`BlobImport::write`], and hand it to
/// [`Store::import_verified_blob`], which moves it into place only if it hashed to the digest
/// it was started for. Dropped unfinished, it removes its temp file.
pub struct BlobImport {
    tmp: TempPath,
    file: File,
    hash: ImportHash,
    size: u64,
    /// Bytes already handed to the kernel's writeback ([`start_writeback`]).
    writeback_from: u64,
    /// Whether to start writeback as it goes: only when the blob will be fsynced.
    writeback: bool,
    expected: Digest,
}

/// Bytes written before their writeback is started, when the blob will be fsynced before the
/// action entry naming it is recorded (not journaled: no boot id); started early, that fsync
/// finds most of a large blob already on disk instead of flushing all of it at the end
/// (RocksDB's `bytes_per_sync`).
const WRITEBACK_EVERY: u64 = 8 * 1024 * 1024;

impl BlobImport {
    /// Append a chunk (blocking file I/O: async callers run it on a blocking thread).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), CacheError> {
        self.write_batch(vec![Bytes::copy_from_slice(chunk)])
    }

    /// Append a batch of chunks, in order, without copying them for the hash (blocking file
    /// I/O: async callers run it on a blocking thread).
    pub fn write_batch(&mut self, batch: Vec<Bytes>) -> Result<(), CacheError> {
        for chunk in &batch {
            self.file
                .write_all(chunk)
                .map_err(CacheError::io("write", self.tmp.path()))?;
            self.size += chunk.len() as u64;
        }
        self.hash.update(batch);
        if self.writeback && self.size - self.writeback_from >= WRITEBACK_EVERY {
            start_writeback(&self.file, self.writeback_from, self.size);
            self.writeback_from = self.size;
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn expected(&self) -> Digest {
        self.expected
    }
}

/// What [`Store::import_verified_blob`] did with a [`BlobImport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    /// The bytes hashed to the expected digest and are now that blob.
    Stored { size: u64 },
    /// The bytes hashed to `actual` instead; they were discarded and the store is unchanged.
    Mismatch { actual: Digest, size: u64 },
}

impl Store {
    /// Begin importing the blob `expected` (see [`BlobImport`]).
    pub fn start_blob_import(&self, expected: Digest) -> Result<BlobImport, CacheError> {
        let tmp = TempPath::new(self.tmp.join(unique_name("i-")));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp.path())
            .map_err(CacheError::io("create", tmp.path()))?;
        Ok(BlobImport {
            tmp,
            file,
            hash: ImportHash::new(),
            size: 0,
            writeback_from: 0,
            // A journaled import is never fsynced, so starting its writeback early only makes
            // the disk compete with the download, which measured slower (benches/RESULTS.md,
            // M13).
            writeback: !self.journals_imports(),
            expected,
        })
    }

    /// Whether a large import is journaled rather than fsynced: on Linux (a boot id), in a
    /// store that fsyncs at all.
    pub(super) fn journals_imports(&self) -> bool {
        self.imports.enabled() && self.durability != Durability::None
    }

    /// Finish an import: if the bytes written hashed to the digest the import was started for,
    /// seal the file (blob mtime sentinel, read-only) and rename it into place; otherwise
    /// remove it. The hash computed while writing is the only one: nothing is read back.
    ///
    /// On Linux the blob is listed in this store's imports journal (durably) before its rename
    /// and never fsynced here: after a power loss the journal has it re-hashed (see
    /// `imports_journal`). So a 1 GiB remote hit is done when its bytes are in the page cache,
    /// like `curl -o`, and a small one costs a share of a journal `fdatasync` that concurrent
    /// imports have in common, where an fsync of the blob, its folder and the entry naming it
    /// was paid per remote hit (benches/RESULTS.md, M11 and the remote no-op). Elsewhere (no
    /// boot id) it joins the next group commit like any new blob.
    pub fn import_verified_blob(&self, import: BlobImport) -> Result<ImportOutcome, CacheError> {
        let BlobImport {
            tmp,
            mut file,
            hash,
            size,
            expected,
            ..
        } = import;
        let actual = hash.finish();
        if actual != expected {
            return Ok(ImportOutcome::Mismatch { actual, size });
        }
        file.flush().map_err(CacheError::io("write", tmp.path()))?;
        file.set_modified(blob_mtime())
            .map_err(CacheError::io("set mtime of", tmp.path()))?;
        if !self.journals_imports() {
            self.sync_before_naming(&file, tmp.path())?;
        }
        drop(file);
        set_readonly(tmp.path(), false).map_err(CacheError::io("make read-only", tmp.path()))?;
        if self.journals_imports() {
            self.imports.record(&expected)?;
            // Not in `pending`: neither its bytes nor its shard folder are fsynced. A rename
            // lost to a power loss reads as a missing blob, i.e. a miss, like a torn blob.
            let dest = self.blob_path(&expected);
            fsutil::rename_into_shard(tmp.path(), &dest, |from, to| fs::rename(from, to))?;
            tmp.keep();
        } else {
            self.rename_blob(tmp, &expected)?;
        }
        self.mark_verified(&expected);
        Ok(ImportOutcome::Stored { size })
    }
}

/// Start writing bytes `from..to` of `file` to disk without waiting for them. Only a hint:
/// durability still comes from the fsync of the group commit, so a failure is ignored.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, from: u64, to: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on an open descriptor this import owns; no memory is passed.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as libc::off64_t,
            (to - from) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _from: u64, _to: u64) {}

#[cfg(test)]
mod import_tests {
    use std::fs;

    use super::super::BlobState;
    use super::*;

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        (dir, store)
    }

    fn tmp_files(store: &Store) -> usize {
        fs::read_dir(&store.tmp).unwrap().count()
    }

    #[test]
    fn an_import_in_chunks_becomes_the_blob() {
        let (_dir, store) = open();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let digest = Digest::of_bytes(&bytes);
        let mut import = store.start_blob_import(digest).unwrap();
        for chunk in bytes.chunks(65_000) {
            import.write(chunk).unwrap();
        }
        assert_eq!(import.size(), bytes.len() as u64);
        let outcome = store.import_verified_blob(import).unwrap();
        assert_eq!(
            outcome,
            ImportOutcome::Stored {
                size: bytes.len() as u64
            }
        );
        assert_eq!(fs::read(store.blob_path(&digest)).unwrap(), bytes);
        // Sealed like any blob: served on its stat, without a re-hash.
        assert_eq!(
            store.blob_state(&digest, Some(bytes.len() as u64)).unwrap(),
            BlobState::Ok
        );
        assert_eq!(tmp_files(&store), 0);
    }

    #[test]
    fn an_import_of_other_bytes_is_discarded() {
        let (_dir, store) = open();
        let wanted = Digest::of_bytes(b"the real bytes");
        let mut import = store.start_blob_import(wanted).unwrap();
        import.write(b"some other bytes").unwrap();
        let outcome = store.import_verified_blob(import).unwrap();
        assert_eq!(
            outcome,
            ImportOutcome::Mismatch {
                actual: Digest::of_bytes(b"some other bytes"),
                size: 16
            }
        );
        assert!(!store.has_blob(&wanted));
        assert_eq!(tmp_files(&store), 0);
    }

    #[test]
    fn an_abandoned_import_leaves_nothing() {
        let (_dir, store) = open();
        let mut import = store.start_blob_import(Digest::of_bytes(b"x")).unwrap();
        import.write(b"half").unwrap();
        drop(import);
        assert_eq!(tmp_files(&store), 0);
    }
}

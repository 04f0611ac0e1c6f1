//! The sha256 of a blob being imported, computed beside its write.
//!
//! Hashing and writing to the page cache done one after the other on the import's thread made
//! a large remote hit take their sum, slower than curl from the same server (benches/RESULTS.md,
//! M12). Past [`THREAD_FROM`] bytes the hash moves
//! to a thread of its own, which receives the same chunks (`Bytes` are shared, not copied),
//! so the two overlap and the slower one sets the pace. Below it, a thread per blob would
//! cost more than it saves (most blobs are a few KiB).

use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use crate::Digest;

/// Bytes hashed inline before the hash moves to its own thread.
const THREAD_FROM: u64 = 4 * 1024 * 1024;
/// Batches queued for the hashing thread before the writer waits for it: memory stays a few
/// batches, whatever the blob's size.
const QUEUED_BATCHES: usize = 4;

pub(super) enum ImportHash {
    /// Small so far: hashed on the writer's thread.
    Inline { hasher: Sha256, hashed: u64 },
    /// Large: hashed on a thread of its own, fed through a bounded queue.
    Threaded {
        batches: SyncSender<Vec<Bytes>>,
        thread: JoinHandle<Sha256>,
    },
}

impl ImportHash {
    pub(super) fn new() -> Self {
        ImportHash::Inline {
            hasher: Sha256::new(),
            hashed: 0,
        }
    }

    /// Hash `batch` (the bytes the import writes next, in order).
    pub(super) fn update(&mut self, batch: Vec<Bytes>) {
        match self {
            ImportHash::Inline { hasher, hashed } => {
                for chunk in &batch {
                    hasher.update(chunk);
                    *hashed += chunk.len() as u64;
                }
                if *hashed >= THREAD_FROM {
                    match spawn(hasher.clone()) {
                        Some(threaded) => *self = threaded,
                        // No thread to be had (a process at its limit): inline is only
                        // slower; try again a few MiB on.
                        None => *hashed = 0,
                    }
                }
            }
            ImportHash::Threaded { batches, .. } => {
                // A send fails only if the thread is gone, and it ends only when the queue
                // closes; `finish` reports what became of it.
                let _ = batches.send(batch);
            }
        }
    }

    /// The digest of everything passed to [`ImportHash::update`].
    pub(super) fn finish(self) -> Digest {
        let hasher = match self {
            ImportHash::Inline { hasher, .. } => hasher,
            ImportHash::Threaded { batches, thread } => {
                drop(batches);
                match thread.join() {
                    Ok(h) => h,
                    // sha256 over bytes in memory does not panic; if it ever did, its panic
                    // is the bug to see, not a digest to trust.
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        };
        Digest::from_bytes(hasher.finalize().into())
    }
}

fn spawn(mut hasher: Sha256) -> Option<ImportHash> {
    let (batches, queued) = sync_channel::<Vec<Bytes>>(QUEUED_BATCHES);
    let thread = std::thread::Builder::new()
        .name("heddle-import-hash".into())
        .spawn(move || {
            for batch in queued {
                for chunk in &batch {
                    hasher.update(chunk);
                }
            }
            hasher
        })
        .ok()?;
    Some(ImportHash::Threaded { batches, thread })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_in(chunks: &[&[u8]], per_batch: usize) -> Digest {
        let mut h = ImportHash::new();
        for batch in chunks.chunks(per_batch) {
            h.update(batch.iter().map(|c| Bytes::copy_from_slice(c)).collect());
        }
        h.finish()
    }

    #[test]
    fn the_digest_is_the_same_inline_threaded_and_across_the_switch() {
        let data: Vec<u8> = (0..(3 * THREAD_FROM as usize + 12_345))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let want = Digest::of_bytes(&data);
        for chunk in [1000, 65_536, 1 << 20, data.len()] {
            let chunks: Vec<&[u8]> = data.chunks(chunk).collect();
            for per_batch in [1, 3, 16] {
                assert_eq!(hash_in(&chunks, per_batch), want, "{chunk} x {per_batch}");
            }
        }
        assert_eq!(hash_in(&[], 1), Digest::of_bytes(b""));
        assert_eq!(hash_in(&[b"abc"], 1), Digest::of_bytes(b"abc"));
    }
}

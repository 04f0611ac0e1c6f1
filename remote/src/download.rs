//! Read-through: [`fetch_blob`] (remote → a file, hashed as it streams) and [`fetch_action`],
//! which brings an action's entry and every blob it names into the local store, each blob
//! hashed once while it streams into the store ([`heddle_cache::BlobImport`]) and each tree
//! manifest validated before anything it lists is fetched.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use heddle_cache::{
    decode_tree, ActionEntry, Digest, ImportOutcome, OutputEntry, Store, TreeEntry,
};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use crate::backend::{bounded, next_chunk, BlobStream, RemoteBackend};
use crate::RemoteError;

/// Bytes gathered before one write to the local store: large enough that handing a batch to a
/// blocking thread costs nothing measurable, small enough to keep memory flat.
const WRITE_BATCH: usize = 1024 * 1024;
/// Batches downloaded ahead of the hash-and-write thread.
const BATCHES_IN_FLIGHT: usize = 4;
/// A tree manifest is read into memory to be validated; one of 1 million entries is ~150 MB,
/// so anything larger is not a manifest heddle wrote.
const MAX_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// Download blob `digest` into `dest` (created or truncated), hashing every byte on the way.
/// `Ok(Some(size))` only when the bytes hash to `digest`; on a mismatch `dest` is removed and
/// [`RemoteError::CorruptBlob`] returned. `Ok(None)`: the remote does not have it. Memory use
/// is a few chunks, whatever the blob's size.
/// `size` is the blob's, when known (a REAPI remote needs it).
pub async fn fetch_blob(
    remote: &dyn RemoteBackend,
    digest: Digest,
    size: Option<u64>,
    dest: &Path,
) -> Result<Option<u64>, RemoteError> {
    let Some(mut body) = open_blob(remote, digest, size).await? else {
        return Ok(None);
    };
    let result = async {
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(RemoteError::local_io("create", dest))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = next_chunk(remote, &mut body, digest).await? {
            hasher.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk)
                .await
                .map_err(RemoteError::local_io("write", dest))?;
        }
        file.flush()
            .await
            .map_err(RemoteError::local_io("write", dest))?;
        let actual = Digest::from_bytes(hasher.finalize().into());
        if actual != digest {
            return Err(corrupt(remote, digest, actual, size));
        }
        Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(dest).await;
    }
    result.map(Some)
}

async fn open_blob(
    remote: &dyn RemoteBackend,
    digest: Digest,
    size: Option<u64>,
) -> Result<Option<BlobStream>, RemoteError> {
    bounded(
        remote,
        "open",
        || format!("blob {digest}"),
        remote.read_blob(digest, size),
    )
    .await
}

fn corrupt(remote: &dyn RemoteBackend, digest: Digest, actual: Digest, size: u64) -> RemoteError {
    RemoteError::CorruptBlob {
        digest,
        actual,
        size,
        remote: remote.name().to_string(),
    }
}

/// What [`fetch_action`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FetchReport {
    pub blobs_fetched: u64,
    pub bytes_fetched: u64,
    /// Blobs the local store already had.
    pub blobs_present: u64,
}

/// Read-through for one action: read its entry from the remote, fetch every blob it names
/// that the local store lacks (a tree's manifest first, validated like any untrusted manifest,
/// then the files it lists), verify each by sha256 as it streams in, and record the entry in
/// `local` last. `Ok(None)`: the remote has no entry for `key`. On any error nothing is
/// recorded (blobs already fetched stay, as verified content-addressed blobs that `gc` may
/// collect).
pub async fn fetch_action(
    remote: &dyn RemoteBackend,
    local: Arc<Store>,
    key: Digest,
) -> Result<Option<(ActionEntry, FetchReport)>, RemoteError> {
    let Some(entry) = read_entry(remote, key).await? else {
        return Ok(None);
    };
    let mut fetch = Fetch {
        remote,
        local: &local,
        key,
        report: FetchReport::default(),
    };
    for output in entry.outputs.values() {
        match output {
            OutputEntry::File { digest, size, .. } => fetch.file(*digest, *size).await?,
            OutputEntry::Dir { digest, .. } => {
                for e in fetch.manifest(*digest).await? {
                    if let TreeEntry::File { digest, size, .. } = e {
                        fetch.file(digest, size).await?;
                    }
                }
            }
        }
    }
    let report = fetch.report;
    let store = local.clone();
    let recorded = entry.clone();
    tokio::task::spawn_blocking(move || store.record_action(&recorded)).await??;
    Ok(Some((entry, report)))
}

async fn read_entry(
    remote: &dyn RemoteBackend,
    key: Digest,
) -> Result<Option<ActionEntry>, RemoteError> {
    let bytes = bounded(
        remote,
        "read",
        || format!("action entry {key}"),
        remote.get_action(key),
    )
    .await?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let bad = |reason: String| RemoteError::BadEntry {
        key,
        remote: remote.name().to_string(),
        reason,
    };
    let entry: ActionEntry = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if entry.key != key {
        return Err(bad(format!("it is the entry of action {}", entry.key)));
    }
    Ok(Some(entry))
}

/// One action's fetch in progress.
struct Fetch<'a> {
    remote: &'a dyn RemoteBackend,
    local: &'a Arc<Store>,
    key: Digest,
    report: FetchReport,
}

impl Fetch<'_> {
    /// Fetch a file blob unless the local store has it. `size` is what the entry says; a blob
    /// of another size means the entry lies about it, and the entry is refused.
    async fn file(&mut self, digest: Digest, size: u64) -> Result<(), RemoteError> {
        if self.local.has_blob(&digest) {
            self.report.blobs_present += 1;
            return Ok(());
        }
        let Some(body) = open_blob(self.remote, digest, Some(size)).await? else {
            return Err(self.missing(digest));
        };
        let got = import_stream(self.remote, self.local, digest, body).await?;
        if got != size {
            return Err(RemoteError::BadEntry {
                key: self.key,
                remote: self.remote.name().to_string(),
                reason: format!("it gives blob {digest} {size} bytes; it has {got}"),
            });
        }
        self.report.blobs_fetched += 1;
        self.report.bytes_fetched += got;
        Ok(())
    }

    /// A tree manifest's entries, from the local store or else from the remote. A fetched
    /// manifest is verified by hash and validated (plain relative paths, nothing beneath a
    /// symlink, no symlink out of the tree) before it is stored or anything it lists fetched.
    async fn manifest(&mut self, digest: Digest) -> Result<Vec<TreeEntry>, RemoteError> {
        if self.local.has_blob(&digest) {
            self.report.blobs_present += 1;
            let path = self.local.blob_path(&digest);
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(RemoteError::local_io("read", &path))?;
            return Ok(decode_tree(digest, &bytes)?);
        }
        let bytes = self.manifest_bytes(digest).await?;
        let entries = decode_tree(digest, &bytes).map_err(|e| RemoteError::BadTree {
            key: self.key,
            digest,
            remote: self.remote.name().to_string(),
            source: e,
        })?;
        let size = bytes.len() as u64;
        let stream: BlobStream = Box::pin(futures_util::stream::iter([Ok(Bytes::from(bytes))]));
        import_stream(self.remote, self.local, digest, stream).await?;
        self.report.blobs_fetched += 1;
        self.report.bytes_fetched += size;
        Ok(entries)
    }

    /// A manifest's bytes, in memory (bounded), verified by hash.
    async fn manifest_bytes(&self, digest: Digest) -> Result<Vec<u8>, RemoteError> {
        let Some(mut body) = open_blob(self.remote, digest, None).await? else {
            return Err(self.missing(digest));
        };
        let mut bytes = Vec::new();
        let mut hasher = Sha256::new();
        while let Some(chunk) = next_chunk(self.remote, &mut body, digest).await? {
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_MANIFEST_BYTES {
                return Err(RemoteError::BadEntry {
                    key: self.key,
                    remote: self.remote.name().to_string(),
                    reason: format!("tree manifest {digest} is over {MAX_MANIFEST_BYTES} bytes"),
                });
            }
        }
        let actual = Digest::from_bytes(hasher.finalize().into());
        if actual != digest {
            return Err(corrupt(self.remote, digest, actual, bytes.len() as u64));
        }
        Ok(bytes)
    }

    fn missing(&self, digest: Digest) -> RemoteError {
        RemoteError::MissingBlob {
            key: self.key,
            digest,
            remote: self.remote.name().to_string(),
        }
    }
}

/// Stream `body` into the local store as blob `digest`, hashed once on the way
/// ([`Store::import_verified_blob`]); the bytes become the blob only if they hash to `digest`.
/// The download, the write and the hash overlap: a blocking thread writes each batch of
/// [`WRITE_BATCH`] bytes while the next one arrives, with at most [`BATCHES_IN_FLIGHT`]
/// batches between them (memory stays flat), and the import hashes a large blob on a thread
/// of its own. Done one after the other, the hash and the write halved the throughput of a
/// large hit.
async fn import_stream(
    remote: &dyn RemoteBackend,
    local: &Arc<Store>,
    digest: Digest,
    mut body: BlobStream,
) -> Result<u64, RemoteError> {
    let import = local.start_blob_import(digest)?;
    let (batches, mut arriving) = tokio::sync::mpsc::channel::<Vec<Bytes>>(BATCHES_IN_FLIGHT);
    let writer = tokio::task::spawn_blocking(move || {
        let mut import = import;
        while let Some(batch) = arriving.blocking_recv() {
            import.write_batch(batch)?;
        }
        Ok::<_, heddle_cache::CacheError>(import)
    });
    let downloaded = async {
        let mut batch: Vec<Bytes> = Vec::new();
        let mut batched = 0usize;
        while let Some(chunk) = next_chunk(remote, &mut body, digest).await? {
            batched += chunk.len();
            batch.push(chunk);
            if batched >= WRITE_BATCH {
                batched = 0;
                if batches.send(std::mem::take(&mut batch)).await.is_err() {
                    // The writer stopped on an error, which its result carries.
                    return Ok(());
                }
            }
        }
        let _ = batches.send(batch).await;
        Ok::<_, RemoteError>(())
    }
    .await;
    drop(batches);
    // The writer's error (a full disk) explains a stopped download better than the download's.
    let import = writer.await??;
    downloaded?;
    let store = local.clone();
    match tokio::task::spawn_blocking(move || store.import_verified_blob(import)).await?? {
        ImportOutcome::Stored { size } => Ok(size),
        ImportOutcome::Mismatch { actual, size } => Err(corrupt(remote, digest, actual, size)),
    }
}

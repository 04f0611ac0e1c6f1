//! The verified transfers: [`fetch_blob`] (remote → temp file, hashed as it streams),
//! [`upload_blob`] (local file → remote, hashed as it streams, aborted on mismatch), and the
//! action-level helpers [`push_action`] and [`fetch_action`] that keep the write-back order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::{stream, StreamExt};
use heddle_cache::{decode_tree, ActionEntry, Digest, OutputEntry, Store, TreeEntry};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backend::{BlobStream, RemoteCache};
use crate::RemoteError;

/// Read size for uploads: large enough that per-call overhead vanishes, small enough to
/// keep memory flat (the backend buffers at most a few of these).
const UPLOAD_READ: usize = 1024 * 1024;

/// Bound a request-sized call by the remote's request timeout, whatever the backend does.
async fn bounded<T>(
    remote: &dyn RemoteCache,
    op: &'static str,
    object: impl FnOnce() -> String,
    fut: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let limit = remote.timeouts().request;
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(RemoteError::Timeout {
            op,
            object: object(),
            remote: remote.name().to_string(),
            secs: limit.as_secs(),
        }),
    }
}

/// Download blob `digest` into `dest` (created or truncated), hashing every byte on the way.
/// `Ok(Some(size))` only when the bytes hash to `digest`; on a mismatch `dest` is removed and
/// [`RemoteError::CorruptBlob`] returned. `Ok(None)`: the remote does not have it. Memory use
/// is a few chunks, whatever the blob's size.
pub async fn fetch_blob(
    remote: &dyn RemoteCache,
    digest: Digest,
    dest: &Path,
) -> Result<Option<u64>, RemoteError> {
    let opened = bounded(
        remote,
        "open",
        || format!("blob {digest}"),
        remote.read_blob(digest),
    )
    .await?;
    let Some(mut body) = opened else {
        return Ok(None);
    };
    let result = async {
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(RemoteError::local_io("create", dest))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let idle = remote.timeouts().idle;
        loop {
            let next = tokio::time::timeout(idle, body.next()).await.map_err(|_| {
                RemoteError::Timeout {
                    op: "read",
                    object: format!("blob {digest}"),
                    remote: remote.name().to_string(),
                    secs: idle.as_secs(),
                }
            })?;
            let Some(chunk) = next else { break };
            let chunk = chunk?;
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
            return Err(RemoteError::CorruptBlob {
                digest,
                actual,
                size,
                remote: remote.name().to_string(),
            });
        }
        Ok(size)
    }
    .await;
    match result {
        Ok(size) => Ok(Some(size)),
        Err(e) => {
            let _ = tokio::fs::remove_file(dest).await;
            Err(e)
        }
    }
}

/// Upload the file `src` as blob `digest`, streamed. The file is hashed as it is read; if it
/// does not match `digest` (a local blob written through a hard link, say) the stream ends in
/// an error and the backend aborts the write, so the remote never holds a wrong blob.
pub async fn upload_blob(
    remote: &dyn RemoteCache,
    digest: Digest,
    src: &Path,
) -> Result<(), RemoteError> {
    let file = tokio::fs::File::open(src)
        .await
        .map_err(RemoteError::local_io("open", src))?;
    let size = file
        .metadata()
        .await
        .map_err(RemoteError::local_io("stat", src))?
        .len();
    remote
        .write_blob(
            digest,
            size,
            hashed_file_stream(file, src.to_path_buf(), digest),
        )
        .await
}

fn hashed_file_stream(file: tokio::fs::File, path: PathBuf, digest: Digest) -> BlobStream {
    struct State {
        file: tokio::fs::File,
        path: PathBuf,
        hasher: Option<Sha256>,
    }
    let state = State {
        file,
        path,
        hasher: Some(Sha256::new()),
    };
    stream::try_unfold(state, move |mut st| async move {
        let Some(hasher) = st.hasher.as_mut() else {
            return Ok(None);
        };
        let mut buf = BytesMut::with_capacity(UPLOAD_READ);
        while buf.len() < UPLOAD_READ {
            let n = st
                .file
                .read_buf(&mut buf)
                .await
                .map_err(RemoteError::local_io("read", &st.path))?;
            if n == 0 {
                break;
            }
        }
        if buf.is_empty() {
            let actual = Digest::from_bytes(st.hasher.take().expect("checked").finalize().into());
            if actual != digest {
                return Err(RemoteError::LocalCorrupt {
                    digest,
                    path: st.path.clone(),
                });
            }
            return Ok(None);
        }
        hasher.update(&buf);
        Ok(Some((buf.freeze(), st)))
    })
    .boxed()
}

/// What [`push_action`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PushReport {
    pub blobs_uploaded: u64,
    pub bytes_uploaded: u64,
    /// Blobs the remote already had (content addressing: skipped).
    pub blobs_present: u64,
}

/// Upload an action's blobs (file outputs, tree manifests and every file a tree names) that
/// the remote lacks, then its entry, last: an entry on the remote never names a missing blob.
/// `entry` should come from `local.lookup_action`, which has checked its blobs are present.
pub async fn push_action(
    remote: &dyn RemoteCache,
    local: &Store,
    entry: &ActionEntry,
) -> Result<PushReport, RemoteError> {
    let mut report = PushReport::default();
    for (digest, size) in action_blobs(local, entry)? {
        let present = bounded(
            remote,
            "check",
            || format!("blob {digest}"),
            remote.has_blob(digest),
        )
        .await?;
        if present {
            report.blobs_present += 1;
            continue;
        }
        upload_blob(remote, digest, &local.blob_path(&digest)).await?;
        report.blobs_uploaded += 1;
        report.bytes_uploaded += size;
    }
    let bytes = serde_json::to_vec_pretty(entry).map_err(|e| RemoteError::BadEntry {
        key: entry.key,
        remote: remote.name().to_string(),
        reason: format!("failed to encode: {e}"),
    })?;
    bounded(
        remote,
        "write",
        || format!("action entry {}", entry.key),
        remote.put_action(entry.key, bytes),
    )
    .await?;
    Ok(report)
}

/// Every blob an entry needs, with sizes: for a tree, its files before its manifest (the
/// order uploads happen in, so a manifest is never on the remote before its files).
fn action_blobs(local: &Store, entry: &ActionEntry) -> Result<Vec<(Digest, u64)>, RemoteError> {
    let mut out = Vec::new();
    for output in entry.outputs.values() {
        match output {
            OutputEntry::File { digest, size, .. } => out.push((*digest, *size)),
            OutputEntry::Dir { digest, .. } => {
                let path = local.blob_path(digest);
                let bytes = std::fs::read(&path).map_err(RemoteError::local_io("read", &path))?;
                for e in decode_tree(*digest, &bytes)? {
                    if let TreeEntry::File { digest, size, .. } = e {
                        out.push((digest, size));
                    }
                }
                out.push((*digest, bytes.len() as u64));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|(d, _)| seen.insert(*d));
    Ok(out)
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
/// that the local store lacks (tree manifests first, then the files they list), verify each
/// by sha256, add them to `local`, and record the entry there last. `Ok(None)`: the remote
/// has no entry for `key`. On any error nothing is recorded (blobs already fetched stay, as
/// verified content-addressed blobs that `gc` may collect).
pub async fn fetch_action(
    remote: &dyn RemoteCache,
    local: Arc<Store>,
    key: Digest,
) -> Result<Option<(ActionEntry, FetchReport)>, RemoteError> {
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
    let mut report = FetchReport::default();
    for output in entry.outputs.values() {
        match output {
            OutputEntry::File { digest, .. } => {
                fetch_into_store(remote, &local, key, *digest, &mut report).await?;
            }
            OutputEntry::Dir { digest, .. } => {
                fetch_into_store(remote, &local, key, *digest, &mut report).await?;
                let path = local.blob_path(digest);
                let manifest = tokio::fs::read(&path)
                    .await
                    .map_err(RemoteError::local_io("read", &path))?;
                for e in decode_tree(*digest, &manifest)? {
                    if let TreeEntry::File { digest, .. } = e {
                        fetch_into_store(remote, &local, key, digest, &mut report).await?;
                    }
                }
            }
        }
    }
    let store = local.clone();
    let recorded = entry.clone();
    tokio::task::spawn_blocking(move || store.record_action(&recorded)).await??;
    Ok(Some((entry, report)))
}

/// Fetch one blob into the local store unless it is there. The download goes to the store's
/// own `tmp/` (same filesystem, so adopting it is a link, not a copy) and is adopted only
/// after it hashed to `digest`.
async fn fetch_into_store(
    remote: &dyn RemoteCache,
    local: &Arc<Store>,
    key: Digest,
    digest: Digest,
    report: &mut FetchReport,
) -> Result<(), RemoteError> {
    if local.has_blob(&digest) {
        report.blobs_present += 1;
        return Ok(());
    }
    let tmp = TempFile(local.root().join("tmp").join(format!(
        "remote-{}-{}",
        std::process::id(),
        unique()
    )));
    let size = match fetch_blob(remote, digest, &tmp.0).await? {
        Some(size) => size,
        None => {
            return Err(RemoteError::MissingBlob {
                key,
                digest,
                remote: remote.name().to_string(),
            })
        }
    };
    let store = local.clone();
    let path = tmp.0.clone();
    // adopt_output hard-links the verified file into objects/ and joins the store's group
    // commit. It hashes the file once more; the store has no public way to adopt a file by a
    // digest its caller computed (see the crate docs).
    let stored = tokio::task::spawn_blocking(move || store.adopt_output(&path)).await??;
    if stored.digest() != digest {
        // Only possible if the file changed on disk between the two hashes.
        return Err(RemoteError::LocalCorrupt {
            digest,
            path: tmp.0.clone(),
        });
    }
    report.blobs_fetched += 1;
    report.bytes_fetched += size;
    Ok(())
}

/// Removes its file when dropped (a download that failed, or the temp name of one adopted).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

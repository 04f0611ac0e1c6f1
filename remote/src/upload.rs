//! Write-back: [`upload_blob`] (local file → remote, hashed as it streams, aborted on
//! mismatch) and [`push_action`], which uploads an action's blobs before its entry.

use std::path::{Path, PathBuf};

use bytes::BytesMut;
use futures_util::{stream, StreamExt};
use heddle_cache::{decode_tree, ActionEntry, Digest, OutputEntry, Store, TreeEntry};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncReadExt;

use crate::backend::{bounded, BlobStream, RemoteBackend};
use crate::signing::{signed_entry_json, SigningKey};
use crate::RemoteError;

/// Read size for uploads: large enough that per-call overhead vanishes, small enough to
/// keep memory flat (the backend buffers at most a few of these).
const UPLOAD_READ: usize = 1024 * 1024;

/// Upload the file `src` as blob `digest`, streamed. The file is hashed as it is read; if it
/// does not match `digest` (a local blob written through a hard link, say) the stream ends in
/// an error and the backend aborts the write, so the remote never holds a wrong blob.
pub async fn upload_blob(
    remote: &dyn RemoteBackend,
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
/// the remote lacks, then its entry, signed by `signer`, last: an entry on the remote never
/// names a missing blob. `entry` should come from `local.lookup_action`, which has checked its
/// blobs are present.
pub async fn push_action(
    remote: &dyn RemoteBackend,
    local: &Store,
    entry: &ActionEntry,
    signer: &SigningKey,
) -> Result<PushReport, RemoteError> {
    let mut report = PushReport::default();
    let blobs = action_blobs(local, entry)?;
    for &(digest, size) in &blobs {
        let present = bounded(
            remote,
            "check",
            || format!("blob {digest}"),
            remote.has_blob(digest, size),
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
    let bytes = signed_entry_json(entry, signer).map_err(|e| RemoteError::BadEntry {
        key: entry.key,
        remote: remote.name().to_string(),
        reason: format!("failed to encode: {e}"),
    })?;
    bounded(
        remote,
        "write",
        || format!("action entry {}", entry.key),
        remote.put_action(entry.key, bytes, blobs),
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

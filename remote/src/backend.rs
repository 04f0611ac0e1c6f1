//! [`RemoteCache`]: the operations every backend provides, in bytes and keys only.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use heddle_cache::Digest;

use crate::RemoteError;

/// A blob's bytes in chunks, as they arrive or as they are read from disk.
pub type BlobStream = BoxStream<'static, Result<Bytes, RemoteError>>;

/// Timeouts that bound every remote call, so a remote that stops answering costs at most
/// this long before the caller falls back to local work.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// A whole request that moves no blob body (exists, read or write an action entry, the
    /// first byte of a blob).
    pub request: Duration,
    /// The longest wait for the next chunk of a blob body, either way. A 1 GiB blob may
    /// take minutes as a whole; what must not happen is a stall.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            request: Duration::from_secs(30),
            idle: Duration::from_secs(30),
        }
    }
}

/// A remote cache: content-addressed blobs (file contents and tree manifests, by sha256, the
/// same objects as the local store) and action entries (the local store's `ActionEntry` JSON,
/// by action key).
///
/// The methods are async, returning boxed futures so the trait can be used as
/// `Arc<dyn RemoteCache>` and a backend chosen at run time. Async rather than blocking calls
/// run on `spawn_blocking`: the scheduler is already on tokio, the storage and gRPC libraries
/// are async, and a 1 GiB transfer then holds no thread while it waits on the network.
///
/// A backend does not verify anything: [`crate::fetch_blob`] hashes every byte it reads, and
/// the helpers in this crate are the only intended callers of [`RemoteCache::read_blob`].
pub trait RemoteCache: Send + Sync {
    /// What to call this remote in messages (`s3://bucket/prefix`); never a password.
    fn name(&self) -> &str;

    fn timeouts(&self) -> Timeouts;

    fn has_blob(&self, digest: Digest) -> BoxFuture<'_, Result<bool, RemoteError>>;

    /// The blob's bytes, unverified, or `None` when the remote does not have it.
    fn read_blob(&self, digest: Digest) -> BoxFuture<'_, Result<Option<BlobStream>, RemoteError>>;

    /// Store `data` as blob `digest`. When `data` yields an error the backend must abort the
    /// write, so a half or unverified blob never becomes visible under the digest. Writing a
    /// blob that is already there is harmless (the same bytes), so concurrent writers are safe.
    fn write_blob(
        &self,
        digest: Digest,
        size: u64,
        data: BlobStream,
    ) -> BoxFuture<'_, Result<(), RemoteError>>;

    /// An action entry's bytes, or `None`.
    fn get_action(&self, key: Digest) -> BoxFuture<'_, Result<Option<Vec<u8>>, RemoteError>>;

    /// Store an action entry; the last writer wins (concurrent writers of one key wrote the
    /// same action's outputs, which are content-addressed).
    fn put_action(&self, key: Digest, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), RemoteError>>;
}

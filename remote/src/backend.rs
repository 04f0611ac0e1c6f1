//! [`RemoteBackend`]: the operations every backend provides, in bytes and keys only.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use heddle_cache::Digest;

use crate::RemoteError;

/// A blob's bytes in chunks, as they arrive or as they are read from disk.
pub type BlobStream = BoxStream<'static, Result<Bytes, RemoteError>>;

/// What every [`RemoteBackend`] call returns: boxed, so the trait can be used as
/// `dyn RemoteBackend`.
pub type RemoteFuture<'a, T> = BoxFuture<'a, Result<T, RemoteError>>;

/// Every blob an action entry needs, with its size: what a REAPI ActionResult lists.
pub type EntryBlobs = Vec<(Digest, u64)>;

/// What every backend is besides its storage: the name messages call it by and the timeouts
/// that bound its calls.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `s3://bucket/prefix`; never a password.
    pub name: String,
    pub timeouts: Timeouts,
}

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
    /// Retries of a request that failed transiently (a 5xx, a reset connection, a timeout),
    /// with exponential backoff from [`RETRY_MIN_DELAY`] up to [`RETRY_MAX_DELAY`].
    pub retries: usize,
    /// The floor throughput of a body the remote sends, in bytes per second, after a grace of
    /// `request`: a blob of `n` bytes must have arrived by `request + n / min_rate`, however
    /// steadily its chunks trickle in (`bounded.rs`).
    pub min_rate: u64,
}

/// The default floor throughput: 1 MiB/s. A link slower than that is slower than most stages
/// worth caching remotely; a 1 GiB blob still has 17 minutes.
pub const MIN_RATE: u64 = 1024 * 1024;

/// First backoff between retries; doubled each time, with jitter so that writers that
/// collided do not collide again.
pub const RETRY_MIN_DELAY: Duration = Duration::from_millis(100);
pub const RETRY_MAX_DELAY: Duration = Duration::from_secs(1);

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            request: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            retries: 3,
            min_rate: MIN_RATE,
        }
    }
}

impl Timeouts {
    /// The most a request-sized call may take with all its retries: every attempt timing out,
    /// plus the longest backoffs. A remote that is down costs at most this per call.
    pub fn request_budget(&self) -> Duration {
        let attempts = self.retries as u32 + 1;
        self.request * attempts + RETRY_MAX_DELAY * self.retries as u32
    }
}

/// A remote cache: content-addressed blobs (file contents and tree manifests, by sha256, the
/// same objects as the local store) and action entries (the local store's `ActionEntry` JSON,
/// by action key).
///
/// The methods are async, returning boxed futures so the trait can be used as
/// `Arc<dyn RemoteBackend>` and a backend chosen at run time. Async rather than blocking calls
/// run on `spawn_blocking`: the scheduler is already on tokio, the storage and gRPC libraries
/// are async, and a 1 GiB transfer then holds no thread while it waits on the network.
///
/// A backend does not verify anything: [`crate::fetch_blob`] hashes every byte it reads, and
/// the helpers in this crate are the only intended callers of [`RemoteBackend::read_blob`].
pub trait RemoteBackend: Send + Sync {
    fn endpoint(&self) -> &Endpoint;

    /// What to call this remote in messages (`s3://bucket/prefix`); never a password.
    fn name(&self) -> &str {
        &self.endpoint().name
    }

    fn timeouts(&self) -> Timeouts {
        self.endpoint().timeouts
    }

    /// Whether the remote has blob `digest` of `size` bytes. The size is part of a blob's
    /// name on REAPI; the other backends ignore it.
    fn has_blob(&self, digest: Digest, size: u64) -> RemoteFuture<'_, bool>;

    /// The blob's bytes, unverified, or `None` when the remote does not have it. `size` is
    /// `None` for a tree manifest, whose size an entry does not record: a REAPI backend takes it
    /// from the ActionResult it read the entry from.
    fn read_blob(&self, digest: Digest, size: Option<u64>) -> RemoteFuture<'_, Option<BlobStream>>;

    /// Store `data` as blob `digest`. When `data` yields an error the backend must abort the
    /// write, so a half or unverified blob never becomes visible under the digest. Writing a
    /// blob that is already there is harmless (the same bytes), so concurrent writers are safe.
    fn write_blob(&self, digest: Digest, size: u64, data: BlobStream) -> RemoteFuture<'_, ()>;

    /// An action entry's bytes, or `None`.
    fn get_action(&self, key: Digest) -> RemoteFuture<'_, Option<Vec<u8>>>;

    /// Store an action entry; the last writer wins (concurrent writers of one key wrote the
    /// same action's outputs, which are content-addressed). `blobs` is every blob the entry
    /// needs, with its size, all already on the remote: a REAPI ActionResult lists them.
    fn put_action(&self, key: Digest, bytes: Vec<u8>, blobs: EntryBlobs) -> RemoteFuture<'_, ()>;
}

/// Bound a request-sized call by the remote's request budget (all its retries included),
/// whatever the backend does, so a backend that ignores its own deadlines cannot hang a run.
pub(crate) async fn bounded<T>(
    remote: &dyn RemoteBackend,
    op: &'static str,
    object: impl FnOnce() -> String,
    fut: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let limit = remote.timeouts().request_budget();
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

//! [`RemoteError`]: everything a remote cache call can fail with. The caller's policy is to
//! warn once and carry on with local work, so every variant names the remote and the object.

use std::path::PathBuf;

use heddle_cache::{CacheError, Digest};

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("failed to parse remote cache URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("failed to set up remote cache {remote}")]
    Setup {
        remote: String,
        #[source]
        source: opendal::Error,
    },
    /// The CA file (`HEDDLE_REMOTE_CA_FILE`) named for a TLS remote could not be read, or
    /// holds no certificate rustls can trust.
    #[error("failed to read the CA certificates {path} ({var}) for remote cache {remote}")]
    TlsCa {
        var: &'static str,
        path: PathBuf,
        remote: String,
        #[source]
        source: std::io::Error,
    },
    /// `HEDDLE_REMOTE_CLIENT_CERT` or `HEDDLE_REMOTE_CLIENT_KEY` set without the other, or
    /// both set for a remote that does not speak TLS.
    #[error("failed to use a client certificate for remote cache {remote}: {reason}")]
    ClientCert { remote: String, reason: String },
    /// A client certificate or key file could not be read, or holds no PEM block of its kind.
    #[error("failed to read the client {what} {path} ({var}) for remote cache {remote}")]
    TlsClientFile {
        what: &'static str,
        var: &'static str,
        path: PathBuf,
        remote: String,
        #[source]
        source: std::io::Error,
    },
    /// The client certificate and key were read but rustls refused them as a pair (a key that
    /// is not the certificate's, a block that does not parse).
    #[error(
        "failed to use the client certificate {cert} with the key {key} for remote cache {remote}"
    )]
    TlsClientPair {
        cert: PathBuf,
        key: PathBuf,
        remote: String,
        #[source]
        source: rustls::Error,
    },
    /// reqwest refused the TLS settings of an `https://` S3 or WebDAV remote.
    #[error("failed to set up the HTTP client for remote cache {remote}")]
    HttpSetup {
        remote: String,
        #[source]
        source: reqwest::Error,
    },
    /// `HEDDLE_REMOTE_HEADERS` could not be read; the reason never holds a value.
    #[error("failed to read the headers for remote cache {remote}: {reason}")]
    BadHeader { remote: String, reason: String },
    /// tonic refused the TLS settings of a `grpcs://` remote.
    #[error("failed to set up TLS for remote cache {remote}")]
    TlsSetup {
        remote: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The server refused, was unreachable, or did not answer within the timeout.
    #[error("failed to {op} {object} on remote cache {remote}")]
    Backend {
        op: &'static str,
        object: String,
        remote: String,
        #[source]
        source: opendal::Error,
    },
    /// A REAPI server refused, was unreachable, or broke off a call.
    #[error("failed to {op} {object} on remote cache {remote}")]
    Grpc {
        op: &'static str,
        object: String,
        remote: String,
        #[source]
        source: Box<tonic::Status>,
    },
    /// The connection broke or stalled in the middle of a blob.
    #[error("failed to {op} {object} on remote cache {remote}: transfer interrupted")]
    Transfer {
        op: &'static str,
        object: String,
        remote: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {op} {object} on remote cache {remote}: no answer within {secs} s")]
    Timeout {
        op: &'static str,
        object: String,
        remote: String,
        secs: u64,
    },
    /// The remote sent more bytes than the object may have (a blob longer than its entry
    /// says, an entry or manifest larger than heddle writes); reading stopped there.
    #[error("failed to read {object} from remote cache {remote}: it sent more than {limit} bytes")]
    TooLarge {
        object: String,
        remote: String,
        limit: u64,
    },
    /// The object is not a regular file (a directory, a link to a device): not read.
    #[error("failed to read {object} from remote cache {remote}: it is not a regular file")]
    NotAFile { object: String, remote: String },
    /// The remote sent a body slower than the floor throughput (`Timeouts::min_rate`).
    #[error("failed to read {object} from remote cache {remote}: {bytes} bytes in {secs} s, under the floor of {floor_kib} KiB/s")]
    TooSlow {
        object: String,
        remote: String,
        bytes: u64,
        secs: u64,
        floor_kib: u64,
    },
    /// The remote served bytes that do not hash to the digest they were asked for. They were
    /// discarded; nothing of them reached the local store.
    #[error("failed to verify blob {digest} from remote cache {remote}: its bytes hash to {actual} ({size} bytes)")]
    CorruptBlob {
        digest: Digest,
        actual: Digest,
        size: u64,
        remote: String,
    },
    #[error("failed to read action entry {key} from remote cache {remote}: {reason}")]
    BadEntry {
        key: Digest,
        remote: String,
        reason: String,
    },
    /// An entry not signed by a writer the reader trusts (`trust.rs`): a miss, and nothing it
    /// names was looked at.
    #[error("failed to trust action entry {key} from remote cache {remote}: {reason}")]
    Untrusted {
        key: Digest,
        remote: String,
        /// Boxed: a key it names is ~200 bytes (an ed25519 public key, decompressed).
        reason: Box<crate::trust::Untrusted>,
    },
    /// A tree manifest on the remote hashed right but is not one heddle would accept (a path
    /// out of the tree, an entry beneath a symlink, ...); nothing it lists was fetched.
    #[error("failed to accept tree manifest {digest} of action {key} from remote cache {remote}")]
    BadTree {
        key: Digest,
        digest: Digest,
        remote: String,
        #[source]
        source: CacheError,
    },
    /// An action entry on the remote names a blob the remote does not have.
    #[error(
        "failed to fetch blob {digest} named by action {key} from remote cache {remote}: not there"
    )]
    MissingBlob {
        key: Digest,
        digest: Digest,
        remote: String,
    },
    /// A local blob about to be uploaded no longer matches its digest; the upload was aborted.
    #[error(
        "failed to upload blob {digest}: the local copy at {path} no longer matches its digest"
    )]
    LocalCorrupt { digest: Digest, path: PathBuf },
    /// A local file a transfer reads or writes, worded as the local store words its own.
    #[error(transparent)]
    LocalIo(CacheError),
    #[error("failed to use the local store")]
    Local(#[from] CacheError),
    /// A write to a remote without a key to sign its entries with.
    #[error(
        "failed to write to remote cache {remote}: no signing key (run `heddle cache keygen`)"
    )]
    NoSigningKey { remote: String },
    #[error("failed to run a blocking local task")]
    Join(#[from] tokio::task::JoinError),
}

impl RemoteError {
    pub(crate) fn local_io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> RemoteError {
        let wrap = CacheError::io(op, path);
        move |source| RemoteError::LocalIo(wrap(source))
    }

    /// True when the remote could not be reached or did not answer in time, as opposed to
    /// answering wrongly: the caller may stop asking it for the rest of the run.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            RemoteError::Backend { .. }
                | RemoteError::Transfer { .. }
                | RemoteError::Timeout { .. }
                | RemoteError::TooSlow { .. }
                | RemoteError::Setup { .. }
        ) || matches!(self, RemoteError::Grpc { source, .. } if crate::reapi::is_unavailable_code(source.code()))
    }
}

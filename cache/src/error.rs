//! The error type of this crate.

use std::path::PathBuf;

use crate::Digest;

/// Everything that can go wrong in the cache. Each variant names the thing it failed on.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("failed to {op} {path}")]
    Io {
        /// What was being attempted ("read", "create directory", "rename into", ...).
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse digest {input:?}: expected 64 lowercase hex characters")]
    BadDigest { input: String },
    #[error(
        "failed to store {path}: unsupported file type (not a regular file, directory or symlink)"
    )]
    UnsupportedFileType { path: PathBuf },
    #[error("failed to encode path {path}: not valid UTF-8")]
    NonUtf8Path { path: PathBuf },
    #[error("failed to find blob {digest} in the store")]
    MissingBlob { digest: Digest },
    #[error("failed to serve blob {digest}: its content no longer matches its digest (removed from the store)")]
    CorruptBlob { digest: Digest },
    #[error("failed to decode tree manifest {digest}: {reason}")]
    BadTree { digest: Digest, reason: String },
    #[error("failed to encode action entry {key}")]
    EncodeAction {
        key: Digest,
        #[source]
        source: serde_json::Error,
    },
}

impl CacheError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> CacheError {
        let path = path.into();
        move |source| CacheError::Io { op, path, source }
    }
}

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
    #[error("failed to copy {from} to {to}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to store {path}: it is a symlink (to {target}); outputs must be regular files or folders written in the sandbox")]
    SymlinkOutput { path: PathBuf, target: PathBuf },
    #[error("failed to store folder {path}")]
    UnsafeTree {
        path: PathBuf,
        #[source]
        violation: crate::TreeViolation,
    },
    #[error("failed to keep input blob {digest} intact: its content changed while a stage held it (moved to {quarantined})")]
    InputModified {
        digest: Digest,
        quarantined: PathBuf,
    },
    #[error("failed to parse digest {input:?}: expected 64 lowercase hex characters")]
    BadDigest { input: String },
    #[error(
        "failed to store {path}: it is {kind}; only regular files, folders and symlinks are stored"
    )]
    UnsupportedFileType { path: PathBuf, kind: &'static str },
    /// A FIFO or a device where a file is hashed: reading it could block or never end.
    #[error("failed to hash {path}: it is {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("failed to encode path {path}: not valid UTF-8")]
    NonUtf8Path { path: PathBuf },
    #[error("failed to find blob {digest} in the store")]
    MissingBlob { digest: Digest },
    #[error("failed to serve blob {digest}: its content no longer matches its digest (removed from the store)")]
    CorruptBlob { digest: Digest },
    /// An entry or manifest gives a blob another size than the stored blob has, and the blob
    /// still hashes to its name: the record is wrong, not the blob, which is kept.
    #[error("failed to serve blob {digest}: it is recorded as {expected} bytes but has {actual} (the record is wrong; the blob is kept)")]
    WrongSize {
        digest: Digest,
        expected: u64,
        actual: u64,
    },
    #[error("failed to decode tree manifest {digest}: {reason}")]
    BadTree { digest: Digest, reason: String },
    #[error("failed to encode action entry {key}")]
    EncodeAction {
        key: Digest,
        #[source]
        source: serde_json::Error,
    },
}

/// The error and each of its causes, joined by ": " (for one-line messages in records).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    causes(e).join(": ")
}

/// The texts of `e` and of each of its causes, in order: what every renderer of an error prints
/// (the binary's `caused by:` lines, [`error_chain`]'s one line). heddle's own errors never repeat
/// their source in their message; a cause whose text the previous one ends with is still
/// skipped, for errors of other crates that do (bollard's print their `#[from]` cause).
pub fn causes(e: &dyn std::error::Error) -> Vec<String> {
    // Trailing newlines dropped: the TOML parser ends its snippet with one.
    let mut out = vec![e.to_string().trim_end().to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string().trim_end().to_string();
        if !out.last().is_some_and(|last| last.ends_with(&text)) {
            out.push(text);
        }
        cause = c.source();
    }
    out
}

impl CacheError {
    /// The error for a failed `op` on `path`, as a `map_err` argument.
    pub fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> CacheError {
        let path = path.into();
        move |source| CacheError::Io { op, path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct E {
        text: &'static str,
        #[source]
        source: Option<Box<E>>,
    }

    fn chain(texts: &[&'static str]) -> E {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(E {
                    text,
                    source: source.map(Box::new),
                })
            })
            .unwrap()
    }

    #[test]
    fn each_cause_once_without_trailing_newlines() {
        let e = chain(&[
            "failed to read p.lock",
            "parse error at line 2\n  |\n2 | x\n",
            "os error",
        ]);
        assert_eq!(
            causes(&e),
            [
                "failed to read p.lock",
                "parse error at line 2\n  |\n2 | x",
                "os error"
            ]
        );
        // Another crate's error that prints its source: the source is not repeated.
        let e = chain(&["client error: refused", "refused"]);
        assert_eq!(causes(&e), ["client error: refused"]);
        assert_eq!(error_chain(&e), "client error: refused");
    }
}

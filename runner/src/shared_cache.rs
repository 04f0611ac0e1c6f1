//! The shared (remote) cache as the scheduler sees it: asked on a local miss, offered every
//! action stored locally. The runner knows no backend: the binary plugs one in
//! (`heddle-remote`: S3, WebDAV, a directory), so the scheduler stays free of storage clients.
//!
//! A shared cache may never make a run wrong or stuck. [`RemoteGate`] holds that policy in one
//! place: the first sign that the remote is unreachable (or too slow to be of use) turns it off
//! for the rest of the run with one warning; an entry or blob that fails verification is a miss
//! (the instance runs locally) with one warning per run; so is an entry no trusted writer
//! signed, with a warning of its own.
//!
//! It also bounds how many fetches are in flight ([`FETCHES_IN_FLIGHT`], or
//! [`RemoteGate::with_fetches`]): a cold no-op starts hundreds of lookups at once, and a
//! remote answers a few dozen concurrent requests faster than hundreds of connections
//! contending for it (benches/RESULTS.md, issue 28).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use heddle_cache::{ActionEntry, Digest};
use tokio::sync::Semaphore;

/// Fetches in flight at once unless the binary says otherwise: each is a round trip for the
/// entry and one per blob it lacks, so a cold no-op of 1,000 instances against a remote
/// 10 ms away takes 1,000 x 20 ms / this.
pub const FETCHES_IN_FLIGHT: usize = 32;

/// Why a shared-cache call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SharedCacheError {
    pub kind: FailureKind,
    /// The message with its causes, as the user should read it.
    pub message: String,
}

/// What kind of failure a [`SharedCacheError`] is, which decides the gate's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The remote could not be reached, timed out or sends too slowly: off for the run.
    Unavailable,
    /// It answered with data that failed verification: a miss.
    Invalid,
    /// An entry no writer the reader trusts signed: a miss.
    Untrusted,
}

pub use heddle_schema::RemoteSigner;

/// A shared cache of actions and blobs. Implementations verify every blob by sha256 before
/// it enters the local store and write blobs before the entry that names them.
pub trait SharedCache: Send + Sync {
    /// The remote's address for messages (`s3://bucket/prefix`), never with credentials.
    fn describe(&self) -> String;
    /// Whether this run may upload (`--remote-cache-mode readwrite`).
    fn writable(&self) -> bool;
    /// The remote's entry for `key`, without its blobs (for `heddle plan`, which needs the
    /// output digests to compute downstream keys). The entry is checked to be `key`'s.
    fn entry(&self, key: Digest) -> BoxFuture<'_, Result<Option<ActionEntry>, SharedCacheError>>;
    /// Bring `key`'s entry and every blob it names into the local store. `outputs` are the
    /// names the action declares: an entry naming others is refused before any download.
    /// `Ok(Some(signer))` when the local store now holds the entry, signed by `signer`.
    fn fetch(
        &self,
        key: Digest,
        outputs: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<RemoteSigner>, SharedCacheError>>;
    /// Upload `key`'s blobs the remote lacks, then its entry. Returns the bytes uploaded.
    fn push(&self, key: Digest) -> BoxFuture<'_, Result<u64, SharedCacheError>>;
}

/// What the gate tells the user; the scheduler forwards it as a run message.
pub type Warn = Box<dyn Fn(String) + Send + Sync>;

/// A [`SharedCache`] behind the run's degradation policy.
pub struct RemoteGate {
    inner: Arc<dyn SharedCache>,
    down: AtomicBool,
    warned_bad: AtomicBool,
    warned_untrusted: AtomicBool,
    fetched: AtomicU64,
    pushed: AtomicU64,
    warn: Warn,
    /// One permit per fetch in flight.
    fetches: Semaphore,
}

impl std::fmt::Debug for RemoteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteGate")
            .field("remote", &self.inner.describe())
            .field("down", &self.is_down())
            .finish()
    }
}

impl RemoteGate {
    pub fn new(inner: Arc<dyn SharedCache>, warn: Warn) -> RemoteGate {
        RemoteGate {
            inner,
            down: AtomicBool::new(false),
            warned_bad: AtomicBool::new(false),
            warned_untrusted: AtomicBool::new(false),
            fetched: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            warn,
            fetches: Semaphore::new(FETCHES_IN_FLIGHT),
        }
    }

    /// The same gate, with at most `n` (at least 1) fetches in flight.
    pub fn with_fetches(self, n: usize) -> RemoteGate {
        RemoteGate {
            fetches: Semaphore::new(n.max(1)),
            ..self
        }
    }

    pub fn describe(&self) -> String {
        self.inner.describe()
    }

    pub fn writable(&self) -> bool {
        self.inner.writable()
    }

    /// Whether the remote was given up on during this run.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// Actions fetched and pushed so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.fetched.load(Ordering::Relaxed),
            self.pushed.load(Ordering::Relaxed),
        )
    }

    /// The remote's entry for `key`; `None` on a miss or any failure.
    pub async fn entry(&self, key: Digest) -> Option<ActionEntry> {
        if self.is_down() {
            return None;
        }
        match self.inner.entry(key).await {
            Ok(found) => found,
            Err(e) => {
                self.failed(e);
                None
            }
        }
    }

    /// Who signed `key`'s entry, when it was fetched into the local store. `outputs`: the
    /// names the action declares.
    pub async fn fetch(&self, key: Digest, outputs: Vec<String>) -> Option<RemoteSigner> {
        if self.is_down() {
            return None;
        }
        let _permit = self
            .fetches
            .acquire()
            .await
            .expect("the gate's semaphore is never closed");
        // The remote may have been given up on while this fetch waited for its turn.
        if self.is_down() {
            return None;
        }
        match self.inner.fetch(key, outputs).await {
            Ok(Some(signer)) => {
                self.fetched.fetch_add(1, Ordering::Relaxed);
                Some(signer)
            }
            Ok(None) => None,
            Err(e) => {
                self.failed(e);
                None
            }
        }
    }

    /// Upload `key` when this run may write; failures only warn.
    pub async fn push(&self, key: Digest) {
        if self.is_down() || !self.writable() {
            return;
        }
        match self.inner.push(key).await {
            Ok(_) => {
                self.pushed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed(e);
            }
        }
    }

    /// Apply the policy to a failure; always `false` (the caller treats it as a miss).
    fn failed(&self, e: SharedCacheError) -> bool {
        let remote = self.inner.describe();
        match e.kind {
            FailureKind::Unavailable => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    (self.warn)(format!(
                        "warning: remote cache {remote} is unavailable; this run continues with the local cache only: {}",
                        e.message
                    ));
                }
            }
            FailureKind::Invalid => {
                if !self.warned_bad.swap(true, Ordering::Relaxed) {
                    (self.warn)(format!(
                        "warning: remote cache {remote} returned data that failed verification; it was not used (the instance runs here): {}",
                        e.message
                    ));
                }
            }
            FailureKind::Untrusted => {
                if !self.warned_untrusted.swap(true, Ordering::Relaxed) {
                    (self.warn)(format!(
                        "warning: remote cache {remote} holds entries no trusted writer signed; they were not used (those instances run here): {}",
                        e.message
                    ));
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A shared cache that fails every call in one way: enough to pin the gate's policy.
    struct Failing {
        kind: FailureKind,
        calls: AtomicU64,
    }

    impl SharedCache for Failing {
        fn describe(&self) -> String {
            "test://failing".into()
        }
        fn writable(&self) -> bool {
            true
        }
        fn entry(&self, _: Digest) -> BoxFuture<'_, Result<Option<ActionEntry>, SharedCacheError>> {
            self.fail()
        }
        fn fetch(
            &self,
            _: Digest,
            _: Vec<String>,
        ) -> BoxFuture<'_, Result<Option<RemoteSigner>, SharedCacheError>> {
            self.fail()
        }
        fn push(&self, _: Digest) -> BoxFuture<'_, Result<u64, SharedCacheError>> {
            self.fail()
        }
    }

    impl Failing {
        /// Every call counts and fails the same way, whatever it would have returned.
        fn fail<T: Send + 'static>(&self) -> BoxFuture<'_, Result<T, SharedCacheError>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let kind = self.kind;
            Box::pin(async move {
                Err(SharedCacheError {
                    kind,
                    message: "boom".into(),
                })
            })
        }
    }

    fn gate(kind: FailureKind) -> (RemoteGate, Arc<Failing>, Arc<Mutex<Vec<String>>>) {
        let inner = Arc::new(Failing {
            kind,
            calls: AtomicU64::new(0),
        });
        let said = Arc::new(Mutex::new(Vec::new()));
        let sink = said.clone();
        let g = RemoteGate::new(
            inner.clone(),
            Box::new(move |m| sink.lock().unwrap().push(m)),
        );
        (g, inner, said)
    }

    #[tokio::test]
    async fn an_unreachable_remote_is_asked_once_and_warned_about_once() {
        let (g, inner, said) = gate(FailureKind::Unavailable);
        let key = Digest::of_bytes(b"k");
        assert!(g.fetch(key, Vec::new()).await.is_none());
        assert!(g.fetch(key, Vec::new()).await.is_none());
        assert!(g.entry(key).await.is_none());
        g.push(key).await;
        assert_eq!(inner.calls.load(Ordering::Relaxed), 1);
        let said = said.lock().unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("unavailable") && said[0].contains("boom"));
        assert!(g.is_down());
    }

    #[tokio::test]
    async fn bad_data_is_a_miss_that_keeps_the_remote_on_and_warns_once() {
        let (g, inner, said) = gate(FailureKind::Invalid);
        let key = Digest::of_bytes(b"k");
        assert!(g.fetch(key, Vec::new()).await.is_none());
        assert!(g.fetch(key, Vec::new()).await.is_none());
        assert_eq!(inner.calls.load(Ordering::Relaxed), 2);
        assert!(!g.is_down());
        assert_eq!(said.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn untrusted_entries_are_misses_with_one_warning_of_their_own() {
        let (g, inner, said) = gate(FailureKind::Untrusted);
        let key = Digest::of_bytes(b"k");
        for _ in 0..3 {
            assert!(g.fetch(key, Vec::new()).await.is_none());
        }
        assert_eq!(inner.calls.load(Ordering::Relaxed), 3);
        assert!(!g.is_down());
        let said = said.lock().unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("no trusted writer signed"), "{said:?}");
    }
}

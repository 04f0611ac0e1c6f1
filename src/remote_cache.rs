//! The bridge from the runner's [`SharedCache`] interface to `heddle-remote`'s backends, and
//! the resolution of which remote (if any) a command uses. Kept in the binary so the runner
//! links no storage client and the remote crate knows nothing of pipelines.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;

use heddle_cache::{ActionEntry, Digest, OutputEntry, Store};
use heddle_remote::{PushOutcome, RemoteCache, RemoteError, Writer};
use heddle_runner::key::{KeyParts, Reason};
use heddle_runner::preview::{CacheHistory, History};
use heddle_runner::shared_cache::RemoteGate;
use heddle_runner::shared_cache::{FailureKind, RemoteSigner, SharedCache, SharedCacheError};

pub use crate::remote_setup::{RemoteFlags, RemoteSetupError};

/// The remote this command uses, from (lowest first) the user config, the project's
/// `.heddle/config.toml`, `HEDDLE_REMOTE_CACHE[_MODE]` and the flags, with the trust files and
/// signing key (`remote_setup.rs`). `Ok(None)`: none.
pub fn open(
    project_root: &Path,
    flags: &RemoteFlags,
    store: Arc<Store>,
) -> Result<Option<Arc<dyn SharedCache>>, RemoteSetupError> {
    let Some(cache) = crate::remote_setup::open_cache(project_root, flags)? else {
        return Ok(None);
    };
    Ok(Some(Arc::new(RemoteBridge { cache, store })))
}

struct RemoteBridge {
    cache: RemoteCache,
    store: Arc<Store>,
}

fn shared_error(e: RemoteError) -> SharedCacheError {
    let kind = match &e {
        e if e.is_unavailable() => FailureKind::Unavailable,
        RemoteError::Untrusted { .. } => FailureKind::Untrusted,
        _ => FailureKind::Invalid,
    };
    SharedCacheError {
        kind,
        message: heddle_cache::error_chain(&e),
    }
}

/// How a record names a writer.
pub fn signer_of(writer: &Writer) -> RemoteSigner {
    RemoteSigner {
        name: writer.name.clone(),
        key: writer.key.to_string(),
    }
}

impl SharedCache for RemoteBridge {
    fn describe(&self) -> String {
        self.cache.name().to_string()
    }

    fn writable(&self) -> bool {
        self.cache.mode().can_write()
    }

    fn entry(&self, key: Digest) -> BoxFuture<'_, Result<Option<ActionEntry>, SharedCacheError>> {
        Box::pin(async move {
            // Checked as a fetch checks it (bounded read, the key, the signature). `plan`
            // waits one request timeout, not a fetch's whole retry budget.
            let limit = self.cache.backend().timeouts().request;
            let found = match tokio::time::timeout(limit, self.cache.read_entry(key, None)).await {
                Ok(found) => found.map_err(shared_error)?,
                Err(_) => {
                    return Err(SharedCacheError {
                        kind: FailureKind::Unavailable,
                        message: format!(
                            "no answer within {} s reading action entry {key}",
                            limit.as_secs()
                        ),
                    })
                }
            };
            Ok(found.map(|(entry, _)| entry))
        })
    }

    fn fetch(
        &self,
        key: Digest,
        outputs: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<RemoteSigner>, SharedCacheError>> {
        Box::pin(async move {
            let declared: BTreeSet<String> = outputs.into_iter().collect();
            let fetched = self
                .cache
                .fetch_action(key, &self.store, Some(&declared))
                .await
                .map_err(shared_error)?;
            Ok(fetched.and_then(|(_, report)| report.signer.as_ref().map(signer_of)))
        })
    }

    fn push(&self, key: Digest) -> BoxFuture<'_, Result<u64, SharedCacheError>> {
        Box::pin(async move {
            match self.cache.push_action(key, &self.store).await {
                Ok(PushOutcome::Pushed(report)) => Ok(report.bytes_uploaded),
                Ok(PushOutcome::ReadOnly | PushOutcome::NotLocal) => Ok(0),
                Err(e) => Err(shared_error(e)),
            }
        })
    }
}

/// The run's [`RemoteGate`]: warnings go to stderr, where the user reads them whatever the
/// progress mode.
/// `HEDDLE_REMOTE_CACHE_FETCHES=N` sets how many fetches may be in flight at once (default
/// [`heddle_runner::shared_cache::FETCHES_IN_FLIGHT`]).
pub fn gate(shared: Arc<dyn SharedCache>) -> Arc<RemoteGate> {
    let gate = RemoteGate::new(
        shared,
        Box::new(|m| eprintln!("{}", crate::printable::printable(&m))),
    );
    let fetches = std::env::var(FETCHES_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok());
    Arc::new(match fetches {
        Some(n) => gate.with_fetches(n),
        None => gate,
    })
}

/// The environment variable bounding a run's remote fetches in flight.
pub const FETCHES_VAR: &str = "HEDDLE_REMOTE_CACHE_FETCHES";

/// `heddle plan` with a shared cache: a local miss that the remote holds is `cached (remote)`,
/// and its recorded outputs let the plan compute the keys downstream of it, as a run would.
pub struct RemoteHistory<'a> {
    local: CacheHistory<'a>,
    remote: Arc<RemoteGate>,
    found: Mutex<HashSet<Digest>>,
}

impl<'a> RemoteHistory<'a> {
    pub fn new(store: &'a Store, remote: Arc<RemoteGate>) -> RemoteHistory<'a> {
        RemoteHistory {
            local: CacheHistory::new(store),
            remote,
            found: Mutex::default(),
        }
    }
}

impl History for RemoteHistory<'_> {
    fn lookup(
        &self,
        label: &str,
        family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>> {
        if let Some(hit) = self.local.lookup(label, family, key) {
            return Some(hit);
        }
        // The preview is synchronous and runs on the CLI's multi-thread runtime.
        let remote = self.remote.clone();
        let key = *key;
        let entry = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async move { remote.entry(key).await })
        })?;
        self.found.lock().expect("found").insert(key);
        Some(entry.outputs)
    }

    fn explain(&self, label: &str, family: &str, parts: &KeyParts) -> Reason {
        self.local.explain(label, family, parts)
    }

    fn is_remote(&self, key: &Digest) -> bool {
        self.found.lock().expect("found").contains(key)
    }
}

/// What `heddle cache push` did.
#[derive(Debug, Default)]
pub struct PushSummary {
    pub pushed: usize,
    pub missing_locally: Vec<Digest>,
}

/// Upload every action in `keys` the local store holds (blobs first, entries last).
pub async fn push_keys(
    shared: &dyn SharedCache,
    store: &Store,
    keys: &[Digest],
) -> Result<PushSummary, SharedCacheError> {
    let mut summary = PushSummary::default();
    for key in keys {
        if !matches!(store.lookup_action(key), Ok(Some(_))) {
            summary.missing_locally.push(*key);
            continue;
        }
        shared.push(*key).await?;
        summary.pushed += 1;
    }
    Ok(summary)
}

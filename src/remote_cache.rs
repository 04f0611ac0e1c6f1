//! The bridge from the runner's [`SharedCache`] interface to `heddle-remote`'s backends, and
//! the resolution of which remote (if any) a command uses. Kept in the binary so the runner
//! links no storage client and the remote crate knows nothing of pipelines.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use heddle_cache::{ActionEntry, Digest, OutputEntry, Store};
use heddle_remote::{
    open_backend, resolve_remote_trusting, PushOutcome, RemoteBackend, RemoteCache, RemoteError,
    RemoteMode, RemoteSettings, Timeouts,
};
use heddle_runner::key::{KeyParts, Reason};
use heddle_runner::sched::{CacheHistory, History};
use heddle_runner::shared_cache::RemoteGate;
use heddle_runner::shared_cache::{SharedCache, SharedCacheError};

/// The `--remote-cache` / `--remote-cache-mode` flags of a command.
#[derive(Debug, Clone, Default)]
pub struct RemoteFlags {
    pub url: Option<String>,
    pub mode: Option<String>,
}

/// Why no remote could be set up: a configuration the user must fix (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RemoteSetupError {
    #[error(transparent)]
    Config(#[from] Box<heddle_remote::ConfigError>),
    #[error("cannot use remote cache {url}")]
    Open {
        url: String,
        #[source]
        source: Box<RemoteError>,
    },
}

/// The remote this command uses, from (lowest first) the user config, the project's
/// `.heddle/config.toml`, `HEDDLE_REMOTE_CACHE[_MODE]` and the flags. `Ok(None)`: none.
pub fn open(
    project_root: &Path,
    flags: &RemoteFlags,
    store: Arc<Store>,
) -> Result<Option<Arc<dyn SharedCache>>, RemoteSetupError> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(settings) = resolve(project_root, flags, &env)? else {
        return Ok(None);
    };
    let backend = open_backend(&settings, &env, Timeouts::default()).map_err(|source| {
        RemoteSetupError::Open {
            url: settings.url.to_string(),
            source: Box::new(source),
        }
    })?;
    Ok(Some(Arc::new(RemoteBridge {
        cache: RemoteCache::with_backend(backend.clone(), settings.mode),
        remote: backend,
        store,
    })))
}

/// The settings the user's layers and a trusted project give ([`crate::trust`]). An untrusted
/// project's `.heddle/config.toml` may only turn the remote down; when it asks for more, one
/// warning says what was not used and how to allow it.
fn resolve(
    project_root: &Path,
    flags: &RemoteFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<RemoteSettings>, RemoteSetupError> {
    let (url, mode) = (flags.url.as_deref(), flags.mode.as_deref());
    let file = project_root.join(".heddle").join("config.toml");
    if !file.is_file() {
        // No project layer: nothing to trust, one resolution.
        return Ok(resolve_remote_trusting(project_root, env, url, mode, true).map_err(Box::new)?);
    }
    let trust = crate::trust::check(project_root, env);
    let asked = resolve_remote_trusting(project_root, env, url, mode, true).map_err(Box::new)?;
    if trust.is_trusted() {
        return Ok(asked);
    }
    let own = resolve_remote_trusting(project_root, env, url, mode, false).map_err(Box::new)?;
    if own != asked {
        let what = match &asked {
            Some(s) => format!(
                "the remote cache settings ({} {})",
                s.url,
                mode_word(s.mode)
            ),
            None => "the remote cache settings".into(),
        };
        crate::trust::warn_ignored(project_root, &file, &what, trust);
    }
    Ok(own)
}

fn mode_word(m: RemoteMode) -> &'static str {
    if m.can_write() {
        "readwrite"
    } else {
        "read"
    }
}

/// The remote this command uses, as an address another heddle's `--remote-cache` takes (a
/// cluster job's worker), and whether it may be written. `Ok(None)`: none configured. The same
/// trust rule as every other command: an untrusted project's file cannot choose it.
pub fn address(
    project_root: &Path,
    flags: &RemoteFlags,
) -> Result<Option<(String, bool)>, RemoteSetupError> {
    let env = |k: &str| std::env::var(k).ok();
    let settings = resolve(project_root, flags, &env)?;
    Ok(settings.map(|s| (s.url.to_string(), s.mode.can_write())))
}

struct RemoteBridge {
    cache: RemoteCache,
    /// The same backend, for reading an entry alone (`heddle plan`).
    remote: Arc<dyn RemoteBackend>,
    store: Arc<Store>,
}

fn shared_error(e: RemoteError) -> SharedCacheError {
    SharedCacheError {
        unavailable: e.is_unavailable(),
        message: heddle_cache::error_chain(&e),
    }
}

impl SharedCache for RemoteBridge {
    fn describe(&self) -> String {
        self.remote.name().to_string()
    }

    fn writable(&self) -> bool {
        self.cache.mode().can_write()
    }

    fn entry(&self, key: Digest) -> BoxFuture<'_, Result<Option<ActionEntry>, SharedCacheError>> {
        Box::pin(async move {
            let limit = self.remote.timeouts().request;
            let bytes = match tokio::time::timeout(limit, self.remote.get_action(key)).await {
                Ok(Ok(Some(bytes))) => bytes,
                Ok(Ok(None)) => return Ok(None),
                Ok(Err(e)) => return Err(shared_error(e)),
                Err(_) => {
                    return Err(SharedCacheError {
                        unavailable: true,
                        message: format!(
                            "no answer within {} s reading action entry {key}",
                            limit.as_secs()
                        ),
                    })
                }
            };
            let bad = |reason: String| SharedCacheError {
                unavailable: false,
                message: format!("action entry {key} from {}: {reason}", self.remote.name()),
            };
            let entry: ActionEntry =
                serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
            if entry.key != key {
                return Err(bad(format!("it is the entry of action {}", entry.key)));
            }
            Ok(Some(entry))
        })
    }

    fn fetch(&self, key: Digest) -> BoxFuture<'_, Result<bool, SharedCacheError>> {
        Box::pin(async move {
            match self.cache.fetch_action(key, &self.store).await {
                Ok(found) => Ok(found.is_some()),
                Err(e) => Err(shared_error(e)),
            }
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
pub fn gate(shared: Arc<dyn SharedCache>) -> Arc<RemoteGate> {
    Arc::new(RemoteGate::new(
        shared,
        Box::new(|m| eprintln!("{}", crate::printable::printable(&m))),
    ))
}

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

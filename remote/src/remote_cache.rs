//! [`RemoteCache`]: the narrow face of this crate for the scheduler. Opened from resolved
//! settings, it reads through on a local miss and writes back after a local record, and the
//! caller needs to know nothing of backends, blobs or write-back order.

use std::collections::BTreeSet;
use std::sync::Arc;

use heddle_cache::{ActionEntry, Digest, Store};

use crate::{
    fetch_action, open_backend, push_action, read_entry, FetchReport, PushReport, ReadRules,
    RemoteBackend, RemoteError, RemoteMode, RemoteSettings, SigningKey, Timeouts, Writer,
};

/// A remote cache, the mode it was configured with and what its reader accepts.
#[derive(Clone)]
pub struct RemoteCache {
    backend: Arc<dyn RemoteBackend>,
    mode: RemoteMode,
    rules: ReadRules,
    /// The key entries this machine writes are signed with; required to write.
    signer: Option<Arc<SigningKey>>,
}

/// What [`RemoteCache::push_action`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// The entry is on the remote, with every blob it names.
    Pushed(PushReport),
    /// The remote is configured `read`: nothing was sent.
    ReadOnly,
    /// The local store has no servable entry for the key (never recorded, or a blob of it is
    /// missing or corrupt): nothing was sent.
    NotLocal,
}

impl RemoteCache {
    /// Open the remote `settings` name. Makes no request: a remote that is down shows up as
    /// an error on the first call, which [`RemoteError::is_unavailable`] recognises.
    pub fn open(
        settings: &RemoteSettings,
        env: &dyn Fn(&str) -> Option<String>,
        timeouts: Timeouts,
    ) -> Result<RemoteCache, RemoteError> {
        Ok(RemoteCache::with_backend(
            open_backend(settings, env, timeouts)?,
            settings.mode,
        ))
    }

    /// A remote cache over a backend opened by other means (tests, a custom backend).
    pub fn with_backend(backend: Arc<dyn RemoteBackend>, mode: RemoteMode) -> RemoteCache {
        RemoteCache {
            backend,
            mode,
            rules: ReadRules::default(),
            signer: None,
        }
    }

    /// The same cache, reading under `rules` (by default no writer is trusted: every entry is
    /// a miss).
    pub fn with_rules(self, rules: ReadRules) -> RemoteCache {
        RemoteCache { rules, ..self }
    }

    /// The same cache, signing what it writes with `signer`.
    pub fn with_signer(self, signer: Arc<SigningKey>) -> RemoteCache {
        RemoteCache {
            signer: Some(signer),
            ..self
        }
    }

    /// What to call the remote in messages; never a password.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    pub fn mode(&self) -> RemoteMode {
        self.mode
    }

    /// On a local miss: bring action `key` from the remote into `local` (entry and every blob
    /// it names, each verified by sha256 as it streams in; tree manifests validated), and
    /// record it there. `declared`: the output names the action declares, when known; an
    /// entry naming others is refused before anything is downloaded. `Ok(None)`: the remote
    /// does not have it. On an error nothing is recorded locally; the caller runs the action
    /// itself.
    pub async fn fetch_action(
        &self,
        key: Digest,
        local: &Arc<Store>,
        declared: Option<&BTreeSet<String>>,
    ) -> Result<Option<(ActionEntry, FetchReport)>, RemoteError> {
        fetch_action(&*self.backend, local.clone(), key, &self.rules, declared).await
    }

    /// Action `key`'s entry alone, checked as [`RemoteCache::fetch_action`] checks it
    /// (`heddle plan` needs the output digests, not the blobs).
    pub async fn read_entry(
        &self,
        key: Digest,
        declared: Option<&BTreeSet<String>>,
    ) -> Result<Option<(ActionEntry, Writer)>, RemoteError> {
        read_entry(&*self.backend, key, &self.rules, declared).await
    }

    pub fn backend(&self) -> &Arc<dyn RemoteBackend> {
        &self.backend
    }

    /// After a local record: send action `key` from `local` to the remote, blobs it lacks
    /// first and the entry last, unless the remote is read-only.
    pub async fn push_action(
        &self,
        key: Digest,
        local: &Arc<Store>,
    ) -> Result<PushOutcome, RemoteError> {
        if !self.mode.can_write() {
            return Ok(PushOutcome::ReadOnly);
        }
        let Some(signer) = self.signer.clone() else {
            return Err(RemoteError::NoSigningKey {
                remote: self.name().to_string(),
            });
        };
        let store = local.clone();
        // lookup_action stats (and may re-hash) the entry's blobs: blocking work.
        let entry = tokio::task::spawn_blocking(move || store.lookup_action(&key)).await??;
        let Some(entry) = entry else {
            return Ok(PushOutcome::NotLocal);
        };
        Ok(PushOutcome::Pushed(
            push_action(&*self.backend, local, &entry, &signer).await?,
        ))
    }
}

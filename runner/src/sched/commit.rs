//! The group-commit actor: instances hand their action entries to one task, which makes whatever
//! queued within a short window durable in one go, so one fsync covers many actions and a stage
//! never waits for its own.

use std::sync::Arc;
use std::time::Duration;

use heddle_cache::{ActionEntry, Digest, KeyLock, Store};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{oneshot, Semaphore};

use crate::cluster::Driver;
use crate::shared_cache::RemoteGate;

use super::{blocking, Event, Note};

/// An action to record, with the key lock held until it is durable (so a process waiting on
/// the key then finds it), or a request to report when everything sent before is recorded.
pub(super) enum Commit {
    Action(Box<ActionEntry>, Option<KeyLock>),
    Flush(oneshot::Sender<()>),
}

/// How long the committer gathers actions before making them durable in one go.
const COMMIT_WINDOW: Duration = Duration::from_millis(100);

/// Group commit: whatever queued while the previous batch was being made durable goes in the
/// next one.
pub(super) async fn commit_loop(
    store: Arc<Store>,
    mut rx: UnboundedReceiver<Commit>,
    events: UnboundedSender<Event>,
    remote: Option<Arc<RemoteGate>>,
    cluster: Option<Arc<Driver>>,
) {
    let mut pushes = RemotePushes::new(remote);
    while let Some(first) = rx.recv().await {
        let mut entries = Vec::new();
        let mut locks = Vec::new();
        let mut flushes = Vec::new();
        let mut take = |m: Commit| match m {
            Commit::Action(e, l) => {
                entries.push(*e);
                locks.push(l);
            }
            Commit::Flush(f) => flushes.push(f),
        };
        let mut flushing = matches!(first, Commit::Flush(_));
        take(first);
        // Gather for a short window: an fsync stalls the filesystem's journal for everyone, so
        // fewer, larger commits keep it off the stages' critical path. A flush ends the wait.
        let deadline = tokio::time::Instant::now() + COMMIT_WINDOW;
        while !flushing {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => {
                    flushing = matches!(m, Commit::Flush(_));
                    take(m);
                }
                _ => break,
            }
        }
        if !entries.is_empty() {
            let st = store.clone();
            let n = entries.len();
            // A cluster worker stored its action on the shared cache, blobs first and the
            // entry last; one whose outputs the driver read back from there is not pushed again.
            let keys: Vec<Digest> = entries
                .iter()
                .filter(|e| !cluster.as_ref().is_some_and(|c| c.on_remote(e)))
                .map(|e| e.key)
                .collect();
            let res = blocking(move || st.record_actions(&entries)).await;
            drop(locks);
            match res {
                Ok(()) => pushes.start(keys),
                Err(e) => {
                    let _ = events.send(Event::Note(Note::CommitFailed {
                        actions: n,
                        error: e.to_string(),
                    }));
                }
            }
        }
        if !flushes.is_empty() {
            // A flush is the run's end: what it stored must be on the shared cache first.
            pushes.finish().await;
        }
        for f in flushes {
            let _ = f.send(());
        }
    }
}

/// Wait until every action sent before is durable.
pub(super) async fn flush(commits: &UnboundedSender<Commit>) {
    let (flushed, wait) = oneshot::channel();
    if commits.send(Commit::Flush(flushed)).is_ok() {
        let _ = wait.await;
    }
}

/// Write-back: each action, once durable locally, is uploaded in the background (blobs first,
/// the entry last), a few at a time; the run waits for the uploads before it ends.
struct RemotePushes {
    remote: Option<Arc<RemoteGate>>,
    slots: Arc<Semaphore>,
    running: tokio::task::JoinSet<()>,
}

impl RemotePushes {
    /// Uploads at once: enough to hide request latency, few enough not to starve the stages.
    const PARALLEL: usize = 4;

    fn new(remote: Option<Arc<RemoteGate>>) -> RemotePushes {
        RemotePushes {
            remote: remote.filter(|r| r.writable()),
            slots: Arc::new(Semaphore::new(Self::PARALLEL)),
            running: tokio::task::JoinSet::new(),
        }
    }

    fn start(&mut self, keys: Vec<Digest>) {
        let Some(remote) = &self.remote else { return };
        for key in keys {
            let (remote, slots) = (remote.clone(), self.slots.clone());
            self.running.spawn(async move {
                let _slot = slots.acquire_owned().await;
                remote.push(key).await;
            });
        }
    }

    async fn finish(&mut self) {
        while self.running.join_next().await.is_some() {}
    }
}

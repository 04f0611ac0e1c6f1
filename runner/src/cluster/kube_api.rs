//! Kubernetes Jobs as the poller's [`Engine`], through the API server with kube-rs. The
//! manifest and the status mapping are [`super::kubernetes`]'s pure functions; this module is
//! the request sequence:
//!
//! - submit: `POST` the Job. `409 AlreadyExists` means a Job of that name (the key's) exists:
//!   one `GET`; a live one is adopted, an ended one (an earlier run's leftover, its result not
//!   in the cache or the driver would not submit) is deleted and created again once.
//! - status: one `LIST` of heddle's Jobs in the namespace (label selector), then one `WATCH`
//!   from that list's `resourceVersion`, kept open by a task of its own. The poller's per-tick
//!   query is answered from what the list and the watch said, so a tick costs no request at
//!   all, whatever the number of jobs. A `410 Gone` (the version is too old) relists; a watch
//!   the server closed is reopened from the last version seen.
//! - cancel: `DELETE` each Job with `propagationPolicy: Background` (its pod goes with it).
//! - sweep: one `DELETE` of the collection labelled with the run.
//!
//! Jobs travel as [`DynamicObject`]s, not k8s-openapi's typed `Job`: heddle writes the manifest
//! as JSON and reads only the metadata and `status`, and the typed Job's serde code (its pod
//! template, containers, volumes) was about 2 MB of the binary (benches/RESULTS.md, M22).
//!
//! No API server can run where this was written: the sequence is tested against kube's mock
//! service (the tests below), never against a real cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::TryStreamExt;
use k8s_openapi::api::batch::v1::Job as TypedJob;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use kube::Client;

use super::engine::{Engine, EngineError, JobRow, JobState, Submission, Submitted};
use super::kubernetes::{job_manifest, job_name, job_state, label_value, outcome_tag, PodJob};
use crate::hosts::KubeCluster;

/// Every Job heddle creates carries it; the list and the watch select by it.
const MANAGED: &str = "app.kubernetes.io/managed-by=heddle";

const CONFIG: &str = "load a Kubernetes config (KUBECONFIG, ~/.kube/config, or in a pod)";

/// A Job as the API server sends it: its metadata, and the rest as JSON.
type Job = DynamicObject;

/// How long a failed list or watch waits before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// What the list and the watch said, by Job name: the Job's uid (a name is reused when an
/// ended Job is replaced; an event about the old one must not touch the new) and its state.
#[derive(Default)]
struct Seen {
    jobs: HashMap<String, (String, JobState)>,
    /// Why the last list failed, while it has not succeeded since.
    error: Option<String>,
}

pub struct Kubernetes {
    settings: KubeCluster,
    cluster: String,
    run_id: String,
    /// The shared cache's address, as the worker's `--remote-cache` takes it.
    remote: String,
    client: tokio::sync::OnceCell<Client>,
    seen: Arc<Mutex<Seen>>,
    /// The uid of the Job this run submitted or adopted under each name: it names the
    /// attempt in the worker's outcome tag.
    uids: Mutex<HashMap<String, String>>,
    watcher: tokio::sync::OnceCell<WatchTask>,
}

/// The watch loop; it stops with the engine.
struct WatchTask(tokio::task::JoinHandle<()>);

impl Drop for WatchTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Kubernetes {
    /// The client comes from the kubeconfig (or the in-cluster service account) at the first
    /// request.
    pub fn new(settings: KubeCluster, cluster: &str, run_id: &str, remote: &str) -> Kubernetes {
        Kubernetes {
            settings,
            cluster: cluster.to_string(),
            run_id: run_id.to_string(),
            remote: remote.to_string(),
            client: tokio::sync::OnceCell::new(),
            seen: Arc::default(),
            uids: Mutex::default(),
            watcher: tokio::sync::OnceCell::new(),
        }
    }

    /// With a client already made (the tests' mock service).
    pub fn with_client(
        settings: KubeCluster,
        cluster: &str,
        run_id: &str,
        remote: &str,
        client: Client,
    ) -> Kubernetes {
        let k = Kubernetes::new(settings, cluster, run_id, remote);
        k.client.set(client).ok();
        k
    }

    async fn api(&self) -> Result<Api<Job>, EngineError> {
        let client = self
            .client
            .get_or_try_init(|| async {
                let config = match &self.settings.context {
                    Some(context) => {
                        let options = kube::config::KubeConfigOptions {
                            context: Some(context.clone()),
                            ..Default::default()
                        };
                        kube::Config::from_kubeconfig(&options)
                            .await
                            .map_err(|e| api_error(CONFIG, &e))?
                    }
                    None => kube::Config::infer()
                        .await
                        .map_err(|e| api_error(CONFIG, &e))?,
                };
                Client::try_from(config).map_err(|e| api_error("make a Kubernetes client", &e))
            })
            .await?;
        // batch/v1 jobs, named from k8s-openapi's constants (no serde code comes with them).
        let jobs = ApiResource::erase::<TypedJob>(&());
        Ok(Api::namespaced_with(
            client.clone(),
            &self.settings.namespace,
            &jobs,
        ))
    }

    fn pod_job(&self, s: &Submission) -> PodJob {
        PodJob {
            key: s.key.clone(),
            label: s.label.clone(),
            run_id: self.run_id.clone(),
            namespace: self.settings.namespace.clone(),
            image: self.settings.image.clone(),
            remote: self.remote.clone(),
            cluster: self.cluster.clone(),
            resources: s.resources.clone(),
            resource_names: self.settings.resource_names.clone(),
            timeout_secs: s.timeout.map(|t| t.as_secs()),
        }
    }

    async fn create(&self, api: &Api<Job>, s: &Submission) -> Result<Submitted, EngineError> {
        let name = job_name(&s.key);
        let job: Job = serde_json::from_value(job_manifest(&self.pod_job(s))).map_err(|e| {
            EngineError::Api {
                op: format!("build Job {name}"),
                message: e.to_string(),
            }
        })?;
        // What the watch will say, said now: a Job the watch has not shown yet would read as
        // vanished at the next tick but one.
        let submitted = |job: &Job, adopted, state: JobState| {
            let seen_as = match &state {
                JobState::Submitted => JobState::Pending {
                    reason: "not yet scheduled".into(),
                },
                other => other.clone(),
            };
            let uid = uid_of(job);
            self.uids
                .lock()
                .expect("uids")
                .insert(name.clone(), uid.clone());
            let mut seen = self.seen.lock().expect("seen");
            // The watch may have told of this very Job already, and more recently.
            if seen.jobs.get(&name).is_none_or(|(known, _)| *known != uid) {
                seen.jobs.insert(name.clone(), (uid, seen_as));
            }
            Submitted {
                id: name.clone(),
                adopted,
                state,
            }
        };
        match api.create(&PostParams::default(), &job).await {
            Ok(created) => return Ok(submitted(&created, false, JobState::Submitted)),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(api_error(&format!("create Job {name}"), &e)),
        }
        let existing = api
            .get(&name)
            .await
            .map_err(|e| api_error(&format!("read Job {name}"), &e))?;
        let state = status_of(&existing);
        if state.is_live() {
            return Ok(submitted(&existing, true, state));
        }
        // Ended without an entry the driver could use: an earlier attempt's, in the way.
        delete(api, &name).await?;
        match api.create(&PostParams::default(), &job).await {
            Ok(created) => Ok(submitted(&created, false, JobState::Submitted)),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(EngineError::Api {
                op: format!("create Job {name}"),
                message: "an ended Job of that name is still being deleted".into(),
            }),
            Err(e) => Err(api_error(&format!("create Job {name}"), &e)),
        }
    }

    /// List once (the first answer is complete), then keep a watch open in a task.
    async fn start_watch(&self) -> Result<(), EngineError> {
        let api = self.api().await?;
        self.watcher
            .get_or_try_init(|| async {
                let version = relist(&api, &self.seen).await?;
                let seen = self.seen.clone();
                Ok(WatchTask(tokio::spawn(watch_loop(api, seen, version))))
            })
            .await
            .map(|_| ())
    }
}

impl Engine for Kubernetes {
    /// The kubeconfig (or in-cluster account) loads; no request is made.
    fn ready(&self) -> BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(async move { self.api().await.map(|_| ()) })
    }

    /// Each instance is its own Job: Kubernetes has no job arrays (Indexed Jobs run one pod
    /// template, and heddle's instances differ in their action).
    fn array_shape(&self, _s: &Submission) -> Option<Vec<String>> {
        None
    }

    fn outcome_tag(&self, id: &str) -> String {
        let uids = self.uids.lock().expect("uids");
        outcome_tag(&self.cluster, id, uids.get(id).map_or("", String::as_str))
    }

    fn submit<'a>(&'a self, s: &'a Submission) -> BoxFuture<'a, Result<Submitted, EngineError>> {
        Box::pin(async move {
            let api = self.api().await?;
            self.create(&api, s).await
        })
    }

    fn submit_array<'a>(
        &'a self,
        _subs: &'a [&'a Submission],
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, EngineError>> {
        Box::pin(async move {
            Err(EngineError::Api {
                op: format!("submit array {name}"),
                message: "Kubernetes has no job arrays here".into(),
            })
        })
    }

    fn query<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<JobRow>, EngineError>> {
        Box::pin(async move {
            self.start_watch().await?;
            let seen = self.seen.lock().expect("seen");
            if let Some(e) = &seen.error {
                return Err(EngineError::Api {
                    op: "list Jobs".into(),
                    message: e.clone(),
                });
            }
            Ok(names
                .iter()
                .filter_map(|n| {
                    seen.jobs.get(n).map(|(_, state)| JobRow {
                        id: n.clone(),
                        name: n.clone(),
                        state: state.clone(),
                    })
                })
                .collect())
        })
    }

    fn cancel<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let api = self.api().await?;
            for id in ids {
                delete(&api, id).await?;
            }
            Ok(())
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(async move {
            let api = self.api().await?;
            let selector = format!("heddle.dev/run={}", label_value(&self.run_id));
            api.delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(&selector),
            )
            .await
            .map_err(|e| api_error(&format!("delete the Jobs labelled {selector}"), &e))?;
            Ok(())
        })
    }
}

/// Delete Job `name` and, in the background, its pod; one already gone is what was wanted.
async fn delete(api: &Api<Job>, name: &str) -> Result<(), EngineError> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(api_error(&format!("delete Job {name}"), &e)),
    }
}

/// Replace what was seen with one list; its `resourceVersion`, to watch from.
async fn relist(api: &Api<Job>, seen: &Mutex<Seen>) -> Result<String, EngineError> {
    match api.list(&ListParams::default().labels(MANAGED)).await {
        Ok(list) => {
            let mut s = seen.lock().expect("seen");
            s.error = None;
            s.jobs = list
                .items
                .iter()
                .filter_map(|j| Some((j.metadata.name.clone()?, (uid_of(j), status_of(j)))))
                .collect();
            Ok(list.metadata.resource_version.unwrap_or_default())
        }
        Err(e) => {
            let e = api_error("list Jobs", &e);
            seen.lock().expect("seen").error = Some(e.to_string());
            Err(e)
        }
    }
}

/// Follow the Jobs from `version` for as long as the engine lives.
async fn watch_loop(api: Api<Job>, seen: Arc<Mutex<Seen>>, mut version: String) {
    let params = WatchParams::default().labels(MANAGED);
    loop {
        let stream = match api.watch(&params, &version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => {
                version = relist_until_it_answers(&api, &seen).await;
                continue;
            }
            Err(_) => {
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut gone = false;
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                WatchEvent::Added(job) | WatchEvent::Modified(job) => {
                    version = job.metadata.resource_version.clone().unwrap_or(version);
                    if let Some(name) = job.metadata.name.clone() {
                        let entry = (uid_of(&job), status_of(&job));
                        seen.lock().expect("seen").jobs.insert(name, entry);
                    }
                }
                WatchEvent::Deleted(job) => {
                    version = job.metadata.resource_version.clone().unwrap_or(version);
                    if let Some(name) = &job.metadata.name {
                        let mut seen = seen.lock().expect("seen");
                        if seen
                            .jobs
                            .get(name)
                            .is_some_and(|(uid, _)| *uid == uid_of(&job))
                        {
                            seen.jobs.remove(name);
                        }
                    }
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(_) => {
                    // 410 Gone: the version fell out of the server's window. Any other
                    // error also ends this watch, and a fresh list is the safe restart.
                    gone = true;
                    break;
                }
            }
        }
        if gone {
            version = relist_until_it_answers(&api, &seen).await;
        }
    }
}

async fn relist_until_it_answers(api: &Api<Job>, seen: &Mutex<Seen>) -> String {
    loop {
        match relist(api, seen).await {
            Ok(version) => return version,
            Err(_) => tokio::time::sleep(RETRY_AFTER).await,
        }
    }
}

fn uid_of(job: &Job) -> String {
    job.metadata.uid.clone().unwrap_or_default()
}

fn status_of(job: &Job) -> JobState {
    job_state(job.data.get("status").unwrap_or(&serde_json::Value::Null))
}

fn api_error(op: &str, e: &dyn std::error::Error) -> EngineError {
    EngineError::Api {
        op: op.to_string(),
        message: heddle_cache::error_chain(e),
    }
}

#[cfg(test)]
#[path = "kube_api_tests.rs"]
mod tests;

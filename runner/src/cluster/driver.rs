//! The driver's side of one instance: an [`Executor`] that, instead of running the command,
//! publishes its description to the shared cache, submits a job running `heddle worker`, waits
//! on the run's poller, and brings back what the worker stored. The scheduler stays as it is:
//! the sandbox, the rendered request, failure classification, output collection, retries of a
//! stage's own failures and the commit are the same code as a local run's.
//!
//! The cache entry decides the outcome, never the engine: COMPLETED without an entry is a lost
//! job, resubmitted like a cancelled one, an evicted input or an unreachable cache (an
//! infrastructure fault, up to the cluster's `retries`). The description is stored once per
//! instance (`in/` hashed once) and pushed again with each resubmission, which uploads any
//! blob the remote lost.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use heddle_cache::{error_chain, ActionEntry, Digest, OutputEntry, Store};
use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;

use super::bring_back::{Back, Return};
use super::description::{self as d, ContainerDesc, Description, EntryDesc, GpusDesc};
use super::engine::{Engine, EngineError, JobState, Submission};
use super::error::ClusterError;
use super::kube_api::Kubernetes;
use super::poll::Poller;
use super::slurm::Slurm;
use crate::exec::{
    base_env, Cancel, ContainerRequest, ExecError, ExecOutcome, ExecRequest, Executor,
};
use crate::hosts::{Cluster, ClusterKind};
use crate::record::JobRecord;
use crate::render::PathLayout;
use crate::shared_cache::SharedCache;

/// How long an interrupted instance waits for the engine to confirm its job ended.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// One run's connection to a cluster.
pub struct Driver {
    pub cluster: Cluster,
    pub poller: Arc<Poller>,
    shared: Arc<dyn SharedCache>,
    store: Arc<Store>,
    /// The worker's command line up to `worker`: binary, cache dir, remote.
    worker_prefix: String,
    run_id: String,
    /// Stage folders already stored, by path.
    stage_dirs: Mutex<HashMap<PathBuf, OutputEntry>>,
    /// Actions whose entry this driver fetched from the shared cache, where the worker had
    /// stored it (blobs first, the entry last): the run's write-back need not push them.
    on_remote: Mutex<HashMap<Digest, BTreeMap<String, OutputEntry>>>,
    /// What the user reads whatever the progress display (a resubmission, a long wait).
    tell: Arc<dyn Fn(String) + Send + Sync>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("cluster", &self.cluster.name)
            .finish()
    }
}

/// What the driver knows of an instance that the request does not say.
#[derive(Debug, Clone)]
pub struct InstanceJob {
    pub key: Digest,
    pub label: String,
    pub container: bool,
    pub outputs: BTreeMap<String, String>,
    pub resources: BTreeMap<String, u32>,
    /// Served from an existing entry if one appears (the run may use the cache).
    pub reuse: bool,
    /// Stored under `key` (the stage is cacheable).
    pub entry: Option<EntryDesc>,
}

impl Driver {
    /// `remote_url` is the shared cache's address as the worker's `--remote-cache` takes it.
    pub fn new(
        cluster: Cluster,
        shared: Arc<dyn SharedCache>,
        store: Arc<Store>,
        remote_url: &str,
        run_id: &str,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Driver {
        let heddle = cluster.heddle.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "heddle".into())
        });
        let cache = match &cluster.worker_cache {
            Some(c) => format!("\"{}\"", c.replace(['"', '\\', '`'], "")),
            None => "\"/tmp/heddle-worker-$(id -u)\"".to_string(),
        };
        let worker_prefix = format!(
            "{} --cache-dir {cache} --remote-cache {}",
            shell_words::quote(&heddle),
            shell_words::quote(remote_url)
        );
        let engine: Arc<dyn Engine> = match &cluster.kind {
            ClusterKind::Slurm => Arc::new(Slurm {
                cluster: cluster.clone(),
            }),
            ClusterKind::Kubernetes(k) => Arc::new(Kubernetes::new(
                k.clone(),
                &cluster.name,
                run_id,
                remote_url,
            )),
        };
        Driver {
            poller: Poller::new(cluster.clone(), engine, warn.clone()),
            tell: warn,
            cluster,
            shared,
            store,
            worker_prefix,
            run_id: run_id.to_string(),
            stage_dirs: Mutex::default(),
            on_remote: Mutex::default(),
        }
    }

    /// The executor for one instance, and where the record learns which job ran it.
    pub fn executor(
        self: &Arc<Self>,
        job: InstanceJob,
    ) -> (ClusterExecutor, Arc<Mutex<Option<JobRecord>>>) {
        let placed = Arc::new(Mutex::new(None));
        (
            ClusterExecutor {
                driver: self.clone(),
                job,
                placed: placed.clone(),
            },
            placed,
        )
    }

    /// Whether `entry`'s key and outputs are those of an entry this run read from the shared
    /// cache (the worker stored it there, blobs first): pushing it again would only re-check
    /// its blobs and overwrite the worker's entry. Any other output (or none read) is pushed.
    pub fn on_remote(&self, entry: &ActionEntry) -> bool {
        self.on_remote
            .lock()
            .expect("on_remote")
            .get(&entry.key)
            .is_some_and(|outputs| *outputs == entry.outputs)
    }

    /// Whether the engine can be reached at all, before the first job ([`Engine::ready`]).
    pub async fn ready(&self) -> Result<(), EngineError> {
        self.poller.ready().await
    }

    /// The run is over and did not complete: remove whatever of it the engine still holds
    /// (Kubernetes: the Jobs labelled with the run; SLURM: nothing, cancels went by id).
    pub async fn sweep(&self) -> Result<(), EngineError> {
        self.poller.sweep().await
    }

    /// One line for the run's summary: what the driver asked of the engine.
    pub fn summary(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.poller.counts;
        format!(
            "cluster {} ({}): {} jobs submitted ({} arrays), {} adopted, {} status queries, {} cancel calls",
            self.cluster.name,
            self.cluster.kind.as_str(),
            c.submitted.load(Relaxed),
            c.arrays.load(Relaxed),
            c.adopted.load(Relaxed),
            c.queries.load(Relaxed),
            c.cancels.load(Relaxed),
        )
    }
}

pub struct ClusterExecutor {
    driver: Arc<Driver>,
    job: InstanceJob,
    placed: Arc<Mutex<Option<JobRecord>>>,
}

impl Executor for ClusterExecutor {
    fn layout(&self, _sandbox: &Path, stage_dir: Option<&Path>) -> PathLayout {
        if self.job.container {
            let mut l = PathLayout::virtual_root();
            if stage_dir.is_none() {
                l.stage_dir = None;
            }
            return l;
        }
        PathLayout {
            in_root: format!("{}/in", d::SANDBOX_TOKEN),
            out_root: format!("{}/out", d::SANDBOX_TOKEN),
            stage_dir: stage_dir.map(|_| format!("{}/stage", d::SANDBOX_TOKEN)),
        }
    }

    fn execute<'a>(
        &'a self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>> {
        Box::pin(self.run(req, lines, cancel))
    }
}

impl ClusterExecutor {
    async fn run(
        &self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> Result<ExecOutcome, ExecError> {
        let drv = &self.driver;
        if self.job.container && matches!(drv.cluster.kind, ClusterKind::Kubernetes(_)) {
            // The pod runs the cluster's `image`; a stage's own image would need the worker
            // to run a container inside the pod, which is not built.
            return Err(ClusterError::KubernetesContainer {
                cluster: drv.cluster.name.clone(),
                label: self.job.label.clone(),
            }
            .into());
        }
        let desc = self.describe(&req);
        // Stored once (hashing `in/` is the costly part); pushed with each submission, which
        // uploads only the blobs the remote lacks, so a resubmission restores what it lost.
        let desc_key = self.store_description(&desc, &req).await?;
        let mut submissions = 0u32;
        loop {
            submissions += 1;
            self.publish(desc_key).await?;
            let submission = Submission {
                name: job_name(&self.job.key),
                comment: format!("run {} {}", drv.run_id, self.job.label),
                label: self.job.label.clone(),
                resources: self.job.resources.clone(),
                timeout: req.timeout,
                worker: drv.worker_prefix.clone(),
                key: self.job.key.to_string(),
            };
            let job = tokio::select! {
                j = drv.poller.submit(submission) => j.map_err(|e| match e {
                    e @ EngineError::Unanswered { .. } => ClusterError::Unanswered(e),
                    source => ClusterError::Submit { cluster: drv.cluster.name.clone(), source },
                })?,
                _ = cancel.graceful.cancelled() => return Ok(ExecOutcome::Cancelled),
            };
            self.place(&job.id, submissions);
            let ended = match self.wait(&job.id, job.state, &lines, &cancel).await {
                Some(ended) => ended,
                None => return Ok(ExecOutcome::Cancelled),
            };
            if let JobState::Unanswered { why } = ended {
                // Not resubmitted: the engine that lost track of this job takes no other.
                // Its cancel goes out should the engine answer again while the run ends.
                drv.poller.cancel(&job.id);
                return Err(ClusterError::JobUnanswered { job: job.id, why }.into());
            }
            let on_node = |node: &str| self.set_node(node);
            let back = Return {
                store: &drv.store,
                shared: drv.shared.as_ref(),
                on_remote: &drv.on_remote,
                key: self.job.key,
                outputs: &self.job.outputs,
                reuse: self.job.entry.is_some() && self.job.reuse,
                tag: drv.poller.outcome_tag(&job.id),
                on_node: &on_node,
            };
            let why = match back.bring_back(&req, &job.id, &ended).await {
                Back::Done(outcome) => return Ok(outcome),
                Back::Refused(class, message) => return Err(ExecError::Refused { class, message }),
                Back::Infra(why) => why,
            };
            if submissions > drv.cluster.retries {
                return Err(ClusterError::GaveUp {
                    cluster: drv.cluster.name.clone(),
                    submissions,
                    last: Box::new(why),
                }
                .into());
            }
            let msg = format!(
                "{}: {}; submitting again",
                self.job.label,
                error_chain(&why)
            );
            (drv.tell)(msg.clone());
            let _ = lines.send(msg);
        }
    }

    /// The description the worker reads, from the request the scheduler built.
    fn describe(&self, req: &ExecRequest) -> Description {
        let sandbox = req.sandbox.to_string_lossy().into_owned();
        let base = base_env();
        let secret = |k: &String| req.secret_env.contains(k);
        let env = req
            .env
            .iter()
            // The driver machine's PATH or HOME mean nothing on a node; the worker adds its own.
            .filter(|(k, v)| base.get(*k) != Some(*v))
            // A secret's value never goes into the shared cache: the worker reads its own.
            .filter(|(k, _)| !secret(k))
            .map(|(k, v)| (k.clone(), v.replace(&sandbox, d::SANDBOX_TOKEN)))
            .collect();
        Description {
            protocol: d::PROTOCOL,
            key: self.job.key,
            label: self.job.label.clone(),
            run_id: req.run_id.clone(),
            command: req.command.clone(),
            env,
            host_env: req.container.is_none(),
            secret_env: req.secret_env.clone(),
            timeout_ms: req.timeout.map(|t| t.as_millis() as u64),
            outputs: self.job.outputs.clone(),
            container: req.container.as_ref().map(container_desc),
            reuse: self.job.reuse,
            entry: self.job.entry.clone(),
        }
    }

    /// Store the description (with the laid-out inputs and the stage folder as its outputs)
    /// in the local store; its entry's key.
    async fn store_description(
        &self,
        desc: &Description,
        req: &ExecRequest,
    ) -> Result<Digest, ExecError> {
        let drv = self.driver.clone();
        let (desc, sandbox, stage_dir) = (desc.clone(), req.sandbox.clone(), req.stage_dir.clone());
        tokio::task::spawn_blocking(move || drv.store_description(&desc, &sandbox, stage_dir))
            .await
            .map_err(ClusterError::Task)?
            .map_err(ExecError::from)
    }

    /// Upload the stored description: blobs the remote lacks first, the entry last, so a
    /// worker that finds it finds everything.
    async fn publish(&self, desc_key: Digest) -> Result<(), ExecError> {
        self.driver
            .shared
            .push(desc_key)
            .await
            .map(|_| ())
            .map_err(|source| {
                ClusterError::Publish {
                    remote: self.driver.shared.describe(),
                    source,
                }
                .into()
            })
    }

    /// The record's job: a new one with each submission.
    fn place(&self, id: &str, submissions: u32) {
        *self.placed.lock().expect("placed") = Some(JobRecord {
            engine: self.driver.cluster.kind.as_str().into(),
            cluster: self.driver.cluster.name.clone(),
            job_id: id.to_string(),
            node: None,
            submissions,
        });
    }

    fn set_node(&self, node: &str) {
        if let Some(r) = self.placed.lock().expect("placed").as_mut() {
            r.node = Some(node.to_string());
        }
    }

    /// Until the job ends (its last state), or `None` when the run was interrupted (the job
    /// is cancelled, and its end awaited for a while). A job pending past the cluster's
    /// `pending_limit` is reported once with the engine's reason.
    async fn wait(
        &self,
        id: &str,
        mut state: tokio::sync::watch::Receiver<JobState>,
        lines: &UnboundedSender<String>,
        cancel: &Cancel,
    ) -> Option<JobState> {
        let since = Instant::now();
        let limit = self.driver.cluster.pending_limit;
        let mut told = false;
        loop {
            let now = state.borrow_and_update().clone();
            match &now {
                JobState::Running { node: Some(node) } => self.set_node(node),
                JobState::Pending { reason } if !told && since.elapsed() >= limit => {
                    told = true;
                    let msg = format!(
                        "{}: job {id} on cluster {} pending for {} s: {reason}",
                        self.job.label,
                        self.driver.cluster.name,
                        since.elapsed().as_secs()
                    );
                    (self.driver.tell)(msg.clone());
                    let _ = lines.send(msg);
                }
                _ => {}
            }
            if !now.is_live() {
                return Some(now);
            }
            let check = tokio::time::sleep(
                limit
                    .saturating_sub(since.elapsed())
                    .max(Duration::from_millis(100)),
            );
            let interrupted = tokio::select! {
                r = state.changed() => {
                    if r.is_err() {
                        let last = state.borrow().clone();
                        return Some(if last.is_live() { JobState::Vanished } else { last });
                    }
                    false
                }
                _ = check, if !told => false,
                _ = cancel.graceful.cancelled() => true,
            };
            if interrupted {
                self.driver.poller.cancel(id);
                let ended =
                    async { while state.changed().await.is_ok() && state.borrow().is_live() {} };
                tokio::select! {
                    _ = tokio::time::timeout(CANCEL_WAIT, ended) => {},
                    _ = cancel.force.cancelled() => {},
                }
                return None;
            }
        }
    }
}

impl Driver {
    /// The description's entry in the local store: the JSON, `in/` as a tree, the stage folder.
    fn store_description(
        &self,
        desc: &Description,
        sandbox: &Path,
        stage_dir: Option<PathBuf>,
    ) -> Result<Digest, ClusterError> {
        let st = &self.store;
        let json = serde_json::to_vec_pretty(desc).expect("a description serialises");
        let file = |source| ClusterError::DescriptionFile {
            dir: st.root().to_path_buf(),
            source,
        };
        let tmp = tempfile::NamedTempFile::new_in(st.root()).map_err(file)?;
        std::fs::write(tmp.path(), json).map_err(file)?;
        let mut outputs = BTreeMap::new();
        outputs.insert(
            d::DESC_FILE.to_string(),
            st.put_output(tmp.path())
                .map_err(ClusterError::StoreDescription)?,
        );
        outputs.insert(
            d::DESC_IN.to_string(),
            st.put_output(&sandbox.join("in"))
                .map_err(ClusterError::StoreDescription)?,
        );
        if let Some(dir) = stage_dir {
            let known = self
                .stage_dirs
                .lock()
                .expect("stage dirs")
                .get(&dir)
                .cloned();
            let entry = match known {
                Some(e) => e,
                None => {
                    let e = st
                        .put_output(&dir)
                        .map_err(ClusterError::StoreDescription)?;
                    self.stage_dirs
                        .lock()
                        .expect("stage dirs")
                        .insert(dir, e.clone());
                    e
                }
            };
            outputs.insert(d::DESC_STAGE.to_string(), entry);
        }
        let key = d::description_key(&desc.key);
        let entry = ActionEntry {
            key,
            family: "heddle-cluster/description".into(),
            key_parts: json!({ "for": desc.key.to_string() }),
            outputs,
            duration_ms: 0,
            created_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            meta: json!({ "label": desc.label, "run": desc.run_id }),
        };
        st.record_action(&entry)
            .map_err(ClusterError::StoreDescription)?;
        Ok(key)
    }
}

/// The job's name: from the key, so a resubmission (this run's or a later driver's) finds a
/// job still queued for it.
pub fn job_name(key: &Digest) -> String {
    format!("heddle-{}", &key.to_string()[..20])
}

fn container_desc(c: &ContainerRequest) -> ContainerDesc {
    use heddle_containers::{GpuRequest, NetworkMode};
    ContainerDesc {
        image_id: c.image_id.clone(),
        gpus: match c.gpus.as_ref().unwrap_or(&GpuRequest::None) {
            GpuRequest::None => GpusDesc::None,
            GpuRequest::All => GpusDesc::All,
            GpuRequest::Count(n) => GpusDesc::Count(*n),
            GpuRequest::Ids(v) => GpusDesc::Ids(v.clone()),
        },
        devices: c.devices.clone(),
        network: match c.network {
            NetworkMode::None => "none",
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
        }
        .into(),
        shm_size: c.shm_size.as_ref().map(|s| s.bytes),
        memory: c.memory.as_ref().map(|s| s.bytes),
        cpus: c.cpus,
        user: c.user.clone(),
        workdir: c.workdir.clone(),
    }
}

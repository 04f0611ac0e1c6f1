//! `heddle worker --action KEY --tag TAG`: what a job runs on a node. It reads the action's
//! description from the shared cache (fetched into the node's own store, every blob verified
//! by sha256), lays the inputs and the stage folder out in a fresh sandbox, runs the command
//! with the executor `heddle run` would use (the host executor, or the Docker executor on the
//! node's engine), collects and stores the outputs, uploads blobs first and the action's entry
//! last, and leaves an outcome (logs, error and facts files, outputs) under the job's key.
//!
//! Idempotent: an engine may run a job twice, and an entry already in the shared cache is the
//! answer (unless the run forced the stage). Exit codes: 0; the stage's own failure (its exit
//! code, else 1); [`EXIT_INFRA`] when the node could not do its part (cache unreachable, an
//! input evicted, no description), which the driver resubmits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use heddle_cache::{error_chain, ActionEntry, Digest, OutputEntry, StatCache, Store};
use serde_json::json;

use super::description::{
    self as d, ContainerDesc, Description, ExecEnd, GpusDesc, Outcome, EXIT_INFRA,
};
use super::error::WorkerError;
use crate::exec::docker::DockerExecutor;
use crate::exec::host::HostExecutor;
use crate::exec::{
    base_env, Cancel, ContainerRequest, ExecOutcome, ExecRequest, Executor, Transfer,
};
use crate::execution;
use crate::model::ByteSize;
use crate::render::Command;
use crate::sandbox::SandboxError;
use crate::shared_cache::SharedCache;

/// What the worker runs against: the node's store and the shared cache.
pub struct Worker {
    pub store: Arc<Store>,
    pub shared: Arc<dyn SharedCache>,
    /// Progress lines for the job's own output file.
    pub log: Box<dyn Fn(&str) + Send + Sync>,
}

/// The attempt's end before it is reported.
enum End {
    Ran {
        exec: ExecOutcome,
        /// What the command left and was refused (never stored, never uploaded).
        refused: Option<execution::Refused>,
        outputs: BTreeMap<String, OutputEntry>,
    },
    Infra(WorkerError),
    AlreadyThere,
}

impl Worker {
    /// Run action `key` as job `tag`; the process's exit code.
    pub async fn run(&self, key: Digest, tag: &str, cancel: Cancel) -> i32 {
        let scratch = self.store.root().join("scratch");
        let _ = std::fs::create_dir_all(&scratch);
        let dir = match tempfile::Builder::new()
            .prefix("worker-")
            .tempdir_in(&scratch)
        {
            Ok(t) => t,
            Err(e) => {
                return self
                    .report(
                        key,
                        tag,
                        End::Infra(WorkerError::Sandbox {
                            dir: scratch.clone(),
                            source: e,
                        }),
                        None,
                    )
                    .await
            }
        };
        let (end, sandbox) = self.attempt(key, dir.path(), cancel).await;
        let code = self.report(key, tag, end, sandbox.as_deref()).await;
        if let Err(e) = heddle_cache::scratch::remove_tree(dir.path()) {
            (self.log)(&format!(
                "heddle worker: could not remove {}: {e}",
                dir.path().display()
            ));
        }
        code
    }

    async fn attempt(&self, key: Digest, dir: &Path, cancel: Cancel) -> (End, Option<PathBuf>) {
        let desc = match self.description(key).await {
            Ok(Some(desc)) => desc,
            Ok(None) => return (End::AlreadyThere, None),
            Err(why) => return (End::Infra(why), None),
        };
        let sb = dir.join("sb");
        let logs = dir.join("logs");
        let laid = std::fs::create_dir_all(&logs)
            .map_err(|source| WorkerError::CreateDir {
                dir: logs.clone(),
                source,
            })
            .and_then(|()| self.lay_out(&desc, key, &sb));
        let inputs = match laid {
            Ok(inputs) => inputs,
            Err(why) => return (End::Infra(why), None),
        };
        let exec: Box<dyn Executor> = match &desc.container {
            None => Box::new(HostExecutor),
            Some(_) => match heddle_containers::Engine::connect(None).await {
                Ok(engine) => Box::new(DockerExecutor {
                    engines: BTreeMap::from([(None, engine)]),
                }),
                Err(e) => return (End::Infra(WorkerError::NodeEngine(Box::new(e))), Some(sb)),
            },
        };
        let req = request(&desc, &sb, &logs);
        let stderr = req.stderr_log.clone();
        let mask = req.mask.clone();
        let t0 = Instant::now();
        // The job's own output file gets progress lines, not the stage's: those are in its logs.
        let outcome = execution::run(exec.as_ref(), req, cancel, |_line| {}).await;
        let exec_outcome = match outcome {
            Ok(o) => o,
            Err(e) => return (End::Infra(WorkerError::Run(Box::new(e))), Some(sb)),
        };
        if execution::failure(&exec_outcome, &sb, &stderr, &mask).is_some() {
            return (
                End::Ran {
                    exec: exec_outcome,
                    refused: None,
                    outputs: BTreeMap::new(),
                },
                Some(sb),
            );
        }
        let collected = self.collect(&desc, key, &sb, dir, &inputs, &mask, t0);
        let (refused, outputs) = match collected.await {
            Ok(outputs) => (None, outputs),
            Err(Collect::Refused(why)) => (Some(why), BTreeMap::new()),
            Err(Collect::Infra(why)) => return (End::Infra(why), Some(sb)),
        };
        (
            End::Ran {
                exec: exec_outcome,
                refused,
                outputs,
            },
            Some(sb),
        )
    }

    /// The description, or `None` when the shared cache holds the action's entry already
    /// and the run lets it be reused.
    async fn description(&self, key: Digest) -> Result<Option<Description>, WorkerError> {
        let remote = self.shared.describe();
        let dkey = d::description_key(&key);
        match d::fetch_allowing(self.shared.as_ref(), &dkey, &d::description_outputs()).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(WorkerError::NoDescription { key, remote }),
            Err(source) => return Err(WorkerError::FetchDescription { remote, source }),
        }
        let entry = self
            .store
            .lookup_action(&dkey)
            .map_err(|source| WorkerError::DescriptionLookup { key: dkey, source })?
            .ok_or(WorkerError::DescriptionNotServable { key })?;
        let file = entry
            .outputs
            .get(d::DESC_FILE)
            .ok_or(WorkerError::DescriptionNoFile)?;
        let path = self.store.blob_path(&file.digest());
        let bytes =
            std::fs::read(&path).map_err(|source| WorkerError::DescriptionRead { path, source })?;
        let desc: Description =
            serde_json::from_slice(&bytes).map_err(WorkerError::DescriptionParse)?;
        if desc.protocol != d::PROTOCOL {
            return Err(WorkerError::Protocol {
                theirs: desc.protocol,
                ours: d::PROTOCOL,
            });
        }
        if desc.key != key {
            return Err(WorkerError::WrongAction {
                dkey,
                key: desc.key,
            });
        }
        if desc.reuse && desc.entry.is_some() {
            if let Ok(Some(_)) = self.shared.entry(key).await {
                return Ok(None);
            }
        }
        Ok(Some(desc))
    }

    /// `in/` and `stage/` from the description's entry (inputs as read-only hard links to
    /// verified blobs, as `heddle run` lays them out), empty `out/<name>/` and `work/`.
    fn lay_out(
        &self,
        desc: &Description,
        key: Digest,
        sb: &Path,
    ) -> Result<Option<OutputEntry>, WorkerError> {
        let dkey = d::description_key(&key);
        let entry = self
            .store
            .lookup_action(&dkey)
            .map_err(|source| WorkerError::DescriptionLookup { key: dkey, source })?
            .ok_or(WorkerError::DescriptionLeft)?;
        let mkdir = |dir: PathBuf| {
            std::fs::create_dir_all(&dir).map_err(|source| WorkerError::CreateDir { dir, source })
        };
        mkdir(sb.join("work"))?;
        for name in desc.outputs.keys() {
            mkdir(sb.join("out").join(name))?;
        }
        let lay_out = |dest: PathBuf| move |source| WorkerError::LayOut { dest, source };
        let input = entry.outputs.get(d::DESC_IN).cloned();
        if let Some(e) = &input {
            let dest = sb.join("in");
            self.store.link_into(e, &dest).map_err(lay_out(dest))?;
        } else {
            mkdir(sb.join("in"))?;
        }
        if let Some(e) = entry.outputs.get(d::DESC_STAGE) {
            let dest = sb.join("stage");
            self.store.materialize(e, &dest).map_err(lay_out(dest))?;
        }
        Ok(input)
    }

    /// The outputs into the node's store, checked as `heddle run` checks them (an input written
    /// through, an output holding a secret: refused before anything is stored) and, for a
    /// cacheable stage, the action's entry into the shared cache (blobs first, the entry last).
    #[allow(clippy::too_many_arguments)] // the attempt's state, each computed once
    async fn collect(
        &self,
        desc: &Description,
        key: Digest,
        sb: &Path,
        dir: &Path,
        inputs: &Option<OutputEntry>,
        mask: &heddle_containers::Mask,
        t0: Instant,
    ) -> Result<BTreeMap<String, OutputEntry>, Collect> {
        let (store, sb2, dir2, files, ins, mask, secrets) = (
            self.store.clone(),
            sb.to_path_buf(),
            dir.join("collected"),
            desc.outputs.clone(),
            inputs.clone(),
            mask.clone(),
            desc.secret_env.clone(),
        );
        let stats = StatCache::load(&dir.join("stat-cache"));
        let outputs = tokio::task::spawn_blocking(move || {
            let intact = || match &ins {
                Some(e) => store
                    .check_fed(e)
                    .map_err(|source| SandboxError::InputsModified { source }),
                None => Ok(()),
            };
            let what = execution::Collect {
                files: &files,
                dir: &dir2,
                mask: &mask,
                secret_names: &secrets,
            };
            execution::check_and_collect(&store, &stats, &sb2, &what, intact)
                .map(|(outs, _)| outs)
                .map_err(Collect::Refused)
        })
        .await
        .map_err(|e| Collect::Infra(WorkerError::Task(e)))??;
        if let Some(e) = &desc.entry {
            let entry = ActionEntry {
                key,
                family: e.family.clone(),
                key_parts: e.key_parts.clone(),
                outputs: outputs.clone(),
                duration_ms: t0.elapsed().as_millis() as u64,
                created_unix_ms: now_ms(),
                meta: e.meta.clone(),
            };
            self.store
                .record_action(&entry)
                .map_err(|e| Collect::Infra(WorkerError::StoreResult(e)))?;
            self.shared.push(key).await.map_err(|source| {
                Collect::Infra(WorkerError::Upload {
                    remote: self.shared.describe(),
                    source,
                })
            })?;
        }
        Ok(outputs)
    }

    /// Store and upload the outcome under the job's key; the exit code.
    async fn report(&self, key: Digest, tag: &str, end: End, sb: Option<&Path>) -> i32 {
        // SLURM names the node; HOSTNAME may be the driver's (sbatch exports its environment).
        // A Kubernetes pod's hostname is the pod's: its manifest passes `spec.nodeName`.
        let node = std::env::var("SLURMD_NODENAME")
            .or_else(|_| std::env::var("HEDDLE_NODE"))
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(crate::hostname::hostname);
        let (outcome, code, outputs) = match end {
            End::AlreadyThere => {
                (self.log)(&format!(
                    "heddle worker: action {key} is in the shared cache already"
                ));
                return 0;
            }
            End::Infra(why) => {
                let why = error_chain(&why);
                (self.log)(&format!("heddle worker: {why}"));
                (
                    Outcome {
                        protocol: d::PROTOCOL,
                        exec: None,
                        infra: Some(why),
                        collect_error: None,
                        collect_class: None,
                        node,
                    },
                    EXIT_INFRA,
                    BTreeMap::new(),
                )
            }
            End::Ran {
                exec,
                refused,
                outputs,
            } => {
                let code = match &exec {
                    ExecOutcome::Exited(0) if refused.is_none() => 0,
                    ExecOutcome::Exited(c) if (1..=255).contains(c) => *c as i32,
                    _ => 1,
                };
                let o = Outcome {
                    protocol: d::PROTOCOL,
                    exec: Some(ExecEnd::from(&exec)),
                    infra: None,
                    collect_class: refused.as_ref().map(|r| r.class.clone()),
                    collect_error: refused.map(|r| r.message),
                    node,
                };
                (o, code, outputs)
            }
        };
        let okey = d::outcome_key(&key, tag);
        let stored = self.store_outcome(okey, &outcome, sb, outputs);
        match stored {
            Ok(()) => {
                if let Err(e) = self.shared.push(okey).await {
                    (self.log)(&format!(
                        "heddle worker: failed to upload the outcome: {}",
                        e.message
                    ));
                    return EXIT_INFRA;
                }
            }
            Err(e) => {
                (self.log)(&format!("heddle worker: {}", error_chain(&e)));
                return EXIT_INFRA;
            }
        }
        code
    }

    fn store_outcome(
        &self,
        okey: Digest,
        o: &Outcome,
        sb: Option<&Path>,
        outputs: BTreeMap<String, OutputEntry>,
    ) -> Result<(), WorkerError> {
        let st = &self.store;
        let mut outs: BTreeMap<String, OutputEntry> = outputs
            .into_iter()
            .map(|(k, v)| (format!("{}{k}", d::OUTCOME_OUT_PREFIX), v))
            .collect();
        let file = |source| WorkerError::OutcomeFile {
            dir: st.root().to_path_buf(),
            source,
        };
        let tmp = tempfile::NamedTempFile::new_in(st.root()).map_err(file)?;
        std::fs::write(
            tmp.path(),
            serde_json::to_vec_pretty(o).expect("serialises"),
        )
        .map_err(file)?;
        outs.insert(
            d::OUTCOME_FILE.into(),
            st.put_output(tmp.path())
                .map_err(WorkerError::StoreOutcome)?,
        );
        if let Some(sb) = sb {
            let logs = sb.parent().expect("sandbox in a folder").join("logs");
            for (name, path) in [
                (d::OUTCOME_STDOUT, logs.join("stdout.log")),
                (d::OUTCOME_STDERR, logs.join("stderr.log")),
                (d::OUTCOME_ERROR, execution::error_file(sb)),
                (d::OUTCOME_FACTS, execution::facts_file(sb)),
            ] {
                if path.is_file() {
                    outs.insert(
                        name.into(),
                        st.put_output(&path).map_err(WorkerError::StoreOutcome)?,
                    );
                }
            }
        }
        st.record_action(&ActionEntry {
            key: okey,
            family: "heddle-cluster/outcome".into(),
            key_parts: json!({}),
            outputs: outs,
            duration_ms: 0,
            created_unix_ms: now_ms(),
            meta: json!({ "node": o.node }),
        })
        .map_err(WorkerError::StoreOutcome)
    }
}

enum Collect {
    Refused(execution::Refused),
    Infra(WorkerError),
}

/// The execution request: the description's command and environment with the sandbox in
/// place of [`d::SANDBOX_TOKEN`], heddle's own variables pointing into this sandbox.
fn request(desc: &Description, sb: &Path, logs: &Path) -> ExecRequest {
    let sandbox = sb.to_string_lossy().into_owned();
    let place = |s: &str| d::place_sandbox(s, &sandbox);
    let command = match &desc.command {
        Command::Shell(s) => Command::Shell(place(s)),
        Command::Exec(v) => Command::Exec(v.iter().map(|a| place(a)).collect()),
    };
    let mut env = if desc.host_env {
        base_env()
    } else {
        BTreeMap::new()
    };
    env.extend(desc.env.iter().map(|(k, v)| (k.clone(), place(v))));
    for k in &desc.secret_env {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.clone(), v);
        }
    }
    // The description's copies name the driver's sandbox token; these name this sandbox.
    let [error, facts, ..] = execution::heddle_vars(sb, &desc.label, &desc.run_id);
    env.extend([error, facts]);
    let stage_dir = sb.join("stage");
    ExecRequest {
        label: desc.label.clone(),
        // Containers carry the driver's run id, so `heddle gc` and the run's sweep find them.
        run_id: desc.run_id.clone(),
        command,
        sandbox: sb.to_path_buf(),
        stage_dir: stage_dir.is_dir().then_some(stage_dir),
        env,
        timeout: desc.timeout_ms.map(std::time::Duration::from_millis),
        stdout_log: logs.join("stdout.log"),
        stderr_log: logs.join("stderr.log"),
        container: desc.container.as_ref().map(container_request),
        mask: crate::secrets::mask_of(&desc.secret_env),
        secret_env: desc.secret_env.clone(),
    }
}

fn container_request(c: &ContainerDesc) -> ContainerRequest {
    use heddle_containers::{GpuRequest, NetworkMode};
    ContainerRequest {
        image_id: c.image_id.clone(),
        image_resolved: true,
        gpus: Some(match &c.gpus {
            GpusDesc::None => GpuRequest::None,
            GpusDesc::All => GpuRequest::All,
            // The GPUs SLURM gave the job (`--gres=gpu:N` sets CUDA_VISIBLE_DEVICES), else a
            // count for the engine to choose.
            GpusDesc::Count(n) => match std::env::var("CUDA_VISIBLE_DEVICES") {
                Ok(ids) if !ids.is_empty() => {
                    GpuRequest::Ids(ids.split(',').map(str::to_string).collect())
                }
                _ => GpuRequest::Count(*n),
            },
            GpusDesc::Ids(v) => GpuRequest::Ids(v.clone()),
        }),
        devices: c.devices.clone(),
        network: match c.network.as_str() {
            "host" => NetworkMode::Host,
            "bridge" => NetworkMode::Bridge,
            _ => NetworkMode::None,
        },
        // The description carries bytes; this request only runs, it is never keyed (the key
        // came with the description).
        shm_size: c.shm_size.map(ByteSize::of_bytes),
        memory: c.memory.map(ByteSize::of_bytes),
        cpus: c.cpus,
        user: c.user.clone(),
        workdir: c.workdir.clone(),
        docker_host: None,
        transfer: Transfer::Auto,
        // `heddle.placed-on=slurm-job-ID`: a site's epilog removes what a job killed outright
        // (SIGKILL reaches the worker, never its container) left behind; tests/support/slurm.sh
        // has one.
        placed_on: std::env::var("SLURM_JOB_ID")
            .ok()
            .map(|id| format!("slurm-job-{id}")),
        holds: Vec::new(),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

//! The scheduler: one supervisor loop that walks the plan's DAG on tokio.
//!
//! An instance starts as soon as every instance it reads from has finished; a cache hit
//! restores outputs without taking a job slot; a miss waits for its resource units, a job slot
//! and the cache's per-key lock (single flight across processes), checks the cache again, runs
//! with retries, stores its outputs and records the action. A failure skips its downstream cone
//! unless the failure is allowed, in which case gathers still run and see its status record.
//! Ctrl-C (or SIGTERM) stops gracefully; a second one kills. The loop returns only after every
//! task — and so every child process and container — is gone.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use heddle_cache::{error_chain, ActionEntry, CacheError, Digest, OutputEntry, StatCache, Store};
use heddle_containers::ImageIdentity;
use petgraph::graph::NodeIndex;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::sync::Semaphore;

use crate::exec::{base_env, Cancel, ContainerRequest, ExecOutcome, ExecRequest, Executor};
use crate::key::{explain_with, Earlier, KeyParts, Reason, KEY_VERSION};
use crate::model::Stage;
use crate::names::path_segment;
use crate::plan::{member_dir, BoundInput, Plan};
use crate::pyenv::EnvInfo;
use crate::record::{Cause, InstanceRecord, RunRecord, RunStatus, Status, StatusRecord};
use crate::render::{input_file_name, render, PathLayout};

/// Everything resolved before the walk: definition and repo-file digests, envs, images.
pub struct Context {
    pub plan: Arc<Plan>,
    pub store: Arc<Store>,
    pub stats: Arc<StatCache>,
    /// `uses` → relative file → digest.
    pub definitions: BTreeMap<String, BTreeMap<String, String>>,
    /// Repo input path (relative) → digest.
    pub repo_inputs: BTreeMap<String, Digest>,
    pub envs: BTreeMap<String, EnvInfo>,
    /// Image reference → identity.
    pub images: BTreeMap<String, ImageIdentity>,
    /// Image reference → why it could not be resolved (plan/status only; `run` stops instead).
    pub unresolved: BTreeMap<String, String>,
    pub host: Arc<dyn Executor>,
    pub docker: Option<Arc<dyn Executor>>,
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub jobs: usize,
    pub keep_going: bool,
    /// Stage names whose instances run even when cached.
    pub force: BTreeSet<String>,
    pub no_cache: bool,
    pub run_id: String,
}

/// What the engine tells the reporter. The engine never touches the terminal.
#[derive(Debug, Clone)]
pub enum Event {
    Started {
        id: usize,
        label: String,
        reason: String,
    },
    Line {
        id: usize,
        line: String,
    },
    Finished {
        id: usize,
        label: String,
        status: Status,
        cached: bool,
        duration_ms: u64,
        error: Option<String>,
    },
    Message(String),
}

/// How a finished instance ended, as its dependents see it.
#[derive(Debug, Clone)]
struct Done {
    status: StatusRecord,
    outputs: BTreeMap<String, OutputEntry>,
    record: InstanceRecord,
}

/// An input as the instance receives it.
#[derive(Debug, Clone)]
enum Resolved {
    Path {
        abs: PathBuf,
        digest: Digest,
    },
    One {
        entry: OutputEntry,
        file: String,
    },
    Gather {
        file: String,
        members: Vec<(usize, String, StatusRecord, Option<OutputEntry>)>,
    },
}

fn family(plan: &Plan, stage: &Stage) -> String {
    format!("{}/{}", plan.pipeline.name, stage.name)
}

/// Where an instance's outputs are materialised: `out/<pipeline>/<label>/<file>`, the label
/// made a safe folder name ([`path_segment`]: a matrix value is data, not a path).
pub fn output_dir(plan: &Plan, label: &str) -> PathBuf {
    let base = plan.pipeline.root.join("out").join(&plan.pipeline.name);
    if label.is_empty() {
        base
    } else {
        base.join(path_segment(label).as_ref())
    }
}

impl Context {
    fn executor(&self, stage: &Stage) -> Arc<dyn Executor> {
        match (&stage.container, &self.docker) {
            (Some(_), Some(d)) => d.clone(),
            _ => self.host.clone(),
        }
    }

    fn executor_identity(&self, id: usize) -> Value {
        let inst = &self.plan.instances[id];
        let stage = self.plan.stage_of(id);
        match (&stage.container, &inst.image) {
            (Some(c), Some(image)) => json!({
                "kind": "docker",
                "image_id": self.images.get(image).map(|i| i.id.clone()),
                "gpus": inst.gpus.as_ref().map(gpu_identity),
                "devices": c.devices,
                "network": c.network,
                "shm_size": c.shm_size,
                "memory": c.memory,
                "cpus": c.cpus,
                "user": c.user,
                "workdir": c.workdir,
            }),
            _ => json!({"kind": "host"}),
        }
    }

    fn key_parts(&self, id: usize, inputs: &BTreeMap<String, Resolved>) -> KeyParts {
        let plan = &self.plan;
        let inst = &plan.instances[id];
        let stage = plan.stage_of(id);
        let ok = member_ok_fn(inputs);
        let command = render(plan, inst, &PathLayout::virtual_root(), &ok)
            .expect("templates were checked at plan time");
        let mut vars = stage.vars.clone();
        for k in &stage.pass_env {
            vars.insert(format!("${k}"), std::env::var(k).unwrap_or_default());
        }
        KeyParts {
            version: KEY_VERSION.into(),
            stage: stage.name.clone(),
            command,
            executor: self.executor_identity(id),
            definition: stage
                .def
                .as_ref()
                .and_then(|d| self.definitions.get(&d.uses).cloned())
                .unwrap_or_default(),
            inputs: inputs
                .iter()
                .map(|(k, r)| (k.clone(), input_identity(r)))
                .collect(),
            params: inst.params.clone(),
            matrix: inst.matrix.to_btree(),
            vars,
            env: stage
                .env
                .as_ref()
                .and_then(|e| self.envs.get(e))
                .map(|e| e.identity.clone()),
            outputs: stage.outputs.clone(),
        }
    }
}

/// GPUs as they enter the key: spelled out, not through a Debug derive that could change.
fn gpu_identity(g: &crate::spec::GpuSpec) -> Value {
    use crate::spec::GpuSpec;
    match g {
        GpuSpec::None | GpuSpec::Template(_) => json!("none"),
        GpuSpec::All => json!("all"),
        GpuSpec::Count(n) => json!(n),
        GpuSpec::Ids(v) => json!(v),
    }
}

fn member_ok_fn(inputs: &BTreeMap<String, Resolved>) -> impl Fn(usize) -> bool + '_ {
    move |m| {
        inputs.values().any(|r| match r {
            Resolved::Gather { members, .. } => members
                .iter()
                .any(|(id, _, s, _)| *id == m && s.status == Status::Ok),
            _ => false,
        })
    }
}

fn input_identity(r: &Resolved) -> Value {
    match r {
        Resolved::Path { digest, .. } => json!(digest.to_string()),
        Resolved::One { entry, .. } => json!(entry.digest().to_string()),
        Resolved::Gather { members, .. } => Value::Array(
            members
                .iter()
                .map(|(_, dir, s, e)| match e {
                    Some(e) => json!({"member": dir, "status": s.status, "digest": e.digest().to_string()}),
                    None => json!({"member": dir, "status": s.status, "error": s.error, "cause": s.cause.as_ref().map(|c| &c.label)}),
                })
                .collect(),
        ),
    }
}

/// Resolve an instance's inputs from finished upstreams, or say which upstream skips it.
fn resolve_inputs<D: std::borrow::Borrow<Done>>(
    ctx: &Context,
    id: usize,
    done: &[Option<D>],
) -> Result<BTreeMap<String, Resolved>, (Cause, bool)> {
    let plan = &ctx.plan;
    let inst = &plan.instances[id];
    let mut out = BTreeMap::new();
    for (name, b) in &inst.inputs {
        let r = match b {
            BoundInput::Path { rel, abs } => Resolved::Path {
                abs: abs.clone(),
                digest: ctx.repo_inputs[rel],
            },
            BoundInput::One { from, output } => {
                let d: &Done = done[*from].as_ref().expect("dependency finished").borrow();
                if d.status.status != Status::Ok {
                    return Err((cause_of(&d.status), d.status.tolerated));
                }
                Resolved::One {
                    entry: d.outputs[output].clone(),
                    file: input_file_name(plan, b),
                }
            }
            BoundInput::Gather { members, output } => {
                let mut ms = Vec::new();
                for m in members {
                    let d: &Done = done[*m].as_ref().expect("dependency finished").borrow();
                    if d.status.status != Status::Ok && !d.status.tolerated {
                        return Err((cause_of(&d.status), false));
                    }
                    ms.push((
                        *m,
                        path_segment(&member_dir(&plan.instances[*m].matrix)).into_owned(),
                        d.status.clone(),
                        d.outputs.get(output).cloned(),
                    ));
                }
                Resolved::Gather {
                    file: input_file_name(plan, b),
                    members: ms,
                }
            }
        };
        out.insert(name.clone(), r);
    }
    Ok(out)
}

fn cause_of(s: &StatusRecord) -> Cause {
    match &s.cause {
        Some(c) => c.clone(),
        None => Cause {
            label: s.label.clone(),
            error: s.error.clone(),
        },
    }
}

/// A preview of what `run` would do: per instance, cached or the reason it must run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanRow {
    pub label: String,
    pub cached: bool,
    pub reason: Reason,
    pub key: Option<String>,
    /// The expanded key, when it could be computed.
    #[serde(skip)]
    pub parts: Option<Box<KeyParts>>,
    /// The outputs the history knows for this key (a hit).
    #[serde(skip)]
    pub outputs: Option<BTreeMap<String, OutputEntry>>,
}

/// Where a preview learns what was computed before: the action cache (`heddle plan`) or a lock
/// file (`heddle status`).
pub trait History {
    /// The outputs recorded for this instance under this key, if any.
    fn lookup(
        &self,
        label: &str,
        family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>>;
    /// Why this instance's key is not in the history.
    fn explain(&self, label: &str, family: &str, parts: &KeyParts) -> Reason;
    /// An allowed failure recorded under this key (a lock remembers them; the cache does not
    /// store failures, so they rerun).
    fn recorded_failure(&self, _label: &str, _key: &Digest) -> Option<StatusRecord> {
        None
    }
}

/// The action cache as history: every key ever recorded.
pub struct CacheHistory<'a> {
    pub store: &'a Store,
    families: std::sync::Mutex<BTreeMap<String, Earlier>>,
}

impl<'a> CacheHistory<'a> {
    pub fn new(store: &'a Store) -> Self {
        CacheHistory {
            store,
            families: Default::default(),
        }
    }
}

impl History for CacheHistory<'_> {
    fn lookup(
        &self,
        _label: &str,
        _family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>> {
        self.store
            .lookup_action(key)
            .ok()
            .flatten()
            .map(|e| e.outputs)
    }
    fn explain(&self, _label: &str, family: &str, parts: &KeyParts) -> Reason {
        let mut fams = self.families.lock().expect("families");
        // Condensed once per family: a whole matrix can miss at once.
        let earlier = fams.entry(family.to_string()).or_insert_with(|| {
            Earlier::new(&self.store.actions_in_family(family).unwrap_or_default())
        });
        explain_with(parts, earlier)
    }
}

/// A preview of every instance. `keep_parts` keeps each row's expanded key (`heddle lock` writes
/// them); without it a row holds its digest only, so a million-instance preview does not hold
/// a million expanded keys.
pub fn preview(
    ctx: &Context,
    opts: &RunOptions,
    history: &dyn History,
    keep_parts: bool,
) -> Vec<PlanRow> {
    let plan = &ctx.plan;
    // Boxed: most slots stay empty in a large preview, and a `Done` is ~1 KB.
    let mut known: Vec<Option<Box<Done>>> = vec![None; plan.instances.len()];
    let mut rows = Vec::with_capacity(plan.instances.len());
    for &id in &plan.order {
        let inst = &plan.instances[id];
        let stage = plan.stage_of(id);
        let row =
            |cached, reason, key: Option<&Digest>, parts: Option<KeyParts>, outputs| PlanRow {
                label: inst.label.clone(),
                cached,
                reason,
                key: key.map(|k| k.to_string()),
                parts: parts.filter(|_| keep_parts).map(Box::new),
                outputs,
            };
        // First: a run would stop on this before anything else.
        if let Some(image) = inst
            .image
            .as_ref()
            .filter(|i| ctx.unresolved.contains_key(*i))
        {
            let error = ctx.unresolved[image].clone();
            rows.push(row(
                false,
                Reason::ImageUnavailable {
                    image: image.clone(),
                    error,
                },
                None,
                None,
                None,
            ));
            continue;
        }
        if let Some(&d) = inst.deps.iter().find(|d| known[**d].is_none()) {
            let upstream = plan.instances[d].label.clone();
            rows.push(row(
                false,
                Reason::UpstreamRuns { upstream },
                None,
                None,
                None,
            ));
            continue;
        }
        if let Some(e) = stage.env.as_ref().filter(|e| !ctx.envs.contains_key(*e)) {
            rows.push(row(
                false,
                Reason::EnvNotProvisioned { env: e.clone() },
                None,
                None,
                None,
            ));
            continue;
        }
        let Ok(inputs) = resolve_inputs(ctx, id, &known) else {
            rows.push(row(false, Reason::NeverRun, None, None, None));
            continue;
        };
        let parts = ctx.key_parts(id, &inputs);
        let key = parts.digest();
        let forced = opts.force.contains(&stage.name);
        let fam = family(plan, stage);
        let hit = if stage.cache && !forced && !opts.no_cache {
            history.lookup(&inst.label, &fam, &key)
        } else {
            None
        };
        match hit {
            Some(outputs) => {
                known[id] = Some(Box::new(Done {
                    // Without its matrix: a preview only feeds statuses to keys, which do not
                    // hold it, and a copy per instance adds up in a large preview.
                    status: ok_status(&inst.label, &BTreeMap::new()),
                    outputs: outputs.clone(),
                    record: empty_record(stage),
                }));
                rows.push(row(
                    true,
                    Reason::Cached,
                    Some(&key),
                    Some(parts),
                    Some(outputs),
                ));
            }
            None => {
                if let Some(mut status) = history.recorded_failure(&inst.label, &key) {
                    status.matrix = inst.matrix.to_btree();
                    known[id] = Some(Box::new(Done {
                        status,
                        outputs: BTreeMap::new(),
                        record: empty_record(stage),
                    }));
                    rows.push(row(true, Reason::Cached, Some(&key), Some(parts), None));
                    continue;
                }
                let reason = if forced {
                    Reason::Forced
                } else if opts.no_cache {
                    Reason::NoCache
                } else if !stage.cache {
                    Reason::NotCacheable
                } else {
                    history.explain(&inst.label, &fam, &parts)
                };
                rows.push(row(false, reason, Some(&key), Some(parts), None));
            }
        }
    }
    rows
}

fn ok_status(label: &str, matrix: &BTreeMap<String, Value>) -> StatusRecord {
    StatusRecord {
        label: label.to_string(),
        status: Status::Ok,
        exit_code: None,
        error_class: None,
        error: None,
        stderr_tail: None,
        cause: None,
        tolerated: false,
        matrix: matrix.clone(),
    }
}

fn empty_record(stage: &Stage) -> InstanceRecord {
    InstanceRecord {
        stage: stage.name.clone(),
        report: stage.report,
        deps: Vec::new(),
        status: ok_status("", &BTreeMap::new()),
        cached: false,
        cache_key: None,
        reason: String::new(),
        duration_ms: 0,
        start_ms: 0,
        end_ms: 0,
        attempts: 0,
        inputs: BTreeMap::new(),
        outputs: BTreeMap::new(),
        output_paths: BTreeMap::new(),
        env_identity: None,
        image: None,
        command: None,
        logs: None,
        key_parts: None,
        facts: None,
    }
}

/// An action to record, with the key lock held until it is durable (so a process waiting on
/// the key then finds it), or a request to report when everything sent before is recorded.
enum Commit {
    Action(Box<ActionEntry>, Option<heddle_cache::KeyLock>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// How long the committer gathers actions before making them durable in one go.
const COMMIT_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// Group commit: whatever queued while the previous batch was being made durable goes in the
/// next one, so one fsync covers many actions and a stage never waits for its own.
async fn commit_loop(
    store: Arc<Store>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Commit>,
    events: UnboundedSender<Event>,
) {
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
            let res = blocking(move || st.record_actions(&entries)).await;
            drop(locks);
            if let Err(e) = res {
                let _ = events.send(Event::Message(format!("failed to record {n} actions: {e}")));
            }
        }
        for f in flushes {
            let _ = f.send(());
        }
    }
}

struct Shared {
    ctx: Context,
    commits: UnboundedSender<Commit>,
    /// Earlier entries per family, read once per run to explain misses.
    families: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::OnceCell<crate::key::Earlier>>>>,
    opts: RunOptions,
    jobs: Semaphore,
    pools: BTreeMap<String, Semaphore>,
    cancel: Cancel,
    events: UnboundedSender<Event>,
    started: Instant,
    logs_dir: PathBuf,
    sandboxes: Arc<crate::sandbox::SandboxPool>,
}

/// Walk the plan. Returns the run record (also when interrupted).
pub async fn run(ctx: Context, opts: RunOptions, events: UnboundedSender<Event>) -> RunRecord {
    let plan = ctx.plan.clone();
    let n = plan.instances.len();
    let started_unix_ms = now_ms();
    let logs_dir = plan
        .pipeline
        .root
        .join(".heddle")
        .join("logs")
        .join(&opts.run_id);
    let _ = std::fs::create_dir_all(&logs_dir);
    let _ = std::fs::create_dir_all(ctx.store.root().join("scratch"));
    let (commit_tx, commit_rx) = unbounded_channel::<Commit>();
    let committer = tokio::spawn(commit_loop(ctx.store.clone(), commit_rx, events.clone()));
    let shared = Arc::new(Shared {
        commits: commit_tx,
        families: Default::default(),
        pools: plan
            .pipeline
            .resources
            .iter()
            .map(|(k, v)| (k.clone(), Semaphore::new(*v as usize)))
            .collect(),
        jobs: Semaphore::new(opts.jobs.max(1)),
        cancel: Cancel::default(),
        events: events.clone(),
        started: Instant::now(),
        logs_dir,
        sandboxes: Arc::new(crate::sandbox::SandboxPool::new(
            ctx.store.root().join("scratch"),
        )),
        ctx,
        opts,
    });

    let mut waiting: Vec<usize> = plan.instances.iter().map(|i| i.deps.len()).collect();
    let mut done: Vec<Option<Done>> = vec![None; n];
    let mut queue: VecDeque<usize> = (0..n).filter(|i| waiting[*i] == 0).collect();
    let (tx, mut rx) = unbounded_channel::<(usize, Done)>();
    let mut running = 0usize;
    let mut stop_cause: Option<Cause> = None;
    let mut interrupts = 0u32;
    let mut signals = signal_stream();

    loop {
        // Start (or skip) everything that is ready.
        while let Some(id) = queue.pop_front() {
            let inst = &plan.instances[id];
            let skip = match (&stop_cause, resolve_inputs(&shared.ctx, id, &done)) {
                (Some(c), _) => Some((c.clone(), false)),
                (None, Err(c)) => Some(c),
                (None, Ok(inputs)) => {
                    running += 1;
                    let sh = shared.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        // A panic inside an instance must end that instance, not hang the run.
                        let sh2 = sh.clone();
                        let d = match tokio::spawn(async move { process(&sh2, id, inputs).await })
                            .await
                        {
                            Ok(d) => d,
                            Err(e) => internal_failure(&sh, id, &e.to_string()),
                        };
                        let _ = tx.send((id, d));
                    });
                    None
                }
            };
            if let Some((cause, tolerated)) = skip {
                let status = StatusRecord {
                    label: inst.label.clone(),
                    status: Status::Skipped,
                    exit_code: None,
                    error_class: None,
                    error: None,
                    stderr_tail: None,
                    cause: Some(cause.clone()),
                    tolerated,
                    matrix: inst.matrix.to_btree(),
                };
                let mut record = empty_record(plan.stage_of(id));
                record.status = status.clone();
                record.reason = format!("skipped: {} did not succeed", cause.label);
                let _ = events.send(Event::Finished {
                    id,
                    label: inst.label.clone(),
                    status: Status::Skipped,
                    cached: false,
                    duration_ms: 0,
                    error: Some(record.reason.clone()),
                });
                finish(
                    &plan,
                    id,
                    Done {
                        status,
                        outputs: BTreeMap::new(),
                        record,
                    },
                    &mut done,
                    &mut waiting,
                    &mut queue,
                );
            }
        }
        if running == 0 {
            break;
        }
        tokio::select! {
            Some((id, d)) = rx.recv() => {
                running -= 1;
                if d.status.status == Status::Failed && !d.status.tolerated && !shared.opts.keep_going && stop_cause.is_none() {
                    stop_cause = Some(Cause { label: d.status.label.clone(), error: d.status.error.clone() });
                }
                finish(&plan, id, d, &mut done, &mut waiting, &mut queue);
            }
            Some(()) = signals.recv() => {
                interrupts += 1;
                if interrupts == 1 {
                    let _ = events.send(Event::Message("interrupt: stopping running stages (Ctrl-C again to kill)".into()));
                    shared.cancel.graceful.cancel();
                    stop_cause.get_or_insert(Cause { label: "interrupt".into(), error: Some("run interrupted".into()) });
                } else {
                    shared.cancel.force.cancel();
                }
            }
        }
    }

    let (flushed, wait) = tokio::sync::oneshot::channel();
    if shared.commits.send(Commit::Flush(flushed)).is_ok() {
        let _ = wait.await;
    }
    let _ = &committer;
    #[cfg(target_os = "linux")]
    crate::exec::contain::sweep_run().await;
    let pool = shared.sandboxes.clone();
    blocking(move || pool.remove_all()).await;
    let status = if interrupts > 0 {
        RunStatus::Interrupted
    } else if done
        .iter()
        .flatten()
        .any(|d| d.status.status != Status::Ok && !d.status.tolerated)
    {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    let _ = shared.ctx.stats.save();
    RunRecord {
        run_id: shared.opts.run_id.clone(),
        pipeline: plan.pipeline.name.clone(),
        // Relative to the project root, so records and entries travel between checkouts.
        pipeline_file: std::path::absolute(&plan.pipeline.file)
            .ok()
            .and_then(|a| {
                a.strip_prefix(&plan.pipeline.root)
                    .ok()
                    .map(Path::to_path_buf)
            })
            .unwrap_or_else(|| plan.pipeline.file.clone())
            .to_string_lossy()
            .into_owned(),
        status,
        started_unix_ms,
        duration_ms: shared.started.elapsed().as_millis() as u64,
        heddle_version: env!("CARGO_PKG_VERSION").into(),
        host: hostname(),
        params: plan.pipeline.params.clone(),
        jobs: shared.opts.jobs,
        instances: done
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let mut record = d.expect("every instance finishes").record;
                record.deps = plan.instances[i]
                    .deps
                    .iter()
                    .map(|d| plan.instances[*d].label.clone())
                    .collect();
                (plan.instances[i].label.clone(), record)
            })
            .collect(),
    }
}

fn finish(
    plan: &Plan,
    id: usize,
    d: Done,
    done: &mut [Option<Done>],
    waiting: &mut [usize],
    queue: &mut VecDeque<usize>,
) {
    done[id] = Some(d);
    let mut seen = BTreeSet::new();
    for m in plan.graph.neighbors(NodeIndex::new(id)) {
        let m = m.index();
        if seen.insert(m) {
            waiting[m] -= 1;
            if waiting[m] == 0 {
                queue.push_back(m);
            }
        }
    }
}

/// Ctrl-C, and SIGTERM and SIGHUP on unix, as one stream.
fn signal_stream() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = unbounded_channel();
    let t = tx.clone();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if t.send(()).is_err() {
                break;
            }
        }
    });
    // SIGHUP (the terminal went away) stops the run like SIGTERM: its default would end heddle
    // with no run record and its sandboxes left behind.
    #[cfg(unix)]
    for kind in [
        tokio::signal::unix::SignalKind::terminate(),
        tokio::signal::unix::SignalKind::hangup(),
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Ok(mut s) = tokio::signal::unix::signal(kind) {
                while s.recv().await.is_some() {
                    if tx.send(()).is_err() {
                        break;
                    }
                }
            }
        });
    }
    drop(tx);
    rx
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking task panicked")
}

/// One instance, start to end.
async fn process(sh: &Arc<Shared>, id: usize, inputs: BTreeMap<String, Resolved>) -> Done {
    let ctx = &sh.ctx;
    let plan = &ctx.plan;
    let inst = &plan.instances[id];
    let stage = plan.stage_of(id);
    let t0 = sh.started.elapsed();
    let parts = ctx.key_parts(id, &inputs);
    let key = parts.digest();
    let forced = sh.opts.force.contains(&stage.name);
    let cacheable = stage.cache && !forced && !sh.opts.no_cache;
    let mut record = empty_record(stage);
    record.cache_key = Some(key.to_string());
    record.key_parts = serde_json::to_value(&parts).ok();
    record.inputs = parts.inputs.clone();
    record.env_identity = parts.env.clone();
    record.image = inst.image.as_ref().map(|r| json!({"reference": r, "id": ctx.images.get(r).map(|i| i.id.clone()), "repo_digests": ctx.images.get(r).map(|i| i.repo_digests.clone())}));
    record.start_ms = t0.as_millis() as u64;

    if cacheable {
        if let Some(d) = try_hit(sh, id, &key, &mut record).await {
            return d;
        }
    }
    let reason = if forced {
        Reason::Forced
    } else if sh.opts.no_cache {
        Reason::NoCache
    } else if !stage.cache {
        Reason::NotCacheable
    } else {
        let fam = family(plan, stage);
        // One load per family per run, even when a whole matrix misses at once.
        let cell = sh
            .families
            .lock()
            .expect("families")
            .entry(fam.clone())
            .or_default()
            .clone();
        let earlier = cell
            .get_or_init(|| async {
                let st = ctx.store.clone();
                let entries =
                    blocking(move || st.actions_in_family(&fam).unwrap_or_default()).await;
                crate::key::Earlier::new(&entries)
            })
            .await;
        crate::key::explain_with(&parts, earlier)
    };
    record.reason = reason.to_string();

    // Resource units first, then a job slot, in a fixed order so waiters cannot deadlock.
    let mut permits = Vec::new();
    let mut host_units = Vec::new();
    for (pool, n) in &stage.resources {
        tokio::select! {
            p = sh.pools[pool].acquire_many(*n) => permits.push(p.expect("pool open")),
            _ = sh.cancel.graceful.cancelled() => return interrupted(inst, record, sh),
        }
        if plan.pipeline.host_pools.contains(pool) {
            let units = plan.pipeline.resources[pool];
            tokio::select! {
                u = take_host_units(sh, pool, units, *n, &inst.label) => match u {
                    Ok(u) => host_units.push(u),
                    Err(e) => {
                        let status = StatusRecord {
                            label: inst.label.clone(),
                            status: Status::Failed,
                            exit_code: None,
                            error_class: Some("HeddleError".into()),
                            error: Some(error_chain(&e)),
                            stderr_tail: None,
                            cause: None,
                            tolerated: false,
                            matrix: inst.matrix.to_btree(),
                        };
                        return ended_before_start(inst, record, sh, status);
                    }
                },
                _ = sh.cancel.graceful.cancelled() => return interrupted(inst, record, sh),
            }
        }
    }
    let _job = tokio::select! {
        p = sh.jobs.acquire() => p.expect("jobs open"),
        _ = sh.cancel.graceful.cancelled() => return interrupted(inst, record, sh),
    };
    // Single flight: whoever holds the key computes it; the others then take the hit.
    let mut key_lock = if cacheable {
        let st = ctx.store.clone();
        let lock = match st.try_lock_key(&key) {
            Ok(Some(l)) => Some(l),
            Ok(None) => {
                let _ = sh.events.send(Event::Message(format!(
                    "{}: waiting for another heddle computing the same key",
                    inst.label
                )));
                let st = ctx.store.clone();
                let wait = blocking(move || st.lock_key(&key));
                tokio::select! {
                    l = wait => l.ok(),
                    _ = sh.cancel.graceful.cancelled() => return interrupted(inst, record, sh),
                }
            }
            Err(_) => None,
        };
        if let Some(d) = try_hit(sh, id, &key, &mut record).await {
            return d;
        }
        lock
    } else {
        None
    };

    let _ = sh.events.send(Event::Started {
        id,
        label: inst.label.clone(),
        reason: record.reason.clone(),
    });
    let exec = ctx.executor(stage);
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        let r = attempt_once(sh, id, &inputs, exec.as_ref(), &mut record).await;
        match r {
            Ok(outputs) => break Ok(outputs),
            Err(status)
                if attempt <= stage.retries
                    && status.error_class.as_deref() != Some("Interrupted")
                    && !sh.cancel.graceful.is_cancelled() =>
            {
                let _ = sh.events.send(Event::Message(format!(
                    "{}: attempt {attempt} failed ({}), retrying",
                    inst.label,
                    status.error.clone().unwrap_or_default()
                )));
                continue;
            }
            Err(status) => break Err(status),
        }
    };
    record.attempts = attempt;
    let elapsed = sh.started.elapsed();
    record.end_ms = elapsed.as_millis() as u64;
    record.duration_ms = (elapsed - t0).as_millis() as u64;
    match result {
        Ok(outputs) => {
            if stage.cache {
                let entry = ActionEntry {
                    key,
                    family: family(plan, stage),
                    key_parts: serde_json::to_value(&parts).expect("parts serialise"),
                    outputs: outputs.clone(),
                    duration_ms: record.duration_ms,
                    created_unix_ms: now_ms(),
                    meta: json!({"label": inst.label, "pipeline": plan.pipeline.name}),
                };
                let _ = sh
                    .commits
                    .send(Commit::Action(Box::new(entry), key_lock.take()));
            }
            let status = ok_status(&inst.label, &inst.matrix.to_btree());
            record.status = status.clone();
            record.outputs = outputs.clone();
            let _ = sh.events.send(Event::Finished {
                id,
                label: inst.label.clone(),
                status: Status::Ok,
                cached: false,
                duration_ms: record.duration_ms,
                error: None,
            });
            Done {
                status,
                outputs,
                record,
            }
        }
        Err(mut status) => {
            status.tolerated = stage.allow_failure && status.status == Status::Failed;
            record.status = status.clone();
            let _ = sh.events.send(Event::Finished {
                id,
                label: inst.label.clone(),
                status: status.status,
                cached: false,
                duration_ms: record.duration_ms,
                error: status.error.clone(),
            });
            Done {
                status,
                outputs: BTreeMap::new(),
                record,
            }
        }
    }
}

fn internal_failure(sh: &Shared, id: usize, what: &str) -> Done {
    let inst = &sh.ctx.plan.instances[id];
    let status = StatusRecord {
        label: inst.label.clone(),
        status: Status::Failed,
        exit_code: None,
        error_class: Some("InternalError".into()),
        error: Some(format!(
            "InternalError: heddle failed on this instance ({what}); please report it"
        )),
        stderr_tail: None,
        cause: None,
        tolerated: false,
        matrix: inst.matrix.to_btree(),
    };
    let mut record = empty_record(sh.ctx.plan.stage_of(id));
    record.status = status.clone();
    let _ = sh.events.send(Event::Finished {
        id,
        label: inst.label.clone(),
        status: Status::Failed,
        cached: false,
        duration_ms: 0,
        error: status.error.clone(),
    });
    Done {
        status,
        outputs: BTreeMap::new(),
        record,
    }
}

fn interrupted(inst: &crate::plan::Instance, record: InstanceRecord, sh: &Shared) -> Done {
    let status = StatusRecord {
        label: inst.label.clone(),
        status: Status::Skipped,
        exit_code: None,
        error_class: Some("Interrupted".into()),
        error: Some("run interrupted before it started".into()),
        stderr_tail: None,
        cause: Some(Cause {
            label: "interrupt".into(),
            error: Some("run interrupted".into()),
        }),
        tolerated: false,
        matrix: inst.matrix.to_btree(),
    };
    ended_before_start(inst, record, sh, status)
}

/// An instance that never started a command (interrupted, or a resource it could not take):
/// record the status and tell the display.
fn ended_before_start(
    inst: &crate::plan::Instance,
    mut record: InstanceRecord,
    sh: &Shared,
    status: StatusRecord,
) -> Done {
    record.status = status.clone();
    let _ = sh.events.send(Event::Finished {
        id: inst.id,
        label: inst.label.clone(),
        status: status.status,
        cached: false,
        duration_ms: 0,
        error: status.error.clone(),
    });
    Done {
        status,
        outputs: BTreeMap::new(),
        record,
    }
}

/// Serve from the cache: look up, restore outputs (skipping ones already in place).
async fn try_hit(
    sh: &Arc<Shared>,
    id: usize,
    key: &Digest,
    record: &mut InstanceRecord,
) -> Option<Done> {
    let ctx = &sh.ctx;
    let plan = ctx.plan.clone();
    let inst = &plan.instances[id];
    let store = ctx.store.clone();
    let stats = ctx.stats.clone();
    let key = *key;
    let dir = output_dir(&plan, &inst.label);
    let files = plan.stage_of(id).outputs.clone();
    // Inline, not on the blocking pool: a hit is a few small reads and stats, and a thread
    // hand-off per instance is what a no-op rerun of a long chain would otherwise spend.
    let restored = (move || -> Option<(ActionEntry, BTreeMap<String, String>)> {
        let entry = store.lookup_action(&key).ok().flatten()?;
        let mut paths = BTreeMap::new();
        for (name, out) in &entry.outputs {
            let file = files.get(name)?;
            let dest = dir.join(file);
            if !store.is_materialized(out, &dest, &stats) {
                std::fs::create_dir_all(&dir).ok()?;
                store.materialize(out, &dest).ok()?;
                stats.record(&dest, out.digest());
            }
            paths.insert(name.clone(), dest.to_string_lossy().into_owned());
        }
        Some((entry, paths))
    })()?;
    let (entry, paths) = restored;
    let status = ok_status(&inst.label, &inst.matrix.to_btree());
    record.status = status.clone();
    record.cached = true;
    record.reason = "cached".into();
    record.outputs = entry.outputs.clone();
    record.output_paths = relative_paths(&plan.pipeline.root, paths);
    record.end_ms = sh.started.elapsed().as_millis() as u64;
    let _ = sh.events.send(Event::Finished {
        id,
        label: inst.label.clone(),
        status: Status::Ok,
        cached: true,
        duration_ms: 0,
        error: None,
    });
    Some(Done {
        status,
        outputs: entry.outputs,
        record: record.clone(),
    })
}

fn relative_paths(root: &Path, paths: BTreeMap<String, String>) -> BTreeMap<String, String> {
    paths
        .into_iter()
        .map(|(k, p)| {
            let rel = Path::new(&p)
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or(p);
            (k, rel)
        })
        .collect()
}

/// Stored outputs and where they were materialised.
type Collected = (BTreeMap<String, OutputEntry>, BTreeMap<String, String>);

/// One execution in a fresh sandbox: lay out inputs, run, collect and store outputs.
async fn attempt_once(
    sh: &Arc<Shared>,
    id: usize,
    inputs: &BTreeMap<String, Resolved>,
    exec: &dyn Executor,
    record: &mut InstanceRecord,
) -> Result<BTreeMap<String, OutputEntry>, StatusRecord> {
    let ctx = &sh.ctx;
    let plan = ctx.plan.clone();
    let inst = &plan.instances[id];
    let stage = plan.stage_of(id);
    let fail = |class: &str, error: String, exit: Option<i64>, tail: Option<String>| StatusRecord {
        label: inst.label.clone(),
        status: Status::Failed,
        exit_code: exit,
        error_class: Some(class.to_string()),
        error: Some(error),
        stderr_tail: tail,
        cause: None,
        tolerated: false,
        matrix: inst.matrix.to_btree(),
    };
    let in_names: Vec<String> = inputs.keys().cloned().collect();
    let out_names: Vec<String> = stage.outputs.keys().cloned().collect();
    let pool = sh.sandboxes.clone();
    let sandbox = match blocking(move || pool.acquire(&in_names, &out_names)).await {
        Ok(s) => s,
        Err(e) => return Err(fail("HeddleError", e, None, None)),
    };
    let sb = sandbox.path().to_path_buf();
    {
        let store = ctx.store.clone();
        let ins = inputs.clone();
        let sb2 = sb.clone();
        if let Err(e) = blocking(move || lay_out(&store, &sb2, &ins)).await {
            return Err(fail(
                "HeddleError",
                format!("failed to lay out inputs: {e}"),
                None,
                None,
            ));
        }
    }
    let stage_dir = stage.def.as_ref().map(|d| d.dir.clone());
    let layout = exec.layout(&sb, stage_dir.as_deref());
    let ok = member_ok_fn(inputs);
    let command = render(&plan, inst, &layout, &ok).expect("templates were checked at plan time");
    record.command = Some(command.display());

    // A container gets only what its stage declares: the host's PATH/HOME mean nothing there.
    let mut env = if stage.container.is_some() {
        BTreeMap::new()
    } else {
        base_env()
    };
    if let Some(e) = stage.env.as_ref().and_then(|e| ctx.envs.get(e)) {
        let path = env.get("PATH").cloned().unwrap_or_default();
        let joined =
            std::env::join_paths(std::iter::once(e.bin_dir()).chain(std::env::split_paths(&path)))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or(path);
        env.insert("PATH".into(), joined);
        env.insert("VIRTUAL_ENV".into(), e.dir.to_string_lossy().into_owned());
    }
    for k in &stage.pass_env {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.clone(), v);
        }
    }
    env.extend(stage.vars.clone());
    let error_file = sb.join("work").join(".heddle-error.json");
    env.insert(
        "HEDDLE_ERROR_FILE".into(),
        error_file.to_string_lossy().into_owned(),
    );
    env.insert("HEDDLE_INSTANCE".into(), inst.label.clone());
    let facts_file = sb.join("work").join(".heddle-facts.json");
    env.insert(
        "HEDDLE_FACTS_FILE".into(),
        facts_file.to_string_lossy().into_owned(),
    );
    env.insert("HEDDLE_RUN_ID".into(), sh.opts.run_id.clone());

    let safe = path_segment(&inst.label);
    let stdout_log = sh.logs_dir.join(format!("{safe}.out"));
    let stderr_log = sh.logs_dir.join(format!("{safe}.err"));
    record.logs = Some([
        stdout_log.to_string_lossy().into_owned(),
        stderr_log.to_string_lossy().into_owned(),
    ]);
    let container = match (&stage.container, &inst.image) {
        (Some(c), Some(image)) => Some(ContainerRequest {
            image_id: ctx
                .images
                .get(image)
                .map(|i| i.id.clone())
                .unwrap_or_else(|| image.clone()),
            gpus: match &inst.gpus {
                None
                | Some(crate::spec::GpuSpec::None)
                | Some(crate::spec::GpuSpec::Template(_)) => heddle_containers::GpuRequest::None,
                Some(crate::spec::GpuSpec::All) => heddle_containers::GpuRequest::All,
                Some(crate::spec::GpuSpec::Count(n)) => {
                    heddle_containers::GpuRequest::Count(*n as u32)
                }
                Some(crate::spec::GpuSpec::Ids(v)) => heddle_containers::GpuRequest::Ids(v.clone()),
            },
            devices: c.devices.clone(),
            network: match c.network.as_str() {
                "host" => heddle_containers::NetworkMode::Host,
                "bridge" => heddle_containers::NetworkMode::Bridge,
                _ => heddle_containers::NetworkMode::None,
            },
            shm_size: c
                .shm_size
                .as_deref()
                .and_then(|s| heddle_containers::parse_size(s).ok()),
            memory: c
                .memory
                .as_deref()
                .and_then(|s| heddle_containers::parse_size(s).ok()),
            cpus: c.cpus,
            user: c.user.clone(),
            workdir: c.workdir.clone(),
            docker_host: c.docker_host.clone(),
            transfer: c.transfer,
        }),
        _ => None,
    };
    let req = ExecRequest {
        label: inst.label.clone(),
        run_id: sh.opts.run_id.clone(),
        command,
        sandbox: sb.clone(),
        stage_dir,
        env,
        timeout: stage.timeout,
        stdout_log: stdout_log.clone(),
        stderr_log: stderr_log.clone(),
        container,
    };
    let (ltx, mut lrx) = unbounded_channel::<String>();
    let events = sh.events.clone();
    let fwd = tokio::spawn(async move {
        while let Some(line) = lrx.recv().await {
            let _ = events.send(Event::Line { id, line });
        }
    });
    let t_exec = Instant::now();
    let outcome = exec.execute(req, ltx, sh.cancel.clone()).await;
    let _ = fwd.await;
    tracing::debug!(label = %inst.label, ms = t_exec.elapsed().as_secs_f64() * 1e3, "executed");
    let t_collect = Instant::now();
    let tail = || stderr_tail(&stderr_log);
    // Facts a stage reports about where it ran (a device's identity and firmware, say).
    if let Ok(text) = std::fs::read_to_string(&facts_file) {
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => record.facts = Some(v),
            Err(e) => {
                let _ = sh.events.send(Event::Message(format!(
                    "{}: HEDDLE_FACTS_FILE is not JSON ({e}); ignored",
                    inst.label
                )));
            }
        }
    }
    match outcome {
        Err(e) => return Err(fail("HeddleError", e.to_string(), None, None)),
        Ok(ExecOutcome::Exited(0)) => {}
        Ok(ExecOutcome::Exited(code)) => {
            let t = tail();
            let (class, line) = error_line(&error_file, t.as_deref())
                .unwrap_or_else(|| ("ExitCode".into(), format!("exit code {code}")));
            return Err(fail(&class, line, Some(code), t));
        }
        Ok(ExecOutcome::Signaled(s)) => {
            return Err(fail(
                "Signal",
                format!("killed by signal {s}"),
                None,
                tail(),
            ))
        }
        Ok(ExecOutcome::OomKilled(code)) => {
            return Err(fail(
                "OutOfMemory",
                "killed by the out-of-memory killer".into(),
                Some(code),
                tail(),
            ))
        }
        Ok(ExecOutcome::TimedOut(d)) => {
            return Err(fail(
                "Timeout",
                format!("timed out after {}", humantime::format_duration(d)),
                None,
                tail(),
            ))
        }
        Ok(ExecOutcome::Cancelled) => {
            // Interrupted is not a stage failure: it did not finish.
            let mut s = fail("Interrupted", "interrupted".into(), None, tail());
            s.status = Status::Skipped;
            s.cause = Some(Cause {
                label: "interrupt".into(),
                error: Some("run interrupted".into()),
            });
            return Err(s);
        }
    }

    // A host stage sees its inputs as hard links to blobs: a write through one (as root the
    // read-only mode does not stop it) must fail this stage and every stage that held the
    // blob, before any of them stores a result.
    {
        let store = ctx.store.clone();
        let ins = inputs.clone();
        if let Err(e) = blocking(move || check_inputs(&store, &ins)).await {
            return Err(fail("InputModified", e, None, tail()));
        }
    }

    // Collect: every declared output must exist; store them, then materialise.
    let store = ctx.store.clone();
    let stats = ctx.stats.clone();
    let files = stage.outputs.clone();
    let dir = output_dir(&plan, &inst.label);
    let sb2 = sb.clone();
    let collected = blocking(move || -> Result<Collected, (String, String)> {
        let mut outs = BTreeMap::new();
        let mut paths = BTreeMap::new();
        for (name, file) in &files {
            let p = sb2.join("out").join(name).join(file);
            if std::fs::symlink_metadata(&p).is_err() {
                return Err((
                    "MissingOutput".into(),
                    format!("output `{name}` ({file}) was not written"),
                ));
            }
            let entry = store.adopt_output(&p).map_err(|e| {
                let class = match e {
                    CacheError::SymlinkOutput { .. } | CacheError::UnsafeTree { .. } => {
                        "UnsafeOutput"
                    }
                    _ => "HeddleError",
                };
                (class.to_string(), error_chain(&e))
            })?;
            outs.insert(name.clone(), entry);
        }
        std::fs::create_dir_all(&dir).map_err(|e| {
            (
                "HeddleError".to_string(),
                format!("failed to create {}: {e}", dir.display()),
            )
        })?;
        for (name, entry) in &outs {
            let dest = dir.join(&files[name]);
            store
                .materialize(entry, &dest)
                .map_err(|e| ("HeddleError".to_string(), error_chain(&e)))?;
            stats.record(&dest, entry.digest());
            paths.insert(name.clone(), dest.to_string_lossy().into_owned());
        }
        Ok((outs, paths))
    })
    .await;
    drop(sandbox);
    tracing::debug!(label = %inst.label, ms = t_collect.elapsed().as_secs_f64() * 1e3, "collected");
    match collected {
        Ok((outs, paths)) => {
            record.output_paths = relative_paths(&plan.pipeline.root, paths);
            Ok(outs)
        }
        Err((class, msg)) => Err(fail(&class, msg, Some(0), tail())),
    }
}

/// Put inputs where the command expects them: `in/<name>/<file>`, gathered members as
/// `in/<name>/<k=v,...>/` with `matrix.json`, `status.json` and the file. The sandbox already
/// holds empty `in/<name>/` and `out/<name>/` folders ([`crate::sandbox`]).
fn lay_out(store: &Store, sb: &Path, inputs: &BTreeMap<String, Resolved>) -> Result<(), String> {
    let mk = |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()));
    for (name, r) in inputs {
        let dir = sb.join("in").join(name);
        match r {
            Resolved::Path { abs, .. } => {
                let file = abs
                    .file_name()
                    .map(|f| f.to_os_string())
                    .unwrap_or_default();
                copy_readonly(abs, &dir.join(file))?;
            }
            Resolved::One { entry, file } => {
                store
                    .link_into(entry, &dir.join(file))
                    .map_err(|e| error_chain(&e))?;
            }
            Resolved::Gather { file, members } => {
                for (_, mdir, status, entry) in members {
                    let d = dir.join(mdir);
                    mk(&d)?;
                    let write = |n: &str, v: &dyn erased::Json| {
                        std::fs::write(d.join(n), v.json()).map_err(|e| e.to_string())
                    };
                    write("matrix.json", &status.matrix)?;
                    write("status.json", status)?;
                    if let Some(e) = entry {
                        store
                            .link_into(e, &d.join(file))
                            .map_err(|e| error_chain(&e))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Take `want` units of a host-wide pool ([`crate::host_pool`]), polling while they are
/// held by other heddle processes and saying once who holds them.
async fn take_host_units(
    sh: &Shared,
    pool: &str,
    units: u32,
    want: u32,
    label: &str,
) -> Result<crate::host_pool::HostUnits, crate::host_pool::HostPoolError> {
    let dir = crate::host_pool::lock_dir();
    let mut told = false;
    loop {
        let who = (sh.opts.run_id.as_str(), label);
        if let Some(u) = crate::host_pool::try_take(&dir, pool, units, want, who)? {
            return Ok(u);
        }
        if !told {
            told = true;
            let held: Vec<String> = crate::host_pool::holders(&dir)
                .into_iter()
                .filter(|h| h.pool == pool)
                .map(|h| {
                    format!(
                        "pid {} run {} ({})",
                        h.pid.map_or("?".into(), |p| p.to_string()),
                        h.run_id,
                        h.instance
                    )
                })
                .collect();
            let _ = sh.events.send(Event::Message(format!(
                "{label}: waiting for host-wide `{pool}`, held by {}",
                held.join(", ")
            )));
        }
        tokio::time::sleep(crate::host_pool::POLL).await;
    }
}

/// [`Store::check_fed`] for every blob laid out as an input, naming the input on failure.
fn check_inputs(store: &Store, inputs: &BTreeMap<String, Resolved>) -> Result<(), String> {
    for (name, r) in inputs {
        let entries: Vec<&OutputEntry> = match r {
            Resolved::Path { .. } => continue,
            Resolved::One { entry, .. } => vec![entry],
            Resolved::Gather { members, .. } => {
                members.iter().filter_map(|m| m.3.as_ref()).collect()
            }
        };
        for entry in entries {
            store.check_fed(entry).map_err(|e| {
                format!(
                    "input `{name}` was modified while the stage ran (by this stage or one \
                     beside it); it must be treated as read-only: {}",
                    error_chain(&e)
                )
            })?;
        }
    }
    Ok(())
}

mod erased {
    pub trait Json {
        fn json(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> Vec<u8> {
            serde_json::to_vec_pretty(self).expect("serialisable")
        }
    }
}

/// A repo file or folder copied (reflinked where possible) into the sandbox, read-only, so a
/// stage cannot change the user's file through its input path.
fn copy_readonly(src: &Path, dest: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if meta.is_dir() {
        std::fs::create_dir_all(dest).map_err(|e| e.to_string())?;
        for e in std::fs::read_dir(src).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            copy_readonly(&e.path(), &dest.join(e.file_name()))?;
        }
        return Ok(());
    }
    reflink_copy::reflink_or_copy(src, dest)
        .map_err(|e| format!("failed to copy {}: {e}", src.display()))?;
    let mut perm = std::fs::metadata(dest)
        .map_err(|e| e.to_string())?
        .permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(dest, perm).map_err(|e| e.to_string())
}

fn stderr_tail(path: &Path) -> Option<String> {
    crate::exec::output::tail_of(path)
}

/// The error class and line: the stage's own error file, else the last traceback-style
/// `Name: message` line of stderr (`AttributeError: …`, `hailo_sdk_common.InferenceError: …`).
fn error_line(error_file: &Path, tail: Option<&str>) -> Option<(String, String)> {
    if let Ok(text) = std::fs::read_to_string(error_file) {
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            let class = v
                .get("class")
                .and_then(Value::as_str)
                .unwrap_or("Error")
                .to_string();
            let msg = v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let short = class.rsplit('.').next().unwrap_or(&class).to_string();
            return Some((
                short.clone(),
                if msg.is_empty() {
                    short
                } else {
                    format!("{short}: {msg}")
                },
            ));
        }
    }
    for line in tail?.lines().rev() {
        let line = line.trim();
        if let Some((name, msg)) = line.split_once(": ") {
            let short = name.rsplit('.').next().unwrap_or(name);
            let looks = !name.contains(' ')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && (short.ends_with("Error")
                    || short.ends_with("Exception")
                    || short == "KeyboardInterrupt"
                    || short == "SystemExit");
            if looks {
                return Some((short.to_string(), format!("{short}: {msg}")));
            }
        }
    }
    None
}

/// Digest every file of a `uses` folder (skipping Python caches), through the stat cache.
pub fn definition_digests(
    stats: &StatCache,
    dir: &Path,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "__pycache__" || name.ends_with(".pyc") || name.starts_with(".") {
                continue;
            }
            let p = e.path();
            let ft = e.file_type().map_err(|e| e.to_string())?;
            if ft.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .replace('\\', "/");
                let dg = stats.hash(&p).map_err(|e| e.to_string())?;
                out.insert(rel, dg.to_string());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_from_python_tracebacks() {
        let dir = tempfile::tempdir().unwrap();
        let none = dir.path().join("none.json");
        let tail = "Traceback (most recent call last):\n  File \"x.py\", line 3\nAttributeError: 'function' object has no attribute 'set_wraparound_loss'\n";
        assert_eq!(
            error_line(&none, Some(tail)).unwrap(),
            (
                "AttributeError".into(),
                "AttributeError: 'function' object has no attribute 'set_wraparound_loss'".into()
            )
        );
        let t2 = "hailo_sdk_common.InferenceError: graph execution error at conv2_1/act_op_1/pow\n";
        assert_eq!(error_line(&none, Some(t2)).unwrap().0, "InferenceError");
        assert!(error_line(&none, Some("just some text: here\n")).is_none());
        let f = dir.path().join("e.json");
        std::fs::write(&f, r#"{"class":"pkg.SdkError","message":"boom"}"#).unwrap();
        assert_eq!(
            error_line(&f, None).unwrap(),
            ("SdkError".into(), "SdkError: boom".into())
        );
    }

    #[test]
    fn duration_display() {
        let d = std::time::Duration::from_secs(600);
        assert_eq!(humantime::format_duration(d).to_string(), "10m");
    }
}

/// Pins the exact key bytes of host and Docker instances (plain, matrix, gather, every container
/// setting), so moving key assembly around provably changes no key.
#[cfg(test)]
mod key_pins {
    use super::*;

    const PIPELINE: &str = r#"
[pipeline]
name = "pins"

[params]
level = 3

[stages.make]
matrix = { k = [1, 2] }
vars = { MODE = "fast" }
run = "echo {{ matrix.k }} {{ params.level }} > {{ out.t }}"
outputs = { t = "t.txt" }

[stages.up]
image = "heddle-pin:latest"
gpus = 2
devices = ["/dev/null:/dev/hailo0"]
network = "bridge"
shm_size = "64m"
memory = "1g"
cpus = 1.5
user = "1000:1000"
workdir = "/w"
inputs = { t = "make[k=1].t" }
run = "tr a-z A-Z < {{ in.t }} > {{ out.u }}"
outputs = { u = "u.txt" }

[stages.bare]
image = "heddle-pin:latest"
run = "true > {{ out.b }}"
outputs = { b = "b.txt" }

[stages.all]
inputs = { ts = "make[*].t" }
allow_failure = true
run = "cat {{ in.ts }} > {{ out.a }}"
outputs = { a = "a.txt" }
"#;

    fn context(dir: &Path) -> Context {
        let file = dir.join("p.toml");
        std::fs::write(&file, PIPELINE).unwrap();
        let opts = crate::model::LoadOptions {
            root: Some(dir.to_path_buf()),
            ..Default::default()
        };
        let pipeline = crate::model::load(&file, &opts).expect("pipeline loads");
        let plan = Arc::new(crate::plan::build(Arc::new(pipeline)).expect("plan builds"));
        let store = Arc::new(Store::open(&dir.join("cache")).unwrap());
        let image = ImageIdentity {
            reference: "heddle-pin:latest".into(),
            id: "sha256:0123456789abcdef".into(),
            repo_digests: vec![],
        };
        Context {
            plan,
            store,
            stats: Arc::new(StatCache::load(&dir.join("stats"))),
            definitions: BTreeMap::new(),
            repo_inputs: BTreeMap::new(),
            envs: BTreeMap::new(),
            images: [("heddle-pin:latest".to_string(), image)].into(),
            unresolved: BTreeMap::new(),
            host: Arc::new(crate::exec::host::HostExecutor),
            docker: None,
        }
    }

    /// Every instance's key, in plan order, with `make[k=2]` failed so the gather sees a
    /// failed member.
    fn keys(ctx: &Context) -> Vec<(String, String, Value)> {
        let plan = &ctx.plan;
        let mut done: Vec<Option<Done>> = vec![None; plan.instances.len()];
        let mut out = Vec::new();
        for &id in &plan.order {
            let inst = &plan.instances[id];
            let inputs = resolve_inputs(ctx, id, &done).expect("inputs resolve");
            let parts = ctx.key_parts(id, &inputs);
            out.push((
                inst.label.clone(),
                parts.digest().to_string(),
                parts.executor.clone(),
            ));
            let mut status = ok_status(&inst.label, &inst.matrix.to_btree());
            let mut outputs = BTreeMap::new();
            if inst.label == "make[k=2]" {
                status.status = Status::Failed;
                status.tolerated = true;
                status.error = Some("ExitCode: exit code 1".into());
            } else {
                for name in plan.stage_of(id).outputs.keys() {
                    let entry = OutputEntry::File {
                        digest: Digest::of_bytes(inst.label.as_bytes()),
                        size: 3,
                        executable: false,
                    };
                    outputs.insert(name.clone(), entry);
                }
            }
            done[id] = Some(Done {
                status,
                outputs,
                record: empty_record(plan.stage_of(id)),
            });
        }
        out
    }

    #[test]
    fn key_bytes_are_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let got = keys(&ctx);
        let text: Vec<String> = got
            .iter()
            .map(|(l, k, e)| format!("{l} {k} {}", serde_json::to_string(e).unwrap()))
            .collect();
        let docker = r#"{"cpus":1.5,"devices":["/dev/null:/dev/hailo0"],"gpus":2,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":"1g","network":"bridge","shm_size":"64m","user":"1000:1000","workdir":"/w"}"#;
        let bare = r#"{"cpus":null,"devices":[],"gpus":null,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":null,"network":"none","shm_size":null,"user":null,"workdir":null}"#;
        let host = r#"{"kind":"host"}"#;
        assert_eq!(
            text,
            [
                format!("bare d0e8f9b95300e7d4a26f3aa0740bb762570bd91a1e695f9955230043300aeba1 {bare}"),
                format!("make[k=1] 0fcab40ff2dce9fa7fd2e2290def32c3d49efbb5d72de82114680b280828eaac {host}"),
                format!("make[k=2] 06b0649ae0fcca6f2af9f1d4416c7bd2222f3df82887fb9488b66f0a9348fe49 {host}"),
                format!("all 080c4d1e4d138f3665c382b3d641e34469d506f67f6706839a7eda317bb8a096 {host}"),
                format!("up 39ad2534e15f85d6853274a98e87153148bb51b5881ad5e10b360d339d60f7e2 {docker}"),
            ]
        );
    }
}

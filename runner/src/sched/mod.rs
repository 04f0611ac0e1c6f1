//! The scheduler: one supervisor loop that walks the plan's DAG on tokio.
//!
//! An instance starts as soon as every instance it reads from has finished; a cache hit
//! restores outputs without taking a job slot; a miss waits for its resource units, a job slot
//! and the cache's per-key lock (single flight across processes), checks the cache again, runs
//! with retries, stores its outputs and records the action. A failure skips its downstream cone
//! unless the failure is allowed, in which case gathers still run and see its status record.
//! Ctrl-C (or SIGTERM) stops gracefully; a second one kills. The loop returns only after every
//! task — and so every child process and container — is gone.
//!
//! This module holds the loop; [`instance`] one instance's life, [`attempt`] one execution,
//! [`outcome`] how an instance ends, [`commit`] the group commit of action entries.

mod attempt;
mod commit;
mod instance;
mod on_cluster;
mod outcome;

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use petgraph::graph::NodeIndex;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::{OnceCell, Semaphore};

use crate::exec::Cancel;
use crate::explain::Earlier;
use crate::inputs::resolve_inputs;
use crate::plan::Plan;
use crate::record::{Cause, ErrorClass, InstanceRecord, RunRecord, RunStatus, Status};
use crate::sandbox::SandboxPool;
use crate::units::placed::HostSlots;
use crate::units::run::RunPools;
use commit::Commit;

// The CLI reaches these through the scheduler, where they were first defined.
pub use crate::event::{Event, Note};
use crate::hostname::hostname;
use crate::prepare::Context;
use crate::run_options::RunOptions;

/// What every instance task reads: the context, the run's limits and its channels.
struct Shared {
    ctx: Context,
    commits: UnboundedSender<Commit>,
    /// Earlier entries per family, read once per run to explain misses.
    families: std::sync::Mutex<BTreeMap<String, Arc<OnceCell<Earlier>>>>,
    opts: RunOptions,
    jobs: Semaphore,
    /// The pipeline's `[resources]` ([`crate::units::run`]).
    run_pools: RunPools,
    /// This run's units on each configured host ([`crate::units::placed`]).
    host_slots: HostSlots,
    cancel: Cancel,
    events: UnboundedSender<Event>,
    started: Instant,
    logs_dir: PathBuf,
    sandboxes: Arc<SandboxPool>,
}

/// One instance as the scheduler's steps see it: the run's shared state, the instance's index,
/// and what the plan says of it, looked up once.
#[derive(Clone, Copy)]
struct Inst<'a> {
    sh: &'a Shared,
    id: usize,
    inst: &'a crate::plan::Instance,
    stage: &'a crate::model::Stage,
}

impl<'a> Inst<'a> {
    fn new(sh: &'a Shared, id: usize) -> Inst<'a> {
        let plan = &sh.ctx.plan;
        Inst {
            sh,
            id,
            inst: &plan.instances[id],
            stage: plan.stage_of(id),
        }
    }
}

/// Walk the plan. Returns the run record (also when interrupted).
pub async fn run(ctx: Context, opts: RunOptions, events: UnboundedSender<Event>) -> RunRecord {
    let plan = ctx.plan.clone();
    let started_unix_ms = now_ms();
    let (commit_tx, commit_rx) = unbounded_channel::<Commit>();
    let committer = tokio::spawn(commit::commit_loop(
        ctx.store.clone(),
        commit_rx,
        events.clone(),
        opts.remote.clone(),
        opts.cluster.clone(),
    ));
    let shared = Arc::new(Shared::new(ctx, opts, commit_tx, events));
    // The supervisor is a task of its own, on a worker thread, not a part of the caller's
    // future (the CLI's `block_on`, on the main thread): an instance that ends then wakes it on
    // the worker it ended on, and the instance it starts next is queued there too. On the
    // caller's thread each of those two hand-offs was a thread switch on a chain's critical
    // path, per stage.
    let walk = tokio::spawn({
        let sh = shared.clone();
        async move {
            let mut walk = Walk::new(&plan);
            walk.drive(&sh).await;
            walk
        }
    })
    .await
    // A panic in the supervisor is heddle's bug: raise it as it was, with its own message.
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));

    commit::flush(&shared.commits).await;
    let _ = &committer;
    #[cfg(target_os = "linux")]
    crate::exec::contain::sweep_run().await;
    let pool = shared.sandboxes.clone();
    for (path, e) in blocking(move || pool.remove_all()).await {
        let _ = shared.events.send(Event::Note(Note::SandboxLeft {
            path,
            error: e.to_string(),
        }));
    }
    repair_out(&shared, &walk).await;
    let _ = shared.ctx.stats.save();
    walk.into_record(&shared, started_unix_ms)
}

/// A stage that wrote through an input changed the upstream's bytes in `out/` too (they share
/// the blob's inode): put them back as the upstream made them, or take them away, and say so
/// ([`crate::outputs::repair_edited`]).
async fn repair_out(sh: &Arc<Shared>, walk: &Walk) {
    let edited = walk
        .done
        .iter()
        .flatten()
        .any(|(_, d)| d.status.error_class == Some(ErrorClass::InputModified));
    if !edited {
        return;
    }
    let done: Vec<(String, InstanceRecord)> = walk
        .done
        .iter()
        .flatten()
        .filter(|(_, d)| d.status.status == Status::Ok)
        .cloned()
        .collect();
    let (store, stats) = (sh.ctx.store.clone(), sh.ctx.stats.clone());
    let root = walk.plan.pipeline.root.clone();
    let repairs = blocking(move || {
        let it = done
            .iter()
            .map(|(l, d)| (l.as_str(), &d.outputs, &d.output_paths));
        crate::outputs::repair_edited(&store, &stats, &root, it)
    })
    .await;
    for r in repairs {
        let note = match r {
            crate::outputs::Repair::Restored { label, path } => Note::OutputRepaired {
                path,
                by: label,
                restored: true,
            },
            crate::outputs::Repair::Removed { label, path } => Note::OutputRepaired {
                path,
                by: label,
                restored: false,
            },
        };
        let _ = sh.events.send(Event::Note(note));
    }
}

impl Shared {
    fn new(
        ctx: Context,
        opts: RunOptions,
        commits: UnboundedSender<Commit>,
        events: UnboundedSender<Event>,
    ) -> Shared {
        let plan = &ctx.plan;
        let logs_dir = plan
            .pipeline
            .root
            .join(".heddle")
            .join("logs")
            .join(&opts.run_id);
        let _ = std::fs::create_dir_all(&logs_dir);
        let scratch = ctx.store.root().join("scratch");
        let _ = std::fs::create_dir_all(&scratch);
        Shared {
            commits,
            families: Default::default(),
            run_pools: RunPools::new(&plan.pipeline.resources, &plan.pipeline.host_pools),
            host_slots: HostSlots::new(ctx.placement.hosts().map(|h| (h.name.as_str(), &h.pools))),
            jobs: Semaphore::new(opts.jobs.max(1)),
            cancel: Cancel::default(),
            events,
            started: Instant::now(),
            logs_dir,
            sandboxes: Arc::new(SandboxPool::new(scratch)),
            ctx,
            opts,
        }
    }
}

/// The supervisor's state: what each instance still waits for, what has finished, what is
/// ready, and why the run stops starting new work.
///
/// Started instances are bounded ([`started_at_most`]): each one is a task holding its future,
/// its inputs and its key parts, and a no-op run of a 100,000-value matrix used to start them
/// all at once, though two worker threads serve the cache hits one by one.
struct Walk {
    plan: Arc<Plan>,
    waiting: Vec<usize>,
    /// Each finished instance's label and record, by id. The label is here, not added at the
    /// end, so that the run record's list is this vector reused in place: building a second
    /// one beside it cost ~0.8 KB of fresh memory per instance.
    done: Vec<Option<(String, InstanceRecord)>>,
    queue: VecDeque<usize>,
    running: usize,
    stop_cause: Option<Cause>,
    interrupts: u32,
    /// Per instance, 1 + the last instance whose end counted down its `waiting`: a dependent
    /// reached twice through one upstream (parallel edges) counts once, without a set
    /// allocated per ended instance.
    counted_by: Vec<usize>,
}

/// How many instances may be started and not yet ended: enough to keep `--jobs` stages and the
/// cache lookups of a remote (network round trips, which overlap) busy, few enough that a huge
/// ready set costs memory in proportion to the window, not to the set.
fn started_at_most(jobs: usize) -> usize {
    const LOOKUPS_IN_FLIGHT: usize = 256;
    jobs.saturating_mul(2).max(LOOKUPS_IN_FLIGHT)
}

impl Walk {
    fn new(plan: &Arc<Plan>) -> Walk {
        let waiting: Vec<usize> = plan.instances.iter().map(|i| i.deps.len()).collect();
        let queue = (0..waiting.len()).filter(|i| waiting[*i] == 0).collect();
        let mut done = Vec::new();
        done.resize_with(waiting.len(), || None);
        Walk {
            plan: plan.clone(),
            counted_by: vec![0; waiting.len()],
            waiting,
            done,
            queue,
            running: 0,
            stop_cause: None,
            interrupts: 0,
        }
    }

    /// Start what is ready, then wait for an instance to end or a signal, until nothing runs.
    async fn drive(&mut self, sh: &Arc<Shared>) {
        let (tx, mut rx) = unbounded_channel::<(usize, InstanceRecord)>();
        let mut signals = signal_stream();
        loop {
            self.start_ready(sh, &tx);
            if self.running == 0 {
                break;
            }
            tokio::select! {
                Some((id, rec)) = rx.recv() => self.ended(sh, id, rec),
                Some(()) = signals.recv() => self.interrupted(sh),
            }
        }
    }

    /// Start (or skip) what is ready, at most [`started_at_most`] instances at a time.
    fn start_ready(&mut self, sh: &Arc<Shared>, tx: &UnboundedSender<(usize, InstanceRecord)>) {
        let window = started_at_most(sh.opts.jobs);
        while self.running < window {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let skip = match (&self.stop_cause, resolve_inputs(&sh.ctx, id, &self.done)) {
                (Some(c), _) => Some((c.clone(), false)),
                (None, Err(c)) => Some(c),
                (None, Ok(inputs)) => {
                    self.running += 1;
                    let (sh, tx) = (sh.clone(), tx.clone());
                    tokio::spawn(async move {
                        // A panic inside an instance must end that instance, not hang the run.
                        // Caught in this task: a second task per instance to catch it cost a
                        // spawn and a join for every hit of a no-op run.
                        let run = instance::process(Inst::new(&sh, id), inputs);
                        let rec = match AssertUnwindSafe(run).catch_unwind().await {
                            Ok(rec) => rec,
                            Err(panic) => outcome::internal_failure(
                                Inst::new(&sh, id),
                                &panic_message(panic.as_ref()),
                            ),
                        };
                        let _ = tx.send((id, rec));
                    });
                    None
                }
            };
            if let Some((cause, tolerated)) = skip {
                let rec = outcome::skipped(Inst::new(sh, id), cause, tolerated);
                self.finish(id, rec);
            }
        }
    }

    /// A running instance ended; a failure the pipeline does not allow stops new starts
    /// (unless `--keep-going`).
    fn ended(&mut self, sh: &Shared, id: usize, rec: InstanceRecord) {
        self.running -= 1;
        let s = &rec.status;
        if s.status == Status::Failed
            && !s.tolerated
            && !sh.opts.keep_going
            && self.stop_cause.is_none()
        {
            self.stop_cause = Some(Cause {
                label: s.label.clone(),
                error: s.error.clone(),
            });
        }
        self.finish(id, rec);
    }

    /// Ctrl-C: the first stops gracefully, the second kills.
    fn interrupted(&mut self, sh: &Shared) {
        self.interrupts += 1;
        if self.interrupts == 1 {
            let _ = sh.events.send(Event::Note(Note::Interrupt));
            sh.cancel.graceful.cancel();
            self.stop_cause.get_or_insert(outcome::interrupt_cause());
        } else {
            sh.cancel.force.cancel();
        }
    }

    /// Record `id` as finished and queue each dependent that no longer waits on anything.
    fn finish(&mut self, id: usize, rec: InstanceRecord) {
        self.done[id] = Some((self.plan.instances[id].label.clone(), rec));
        for m in self.plan.graph.neighbors(NodeIndex::new(id)) {
            let m = m.index();
            if self.counted_by[m] != id + 1 {
                self.counted_by[m] = id + 1;
                self.waiting[m] -= 1;
                if self.waiting[m] == 0 {
                    self.queue.push_back(m);
                }
            }
        }
    }

    /// The run record, every instance's record with its upstreams' labels.
    fn into_record(self, sh: &Shared, started_unix_ms: u64) -> RunRecord {
        let plan = &self.plan;
        let status = if self.interrupts > 0 {
            RunStatus::Interrupted
        } else if self
            .done
            .iter()
            .flatten()
            .any(|(_, d)| d.status.status != Status::Ok && !d.status.tolerated)
        {
            RunStatus::Failed
        } else {
            RunStatus::Completed
        };
        let instances = self
            .done
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let (label, mut record) = d.expect("every instance finishes");
                record.deps = plan.instances[i]
                    .deps
                    .iter()
                    .map(|d| plan.instances[*d].label.clone())
                    .collect();
                (label, record)
            })
            // Collected in place: `Option<(String, _)>` and `(String, _)` have one layout.
            .collect();
        RunRecord {
            run_id: sh.opts.run_id.clone(),
            pipeline: plan.pipeline.name.clone(),
            pipeline_file: pipeline_file(plan),
            status,
            started_unix_ms,
            duration_ms: sh.started.elapsed().as_millis() as u64,
            heddle_version: env!("CARGO_PKG_VERSION").into(),
            host: hostname(),
            params: plan.pipeline.params.clone(),
            jobs: sh.opts.jobs,
            instances,
        }
    }
}

/// The pipeline file relative to the project root, so records and entries travel between
/// checkouts.
fn pipeline_file(plan: &Plan) -> String {
    std::path::absolute(&plan.pipeline.file)
        .ok()
        .and_then(|a| {
            a.strip_prefix(&plan.pipeline.root)
                .ok()
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| plan.pipeline.file.clone())
        .to_string_lossy()
        .into_owned()
}

/// Ctrl-C, and SIGTERM and SIGHUP on unix, as one stream.
fn signal_stream() -> UnboundedReceiver<()> {
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

/// What a caught panic said, as `JoinError` words it.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = (panic.downcast_ref::<&str>().copied())
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic");
    format!("panicked with message {text:?}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking task panicked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_in_an_instance_is_caught_with_its_message() {
        let caught = AssertUnwindSafe(async { panic!("boom {}", 7) })
            .catch_unwind()
            .await;
        let panic = caught.unwrap_err();
        assert_eq!(
            panic_message(panic.as_ref()),
            "panicked with message \"boom 7\""
        );
        let caught = AssertUnwindSafe(async { std::panic::panic_any(3_u8) })
            .catch_unwind()
            .await;
        let panic = caught.unwrap_err();
        assert_eq!(
            panic_message(panic.as_ref()),
            "panicked with message \"a panic\""
        );
    }
}

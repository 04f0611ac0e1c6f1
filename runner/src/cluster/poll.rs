//! One loop per run speaks to the engine ([`Engine`]): each tick it cancels what was asked to
//! be cancelled (one call), lists every job of the run with ONE status query (polling per job is what
//! floods controllers: Snakemake-Profiles/slurm#74, nextflow#2696), submits what waits to be
//! submitted unless a live job of the same name exists already (then that job is adopted),
//! and tells each waiting instance its job's state through a watch channel.
//!
//! Submitting on the tick costs up to one poll interval of latency per job and buys the
//! adoption check without a query of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::{oneshot, watch};

use super::engine::{Engine, EngineError, JobRow, JobState, Submission};
use crate::hosts::Cluster;

/// A job handed out by [`Poller::submit`]: its id, whether an existing job was adopted, and
/// its state as the latest tick saw it.
pub struct Job {
    pub id: String,
    pub adopted: bool,
    pub state: watch::Receiver<JobState>,
}

type Reply = oneshot::Sender<Result<Job, EngineError>>;

#[derive(Default)]
struct Pending {
    submits: Vec<(Submission, Reply)>,
    cancels: Vec<String>,
}

struct Tracked {
    name: String,
    state: watch::Sender<JobState>,
    /// Submitted after the last query began: absent from its answer is not "vanished".
    fresh: bool,
}

/// What the loop did, for the run's summary line and the docs' overhead numbers.
#[derive(Default)]
pub struct Counts {
    pub submitted: AtomicU64,
    pub adopted: AtomicU64,
    /// Job arrays submitted (their tasks count in `submitted`).
    pub arrays: AtomicU64,
    pub queries: AtomicU64,
    pub cancels: AtomicU64,
}

pub struct Poller {
    cluster: Cluster,
    engine: Arc<dyn Engine>,
    pending: Mutex<Pending>,
    jobs: Mutex<HashMap<String, Tracked>>,
    started: Mutex<bool>,
    /// Since when status queries fail without a break, and the last one's error.
    failing: Mutex<Option<(Instant, EngineError)>>,
    pub counts: Counts,
    warn: Arc<dyn Fn(String) + Send + Sync>,
}

impl Poller {
    pub fn new(
        cluster: Cluster,
        engine: Arc<dyn Engine>,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Arc<Poller> {
        Arc::new(Poller {
            cluster,
            engine,
            pending: Mutex::default(),
            jobs: Mutex::default(),
            started: Mutex::new(false),
            failing: Default::default(),
            counts: Counts::default(),
            warn,
        })
    }

    /// Queue `s` for the next tick; the job submitted (or adopted) for it.
    pub async fn submit(self: &Arc<Self>, s: Submission) -> Result<Job, EngineError> {
        self.start();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("poller").submits.push((s, tx));
        rx.await.unwrap_or_else(|_| {
            Err(EngineError::Spawn {
                program: "heddle",
                message: "the cluster driver stopped".into(),
            })
        })
    }

    /// Cancel job `id` at the next tick.
    pub fn cancel(&self, id: &str) {
        self.pending
            .lock()
            .expect("poller")
            .cancels
            .push(id.to_string());
    }

    /// Start the loop once; it ends when the poller is dropped (the run is over).
    fn start(self: &Arc<Self>) {
        let mut started = self.started.lock().expect("poller");
        if !*started {
            *started = true;
            let weak = Arc::downgrade(self);
            let every = self.cluster.poll_interval;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(p) = Weak::upgrade(&weak) else {
                        break;
                    };
                    p.tick().await;
                }
            });
        }
    }

    async fn tick(&self) {
        let Pending { submits, cancels } = std::mem::take(&mut *self.pending.lock().expect("p"));
        if !cancels.is_empty() {
            self.counts.cancels.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.engine.cancel(&cancels).await {
                (self.warn)(format!("warning: cluster {}: {e}", self.cluster.name));
            }
        }
        let names: Vec<String> = {
            let jobs = self.jobs.lock().expect("jobs");
            let mut n: Vec<String> = jobs.values().map(|t| t.name.clone()).collect();
            n.extend(submits.iter().map(|(s, _)| s.name.clone()));
            n.sort();
            n.dedup();
            n
        };
        if names.is_empty() {
            return;
        }
        self.counts.queries.fetch_add(1, Ordering::Relaxed);
        let rows = match self.engine.query(&names).await {
            Ok(rows) => {
                if self.failing.lock().expect("failing").take().is_some() {
                    (self.warn)(format!("cluster {}: answering again", self.cluster.name));
                }
                rows
            }
            Err(e) => {
                // A controller that does not answer this tick may answer the next: the jobs
                // keep their last state, and submissions wait, up to `unreachable_limit`.
                let since = {
                    let mut failing = self.failing.lock().expect("failing");
                    let first = failing.is_none();
                    let since = failing.as_ref().map_or_else(Instant::now, |(t, _)| *t);
                    *failing = Some((since, e.clone()));
                    if first {
                        (self.warn)(format!(
                            "warning: cluster {}: {e} (the run waits up to {} for it; Ctrl-C to stop)",
                            self.cluster.name,
                            humantime::format_duration(self.cluster.unreachable_limit)
                        ));
                    }
                    since
                };
                if since.elapsed() >= self.cluster.unreachable_limit {
                    self.give_up(submits, since, &e);
                } else {
                    self.pending.lock().expect("p").submits.extend(submits);
                }
                return;
            }
        };
        self.update(&rows);
        // The instance was interrupted before its job existed.
        let submits: Vec<_> = submits
            .into_iter()
            .filter(|(_, r)| !r.is_closed())
            .collect();
        let (singles, arrays) = self.shape_groups(submits, &rows);
        for (s, reply) in singles {
            let job = self.submit_or_adopt(&s, &rows).await;
            self.reply(reply, job);
        }
        for group in arrays {
            self.submit_array(group).await;
        }
    }

    /// The engine has not answered for `unreachable_limit`: every waiting submission fails
    /// and every tracked job ends as [`JobState::Unanswered`], so no wait hangs on it. Their
    /// cancels still go out on later ticks, should the engine come back while the run ends.
    fn give_up(&self, submits: Vec<(Submission, Reply)>, since: Instant, last: &EngineError) {
        let why = format!(
            "cluster {} ({}) did not answer status queries for {} s; the last error: {last}",
            self.cluster.name,
            self.cluster.kind.as_str(),
            since.elapsed().as_secs()
        );
        for (_, reply) in submits {
            let _ = reply.send(Err(EngineError::Unanswered {
                message: why.clone(),
            }));
        }
        let jobs = std::mem::take(&mut *self.jobs.lock().expect("jobs"));
        for (_, t) in jobs {
            t.state
                .send_replace(JobState::Unanswered { why: why.clone() });
        }
    }

    /// Hand a job to its instance; one nobody waits for any more is cancelled, so no job
    /// outlives the run.
    fn reply(&self, reply: Reply, job: Result<Job, EngineError>) {
        if let Err(Ok(job)) = reply.send(job) {
            self.cancel(&job.id);
        }
    }

    /// Submissions of one shape (for SLURM, the same `sbatch` arguments but for the name)
    /// become one job array when there are two or more and none has a live job to adopt; the
    /// rest are submitted one by one, and all of them where the engine has no arrays. A matrix whose instances become ready together is one array.
    #[allow(clippy::type_complexity)]
    fn shape_groups(
        &self,
        submits: Vec<(Submission, Reply)>,
        rows: &[JobRow],
    ) -> (Vec<(Submission, Reply)>, Vec<Vec<(Submission, Reply)>>) {
        let mut shapes: Vec<(Vec<String>, Vec<(Submission, Reply)>)> = Vec::new();
        let mut singles = Vec::new();
        for (s, r) in submits {
            let live = rows
                .iter()
                .any(|row| row.name == s.name && row.state.is_live());
            if live {
                singles.push((s, r));
                continue;
            }
            let Some(shape) = self.engine.array_shape(&s) else {
                singles.push((s, r));
                continue;
            };
            match shapes.iter_mut().find(|(k, _)| *k == shape) {
                Some((_, group)) => group.push((s, r)),
                None => shapes.push((shape, vec![(s, r)])),
            }
        }
        let mut arrays = Vec::new();
        for (_, group) in shapes {
            if group.len() >= 2 {
                arrays.push(group);
            } else {
                singles.extend(group);
            }
        }
        (singles, arrays)
    }

    /// One array job for `group`; task `i` is the `i`th submission, tracked as `ID_i`.
    async fn submit_array(&self, group: Vec<(Submission, Reply)>) {
        let subs: Vec<&Submission> = group.iter().map(|(s, _)| s).collect();
        let keys: Vec<&str> = subs.iter().map(|s| s.key.as_str()).collect();
        let name = format!(
            "heddle-array-{}",
            &heddle_cache::Digest::of_bytes(keys.join(",").as_bytes()).to_string()[..16]
        );
        match self.engine.submit_array(&subs, &name).await {
            Err(e) => {
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
            }
            Ok(id) => {
                self.counts.arrays.fetch_add(1, Ordering::Relaxed);
                self.counts
                    .submitted
                    .fetch_add(group.len() as u64, Ordering::Relaxed);
                for (i, (_, reply)) in group.into_iter().enumerate() {
                    let job = self.track(format!("{id}_{i}"), &name, false, JobState::Submitted);
                    self.reply(reply, Ok(job));
                }
            }
        }
    }

    fn track(&self, id: String, name: &str, adopted: bool, state: JobState) -> Job {
        let (tx, rx) = watch::channel(state);
        self.jobs.lock().expect("jobs").insert(
            id.clone(),
            Tracked {
                name: name.to_string(),
                state: tx,
                fresh: true,
            },
        );
        Job {
            id,
            adopted,
            state: rx,
        }
    }

    /// Send each tracked job's state; forget the ones that ended.
    fn update(&self, rows: &[JobRow]) {
        let by_id: HashMap<&str, &JobRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        let mut jobs = self.jobs.lock().expect("jobs");
        jobs.retain(|id, t| {
            let state = match by_id.get(id.as_str()) {
                Some(r) => r.state.clone(),
                None if t.fresh => {
                    t.fresh = false;
                    return true;
                }
                None => JobState::Vanished,
            };
            t.fresh = false;
            let live = state.is_live();
            t.state.send_if_modified(|s| {
                let changed = *s != state;
                *s = state;
                changed
            });
            live
        });
    }

    async fn submit_or_adopt(&self, s: &Submission, rows: &[JobRow]) -> Result<Job, EngineError> {
        let live = rows
            .iter()
            .find(|r| r.name == s.name && r.state.is_live() && !self.is_tracked(&r.id));
        let (id, adopted, state) = match live {
            Some(r) => {
                self.counts.adopted.fetch_add(1, Ordering::Relaxed);
                (r.id.clone(), true, r.state.clone())
            }
            None => {
                let done = self.engine.submit(s).await?;
                let counter = match done.adopted {
                    true => &self.counts.adopted,
                    false => &self.counts.submitted,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                (done.id, done.adopted, done.state)
            }
        };
        Ok(self.track(id, &s.name, adopted, state))
    }

    /// [`Engine::outcome_tag`].
    pub fn outcome_tag(&self, id: &str) -> String {
        self.engine.outcome_tag(id)
    }

    /// [`Engine::ready`].
    pub async fn ready(&self) -> Result<(), EngineError> {
        self.engine.ready().await
    }

    /// Remove what is left of the run ([`Engine::sweep`]); the run is over.
    pub async fn sweep(&self) -> Result<(), EngineError> {
        self.engine.sweep().await
    }

    fn is_tracked(&self, id: &str) -> bool {
        self.jobs.lock().expect("jobs").contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    fn poller() -> Arc<Poller> {
        let cluster = Cluster {
            name: "hpc".into(),
            kind: crate::hosts::ClusterKind::Slurm,
            partition: None,
            account: None,
            sbatch_args: Vec::new(),
            gres: BTreeSet::from(["hailo".into()]),
            poll_interval: Duration::from_secs(1),
            pending_limit: Duration::from_secs(600),
            unreachable_limit: Duration::from_secs(600),
            retries: 1,
            heddle: None,
            worker_cache: None,
            array_limit: None,
            defined_at: "hosts.toml:1:1".into(),
        };
        let slurm = Arc::new(crate::cluster::slurm::Slurm {
            cluster: cluster.clone(),
        });
        Poller::new(cluster, slurm, Arc::new(|_| {}))
    }

    fn sub(name: &str, hailo: u32) -> (Submission, Reply) {
        let s = Submission {
            name: name.into(),
            comment: format!("run r {name}"),
            label: name.into(),
            resources: BTreeMap::from([("hailo".into(), hailo)]),
            timeout: None,
            worker: "heddle".into(),
            key: name.into(),
        };
        (s, oneshot::channel().0)
    }

    /// An engine whose controller never answers a status query.
    struct Silent;

    impl Engine for Silent {
        fn ready(&self) -> futures_util::future::BoxFuture<'_, Result<(), EngineError>> {
            Box::pin(async { Ok(()) })
        }
        fn array_shape(&self, _s: &Submission) -> Option<Vec<String>> {
            None
        }
        fn outcome_tag(&self, id: &str) -> String {
            id.into()
        }
        fn submit<'a>(
            &'a self,
            _s: &'a Submission,
        ) -> futures_util::future::BoxFuture<'a, Result<super::super::engine::Submitted, EngineError>>
        {
            unreachable!("nothing is submitted before a query answers")
        }
        fn submit_array<'a>(
            &'a self,
            _subs: &'a [&'a Submission],
            _name: &'a str,
        ) -> futures_util::future::BoxFuture<'a, Result<String, EngineError>> {
            unreachable!("no arrays")
        }
        fn query<'a>(
            &'a self,
            _names: &'a [String],
        ) -> futures_util::future::BoxFuture<'a, Result<Vec<JobRow>, EngineError>> {
            Box::pin(async {
                Err(EngineError::Refused {
                    program: "squeue",
                    message: "Unable to contact slurm controller (connect failure)".into(),
                })
            })
        }
        fn cancel<'a>(
            &'a self,
            _ids: &'a [String],
        ) -> futures_util::future::BoxFuture<'a, Result<(), EngineError>> {
            Box::pin(async { Ok(()) })
        }
        fn sweep(&self) -> futures_util::future::BoxFuture<'_, Result<(), EngineError>> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_submission_fails_once_the_controller_is_silent_past_the_limit() {
        let mut cluster = poller().cluster.clone();
        cluster.poll_interval = Duration::from_millis(10);
        cluster.unreachable_limit = Duration::from_millis(50);
        let said = Arc::new(Mutex::new(Vec::new()));
        let sink = said.clone();
        let p = Poller::new(
            cluster,
            Arc::new(Silent),
            Arc::new(move |m| sink.lock().unwrap().push(m)),
        );
        let (s, _) = sub("heddle-a", 1);
        let err = match tokio::time::timeout(Duration::from_secs(30), p.submit(s)).await {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => panic!("submitted without an answer"),
            Err(_) => panic!("the submission waits forever"),
        };
        assert!(
            err.starts_with("cluster hpc (slurm) did not answer status queries for "),
            "{err}"
        );
        assert!(
            err.ends_with("; the last error: `squeue` refused: Unable to contact slurm controller (connect failure)"),
            "{err}"
        );
        // Warned once, when the outage began.
        assert_eq!(said.lock().unwrap().len(), 1, "{:?}", said.lock().unwrap());
    }

    #[test]
    fn same_shaped_submissions_become_one_array_and_a_live_name_stays_single() {
        let p = poller();
        let rows = vec![JobRow {
            id: "7".into(),
            name: "heddle-d".into(),
            state: JobState::Pending {
                reason: "Priority".into(),
            },
        }];
        let (singles, arrays) = p.shape_groups(
            vec![
                sub("heddle-a", 1),
                sub("heddle-b", 1),
                sub("heddle-c", 2),
                sub("heddle-d", 1),
            ],
            &rows,
        );
        let names =
            |v: &[(Submission, Reply)]| v.iter().map(|(s, _)| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&singles), vec!["heddle-d", "heddle-c"]);
        assert_eq!(arrays.len(), 1);
        assert_eq!(names(&arrays[0]), vec!["heddle-a", "heddle-b"]);
    }
}

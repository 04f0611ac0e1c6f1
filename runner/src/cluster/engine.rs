//! What the driver needs of a batch engine, whatever it is ([`Engine`]): submit one job (or an
//! array of like jobs, where the engine has arrays), ONE status query for every job of the run,
//! cancel some, sweep the run's leftovers. SLURM's commands implement it ([`super::slurm`]),
//! and so do Kubernetes Jobs through the API server ([`super::kubernetes`]). The poller
//! ([`super::poll`]) talks to nothing else, so "one query per tick" and heddle-owned retries
//! hold for every engine.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::BoxFuture;

/// A batch engine as the poller uses it. Ids are the engine's (`1234`, `1234_5`, a Job name).
pub trait Engine: Send + Sync {
    /// What can be checked before the first job (a client's configuration): a run that
    /// cannot reach the engine stops here, not at every instance's submission.
    fn ready(&self) -> BoxFuture<'_, Result<(), EngineError>>;

    /// What makes submissions one job array but for their action; `None` when the engine
    /// has no arrays (each submission is then its own job).
    fn array_shape(&self, s: &Submission) -> Option<Vec<String>>;

    /// The tag job `id`'s worker stores its outcome under (`--tag`), so the driver finds it.
    fn outcome_tag(&self, id: &str) -> String;

    /// Submit one job; an existing job of the same name may be adopted instead.
    fn submit<'a>(&'a self, s: &'a Submission) -> BoxFuture<'a, Result<Submitted, EngineError>>;

    /// Submit `subs` (of one [`Engine::array_shape`]) as one array named `name`; task `i` is
    /// tracked as `ID_i`. Only called when `array_shape` gave `Some`.
    fn submit_array<'a>(
        &'a self,
        subs: &'a [&'a Submission],
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, EngineError>>;

    /// Every job named in `names`, ended ones too, from one query (or from what the engine
    /// already watches): never one request per job.
    fn query<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<JobRow>, EngineError>>;

    /// Cancel every job in `ids` at once.
    fn cancel<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), EngineError>>;

    /// Remove whatever of this run is left (by label or name); a no-op where cancel is enough.
    fn sweep(&self) -> BoxFuture<'_, Result<(), EngineError>>;
}

/// What a submission became.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    pub id: String,
    /// A job of the same name existed (a resubmission) and is followed instead.
    pub adopted: bool,
    pub state: JobState,
}

/// One job to submit.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Derived from the instance key, so a resubmission finds a job still queued.
    pub name: String,
    /// What a person reading the queue sees beside the name: the run and the instance.
    pub comment: String,
    /// The instance's label (`stage[param=value]`).
    pub label: String,
    /// Pool → units the stage asks for.
    pub resources: BTreeMap<String, u32>,
    pub timeout: Option<Duration>,
    /// The worker's command line up to `worker` (binary, node cache, shared cache).
    pub worker: String,
    /// The action's key, hex.
    pub key: String,
}

/// One row of the engine's job list.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub name: String,
    pub state: JobState,
}

/// A job as the driver sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// Submitted; not yet seen in a status query.
    Submitted,
    Pending {
        reason: String,
    },
    Running {
        node: Option<String>,
    },
    /// Ended in the engine's eyes (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...).
    /// Whether it did its work is the cache's to say.
    Ended {
        state: String,
        node: Option<String>,
    },
    /// No longer listed (purged after `MinJobAge`, or the controller lost it).
    Vanished,
    /// The engine stopped answering status queries for longer than the cluster's
    /// `unreachable_limit`: the job's fate is unknown and the run stops waiting for it.
    Unanswered {
        why: String,
    },
}

impl JobState {
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            JobState::Submitted | JobState::Pending { .. } | JobState::Running { .. }
        )
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("failed to run `{program}`: {message}")]
    Spawn {
        program: &'static str,
        message: String,
    },
    #[error("`{program}` refused: {message}")]
    Refused {
        program: &'static str,
        message: String,
    },
    /// A Kubernetes API request failed; `message` holds kube's error and its causes (kept as
    /// text: one error reaches every instance of an array, so it must be `Clone`).
    #[error("failed to {op}: {message}")]
    Api { op: String, message: String },
    /// Status queries failed for longer than the cluster's `unreachable_limit`.
    #[error("{message}")]
    Unanswered { message: String },
}

impl EngineError {
    pub fn spawn(program: &'static str, e: std::io::Error) -> EngineError {
        EngineError::Spawn {
            program,
            message: e.to_string(),
        }
    }

    pub fn refused(program: &'static str, stderr: &[u8]) -> EngineError {
        let text = String::from_utf8_lossy(stderr);
        let message = text
            .lines()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.strip_prefix(&format!("{program}: error: "))
                    .unwrap_or(l)
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("; ");
        EngineError::Refused { program, message }
    }
}

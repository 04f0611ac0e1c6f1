//! The cluster's errors, one variant per step. The driver's ([`ClusterError`]) end an
//! instance; a job's end without its result ([`JobFault`]) is resubmitted up to the cluster's
//! `retries`; the worker's ([`WorkerError`]) reach the driver as one line of text in the job's
//! outcome, joined with their causes by [`heddle_cache::error_chain`] (the protocol carries
//! text: a worker may run another build of heddle).

use std::path::PathBuf;

use heddle_cache::{CacheError, Digest};

use super::engine::EngineError;
use crate::shared_cache::SharedCacheError;

/// Why the driver could not bring an instance to an end on the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The pod runs the cluster's `image`; a stage's own image would need the worker to run a
    /// container inside the pod, which is not built.
    #[error(
        "cluster {cluster} (kubernetes) runs host stages only, in its `image`; {label} names a \
         container image"
    )]
    KubernetesContainer { cluster: String, label: String },
    #[error("failed to write the action's description in {}", dir.display())]
    DescriptionFile {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to store the action's description")]
    StoreDescription(#[source] CacheError),
    #[error("failed to publish the action to the shared cache {remote}")]
    Publish {
        remote: String,
        #[source]
        source: SharedCacheError,
    },
    #[error("failed to submit a job to cluster {cluster}")]
    Submit {
        cluster: String,
        #[source]
        source: EngineError,
    },
    /// The engine's status queries failed for longer than the cluster's `unreachable_limit`:
    /// the message says for how long and the last error.
    #[error(transparent)]
    Unanswered(EngineError),
    /// The poller lost track of job `job` (`why` is its message, shared by every instance of
    /// an array).
    #[error("job {job}: {why}")]
    JobUnanswered { job: String, why: String },
    /// Boxed: a fault is large and this the rare end.
    #[error("gave up after {submissions} job(s) on cluster {cluster}")]
    GaveUp {
        cluster: String,
        submissions: u32,
        #[source]
        last: Box<JobFault>,
    },
    /// A blocking task that panicked (a bug in heddle).
    #[error("a background task failed")]
    Task(#[source] tokio::task::JoinError),
}

impl From<ClusterError> for crate::exec::ExecError {
    fn from(e: ClusterError) -> Self {
        crate::exec::ExecError::Executor(Box::new(e))
    }
}

/// How a job ended without its result: an infrastructure fault, which is resubmitted.
#[derive(Debug, thiserror::Error)]
pub enum JobFault {
    #[error("the shared cache {remote} failed")]
    SharedCache {
        remote: String,
        #[source]
        source: SharedCacheError,
    },
    #[error("failed to read the outcome entry {key}")]
    OutcomeLookup {
        key: Digest,
        #[source]
        source: CacheError,
    },
    #[error("the outcome entry vanished from the local store")]
    OutcomeVanished,
    #[error("the outcome entry has no outcome.json")]
    OutcomeNoFile,
    #[error("failed to read the outcome {}", path.display())]
    OutcomeRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the worker's outcome is not readable")]
    OutcomeParse(#[source] serde_json::Error),
    #[error("failed to read the action entry {key}")]
    ActionLookup {
        key: Digest,
        #[source]
        source: CacheError,
    },
    #[error("failed to create {}", dir.display())]
    RestoreDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to bring back {}", dest.display())]
    Restore {
        dest: PathBuf,
        #[source]
        source: CacheError,
    },
    #[error("job {job} ended {state} without a result in the shared cache (a lost job)")]
    Lost { job: String, state: String },
    /// The worker could not do its part; `why` is the text of its [`WorkerError`].
    #[error("job {job} ({state}): {why}")]
    Worker {
        job: String,
        state: String,
        why: String,
    },
    #[error("job {job} ({state}) reported no end")]
    NoEnd { job: String, state: String },
    #[error("job {job} was stopped ({state})")]
    Stopped { job: String, state: String },
}

/// Why a worker could not do its part (the node's fault, not the stage's).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("failed to make a sandbox in {}", dir.display())]
    Sandbox {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no description of action {key} in the shared cache {remote}")]
    NoDescription { key: Digest, remote: String },
    /// A blob the entry names and the remote lacks is an evicted input.
    #[error("failed to fetch the action's description and inputs from {remote}")]
    FetchDescription {
        remote: String,
        #[source]
        source: SharedCacheError,
    },
    #[error("failed to read the description's entry {key}")]
    DescriptionLookup {
        key: Digest,
        #[source]
        source: CacheError,
    },
    #[error("the description of {key} is not servable from the local store")]
    DescriptionNotServable { key: Digest },
    #[error("the description has no action.json")]
    DescriptionNoFile,
    #[error("failed to read the description {}", path.display())]
    DescriptionRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the description is not readable")]
    DescriptionParse(#[source] serde_json::Error),
    #[error(
        "the description speaks protocol {theirs}, this worker {ours} (install the driver's \
         heddle on the nodes)"
    )]
    Protocol { theirs: u32, ours: u32 },
    #[error("the description under {dkey} is of action {key}")]
    WrongAction { dkey: Digest, key: Digest },
    #[error("the description left the local store")]
    DescriptionLeft,
    #[error("failed to create {}", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to lay out {}", dest.display())]
    LayOut {
        dest: PathBuf,
        #[source]
        source: CacheError,
    },
    /// Boxed, as large as bollard's error is.
    #[error("cannot reach this node's Docker engine")]
    NodeEngine(#[source] Box<heddle_containers::ContainerError>),
    /// Boxed, as large as bollard's error is.
    #[error("failed to run the command")]
    Run(#[source] Box<crate::exec::ExecError>),
    #[error("failed to store the result")]
    StoreResult(#[source] CacheError),
    #[error("failed to upload the result to {remote}")]
    Upload {
        remote: String,
        #[source]
        source: SharedCacheError,
    },
    #[error("failed to write the outcome in {}", dir.display())]
    OutcomeFile {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to store the outcome")]
    StoreOutcome(#[source] CacheError),
    /// A blocking task that panicked (a bug in heddle).
    #[error("a background task failed")]
    Task(#[source] tokio::task::JoinError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_give_up_reads_headline_first_through_exec_error() {
        let e: crate::exec::ExecError = ClusterError::GaveUp {
            cluster: "hpc".into(),
            submissions: 2,
            last: Box::new(JobFault::Lost {
                job: "12".into(),
                state: "CANCELLED".into(),
            }),
        }
        .into();
        assert_eq!(
            heddle_cache::error_chain(&e),
            "gave up after 2 job(s) on cluster hpc: job 12 ended CANCELLED without a result in \
             the shared cache (a lost job)"
        );
    }
}

//! Executors run one rendered command to completion and say how it ended. The scheduler knows
//! only the [`Executor`] trait; the host executor and the Docker executor sit beside each other.

#[cfg(target_os = "linux")]
pub mod contain;
pub mod docker;
pub mod failure;
pub mod host;
pub mod output;
#[cfg(target_os = "linux")]
pub mod reaper;
#[cfg(unix)]
pub mod simple;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::model::ByteSize;
pub use crate::model::Transfer;
use crate::render::{Command, PathLayout};

/// Cancellation in two steps: `graceful` asks the command to stop (SIGTERM, `docker stop`),
/// `force` kills it now (a second Ctrl-C).
#[derive(Clone, Default)]
pub struct Cancel {
    pub graceful: CancellationToken,
    pub force: CancellationToken,
}

/// One execution: the rendered command, its sandbox and where its logs go.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub label: String,
    pub run_id: String,
    pub command: Command,
    /// A host folder holding `in/`, `out/` and `work/`.
    pub sandbox: PathBuf,
    /// The `uses` folder on the host, if any.
    pub stage_dir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// The values of the stage's `secret_env` variables: written as `***` in its logs.
    pub mask: heddle_containers::Mask,
    /// The names of those variables: an executor that stores the request elsewhere (a cluster
    /// job's description) leaves their values out.
    pub secret_env: Vec<String>,
    /// Set for container stages; the Docker executor requires it.
    pub container: Option<ContainerRequest>,
}

/// A container stage's settings, with the image already resolved to its id.
#[derive(Debug, Clone)]
pub struct ContainerRequest {
    /// The engine's id of the image, or its reference as written when it could not be
    /// resolved ([`ContainerRequest::image_resolved`] false: a preview without an engine).
    pub image_id: String,
    pub image_resolved: bool,
    /// `None`: the stage set no `gpus` (the engine gets none, and the key says so apart from
    /// an explicit `"none"`).
    pub gpus: Option<heddle_containers::GpuRequest>,
    pub devices: Vec<String>,
    pub network: heddle_containers::NetworkMode,
    pub shm_size: Option<ByteSize>,
    pub memory: Option<ByteSize>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub docker_host: Option<String>,
    pub transfer: Transfer,
    /// The configured host (`hosts.toml`) the instance was placed on, if any.
    pub placed_on: Option<String>,
    /// The lock containers of the engine-wide units held for it: the container is labelled
    /// with each ([`heddle_containers::holds_label`]).
    pub holds: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    Exited(i64),
    /// Killed by a signal it did not ask for (unix).
    Signaled(i32),
    OomKilled(i64),
    TimedOut(Duration),
    Cancelled,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("failed to start `{program}`")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("failed to write log {}", path.display())]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Container(#[from] heddle_containers::ContainerError),
    /// The command exited 0 where its outputs were (a cluster's node), and what it left was
    /// refused there before anything was stored ([`crate::execution::check_and_collect`]).
    #[error("{message}")]
    Refused {
        class: crate::record::ErrorClass,
        message: String,
    },
    /// A container request without container settings (a bug: the planner gives every
    /// container stage its settings).
    #[error("{label}: no container settings")]
    NoContainerSettings { label: String },
    #[error("{label}: no engine connected for {host:?}")]
    NoEngine { label: String, host: Option<String> },
    #[error("failed to prepare {}", sandbox.display())]
    PrepareSandbox {
        sandbox: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "containers of run {run_id} were still there {}s after their removal; \
         `heddle gc --containers` removes them",
        waited.as_secs()
    )]
    ContainersRemain { run_id: String, waited: Duration },
    /// A command too long for one argument, written to a script the shell runs.
    #[error("failed to write {}", path.display())]
    WriteScript {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to wait for `{program}`")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// An executor's own failure, of a kind the ones here do not have: the cluster driver's
    /// (`cluster::error::ClusterError`: a job that cannot be submitted, lost too often).
    /// Boxed, as `exec` sits below the executors that implement its trait elsewhere.
    #[error(transparent)]
    Executor(Box<dyn std::error::Error + Send + Sync>),
}

pub trait Executor: Send + Sync {
    /// How the command sees its inputs, outputs and stage folder.
    fn layout(&self, sandbox: &Path, stage_dir: Option<&Path>) -> PathLayout;

    /// Run to completion, sending each output line on `lines` for the progress display.
    fn execute<'a>(
        &'a self,
        req: ExecRequest,
        lines: UnboundedSender<String>,
        cancel: Cancel,
    ) -> BoxFuture<'a, Result<ExecOutcome, ExecError>>;
}

/// The fixed base environment a command sees before its stage's declared variables.
pub fn base_env() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for k in [
        "PATH",
        "HOME",
        "TMPDIR",
        "SYSTEMROOT",
        "SystemRoot",
        "WINDIR",
        "TEMP",
        "TMP",
        "USERPROFILE",
        "PATHEXT",
        "COMSPEC",
    ] {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.to_string(), v);
        }
    }
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("LC_ALL".into(), "C.UTF-8".into());
    env
}

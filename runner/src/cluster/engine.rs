//! What the driver needs of a batch engine, whatever it is: submit one job, list the run's
//! jobs, cancel some. SLURM's commands implement it ([`super::slurm`]).

use std::collections::BTreeMap;
use std::time::Duration;

/// One job to submit.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Derived from the instance key, so a resubmission finds a job still queued.
    pub name: String,
    /// What a person reading the queue sees beside the name: the run and the instance.
    pub comment: String,
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

//! What a run tells whoever displays it ([`crate::run`]'s channel): the engine never touches
//! the terminal. Every event is typed, so a display, a test or a tool matches on what happened
//! rather than on a sentence; `Display` gives the sentence the terminal shows.

use std::fmt;
use std::path::PathBuf;

use crate::key::Reason;
use crate::record::Status;

/// What the engine tells the reporter.
#[derive(Debug, Clone)]
pub enum Event {
    Started {
        id: usize,
        label: String,
        why: Reason,
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
    Note(Note),
}

/// Something the run says between an instance's start and end, or about the run itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Instance `label` waits for or lost units (`crate::units`, in its own words).
    Units { label: String, text: String },
    /// Another heddle is computing the key instance `label` would compute.
    WaitingForKey { label: String },
    /// An attempt failed and the stage's `retries` allow another.
    Retrying {
        label: String,
        attempt: u32,
        error: String,
    },
    /// The stage's `$HEDDLE_FACTS_FILE` is not JSON; the facts are ignored.
    FactsNotJson { label: String, error: String },
    /// The first Ctrl-C: running stages are stopping.
    Interrupt,
    /// A sandbox could not be removed at the run's end.
    SandboxLeft { path: PathBuf, error: String },
    /// A file under `out/` changed by a stage writing through its input: put back as `by` made
    /// it (`restored`), or removed because the store lost those bytes too.
    OutputRepaired {
        path: PathBuf,
        by: String,
        restored: bool,
    },
    /// The group commit could not record `actions` action entries.
    CommitFailed { actions: usize, error: String },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Units { label, text } => write!(f, "{label}: {text}"),
            Note::WaitingForKey { label } => {
                write!(f, "{label}: waiting for another heddle computing the same key")
            }
            Note::Retrying {
                label,
                attempt,
                error,
            } => write!(f, "{label}: attempt {attempt} failed ({error}), retrying"),
            Note::FactsNotJson { label, error } => {
                write!(f, "{label}: HEDDLE_FACTS_FILE is not JSON ({error}); ignored")
            }
            Note::Interrupt => write!(f, "interrupt: stopping running stages (Ctrl-C again to kill)"),
            Note::SandboxLeft { path, error } => write!(
                f,
                "could not remove the sandbox {}: {error} (the next run or `heddle cache gc` tries again)",
                path.display()
            ),
            Note::OutputRepaired {
                path,
                by,
                restored: true,
            } => write!(
                f,
                "{} was changed by a stage writing through its input; restored it from the store as {by} made it",
                path.display()
            ),
            Note::OutputRepaired {
                path,
                by,
                restored: false,
            } => write!(
                f,
                "{} was changed by a stage writing through its input, and the store lost those bytes too; removed it (the next run recomputes {by})",
                path.display()
            ),
            Note::CommitFailed { actions, error } => {
                write!(f, "failed to record {actions} actions: {error}")
            }
        }
    }
}

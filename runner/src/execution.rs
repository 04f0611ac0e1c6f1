//! One execution of a stage's command in a laid-out sandbox, the same wherever the instance
//! runs: `heddle run` on this machine, on another Docker engine (a stage's `docker_host` or a
//! configured host it was placed on, `sched/attempt.rs`), and `heddle worker` on a cluster's
//! node (`cluster/worker.rs`). Every way of running an instance elsewhere is an
//! [`Executor`](crate::exec::Executor) behind these steps, so what a stage may leave, how its
//! failure is named and what is refused before it is stored cannot drift between them:
//!
//! - the files a stage reports through (`$HEDDLE_ERROR_FILE`, `$HEDDLE_FACTS_FILE`) and
//!   heddle's own variables ([`heddle_vars`]);
//! - running the request while its lines go to the caller ([`run`]), and naming the failure
//!   with its secrets masked ([`failure`]);
//! - refusing an input written through or an output that holds a secret, then storing the
//!   declared outputs ([`check_and_collect`]). The refusal happens where the outputs are:
//!   a node's worker refuses before anything is uploaded to the shared cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use heddle_cache::{StatCache, Store};
use heddle_containers::Mask;
use tokio::sync::mpsc::unbounded_channel;

use crate::exec::failure::{classify, Failure};
use crate::exec::{Cancel, ExecError, ExecOutcome, ExecRequest, Executor};
use crate::outputs::{collect, Collected};
use crate::record::ErrorClass;
use crate::sandbox::SandboxError;

/// Where a stage may name its own failure (`$HEDDLE_ERROR_FILE`), under its sandbox.
pub fn error_file(sandbox: &Path) -> PathBuf {
    sandbox.join("work").join(".heddle-error.json")
}

/// Where a stage may report facts about where it ran (`$HEDDLE_FACTS_FILE`).
pub fn facts_file(sandbox: &Path) -> PathBuf {
    sandbox.join("work").join(".heddle-facts.json")
}

/// heddle's own variables for a command in `sandbox` (a container executor rewrites the two
/// file paths to the container's view of the sandbox).
pub fn heddle_vars(sandbox: &Path, label: &str, run_id: &str) -> [(String, String); 4] {
    let text = |p: PathBuf| p.to_string_lossy().into_owned();
    [
        ("HEDDLE_ERROR_FILE".into(), text(error_file(sandbox))),
        ("HEDDLE_FACTS_FILE".into(), text(facts_file(sandbox))),
        ("HEDDLE_INSTANCE".into(), label.to_string()),
        ("HEDDLE_RUN_ID".into(), run_id.to_string()),
    ]
}

/// Run `req` on `exec` to its end, handing each output line to `on_line` as it comes.
pub async fn run(
    exec: &dyn Executor,
    req: ExecRequest,
    cancel: Cancel,
    mut on_line: impl FnMut(String) + Send + 'static,
) -> Result<ExecOutcome, ExecError> {
    let (tx, mut rx) = unbounded_channel::<String>();
    // Forwarded in this task, beside the execution: a task spawned for it was a spawn, a
    // wake-up and a join per executed stage, most of which print nothing. It ends when the
    // executor has dropped every sender, as the spawned task did.
    let forward = async move {
        while let Some(line) = rx.recv().await {
            on_line(line);
        }
    };
    let (outcome, ()) = tokio::join!(exec.execute(req, tx, cancel), forward);
    outcome
}

/// How the command's end reads as a failure (`None`: it exited 0), with the stage's secrets
/// masked out of the error line and class it wrote.
pub fn failure(
    outcome: &ExecOutcome,
    sandbox: &Path,
    stderr_log: &Path,
    mask: &Mask,
) -> Option<Failure> {
    classify(outcome, &error_file(sandbox), stderr_log)
        .map(|f| crate::secrets::mask_failure(f, mask))
}

/// Why a command that exited 0 left nothing that may be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub class: ErrorClass,
    pub message: String,
}

impl Refused {
    /// The failure a record holds for it. `exit_code` is the command's (0) when the refusal is
    /// about its outputs; an input written through names no exit code, as before.
    pub fn into_failure(self, stderr_log: &Path) -> Failure {
        let exit_code = (self.class != ErrorClass::InputModified).then_some(0);
        Failure {
            class: self.class,
            error: self.message,
            exit_code,
            at: None,
            stderr_tail: crate::exec::output::tail_of(stderr_log),
        }
    }
}

/// What [`check_and_collect`] needs to know of the stage.
pub struct Collect<'a> {
    /// Output name → the file or folder under `out/<name>/`.
    pub files: &'a BTreeMap<String, String>,
    /// Where outputs are materialised once stored.
    pub dir: &'a Path,
    /// The values of the stage's `secret_env` variables, and their names for the message.
    pub mask: &'a Mask,
    pub secret_names: &'a [String],
}

/// After a zero exit: check that no input was written through its link (`inputs_intact`, which
/// knows how the inputs were laid out), refuse an output holding a secret (it would be stored,
/// materialised and uploaded), then store the declared outputs and materialise them.
/// Blocking: call it on the blocking pool.
pub fn check_and_collect(
    store: &Store,
    stats: &StatCache,
    sandbox: &Path,
    what: &Collect<'_>,
    inputs_intact: impl FnOnce() -> Result<(), SandboxError>,
) -> Result<Collected, Refused> {
    // A host stage sees its inputs as hard links to blobs: a write through one (as root the
    // read-only mode does not stop it) must fail this stage and every stage that held the
    // blob, before any of them stores a result.
    inputs_intact().map_err(|e| Refused {
        class: ErrorClass::InputModified,
        message: heddle_cache::error_chain(&e),
    })?;
    if let Some(name) = crate::secrets::output_holding(sandbox, what.files, what.mask) {
        return Err(Refused {
            class: ErrorClass::SecretInOutput,
            message: format!(
                "output `{name}` holds the value of a `secret_env` variable ({}); it is not stored",
                what.secret_names.join(", ")
            ),
        });
    }
    collect(store, stats, sandbox, what.dir, what.files)
        .map_err(|(class, message)| Refused { class, message })
}

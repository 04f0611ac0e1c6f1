//! What the driver and the worker say to each other, through the shared cache only: the
//! action's description (stored as an action entry under a key derived from the instance's
//! key, with the inputs and the stage folder as its outputs, so the cache's own fetch brings
//! and verifies every byte), and the worker's outcome (an entry under a key derived from the
//! instance's key and the job, holding the logs, the error and facts files, and the outputs).

use std::collections::BTreeMap;

use heddle_cache::Digest;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::exec::ExecOutcome;
use crate::render::Command;

/// Bumped when the description's or the outcome's encoding changes: a worker refuses a
/// description of another version (an infrastructure fault naming both), so a cluster whose
/// nodes run an older heddle fails loudly, never wrongly.
pub const PROTOCOL: u32 = 1;

/// The worker's exit code for an infrastructure fault (the cache unreachable, an input
/// evicted, no description): `EX_TEMPFAIL`. The driver does not trust exit codes (the cache
/// entry decides); the code is for a person reading the scheduler's accounting.
pub const EXIT_INFRA: i32 = 75;

/// In a host stage's command and environment, where the worker's sandbox goes: the driver
/// cannot know the folder a node will use, so it renders this prefix and the worker replaces
/// it. A container stage needs none (its layout is `/heddle/...` everywhere).
pub const SANDBOX_TOKEN: &str = "/@heddle-worker-sandbox@";

/// Names of the description entry's outputs.
pub const DESC_FILE: &str = "action.json";
pub const DESC_IN: &str = "in";
pub const DESC_STAGE: &str = "stage";

/// The names a description entry may hold (the shared cache refuses an entry naming others
/// before any download).
pub fn description_outputs() -> Vec<String> {
    [DESC_FILE, DESC_IN, DESC_STAGE]
        .map(str::to_string)
        .to_vec()
}

/// The names an outcome entry for an action with `outputs` may hold.
pub fn outcome_outputs<'a>(outputs: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    [
        OUTCOME_FILE,
        OUTCOME_STDOUT,
        OUTCOME_STDERR,
        OUTCOME_ERROR,
        OUTCOME_FACTS,
    ]
    .map(str::to_string)
    .into_iter()
    .chain(
        outputs
            .into_iter()
            .map(|o| format!("{OUTCOME_OUT_PREFIX}{o}")),
    )
    .collect()
}

/// Names of the outcome entry's outputs besides `out.<name>`.
pub const OUTCOME_FILE: &str = "outcome.json";
pub const OUTCOME_STDOUT: &str = "stdout";
pub const OUTCOME_STDERR: &str = "stderr";
pub const OUTCOME_ERROR: &str = "error";
pub const OUTCOME_FACTS: &str = "facts";
pub const OUTCOME_OUT_PREFIX: &str = "out.";

/// Everything a worker needs to run an instance as `heddle run` would.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Description {
    pub protocol: u32,
    /// The instance's cache key.
    pub key: Digest,
    pub label: String,
    pub run_id: String,
    /// Rendered for the worker: a container's `/heddle/...` layout, or [`SANDBOX_TOKEN`].
    pub command: Command,
    /// The stage's own environment (declared and passed-through variables, its python env),
    /// without the driver machine's base (PATH, HOME, ...).
    pub env: BTreeMap<String, String>,
    /// A host stage: the node's base environment goes under `env`.
    pub host_env: bool,
    /// The stage's `secret_env` names. Their values are never in a description (it is stored in
    /// the shared cache): the worker reads them from its own environment, which the job
    /// inherits from the submitting heddle (`sbatch` exports it), and masks them as `run` does.
    #[serde(default)]
    pub secret_env: Vec<String>,
    pub timeout_ms: Option<u64>,
    /// Output name → file name, as `out/<name>/<file>`.
    pub outputs: BTreeMap<String, String>,
    pub container: Option<ContainerDesc>,
    /// May the worker answer with an entry the shared cache already holds (false when the
    /// run forces the stage or ignores the cache).
    pub reuse: bool,
    /// Set when the result is to be stored under `key` (the stage is cacheable).
    pub entry: Option<EntryDesc>,
}

/// The action entry's fields the worker cannot know.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EntryDesc {
    pub family: String,
    pub key_parts: serde_json::Value,
    pub meta: serde_json::Value,
}

/// A container stage's settings, the image by id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerDesc {
    pub image_id: String,
    /// `none`, `all`, a count, or device ids.
    pub gpus: GpusDesc,
    pub devices: Vec<String>,
    /// `none`, `bridge` or `host`.
    pub network: String,
    pub shm_size: Option<u64>,
    pub memory: Option<u64>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum GpusDesc {
    None,
    All,
    Count(u32),
    Ids(Vec<String>),
}

/// How the worker's attempt ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub protocol: u32,
    /// The command's end, when it ran.
    pub exec: Option<ExecEnd>,
    /// An infrastructure fault (the driver resubmits): why.
    pub infra: Option<String>,
    /// The stage ran and exited 0, but what it left could not be stored (a missing or unsafe
    /// output, an input written through): the reason, as `heddle run` words it.
    pub collect_error: Option<String>,
    /// Its class (`SecretInOutput`, `MissingOutput`, ...); absent from a worker that predates
    /// it, when the driver reads it as `HeddleError`.
    #[serde(default)]
    pub collect_class: Option<crate::record::ErrorClass>,
    /// The node it ran on, as the node names itself.
    pub node: String,
}

/// [`ExecOutcome`] as it travels.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum ExecEnd {
    Exited(i64),
    Signaled(i32),
    OomKilled(i64),
    TimedOutMs(u64),
    Cancelled,
}

impl From<&ExecOutcome> for ExecEnd {
    fn from(o: &ExecOutcome) -> ExecEnd {
        match o {
            ExecOutcome::Exited(c) => ExecEnd::Exited(*c),
            ExecOutcome::Signaled(s) => ExecEnd::Signaled(*s),
            ExecOutcome::OomKilled(c) => ExecEnd::OomKilled(*c),
            ExecOutcome::TimedOut(d) => ExecEnd::TimedOutMs(d.as_millis() as u64),
            ExecOutcome::Cancelled => ExecEnd::Cancelled,
        }
    }
}

impl From<&ExecEnd> for ExecOutcome {
    fn from(e: &ExecEnd) -> ExecOutcome {
        match e {
            ExecEnd::Exited(c) => ExecOutcome::Exited(*c),
            ExecEnd::Signaled(s) => ExecOutcome::Signaled(*s),
            ExecEnd::OomKilled(c) => ExecOutcome::OomKilled(*c),
            ExecEnd::TimedOutMs(ms) => ExecOutcome::TimedOut(std::time::Duration::from_millis(*ms)),
            ExecEnd::Cancelled => ExecOutcome::Cancelled,
        }
    }
}

/// The key the description of action `key` is stored under. A domain tag keeps it apart from
/// every instance key (those hash a `heddle/action/…` text).
pub fn description_key(key: &Digest) -> Digest {
    derived(&["heddle/cluster-description/v1", &key.to_string()])
}

/// The key job `tag` (`slurm:CLUSTER:JOBID`) stores its outcome for action `key` under: known
/// to the driver and the worker alike, and to a later driver that finds the job still queued.
pub fn outcome_key(key: &Digest, tag: &str) -> Digest {
    derived(&["heddle/cluster-outcome/v1", &key.to_string(), tag])
}

fn derived(parts: &[&str]) -> Digest {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    Digest::from_bytes(h.finalize().into())
}

/// Replace [`SANDBOX_TOKEN`] with the worker's sandbox in a rendered value.
pub fn place_sandbox(text: &str, sandbox: &str) -> String {
    text.replace(SANDBOX_TOKEN, sandbox)
}

/// Fetch `key`'s entry and blobs when every output it names is one of `allowed` (a description
/// or an outcome holds only the files that exist: a stage that printed nothing has no stdout).
/// The shared cache refuses an entry that does not name exactly the outputs it is given, so
/// the entry is read first and its names, cut to `allowed`, are what it is held to: a name
/// outside `allowed` is still refused before any download.
pub async fn fetch_allowing(
    shared: &dyn crate::shared_cache::SharedCache,
    key: &Digest,
    allowed: &[String],
) -> Result<Option<crate::shared_cache::RemoteSigner>, crate::shared_cache::SharedCacheError> {
    let Some(entry) = shared.entry(*key).await? else {
        return Ok(None);
    };
    let names = entry
        .outputs
        .keys()
        .filter(|n| allowed.contains(n))
        .cloned()
        .collect();
    shared.fetch(*key, names).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_differ_by_domain_and_tag() {
        let k = Digest::of_bytes(b"k");
        assert_ne!(description_key(&k), k);
        assert_ne!(outcome_key(&k, "slurm:a:1"), outcome_key(&k, "slurm:a:2"));
        assert_ne!(outcome_key(&k, "slurm:a:1"), description_key(&k));
        assert_eq!(description_key(&k), description_key(&k));
    }

    #[test]
    fn an_outcome_round_trips_its_exec_end() {
        for o in [
            ExecOutcome::Exited(3),
            ExecOutcome::Signaled(9),
            ExecOutcome::TimedOut(std::time::Duration::from_millis(1500)),
            ExecOutcome::Cancelled,
        ] {
            assert_eq!(ExecOutcome::from(&ExecEnd::from(&o)), o);
        }
    }
}

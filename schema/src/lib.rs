//! The run record's types: what `heddle run` writes to `<root>/.heddle/runs/<id>.json` and
//! what every reader of those files (the binary, `heddle-report`, the lock writer) parses.
//!
//! They live in their own crate, apart from the engine that produces them, so that a reader
//! needs neither tokio nor a Docker client to read a record (the way `nextest-metadata` and
//! `cargo-util-schemas` hold their tools' formats). Writing, listing and loading the files
//! stays in `heddle_runner::record`, which re-exports these types under their old paths.
//!
//! The only dependency besides serde is `heddle-cache`, for [`OutputEntry`] and its digest:
//! the record names outputs exactly as the store does.

use std::collections::BTreeMap;

pub use heddle_cache::OutputEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod reason;
mod vecmap;

pub use reason::{value_text, Change, Reason};
pub use vecmap::VecMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Failed,
    Skipped,
}

/// What a downstream stage (and a user) learns about how an instance ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusRecord {
    pub label: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// `AttributeError`, `Timeout`, `OutOfMemory`, `Interrupted`, `ExitCode`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    /// One line: `AttributeError: 'function' object has no attribute …`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where in the stage's own code it failed (`compare.py:57 in outputs`), when the stage
    /// said (its `$HEDDLE_ERROR_FILE`'s `where`); the whole traceback is in its stderr log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// For a skipped instance: the failure upstream that skipped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// The failure was allowed (`allow_failure`), or the skip stems from an allowed failure.
    #[serde(default)]
    pub tolerated: bool,
    #[serde(default)]
    pub matrix: VecMap<Value>,
}

impl StatusRecord {
    /// Whether this is what [`StatusRecord::ok`] makes, for its own label and matrix: a
    /// success with nothing else to say.
    pub fn is_plain_ok(&self) -> bool {
        self.status == Status::Ok
            && self.exit_code.is_none()
            && self.error_class.is_none()
            && self.error.is_none()
            && self.at.is_none()
            && self.stderr_tail.is_none()
            && self.cause.is_none()
            && !self.tolerated
    }

    /// A success: no error, no cause.
    pub fn ok(label: &str, matrix: VecMap<Value>) -> StatusRecord {
        StatusRecord {
            label: label.to_string(),
            status: Status::Ok,
            exit_code: None,
            error_class: None,
            error: None,
            at: None,
            stderr_tail: None,
            cause: None,
            tolerated: false,
            matrix,
        }
    }

    /// A failure of class `class`, described by the one line `error`.
    pub fn failed(
        label: &str,
        matrix: VecMap<Value>,
        class: ErrorClass,
        error: String,
    ) -> StatusRecord {
        StatusRecord {
            status: Status::Failed,
            error_class: Some(class),
            error: Some(error),
            ..StatusRecord::ok(label, matrix)
        }
    }

    /// Skipped because `cause` did not succeed (`tolerated`: it was an allowed failure).
    pub fn skipped(
        label: &str,
        matrix: VecMap<Value>,
        cause: Cause,
        tolerated: bool,
    ) -> StatusRecord {
        StatusRecord {
            status: Status::Skipped,
            cause: Some(cause),
            tolerated,
            ..StatusRecord::ok(label, matrix)
        }
    }
}

/// How an instance failed. heddle's own classes are variants; a class the stage named (its
/// `$HEDDLE_ERROR_FILE`, or a traceback's last `Name: message` line) is kept as written. In
/// records it is the bare name (`"Timeout"`, `"AttributeError"`), so readers match on text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorClass {
    /// heddle itself could not do its part (a sandbox, a lay-out, the engine).
    HeddleError,
    /// A bug: the instance's task panicked.
    InternalError,
    /// Stopped by Ctrl-C or a signal before it finished: not a stage failure.
    Interrupted,
    /// A non-zero exit with no error line to name it.
    ExitCode,
    Signal,
    OutOfMemory,
    Timeout,
    /// A stage wrote through an input's hard link into the cache.
    InputModified,
    MissingOutput,
    /// An output the cache refuses: a symlink, a tree that escapes its folder, a file that is
    /// not a regular file, folder or symlink (a FIFO, a socket, a device), or a name that is
    /// not UTF-8.
    UnsafeOutput,
    /// An output holds the value of one of the stage's `secret_env` variables: it is not
    /// stored (a secret never enters the cache).
    SecretInOutput,
    /// The class the stage reported, e.g. `AttributeError`.
    Stage(String),
}

impl ErrorClass {
    pub fn as_str(&self) -> &str {
        match self {
            ErrorClass::HeddleError => "HeddleError",
            ErrorClass::InternalError => "InternalError",
            ErrorClass::Interrupted => "Interrupted",
            ErrorClass::ExitCode => "ExitCode",
            ErrorClass::Signal => "Signal",
            ErrorClass::OutOfMemory => "OutOfMemory",
            ErrorClass::Timeout => "Timeout",
            ErrorClass::InputModified => "InputModified",
            ErrorClass::MissingOutput => "MissingOutput",
            ErrorClass::UnsafeOutput => "UnsafeOutput",
            ErrorClass::SecretInOutput => "SecretInOutput",
            ErrorClass::Stage(s) => s,
        }
    }
}

impl From<String> for ErrorClass {
    fn from(s: String) -> ErrorClass {
        match s.as_str() {
            "HeddleError" => ErrorClass::HeddleError,
            "InternalError" => ErrorClass::InternalError,
            "Interrupted" => ErrorClass::Interrupted,
            "ExitCode" => ErrorClass::ExitCode,
            "Signal" => ErrorClass::Signal,
            "OutOfMemory" => ErrorClass::OutOfMemory,
            "Timeout" => ErrorClass::Timeout,
            "InputModified" => ErrorClass::InputModified,
            "MissingOutput" => ErrorClass::MissingOutput,
            "UnsafeOutput" => ErrorClass::UnsafeOutput,
            "SecretInOutput" => ErrorClass::SecretInOutput,
            _ => ErrorClass::Stage(s),
        }
    }
}

impl From<ErrorClass> for String {
    fn from(c: ErrorClass) -> String {
        match c {
            ErrorClass::Stage(s) => s,
            other => other.as_str().to_string(),
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The writer of a remote cache entry: the name the reader's trust file gives its key, and the
/// key (`ed25519:<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSigner {
    pub name: String,
    pub key: String,
}

/// One instance's record. A run holds one per instance until it ends (a million, in a large
/// matrix), so what most instances never have (a job, a signer, a reason, logs) is boxed: 8
/// bytes when absent instead of its whole size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub stage: String,
    /// A report stage: its Markdown outputs are the tables entries and reports embed.
    #[serde(default)]
    pub report: bool,
    /// Labels of the instances it read from.
    #[serde(default)]
    pub deps: Vec<String>,
    pub status: StatusRecord,
    pub cached: bool,
    /// Served by the shared (remote) cache: fetched, verified and stored locally in this run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
    /// Who signed the remote entry a remote hit was served from (a writer the trust file lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_signer: Option<Box<RemoteSigner>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Why it ran (or `cached`), as a sentence.
    pub reason: String,
    /// The same, typed, for an instance that ran (absent for a hit, whose `cached` says it, for
    /// a skip, whose status has its cause, and in records older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Box<Reason>>,
    pub duration_ms: u64,
    /// Wall-clock start and end, milliseconds since the run started.
    pub start_ms: u64,
    pub end_ms: u64,
    pub attempts: u32,
    pub inputs: VecMap<Box<serde_json::value::RawValue>>,
    pub outputs: VecMap<OutputEntry>,
    /// Where the outputs were materialised, relative to the project root.
    pub output_paths: VecMap<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_identity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<Box<[String; 2]>>,
    /// What the stage reported about where it ran (`$HEDDLE_FACTS_FILE`), e.g. the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Value>,
    /// The expanded cache key, so a record says exactly what its key was made of. Kept as its
    /// JSON text: a run holds every instance's record until it ends, and a `Value` tree of each
    /// key was the largest part of a large no-op run's memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_parts: Option<Box<serde_json::value::RawValue>>,
    /// The `[hosts.NAME]` that ran it (`hosts.toml`); absent for an instance that ran where
    /// heddle runs or on its stage's own `docker_host`, and in records older than hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The batch job that ran it (`heddle run --cluster`); absent for an instance that ran
    /// here or on a configured host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<JobRecord>>,
}

/// Where a batch scheduler ran an instance: the engine, the cluster's name in `hosts.toml`,
/// the last job's id and node, and how many jobs were submitted for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub engine: String,
    pub cluster: String,
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub submissions: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Completed,
    Failed,
    Interrupted,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub pipeline: String,
    pub pipeline_file: String,
    pub status: RunStatus,
    pub started_unix_ms: u64,
    pub duration_ms: u64,
    pub heddle_version: String,
    pub host: String,
    pub params: BTreeMap<String, Value>,
    pub jobs: usize,
    /// Instance label → record, in plan order.
    pub instances: Vec<(String, InstanceRecord)>,
}

impl RunRecord {
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for (_, r) in &self.instances {
            match r.status.status {
                Status::Ok if r.cached => c.1 += 1,
                Status::Ok => c.0 += 1,
                Status::Failed => c.2 += 1,
                Status::Skipped => c.3 += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(label: &str, status: &str, cached: bool) -> String {
        format!(
            r#"["{label}", {{"stage": "s", "status": {{"label": "{label}", "status": "{status}"}},
            "cached": {cached}, "reason": "r", "duration_ms": 1, "start_ms": 0, "end_ms": 1,
            "attempts": 1, "inputs": {{}}, "outputs": {{}}, "output_paths": {{}}}}]"#
        )
    }

    /// The field names and enum spellings are the file format: a record written by an older
    /// heddle reads back, counts by status, and writes the same JSON again.
    #[test]
    fn a_record_reads_back_counts_and_writes_the_same_json() {
        let json = format!(
            r#"{{"run_id": "r1", "pipeline": "p", "pipeline_file": "p.toml", "status": "failed",
            "started_unix_ms": 0, "duration_ms": 5, "heddle_version": "0.1.0", "host": "h",
            "params": {{}}, "jobs": 2, "instances": [{}, {}, {}, {}]}}"#,
            instance("ran", "ok", false),
            instance("hit", "ok", true),
            instance("bad", "failed", false),
            instance("cone", "skipped", false),
        );
        let rec: RunRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(rec.status, RunStatus::Failed);
        assert_eq!(rec.counts(), (1, 1, 1, 1));
        let written = serde_json::to_string(&rec).unwrap();
        let again: RunRecord = serde_json::from_str(&written).unwrap();
        assert_eq!(serde_json::to_string(&again).unwrap(), written);
        assert!(
            written.contains(
                r#""status":{"label":"bad","status":"failed","tolerated":false,"matrix":{}}"#
            ),
            "{written}"
        );
    }
}

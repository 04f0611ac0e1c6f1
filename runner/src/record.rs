//! Run records: one JSON file per run under `<root>/.heddle/runs/`, naming every instance's
//! status, cache key, the reason it ran, durations, input and output hashes and environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use heddle_cache::OutputEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// For a skipped instance: the failure upstream that skipped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// The failure was allowed (`allow_failure`), or the skip stems from an allowed failure.
    #[serde(default)]
    pub tolerated: bool,
    #[serde(default)]
    pub matrix: BTreeMap<String, Value>,
}

impl StatusRecord {
    /// A success: no error, no cause.
    pub fn ok(label: &str, matrix: BTreeMap<String, Value>) -> StatusRecord {
        StatusRecord {
            label: label.to_string(),
            status: Status::Ok,
            exit_code: None,
            error_class: None,
            error: None,
            stderr_tail: None,
            cause: None,
            tolerated: false,
            matrix,
        }
    }

    /// A failure of class `class`, described by the one line `error`.
    pub fn failed(
        label: &str,
        matrix: BTreeMap<String, Value>,
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
        matrix: BTreeMap<String, Value>,
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
    /// An output the cache refuses: a symlink, or a tree that escapes its folder.
    UnsafeOutput,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Why it ran (or `cached`).
    pub reason: String,
    pub duration_ms: u64,
    /// Wall-clock start and end, milliseconds since the run started.
    pub start_ms: u64,
    pub end_ms: u64,
    pub attempts: u32,
    pub inputs: BTreeMap<String, Value>,
    pub outputs: BTreeMap<String, OutputEntry>,
    /// Where the outputs were materialised, relative to the project root.
    pub output_paths: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_identity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<[String; 2]>,
    /// What the stage reported about where it ran (`$HEDDLE_FACTS_FILE`), e.g. the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Value>,
    /// The expanded cache key, so a record says exactly what its key was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_parts: Option<Value>,
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

pub fn runs_dir(root: &Path) -> PathBuf {
    root.join(".heddle").join("runs")
}

pub fn save(root: &Path, rec: &RunRecord) -> std::io::Result<PathBuf> {
    let dir = runs_dir(root);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", rec.run_id));
    let tmp = dir.join(format!(".{}.json.tmp", rec.run_id));
    // Streamed: a 1,000-instance record is over a megabyte, and growing one buffer to hold it
    // was a visible share of a no-op run.
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, std::fs::File::create(&tmp)?);
    serde_json::to_writer(&mut w, rec).map_err(std::io::Error::other)?;
    std::io::Write::flush(&mut w)?;
    drop(w);
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Run ids, oldest first (ids sort by time).
pub fn list(root: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(runs_dir(root))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".json")
                .filter(|s| !s.starts_with('.'))
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    ids
}

/// Load a run by id, unique id prefix, or `last`.
pub fn load(root: &Path, id: &str) -> Result<RunRecord, String> {
    let ids = list(root);
    let pick = if id == "last" || id.is_empty() {
        ids.last().cloned()
    } else if ids.iter().any(|i| i == id) {
        Some(id.to_string())
    } else {
        let m: Vec<_> = ids.iter().filter(|i| i.starts_with(id)).collect();
        match m.len() {
            1 => Some(m[0].clone()),
            0 => None,
            _ => {
                return Err(format!(
                    "run id `{id}` is ambiguous: {}",
                    m.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                ))
            }
        }
    };
    let Some(pick) = pick else {
        return Err(if ids.is_empty() {
            format!("no runs recorded under {}", runs_dir(root).display())
        } else {
            format!("no run `{id}` under {}", runs_dir(root).display())
        });
    };
    let path = runs_dir(root).join(format!("{pick}.json"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("failed to read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("failed to parse {}: {e}", path.display()))
}

pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (y, mo, d, h, mi, s) = civil(secs);
    let rand = (now.subsec_nanos() ^ std::process::id().wrapping_mul(2654435761)) & 0xffff;
    // Milliseconds keep ids in time order, so `last` is the newest run.
    let ms = now.subsec_millis();
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}{ms:03}-{rand:04x}")
}

/// UTC calendar fields of a unix time (Howard Hinnant's days-from-civil inverse).
pub fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        ((rem % 3600) / 60) as u32,
        (rem % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(1_796_212_800), (2026, 12, 2, 12, 0, 0));
    }

    #[test]
    fn error_classes_are_their_bare_names_in_records() {
        let status = StatusRecord::failed("a", BTreeMap::new(), ErrorClass::Timeout, "t".into());
        let text = serde_json::to_string(&status).unwrap();
        assert!(text.contains(r#""error_class":"Timeout""#), "{text}");
        for name in [
            "Interrupted",
            "UnsafeOutput",
            "AttributeError",
            "InputModified",
        ] {
            let class = ErrorClass::from(name.to_string());
            assert_eq!(
                serde_json::to_string(&class).unwrap(),
                format!("\"{name}\"")
            );
            let back: ErrorClass = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, class);
        }
        assert_eq!(
            ErrorClass::from("AttributeError".to_string()),
            ErrorClass::Stage("AttributeError".into())
        );
        assert_eq!(
            ErrorClass::from("Interrupted".to_string()),
            ErrorClass::Interrupted
        );
    }
}

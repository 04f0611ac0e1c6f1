//! Lock files: `<pipeline>.lock` beside the pipeline, TOML in a stable order, naming every
//! instance's cache key, output hashes, image id and env identity, with the expanded key so
//! `heddle status` can say what changed and why without the cache.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use heddle_cache::{Digest, OutputEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::explain::diff;
use crate::key::{KeyParts, Reason};
use crate::plan::Plan;
use crate::preview::{History, PlanRow};
use crate::record::{Cause, ErrorClass, Status, StatusRecord};
use sink::LockSink;

mod from_record;
mod parallel;
mod sink;
mod stamp;
pub use from_record::write_from_record;

/// Bump when the layout changes. v1: first format.
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockFile {
    pub version: u32,
    pub pipeline: String,
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    #[serde(default, rename = "instance")]
    pub instances: Vec<LockedInstance>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockedInstance {
    pub label: String,
    pub stage: String,
    pub cache_key: String,
    /// `ok`, or `failed` / `skipped` for a failure the pipeline allows.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a skipped instance: the failed upstream that skipped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Value>,
    pub outputs: BTreeMap<String, OutputEntry>,
    /// What the stage reported about where it ran (`$HEDDLE_FACTS_FILE`, nulls dropped), e.g.
    /// `dfc/identify`'s DFC version, GPU and HailoRT: the lock names the exact toolchain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Value>,
    /// The expanded key (nulls dropped: TOML has none); absent for a skipped instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("failed to read lock file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The parser's error names the line and column and shows the line.
    #[error("failed to parse lock file {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("failed to encode the lock file")]
    Encode(#[source] toml::ser::Error),
    #[error("failed to write lock file {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Write lock text `text` to `path` atomically; returns the sha256 of the text. A no-op run
/// produces the same lock: the file (and its mtime) is then left alone.
fn write_text(path: &Path, text: &str) -> Result<Digest, LockError> {
    let mut sink = LockSink::new(path);
    sink.push(text)?;
    sink.finish()
}

/// How a lock file spells status `s`.
fn status_word(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
    }
}

/// Where a project keeps its lock stamps ([`stamp`]): beside its run records.
pub fn stamps_dir(root: &Path) -> PathBuf {
    root.join(".heddle").join("lock-stamps")
}

/// `pipelines/x.toml` → `pipelines/x.lock`.
pub fn lock_path(pipeline_file: &Path) -> PathBuf {
    pipeline_file.with_extension("lock")
}

/// TOML has no null; drop them so the value round-trips.
pub fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .filter(|v| !v.is_null())
                .map(strip_nulls)
                .collect(),
        ),
        other => other,
    }
}

impl LockFile {
    pub fn to_toml(&self) -> Result<String, LockError> {
        LockFile::render(self)
    }

    /// The lock file's text for `lock` (a [`LockFile`], or a view that serialises as one).
    fn render(lock: &impl Serialize) -> Result<String, LockError> {
        let mut s = String::from("# heddle lock file: written by `heddle run` and `heddle lock`; compare with `heddle status`.\n");
        let body = toml::to_string_pretty(lock).map_err(LockError::Encode)?;
        s.push_str(&body);
        Ok(s)
    }

    /// Parse lock text `text` (for tests and readers that have it in memory).
    pub fn read_str(text: &str) -> Result<LockFile, toml::de::Error> {
        toml::from_str(text)
    }

    pub fn read(path: &Path) -> Result<LockFile, LockError> {
        let text = std::fs::read_to_string(path).map_err(|source| LockError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| LockError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    /// Write atomically; returns the sha256 of the bytes written.
    pub fn write(&self, path: &Path) -> Result<Digest, LockError> {
        write_text(path, &self.to_toml()?)
    }

    /// From a preview in which every instance is cached (`heddle lock`).
    pub fn from_rows(
        plan: &Plan,
        ctx_images: &BTreeMap<String, heddle_containers::ImageIdentity>,
        rows: &[PlanRow],
    ) -> LockFile {
        LockFile {
            version: LOCK_VERSION,
            pipeline: plan.pipeline.name.clone(),
            params: plan.pipeline.params.clone(),
            instances: rows
                .iter()
                .zip(&plan.instances)
                .map(|(row, inst)| LockedInstance {
                    label: row.label.clone(),
                    stage: plan.stage_of(inst.id).name.clone(),
                    cache_key: row.key.clone().unwrap_or_default(),
                    status: "ok".into(),
                    error: None,
                    cause: None,
                    env: row.parts.as_ref().and_then(|p| p.env.clone()),
                    image: inst.image.as_ref().map(|r| {
                        strip_nulls(serde_json::json!({"reference": r, "id": ctx_images.get(r).map(|i| i.id.clone())}))
                    }),
                    outputs: row.outputs.clone().unwrap_or_default(),
                    facts: None,
                    key: row.parts.as_ref().map(|p| strip_nulls(serde_json::to_value(p).expect("parts"))),
                })
                .collect(),
        }
    }

    /// The lock indexed by label, to look instances up one by one (`heddle status`).
    pub fn index(&self) -> LockIndex<'_> {
        let mut by_label = HashMap::with_capacity(self.instances.len());
        for i in &self.instances {
            // A hand-edited lock may name a label twice: the first one counts.
            by_label.entry(i.label.as_str()).or_insert(i);
        }
        LockIndex { by_label }
    }
}

/// A [`LockFile`] indexed by label. A preview asks about every instance, so a scan of the
/// locked instances per lookup made `heddle status` quadratic in the matrix size.
pub struct LockIndex<'a> {
    by_label: HashMap<&'a str, &'a LockedInstance>,
}

impl<'a> LockIndex<'a> {
    /// The locked instance labelled `label` (the first, if the file names it twice).
    pub fn get(&self, label: &str) -> Option<&'a LockedInstance> {
        self.by_label.get(label).copied()
    }
}

/// A lock file as history: an instance is unchanged when its key equals the locked one.
impl History for LockIndex<'_> {
    fn lookup(
        &self,
        label: &str,
        _family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>> {
        let l = self.get(label)?;
        (l.cache_key == key.to_string() && l.status == "ok").then(|| l.outputs.clone())
    }

    fn recorded_failure(&self, label: &str, key: &Digest) -> Option<StatusRecord> {
        let l = self.get(label)?;
        if l.cache_key != key.to_string() || l.status == "ok" {
            return None;
        }
        let status = if l.status == "skipped" {
            Status::Skipped
        } else {
            Status::Failed
        };
        Some(StatusRecord {
            label: label.to_string(),
            status,
            exit_code: None,
            error_class: l
                .error
                .as_deref()
                .and_then(|e| e.split(':').next())
                .map(|c| ErrorClass::from(c.to_string())),
            error: if status == Status::Failed {
                l.error.clone()
            } else {
                None
            },
            at: None,
            stderr_tail: None,
            cause: l.cause.clone().map(|c| Cause {
                label: c,
                error: l.error.clone(),
            }),
            // It was in a completed run, so the pipeline allowed it.
            tolerated: true,
            matrix: Default::default(),
        })
    }

    fn explain(&self, label: &str, _family: &str, parts: &KeyParts) -> Reason {
        let Some(l) = self.get(label) else {
            return Reason::NewInstance;
        };
        let current = strip_nulls(serde_json::to_value(parts).expect("parts serialise"));
        let Some(key) = l.key.clone() else {
            return Reason::NewInstance;
        };
        match (
            serde_json::from_value::<KeyParts>(key),
            serde_json::from_value::<KeyParts>(current),
        ) {
            (Ok(old), Ok(new)) => {
                let changes = diff(&old, &new);
                if changes.is_empty() {
                    Reason::Changed {
                        changes: vec![crate::key::Change::Command],
                    }
                } else {
                    Reason::Changed { changes }
                }
            }
            _ => Reason::Changed {
                changes: vec![crate::key::Change::Version],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_round_trips_through_toml() {
        let lock = LockFile {
            version: LOCK_VERSION,
            pipeline: "p".into(),
            params: [("seed".to_string(), Value::from(0))].into(),
            instances: vec![LockedInstance {
                label: "a[k=1]".into(),
                stage: "a".into(),
                cache_key: "00".repeat(32),
                status: "ok".into(),
                error: None,
                cause: None,
                env: None,
                image: None,
                outputs: BTreeMap::new(),
                facts: None,
                key: Some(strip_nulls(
                    serde_json::json!({"version": "x", "env": null, "executor": {"kind": "host", "image_id": null}}),
                )),
            }],
        };
        let text = lock.to_toml().unwrap();
        assert!(text.contains("[[instance]]"), "{text}");
        let back: LockFile = toml::from_str(&text).unwrap();
        assert_eq!(back, lock);
    }

    fn locked(label: &str, key: &Digest, status: &str) -> LockedInstance {
        LockedInstance {
            label: label.into(),
            stage: "m".into(),
            cache_key: key.to_string(),
            status: status.into(),
            error: (status != "ok").then(|| "ExitCode: exit 1".into()),
            cause: None,
            env: None,
            image: None,
            outputs: [(
                "o".to_string(),
                OutputEntry::File {
                    digest: Digest::of_bytes(label.as_bytes()),
                    size: 1,
                    executable: false,
                },
            )]
            .into(),
            facts: None,
            key: None,
        }
    }

    fn key_of(i: usize) -> Digest {
        Digest::of_bytes(format!("key {i}").as_bytes())
    }

    /// Every instance of a large lock is found by its label, with its own entry, and answers
    /// as history exactly as its key and status say.
    #[test]
    fn every_instance_of_a_large_lock_is_found_by_label() {
        let n = 20_000;
        let lock = LockFile {
            version: LOCK_VERSION,
            pipeline: "p".into(),
            params: BTreeMap::new(),
            instances: (0..n)
                .map(|i| {
                    let status = if i % 1000 == 7 { "failed" } else { "ok" };
                    locked(&format!("m[i={i}]"), &key_of(i), status)
                })
                .collect(),
        };
        let index = lock.index();
        for i in 0..n {
            let label = format!("m[i={i}]");
            let got = index.get(&label).expect("indexed");
            assert_eq!(got.label, label);
            assert_eq!(got.cache_key, key_of(i).to_string());
            let hit = index.lookup(&label, "p/m", &key_of(i));
            let failure = index.recorded_failure(&label, &key_of(i));
            if i % 1000 == 7 {
                assert!(hit.is_none(), "{label}: a failed instance is no hit");
                assert_eq!(failure.expect("recorded").label, label);
            } else {
                assert_eq!(hit.as_ref(), Some(&got.outputs), "{label}");
                assert!(failure.is_none(), "{label}");
            }
            // Another instance's key is a miss for this one.
            assert!(index.lookup(&label, "p/m", &key_of(i + 1)).is_none());
        }
        assert!(index.get("m[i=20000]").is_none());
        assert!(index.lookup("m", "p/m", &key_of(0)).is_none());
    }

    #[test]
    fn a_lock_is_rewritten_only_when_its_bytes_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        let mut lock = LockFile {
            version: LOCK_VERSION,
            pipeline: "p".into(),
            params: BTreeMap::new(),
            // Large enough to be compared in several pieces.
            instances: (0..2000)
                .map(|i| locked(&format!("m[i={i}]"), &key_of(i), "ok"))
                .collect(),
        };
        let text = lock.to_toml().unwrap();
        assert!(text.len() > 2 * 256 * 1024, "{}", text.len());
        let on_disk = |p: &Path| std::fs::read_to_string(p).unwrap();
        lock.write(&path).unwrap();
        assert_eq!(on_disk(&path), text);
        let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        lock.write(&path).unwrap();
        assert_eq!(stamp(&path), old, "an unchanged lock is left alone");
        // The same length, one byte different near the end: rewritten.
        lock.instances[1999].cache_key = key_of(5000).to_string();
        let changed = lock.to_toml().unwrap();
        assert_eq!(changed.len(), text.len());
        assert_ne!(on_disk(&path), changed);
        lock.write(&path).unwrap();
        assert_eq!(on_disk(&path), changed);
    }

    /// A hand-edited lock that names a label twice answers with the first, as the scan did.
    #[test]
    fn a_label_locked_twice_answers_with_the_first() {
        let lock = LockFile {
            version: LOCK_VERSION,
            pipeline: "p".into(),
            params: BTreeMap::new(),
            instances: vec![
                locked("a", &key_of(1), "ok"),
                locked("b", &key_of(2), "ok"),
                locked("a", &key_of(3), "ok"),
            ],
        };
        let index = lock.index();
        assert_eq!(index.get("a").unwrap().cache_key, key_of(1).to_string());
        assert!(index.lookup("a", "p/a", &key_of(1)).is_some());
        assert!(index.lookup("a", "p/a", &key_of(3)).is_none());
    }
}

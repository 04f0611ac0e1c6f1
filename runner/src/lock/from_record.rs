//! The lock a finished run writes, serialised straight from its run record. At 100,000
//! instances a lock built as a [`LockFile`] first cloned every instance's outputs and expanded
//! key (hundreds of megabytes of fresh pages for the kernel to zero) only to print them; these
//! borrowed views print the same TOML, byte for byte, from the record itself.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use heddle_cache::{Digest, OutputEntry};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::sink::LockSink;
use super::stamp::Stamp;
use super::{LockError, LockFile, LOCK_VERSION};
use crate::record::{InstanceRecord, RunRecord};

/// Write the lock of finished run `rec` to `path` (atomically, and only when its bytes
/// change), streamed an instance at a time; returns the sha256 of the lock's bytes. A lock
/// that the stamp under `stamps` shows would come out the same is not printed at all
/// ([`super::stamp`]).
pub fn write_from_record(rec: &RunRecord, path: &Path, stamps: &Path) -> Result<Digest, LockError> {
    let stamp = Stamp::of(rec, path, stamps);
    if let Some(bytes) = stamp.as_ref().and_then(|s| s.unchanged(path)) {
        return Ok(bytes);
    }
    let mut sink = LockSink::new(path);
    print_toml(rec, |piece| sink.push(piece))?;
    let bytes = sink.finish()?;
    if let Some(stamp) = stamp {
        stamp.save(&bytes, path);
    }
    Ok(bytes)
}

/// The lock text of run `rec`: what [`LockFile::to_toml`] gives for the same instances.
#[cfg(test)]
fn to_toml(rec: &RunRecord) -> Result<String, LockError> {
    let mut text = String::new();
    print_toml(rec, |piece| {
        text.push_str(piece);
        Ok(())
    })?;
    Ok(text)
}

/// Hand the lock text of run `rec` to `emit` in pieces. Printed an instance at a time: `toml`
/// builds a document tree of what it prints, and a tree of the whole lock was the largest
/// allocation of a no-op run of a large matrix.
fn print_toml(
    rec: &RunRecord,
    mut emit: impl FnMut(&str) -> Result<(), LockError>,
) -> Result<(), LockError> {
    let head = LockHead {
        version: LOCK_VERSION,
        pipeline: &rec.pipeline,
        params: &rec.params,
        // A lock without instances says `instance = []`, as the whole document does.
        no_instances: rec.instances.is_empty().then_some([]),
    };
    let head = LockFile::render(&head)?;
    emit(&head)?;
    let mut ends_blank = head.ends_with("\n\n");
    super::parallel::print_in_order(
        rec.instances.len(),
        |range| print_instances(&rec.instances[range]),
        |chunk| {
            // Tables are separated by one empty line, as in a document printed whole.
            if !ends_blank {
                emit("\n")?;
            }
            ends_blank = chunk.ends_with("\n\n");
            emit(&chunk)
        },
    )
}

/// The `[[instance]]` tables of `instances`, each but the first preceded by the empty line a
/// whole document has between tables.
fn print_instances(instances: &[(String, InstanceRecord)]) -> Result<String, LockError> {
    let mut text = String::new();
    for (label, r) in instances {
        let one = OneInstance {
            instance: [LockedView::of(label, r)],
        };
        let part = toml::to_string_pretty(&one).map_err(LockError::Encode)?;
        if !text.is_empty() && !text.ends_with("\n\n") {
            text.push('\n');
        }
        text.push_str(&part);
    }
    Ok(text)
}

/// The lock's fields before its instances.
#[derive(Serialize)]
struct LockHead<'a> {
    version: u32,
    pipeline: &'a str,
    params: &'a BTreeMap<String, Value>,
    #[serde(rename = "instance", skip_serializing_if = "Option::is_none")]
    no_instances: Option<[u8; 0]>,
}

/// One `[[instance]]` table.
#[derive(Serialize)]
struct OneInstance<'a> {
    instance: [LockedView<'a>; 1],
}

/// [`super::LockedInstance`], borrowed.
#[derive(Serialize)]
struct LockedView<'a> {
    label: &'a str,
    stage: &'a str,
    cache_key: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<WithoutNulls<'a>>,
    outputs: &'a heddle_schema::VecMap<OutputEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    facts: Option<WithoutNulls<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<WithoutNulls<'a>>,
}

impl<'a> LockedView<'a> {
    fn of(label: &'a str, r: &'a InstanceRecord) -> LockedView<'a> {
        let cause = r.status.cause.as_ref();
        LockedView {
            label,
            stage: &r.stage,
            cache_key: r.cache_key.as_deref().unwrap_or(""),
            status: super::status_word(r.status.status),
            error: r
                .status
                .error
                .as_deref()
                .or_else(|| cause.and_then(|c| c.error.as_deref())),
            cause: cause.map(|c| c.label.as_str()),
            env: r.env_identity.as_deref(),
            image: r.image.as_ref().map(|v| WithoutNulls(Cow::Borrowed(v))),
            outputs: &r.outputs,
            facts: r.facts.as_ref().map(|v| WithoutNulls(Cow::Borrowed(v))),
            // Parsed from the record's text for this instance only, and dropped once printed.
            key: r
                .key_parts
                .as_ref()
                .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
                .map(|v| WithoutNulls(Cow::Owned(v))),
        }
    }
}

/// A JSON value printed as [`super::strip_nulls`] would leave it (TOML has no null), without
/// building the stripped copy.
struct WithoutNulls<'a>(Cow<'a, Value>);

impl Serialize for WithoutNulls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_ref() {
            Value::Object(m) => {
                let kept = m.iter().filter(|(_, v)| !v.is_null());
                let mut map = s.serialize_map(Some(kept.clone().count()))?;
                for (k, v) in kept {
                    map.serialize_entry(k, &WithoutNulls(Cow::Borrowed(v)))?;
                }
                map.end()
            }
            Value::Array(a) => {
                let kept = a.iter().filter(|v| !v.is_null());
                let mut seq = s.serialize_seq(Some(kept.clone().count()))?;
                for v in kept {
                    seq.serialize_element(&WithoutNulls(Cow::Borrowed(v)))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{strip_nulls, LockedInstance};
    use crate::record::{Cause, ErrorClass, Status, StatusRecord};

    fn record(label: &str, status: Status) -> InstanceRecord {
        let status_record = match status {
            Status::Ok => StatusRecord::ok(label, Default::default()),
            Status::Failed => StatusRecord::failed(
                label,
                Default::default(),
                ErrorClass::ExitCode,
                "boom".into(),
            ),
            Status::Skipped => StatusRecord::skipped(
                label,
                Default::default(),
                Cause {
                    label: "up".into(),
                    error: Some("ExitCode: exit 3".into()),
                },
                true,
            ),
        };
        InstanceRecord {
            stage: "m".into(),
            report: false,
            deps: vec![],
            status: status_record,
            cached: true,
            remote: false,
            remote_signer: None,
            cache_key: (status != Status::Skipped).then(|| "ab".repeat(32)),
            reason: "cached".into(),
            why: None,
            duration_ms: 1,
            start_ms: 0,
            end_ms: 1,
            attempts: 1,
            inputs: Default::default(),
            outputs: [(
                "o".to_string(),
                OutputEntry::File {
                    digest: Digest::of_bytes(label.as_bytes()),
                    size: 3,
                    executable: false,
                },
            )]
            .into(),
            output_paths: Default::default(),
            env_identity: Some("env-1".into()),
            image: Some(serde_json::json!({"reference": "busybox", "id": null})),
            command: None,
            logs: None,
            facts: None,
            key_parts: Some(serde_json::value::to_raw_value(&serde_json::json!({
                "version": "heddle/action/v1",
                "env": null,
                "executor": {"kind": "docker", "image_id": "sha256:1", "gpus": null, "devices": [null, "/dev/x"]},
                "params": {"a": 1.5, "b": [1, null, {"c": null, "d": "e"}], "n": -3},
            })).unwrap()),
            host: None,
            job: None,
        }
    }

    fn run_of(instances: Vec<(String, InstanceRecord)>) -> RunRecord {
        RunRecord {
            run_id: "r".into(),
            pipeline: "p".into(),
            pipeline_file: "p.toml".into(),
            status: crate::record::RunStatus::Completed,
            started_unix_ms: 0,
            duration_ms: 1,
            heddle_version: "0".into(),
            host: "h".into(),
            params: [("seed".to_string(), Value::from(3))].into(),
            jobs: 1,
            instances,
        }
    }

    /// The lock a run writes is exactly what the owned lock file prints for the same run:
    /// nulls dropped at every depth, a skipped instance's cause and error, a failure's error.
    #[test]
    fn the_borrowed_lock_prints_what_the_owned_lock_prints() {
        // Enough instances to be printed in several chunks, on several threads.
        let rec = run_of(
            (0..1500)
                .map(|i| {
                    let label = format!("m[i={i}]");
                    let status = [Status::Ok, Status::Failed, Status::Skipped][i % 3];
                    let r = record(&label, status);
                    (label, r)
                })
                .collect(),
        );
        let owned = LockFile {
            version: LOCK_VERSION,
            pipeline: rec.pipeline.clone(),
            params: rec.params.clone(),
            instances: rec
                .instances
                .iter()
                .map(|(label, r)| LockedInstance {
                    label: label.clone(),
                    stage: r.stage.clone(),
                    cache_key: r.cache_key.clone().unwrap_or_default(),
                    status: format!("{:?}", r.status.status).to_lowercase(),
                    error: r
                        .status
                        .error
                        .clone()
                        .or_else(|| r.status.cause.as_ref().and_then(|c| c.error.clone())),
                    cause: r.status.cause.as_ref().map(|c| c.label.clone()),
                    env: r.env_identity.clone(),
                    image: r.image.clone().map(strip_nulls),
                    outputs: r.outputs.to_btree(),
                    facts: r.facts.clone().map(strip_nulls),
                    key: r
                        .key_parts
                        .as_ref()
                        .map(|raw| strip_nulls(serde_json::from_str(raw.get()).unwrap())),
                })
                .collect(),
        };
        let text = to_toml(&rec).unwrap();
        assert_eq!(text, owned.to_toml().unwrap());
        assert!(!text.contains("null"), "{text}");
        assert_eq!(LockFile::read_str(&text).unwrap(), owned);

        // No params, one instance, no image or key; and no instances at all.
        let mut bare = rec.clone();
        bare.params.clear();
        bare.instances.truncate(1);
        bare.instances[0].1.image = None;
        bare.instances[0].1.key_parts = None;
        let mut bare_owned = owned.clone();
        bare_owned.params.clear();
        bare_owned.instances.truncate(1);
        bare_owned.instances[0].image = None;
        bare_owned.instances[0].key = None;
        assert_eq!(to_toml(&bare).unwrap(), bare_owned.to_toml().unwrap());
        bare.instances.clear();
        bare_owned.instances.clear();
        assert_eq!(to_toml(&bare).unwrap(), bare_owned.to_toml().unwrap());
    }

    #[test]
    fn an_unchanged_lock_is_not_printed_again_but_an_edited_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let (path, stamps) = (dir.path().join("p.lock"), dir.path().join("stamps"));
        let mut rec = run_of(vec![("m[i=0]".into(), record("m[i=0]", Status::Ok))]);
        let first = write_from_record(&rec, &path, &stamps).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, to_toml(&rec).unwrap());
        let stamp = Stamp::of(&rec, &path, &stamps).unwrap();
        assert_eq!(
            stamp.unchanged(&path),
            Some(first),
            "stamped after the write"
        );

        // A hand edit keeps the fingerprint but not the bytes: printed again, edit undone.
        std::fs::write(&path, text.replace("m[i=0]", "m[i=9]")).unwrap();
        assert_eq!(stamp.unchanged(&path), None);
        assert_eq!(write_from_record(&rec, &path, &stamps).unwrap(), first);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);

        // A changed record changes the fingerprint: printed again.
        rec.instances[0].1.cache_key = Some("b".repeat(64));
        assert_eq!(
            Stamp::of(&rec, &path, &stamps).unwrap().unchanged(&path),
            None
        );
        let second = write_from_record(&rec, &path, &stamps).unwrap();
        assert_ne!(second, first);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            to_toml(&rec).unwrap()
        );
    }
}

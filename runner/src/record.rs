//! Run records: one JSON file per run under `<root>/.heddle/runs/`, naming every instance's
//! status, cache key, the reason it ran, durations, input and output hashes and environment.

use std::path::{Path, PathBuf};

mod delta;
pub use delta::RECORD_FORMAT;

pub use heddle_schema::{
    Cause, ErrorClass, InstanceRecord, JobRecord, RemoteSigner, RunRecord, RunStatus, Status,
    StatusRecord,
};

pub fn runs_dir(root: &Path) -> PathBuf {
    root.join(".heddle").join("runs")
}

/// Write run `rec`'s record: whole (format 1) with an index beside it, or, when an earlier
/// record of the same pipeline holds most of its instances, as references to that one
/// (format 2, [`delta`]).
/// `rec` is borrowed mutably only to hash each hit with its times zeroed in place (restored
/// before this returns): cloning 100,000 records to do so cost a no-op run what not writing
/// them saved.
pub fn save(root: &Path, rec: &mut RunRecord) -> std::io::Result<PathBuf> {
    delta::save(&runs_dir(root), rec)
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

/// What [`prune`] removed: the run ids and their bytes on disk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub ids: Vec<String>,
    pub bytes: u64,
}

/// Remove every run record but the newest `keep` (a run that ran a 100,000-value matrix writes
/// about 100 MB of record, so a busy project needs a way to drop old ones). The cache entries a
/// removed run used stay until `heddle cache gc`, which then no longer counts them as recent.
/// A record another one is based on ([`delta`]) stays while that one does.
pub fn prune(root: &Path, keep: usize) -> Result<Pruned, RecordError> {
    let dir = runs_dir(root);
    let ids = list(root);
    let split = ids.len().saturating_sub(keep);
    let bases: std::collections::HashSet<String> = ids[split..]
        .iter()
        .filter_map(|id| delta::base_of(&dir.join(format!("{id}.json"))))
        .collect();
    let mut pruned = Pruned::default();
    for id in &ids[..split] {
        if bases.contains(id) {
            continue;
        }
        let path = dir.join(format!("{id}.json"));
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            // Pruned by a concurrent heddle: gone either way.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(RecordError::Remove { path, source }),
        }
        delta::remove_index(&dir, id);
        pruned.bytes += bytes;
        pruned.ids.push(id.clone());
    }
    Ok(pruned)
}

/// Why a run record could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("run id `{id}` is ambiguous: {}", matches.join(", "))]
    Ambiguous { id: String, matches: Vec<String> },
    #[error("no runs recorded under {}", dir.display())]
    NoRuns { dir: PathBuf },
    #[error("no run `{id}` under {}", dir.display())]
    NoSuchRun { id: String, dir: PathBuf },
    #[error("failed to read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to remove {}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read {}: unknown record format {format}", path.display())]
    Format { path: PathBuf, format: u32 },
    #[error("failed to read {}: its base record `{base}` is unreadable", path.display())]
    Base {
        path: PathBuf,
        base: String,
        #[source]
        source: Box<RecordError>,
    },
    #[error("{} changed after a later record was based on it", path.display())]
    BaseChanged { path: PathBuf },
    #[error("failed to parse {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Load a run by id, unique id prefix, or `last`.
pub fn load(root: &Path, id: &str) -> Result<RunRecord, RecordError> {
    let ids = list(root);
    let pick = if id == "last" || id.is_empty() {
        ids.last().cloned()
    } else if ids.iter().any(|i| i == id) {
        Some(id.to_string())
    } else {
        let m: Vec<String> = ids.iter().filter(|i| i.starts_with(id)).cloned().collect();
        match m.len() {
            0 => None,
            1 => m.into_iter().next(),
            _ => {
                return Err(RecordError::Ambiguous {
                    id: id.to_string(),
                    matches: m,
                })
            }
        }
    };
    let Some(pick) = pick else {
        let dir = runs_dir(root);
        return Err(if ids.is_empty() {
            RecordError::NoRuns { dir }
        } else {
            RecordError::NoSuchRun {
                id: id.to_string(),
                dir,
            }
        });
    };
    let path = runs_dir(root).join(format!("{pick}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(source) => return Err(RecordError::Read { path, source }),
    };
    if delta::has_base(text.as_bytes()) {
        return delta::load(&runs_dir(root), &path, &text);
    }
    serde_json::from_str(&text).map_err(|source| RecordError::Parse { path, source })
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
        let status = StatusRecord::failed("a", Default::default(), ErrorClass::Timeout, "t".into());
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

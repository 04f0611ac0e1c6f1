//! What a run's report stages produced, read back for people: their Markdown tables and plots
//! files (from the store by digest, else from where the run materialised them), and the hash of
//! the pipeline's lock file. The HTML page, logbook entries and `heddle diff` all start here.
//!
//! The binary reads through these (`src/artefacts.rs` maps the errors to exit codes).

use std::path::{Path, PathBuf};

use heddle_cache::{Digest, Store};
use heddle_schema::{RunRecord, Status};

use crate::entry::Table;
use crate::html::{PlotFile, PlotSpec};

#[derive(Debug, thiserror::Error)]
pub enum ArtefactError {
    #[error("failed to read {src} as a plots file")]
    BadPlots {
        src: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Read a stored output: from the store by digest, else from where it was materialised.
fn artefact(store: &Store, root: &Path, digest: &Digest, path: Option<&String>) -> Option<Vec<u8>> {
    std::fs::read(store.blob_path(digest))
        .ok()
        .or_else(|| path.and_then(|p| std::fs::read(root.join(p)).ok()))
}

/// The report stages' outputs ending in `suffix`, as (`label#output`, digest, bytes), in plan
/// order. An instance that did not end ok contributes nothing.
fn report_outputs(
    store: &Store,
    root: &Path,
    rec: &RunRecord,
    suffix: &str,
) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (label, r) in &rec.instances {
        if !r.report || r.status.status != Status::Ok {
            continue;
        }
        for (name, entry) in &r.outputs {
            let path = r.output_paths.get(name);
            if !path.is_some_and(|p| p.ends_with(suffix)) {
                continue;
            }
            if let Some(bytes) = artefact(store, root, &entry.digest(), path) {
                out.push((format!("{label}#{name}"), entry.digest().to_string(), bytes));
            }
        }
    }
    out
}

/// The run's report tables: every `.md` output of a `report = true` stage.
///
/// A table made downstream of a test double has `(double)` in every row ([`crate::double`]).
pub fn tables(store: &Store, root: &Path, rec: &RunRecord) -> Vec<Table> {
    let doubles = crate::double::downstream_of_doubles(rec);
    report_outputs(store, root, rec, ".md")
        .into_iter()
        .map(|(src, digest, bytes)| {
            let markdown = String::from_utf8_lossy(&bytes).into_owned();
            let label = src.split_once('#').map_or(src.as_str(), |(l, _)| l);
            let markdown = if doubles.contains(label) {
                crate::double::label_rows(&markdown)
            } else {
                markdown
            };
            Table {
                src,
                digest,
                markdown,
            }
        })
        .collect()
}

/// The run's plots: every `.plots.json` output of a `report = true` stage, in order.
pub fn plots(store: &Store, root: &Path, rec: &RunRecord) -> Result<Vec<PlotSpec>, ArtefactError> {
    let mut out = Vec::new();
    for (src, _, bytes) in report_outputs(store, root, rec, ".plots.json") {
        let f: PlotFile = serde_json::from_slice(&bytes)
            .map_err(|source| ArtefactError::BadPlots { src, source })?;
        out.extend(f.plots);
    }
    Ok(out)
}

/// Where the run's pipeline keeps its lock file.
pub fn lock_file(root: &Path, rec: &RunRecord) -> PathBuf {
    heddle_runner::lock::lock_path(&root.join(&rec.pipeline_file))
}

/// `sha256:…` of the pipeline's lock file as it is now, if there is one.
pub fn lock_hash(root: &Path, rec: &RunRecord) -> Option<String> {
    std::fs::read(lock_file(root, rec))
        .ok()
        .map(|b| Digest::of_bytes(&b).to_string())
}

//! A run's report outputs read back for people: the Markdown tables and plot specs that report
//! stages produced, taken from the store by digest (else from where they were materialised).
//! Shared by `heddle report` and the logbook commands.

use std::path::Path;

use heddle_cache::{Digest, Store};
use heddle_report::entry::Table;
use heddle_report::html::{PlotFile, PlotSpec};
use heddle_runner::record::{RunRecord, Status};

use crate::error::Error;

/// Read a stored output: from the store by digest, else from where it was materialised.
fn artefact(store: &Store, root: &Path, digest: &Digest, path: Option<&String>) -> Option<Vec<u8>> {
    std::fs::read(store.blob_path(digest))
        .ok()
        .or_else(|| path.and_then(|p| std::fs::read(root.join(p)).ok()))
}

/// The report stages' outputs ending in `suffix`, as (src, digest, bytes).
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

/// The report stages' Markdown tables (`*.md` outputs), named `label#output`.
pub fn tables(store: &Store, root: &Path, rec: &RunRecord) -> Vec<Table> {
    report_outputs(store, root, rec, ".md")
        .into_iter()
        .map(|(src, digest, bytes)| Table {
            src,
            digest,
            markdown: String::from_utf8_lossy(&bytes).into_owned(),
        })
        .collect()
}

/// The report stages' plots (`*.plots.json` outputs); one that does not parse is the stage's
/// fault (exit 1).
pub fn plots(store: &Store, root: &Path, rec: &RunRecord) -> Result<Vec<PlotSpec>, Error> {
    let mut out = Vec::new();
    for (src, _, bytes) in report_outputs(store, root, rec, ".plots.json") {
        let f: PlotFile =
            serde_json::from_slice(&bytes).map_err(|source| Error::NotPlots { src, source })?;
        out.extend(f.plots);
    }
    Ok(out)
}

/// Write `bytes` to `path`, creating its folder first.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), Error> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|source| Error::Io {
            op: "cannot create",
            path: d.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        op: "cannot write",
        path: path.to_path_buf(),
        source,
    })
}

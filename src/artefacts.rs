//! A run's report outputs read back for people: the Markdown tables and plot specs that report
//! stages produced, taken from the store by digest (else from where they were materialised).
//! Shared by `heddle report` and the logbook commands; the reading itself is
//! `heddle_report::artefacts`, this maps its errors onto the binary's exit codes.

use std::path::Path;

use heddle_cache::Store;
use heddle_report::artefacts::{self, ArtefactError};
use heddle_report::entry::Table;
use heddle_report::html::PlotSpec;
use heddle_runner::record::RunRecord;

use crate::error::Error;

/// The report stages' Markdown tables (`*.md` outputs), named `label#output`.
pub fn tables(store: &Store, root: &Path, rec: &RunRecord) -> Vec<Table> {
    artefacts::tables(store, root, rec)
}

/// The report stages' plots (`*.plots.json` outputs); one that does not parse is the stage's
/// fault (exit 1).
pub fn plots(store: &Store, root: &Path, rec: &RunRecord) -> Result<Vec<PlotSpec>, Error> {
    artefacts::plots(store, root, rec).map_err(|e| match e {
        ArtefactError::BadPlots { src, source } => Error::NotPlots { src, source },
    })
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

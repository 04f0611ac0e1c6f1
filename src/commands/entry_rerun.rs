//! What `logbook refresh` and `logbook verify` share: an entry read from its file, the pipeline
//! and the `--set` overrides it names, and how it is rerun. Its own room, so the two commands
//! depend on it and not on each other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_cache::Store;
use heddle_report::entry::Entry;
use heddle_runner::record;
use heddle_runner::run_options::RunOptions;

use crate::error::Error;
use crate::progress::ProgressMode;
use crate::session::default_jobs;

/// How the logbook re-runs a pipeline: in this project, with this store.
pub struct Rerun<'a> {
    pub root: &'a Path,
    pub store: Arc<Store>,
    pub progress: ProgressMode,
}

/// Options of a rerun for the logbook: every branch finished, a fresh run id.
pub fn rerun_options(no_cache: bool) -> RunOptions {
    RunOptions {
        jobs: default_jobs(),
        keep_going: true,
        force: Default::default(),
        no_cache,
        run_id: record::new_run_id(),
        remote: None,
        cluster: None,
    }
}

pub fn read_entry(path: &Path) -> Result<Entry, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "cannot read",
        path: path.to_path_buf(),
        source,
    })?;
    Entry::parse(&text).map_err(|problem| Error::BadEntry {
        path: path.to_path_buf(),
        problem,
    })
}

/// The pipeline file an entry names (relative to the project root), as written and resolved.
pub fn pipeline_file(e: &Entry, root: &Path) -> Result<(String, PathBuf), Error> {
    let named = e
        .front
        .get("pipeline_file")
        .ok_or_else(|| Error::Usage("the entry names no pipeline_file".into()))?;
    let file = PathBuf::from(named);
    let file = if file.is_absolute() {
        file
    } else {
        root.join(file)
    };
    Ok((named.clone(), file))
}

/// `--set` overrides that reproduce the entry's params.
pub fn overrides(e: &Entry) -> Result<Vec<(String, String)>, Error> {
    let params: BTreeMap<String, serde_json::Value> = match e.front.get("params") {
        Some(p) => serde_json::from_str(p).map_err(Error::EntryParams)?,
        None => BTreeMap::new(),
    };
    Ok(params
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (k, text)
        })
        .collect())
}

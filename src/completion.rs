//! Values completed from the project in the current folder, for the dynamic completion that
//! `source <(COMPLETE=bash heddle)` installs (clap_complete's `CompleteEnv`): `--force <TAB>`
//! offers the stages and `--set <TAB>` the params of the pipelines there (`./heddle.toml` and
//! `./pipelines/*.toml`). The completer is not told which pipeline the line names, so it offers
//! those of every pipeline file, each labelled with its file. A file that does not parse
//! offers nothing; completion never prints an error.

use std::ffi::OsStr;
use std::path::PathBuf;

use clap_complete::engine::CompletionCandidate;

/// The pipeline files `heddle run` would choose among in the current folder.
fn pipeline_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("pipelines")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if std::path::Path::new("heddle.toml").is_file() {
        files.insert(0, "heddle.toml".into());
    }
    files
}

/// The keys of table `table` in each pipeline file, with the file they come from.
fn names_in(table: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in pipeline_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(doc) = text.parse::<toml::Table>() else {
            continue;
        };
        if let Some(t) = doc.get(table).and_then(|v| v.as_table()) {
            let from = file.display().to_string();
            out.extend(t.keys().map(|k| (k.clone(), from.clone())));
        }
    }
    out
}

fn candidates(
    names: Vec<(String, String)>,
    current: &OsStr,
    suffix: &str,
) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .filter(|(name, _)| name.starts_with(current.as_ref()))
        .filter(|(name, _)| seen.insert(name.clone()))
        .map(|(name, from)| {
            CompletionCandidate::new(format!("{name}{suffix}")).help(Some(from.into()))
        })
        .collect()
}

/// `--force STAGE`: the stages of the pipelines here.
pub fn stages(current: &OsStr) -> Vec<CompletionCandidate> {
    candidates(names_in("stages"), current, "")
}

/// `--set NAME=VALUE`: `NAME=` for each param of the pipelines here.
pub fn params(current: &OsStr) -> Vec<CompletionCandidate> {
    candidates(names_in("params"), current, "=")
}

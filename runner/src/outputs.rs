//! Where an instance's outputs live outside the cache: `out/<pipeline>/<label>/<file>` under the
//! project root. Collecting takes a finished command's declared outputs from its sandbox into
//! the cache and materialises them there; restoring does the same for a cache hit, skipping
//! files already in place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use heddle_cache::{error_chain, CacheError, Digest, OutputEntry, StatCache, Store};

use crate::names::path_segment;
use crate::plan::Plan;
use crate::record::ErrorClass;

/// Stored outputs (name → entry) and where they were materialised (name → absolute path).
pub type Collected = (BTreeMap<String, OutputEntry>, BTreeMap<String, String>);

/// Where an instance's outputs are materialised: `out/<pipeline>/<label>/<file>`, the label
/// made a safe folder name ([`path_segment`]: a matrix value is data, not a path).
pub fn output_dir(plan: &Plan, label: &str) -> PathBuf {
    let base = plan.pipeline.root.join("out").join(&plan.pipeline.name);
    if label.is_empty() {
        base
    } else {
        base.join(path_segment(label).as_ref())
    }
}

/// Paths made relative to the project root, so records travel between checkouts.
pub fn relative_paths(root: &Path, paths: BTreeMap<String, String>) -> BTreeMap<String, String> {
    paths
        .into_iter()
        .map(|(k, p)| {
            let rel = Path::new(&p)
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or(p);
            (k, rel)
        })
        .collect()
}

/// A cache hit: the outputs of the action recorded under `key`, materialised in `dir`
/// (`files`: output name → file name), or `None` when there is none or it cannot be restored.
pub fn restore(
    store: &Store,
    stats: &StatCache,
    key: &Digest,
    dir: &Path,
    files: &BTreeMap<String, String>,
) -> Option<Collected> {
    let outputs = store.lookup_outputs(key).ok().flatten()?;
    let mut paths = BTreeMap::new();
    for (name, out) in &outputs {
        let file = files.get(name)?;
        let dest = dir.join(file);
        if !store.is_materialized(out, &dest, stats) {
            std::fs::create_dir_all(dir).ok()?;
            store.materialize(out, &dest).ok()?;
            stats.record(&dest, out.digest());
        }
        paths.insert(name.clone(), dest.to_string_lossy().into_owned());
    }
    Some((outputs, paths))
}

/// What [`repair_edited`] did to one materialised output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// Put back from the store, as the instance made it.
    Restored { label: String, path: PathBuf },
    /// The store lost the bytes too (the file shared the blob's inode, a hard link on a
    /// filesystem without reflinks): removed, so `out/` never shows what the instance did not
    /// make; the next run recomputes it.
    Removed { label: String, path: PathBuf },
}

/// After a stage wrote through an input (`InputModified`), `out/` may hold the edited bytes
/// under the upstream that made them, which the record shows `ok`: every successful
/// instance's materialised outputs (`(label, outputs, paths relative to root)`) are checked,
/// and one that changed is restored from the store when the store still has it, else removed.
/// A file is checked by its hash; a folder by its recorded stat (then restored if it can be).
pub fn repair_edited<'a>(
    store: &Store,
    stats: &StatCache,
    root: &Path,
    done: impl Iterator<
        Item = (
            &'a str,
            &'a heddle_schema::VecMap<OutputEntry>,
            &'a heddle_schema::VecMap<String>,
        ),
    >,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    for (label, outputs, paths) in done {
        for (name, entry) in outputs.iter() {
            let Some(rel) = paths.get(name) else {
                continue;
            };
            let dest = root.join(rel);
            let intact = match entry {
                OutputEntry::File { digest, .. } => {
                    heddle_cache::hash_file(&dest).is_ok_and(|d| d == *digest)
                }
                OutputEntry::Dir { .. } => store.is_materialized(entry, &dest, stats),
            };
            if intact || std::fs::symlink_metadata(&dest).is_err() {
                continue;
            }
            let label = label.to_string();
            if store.materialize(entry, &dest).is_ok() {
                stats.record(&dest, entry.digest());
                repairs.push(Repair::Restored { label, path: dest });
            } else if matches!(entry, OutputEntry::File { .. }) {
                let _ = std::fs::remove_file(&dest);
                repairs.push(Repair::Removed { label, path: dest });
            }
        }
    }
    repairs
}

/// Take every declared output (`files`: name → file name) from `sandbox/out/<name>/<file>` into
/// the store, then materialise them in `dir`. A missing or unsafe output fails the instance.
pub fn collect(
    store: &Store,
    stats: &StatCache,
    sandbox: &Path,
    dir: &Path,
    files: &BTreeMap<String, String>,
) -> Result<Collected, (ErrorClass, String)> {
    let mut outs = BTreeMap::new();
    for (name, file) in files {
        let rel = Path::new("out").join(name).join(file);
        check_parents_beneath(sandbox, &rel, name, file)?;
        let p = sandbox.join(&rel);
        if std::fs::symlink_metadata(&p).is_err() {
            return Err((
                ErrorClass::MissingOutput,
                format!("output `{name}` ({file}) was not written"),
            ));
        }
        let entry = store.adopt_output(&p).map_err(|e| {
            let class = match e {
                // What the stage made and the cache refuses is the stage's failure (exit 1),
                // not heddle's (exit 2).
                CacheError::SymlinkOutput { .. }
                | CacheError::UnsafeTree { .. }
                | CacheError::UnsupportedFileType { .. }
                | CacheError::NonUtf8Path { .. } => ErrorClass::UnsafeOutput,
                _ => ErrorClass::HeddleError,
            };
            (class, error_chain(&e))
        })?;
        outs.insert(name.clone(), entry);
    }
    // `materialize` makes `dir` for the first output (a second `create_dir_all` here cost two
    // system calls a stage: benches/RESULTS.md, M15).
    if outs.is_empty() {
        std::fs::create_dir_all(dir).map_err(|e| {
            (
                ErrorClass::HeddleError,
                format!("failed to create {}: {e}", dir.display()),
            )
        })?;
    }
    let mut paths = BTreeMap::new();
    for (name, entry) in &outs {
        let dest = dir.join(&files[name]);
        store
            .materialize(entry, &dest)
            .map_err(|e| (ErrorClass::HeddleError, error_chain(&e)))?;
        stats.record(&dest, entry.digest());
        paths.insert(name.clone(), dest.to_string_lossy().into_owned());
    }
    Ok((outs, paths))
}

/// The folders an output lives in (`out/<name>/` and any folders in its file name) must be the
/// sandbox's own: a stage that swaps `out/<name>` for a link to a host folder would otherwise
/// make heddle read a host file into the cache. The output itself is opened without following
/// links by the store.
fn check_parents_beneath(
    sandbox: &Path,
    rel: &Path,
    name: &str,
    file: &str,
) -> Result<(), (ErrorClass, String)> {
    use heddle_cache::beneath::{open_dir_beneath, BeneathError};
    let parent = rel.parent().unwrap_or(Path::new(""));
    match open_dir_beneath(sandbox, parent) {
        Ok(_) => Ok(()),
        Err(e @ BeneathError::Escapes { .. }) => Err((
            ErrorClass::UnsafeOutput,
            format!("output `{name}` ({file}) is not read: {e}"),
        )),
        // A missing folder is a missing output, reported as such by the caller.
        Err(BeneathError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(())
        }
        Err(BeneathError::Io(e)) => Err((
            ErrorClass::HeddleError,
            format!("failed to open {}: {e}", sandbox.join(parent).display()),
        )),
    }
}

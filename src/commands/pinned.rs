//! The cache keys a project's committed lock files pin: kept by `cache gc` and pushed or
//! checked by `cache verify --remote`. Its own file so both commands read it without
//! depending on each other.

use std::path::Path;

use heddle_cache::Digest;
use heddle_runner::lock::LockFile;

use crate::printable::say_err;

/// Cache keys named by the lock files `<root>/pipelines/*.lock`, read with the lock reader.
/// A lock file that does not read is reported and its keys are not kept.
pub(crate) fn lock_keys(root: &Path) -> Vec<Digest> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(root.join("pipelines"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect();
    files.sort();
    for path in files {
        match LockFile::read(&path) {
            Ok(lock) => out.extend(
                lock.instances
                    .iter()
                    .filter_map(|i| i.cache_key.parse::<Digest>().ok()),
            ),
            Err(e) => say_err!(
                "warning: {}; the entries it names may be evicted",
                heddle_cache::error_chain(&e)
            ),
        }
    }
    out
}

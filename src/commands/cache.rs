//! `heddle cache du | gc | verify`: the store's space per stage, eviction of what recent runs
//! and lock files do not reference (and of quarantined blobs), and a re-hash of every blob
//! (with a line on what is in quarantine).

use crate::printable::say;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use heddle_cache::{Digest, Store};
use heddle_runner::lock::LockFile;
use heddle_runner::record;

use crate::error::{Error, EXIT_OK, EXIT_STAGE_FAILED};
use crate::session::Session;

#[derive(Subcommand, Debug)]
pub enum CacheCmd {
    /// Space used, per pipeline stage.
    Du,
    /// Evict what recent runs do not reference, cheapest to recompute per byte first; remove quarantined blobs.
    Gc {
        /// Evict until the store is at most this size (e.g. 20G); default: evict everything unreferenced.
        #[arg(long)]
        max_size: Option<String>,
        /// How many recent runs of this project to keep.
        #[arg(long, default_value_t = 10)]
        keep_runs: usize,
    },
    /// Re-hash every blob and report every bad entry, and the blobs in quarantine.
    Verify {
        /// Also check the shared cache's entries this project's lock files and runs name:
        /// signed by a writer the trust files list, and the same outputs as the local ones.
        #[arg(long)]
        remote: bool,
    },
    /// Make this machine's signing key, for writing to a shared cache (`--remote-cache-mode
    /// readwrite`); prints the line a team adds to .heddle/trusted-writers.
    Keygen {
        /// The name readers' records and messages call this writer by (default: user@host).
        #[arg(long)]
        name: Option<String>,
        /// Replace an existing key (what it signed is trusted only while its line is listed).
        #[arg(long)]
        force: bool,
    },
    /// Upload to the shared cache what a run (default: the last) or a lock file references.
    Push {
        /// A run id, a unique prefix, or `last`.
        #[arg(conflicts_with = "lock")]
        run: Option<String>,
        /// A lock file whose instances to upload.
        #[arg(long, value_name = "FILE")]
        lock: Option<PathBuf>,
    },
}

pub async fn cache(s: &Session, cmd: &CacheCmd) -> Result<i32, Error> {
    let store = || s.open_store();
    match cmd {
        // A key is the user's, not the cache's: no store needed.
        CacheCmd::Keygen { name, force } => super::cache_trust::keygen(name.as_deref(), *force),
        CacheCmd::Du => du(store()?.as_ref()),
        CacheCmd::Verify { remote: false } => verify(store()?.as_ref()),
        CacheCmd::Verify { remote: true } => {
            let store = store()?;
            let local = verify(&store)?;
            let remote = super::cache_trust::verify_remote(s, &store).await?;
            Ok(local.max(remote))
        }
        CacheCmd::Push { run, lock } => push(s, store()?, run.as_deref(), lock.as_deref()).await,
        CacheCmd::Gc {
            max_size,
            keep_runs,
        } => gc(s, store()?.as_ref(), max_size.as_deref(), *keep_runs),
    }
}

fn du(store: &Store) -> Result<i32, Error> {
    let du = store.du()?;
    say!(
        "{}: {} in {} blobs, {} actions",
        store.root().display(),
        human(du.blob_bytes),
        du.blob_count,
        du.action_count
    );
    if du.quarantined_count > 0 {
        say!(
            "  quarantine: {} ({}) that did not match their digest; `heddle cache gc` removes them",
            blobs(du.quarantined_count),
            human(du.quarantined_bytes)
        );
    }
    for (fam, u) in &du.families {
        say!(
            "  {fam:<40} {:>10}  {} actions",
            human(u.output_bytes),
            u.actions
        );
    }
    // These lines and the families add up to the total above: each blob is counted once.
    if du.shared_bytes > 0 {
        println!(
            "  {:<40} {:>10}",
            "(shared by several stages)",
            human(du.shared_bytes)
        );
    }
    if du.unreferenced_bytes > 0 {
        println!(
            "  {:<40} {:>10}",
            "(referenced by no entry)",
            human(du.unreferenced_bytes)
        );
    }
    Ok(EXIT_OK)
}

fn verify(store: &Store) -> Result<i32, Error> {
    let r = store.verify()?;
    say!(
        "checked {} blobs ({}), {} actions",
        r.blobs_checked,
        human(r.bytes_checked),
        r.actions_checked
    );
    if !r.tmp_removed.is_empty() {
        say!("removed {} leftover temp files", r.tmp_removed.len());
    }
    for b in &r.bad {
        say!("BAD {b}");
    }
    if !r.quarantined.is_empty() {
        say!(
            "quarantine: {} ({}) that did not match their digest, kept in {} for inspection; `heddle cache gc` removes them",
            blobs(r.quarantined.len() as u64),
            human(r.quarantined_bytes),
            store.root().join("quarantine").display()
        );
    }
    if r.is_clean() {
        say!("cache is clean");
        Ok(EXIT_OK)
    } else {
        say!(
            "{} bad entries (removed or quarantined; what they held will be recomputed)",
            r.bad.len()
        );
        Ok(EXIT_STAGE_FAILED)
    }
}

fn gc(s: &Session, store: &Store, max_size: Option<&str>, keep_runs: usize) -> Result<i32, Error> {
    let max = match max_size {
        Some(m) => Some(
            heddle_containers::parse_size(m)
                .map_err(|e| Error::Usage(format!("--max-size {m}: {e}")))?,
        ),
        None => None,
    };
    let root = s.project_root();
    let mut keep: HashSet<Digest> = HashSet::new();
    let ids = record::list(&root);
    for id in ids.iter().rev().take(keep_runs) {
        if let Ok(r) = record::load(&root, id) {
            for (_, i) in &r.instances {
                if let Some(k) = i.cache_key.as_deref().and_then(|k| k.parse().ok()) {
                    keep.insert(k);
                }
            }
        }
    }
    keep.extend(super::pinned::lock_keys(&root));
    let r = store.gc(&keep, max)?;
    say!(
        "kept {} referenced actions; evicted {} actions, removed {} blobs, freed {}; {} remain",
        keep.len(),
        r.evicted.len(),
        r.blobs_removed,
        human(r.bytes_freed),
        human(r.bytes_remaining)
    );
    if r.quarantine_removed > 0 {
        say!(
            "quarantine: removed {} ({}) that did not match their digest",
            blobs(r.quarantine_removed),
            human(r.quarantine_bytes_freed)
        );
    }
    if r.stale_locks_removed > 0 {
        say!(
            "locks: removed {} nobody held (left by a killed run or an older heddle)",
            counted(r.stale_locks_removed, "lock file")
        );
    }
    if r.quarantine_spared > 0 {
        say!(
            "quarantine: kept {} quarantined within the last hour, while another heddle uses the cache; a later `heddle cache gc` removes them",
            blobs(r.quarantine_spared)
        );
    }
    Ok(EXIT_OK)
}

/// `1 blob`, `2 blobs`.
fn blobs(n: u64) -> String {
    counted(n, "blob")
}

/// `1 lock file`, `2 lock files`: `n` and a noun whose plural takes an `s`.
fn counted(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Bytes in binary units, one decimal: `512 B`, `1.5 KiB`, `20.0 GiB`.
pub(crate) fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// `heddle cache push [RUN | --lock FILE]`: the actions a run or a lock file names, blobs
/// first and each entry last, so a colleague's run finds them whole.
async fn push(
    s: &Session,
    store: Arc<Store>,
    run: Option<&str>,
    lock: Option<&Path>,
) -> Result<i32, Error> {
    let root = s.project_root();
    let remote = s
        .open_remote(&root, store.clone())?
        .ok_or(Error::NoRemote)?;
    if !remote.writable() {
        return Err(Error::Usage(format!(
            "remote cache {} is read-only (the default): `heddle cache push` writes to it only with --remote-cache-mode readwrite (or remote_mode = \"readwrite\" in [cache], or HEDDLE_REMOTE_CACHE_MODE=readwrite) and a signing key (`heddle cache keygen`)",
            remote.describe()
        )));
    }
    let keys: Vec<Digest> = match lock {
        Some(path) => LockFile::read(path)?
            .instances
            .iter()
            .filter_map(|i| i.cache_key.parse().ok())
            .collect(),
        None => record::load(&root, run.unwrap_or("last"))?
            .instances
            .iter()
            .filter_map(|(_, i)| i.cache_key.as_deref().and_then(|k| k.parse().ok()))
            .collect(),
    };
    let summary = crate::remote_cache::push_keys(remote.as_ref(), &store, &keys)
        .await
        .map_err(|source| Error::Push {
            remote: remote.describe(),
            source,
        })?;
    say!("pushed {} actions to {}", summary.pushed, remote.describe());
    if !summary.missing_locally.is_empty() {
        say!(
            "{} referenced actions are not in the local cache (not pushed)",
            summary.missing_locally.len()
        );
    }
    Ok(EXIT_OK)
}

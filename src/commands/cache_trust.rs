//! `heddle cache keygen` (this machine's signing key, for writing to a shared cache) and
//! `heddle cache verify --remote` (who signed the remote's entries this project uses, and
//! whether a trusted writer did). The trust model itself is heddle-remote's `signing.rs` and
//! `trust.rs`; docs/scale-out.md, "Trust", says it in prose.

use std::collections::{BTreeMap, BTreeSet};

use heddle_cache::{Digest, Store};
use heddle_remote::{
    signing_key_path, user_config_dir, RemoteError, SigningKey, SIGNING_KEY_VAR, TRUST_FILE,
};
use heddle_runner::record;

use crate::error::{Error, EXIT_OK, EXIT_STAGE_FAILED};
use crate::session::Session;

/// Make this machine's signing key (never over an existing one unless `force`) and print the
/// line a team's trust file needs.
pub fn keygen(name: Option<&str>, force: bool) -> Result<i32, Error> {
    let env = |k: &str| std::env::var(k).ok();
    let path = signing_key_path(&env, user_config_dir(&env).as_deref()).ok_or_else(|| {
        Error::Usage(format!(
            "no place for a signing key: set {SIGNING_KEY_VAR} (there is no HOME)"
        ))
    })?;
    let name = match name {
        Some(n) => n.trim().to_string(),
        None => format!(
            "{}@{}",
            env("USER").unwrap_or_else(|| "heddle".into()),
            heddle_runner::hostname::hostname()
        ),
    };
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(Error::Usage(
            "--name: a writer's name is one line of printable text".into(),
        ));
    }
    if path.exists() {
        if !force {
            let existing = SigningKey::load(&path).map(|k| k.public().to_string());
            return Err(Error::Usage(format!(
                "a signing key already exists at {}{}; pass --force to replace it (entries it signed stay trusted only while its line stays in the trust files)",
                path.display(),
                existing.map(|k| format!(" ({k})")).unwrap_or_default()
            )));
        }
        std::fs::remove_file(&path).map_err(|source| Error::Io {
            op: "cannot replace",
            path: path.clone(),
            source,
        })?;
    }
    let key = SigningKey::generate()?;
    key.write_new(&path)?;
    println!(
        "wrote the signing key {} (readable by you only; keep it secret)",
        path.display()
    );
    println!(
        "to trust what this machine writes to a shared cache, add this line to the team's .heddle/{TRUST_FILE}:"
    );
    println!("{} {name}", key.public());
    Ok(EXIT_OK)
}

/// Check the remote's entry for every action this project's lock files and run records name:
/// signed by a writer the trust files list, and (where this cache has the action too) giving
/// the same outputs as the local entry. Exit 1 when any is not.
pub async fn verify_remote(s: &Session, store: &Store) -> Result<i32, Error> {
    let root = s.project_root();
    let cache = s.open_remote_cache(&root)?.ok_or(Error::NoRemote)?;
    let mut keys: BTreeSet<Digest> = super::pinned::lock_keys(&root).into_iter().collect();
    for id in record::list(&root) {
        if let Ok(r) = record::load(&root, &id) {
            keys.extend(r.instances.iter().filter_map(|(_, i)| {
                i.cache_key
                    .as_deref()
                    .and_then(|k| k.parse::<Digest>().ok())
            }));
        }
    }
    let mut by_writer: BTreeMap<String, usize> = BTreeMap::new();
    let (mut absent, mut bad) = (0usize, Vec::new());
    for key in &keys {
        match cache.read_entry(*key, None).await {
            Ok(Some((entry, writer))) => {
                let local = store.lookup_outputs(key).ok().flatten();
                if local.is_some_and(|outputs| outputs != entry.outputs) {
                    bad.push(format!(
                        "{key}: the remote entry, signed by {writer}, gives other outputs than this cache's"
                    ));
                } else {
                    *by_writer.entry(writer.name).or_default() += 1;
                }
            }
            Ok(None) => absent += 1,
            Err(e) if e.is_unavailable() => {
                return Err(Error::RemoteUnavailable {
                    remote: cache.name().to_string(),
                    source: Box::new(e),
                })
            }
            Err(e) => bad.push(format!("{key}: {}", error_line(&e))),
        }
    }
    let trusted: usize = by_writer.values().sum();
    let writers: Vec<String> = by_writer.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    println!(
        "checked {} entries on remote cache {} that this project's lock files and run records name: {trusted} signed by trusted writers{}, {absent} not on the remote, {} bad",
        keys.len(),
        cache.name(),
        if writers.is_empty() {
            String::new()
        } else {
            format!(" ({})", writers.join(", "))
        },
        bad.len()
    );
    for b in &bad {
        println!("BAD {b}");
    }
    Ok(if bad.is_empty() {
        EXIT_OK
    } else {
        EXIT_STAGE_FAILED
    })
}

/// A remote error on one line, causes joined.
fn error_line(e: &RemoteError) -> String {
    heddle_cache::error_chain(e).replace('\n', "; ")
}

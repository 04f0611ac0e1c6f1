//! Knowing, without printing it, that a run's lock would come out as the file already there.
//!
//! A lock is a pure function of what its run record says about each instance (label, stage,
//! key, status, error, cause, env, image, outputs, expanded key), the pipeline's name and params,
//! and the heddle that prints it. After writing a lock, heddle keeps a stamp beside its run
//! records: the sha256 of those inputs (the *fingerprint*) and the sha256 of the lock's bytes.
//! The next run whose fingerprint is the same, and whose lock file still hashes to the stamped
//! bytes (so a hand edit is never kept), leaves the lock alone without printing it.
//!
//! Hashing a record's fields as JSON costs a fraction of printing them as TOML: for a no-op run
//! of a 100,000-value matrix, the lock went from about a quarter of the wall time to the cost of
//! one sha256 pass over the record's fields and one over the 80 MB file.

use std::io::Write;
use std::path::{Path, PathBuf};

use heddle_cache::{hash_file, Digest};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::LOCK_VERSION;
use crate::record::{Cause, InstanceRecord, RunRecord, Status};

/// What a lock is printed from, and the lock it gave last time.
pub(super) struct Stamp {
    fingerprint: Digest,
    /// `<stamps>/<hash of the lock's path>`: one stamp per lock file.
    file: PathBuf,
}

impl Stamp {
    /// The stamp of run `rec`'s lock at `lock`, kept under `stamps`. `None` when heddle cannot
    /// tell which executable it is (then every lock is printed).
    pub(super) fn of(rec: &RunRecord, lock: &Path, stamps: &Path) -> Option<Stamp> {
        let exe = executable_identity()?;
        let mut hasher = HashWriter(<sha2::Sha256 as sha2::Digest>::new());
        let head = Head {
            lock_version: LOCK_VERSION,
            heddle: env!("CARGO_PKG_VERSION"),
            exe: &exe,
            pipeline: &rec.pipeline,
            params: &rec.params,
        };
        serde_json::to_writer(&mut hasher, &head).ok()?;
        for (label, r) in &rec.instances {
            serde_json::to_writer(&mut hasher, &Fields::of(label, r)).ok()?;
        }
        let fingerprint = Digest::from_bytes(sha2::Digest::finalize(hasher.0).into());
        let lock = std::path::absolute(lock).ok()?;
        let name = Digest::of_bytes(lock.as_os_str().as_encoded_bytes()).to_string();
        Some(Stamp {
            fingerprint,
            file: stamps.join(&name[..32]),
        })
    }

    /// The sha256 of the lock at `lock` when this stamp says it is already what would be
    /// printed: same fingerprint, and the file still holds the bytes stamped.
    pub(super) fn unchanged(&self, lock: &Path) -> Option<Digest> {
        let text = std::fs::read_to_string(&self.file).ok()?;
        let (fingerprint, bytes) = text.trim_end().split_once(' ')?;
        if fingerprint.parse::<Digest>().ok()? != self.fingerprint {
            return None;
        }
        let bytes: Digest = bytes.parse().ok()?;
        (hash_file(lock).ok()? == bytes).then_some(bytes)
    }

    /// Remember that this fingerprint printed a lock whose bytes hash to `bytes`. Best effort:
    /// without a stamp the next run prints the lock again, which is always correct.
    pub(super) fn save(&self, bytes: &Digest) {
        let Some(dir) = self.file.parent() else {
            return;
        };
        let tmp = self.file.with_extension("tmp");
        let saved = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, format!("{} {bytes}\n", self.fingerprint)))
            .and_then(|()| std::fs::rename(&tmp, &self.file));
        if saved.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The running executable's size and modification time: a rebuilt heddle may print locks
/// differently even under the same version number.
fn executable_identity() -> Option<String> {
    let meta = std::fs::metadata(std::env::current_exe().ok()?).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!("{}:{}", meta.len(), mtime.as_nanos()))
}

#[derive(Serialize)]
struct Head<'a> {
    lock_version: u32,
    heddle: &'a str,
    exe: &'a str,
    pipeline: &'a str,
    params: &'a std::collections::BTreeMap<String, Value>,
}

/// Every field of an instance's record that its lock table is printed from (some, such as
/// both the error and the cause's error, more than the table shows: a fingerprint may change
/// when the lock would not, never the other way round).
#[derive(Serialize)]
struct Fields<'a> {
    label: &'a str,
    stage: &'a str,
    cache_key: Option<&'a str>,
    status: Status,
    error: Option<&'a str>,
    cause: Option<&'a Cause>,
    env: Option<&'a str>,
    image: Option<&'a Value>,
    outputs: &'a heddle_schema::VecMap<heddle_cache::OutputEntry>,
    facts: Option<&'a Value>,
    key: Option<&'a RawValue>,
}

impl<'a> Fields<'a> {
    fn of(label: &'a str, r: &'a InstanceRecord) -> Fields<'a> {
        Fields {
            label,
            stage: &r.stage,
            cache_key: r.cache_key.as_deref(),
            status: r.status.status,
            error: r.status.error.as_deref(),
            cause: r.status.cause.as_ref(),
            env: r.env_identity.as_deref(),
            image: r.image.as_ref(),
            outputs: &r.outputs,
            facts: r.facts.as_ref(),
            key: r.key_parts.as_deref(),
        }
    }
}

/// sha256 as an `io::Write`, so serde_json writes straight into the hash.
struct HashWriter(sha2::Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

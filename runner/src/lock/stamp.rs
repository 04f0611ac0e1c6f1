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
//!
//! The pass over the file is skipped too when the stamp also holds the file's stat (device,
//! inode, size, modification and change times) and the file still has it: any write to the
//! file, by hand or by a tool, moves its change time, which no one can set back. A stat taken
//! within [`RACY_NS`] of the file's last change is not trusted (a write in the same clock tick
//! would keep it, as git's "racy" index entries): the file is hashed, and the stamp saved
//! again with a stat that can be trusted from then on. Hashing the 8 MB lock of a
//! 10,000-instance no-op was 15 % of its instructions (benches/RESULTS.md, M16).

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
    /// printed: same fingerprint, and the file still holds the bytes stamped (its stat as
    /// stamped, or else its hash).
    pub(super) fn unchanged(&self, lock: &Path) -> Option<Digest> {
        let text = std::fs::read_to_string(&self.file).ok()?;
        let mut fields = text.split_ascii_whitespace();
        if fields.next()?.parse::<Digest>().ok()? != self.fingerprint {
            return None;
        }
        let bytes: Digest = fields.next()?.parse().ok()?;
        // Stamps written before the stat was kept have two fields: hashed, then stamped anew.
        let stamped = fields.next().and_then(FileStat::parse);
        let now = FileStat::of(lock)?;
        if stamped.is_some_and(|s| s == now && s.trusted()) {
            return Some(bytes);
        }
        if hash_file(lock).ok()? != bytes {
            return None;
        }
        // Stamped anew once the stat can be trusted, so the next run need not hash.
        if stamped != Some(now) || now.trusted() {
            self.save_with(&bytes, Some(now));
        }
        Some(bytes)
    }

    /// Remember that this fingerprint printed a lock whose bytes hash to `bytes`, the file at
    /// `lock`. Best effort: without a stamp the next run prints the lock again, which is
    /// always correct.
    pub(super) fn save(&self, bytes: &Digest, lock: &Path) {
        self.save_with(bytes, FileStat::of(lock));
    }

    fn save_with(&self, bytes: &Digest, stat: Option<FileStat>) {
        let Some(dir) = self.file.parent() else {
            return;
        };
        let tmp = self.file.with_extension("tmp");
        let line = match stat {
            Some(st) => format!("{} {bytes} {}\n", self.fingerprint, st.text()),
            None => format!("{} {bytes}\n", self.fingerprint),
        };
        let saved = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, line))
            .and_then(|()| std::fs::rename(&tmp, &self.file));
        if saved.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// A stat taken this close to the file's last change may miss a write in the same clock tick
/// (file times come from a coarse clock); 2 s also covers filesystems with coarse times.
const RACY_NS: i128 = 2_000_000_000;

/// What a lock file's stat says of its content, and when the stat was taken.
#[derive(Debug, Clone, Copy)]
struct FileStat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    seen_ns: i128,
}

/// Equal when the file is the same and unchanged; when each stat was taken does not matter.
impl PartialEq for FileStat {
    fn eq(&self, o: &FileStat) -> bool {
        (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
            == (o.dev, o.ino, o.size, o.mtime_ns, o.ctime_ns)
    }
}

impl FileStat {
    fn of(path: &Path) -> Option<FileStat> {
        let meta = std::fs::metadata(path).ok()?;
        let ns = |t: std::io::Result<std::time::SystemTime>| -> Option<i128> {
            Some(
                t.ok()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?
                    .as_nanos() as i128,
            )
        };
        let seen_ns = ns(Ok(std::time::SystemTime::now()))?;
        #[cfg(unix)]
        let (dev, ino, ctime_ns) = {
            use std::os::unix::fs::MetadataExt;
            let ctime = meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128;
            (meta.dev(), meta.ino(), ctime)
        };
        // No inode or change time in std's stable API: the creation time stands in.
        #[cfg(not(unix))]
        let (dev, ino, ctime_ns) = (0, 0, ns(meta.created())?);
        Some(FileStat {
            dev,
            ino,
            size: meta.len(),
            mtime_ns: ns(meta.modified())?,
            ctime_ns,
            seen_ns,
        })
    }

    /// Taken long enough after the file's last change that a later write must show. Only on
    /// unix: elsewhere nothing like a change time exists (a tool can set the modification time
    /// back), so the file is always hashed there.
    fn trusted(&self) -> bool {
        cfg!(unix) && self.seen_ns - self.mtime_ns.max(self.ctime_ns) > RACY_NS
    }

    fn text(&self) -> String {
        let FileStat {
            dev,
            ino,
            size,
            mtime_ns,
            ctime_ns,
            seen_ns,
        } = self;
        format!("{dev}:{ino}:{size}:{mtime_ns}:{ctime_ns}:{seen_ns}")
    }

    fn parse(text: &str) -> Option<FileStat> {
        let mut f = text.split(':');
        let st = FileStat {
            dev: f.next()?.parse().ok()?,
            ino: f.next()?.parse().ok()?,
            size: f.next()?.parse().ok()?,
            mtime_ns: f.next()?.parse().ok()?,
            ctime_ns: f.next()?.parse().ok()?,
            seen_ns: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(st)
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
    /// The expanded key, unless the cache key stands for it: the key text is most of a
    /// record's fields and its sha256 is the cache key (`sched/instance.rs` makes the two
    /// together), so hashing it again would change no fingerprint.
    key: Option<&'a RawValue>,
    has_key: bool,
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
            key: r.key_parts.as_deref().filter(|_| r.cache_key.is_none()),
            has_key: r.key_parts.is_some(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_at(dir: &Path) -> Stamp {
        Stamp {
            fingerprint: Digest::of_bytes(b"fields"),
            file: dir.join("stamps").join("s"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_trusted_stat_skips_the_hash_and_any_write_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("p.lock");
        std::fs::write(&lock, "a = 1\n").unwrap();
        // Written an hour ago, as far as its mtime says: a rewrite below must show in the stat
        // even within one tick of the file clock.
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let f = std::fs::File::options().write(true).open(&lock).unwrap();
        f.set_modified(hour_ago).unwrap();
        drop(f);
        let stamp = stamp_at(dir.path());
        let real = hash_file(&lock).unwrap();

        // Just written: the stat is racy, so the file is hashed.
        stamp.save(&real, &lock);
        assert_eq!(stamp.unchanged(&lock), Some(real));

        // A stat stamped long after the last change is trusted: the bytes are not hashed
        // (a stamp naming other bytes is believed, which shows the hash was skipped).
        let mut st = FileStat::of(&lock).unwrap();
        st.seen_ns = st.mtime_ns.max(st.ctime_ns) + 3 * RACY_NS;
        let other = Digest::of_bytes(b"other");
        stamp.save_with(&other, Some(st));
        assert_eq!(stamp.unchanged(&lock), Some(other));

        // Any write moves the stat: hashed again, and a hand edit is not kept.
        std::fs::write(&lock, "a = 2\n").unwrap();
        stamp.save_with(&real, Some(st));
        assert_eq!(stamp.unchanged(&lock), None);

        // A stamp of the old two-field form is still read (and the file hashed).
        let now = hash_file(&lock).unwrap();
        std::fs::write(&stamp.file, format!("{} {now}\n", stamp.fingerprint)).unwrap();
        assert_eq!(stamp.unchanged(&lock), Some(now));
        assert!(std::fs::read_to_string(&stamp.file)
            .unwrap()
            .split_ascii_whitespace()
            .nth(2)
            .is_some_and(|s| FileStat::parse(s).is_some()));
    }
}

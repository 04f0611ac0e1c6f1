//! Run records that grow with what changed (record format 2).
//!
//! A no-op run of a 100,000-value matrix wrote a 110 MB record in which every instance said
//! again what the run before had said, plus `cached: true`. A record may now name a *base*: an
//! earlier record of the same pipeline written whole (format 1, the plain [`RunRecord`] JSON),
//! and list runs of the base's instances that this run served from the cache, with only their
//! start and end times. Everything else (a miss, a failure, a hit that differs from the base)
//! is written whole, in plan order with the rest.
//!
//! Exactness does not rest on reasoning about which fields a hit has. Beside every whole
//! record heddle writes an index (`<run>.idx`): per instance, the sha256 of its label and of
//! the JSON of its *hit form* ([`hit_form`]: the record a cache hit of it would have, times
//! zeroed). A later instance is written as a reference only when it already is in hit form and
//! its own digest equals a base instance's: [`load`] then rebuilds the hit form of that base
//! instance with the stored times, which is the instance's record byte for byte. (The key
//! text enters the digest through the cache key, its sha256: see [`zeroed_digest`].)
//!
//! Chains are one deep: a base is always a whole record, so loading a record reads at most two
//! files. [`super::prune`] keeps a base while a kept record refers to it.

use std::collections::HashMap;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use heddle_cache::Digest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::{InstanceRecord, RecordError, RunRecord, RunStatus, StatusRecord};

/// The record format a record with a base is written in. Format 1 (no `record_format` field)
/// is the whole [`RunRecord`]; 2 adds `base` and runs of references to it.
pub const RECORD_FORMAT: u32 = 2;

/// How a record with a base starts: the first field, so a reader tells the formats apart from
/// the first bytes (and can find the base without parsing the rest, as prune does).
const DELTA_PREFIX: &str = "{\"record_format\":";

/// First line of an index file; bump the number when its layout changes.
/// 2: a digest stands the cache key for the key text ([`zeroed_digest`]).
const INDEX_MAGIC: &[u8] = b"heddle-record-index 2\n";

/// A record with a base is written only when at least this share of its instances are
/// references; otherwise it is written whole and becomes the base of the runs after it.
const MIN_SHARED_PERCENT: usize = 50;

/// The record a cache hit of instance `r` has, with start and end times `start_ms`, `end_ms`:
/// what `serve_hit` in `sched/instance.rs` leaves after the key (cached, reason `cached`, no `why`, no
/// attempt, no command, log, facts, host or job, an ok status without error).
fn hit_form(r: &InstanceRecord, start_ms: u64, end_ms: u64) -> InstanceRecord {
    let mut h = r.clone();
    h.status = StatusRecord::ok(&r.status.label, r.status.matrix.clone());
    h.cached = true;
    h.remote = false;
    h.remote_signer = None;
    h.reason = "cached".into();
    h.why = None;
    h.duration_ms = 0;
    h.start_ms = start_ms;
    h.end_ms = end_ms;
    h.attempts = 0;
    h.command = None;
    h.logs = None;
    h.facts = None;
    h.host = None;
    h.job = None;
    h
}

/// Whether `r` equals its own [`hit_form`] (every field that sets, already so).
fn is_hit_form(r: &InstanceRecord) -> bool {
    // `StatusRecord::ok` with this label and matrix, compared without building one.
    r.status.is_plain_ok()
        && r.cached
        && !r.remote
        && r.remote_signer.is_none()
        && r.reason == "cached"
        && r.why.is_none()
        && r.duration_ms == 0
        && r.attempts == 0
        && r.command.is_none()
        && r.logs.is_none()
        && r.facts.is_none()
        && r.host.is_none()
        && r.job.is_none()
}

/// The sha256 of `label` and the JSON of `r`'s hit form with zero times.
fn hit_digest(label: &str, r: &InstanceRecord) -> Digest {
    zeroed_digest(label, &mut hit_form(r, 0, 0))
}

/// The sha256 of `label` and the JSON of `h`, a hit form with zero times (`h` is borrowed
/// mutably only to leave its key text out while it is hashed, and is as it was after).
///
/// The key text is most of an instance's JSON, and its sha256 is already the cache key
/// (`sched/instance.rs` makes the two together, from one serialisation): with a cache key
/// beside it, the text is hashed as a mark that it is there, the cache key standing for it.
/// Two records with one digest then have one cache key, so one key text.
fn zeroed_digest(label: &str, h: &mut InstanceRecord) -> Digest {
    let mut w = HashWriter(<sha2::Sha256 as sha2::Digest>::new());
    serde_json::to_writer(&mut w, label).expect("a string serialises");
    w.0.update_bytes(b"\n");
    let text = match h.cache_key {
        Some(_) => h.key_parts.take(),
        None => None,
    };
    if text.is_some() {
        // Not a JSON record's first byte, so no record hashed whole reads the same.
        w.0.update_bytes(b"key text of the cache key\n");
    }
    serde_json::to_writer(&mut w, &*h).expect("a record serialises");
    if text.is_some() {
        h.key_parts = text;
    }
    Digest::from_bytes(sha2::Digest::finalize(w.0).into())
}

trait UpdateBytes {
    fn update_bytes(&mut self, b: &[u8]);
}
impl UpdateBytes for sha2::Sha256 {
    fn update_bytes(&mut self, b: &[u8]) {
        sha2::Digest::update(self, b);
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

/// The head of an index file (one JSON line after the magic line), then `instances` digests of
/// 32 bytes each, in the record's order.
#[derive(Serialize, Deserialize)]
struct IndexHead {
    run_id: String,
    pipeline: String,
    pipeline_file: String,
    /// The length of the record file it indexes: a record rewritten since is no base.
    record_bytes: u64,
    instances: usize,
}

/// One item of a format 2 record's `instances`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum Item {
    /// An instance written whole, as in format 1.
    Full(String, Box<InstanceRecord>),
    /// Base instances `from..from + n` as this run's cache hits; `ms` holds each one's start
    /// and its end minus its start.
    Hits { from: usize, n: usize, ms: Vec<u64> },
}

/// [`Item`], borrowed from the run being written.
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum ItemRef<'a> {
    Full(&'a str, &'a InstanceRecord),
    Hits { from: usize, n: usize, ms: Vec<u64> },
}

/// A format 2 record: [`RunRecord`]'s fields, `record_format` and `base` first.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaRecord<I> {
    record_format: u32,
    base: String,
    /// The base record file's length when this record was written.
    base_bytes: u64,
    run_id: String,
    pipeline: String,
    pipeline_file: String,
    status: RunStatus,
    started_unix_ms: u64,
    duration_ms: u64,
    heddle_version: String,
    host: String,
    params: BTreeMap<String, Value>,
    jobs: usize,
    instances: Vec<I>,
}

fn index_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.idx"))
}

fn record_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Write run `rec` under `dir`: with a base when one shares most of its instances, else whole
/// with an index. Returns the record's path.
pub(super) fn save(dir: &Path, rec: &mut RunRecord) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    // Hit-form instances are the only ones a base can stand in for.
    let digests = hit_digests(&mut rec.instances);
    let rec = &*rec;
    if let Some(base) = find_base(dir, rec) {
        if let Some(items) = references(rec, &digests, &base.digests) {
            let delta = DeltaRecord {
                record_format: RECORD_FORMAT,
                base: base.head.run_id.clone(),
                base_bytes: base.head.record_bytes,
                run_id: rec.run_id.clone(),
                pipeline: rec.pipeline.clone(),
                pipeline_file: rec.pipeline_file.clone(),
                status: rec.status,
                started_unix_ms: rec.started_unix_ms,
                duration_ms: rec.duration_ms,
                heddle_version: rec.heddle_version.clone(),
                host: rec.host.clone(),
                params: rec.params.clone(),
                jobs: rec.jobs,
                instances: items,
            };
            return write_json(dir, &rec.run_id, &delta);
        }
    }
    let path = write_json(dir, &rec.run_id, rec)?;
    let record_bytes = std::fs::metadata(&path)?.len();
    // Best effort: without an index this record is no base, and the next run is written whole.
    let _ = write_index(dir, rec, &digests, record_bytes);
    Ok(path)
}

/// The [`hit_digest`] of every instance in hit form, on every core (a sha256 pass over the
/// JSON of each instance: at 100,000 instances, on one thread, it took back what not writing
/// 110 MB of record saved).
fn hit_digests(instances: &mut [(String, InstanceRecord)]) -> Vec<Option<Digest>> {
    let one = |(label, r): &mut (String, InstanceRecord)| {
        if !is_hit_form(r) {
            return None;
        }
        // A record in hit form is its hit form with zero times once its times are zero.
        let times = (r.start_ms, r.end_ms);
        (r.start_ms, r.end_ms) = (0, 0);
        let d = zeroed_digest(label, r);
        (r.start_ms, r.end_ms) = times;
        Some(d)
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    if workers < 2 || instances.len() < 1024 {
        return instances.iter_mut().map(one).collect();
    }
    let chunk = instances.len().div_ceil(workers);
    std::thread::scope(|s| {
        let parts: Vec<_> = instances
            .chunks_mut(chunk)
            .map(|part| s.spawn(move || part.iter_mut().map(one).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("digest worker"))
            .collect()
    })
}

/// The items of `rec` against a base with `base` digests, or `None` when too few instances
/// are shared to be worth a base.
fn references<'a>(
    rec: &'a RunRecord,
    digests: &[Option<Digest>],
    base: &[Digest],
) -> Option<Vec<ItemRef<'a>>> {
    let mut at: HashMap<&Digest, usize> = HashMap::with_capacity(base.len());
    for (j, d) in base.iter().enumerate().rev() {
        at.insert(d, j);
    }
    let mut items = Vec::new();
    let mut shared = 0usize;
    for ((label, r), d) in rec.instances.iter().zip(digests) {
        let Some(j) = d.as_ref().and_then(|d| at.get(d)).copied() else {
            items.push(ItemRef::Full(label, r));
            continue;
        };
        shared += 1;
        let (start, took) = (r.start_ms, r.end_ms.saturating_sub(r.start_ms));
        // A hit whose end is before its start cannot be rebuilt from a start and a length.
        if r.end_ms < r.start_ms {
            shared -= 1;
            items.push(ItemRef::Full(label, r));
            continue;
        }
        if let Some(ItemRef::Hits { from, n, ms }) = items.last_mut() {
            if *from + *n == j {
                *n += 1;
                ms.extend([start, took]);
                continue;
            }
        }
        items.push(ItemRef::Hits {
            from: j,
            n: 1,
            ms: vec![start, took],
        });
    }
    (shared > 0 && shared * 100 >= rec.instances.len() * MIN_SHARED_PERCENT).then_some(items)
}

/// Write `value` as `<dir>/<id>.json` through a temp file.
fn write_json(dir: &Path, id: &str, value: &impl Serialize) -> std::io::Result<PathBuf> {
    let path = record_path(dir, id);
    let tmp = dir.join(format!(".{id}.json.tmp"));
    // Streamed: a 1,000-instance record is over a megabyte, and growing one buffer to hold it
    // was a visible share of a no-op run.
    let mut w = BufWriter::with_capacity(256 * 1024, std::fs::File::create(&tmp)?);
    serde_json::to_writer(&mut w, value).map_err(std::io::Error::other)?;
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

fn write_index(
    dir: &Path,
    rec: &RunRecord,
    digests: &[Option<Digest>],
    record_bytes: u64,
) -> std::io::Result<()> {
    let head = IndexHead {
        run_id: rec.run_id.clone(),
        pipeline: rec.pipeline.clone(),
        pipeline_file: rec.pipeline_file.clone(),
        record_bytes,
        instances: rec.instances.len(),
    };
    let tmp = dir.join(format!(".{}.idx.tmp", rec.run_id));
    let mut w = BufWriter::with_capacity(256 * 1024, std::fs::File::create(&tmp)?);
    w.write_all(INDEX_MAGIC)?;
    serde_json::to_writer(&mut w, &head).map_err(std::io::Error::other)?;
    w.write_all(b"\n")?;
    for ((label, r), d) in rec.instances.iter().zip(digests) {
        let d = match d {
            Some(d) => *d,
            None => hit_digest(label, r),
        };
        w.write_all(d.as_bytes())?;
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, index_path(dir, &rec.run_id))
}

struct Base {
    head: IndexHead,
    digests: Vec<Digest>,
}

/// The newest whole record of `rec`'s pipeline that has an intact index.
fn find_base(dir: &Path, rec: &RunRecord) -> Option<Base> {
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".idx")
                .filter(|s| !s.starts_with('.') && *s != rec.run_id)
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    let want = (rec.pipeline.as_str(), rec.pipeline_file.as_str());
    ids.iter().rev().find_map(|id| read_index(dir, id, want))
}

/// The index of record `id`, if it is intact and `want` (pipeline, pipeline file) says it is
/// one of that pipeline's (only the head is read otherwise).
fn read_index(dir: &Path, id: &str, want: (&str, &str)) -> Option<Base> {
    let file = std::fs::File::open(index_path(dir, id)).ok()?;
    let mut r = std::io::BufReader::new(file);
    let mut magic = [0u8; INDEX_MAGIC.len()];
    r.read_exact(&mut magic).ok()?;
    if magic != INDEX_MAGIC {
        return None;
    }
    let mut line = Vec::new();
    std::io::BufRead::read_until(&mut r, b'\n', &mut line).ok()?;
    let head: IndexHead = serde_json::from_slice(&line).ok()?;
    if head.run_id != id || (head.pipeline.as_str(), head.pipeline_file.as_str()) != want {
        return None;
    }
    let on_disk = std::fs::metadata(record_path(dir, id)).ok()?.len();
    if on_disk != head.record_bytes {
        return None;
    }
    let mut body = Vec::with_capacity(head.instances.saturating_mul(32).min(1 << 30));
    r.read_to_end(&mut body).ok()?;
    if body.len() != head.instances.checked_mul(32)? {
        return None;
    }
    let digests = body
        .chunks_exact(32)
        .map(|c| Digest::from_bytes(c.try_into().expect("32 bytes")))
        .collect();
    Some(Base { head, digests })
}

/// Whether record text `text` is format 2 (has a base).
pub(super) fn has_base(text: &[u8]) -> bool {
    text.starts_with(DELTA_PREFIX.as_bytes())
}

/// The base a record file names, from its first bytes (`None` for a whole record).
pub(super) fn base_of(path: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let mut f = std::fs::File::open(path).ok()?;
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => return None,
        }
    }
    let head = &head[..got];
    if !has_base(head) {
        return None;
    }
    let text = String::from_utf8_lossy(head);
    let rest = text.split_once("\"base\":\"")?.1;
    Some(rest.split_once('"')?.0.to_string())
}

/// Rebuild the whole record from format 2 text `text` at `path`, reading its base from `dir`.
pub(super) fn load(dir: &Path, path: &Path, text: &str) -> Result<RunRecord, RecordError> {
    let parse = |source| RecordError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let delta: DeltaRecord<Item> = serde_json::from_str(text).map_err(parse)?;
    if delta.record_format != RECORD_FORMAT {
        return Err(RecordError::Format {
            path: path.to_path_buf(),
            format: delta.record_format,
        });
    }
    let base_path = record_path(dir, &delta.base);
    let base_text = std::fs::read_to_string(&base_path).map_err(|source| RecordError::Base {
        path: path.to_path_buf(),
        base: delta.base.clone(),
        source: Box::new(RecordError::Read {
            path: base_path.clone(),
            source,
        }),
    })?;
    let base_err = |source: RecordError| RecordError::Base {
        path: path.to_path_buf(),
        base: delta.base.clone(),
        source: Box::new(source),
    };
    if base_text.len() as u64 != delta.base_bytes || has_base(base_text.as_bytes()) {
        return Err(base_err(RecordError::BaseChanged {
            path: base_path.clone(),
        }));
    }
    let base: RunRecord = serde_json::from_str(&base_text).map_err(|source| {
        base_err(RecordError::Parse {
            path: base_path.clone(),
            source,
        })
    })?;
    drop(base_text);
    let mut instances = Vec::new();
    for item in delta.instances {
        match item {
            Item::Full(label, r) => instances.push((label, *r)),
            Item::Hits { from, n, ms } => {
                let Some(run) = base.instances.get(from..from.saturating_add(n)) else {
                    return Err(base_err(RecordError::BaseChanged { path: base_path }));
                };
                if ms.len() != 2 * n {
                    return Err(RecordError::Format {
                        path: path.to_path_buf(),
                        format: delta.record_format,
                    });
                }
                for ((label, r), t) in run.iter().zip(ms.chunks_exact(2)) {
                    instances.push((label.clone(), hit_form(r, t[0], t[0] + t[1])));
                }
            }
        }
    }
    Ok(RunRecord {
        run_id: delta.run_id,
        pipeline: delta.pipeline,
        pipeline_file: delta.pipeline_file,
        status: delta.status,
        started_unix_ms: delta.started_unix_ms,
        duration_ms: delta.duration_ms,
        heddle_version: delta.heddle_version,
        host: delta.host,
        params: delta.params,
        jobs: delta.jobs,
        instances,
    })
}

/// Remove the index of record `id`, if it has one.
pub(super) fn remove_index(dir: &Path, id: &str) {
    let _ = std::fs::remove_file(index_path(dir, id));
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;

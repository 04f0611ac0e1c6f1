//! Read-through: [`fetch_blob`] (remote → a file, hashed as it streams) and [`fetch_action`],
//! which brings an action's entry and every blob it names into the local store, each blob
//! hashed once while it streams into the store ([`heddle_cache::BlobImport`]) and each tree
//! manifest validated before anything it lists is fetched. Every body is read through
//! [`BoundedBody`]: no more bytes than the object may have, no slower than the floor.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use heddle_cache::{
    decode_tree, ActionEntry, Digest, ImportOutcome, OutputEntry, Store, TreeEntry,
};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use crate::backend::{bounded, BlobStream, RemoteBackend};
use crate::bounded::BoundedBody;
use crate::signing::EntrySignature;
use crate::trust::{TrustedWriters, Writer};
use crate::RemoteError;

/// Bytes gathered before one write to the local store: large enough that handing a batch to a
/// blocking thread costs nothing measurable, small enough to keep memory flat.
const WRITE_BATCH: usize = 1024 * 1024;
/// Batches downloaded ahead of the hash-and-write thread.
const BATCHES_IN_FLIGHT: usize = 4;
/// A tree manifest is read into memory to be validated; one of 1 million entries is ~150 MB,
/// so anything larger is not a manifest heddle wrote.
const MAX_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// Download blob `digest` into `dest` (created or truncated), hashing every byte on the way.
/// `Ok(Some(size))` only when the bytes hash to `digest`; on a mismatch `dest` is removed and
/// [`RemoteError::CorruptBlob`] returned. `Ok(None)`: the remote does not have it. Memory use
/// is a few chunks, whatever the blob's size.
/// `size` is the blob's, when known (a REAPI remote needs it); no more bytes than that are
/// read, and none slower than the floor throughput (`bounded.rs`).
pub async fn fetch_blob(
    remote: &dyn RemoteBackend,
    digest: Digest,
    size: Option<u64>,
    dest: &Path,
) -> Result<Option<u64>, RemoteError> {
    let Some(body) = open_blob(remote, digest, size).await? else {
        return Ok(None);
    };
    let mut body = BoundedBody::new(
        body,
        format!("blob {digest}"),
        remote.name(),
        remote.timeouts(),
        size.unwrap_or(u64::MAX),
    );
    let result = async {
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(RemoteError::local_io("create", dest))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = body.next().await? {
            hasher.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk)
                .await
                .map_err(RemoteError::local_io("write", dest))?;
        }
        file.flush()
            .await
            .map_err(RemoteError::local_io("write", dest))?;
        let actual = Digest::from_bytes(hasher.finalize().into());
        if actual != digest {
            return Err(corrupt(remote, digest, actual, size));
        }
        Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(dest).await;
    }
    result.map(Some)
}

async fn open_blob(
    remote: &dyn RemoteBackend,
    digest: Digest,
    size: Option<u64>,
) -> Result<Option<BlobStream>, RemoteError> {
    bounded(
        remote,
        "open",
        || format!("blob {digest}"),
        remote.read_blob(digest, size),
    )
    .await
}

fn corrupt(remote: &dyn RemoteBackend, digest: Digest, actual: Digest, size: u64) -> RemoteError {
    RemoteError::CorruptBlob {
        digest,
        actual,
        size,
        remote: remote.name().to_string(),
    }
}

/// What [`fetch_action`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FetchReport {
    pub blobs_fetched: u64,
    pub bytes_fetched: u64,
    /// Blobs the local store already had.
    pub blobs_present: u64,
    /// Who signed the entry (always a trusted writer).
    pub signer: Option<Writer>,
}

/// What a reader accepts from a remote beyond hashes: whose entries, and how much one entry
/// may expand to. The same for every action read from one remote.
#[derive(Clone, Debug)]
pub struct ReadRules {
    /// The writers whose signed entries are accepted; empty (the default) accepts none.
    pub writers: TrustedWriters,
    /// The most bytes an entry's outputs may add up to, counting a blob once per place it is
    /// listed (what materialising them would write without links): [`MAX_ENTRY_EXPANSION`]
    /// unless the caller says otherwise.
    pub max_bytes: u64,
}

/// The default of [`ReadRules::max_bytes`]: 64 GiB, far above any model chain's outputs, far
/// below what a hostile entry could name (a manifest of a million 1 GiB files).
pub const MAX_ENTRY_EXPANSION: u64 = 64 * 1024 * 1024 * 1024;

impl Default for ReadRules {
    fn default() -> ReadRules {
        ReadRules {
            writers: TrustedWriters::default(),
            max_bytes: MAX_ENTRY_EXPANSION,
        }
    }
}

/// Read-through for one action: read its entry from the remote, check it against what the
/// reader expects (`declared`: the output names the action declares, when the caller knows
/// them), fetch every tree manifest it names (validated like any untrusted manifest), check
/// the totals, then fetch every blob the local store lacks, each once, verified by sha256 as it
/// streams in and cut off at the size the entry gives it; record the entry in `local` last.
/// `Ok(None)`: the remote has no entry for `key`. On any error nothing is recorded (blobs
/// already fetched stay, as verified content-addressed blobs that `gc` may collect).
///
/// Nothing a remote declares is taken on faith: an entry naming outputs the action does not
/// declare, more bytes than [`ReadRules::max_bytes`], or a size for a blob that the local
/// store's copy does not have, is refused before any blob is downloaded, and a body longer
/// than declared is cut off as it arrives (`bounded.rs`).
pub async fn fetch_action(
    remote: &dyn RemoteBackend,
    local: Arc<Store>,
    key: Digest,
    rules: &ReadRules,
    declared: Option<&BTreeSet<String>>,
) -> Result<Option<(ActionEntry, FetchReport)>, RemoteError> {
    let Some((entry, signer)) = read_entry(remote, key, rules, declared).await? else {
        return Ok(None);
    };
    let mut fetch = Fetch {
        remote,
        local: &local,
        key,
        report: FetchReport::default(),
    };
    // Every file the outputs list, manifests first: the totals are checked before any file.
    let mut listed: Vec<(Digest, u64)> = Vec::new();
    for (name, output) in &entry.outputs {
        match output {
            OutputEntry::File { digest, size, .. } => listed.push((*digest, *size)),
            OutputEntry::Dir {
                digest,
                size,
                files,
            } => {
                let from = listed.len();
                for e in fetch.manifest(*digest).await? {
                    if let TreeEntry::File { digest, size, .. } = e {
                        listed.push((digest, size));
                    }
                }
                let (n, total) = (
                    (listed.len() - from) as u64,
                    // Saturating: a hostile manifest's sizes may add up past 2^64.
                    listed[from..]
                        .iter()
                        .fold(0u64, |sum, (_, s)| sum.saturating_add(*s)),
                );
                if (n, total) != (*files, *size) {
                    return Err(fetch.bad(format!(
                        "it gives output {name:?} {files} files of {size} bytes; its manifest lists {n} of {total}"
                    )));
                }
            }
        }
    }
    let unique = fetch.check_totals(&listed, rules)?;
    for (digest, size) in unique {
        fetch.file(digest, size).await?;
    }
    let report = FetchReport {
        signer: Some(signer),
        ..fetch.report
    };
    let store = local.clone();
    let recorded = entry.clone();
    // Its blobs were journaled as they came in: recording it costs no fsync of its own.
    tokio::task::spawn_blocking(move || store.record_fetched_action(&recorded)).await??;
    Ok(Some((entry, report)))
}

/// The most an action entry may be: heddle's are a few KiB (the expanded key dominates).
pub(crate) const MAX_ENTRY_BYTES: u64 = 16 * 1024 * 1024;

/// Action `key`'s entry on the remote and who signed it: parsed, checked to be `key`'s, signed
/// by a writer `rules` trust and (when `declared` is given) naming exactly the outputs the
/// action declares; `Ok(None)` when the remote has none. Reads the entry alone (`heddle plan`
/// needs no blob). The signature is checked before anything the entry names is looked at.
pub async fn read_entry(
    remote: &dyn RemoteBackend,
    key: Digest,
    rules: &ReadRules,
    declared: Option<&BTreeSet<String>>,
) -> Result<Option<(ActionEntry, Writer)>, RemoteError> {
    let bytes = bounded(
        remote,
        "read",
        || format!("action entry {key}"),
        remote.get_action(key),
    )
    .await?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let bad = |reason: String| RemoteError::BadEntry {
        key,
        remote: remote.name().to_string(),
        reason,
    };
    // A backend bounds what it reads by MAX_ENTRY_BYTES; this holds for any other.
    if bytes.len() as u64 > MAX_ENTRY_BYTES {
        return Err(bad(format!("it is over {MAX_ENTRY_BYTES} bytes")));
    }
    let entry: ActionEntry = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if entry.key != key {
        return Err(bad(format!("it is the entry of action {}", entry.key)));
    }
    let signature = serde_json::from_slice::<Signed>(&bytes)
        .map_err(|e| bad(format!("its signature does not parse: {e}")))?
        .signature;
    let writer = rules
        .writers
        .check(&entry, signature.as_ref())
        .map_err(|reason| RemoteError::Untrusted {
            key,
            remote: remote.name().to_string(),
            reason: Box::new(reason),
        })?;
    if let Some(declared) = declared {
        if !entry.outputs.keys().eq(declared.iter()) {
            return Err(bad(outputs_differ(&entry, declared)));
        }
    }
    Ok(Some((entry, writer)))
}

/// The signature field of an entry on the remote (`signing.rs`); every other field is the
/// [`ActionEntry`]'s.
#[derive(serde::Deserialize)]
struct Signed {
    #[serde(default)]
    signature: Option<EntrySignature>,
}

/// Why an entry's outputs are not the action's: the first few names either way (an entry may
/// name 20,000, and the message must stay a line).
fn outputs_differ(entry: &ActionEntry, declared: &BTreeSet<String>) -> String {
    let some = |names: Vec<&String>| {
        let shown: Vec<String> = names.iter().take(3).map(|n| format!("{n:?}")).collect();
        match names.len() {
            n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
            _ => shown.join(", "),
        }
    };
    let extra: Vec<&String> = entry
        .outputs
        .keys()
        .filter(|n| !declared.contains(*n))
        .collect();
    let missing: Vec<&String> = declared
        .iter()
        .filter(|n| !entry.outputs.contains_key(*n))
        .collect();
    match (extra.is_empty(), missing.is_empty()) {
        (false, _) => format!(
            "it names {} outputs the action does not declare ({}); nothing was downloaded",
            extra.len(),
            some(extra)
        ),
        _ => format!(
            "it lacks outputs the action declares ({}); nothing was downloaded",
            some(missing)
        ),
    }
}

/// One action's fetch in progress.
struct Fetch<'a> {
    remote: &'a dyn RemoteBackend,
    local: &'a Arc<Store>,
    key: Digest,
    report: FetchReport,
}

impl Fetch<'_> {
    fn bad(&self, reason: String) -> RemoteError {
        RemoteError::BadEntry {
            key: self.key,
            remote: self.remote.name().to_string(),
            reason,
        }
    }

    /// The blobs to have, each once, after checking what the entry and its manifests list: one
    /// size per blob, a total within the rules, and sizes that match the local copies there
    /// are (a wrong size is the entry's fault: the local blob is kept, the entry refused).
    fn check_totals(
        &mut self,
        listed: &[(Digest, u64)],
        rules: &ReadRules,
    ) -> Result<Vec<(Digest, u64)>, RemoteError> {
        let total = listed
            .iter()
            .try_fold(0u64, |sum, (_, size)| sum.checked_add(*size));
        match total {
            Some(t) if t <= rules.max_bytes => {}
            _ => {
                return Err(self.bad(format!(
                    "its outputs add up to {} bytes, over the limit of {} an entry may expand to; none of its files was downloaded",
                    total.map_or_else(|| "more than 2^64".to_string(), |t| t.to_string()),
                    rules.max_bytes
                )))
            }
        }
        let mut sizes: HashMap<Digest, u64> = HashMap::new();
        let mut unique = Vec::new();
        for &(digest, size) in listed {
            match sizes.insert(digest, size) {
                None => unique.push((digest, size)),
                Some(other) if other != size => {
                    return Err(self.bad(format!(
                        "it gives blob {digest} both {other} and {size} bytes"
                    )))
                }
                Some(_) => {}
            }
        }
        for &(digest, size) in &unique {
            let path = self.local.blob_path(&digest);
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                if meta.is_file() && meta.len() != size {
                    return Err(self.bad(format!(
                        "it gives blob {digest} {size} bytes; the local store's has {} (kept)",
                        meta.len()
                    )));
                }
            }
        }
        Ok(unique)
    }

    /// Fetch a file blob unless the local store has it, reading at most `size` bytes (what
    /// the entry says); fewer is a lie too, and the entry is refused.
    async fn file(&mut self, digest: Digest, size: u64) -> Result<(), RemoteError> {
        if self.local.has_blob(&digest) {
            self.report.blobs_present += 1;
            return Ok(());
        }
        let Some(body) = open_blob(self.remote, digest, Some(size)).await? else {
            return Err(self.missing(digest));
        };
        let body = self.bounded(body, digest, size);
        let got = import_stream(self.remote, self.local, digest, body, size).await?;
        if got != size {
            return Err(self.bad(format!("it gives blob {digest} {size} bytes; it has {got}")));
        }
        self.report.blobs_fetched += 1;
        self.report.bytes_fetched += got;
        Ok(())
    }

    fn bounded(&self, body: BlobStream, digest: Digest, limit: u64) -> BoundedBody {
        BoundedBody::new(
            body,
            format!("blob {digest}"),
            self.remote.name(),
            self.remote.timeouts(),
            limit,
        )
    }

    /// A tree manifest's entries, from the local store or else from the remote. A fetched
    /// manifest is verified by hash and validated (plain relative paths, nothing beneath a
    /// symlink, no symlink out of the tree) before it is stored or anything it lists fetched.
    async fn manifest(&mut self, digest: Digest) -> Result<Vec<TreeEntry>, RemoteError> {
        if self.local.has_blob(&digest) {
            self.report.blobs_present += 1;
            let path = self.local.blob_path(&digest);
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(RemoteError::local_io("read", &path))?;
            return Ok(decode_tree(digest, &bytes)?);
        }
        let bytes = self.manifest_bytes(digest).await?;
        let entries = decode_tree(digest, &bytes).map_err(|e| RemoteError::BadTree {
            key: self.key,
            digest,
            remote: self.remote.name().to_string(),
            source: e,
        })?;
        let size = bytes.len() as u64;
        let stream: BlobStream = Box::pin(futures_util::stream::iter([Ok(Bytes::from(bytes))]));
        let body = self.bounded(stream, digest, size);
        import_stream(self.remote, self.local, digest, body, size).await?;
        self.report.blobs_fetched += 1;
        self.report.bytes_fetched += size;
        Ok(entries)
    }

    /// A manifest's bytes, in memory (at most [`MAX_MANIFEST_BYTES`]), verified by hash.
    async fn manifest_bytes(&self, digest: Digest) -> Result<Vec<u8>, RemoteError> {
        let Some(body) = open_blob(self.remote, digest, None).await? else {
            return Err(self.missing(digest));
        };
        let bytes = self
            .bounded(body, digest, MAX_MANIFEST_BYTES)
            .collect()
            .await?;
        let actual = Digest::of_bytes(&bytes);
        if actual != digest {
            return Err(corrupt(self.remote, digest, actual, bytes.len() as u64));
        }
        Ok(bytes)
    }

    fn missing(&self, digest: Digest) -> RemoteError {
        RemoteError::MissingBlob {
            key: self.key,
            digest,
            remote: self.remote.name().to_string(),
        }
    }
}

/// Stream `body` into the local store as blob `digest`, hashed once on the way
/// ([`Store::import_verified_blob`]); the bytes become the blob only if they hash to `digest`.
/// The download, the write and the hash overlap: a blocking thread writes each batch of
/// [`WRITE_BATCH`] bytes while the next one arrives, with at most [`BATCHES_IN_FLIGHT`]
/// batches between them (memory stays flat), and the import hashes a large blob on a thread
/// of its own. Done one after the other, the hash and the write halved the throughput of a
/// large hit.
///
/// A blob the entry says is at most [`WRITE_BATCH`] bytes (`size`; the body is cut off past
/// it) is gathered in memory instead and imported in one blocking call: one hand-off to the
/// blocking pool where the streaming path takes three, which is most of what a remote no-op of
/// small outputs spends besides the requests (benches/RESULTS.md, issue 28 item 4).
async fn import_stream(
    remote: &dyn RemoteBackend,
    local: &Arc<Store>,
    digest: Digest,
    mut body: BoundedBody,
    size: u64,
) -> Result<u64, RemoteError> {
    if size <= WRITE_BATCH as u64 {
        let mut chunks: Vec<Bytes> = Vec::new();
        while let Some(chunk) = body.next().await? {
            chunks.push(chunk);
        }
        let store = local.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut import = store.start_blob_import(digest)?;
            import.write_batch(chunks)?;
            store.import_verified_blob(import)
        })
        .await??;
        return stored_size(remote, digest, outcome);
    }
    let import = local.start_blob_import(digest)?;
    let (batches, mut arriving) = tokio::sync::mpsc::channel::<Vec<Bytes>>(BATCHES_IN_FLIGHT);
    let writer = tokio::task::spawn_blocking(move || {
        let mut import = import;
        while let Some(batch) = arriving.blocking_recv() {
            import.write_batch(batch)?;
        }
        Ok::<_, heddle_cache::CacheError>(import)
    });
    let downloaded = async {
        let mut batch: Vec<Bytes> = Vec::new();
        let mut batched = 0usize;
        while let Some(chunk) = body.next().await? {
            batched += chunk.len();
            batch.push(chunk);
            if batched >= WRITE_BATCH {
                batched = 0;
                if batches.send(std::mem::take(&mut batch)).await.is_err() {
                    // The writer stopped on an error, which its result carries.
                    return Ok(());
                }
            }
        }
        let _ = batches.send(batch).await;
        Ok::<_, RemoteError>(())
    }
    .await;
    drop(batches);
    // The writer's error (a full disk) explains a stopped download better than the download's.
    let import = writer.await??;
    downloaded?;
    let store = local.clone();
    let outcome = tokio::task::spawn_blocking(move || store.import_verified_blob(import)).await??;
    stored_size(remote, digest, outcome)
}

/// The size of an import that became blob `digest`, or the corruption it was.
fn stored_size(
    remote: &dyn RemoteBackend,
    digest: Digest,
    outcome: ImportOutcome,
) -> Result<u64, RemoteError> {
    match outcome {
        ImportOutcome::Stored { size } => Ok(size),
        ImportOutcome::Mismatch { actual, size } => Err(corrupt(remote, digest, actual, size)),
    }
}

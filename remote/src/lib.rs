//! heddle-remote: a cache shared by a team, on storage the team already runs. Like
//! heddle-cache it knows bytes and keys only: blobs by sha256 (file contents and tree
//! manifests, the same objects as the local store) and action entries by action key (the
//! local store's `ActionEntry` JSON). Nothing of pipelines or stages.
//!
//! # Use
//!
//! ```text
//! let settings = resolve_remote(project_root, &env, flag_url, flag_mode)?;   // config.rs
//! let remote = RemoteCache::open(&settings, &env, Timeouts::default())?     // no request yet
//!     .with_rules(ReadRules { writers: TrustedWriters::load(&trust_files(..))?, ..Default::default() })
//!     .with_signer(Arc::new(SigningKey::load(&key_file)?));                  // to write
//! // local miss (store: Arc<Store>; declared: the action's output names):
//! match remote.fetch_action(key, &store, Some(&declared)).await {
//!     Ok(Some((entry, report))) => hit (report.signer: who wrote it), Ok(None) => miss,
//!     Err(e) => warn once, run locally }
//! // after a local record_action (a no-op in read mode):
//! remote.push_action(key, &store).await
//! ```
//!
//! # Guarantees
//!
//! - A blob is hashed once, while it streams into the local store's `tmp/`
//!   (`Store::import_verified_blob`); bytes that do not hash to the digest asked for are
//!   deleted and reported as [`RemoteError::CorruptBlob`], never made a blob. A tree manifest
//!   from the remote is validated like any untrusted manifest before anything it lists is
//!   fetched ([`RemoteError::BadTree`]). An entry is recorded locally only after every blob it
//!   names is there.
//! - Write-back order: [`push_action`] uploads the blobs (a tree's files before its manifest)
//!   and the entry last, so no reader sees an entry naming a missing blob. A local blob that no
//!   longer hashes to its name aborts its upload.
//! - Nothing a remote declares is taken on faith (`bounded.rs`, `download.rs`): every body is
//!   cut off at the size it may have as its bytes arrive, and must arrive no slower than a
//!   floor throughput; an entry naming outputs its action does not declare, or more bytes than
//!   [`ReadRules::max_bytes`], is refused before any blob is fetched; a blob is fetched once
//!   however often an entry lists it; a size that disagrees with the local copy of a blob
//!   refuses the entry and keeps the blob.
//! - Every call is bounded ([`Timeouts`]: per request, and per chunk of a blob body), and
//!   transient failures (5xx, reset connections, timeouts) are retried a bounded number of
//!   times with jittered backoff, so a remote that is down or stalls yields a typed error in
//!   bounded time ([`Timeouts::request_budget`]); the caller warns once and works locally
//!   ([`RemoteError::is_unavailable`]).
//! - Concurrent writers of one key are safe: blobs are content-addressed (same name, same
//!   bytes; every backend makes a write visible whole or not at all), and an action entry is
//!   last-writer-wins between writers of the same action.
//! - Memory stays flat in blob size: blobs move in 1–8 MiB chunks, S3 uploads are multipart
//!   (8 MiB parts, 2 in flight), S3 downloads one streamed GET, and WebDAV
//!   uploads one streamed PUT to a temp name then a MOVE (webdav_upload.rs; OpenDAL's own
//!   WebDAV writer would buffer the whole blob).
//!
//! - Entries are signed by their writer's ed25519 key and read only when a writer the reader
//!   trusts signed them (`signing.rs`, `trust.rs`): anything else is [`RemoteError::Untrusted`],
//!   a miss, before anything the entry names is fetched.
//!
//! # Why OpenDAL rather than object_store
//!
//! Both are maintained Apache projects. OpenDAL serves S3 *and* WebDAV and a plain directory
//! through one `Operator` (object_store has no WebDAV service; its HTTP store speaks a subset of
//! WebDAV but expects PROPFIND semantics nginx does not offer), streams reads and multipart
//! writes through the same `Reader`/`Writer` API for every service, and has a timeout layer
//! for per-operation and per-IO deadlines. sccache, whose job (a shared compile cache on
//! S3/WebDAV/GCS/...) is the closest to this one, moved to OpenDAL for these reasons.
//! object_store's strengths (the `ObjectStore` trait used by DataFusion, conditional puts) are
//! not needed here: content addressing makes every write idempotent.
//!
//! # REAPI
//!
//! `grpc://host:port[/instance]` is a Remote Execution API server's ContentAddressableStorage,
//! ActionCache and ByteStream over gRPC (`reapi/`: tonic, with the published protos vendored
//! under `vendor/proto/`). The mapping of blobs and entries onto them is in `reapi/mod.rs` and
//! `reapi/action.rs`; the guarantees above hold for it too.

// Errors carry the failing URL, key and backend cause; they travel a cold path (a remote
// call already failed), so their size does not matter and boxing would only add noise.
#![allow(clippy::result_large_err)]

mod backend;
mod bounded;
mod config;
mod crypto;
mod download;
mod error;
mod http_client;
mod opendal_backend;
mod range_guard;
mod reapi;
mod remote_cache;
mod signing;
mod tls_files;
mod trust;
mod upload;
mod url;
mod webdav_upload;

use std::sync::Arc;

pub use backend::{
    BlobStream, Endpoint, EntryBlobs, RemoteBackend, RemoteFuture, Timeouts, MIN_RATE,
    RETRY_MAX_DELAY, RETRY_MIN_DELAY,
};
pub use config::{
    resolve_remote, resolve_remote_trusting, ConfigError, RemoteMode, RemoteSettings, S3Settings,
    SettingSource,
};
pub use download::{
    fetch_action, fetch_blob, read_entry, FetchReport, ReadRules, MAX_ENTRY_EXPANSION,
};
pub use error::RemoteError;
pub use opendal_backend::OpendalCache;
pub use reapi::{
    ReapiCache, ReapiHeaders, ReapiOptions, BATCH_MAX as REAPI_BATCH_MAX,
    HEADERS_VAR as REAPI_HEADERS_VAR,
};
pub use remote_cache::{PushOutcome, RemoteCache};
pub use signing::{
    signed_bytes, signed_entry_json, signing_key_path, user_config_dir, BadSignature,
    EntrySignature, KeyError, SigningKey, WriterKey, WriterKeyError, SIGNATURE_SCHEME,
    SIGNING_KEY_VAR,
};
pub use tls_files::{ClientCertFiles, TlsFiles, CA_FILE_VAR, CLIENT_CERT_VAR, CLIENT_KEY_VAR};
pub use trust::{trust_files, TrustFileError, TrustedWriters, Untrusted, Writer, TRUST_FILE};
pub use upload::{push_action, upload_blob, PushReport};
pub use url::RemoteUrl;

/// The backend for resolved settings. Makes no request: a remote that is down shows up as an
/// error on the first call. Most callers want [`RemoteCache::open`].
pub fn open_backend(
    settings: &RemoteSettings,
    env: &dyn Fn(&str) -> Option<String>,
    timeouts: Timeouts,
) -> Result<Arc<dyn RemoteBackend>, RemoteError> {
    crypto::install();
    if let RemoteUrl::Grpc {
        authority,
        instance,
        tls,
    } = &settings.url
    {
        let name = settings.url.to_string();
        let options = ReapiOptions::from_env(*tls, env, &name)?;
        return Ok(Arc::new(ReapiCache::open(
            authority, instance, options, name, timeouts,
        )?));
    }
    // The TLS files (a CA, a client certificate) are read by the backend: a client
    // certificate for a remote that is not https is refused there.
    Ok(Arc::new(OpendalCache::open(
        &settings.url,
        &settings.s3,
        env,
        timeouts,
    )?))
}

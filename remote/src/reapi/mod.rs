//! [`ReapiCache`]: the Remote Execution API backend: a ContentAddressableStorage, ActionCache
//! and ByteStream server over gRPC (BuildGrid, Buildbarn, bazel-remote, BuildBuddy,
//! NativeLink, ...), at `grpc://host:port[/instance_name]`.
//!
//! Mapping (see action.rs for the ActionCache side):
//!
//! - heddle blob → CAS blob, REAPI digest = (sha256 hex, size). Presence is asked with
//!   `FindMissingBlobs`; blobs up to [`BATCH_MAX`] move in one `BatchUpdateBlobs` /
//!   `BatchReadBlobs` call, larger ones stream over ByteStream `Write` / `Read`
//!   (`{instance}/uploads/{uuid}/blobs/{hash}/{size}`, `{instance}/blobs/{hash}/{size}`).
//! - heddle action entry → an ActionResult under a synthetic Action digest derived from the
//!   heddle key, pointing at the entry JSON as a CAS blob and listing every blob it needs.
//!
//! Verification is the crate's, as for every backend: `download.rs` hashes each blob as it
//! streams into the local store. The entry JSON is a CAS blob here, so this backend checks
//! its sha256 too before handing it over ([`RemoteError::CorruptBlob`] otherwise).
//!
//! Every call has the request timeout (also sent to the server as `grpc-timeout`) and bounded
//! retries of `UNAVAILABLE` and friends (call.rs); blob bodies have the idle timeout per chunk.
//! A server that is down answers `UNAVAILABLE` at once, which [`RemoteError::is_unavailable`]
//! recognises, so the run degrades to local work as with the other backends.
//!
//! `grpc://` is plain HTTP/2; `grpcs://` is TLS (rustls), trusting the system's roots and a
//! team's CA file, and showing a client certificate when the server asks for one (the files
//! are read by `tls_files.rs`, as for S3 and WebDAV over https); every call can carry headers
//! such as a bearer token or an API key ([`connect`]).

mod action;
mod batch;
mod bytestream;
mod call;
mod connect;
mod names;
mod proto;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use heddle_cache::Digest;
use tonic::{Code, Status};

use self::action::{action_key, action_result, stored_entry, ENTRY_PATH};
use self::batch::ReadBatches;
use self::bytestream::Target;
use self::call::CallSite;
use self::connect::Transport;
use self::names::reapi_digest;
use self::proto::build::bazel::remote::execution::v2 as re;
use self::proto::build::bazel::remote::execution::v2::action_cache_client::ActionCacheClient;
use self::proto::build::bazel::remote::execution::v2::content_addressable_storage_client::ContentAddressableStorageClient;
use crate::backend::{BlobStream, Endpoint, EntryBlobs, RemoteBackend, RemoteFuture, Timeouts};
use crate::bounded::BoundedBody;
use crate::download::MAX_ENTRY_BYTES;
use crate::RemoteError;

pub(crate) use self::call::is_unavailable_code;
pub use self::connect::{ReapiHeaders, ReapiOptions, HEADERS_VAR};

/// Blobs up to this size go in one batch call; larger ones stream over ByteStream. Well under
/// gRPC's default 4 MiB message limit, which servers apply to batch requests too.
pub const BATCH_MAX: u64 = 1024 * 1024;
/// `GetActionResult` and `BatchReadBlobs` calls in flight at once, whatever the caller's
/// concurrency: a server answers more calls at a time only up to its worker pool, then refuses
/// with `RESOURCE_EXHAUSTED` (BuildGrid's default pool is 5 per core, at least 5), and a refusal
/// that outlasts the retries turns the remote off for the run. Batching keeps the calls few.
const CALLS_IN_FLIGHT: usize = 8;
/// Tree-manifest sizes remembered from ActionResults (see [`ReapiCache::sizes`]); cleared past
/// this many so a long run's memory stays bounded.
const MAX_REMEMBERED_SIZES: usize = 100_000;

pub struct ReapiCache {
    channel: Transport,
    instance: String,
    endpoint: Endpoint,
    /// Blob sizes learned from the ActionResults this backend read. REAPI cannot read a blob
    /// by hash alone, and heddle's entry does not record a tree manifest's size; the
    /// ActionResult does, and `fetch_action` reads a manifest right after its entry.
    sizes: Mutex<HashMap<Digest, u64>>,
    /// Small-blob reads of concurrent fetches, coalesced into few `BatchReadBlobs` calls.
    reads: Arc<ReadBatches>,
    /// One permit per read call in flight ([`CALLS_IN_FLIGHT`]), shared with `reads`.
    calls: Arc<tokio::sync::Semaphore>,
}

impl ReapiCache {
    /// Connect lazily (no request is made here) to the REAPI server at `authority`
    /// (`host:port`), instance `instance` (may be empty), over TLS and with the headers
    /// `options` asks for.
    pub fn open(
        authority: &str,
        instance: &str,
        options: ReapiOptions,
        name: String,
        timeouts: Timeouts,
    ) -> Result<ReapiCache, RemoteError> {
        crate::crypto::install();
        let channel = connect::transport(authority, options, &name, timeouts)?;
        let calls = Arc::new(tokio::sync::Semaphore::new(CALLS_IN_FLIGHT));
        let reads = ReadBatches::new(
            channel.clone(),
            instance.to_string(),
            name.clone(),
            timeouts,
            calls.clone(),
        );
        Ok(ReapiCache {
            channel,
            instance: instance.to_string(),
            endpoint: Endpoint { name, timeouts },
            sizes: Mutex::default(),
            reads: Arc::new(reads),
            calls,
        })
    }

    fn site<'a>(&'a self, op: &'static str, object: &'a str) -> CallSite<'a> {
        CallSite {
            op,
            object,
            remote: &self.endpoint.name,
            timeouts: self.endpoint.timeouts,
        }
    }

    fn target(&self) -> Target<'_> {
        Target {
            channel: &self.channel,
            instance: &self.instance,
            remote: &self.endpoint.name,
            timeouts: self.endpoint.timeouts,
        }
    }

    fn cas(&self) -> ContentAddressableStorageClient<Transport> {
        ContentAddressableStorageClient::new(self.channel.clone())
    }

    fn ac(&self) -> ActionCacheClient<Transport> {
        ActionCacheClient::new(self.channel.clone())
    }

    /// Upload small blobs in one `BatchUpdateBlobs` call; any blob the server refuses fails it.
    async fn batch_update(
        &self,
        object: &str,
        blobs: Vec<(re::Digest, Bytes)>,
    ) -> Result<(), RemoteError> {
        let site = self.site("write", object);
        let message = re::BatchUpdateBlobsRequest {
            instance_name: self.instance.clone(),
            requests: blobs
                .into_iter()
                .map(|(digest, data)| re::batch_update_blobs_request::Request {
                    digest: Some(digest),
                    data,
                    ..Default::default()
                })
                .collect(),
            digest_function: re::digest_function::Value::Sha256 as i32,
        };
        let answer = site
            .unary(self.cas(), message, |mut cas, r| async move {
                cas.batch_update_blobs(r).await
            })
            .await?;
        for r in answer.responses {
            if let Some(status) = r.status.filter(|s| s.code != Code::Ok as i32) {
                return Err(site.error(Status::new(status.code.into(), status.message)));
            }
        }
        Ok(())
    }

    /// A small blob's bytes in one `BatchReadBlobs` call; `None` when the server lacks it.
    async fn batch_read(&self, digest: Digest, size: u64) -> Result<Option<Bytes>, RemoteError> {
        let object = format!("blob {digest}");
        let site = self.site("read", &object);
        let message = re::BatchReadBlobsRequest {
            instance_name: self.instance.clone(),
            digests: vec![reapi_digest(digest, size)],
            acceptable_compressors: Vec::new(),
            digest_function: re::digest_function::Value::Sha256 as i32,
        };
        let answer = site
            .unary(self.cas(), message, |mut cas, r| async move {
                cas.batch_read_blobs(r).await
            })
            .await?;
        let Some(r) = answer.responses.into_iter().next() else {
            return Err(site.error(Status::internal("the server answered for no blob")));
        };
        match r.status.map(|s| (Code::from(s.code), s.message)) {
            None | Some((Code::Ok, _)) => Ok(Some(r.data)),
            Some((Code::NotFound, _)) => Ok(None),
            Some((code, message)) => Err(site.error(Status::new(code, message))),
        }
    }

    /// Blob `digest`'s bytes, collected (for the entry JSON, bounded by the caller).
    async fn read_all(&self, digest: Digest, size: u64) -> Result<Option<Bytes>, RemoteError> {
        if size <= BATCH_MAX {
            return self.batch_read(digest, size).await;
        }
        let Some(body) = bytestream::read(&self.target(), digest, size).await? else {
            return Ok(None);
        };
        // Cut off past the size the ActionResult gives (at most MAX_ENTRY_BYTES): what
        // arrives is what is bounded.
        let (name, timeouts) = (&self.endpoint.name, self.endpoint.timeouts);
        let all = BoundedBody::new(body, format!("blob {digest}"), name, timeouts, size)
            .collect()
            .await?;
        Ok(Some(Bytes::from(all)))
    }

    fn remember_sizes(&self, blobs: &[(Digest, u64)]) {
        let mut sizes = self.sizes.lock().expect("sizes");
        if sizes.len() + blobs.len() > MAX_REMEMBERED_SIZES {
            sizes.clear();
        }
        sizes.extend(blobs.iter().copied());
    }
}

impl RemoteBackend for ReapiCache {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn has_blob(&self, digest: Digest, size: u64) -> RemoteFuture<'_, bool> {
        async move {
            let object = format!("blob {digest}");
            let message = re::FindMissingBlobsRequest {
                instance_name: self.instance.clone(),
                blob_digests: vec![reapi_digest(digest, size)],
                digest_function: re::digest_function::Value::Sha256 as i32,
            };
            let answer = self
                .site("check", &object)
                .unary(self.cas(), message, |mut cas, r| async move {
                    cas.find_missing_blobs(r).await
                })
                .await?;
            Ok(answer.missing_blob_digests.is_empty())
        }
        .boxed()
    }

    fn read_blob(&self, digest: Digest, size: Option<u64>) -> RemoteFuture<'_, Option<BlobStream>> {
        async move {
            let known = size.or_else(|| self.sizes.lock().expect("sizes").get(&digest).copied());
            // REAPI reads a blob by hash and size; without the size there is nothing to ask.
            let Some(size) = known else { return Ok(None) };
            if size > BATCH_MAX {
                return bytestream::read(&self.target(), digest, size).await;
            }
            Ok(self
                .reads
                .read(digest, size)
                .await?
                .map(|data| futures_util::stream::iter([Ok(data)]).boxed()))
        }
        .boxed()
    }

    fn write_blob(&self, digest: Digest, size: u64, mut data: BlobStream) -> RemoteFuture<'_, ()> {
        async move {
            if size > BATCH_MAX {
                return bytestream::write(&self.target(), digest, size, data).await;
            }
            // Collected to the end first: a stream that ends in an error (the local file no
            // longer hashes to `digest`) sends nothing.
            let mut all = Vec::with_capacity(size as usize);
            while let Some(chunk) = data.next().await {
                all.extend_from_slice(&chunk?);
            }
            let object = format!("blob {digest}");
            self.batch_update(
                &object,
                vec![(reapi_digest(digest, size), Bytes::from(all))],
            )
            .await
        }
        .boxed()
    }

    fn get_action(&self, key: Digest) -> RemoteFuture<'_, Option<Vec<u8>>> {
        async move {
            let object = format!("action entry {key}");
            let site = self.site("read", &object);
            let message = re::GetActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action_key(key).digest),
                inline_stdout: false,
                inline_stderr: false,
                inline_output_files: vec![ENTRY_PATH.to_string()],
                digest_function: re::digest_function::Value::Sha256 as i32,
            };
            let call = self.calls.acquire().await.expect("never closed");
            let answer = site
                .unary(self.ac(), message, |mut ac, r| async move {
                    ac.get_action_result(r).await
                })
                .await;
            drop(call);
            let result = match answer {
                Ok(result) => result,
                Err(RemoteError::Grpc { source, .. }) if source.code() == Code::NotFound => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            };
            let bad = |reason: String| RemoteError::BadEntry {
                key,
                remote: self.endpoint.name.clone(),
                reason,
            };
            let stored = stored_entry(result).map_err(|e| bad(e.to_string()))?;
            let (digest, size) = stored.entry;
            if size > MAX_ENTRY_BYTES {
                return Err(bad(format!(
                    "{size} bytes is too large for an action entry"
                )));
            }
            self.remember_sizes(&stored.blobs);
            let bytes = if stored.inline.len() as u64 == size {
                stored.inline
            } else {
                // The entry blob is gone (evicted since the ActionResult was written): a miss.
                let Some(bytes) = self.read_all(digest, size).await? else {
                    return Ok(None);
                };
                bytes
            };
            let actual = Digest::of_bytes(&bytes);
            if actual != digest || bytes.len() as u64 != size {
                return Err(RemoteError::CorruptBlob {
                    digest,
                    actual,
                    size: bytes.len() as u64,
                    remote: self.endpoint.name.clone(),
                });
            }
            Ok(Some(bytes.to_vec()))
        }
        .boxed()
    }

    fn put_action(&self, key: Digest, bytes: Vec<u8>, blobs: EntryBlobs) -> RemoteFuture<'_, ()> {
        async move {
            let object = format!("action entry {key}");
            let (entry_hash, entry_size) = (Digest::of_bytes(&bytes), bytes.len() as u64);
            let entry = reapi_digest(entry_hash, entry_size);
            let action = action_key(key);
            // The entry blob (with the Action and Command behind the AC key) before the
            // ActionResult that names it.
            let mut small = action.blobs.to_vec();
            if entry_size <= BATCH_MAX {
                small.push((entry.clone(), Bytes::from(bytes)));
            } else {
                let data = futures_util::stream::iter([Ok(Bytes::from(bytes))]).boxed();
                bytestream::write(&self.target(), entry_hash, entry_size, data).await?;
            }
            self.batch_update(&object, small).await?;
            let message = re::UpdateActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action.digest),
                action_result: Some(action_result(entry, &blobs)),
                results_cache_policy: None,
                digest_function: re::digest_function::Value::Sha256 as i32,
            };
            self.site("write", &object)
                .unary(self.ac(), message, |mut ac, r| async move {
                    ac.update_action_result(r).await
                })
                .await?;
            Ok(())
        }
        .boxed()
    }
}
